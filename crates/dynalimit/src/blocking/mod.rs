//! Every call that blocks the calling thread, for programs and threads that are not async.
//!
//! The blocking form of a type has the type's name and its methods' names; `as_async` gives
//! the type itself back. Nothing outside this module blocks a thread to wait for a limit.
//!
//! - [`LimitSet`] and [`LimitPool`] park the thread until the limits can be taken (or a
//!   timeout passes). They need no runtime.
//! - [`Repository`], [`RateLimiter`] and [`Lease`] (feature `dynamodb`) run the DynamoDB types'
//!   requests on a small Tokio runtime (one worker thread) that the repository owns. A
//!   limiter made from it shares that runtime, and so do its leases. The semantics are those
//!   of the async types: one request per warm acquire, the same errors, leases that commit or
//!   roll back. A lease dropped without either is rolled back on the runtime, and dropping
//!   the limiter waits for those rollbacks.
//!
//! These types must not be used from inside an async runtime: their calls would block a worker
//! of that runtime (and Tokio refuses to start a runtime within another). An async program
//! uses the async types.
//!
//! ```
//! use std::time::Duration;
//! use dynalimit::blocking::LimitSet;
//! use dynalimit::limitset::ResourceLimit;
//!
//! let set = LimitSet::new(
//!     dynalimit::limitset::LimitSet::builder()
//!         .limit(ResourceLimit::new("connections", 1)?)
//!         .build()?,
//! );
//! let mut held = set.acquire([("connections", 1)])?; // parks until a connection is free
//! // the only connection is held: a second acquire waits 10 ms, then times out
//! let late = set.acquire_timeout([("connections", 1)], Duration::from_millis(10));
//! assert!(matches!(late, Err(dynalimit::Error::Timeout { .. })));
//! held.release()?;
//! # Ok::<(), dynalimit::Error>(())
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "dynamodb")]
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use dynalimit::Limit;
//! use dynalimit::blocking::{RateLimiter, Repository};
//!
//! let repo = Repository::open("tenant-alpha")?;
//! repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])?;
//! let limiter = RateLimiter::new(&repo);
//! let lease = limiter.acquire("api-key-123", "gpt-4", [("rpm", 1)])?;
//! // … the work the request pays for …
//! lease.commit()?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::Error;
use crate::limitset::{Acquisition, InProcess, SyncBacking};

#[cfg(feature = "dynamodb")]
mod table;

#[cfg(feature = "dynamodb")]
pub use table::{Lease, RateLimiter, Repository};

/// A [`crate::limitset::LimitSet`] whose acquires park the calling thread.
///
/// Waiters are served first come, first served, with the async waiters of the same set.
#[derive(Debug)]
pub struct LimitSet<B: SyncBacking = InProcess> {
    inner: crate::limitset::LimitSet<B>,
}

impl<B: SyncBacking> LimitSet<B> {
    /// The blocking form of `set` (clones of a set share its limits).
    pub fn new(set: crate::limitset::LimitSet<B>) -> Self {
        LimitSet { inner: set }
    }

    /// The set itself: its async acquires, `try_acquire`, its stats.
    pub fn as_async(&self) -> &crate::limitset::LimitSet<B> {
        &self.inner
    }

    /// Acquires `request`, parking the thread as long as needed.
    ///
    /// # Errors
    /// The request errors of [`crate::limitset::LimitSet::acquire`], before any waiting.
    pub fn acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.inner.acquire_parked(request, None)
    }

    /// Acquires `request`, parking the thread at most `timeout` (zero: one attempt).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the limits could not be taken in time; request errors before any
    /// waiting.
    pub fn acquire_timeout<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
        timeout: Duration,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.inner.acquire_parked(request, Some(timeout))
    }
}

impl<B: SyncBacking> Clone for LimitSet<B> {
    fn clone(&self) -> Self {
        LimitSet::new(self.inner.clone())
    }
}

impl<B: SyncBacking> From<crate::limitset::LimitSet<B>> for LimitSet<B> {
    fn from(set: crate::limitset::LimitSet<B>) -> Self {
        LimitSet::new(set)
    }
}

/// A [`crate::pool::LimitPool`] whose acquires park the calling thread.
#[derive(Debug)]
pub struct LimitPool<B: SyncBacking = InProcess> {
    inner: crate::pool::LimitPool<B>,
}

impl<B: SyncBacking> LimitPool<B> {
    /// The blocking form of `pool`.
    pub fn new(pool: crate::pool::LimitPool<B>) -> Self {
        LimitPool { inner: pool }
    }

    /// The pool itself: its async acquires, `try_acquire`, its stats.
    pub fn as_async(&self) -> &crate::pool::LimitPool<B> {
        &self.inner
    }

    /// Acquires through the pool, parking the thread as long as needed.
    ///
    /// # Errors
    /// As for [`crate::pool::LimitPool::acquire`].
    pub fn acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)> + Clone,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.inner.acquire_parked(request, None)
    }

    /// Acquires through the pool, parking the thread at most `timeout`.
    ///
    /// # Errors
    /// As for [`crate::pool::LimitPool::acquire_timeout`].
    pub fn acquire_timeout<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)> + Clone,
        timeout: Duration,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.inner.acquire_parked(request, Some(timeout))
    }
}

impl<B: SyncBacking> From<crate::pool::LimitPool<B>> for LimitPool<B> {
    fn from(pool: crate::pool::LimitPool<B>) -> Self {
        LimitPool::new(pool)
    }
}
