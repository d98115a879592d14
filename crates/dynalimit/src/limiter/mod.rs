//! The DynamoDB-backed [`RateLimiter`] and its [`Lease`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), dynalimit::Error> {
//! use dynalimit::{Limit, RateLimiter};
//! use dynalimit_repository::Repository;
//!
//! let repo = Repository::open("tenant-alpha").await.expect("table");
//! let limiter = RateLimiter::new(repo);
//! let lease = limiter
//!     .acquire("api-key-123", "gpt-4", [("rpm", 1), ("tpm", 500)])
//!     .limits([Limit::per_minute("rpm", 100), Limit::per_minute("tpm", 10_000)])
//!     .await?; // Err(Error::RateLimited(rejection)) carries retry_after and statuses
//! let tokens_used = 420;
//! lease.adjust("tpm", tokens_used - 500)?;
//! lease.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # How an acquire works
//! One conditional `UpdateItem` debits every declared limit and one write-capacity token on a
//! randomly chosen shard of the entity's bucket (a warm acquire is exactly one request). If the
//! condition fails, the item returned with the failure decides: reject at once (refill cannot
//! help), materialise the refill with an `rf`-locked write, create the bucket, or double the
//! shard count when the partition is hot. A child entity whose bucket says "cascade" also
//! debits its parent's bucket, concurrently once the cascade is known; when the parent refuses,
//! the child's debit is given back.
//!
//! # Leases and dropped leases
//! A [`Lease`] holds what was consumed. [`Lease::adjust`] records corrections in memory;
//! [`Lease::commit`] writes them; [`Lease::rollback`] gives everything back. A lease dropped
//! without `commit` or `rollback` is rolled back by a task spawned on the current Tokio
//! runtime, so tokens never leak when the caller's work fails, panics or is cancelled. The
//! acquire itself runs on a task of its own, so abandoning it while its write is in flight
//! (a timeout around `acquire(..).await`) also ends in a rollback instead of a lost debit.
//! [`RateLimiter::settle`] waits for those background rollbacks (use it before shutting the
//! runtime down); it returns once each has been written or has failed, and a bucket that keeps
//! losing to other transactions fails its write after
//! [`CONFLICT_ATTEMPTS`](dynalimit_repository::bucket::CONFLICT_ATTEMPTS) attempts. Dropping a
//! lease outside a Tokio runtime, or while the runtime shuts down (which drops unfinished
//! tasks, rollbacks included), cannot write; it is logged at `error` level with the buckets
//! and amounts, and the tokens stay consumed (refill returns them over time).

mod engine;
mod lease;
mod pause;

use std::collections::{BTreeMap, HashMap};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::decide::{BucketImage, DeltaPlan, availability, plan_delta};
use dynalimit_core::ids::{validate_entity_id, validate_resource};
use dynalimit_core::limit::amount_to_milli;
use dynalimit_core::{Clock, CoreError, Limit};
use dynalimit_repository::bucket::{BucketStore, Owner};
use dynalimit_repository::{Repository, RepositoryError};
use tokio::sync::Notify;

use crate::{Error, Rejection};
use engine::{Entry, Refusal, Role};
pub use lease::Lease;
pub use pause::{DynamoPauseStore, MAX_PAUSE};

/// What an acquire does when the limiter cannot decide (DynamoDB unavailable, or an item this
/// client cannot interpret): `Allow` admits with a no-op lease (logged at `warn`), `Block`
/// fails with [`Error::Unavailable`].
///
/// Resolution order: the acquire's own setting, the limiter's, the system configuration's
/// `on_unavailable` (through the repository's cache; the last value read is remembered for
/// when DynamoDB cannot answer), else `Block`.
pub use dynalimit_repository::config::OnUnavailable;

#[derive(Debug, Clone, Default)]
struct Known {
    shard_count: u32,
    cascade: bool,
    parent_id: Option<String>,
    seen: bool,
}

pub(crate) struct Inner {
    store: BucketStore,
    clock: Arc<dyn Clock>,
    ttl_multiplier: i64,
    repo: Repository,
    on_unavailable: Option<OnUnavailable>,
    last_on_unavailable: Mutex<Option<OnUnavailable>>,
    known: Mutex<HashMap<(String, String), Known>>,
    pending: AtomicUsize,
    settled: Notify,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("namespace_id", &self.store.namespace_id())
            .field("on_unavailable", &self.on_unavailable)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn with_known<T>(&self, entity: &str, resource: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let mut map = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(map
            .entry((entity.to_owned(), resource.to_owned()))
            .or_insert_with(|| Known {
                shard_count: 1,
                ..Known::default()
            }))
    }

