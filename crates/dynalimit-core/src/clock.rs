//! Injected time.
//!
//! Two readings are offered: wall-clock epoch milliseconds (what the table stores and what
//! every bucket formula uses) and a monotonic reading (what in-process algorithms and waits use,
//! so a wall-clock step never makes a limiter admit a burst).

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock time in milliseconds since the Unix epoch.
    fn epoch_millis(&self) -> i64;

    /// Monotonic time since an arbitrary, fixed origin. Never goes backwards.
    fn monotonic(&self) -> Duration;
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

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use dynalimit_core::{Clock, ManualClock};
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

    /// Moves both readings forward by `by` (the wall reading by whole milliseconds).
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.inner.epoch_millis.fetch_add(millis, Ordering::SeqCst);
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .monotonic_nanos
            .fetch_add(nanos, Ordering::SeqCst);
    }

    /// Sets the wall reading, forwards or backwards (a clock step); the monotonic reading is
    /// unchanged.
    pub fn set_epoch_millis(&self, epoch_millis: i64) {
        self.inner
            .epoch_millis
            .store(epoch_millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn epoch_millis(&self) -> i64 {
        self.inner.epoch_millis.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.inner.monotonic_nanos.load(Ordering::SeqCst))
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn epoch_millis(&self) -> i64 {
        (**self).epoch_millis()
    }

    fn monotonic(&self) -> Duration {
        (**self).monotonic()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
