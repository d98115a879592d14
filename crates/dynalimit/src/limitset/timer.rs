//! Injected time for LimitSets: the monotonic reading, and how a waiter sleeps until an
//! instant on that reading.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, Thread};
use std::time::Duration;

use dynalimit_core::{Clock, ManualClock, SystemClock};
use tokio::sync::Notify;

/// A future returned by [`Timer::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The time source of a LimitSet: a monotonic reading plus the two ways of waiting for an
/// instant on it (parking a thread, or an async sleep).
///
/// Waits may end early (a waiter woken by a release, or spuriously); callers re-check.
pub trait Timer: Send + Sync + fmt::Debug + 'static {
    /// Monotonic time since a fixed origin; never decreases.
    fn now(&self) -> Duration;

    /// Blocks the calling thread until [`Timer::now`] reaches `deadline` (forever when `None`)
    /// or the thread is unparked ([`Thread::unpark`]), whichever comes first.
    fn park(&self, deadline: Option<Duration>);

    /// Completes once [`Timer::now`] reaches `deadline`.
    fn sleep_until(&self, deadline: Duration) -> Sleep;
}

/// The operating system's monotonic clock; async sleeps use tokio's timer (a tokio runtime
/// with the time driver must be running for the async acquires).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemTimer;

impl Timer for SystemTimer {
    fn now(&self) -> Duration {
        SystemClock.monotonic()
    }

    fn park(&self, deadline: Option<Duration>) {
        match deadline {
            None => thread::park(),
            Some(deadline) => {
                let left = deadline.saturating_sub(self.now());
                if !left.is_zero() {
                    thread::park_timeout(left);
                }
            }
        }
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let left = deadline.saturating_sub(self.now());
        Box::pin(tokio::time::sleep(left))
    }
}

/// A timer that only moves when told to, for deterministic tests of waits. Clones share the
/// same time and wake the same sleepers.
///
/// [`ManualTimer::advance`] moves the clock and wakes every parked thread and async sleeper,
/// which re-check their deadlines; nothing is ever polled.
///
/// ```
/// use dynalimit::limitset::{ManualTimer, Timer};
/// use std::time::Duration;
///
/// let timer = ManualTimer::new();
/// timer.advance(Duration::from_millis(250));
/// assert_eq!(timer.now(), Duration::from_millis(250));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualTimer {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    clock: ManualClock,
    parked: Mutex<Vec<Thread>>,
    advanced: Notify,
}

impl ManualTimer {
    /// A timer standing at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The clock this timer reads (for components that take a [`Clock`]).
    pub fn clock(&self) -> &ManualClock {
        &self.inner.clock
    }

    /// Moves time forward by `by` and wakes every waiter so it re-checks its deadline.
    pub fn advance(&self, by: Duration) {
        self.inner.clock.advance(by);
        for thread in self
            .inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            thread.unpark();
        }
        self.inner.advanced.notify_waiters();
    }

    /// How many threads are parked in [`Timer::park`] right now (tests use it to know that a
    /// blocking waiter has gone to sleep).
    pub fn parked_threads(&self) -> usize {
        self.inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Timer for ManualTimer {
    fn now(&self) -> Duration {
        self.inner.clock.monotonic()
    }

    fn park(&self, deadline: Option<Duration>) {
        let me = thread::current();
        let id = me.id();
        self.inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(me);
        // Registered before reading the clock: an `advance` after this read unparks us, and
        // an unpark before `park` makes `park` return at once.
        if deadline.is_none_or(|d| self.now() < d) {
            thread::park();
        }
        self.inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|t| t.id() != id);
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            loop {
                let advanced = inner.advanced.notified();
                tokio::pin!(advanced);
                advanced.as_mut().enable();
                if inner.clock.monotonic() >= deadline {
                    return;
                }
                advanced.await;
            }
        })
    }
}

impl<T: Timer + ?Sized> Timer for Arc<T> {
    fn now(&self) -> Duration {
        (**self).now()
    }

    fn park(&self, deadline: Option<Duration>) {
        (**self).park(deadline);
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        (**self).sleep_until(deadline)
    }
}
