//! Distributed rate limiting on DynamoDB.
//!
//! dynalimit enforces token buckets shared by every process that points at one DynamoDB table.
//! This crate holds the user-facing pieces: the DynamoDB-backed `RateLimiter` (feature
//! `dynamodb`, on by default), `LimitSet` and `LimitPool`, the adaptive concurrency limiter and
//! the cooperative backoff gate.
//!
//! ```no_run
//! # #[cfg(feature = "dynamodb")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use dynalimit::{Limit, RateLimiter, Repository};
//!
//! let repo = Repository::open("tenant-alpha").await?; // creates the table when missing
//! let limiter = RateLimiter::new(repo);
//! let lease = limiter
//!     .acquire("api-key-123", "gpt-4", [("rpm", 1), ("tpm", 500)])
//!     .limits([Limit::per_minute("rpm", 100), Limit::per_minute("tpm", 10_000)])
//!     .await?; // Err(Error::RateLimited(rejection)) carries retry_after and each limit's status
//! let tokens_used = 420; // what the model call really used
//! lease.adjust("tpm", tokens_used - 500)?;
//! lease.commit().await?; // dropped without commit: rolled back
//! # Ok(()) }
//! ```

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
#[cfg(feature = "dynamodb")]
pub use dynalimit_repository::{Repository, RepositoryError};
pub use error::Error;
#[cfg(feature = "dynamodb")]
pub use limiter::{Lease, OnUnavailable, RateLimiter};
pub use rejection::{LimitStatus, Rejection};