    fn shard_count(&self, entity: &str, resource: &str) -> u32 {
        self.with_known(entity, resource, |k| k.shard_count.max(1))
    }

    fn raise_shard_count(&self, entity: &str, resource: &str, count: u32) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count)
        });
    }

    /// Learns shard count (only ever up), cascade and parent from an item image.
    fn learn(&self, entity: &str, resource: &str, img: &BucketImage) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(img.shards());
            k.cascade = img.cascade;
            k.parent_id.clone_from(&img.parent_id);
            k.seen = true;
        });
    }

    fn learn_count(&self, entity: &str, resource: &str, count: u32, owner: &Owner) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count);
            k.cascade = owner.cascade;
            k.parent_id.clone_from(&owner.parent_id);
            k.seen = true;
        });
    }

    /// The parent to debit concurrently, when the cascade is known.
    fn known_parent(&self, entity: &str, resource: &str) -> Option<Option<String>> {
        self.with_known(entity, resource, |k| {
            k.seen.then(|| k.parent_id.clone().filter(|_| k.cascade))
        })
    }

    /// Gives back what `entry` consumed (plus `extra` net adjustments); best effort.
    async fn credit(
        &self,
        entry: &Entry,
        net: &BTreeMap<String, i64>,
    ) -> Result<(), RepositoryError> {
        let plan: DeltaPlan = plan_delta(net, &entry.states, entry.shard_count);
        self.store.apply_delta(&entry.key, &plan).await.map(|_| ())
    }

    async fn compensate(&self, entry: &Entry) {
        let net = entry
            .consumed
            .iter()
            .map(|(n, c)| (n.clone(), -c))
            .collect();
        if let Err(e) = self.credit(entry, &net).await {
            tracing::warn!(
                entity_id = %entry.key.entity_id, resource = %entry.key.resource, error = %e,
                "compensation failed or its outcome is unknown (not sent again); the debit may stand"
            );
        }
    }
}

/// Distributed rate limiter over one namespace of a DynamoDB table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

impl RateLimiter {
    /// A limiter over `repo`'s namespace; `on_unavailable` comes from the system
    /// configuration (default `block`).
    pub fn new(repo: Repository) -> Self {
        Self::build(repo, None)
    }

    /// A limiter with an explicit `on_unavailable` policy, overriding the system
    /// configuration.
    pub fn with_on_unavailable(repo: Repository, on_unavailable: OnUnavailable) -> Self {
        Self::build(repo, Some(on_unavailable))
    }

    fn build(repo: Repository, on_unavailable: Option<OnUnavailable>) -> Self {
        RateLimiter {
            inner: Arc::new(Inner {
                store: repo.buckets(),
                clock: Arc::clone(repo.clock()),
                ttl_multiplier: i64::from(repo.bucket_ttl_multiplier()),
                repo,
                on_unavailable,
                last_on_unavailable: Mutex::new(None),
                known: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
                settled: Notify::new(),
            }),
        }
    }

    /// The repository this limiter writes to.
    pub(crate) fn repository(&self) -> &Repository {
        &self.inner.repo
    }

