//! The FIFO queue of waiting acquirers of one LimitSet.
//!
//! Only the head of the queue tries to acquire; the others sleep until they become the head.
//! The head sleeps until the instant its limits compute (or until a release wakes it), so a
//! large request is never starved by a stream of small ones and nobody polls.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, Thread};

use tokio::sync::Notify;

/// One waiting acquirer: a parked thread or an async task.
#[derive(Debug)]
pub(crate) struct Waiter {
    woken: AtomicBool,
    thread: Option<Thread>,
    notify: Notify,
}

impl Waiter {
    fn new(thread: Option<Thread>) -> Arc<Waiter> {
        Arc::new(Waiter {
            woken: AtomicBool::new(false),
            thread,
            notify: Notify::new(),
        })
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        match &self.thread {
            Some(thread) => thread.unpark(),
            None => self.notify.notify_one(),
        }
    }

    /// Whether the waiter was woken since the last call (clears the flag).
    pub(crate) fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }

    /// Completes when the waiter is woken (a wake before the call is not lost).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }
}

#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    len: AtomicUsize,
    waiters: Mutex<VecDeque<Arc<Waiter>>>,
}

impl WaitQueue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Waiter>>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anybody waits (a cheap read for the hot path).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Wakes the head, if any (after a release, or when the head left).
    #[inline]
    pub(crate) fn wake_head(&self) {
        if !self.is_empty() {
            self.wake_waiting_head();
        }
    }

    #[cold]
    fn wake_waiting_head(&self) {
        if let Some(head) = self.lock().front() {
            head.wake();
        }
    }

    /// Joins the queue as a blocking (thread) waiter.
    pub(crate) fn join_blocking(&self) -> Slot<'_> {
        self.join(Waiter::new(Some(thread::current())))
    }

    /// Joins the queue as an async waiter.
    pub(crate) fn join_async(&self) -> Slot<'_> {
        self.join(Waiter::new(None))
    }

    fn join(&self, waiter: Arc<Waiter>) -> Slot<'_> {
        let mut waiters = self.lock();
        waiters.push_back(Arc::clone(&waiter));
        self.len.store(waiters.len(), Ordering::Release);
        Slot {
            queue: self,
            waiter,
        }
    }
}

/// A place in the queue; leaving (drop) wakes the next head.
#[derive(Debug)]
pub(crate) struct Slot<'q> {
    queue: &'q WaitQueue,
    waiter: Arc<Waiter>,
}

impl Slot<'_> {
    pub(crate) fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    pub(crate) fn is_head(&self) -> bool {
        self.queue
            .lock()
            .front()
            .is_some_and(|head| Arc::ptr_eq(head, &self.waiter))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut waiters = self.queue.lock();
        let was_head = waiters
            .front()
            .is_some_and(|head| Arc::ptr_eq(head, &self.waiter));
        waiters.retain(|w| !Arc::ptr_eq(w, &self.waiter));
        self.queue.len.store(waiters.len(), Ordering::Release);
        if was_head && let Some(next) = waiters.front() {
            next.wake();
        }
    }
}
