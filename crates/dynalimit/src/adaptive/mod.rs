//! Adaptive concurrency limiting.
//!
//! An [`AdaptiveLimiter`] hands out permits up to a limit it adjusts from what it measures: each
//! permit ends with [`Permit::record`] (a round-trip sample) or is dropped (released without a
//! sample, for timeouts and cancellations). Once per window (≥ 1 s and ≥ 50 samples by default) it
//! compares the window's p90 latency with a long-term baseline, watches whether throughput and
//! latency follow the in-flight count, and moves the limit by one step. The rules are those of
//! [`dynalimit_core::adaptive::LimitController`].
//!
//! When the limit is reached, [`AdaptiveLimiter::acquire`] waits in a FIFO queue. With queueing
//! configured, the queue sheds gradually: nothing below `limit × initial_rejection_factor`
//! queued, everything from `limit × max_rejection_factor`, linearly in between. With a shared
//! [`Prioritizer`], requests carry a [`Priority`] or an exact [`Level`] and the lowest levels are
//! shed first.
//!
//! ```
//! use std::time::Duration;
//! use dynalimit::adaptive::AdaptiveLimiter;
//! use dynalimit::time::{Clock, ManualClock};
//!
//! let clock = ManualClock::new(0);
//! let limiter = AdaptiveLimiter::builder()
//!     .initial_limit(2)
//!     .clock(clock.clone())
//!     .build()
//!     .unwrap();
//! let a = limiter.try_acquire().unwrap();
//! let _b = limiter.try_acquire().unwrap();
//! assert!(limiter.try_acquire().is_err()); // full: a rejection is a value
//! clock.advance(Duration::from_millis(20));
//! a.record(); // a 20 ms sample, and the permit is released
//! assert_eq!(limiter.inflight(), 1);
//! ```

mod limiter;
mod prioritizer;
#[cfg(test)]
mod tests;

pub use dynalimit_core::adaptive::priority::{Level, Priority};
pub use dynalimit_core::adaptive::{ChangeReason, ControllerConfig, LimitChange};
pub use limiter::{AdaptiveLimiter, AdaptiveLimiterBuilder, AdaptiveMetrics, Permit};
pub use prioritizer::Prioritizer;
