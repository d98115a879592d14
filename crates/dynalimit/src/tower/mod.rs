//! tower middleware (feature `tower`).
//!
//! [`AdaptiveLimiterLayer`] puts an [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter) in front
//! of any `Service`: each request holds a permit while the inner service handles it, a
//! successful response records the round trip, an error releases the permit without a sample,
//! and a refused permit fails the request with its [`Rejection`](crate::Rejection) (boxed),
//! which an HTTP stack maps to a response, for instance `503 Service Unavailable` with axum's
//! `HandleErrorLayer`.
//!
//! [`RateLimiterLayer`] (with the `dynamodb` feature) puts the DynamoDB
//! [`RateLimiter`](crate::RateLimiter) in front of an HTTP service: a refused request is
//! answered `429 Too Many Requests` with `Retry-After`, an admitted one holds its lease while
//! the inner service runs, committed on success and rolled back on failure.

mod adaptive;
#[cfg(feature = "dynamodb")]
mod rate_limit;

pub use adaptive::{
    AdaptiveLimiterLayer, AdaptiveLimiterService, BoxError, DefaultPriority, NeverOverloaded,
    OverloadClassifier, RequestPriority,
};
#[cfg(feature = "dynamodb")]
pub use rate_limit::{Charge, RateLimiterLayer, RateLimiterService};
