//! tower middleware (feature `tower`).
//!
//! [`AdaptiveLimitLayer`] puts an [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter) in front
//! of any `Service`: each request holds a permit while the inner service handles it, a
//! successful response records the round trip, an error releases the permit without a sample,
//! and a refused permit fails the request with [`Rejected`](crate::adaptive::Rejected) (boxed),
//! which an HTTP stack maps to a response, for instance `503 Service Unavailable` with axum's
//! `HandleErrorLayer`.

mod adaptive;

pub use adaptive::{AdaptiveLimit, AdaptiveLimitLayer, NeverOverloaded, OverloadClassifier};

/// The error type of the services in this module.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
