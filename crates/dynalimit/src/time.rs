//! Time, injected: the clocks every part of dynalimit reads time and waits through (see
//! [`dynalimit_core::time`]). Tests drive a [`ManualClock`] or, under paused tokio time, a
//! [`TokioClock`].

use std::time::Duration;

pub use dynalimit_core::time::{Clock, ManualClock, Sleep, SystemClock};

/// Monotonic time from tokio's clock (which can be paused and advanced), and wall time as a
/// fixed epoch origin plus the tokio time elapsed since the clock was created. It sleeps on
/// tokio's timer, so a tokio runtime with the time driver must be running.
///
/// Under `tokio::time::pause()` virtual time jumps to the next timer as soon as every task is
/// idle, so a test or a simulation can run hours of waits in milliseconds while the readings
/// and the waits agree.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    origin_epoch_millis: i64,
}

impl TokioClock {
    /// A clock whose wall reading starts at `origin_epoch_millis`.
    pub fn new(origin_epoch_millis: i64) -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            origin_epoch_millis,
        }
    }

    /// A clock whose wall reading starts at the operating system's current time.
    pub fn from_system() -> Self {
        Self::new(SystemClock.epoch_millis())
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::from_system()
    }
}

impl Clock for TokioClock {
    fn epoch_millis(&self) -> i64 {
        let elapsed = i64::try_from(self.monotonic().as_millis()).unwrap_or(i64::MAX);
        self.origin_epoch_millis.saturating_add(elapsed)
    }

    fn monotonic(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(tokio::time::sleep_until(self.origin + deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_virtual_time() {
        let clock = TokioClock::new(1_000_000);
        clock.sleep_until(Duration::from_secs(90)).await;
        assert_eq!(clock.monotonic(), Duration::from_secs(90));
        assert_eq!(clock.epoch_millis(), 1_090_000);
    }
}
