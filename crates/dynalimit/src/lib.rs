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
//!     .await?; // Err(Error::Rejected(rejection)) carries retry_after and each limit's status
//! let tokens_used = 420; // what the model call really used
//! lease.adjust("tpm", tokens_used - 500)?;
//! lease.commit().await?; // dropped without commit: rolled back
//! # Ok(()) }
//! ```
//!
//! An operator (a support tool, a billing hook) gives an entity its allowance back with
//! [`Repository::reset_bucket`], or refunds tokens with [`Repository::top_up`]; an idempotency
//! key makes a repeated call return the first one's result:
//!
//! ```no_run
//! # #[cfg(feature = "dynamodb")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use dynalimit::{OperationOptions, Repository};
//!
//! let repo = Repository::open("tenant-alpha").await?;
//! let refund = OperationOptions::new().idempotency_key("refund-7731");
//! let done = repo.top_up("api-key-123", "gpt-4", [("tpm", 2_000)], &refund).await?;
//! // A dripping limit never goes above its capacity: what fitted is what was granted.
//! println!("granted {} tpm over {} shards", done.amounts["tpm"], done.shards);
//! let again = repo.top_up("api-key-123", "gpt-4", [("tpm", 2_000)], &refund).await?;
//! assert!(again.replayed && again.amounts == done.amounts);
//! repo.reset_bucket("api-key-123", "gpt-4", &OperationOptions::new()).await?;
//! # Ok(()) }
//! ```

pub mod adaptive;
pub mod backoff;
pub mod blocking;
mod error;
#[cfg(feature = "dynamodb")]
pub mod limiter;
pub mod limitset;
pub mod metrics;
pub mod pool;
mod rejection;
#[cfg(feature = "tower")]
pub mod tower;

pub mod time;

pub use dynalimit_core::Limit;

/// The in-memory backend (feature `memory`): an in-process table store for a service's own
/// tests and for single-process use. Not shared across processes; no streams, so no usage
/// snapshots (see [`Store`](crate::memory::Store) for what it implements and refuses).
///
/// Every request of the limiter is built, sent and decoded exactly as for DynamoDB; the store
/// answers it inside the process, so the decisions are the same code. A service's unit test
/// of "my handler answers 429 when the key is out of budget", with a manual clock showing the
/// refill, runs with no JVM:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use dynalimit::time::ManualClock;
/// use dynalimit::{Error, Limit, RateLimiter, Repository};
///
/// /// The service's handler: 200 while the key has budget, 429 once it has none.
/// async fn handle(limiter: &RateLimiter, api_key: &str) -> Result<u16, Error> {
///     let acquired = limiter
///         .acquire(api_key, "search", [("rpm", 1)])
///         .limits([Limit::per_minute("rpm", 2)])
///         .await;
///     match acquired {
///         Ok(lease) => {
///             lease.commit().await?;
///             Ok(200)
///         }
///         Err(Error::Rejected(_)) => Ok(429),
///         Err(other) => Err(other),
///     }
/// }
///
/// let clock = ManualClock::new(1_700_000_000_000);
/// let repo = Repository::builder()
///     .in_memory()
///     .clock(Arc::new(clock.clone()))
///     .namespace("test")
///     .open()
///     .await?;
/// let limiter = RateLimiter::new(repo);
/// assert_eq!(handle(&limiter, "key-1").await?, 200);
/// assert_eq!(handle(&limiter, "key-1").await?, 200);
/// assert_eq!(handle(&limiter, "key-1").await?, 429); // out of budget
/// assert_eq!(handle(&limiter, "key-2").await?, 200); // another key has its own
/// clock.advance(Duration::from_secs(30)); // 2 a minute: one token back
/// assert_eq!(handle(&limiter, "key-1").await?, 200);
/// assert_eq!(handle(&limiter, "key-1").await?, 429);
/// # Ok(()) }
/// ```
///
/// Several repositories and limiters of one test share a table through one [`Store`](crate::memory::Store)
/// (`Repository::builder().in_memory_store(&store)`).
#[cfg(feature = "memory")]
pub mod memory {
    pub use dynalimit_memory::{ENDPOINT, Store};
}

/// Scheduled limits (reference §12.2): the parameters a limit has at a time of day, in an
/// IANA time zone ([`Limit::with_schedule`]).
pub mod schedule {
    pub use dynalimit_core::schedule::{Cron, Entry, Modifier, Params, Schedule, Zone};
}
#[cfg(feature = "dynamodb")]
pub use dynalimit_repository::{
    Access, AuditEvent, AuditPage, BucketOperation, CacheStats, ConfigLevel, DisabledFlag, Entity,
    FormatError, LimitConfig, NamespaceInfo, NewEntity, OperationKind, OperationOptions,
    Repository, RepositoryBuilder, RepositoryError, ResolvedLimits, UsagePage, UsageQuery,
    UsageSnapshot, UsageSummary, VersionRecord,
};
pub use error::Error;
#[cfg(feature = "dynamodb")]
pub use limiter::{Concurrency, Lease, OnUnavailable, RateLimiter, Slot};
pub use rejection::{LimitStatus, Overload, Reason, Rejection, Unsettled};
