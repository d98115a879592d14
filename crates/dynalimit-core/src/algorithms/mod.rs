//! In-process limit algorithms: pure, synchronous state machines driven by an injected
//! monotonic reading.
//!
//! - [`RateCounter`]: `capacity` units per [`Window`] under one of five [`Algorithm`]s
//!   (token bucket, GCRA, sliding window, fixed window, leaky bucket).
//! - [`ResourceCounter`]: at most `capacity` units held at once (connections, slots).
//!
//! Amounts and capacities are `f64` here, unlike the millitoken integers of the DynamoDB
//! format: these limits never leave the process, and they must accept fractional capacities
//! (0.0001 per second), fractional amounts for the token algorithms, and an infinite capacity.
//! Comparisons allow a relative slack of 1e-9 of the capacity so that repeated sums of
//! inexact intervals (0.1 s) admit exactly what exact arithmetic would.
//!
//! The LimitSet in the `dynalimit` crate combines several of these under one lock.

mod rate;
mod resource;
mod window;

pub use rate::{Algorithm, RateCounter, RateStats};
pub use resource::ResourceCounter;
pub use window::Window;

#[cfg(test)]
mod tests;
