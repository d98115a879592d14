//! Time, injected: the one abstraction every part of dynalimit reads time and waits through.
//!
//! A [`Clock`] gives two readings, wall-clock epoch milliseconds (what the table stores and
//! every bucket formula uses) and a monotonic reading (what in-process limiters and waits use,
//! so a wall-clock step never makes a limiter admit a burst), and two ways of waiting for an
//! instant on the monotonic reading: an async sleep and a thread park.
//!
//! | clock | readings | waits |
//! |---|---|---|
//! | [`SystemClock`] | the operating system's clocks | a timer thread of the process, thread park |
//! | [`ManualClock`] | only what [`ManualClock::advance`] says | woken by `advance`, never polled |
//! | `dynalimit::time::TokioClock` | tokio's clock, which tests can pause and advance | tokio's timer |
//!
//! Nothing here needs an async runtime: a sleep is woken through its [`Waker`], by the timer
//! thread or by [`ManualClock::advance`]. Retry pauses between DynamoDB attempts are not
//! waits of the limiter's semantics and use the runtime's timer directly.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod timer;

/// A future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time, and the waits on it.
///
/// Waits may end early (a waiter woken by a release, or spuriously); callers re-check the
/// condition they wait for.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock time in milliseconds since the Unix epoch.
    fn epoch_millis(&self) -> i64;

    /// Monotonic time since an arbitrary, fixed origin. Never goes backwards.
    fn monotonic(&self) -> Duration;

    /// Completes once [`Clock::monotonic`] reaches `deadline`. The default sleeps for the time
    /// left at the call on the process's timer thread (no async runtime needed).
    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let left = deadline.saturating_sub(self.monotonic());
        timer::sleep(left)
    }

    /// Blocks the calling thread until [`Clock::monotonic`] reaches `deadline` (forever when
    /// `None`) or the thread is unparked ([`Thread::unpark`]), whichever comes first. The
    /// default parks for the time left at the call.
    fn park(&self, deadline: Option<Duration>) {
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let left = deadline.saturating_sub(self.monotonic());
                if !left.is_zero() {
                    thread::park_timeout(left);
                }
            }
        }
    }
}

/// The operating system's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    #[allow(clippy::disallowed_methods)]
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn epoch_millis(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }
    }

    #[allow(clippy::disallowed_methods)]
    fn monotonic(&self) -> Duration {
        Instant::now().saturating_duration_since(process_origin())
    }
}

/// A clock that only moves when told to, for deterministic tests. Clones share the same time
/// and wake the same waiters.
///
/// [`ManualClock::advance`] moves both readings and wakes every parked thread and async
/// sleeper, which re-check their deadlines; nothing is ever polled.
///
/// ```
/// use dynalimit_core::time::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// let view = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(view.epoch_millis(), 1_700_000_001_500);
/// assert_eq!(view.monotonic(), Duration::from_millis(1500));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    epoch_millis: AtomicI64,
    monotonic_nanos: AtomicU64,
    parked: Mutex<Vec<Thread>>,
    /// The async sleepers waiting for the next [`ManualClock::advance`].
    sleepers: Mutex<Vec<Waker>>,
}

impl ManualClock {
    /// A clock standing at `epoch_millis` on the wall and at zero on the monotonic scale.
    pub fn new(epoch_millis: i64) -> Self {
        let clock = Self::default();
        clock
            .inner
            .epoch_millis
            .store(epoch_millis, Ordering::SeqCst);
        clock
    }

    /// Moves both readings forward by `by` (the wall reading by whole milliseconds) and wakes
    /// every waiter so it re-checks its deadline.
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.inner.epoch_millis.fetch_add(millis, Ordering::SeqCst);
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .monotonic_nanos
            .fetch_add(nanos, Ordering::SeqCst);
        for thread in self.parked().iter() {
            thread.unpark();
        }
        let sleepers = std::mem::take(
            &mut *self
                .inner
                .sleepers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for waker in sleepers {
            waker.wake();
        }
    }

    /// Sets the wall reading, forwards or backwards (a clock step); the monotonic reading is
    /// unchanged and no waiter is woken.
    pub fn set_epoch_millis(&self, epoch_millis: i64) {
        self.inner
            .epoch_millis
            .store(epoch_millis, Ordering::SeqCst);
    }

