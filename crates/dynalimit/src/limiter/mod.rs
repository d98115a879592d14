//! The DynamoDB-backed [`RateLimiter`] and its [`Lease`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), dynalimit::Error> {
//! use dynalimit::{Limit, RateLimiter, Repository};
//!
//! let repo = Repository::open("tenant-alpha").await.expect("table");
//! let limiter = RateLimiter::new(repo);
//! let lease = limiter
//!     .acquire("api-key-123", "gpt-4", [("rpm", 1), ("tpm", 500)])
//!     .limits([Limit::per_minute("rpm", 100), Limit::per_minute("tpm", 10_000)])
//!     .await?; // Err(Error::Rejected(rejection)) carries retry_after and statuses
//! let tokens_used = 420;
//! lease.adjust("tpm", tokens_used - 500)?;
//! lease.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # How an acquire works
//! One conditional `UpdateItem` debits every consumed limit and one write-capacity token on a
//! randomly chosen shard of the entity's bucket (a warm acquire is one request, and one more
//! when the bucket sat full: that write materialises the refill it wasted). If the
//! condition fails, the item returned with the failure decides: reject at once (refill cannot
//! help), materialise the refill with an `rf`-locked write, create the bucket, or double the
//! shard count when the partition is hot. A child entity whose bucket says "cascade" also
//! debits its parent's bucket, concurrently once the cascade is known; when the parent refuses,
//! the child's debit is given back.
//!
//! In a cascade each bucket is written with the consumed names it declares: an LLM gateway's
//! key that keeps `rpm` cascading to a project that keeps a `tpm` budget is debited `rpm`,
//! the project `tpm`, one request each. A lease's adjustment reaches every bucket that
//! declares the limit. A consumed name that no bucket of the cascade declares is refused
//! with [`Error::UnknownLimit`](crate::Error::UnknownLimit) before any write, as for a single
//! entity. A process learns what each bucket declares from its first write to it; until
//! then, and whenever a consumed name is not among what it learnt, the child is written
//! first with every consumed name and the parent after it (see `docs/cascade.md`).
//!
//! # Leases and dropped leases
//! A [`Lease`] holds what was consumed. [`Lease::adjust`] records corrections in memory;
//! [`Lease::commit`] writes them; [`Lease::rollback`] gives everything back. A lease dropped
//! without `commit` or `rollback` is rolled back by a task spawned on the current Tokio
//! runtime, so tokens never leak when the caller's work fails, panics or is cancelled. The
//! acquire runs in the task that awaits it; abandoned while its write is in flight (a timeout
//! around `acquire(..).await`), it finishes on a task of its own and its lease is rolled back,
//! instead of a lost debit. An acquire dropped before it was first polled sent nothing.
//! [`RateLimiter::settle`] waits for those background rollbacks (use it before shutting the
//! runtime down); it returns once each has been written or has failed, and a bucket that keeps
//! losing to other transactions fails its write after
//! [`CONFLICT_ATTEMPTS`](dynalimit_repository::bucket::CONFLICT_ATTEMPTS) attempts. Dropping a
//! lease outside a Tokio runtime, or while the runtime shuts down (which drops unfinished
//! tasks, rollbacks included), cannot write; it is logged at `error` level with the buckets
//! and amounts, and the tokens stay consumed (refill returns them over time).

mod detach;
mod inner;
mod lease;
mod pause;
mod rate_limiter;
mod refusals;
mod slot;

pub use dynalimit_repository::acquire::DEFAULT_REJECTION_CACHE_TTL;
pub(crate) use inner::repo_error;
pub use lease::Lease;
pub use pause::{DynamoPauseStore, MAX_PAUSE};
pub use rate_limiter::{Acquire, RateLimiter};
pub use slot::{Concurrency, DEFAULT_HOLD_TIME, Slot};

/// What an acquire does when the limiter cannot decide (DynamoDB unavailable, or an item this
/// client cannot interpret): `Allow` admits with a no-op lease (logged at `warn`), `Block`
/// fails with [`Error::Unavailable`](crate::Error::Unavailable).
///
/// Resolution order: the acquire's own setting, the limiter's, the system configuration's
/// `on_unavailable` (through the repository's cache; the last value read is remembered for
/// when DynamoDB cannot answer), else `Block`.
pub use dynalimit_repository::OnUnavailable;
