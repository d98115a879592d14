//! Distributed rate limiting on DynamoDB.
//!
//! dynalimit enforces token buckets shared by every process that points at one DynamoDB table.
//! This crate holds the user-facing pieces: the DynamoDB-backed `RateLimiter` (feature
//! `dynamodb`, on by default), `LimitSet` and `LimitPool`, the adaptive concurrency limiter and
//! the cooperative backoff gate.

pub mod adaptive;
pub mod backoff;
pub mod error;
#[cfg(feature = "dynamodb")]
pub mod limiter;
pub mod limitset;
pub mod pool;
pub mod rejection;
pub mod time;
#[cfg(feature = "tower")]
pub mod tower;

pub use dynalimit_core::Limit;
pub use error::Error;
#[cfg(feature = "dynamodb")]
pub use limiter::{Lease, OnUnavailable, RateLimiter};
pub use rejection::{LimitStatus, Rejection};