    /// How many threads are parked in [`Clock::park`] right now (tests use it to know that a
    /// blocking waiter has gone to sleep).
    pub fn parked_threads(&self) -> usize {
        self.parked().len()
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Thread>> {
        self.inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Clock for ManualClock {
    fn epoch_millis(&self) -> i64 {
        self.inner.epoch_millis.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.inner.monotonic_nanos.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(ManualSleep {
            clock: self.clone(),
            deadline,
        })
    }

    fn park(&self, deadline: Option<Duration>) {
        let me = thread::current();
        let id = me.id();
        self.parked().push(me);
        // Registered before reading the clock: an `advance` after this read unparks us, and
        // an unpark before `park` makes `park` return at once.
        if deadline.is_none_or(|d| self.monotonic() < d) {
            thread::park();
        }
        self.parked().retain(|t| t.id() != id);
    }
}

/// A sleep on a [`ManualClock`]: it registers its waker, then reads the clock, so an
/// `advance` between the two wakes it.
struct ManualSleep {
    clock: ManualClock,
    deadline: Duration,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.monotonic() >= self.deadline {
            return Poll::Ready(());
        }
        self.clock
            .inner
            .sleepers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cx.waker().clone());
        if self.clock.monotonic() >= self.deadline {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn epoch_millis(&self) -> i64 {
        (**self).epoch_millis()
    }

    fn monotonic(&self) -> Duration {
        (**self).monotonic()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        (**self).sleep_until(deadline)
    }

    fn park(&self, deadline: Option<Duration>) {
        (**self).park(deadline);
    }
}

/// The UTC calendar date and time of `epoch_millis`. Instants beyond the years -9999 to 9999
/// are clamped to them.
pub fn utc_datetime(epoch_millis: i64) -> jiff::civil::DateTime {
    let at = jiff::Timestamp::from_millisecond(epoch_millis).unwrap_or(if epoch_millis < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    jiff::tz::Offset::UTC.to_datetime(at)
}

/// `epoch_millis` as `YYYY-MM-DDTHH:MM:SSZ`, UTC (the table's timestamp attributes).
pub fn iso_seconds(epoch_millis: i64) -> String {
    let t = utc_datetime(epoch_millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_seconds_match_known_instants_and_clamp_the_far_ones() {
        assert_eq!(iso_seconds(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_seconds(-1), "1969-12-31T23:59:59Z");
        assert_eq!(iso_seconds(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso_seconds(1_798_761_599_999), "2026-12-31T23:59:59Z");
        // Clamped to the last (first) days of the range, whatever the instant.
        assert!(iso_seconds(i64::MAX).starts_with("9999-12-"));
        assert!(iso_seconds(i64::MIN).starts_with("-9999-01-"));
    }

    #[test]
    fn system_clock_is_after_2020_and_monotonic_never_decreases() {
        let clock = SystemClock;
        assert!(clock.epoch_millis() > 1_577_836_800_000);
        let a = clock.monotonic();
        let b = clock.monotonic();
        assert!(b >= a);
    }

    /// Readings handed from thread to thread under a lock never go back (a per-processor
    /// counter read without the kernel's correction can, by the skew between processors).
    #[test]
    fn system_clock_readings_never_decrease_across_threads() {
        let handoffs = std::sync::Mutex::new(Duration::ZERO);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        let mut last = handoffs.lock().unwrap();
                        let now = SystemClock.monotonic();
                        assert!(now >= *last, "{now:?} read after {:?}", *last);
                        *last = now;
                    }
                });
            }
        });
    }

    #[test]
    fn manual_clock_steps_wall_time_without_moving_monotonic_time() {
        let clock = ManualClock::new(10_000);
        clock.advance(Duration::from_secs(2));
        clock.set_epoch_millis(5_000);
        assert_eq!(clock.epoch_millis(), 5_000);
        assert_eq!(clock.monotonic(), Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_manual_sleep_ends_when_the_clock_is_advanced_past_its_deadline() {
        let clock = ManualClock::new(0);
        let sleeper = tokio::spawn(clock.sleep_until(Duration::from_secs(5)));
        clock.advance(Duration::from_secs(2));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woken early");
        clock.advance(Duration::from_secs(3));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("woken by the advance")
            .unwrap();
    }

    #[test]
    fn a_parked_thread_wakes_when_the_clock_passes_its_deadline() {
        let clock = ManualClock::new(0);
        let waiter = {
            let clock = clock.clone();
            thread::spawn(move || {
                // A park may end spuriously; a waiter re-checks its deadline.
                while clock.monotonic() < Duration::from_secs(1) {
                    clock.park(Some(Duration::from_secs(1)));
                }
                clock.monotonic()
            })
        };
        while clock.parked_threads() == 0 {
            thread::yield_now();
        }
        clock.advance(Duration::from_secs(1));
        assert_eq!(waiter.join().unwrap(), Duration::from_secs(1));
    }
}
