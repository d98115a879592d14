//! The blocking forms of the DynamoDB types: each owns a runtime its calls block on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dynalimit_repository::{
    AuditPage, BucketOperation, DisabledFlag, Entity, LimitConfig, NewEntity, OnUnavailable,
    OperationOptions, RepositoryBuilder, RepositoryError, ResolvedLimits,
};
use tokio::runtime::Runtime;

use crate::{Error, Limit, LimitStatus};

/// The runtime the blocking types run their requests on.
fn runtime() -> Result<Arc<Runtime>, RepositoryError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("dynalimit-blocking")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| RepositoryError::Unavailable {
            operation: "runtime",
            message: format!("cannot start the runtime of the blocking API: {e}"),
        })
}

/// A blocking [`crate::Repository`]: one namespace of the table.
#[derive(Debug, Clone)]
pub struct Repository {
    runtime: Arc<Runtime>,
    inner: crate::Repository,
}

/// Blocking forms of the async repository's methods: each runs the async method to its end.
macro_rules! blocking {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*) => {$(
        $(#[$doc])*
        ///
        /// # Errors
        /// As the async method of the same name.
        pub fn $name(&self $(, $arg: $ty)*) -> Result<$ret, RepositoryError> {
            self.runtime.block_on(self.inner.$name($($arg),*))
        }
    )*};
}

impl Repository {
    /// Opens namespace `namespace` as [`crate::Repository::open`] does (the table and the
    /// namespace are created when missing).
    ///
    /// # Errors
    /// As [`crate::Repository::open`], and when the runtime cannot start.
    pub fn open(namespace: &str) -> Result<Repository, RepositoryError> {
        Self::build(crate::Repository::builder().namespace(namespace), true)
    }

    /// Opens the namespace `builder` names, creating what is missing
    /// ([`RepositoryBuilder::open`]).
    ///
    /// # Errors
    /// As [`RepositoryBuilder::open`], and when the runtime cannot start.
    pub fn open_with(builder: RepositoryBuilder) -> Result<Repository, RepositoryError> {
        Self::build(builder, true)
    }

    /// Connects to the namespace `builder` names without writing anything
    /// ([`RepositoryBuilder::connect`]).
    ///
    /// # Errors
    /// As [`RepositoryBuilder::connect`], and when the runtime cannot start.
    pub fn connect_with(builder: RepositoryBuilder) -> Result<Repository, RepositoryError> {
        Self::build(builder, false)
    }

    fn build(builder: RepositoryBuilder, open: bool) -> Result<Repository, RepositoryError> {
        let runtime = runtime()?;
        let inner = runtime.block_on(async move {
            if open {
                builder.open().await
            } else {
                builder.connect().await
            }
        })?;
        Ok(Repository { runtime, inner })
    }

    /// The async repository, for code that has a runtime of its own.
    pub fn as_async(&self) -> &crate::Repository {
        &self.inner
    }

    /// The namespace's id.
    pub fn namespace_id(&self) -> &str {
        self.inner.namespace_id()
    }