    /// Starts an acquire of `consume` (whole tokens per limit name) on `entity_id`'s bucket for
    /// `resource`. Await the returned builder, after optionally setting
    /// [`Acquire::limits`] and [`Acquire::on_unavailable`].
    ///
    /// # Errors (when awaited)
    /// [`Error::Invalid`] for bad input (before any I/O; a limit name given twice in
    /// `consume` included), [`Error::UnknownLimit`] for a consumed name that is not among the
    /// limits (before any I/O for [`Acquire::limits`]; for stored limits once they are read,
    /// before the bucket write, unless the entity cascades, see below),
    /// [`Error::RateLimited`] when the request does not fit, [`Error::ResourceDisabled`],
    /// [`Error::NoLimits`], [`Error::PermissionDenied`], and [`Error::Unavailable`] under
    /// `block`.
    ///
    /// In a cascade the child and its parent may each keep a subset of the stored limits, so
    /// a name unknown to one of them is debited where it is known and ignored (with a
    /// warning) where it is not; a name neither knows is then not refused.
    ///
    /// # Panics (when awaited)
    /// Outside a Tokio runtime: the requests run on a spawned task (see [`Acquire`]).
    pub fn acquire<K, I>(&self, entity_id: &str, resource: &str, consume: I) -> Acquire<'_>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        Acquire {
            limiter: self,
            request: Request {
                entity_id: entity_id.to_owned(),
                resource: resource.to_owned(),
                consume: consume.into_iter().map(|(k, v)| (k.into(), v)).collect(),
                limits: None,
                on_unavailable: None,
            },
        }
    }

    /// Whole tokens available per limit across every shard of the entity's bucket for
    /// `resource` (capped at capacity; negative in debt). Reads GSI3 and the items. `limits`
    /// empty: the stored configuration's.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input, [`Error::PermissionDenied`], [`Error::Unavailable`].
    pub async fn available(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
    ) -> Result<BTreeMap<String, i64>, Error> {
        let statuses = self
            .availability(entity_id, resource, limits, &BTreeMap::new())
            .await?;
        Ok(statuses
            .into_iter()
            .map(|s| (s.limit.name().to_owned(), s.available))
            .collect())
    }

    /// How long until `needed` (whole tokens per limit) would fit across the entity's shards;
    /// zero when it fits now.
    ///
    /// # Errors
    /// As [`RateLimiter::available`].
    pub async fn time_until_available<K, I>(
        &self,
        entity_id: &str,
        resource: &str,
        needed: I,
        limits: &[Limit],
    ) -> Result<Duration, Error>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        let needed = needed
            .into_iter()
            .map(|(k, v)| Ok((k.into(), amount_to_milli("needed", v)?)))
            .collect::<Result<BTreeMap<_, _>, CoreError>>()?;
        let statuses = self
            .availability(entity_id, resource, limits, &needed)
            .await?;
        let ms = statuses.iter().map(|s| s.retry_after_ms).max().unwrap_or(0);
        Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }

    async fn availability(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
        needed: &BTreeMap<String, i64>,
    ) -> Result<Vec<crate::LimitStatus>, Error> {
        validate_entity_id(entity_id)?;
        validate_resource(resource)?;
        for l in limits {
            l.validate()?;
        }
        let resolved;
        let limits = if limits.is_empty() {
            resolved = self
                .inner
                .repo
                .resolve_limits(entity_id, resource)
                .await
                .map_err(|e| repo_error(entity_id, resource, e))?
                .limits;
            if resolved.is_empty() {
                return Err(Error::NoLimits {
                    entity_id: entity_id.to_owned(),
                    resource: resource.to_owned(),
                });
            }
            resolved.as_slice()
        } else {
            limits
        };
        let buckets = self
            .inner
            .store
            .entity_buckets(entity_id)
            .await
            .map_err(|e| repo_error(entity_id, resource, e))?;
        let images: Vec<BucketImage> = buckets
            .into_iter()
            .filter(|(k, _)| k.resource == resource)
            .map(|(_, img)| img)
            .collect();
        if let Some(reason) = images.iter().find_map(BucketImage::unsupported_reason) {
            return Err(Error::Unavailable {
                entity_id: entity_id.to_owned(),
                resource: resource.to_owned(),
                message: reason,
            });
        }
        Ok(availability(
            &images,
            limits,
            needed,
            self.inner.clock.epoch_millis(),
        ))
    }

    /// Waits until every rollback of a dropped lease has been written (or has failed), and
    /// every acquire whose caller stopped waiting has finished (and rolled back).
    pub async fn settle(&self) {
        loop {
            let notified = self.inner.settled.notified();
            if self.inner.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    async fn run(&self, request: Request) -> Result<Lease, Error> {
        let Request {
            entity_id,
            resource,
            consume,
            limits,
            on_unavailable,
        } = request;
        validate_entity_id(&entity_id)?;
        validate_resource(&resource)?;
        let mut demand = BTreeMap::new();
        for (name, amount) in &consume {
            dynalimit_core::ids::validate_limit_name(name)?;
            let milli = amount_to_milli("amount", *amount)?;
            if demand.insert(name.clone(), milli).is_some() {
                return Err(CoreError::invalid_value(
                    "consume",
                    name,
                    "a limit name may appear once per acquire",
                )
                .into());
            }
        }
        if let Some(limits) = &limits {
            for (i, l) in limits.iter().enumerate() {
                l.validate()?;
                if limits[..i].iter().any(|o| o.name() == l.name()) {
                    return Err(CoreError::invalid_value(
                        "limits",
                        l.name(),
                        "limit names must be unique",
                    )
                    .into());
                }
            }
            if let Some(name) = unknown_name(&demand, limits) {
                return Err(Error::UnknownLimit { key: name.clone() });
            }
        }
        match self
            .cascade_acquire(&entity_id, &resource, &demand, limits.as_deref())
            .await
        {
            Ok(entries) => Ok(Lease::new(Arc::clone(&self.inner), entries)),
            Err((owner, refusal)) => match refusal {
                Refusal::Rejected {
                    statuses,
                    contended,
                } => Err(Error::RateLimited(Rejection {
                    entity_id: owner,
                    resource,
                    statuses,
                    contended,
                    paused: None,
                })),
                Refusal::Paused(until) => Err(Error::RateLimited(Rejection {
                    entity_id: owner,
                    resource,
                    statuses: Vec::new(),
                    contended: false,
                    paused: Some(pause::remaining(until, self.inner.clock.epoch_millis())),
                })),
                Refusal::Disabled => Err(Error::ResourceDisabled {
                    entity_id: owner,
                    resource,
                }),
                Refusal::NoLimits => Err(Error::NoLimits {
                    entity_id: owner,
                    resource,
                }),
                Refusal::UnknownLimit(key) => Err(Error::UnknownLimit { key }),
                Refusal::Repository(e @ RepositoryError::PermissionDenied { .. }) => {
                    Err(Error::PermissionDenied(e))
                }
                Refusal::Repository(RepositoryError::TransactionConflict { .. }) => {
                    Err(Error::RateLimited(Rejection {
                        entity_id: owner,
                        resource,
                        statuses: Vec::new(),
                        contended: true,
                        paused: None,
                    }))
                }
                other => {
                    let message = match other {
                        Refusal::Unsupported(reason) => {
                            format!("fails closed on an unsupported item: {reason}")
                        }
                        Refusal::Repository(e) => e.to_string(),
                        _ => String::new(),
                    };
                    match self.on_unavailable(on_unavailable).await {
                        OnUnavailable::Allow => {
                            tracing::warn!(
                                entity_id = %entity_id, resource = %resource, %message,
                                "rate limiter unavailable; admitting with a no-op lease"
                            );
                            Ok(Lease::degraded())
                        }
                        OnUnavailable::Block => Err(Error::Unavailable {
                            entity_id,
                            resource,
                            message,
                        }),
                    }
                }
            },
        }
    }

    /// The `on_unavailable` mode of an acquire that could not be decided.
    async fn on_unavailable(&self, explicit: Option<OnUnavailable>) -> OnUnavailable {
        if let Some(mode) = explicit.or(self.inner.on_unavailable) {
            return mode;
        }
        let lookup = tokio::time::timeout(
            Duration::from_secs(1),
            self.inner.repo.resolve_on_unavailable(),
        );
        let last = &self.inner.last_on_unavailable;
        if let Ok(Ok(found)) = lookup.await {
            *last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = found;
        }
        last.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .unwrap_or(OnUnavailable::Block)
    }

    /// Debits the entity and, when it cascades, its direct parent (never the grandparent).
    async fn cascade_acquire(
        &self,
        entity_id: &str,
        resource: &str,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, (String, Refusal)> {
        let inner = &self.inner;
        let tag = |owner: &str| {
            let owner = owner.to_owned();
            move |r: Refusal| (owner, r)
        };
        if let Some(Some(parent)) = inner.known_parent(entity_id, resource) {
            // Warm cascade: both writes at once.
            let (child, up) = futures::join!(
                inner.acquire_one(
                    entity_id,
                    resource,
                    demand,
                    limits,
                    Role::Entity { probe: false }
                ),
                inner.acquire_one(&parent, resource, demand, limits, Role::Parent),
            );
            return match (child, up) {
                (Ok(c), Ok(p)) => {
                    if c.cascade && c.parent_id.as_deref() == Some(parent.as_str()) {
                        Ok(vec![c, p])
                    } else {
                        // The item says the cascade changed: the item wins.
                        inner.compensate(&p).await;
                        self.cold_parent(c, resource, demand, limits).await
                    }
                }
                (Ok(c), Err(r)) => {
                    inner.compensate(&c).await;
                    Err((parent, r))
                }
                (Err(r), Ok(p)) => {
                    inner.compensate(&p).await;
                    Err((entity_id.to_owned(), r))
                }
                (Err(r), Err(_)) => Err((entity_id.to_owned(), r)),
            };
        }
        let child = inner
            .acquire_one(
                entity_id,
                resource,
                demand,
                limits,
                Role::Entity { probe: true },
            )
            .await
            .map_err(tag(entity_id))?;
        self.cold_parent(child, resource, demand, limits).await
    }

    /// After the child's debit: debit the parent named by the child's item, if it cascades.
    async fn cold_parent(
        &self,
        child: Entry,
        resource: &str,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, (String, Refusal)> {
        let Some(parent) = child.parent_id.clone().filter(|_| child.cascade) else {
            return Ok(vec![child]);
        };
        match self
            .inner
            .acquire_one(&parent, resource, demand, limits, Role::Parent)
            .await
        {
            Ok(p) => Ok(vec![child, p]),
            Err(r) => {
                self.inner.compensate(&child).await;
                Err((parent, r))
            }
        }
    }
}

/// The first consumed name that is not among `limits`.
pub(crate) fn unknown_name<'a>(
    demand: &'a BTreeMap<String, i64>,
    limits: &[Limit],
) -> Option<&'a String> {
    demand
        .keys()
        .find(|name| !limits.iter().any(|l| l.name() == name.as_str()))
}

fn repo_error(entity_id: &str, resource: &str, e: RepositoryError) -> Error {
    match e {
        RepositoryError::PermissionDenied { .. } => Error::PermissionDenied(e),
        other => Error::Unavailable {
            entity_id: entity_id.to_owned(),
            resource: resource.to_owned(),
            message: other.to_string(),
        },
    }
}

/// An acquire being set up; await it to run it.
///
/// The requests run on a task of their own: if the awaiting future is dropped (a timeout, a
/// cancelled request handler) while a write is in flight, the task still finishes, and a lease
/// nobody receives is rolled back like any dropped lease.
#[derive(Debug)]
#[must_use = "an acquire does nothing until awaited"]
pub struct Acquire<'a> {
    limiter: &'a RateLimiter,
    request: Request,
}

