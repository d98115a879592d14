//! A [`Clock`] that follows tokio's timer.
//!
//! The adaptive limiter and the backoff gate measure time through an injected
//! [`Clock`] and wait with tokio timers. [`TokioClock`] makes both agree, including under
//! `tokio::time::pause()`, where virtual time jumps to the next timer as soon as every task is
//! idle: a test or a simulation can then run hours of waits in milliseconds.

use std::time::Duration;

use dynalimit_core::{Clock, SystemClock};
use tokio::time::Instant;

/// Monotonic time from tokio's clock (which can be paused and advanced), and wall time as a
/// fixed epoch origin plus the tokio time elapsed since the clock was created.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
    origin_epoch_millis: i64,
}

impl TokioClock {
    /// A clock whose wall reading starts at `origin_epoch_millis`.
    pub fn new(origin_epoch_millis: i64) -> Self {
        Self {
            origin: Instant::now(),
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
        Instant::now().saturating_duration_since(self.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_virtual_time() {
        let clock = TokioClock::new(1_000_000);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.monotonic(), Duration::from_secs(90));
        assert_eq!(clock.epoch_millis(), 1_090_000);
    }
}