    blocking! {
        /// Creates an entity ([`crate::Repository::create_entity`]).
        fn create_entity(&self, new: NewEntity) -> Entity;
        /// Reads an entity ([`crate::Repository::get_entity`]).
        fn get_entity(&self, entity_id: &str) -> Option<Entity>;
        /// The children of an entity ([`crate::Repository::children`]).
        fn children(&self, parent_id: &str) -> Vec<Entity>;
        /// Deletes an entity and what belongs to it ([`crate::Repository::delete_entity`]).
        fn delete_entity(&self, entity_id: &str) -> usize;
        /// Sets an entity's limits on a resource ([`crate::Repository::set_limits`]).
        fn set_limits(&self, entity_id: &str, resource: &str, limits: &[Limit]) -> ();
        /// An entity's limits on a resource ([`crate::Repository::get_limits`]).
        fn get_limits(&self, entity_id: &str, resource: &str) -> Option<LimitConfig>;
        /// Deletes an entity's limits on a resource ([`crate::Repository::delete_limits`]).
        fn delete_limits(&self, entity_id: &str, resource: &str) -> bool;
        /// Sets a resource's default limits ([`crate::Repository::set_resource_defaults`]).
        fn set_resource_defaults(&self, resource: &str, limits: &[Limit]) -> ();
        /// A resource's default limits ([`crate::Repository::get_resource_defaults`]).
        fn get_resource_defaults(&self, resource: &str) -> Option<LimitConfig>;
        /// Deletes a resource's defaults ([`crate::Repository::delete_resource_defaults`]).
        fn delete_resource_defaults(&self, resource: &str) -> bool;
        /// Sets the namespace-wide defaults ([`crate::Repository::set_system_defaults`]).
        fn set_system_defaults(&self, limits: &[Limit], on_unavailable: Option<OnUnavailable>) -> ();
        /// The namespace-wide defaults ([`crate::Repository::get_system_defaults`]).
        fn get_system_defaults(&self) -> Option<LimitConfig>;
        /// Deletes the namespace-wide defaults ([`crate::Repository::delete_system_defaults`]).
        fn delete_system_defaults(&self) -> bool;
        /// The limits that apply to an entity on a resource
        /// ([`crate::Repository::resolve_limits`]).
        fn resolve_limits(&self, entity_id: &str, resource: &str) -> ResolvedLimits;
        /// Disables, enables or clears a resource ([`crate::Repository::set_resource_disabled`]).
        fn set_resource_disabled(&self, resource: &str, flag: Option<DisabledFlag>) -> usize;
        /// Disables, enables or clears an entity
        /// ([`crate::Repository::set_entity_disabled`]).
        fn set_entity_disabled(&self, entity_id: &str, resource: Option<&str>, flag: Option<DisabledFlag>) -> usize;
        /// Resets a bucket ([`crate::Repository::reset_bucket`]).
        fn reset_bucket(&self, entity_id: &str, resource: &str, options: &OperationOptions) -> BucketOperation;
        /// A page of an entity's audit events ([`crate::Repository::audit_events`]).
        fn audit_events(&self, entity_id: &str, limit: usize, start_after: Option<&str>) -> AuditPage;
    }

    /// Tops a bucket up ([`crate::Repository::top_up`]).
    ///
    /// # Errors
    /// As the async method.
    pub fn top_up<K, I>(
        &self,
        entity_id: &str,
        resource: &str,
        amounts: I,
        options: &OperationOptions,
    ) -> Result<BucketOperation, RepositoryError>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        self.runtime
            .block_on(self.inner.top_up(entity_id, resource, amounts, options))
    }
}

/// A blocking [`crate::RateLimiter`].
#[derive(Debug)]
pub struct RateLimiter {
    runtime: Arc<Runtime>,
    inner: crate::RateLimiter,
}

impl RateLimiter {
    /// A limiter over `repo`, sharing its runtime.
    pub fn new(repo: &Repository) -> Self {
        let _entered = repo.runtime.enter();
        RateLimiter {
            runtime: Arc::clone(&repo.runtime),
            inner: crate::RateLimiter::new(repo.inner.clone()),
        }
    }

    /// The async limiter, for code that has a runtime of its own.
    pub fn as_async(&self) -> &crate::RateLimiter {
        &self.inner
    }