#[derive(Debug)]
struct Request {
    entity_id: String,
    resource: String,
    consume: Vec<(String, i64)>,
    limits: Option<Vec<Limit>>,
    on_unavailable: Option<OnUnavailable>,
}

impl Acquire<'_> {
    /// Uses these limits instead of the stored configuration.
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.request.limits = Some(limits.into_iter().collect());
        self
    }

    /// Overrides the limiter's `on_unavailable` policy for this acquire.
    pub fn on_unavailable(mut self, mode: OnUnavailable) -> Self {
        self.request.on_unavailable = Some(mode);
        self
    }
}

/// Counts work that [`RateLimiter::settle`] waits for; released on drop.
#[derive(Debug)]
pub(crate) struct Pending(Arc<Inner>);

impl Pending {
    pub(crate) fn new(inner: &Arc<Inner>) -> Self {
        inner.pending.fetch_add(1, Ordering::SeqCst);
        Pending(Arc::clone(inner))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
        self.0.settled.notify_waiters();
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let limiter = self.limiter.clone();
        let pending = Pending::new(&limiter.inner);
        // The lease is dropped before `pending` when nobody awaits the result, so its rollback
        // is registered before the acquire stops counting.
        // Boxed first, so the task is handed a pointer rather than the acquire's whole state.
        let run = Box::pin(async move { limiter.run(self.request).await });
        let task = tokio::spawn(async move { (run.await, pending) });
        Box::pin(async move {
            match task.await {
                Ok((result, _pending)) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Err(Error::Unavailable {
                    entity_id: String::new(),
                    resource: String::new(),
                    message: format!("acquire task ended early: {e}"),
                }),
            }
        })
    }
}
