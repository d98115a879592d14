//! The process's timer thread: what a sleep of the default [`super::Clock::sleep_until`]
//! waits on, so that no async runtime is needed.
//!
//! One thread, started at the first sleep, keeps the sleeps in deadline order and wakes each
//! one's [`Waker`] when its deadline passes. A sleep dropped early leaves its entry until the
//! deadline, without a waker.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::Sleep;

/// What a sleep and the timer thread share.
#[derive(Debug, Default)]
struct Slot {
    fired: bool,
    waker: Option<Waker>,
}

/// One sleep waiting in the queue.
#[derive(Debug)]
struct Entry {
    due: Instant,
    seq: u64,
    slot: Arc<Mutex<Slot>>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// The earliest deadline is the greatest, so that the heap's top is the next to fire.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Debug, Default)]
struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

#[derive(Debug, Default)]
struct Timer {
    queue: Mutex<Queue>,
    changed: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[allow(clippy::disallowed_methods)] // the timer reads the operating system's clock itself
fn now() -> Instant {
    Instant::now()
}

/// The timer, its thread started on first use.
fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    static STARTED: OnceLock<()> = OnceLock::new();
    let timer = TIMER.get_or_init(Timer::default);
    STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("dynalimit-timer".into())
            .spawn(move || run(timer))
            .expect("the operating system starts the timer thread");
    });
    timer
}

/// The timer thread: fires every entry whose deadline passed, then waits for the next
/// deadline or a new entry.
fn run(timer: &'static Timer) {
    let mut queue = lock(&timer.queue);
    loop {
        let at = now();
        while queue.heap.peek().is_some_and(|e| e.due <= at) {
            if let Some(entry) = queue.heap.pop() {
                let waker = {
                    let mut slot = lock(&entry.slot);
                    slot.fired = true;
                    slot.waker.take()
                };
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
        }
        queue = match queue
            .heap
            .peek()
            .map(|e| e.due.saturating_duration_since(at))
        {
            Some(left) => {
                timer
                    .changed
                    .wait_timeout(queue, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => timer
                .changed
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// A sleep of `left` from now.
pub(super) fn sleep(left: Duration) -> Sleep {
    if left.is_zero() {
        return Box::pin(std::future::ready(()));
    }
    Box::pin(TimerSleep {
        due: now() + left,
        slot: None,
    })
}

#[derive(Debug)]
struct TimerSleep {
    due: Instant,
    /// Set once the sleep is in the timer's queue.
    slot: Option<Arc<Mutex<Slot>>>,
}

impl Future for TimerSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if now() >= self.due {
            return Poll::Ready(());
        }
        if let Some(slot) = &self.slot {
            let mut slot = lock(slot);
            if slot.fired {
                return Poll::Ready(());
            }
            slot.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let slot = Arc::new(Mutex::new(Slot {
            fired: false,
            waker: Some(cx.waker().clone()),
        }));
        self.slot = Some(Arc::clone(&slot));
        let timer = timer();
        let mut queue = lock(&timer.queue);
        queue.seq += 1;
        let seq = queue.seq;
        queue.heap.push(Entry {
            due: self.due,
            seq,
            slot,
        });
        drop(queue);
        timer.changed.notify_one();
        Poll::Pending
    }
}

impl Drop for TimerSleep {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            lock(slot).waker = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_ends_on_the_timer_thread_and_never_before_its_deadline() {
        let sleepers: Vec<_> = [30u64, 10, 20, 0]
            .into_iter()
            .map(|ms| {
                std::thread::spawn(move || {
                    let started = now();
                    block_on(sleep(Duration::from_millis(ms)));
                    (ms, now().saturating_duration_since(started))
                })
            })
            .collect();
        for sleeper in sleepers {
            let (ms, slept) = sleeper.join().unwrap();
            assert!(
                slept >= Duration::from_millis(ms),
                "{ms} ms ended after {slept:?}"
            );
        }
    }

    #[test]
    fn an_entry_with_the_earlier_deadline_is_the_heap_s_top() {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let at = now();
        let mut heap = BinaryHeap::new();
        for (ms, seq) in [(30, 1), (10, 2), (20, 3), (10, 4)] {
            heap.push(Entry {
                due: at + Duration::from_millis(ms),
                seq,
                slot: Arc::clone(&slot),
            });
        }
        let seqs: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|e| e.seq)).collect();
        assert_eq!(seqs, [2, 4, 3, 1]);
    }

    /// Polls `f` on this thread, parking between polls.
    fn block_on(mut f: Sleep) {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        while f.as_mut().poll(&mut cx).is_pending() {
            std::thread::park();
        }
    }
}