    /// Acquires `consume` on `entity_id`'s bucket for `resource` with the stored limits, as
    /// [`crate::RateLimiter::acquire`] does.
    ///
    /// # Errors
    /// As [`crate::RateLimiter::acquire`].
    pub fn acquire<K, I>(&self, entity_id: &str, resource: &str, consume: I) -> Result<Lease, Error>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        self.acquire_with(entity_id, resource, consume, &[])
    }

    /// As [`RateLimiter::acquire`] with these limits instead of the stored configuration
    /// (none: the stored configuration).
    ///
    /// # Errors
    /// As [`crate::RateLimiter::acquire`].
    pub fn acquire_with<K, I>(
        &self,
        entity_id: &str,
        resource: &str,
        consume: I,
        limits: &[Limit],
    ) -> Result<Lease, Error>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        let mut acquire = self.inner.acquire(entity_id, resource, consume);
        if !limits.is_empty() {
            acquire = acquire.limits(limits.iter().cloned());
        }
        let inner = self.runtime.block_on(async move { acquire.await })?;
        Ok(Lease {
            runtime: Arc::clone(&self.runtime),
            inner: Some(inner),
        })
    }

    /// Whole tokens available per limit ([`crate::RateLimiter::available`]).
    ///
    /// # Errors
    /// As the async method.
    pub fn available(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
    ) -> Result<BTreeMap<String, i64>, Error> {
        self.runtime
            .block_on(self.inner.available(entity_id, resource, limits))
    }

    /// Blocks until the rollbacks of dropped leases have landed ([`crate::RateLimiter::settle`]).
    pub fn settle(&self) {
        self.runtime.block_on(self.inner.settle());
    }

    /// Pauses every acquire on a bucket for `retry_after` ([`crate::RateLimiter::pause`]).
    ///
    /// # Errors
    /// As the async method.
    pub fn pause(
        &self,
        entity_id: &str,
        resource: &str,
        retry_after: Duration,
    ) -> Result<Option<i64>, Error> {
        self.runtime
            .block_on(self.inner.pause(entity_id, resource, retry_after))
    }
}

impl Drop for RateLimiter {
    /// Waits for the rollbacks of dropped leases still running on the runtime.
    fn drop(&mut self) {
        self.settle();
    }
}

/// A blocking [`crate::Lease`]: commit or roll back; dropped without either, it is rolled
/// back on the limiter's runtime.
#[derive(Debug)]
pub struct Lease {
    runtime: Arc<Runtime>,
    inner: Option<crate::Lease>,
}

impl Lease {
    fn lease(&self) -> &crate::Lease {
        self.inner
            .as_ref()
            .expect("a lease is settled only by value")
    }

    /// Whole tokens consumed per declared limit ([`crate::Lease::consumed`]).
    pub fn consumed(&self) -> BTreeMap<String, i64> {
        self.lease().consumed()
    }

    /// Each declared limit after this acquire ([`crate::Lease::statuses`]).
    pub fn statuses(&self) -> Vec<LimitStatus> {
        self.lease().statuses()
    }

    /// Records a correction ([`crate::Lease::adjust`]).
    ///
    /// # Errors
    /// As the async lease's.
    pub fn adjust(&self, limit: &str, delta: i64) -> Result<(), Error> {
        self.lease().adjust(limit, delta)
    }

    /// Gives tokens back ([`crate::Lease::give_back`]).
    ///
    /// # Errors
    /// As the async lease's.
    pub fn give_back(&self, limit: &str, amount: i64) -> Result<(), Error> {
        self.lease().give_back(limit, amount)
    }

    /// Writes the adjustments ([`crate::Lease::commit`]).
    ///
    /// # Errors
    /// As the async lease's.
    pub fn commit(mut self) -> Result<(), Error> {
        let inner = self.inner.take().expect("not yet settled");
        self.runtime.block_on(inner.commit())
    }

    /// Gives the consumption back ([`crate::Lease::rollback`]).
    ///
    /// # Errors
    /// As the async lease's.
    pub fn rollback(mut self) -> Result<(), Error> {
        let inner = self.inner.take().expect("not yet settled");
        self.runtime.block_on(inner.rollback())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // The async lease's drop spawns its rollback on the runtime entered here.
            let _entered = self.runtime.enter();
            drop(inner);
        }
    }
}
