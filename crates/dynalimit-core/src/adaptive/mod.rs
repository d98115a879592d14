//! Pure building blocks of the adaptive concurrency limiter.
//!
//! Nothing here waits or reads a clock: every function takes the current monotonic time as an
//! argument, so the algorithm can be replayed sample by sample in tests and simulations.
//!
//! - [`MovingAverage`]: plain mean during warm-up, then an exponentially weighted average.
//! - [`MovingMedian`]: median of the last few values (spike filter).
//! - [`SampleWindow`]: the recent window of round-trip times and in-flight counts, with a
//!   quantile, its minimum RTT and its maximum in-flight count.
//! - [`CorrelationWindow`]: rolling Pearson correlation of two series.
//! - [`LimitController`]: the limit update rule (recent quantile against a baseline, throughput
//!   and latency correlation, headroom cap).
//! - [`priority`]: priority bands, levels and the queue rejection ramp.

mod controller;
mod stats;

pub mod priority;

pub use controller::{ChangeReason, ControllerConfig, LimitChange, LimitController, log10_root};
pub use stats::{Correlation, CorrelationWindow, MovingAverage, MovingMedian, SampleWindow};
