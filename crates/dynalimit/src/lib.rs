//! Distributed rate limiting on DynamoDB.
//!
//! dynalimit enforces token buckets shared by every process that points at one DynamoDB table.
//! This crate holds the user-facing pieces: the DynamoDB-backed `RateLimiter` (feature
//! `dynamodb`, on by default), `LimitSet` and `LimitPool`, the adaptive concurrency limiter and
//! the cooperative backoff gate.

pub mod error;
pub mod limitset;
pub mod pool;

pub use error::Error;
