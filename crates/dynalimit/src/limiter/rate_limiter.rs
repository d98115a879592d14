//! [`RateLimiter`]: acquires through the engine, cascades to parents, availability queries.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dynalimit_core::ids::{validate_entity_id, validate_resource};
use dynalimit_core::limit::amount_to_milli;
use dynalimit_core::{CoreError, Limit};
use dynalimit_format::FormatError;
use dynalimit_format::attr;
use dynalimit_repository::acquire::{Demand, Entry, NotDebited, Role, unknown_name};
use dynalimit_repository::{OnUnavailable, Repository, RepositoryError};

use super::detach::Detach;
use super::inner::{Inner, Pending, remaining, repo_error};
use super::lease::Lease;
use crate::{Error, Rejection, Unsettled};

/// Distributed rate limiter over one namespace of a DynamoDB table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    pub(super) inner: Arc<Inner>,
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
            inner: Arc::new(Inner::new(repo, on_unavailable)),
        }
    }

    /// Sets how long a shard that refused a request is remembered (the local rejection
    /// cache, default [`DEFAULT_REJECTION_CACHE_TTL`], 1 s; zero turns it off).
    ///
    /// While every shard of a bucket is remembered short for a requested limit (projected with
    /// refill, so never past the moment the request would fit), acquires on it are refused
    /// without a request to DynamoDB, so a flood of requests a bucket cannot serve costs
    /// nothing. The price: a bucket that another process refunds or reconfigures is seen at
    /// most this long later. What this limiter (or a clone) gives back, and configuration
    /// written through its repository, take effect at once. A remembered image is never used
    /// to admit, nor when explicit `.limits(..)` define a requested limit otherwise than the
    /// bucket holds it.
    ///
    /// [`DEFAULT_REJECTION_CACHE_TTL`]: super::DEFAULT_REJECTION_CACHE_TTL
    pub fn with_rejection_cache_ttl(self, ttl: Duration) -> Self {
        self.inner.engine.set_rejection_ttl(ttl);
        self
    }

    /// The rejection cache's time to live (zero: off).
    pub fn rejection_cache_ttl(&self) -> Duration {
        self.inner.engine.rejection_ttl()
    }

    /// How many acquires the rejection cache refused without a request, since the limiter was
    /// built.
    pub fn cached_rejections(&self) -> u64 {
        self.inner.engine.rejection_refusals()
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
    /// `consume`, or more than
    /// [`MAX_LIMITS_PER_BUCKET`](dynalimit_format::attr::MAX_LIMITS_PER_BUCKET) names in it,
    /// included), [`Error::InvalidRequest`] when DynamoDB refuses the request itself or the
    /// stored configuration names more limits than one bucket carries (under every
    /// `on_unavailable` mode), [`Error::UnknownLimit`] for a consumed name that is not among the
    /// limits (before any I/O for [`Acquire::limits`]; for stored limits once they are read,
    /// before any bucket write; in a cascade, a name neither the entity nor its parent
    /// declares), [`Error::Rejected`] when the request does not fit,
    /// [`Error::ResourceDisabled`], [`Error::NoLimits`], [`Error::PermissionDenied`], and
    /// [`Error::Unavailable`] under `block`.
    ///
    /// In a cascade the child and its parent may each keep a subset of the stored limits
    /// (per-key `rpm` on the key, a `tpm` budget on the project): each bucket is debited the
    /// consumed names it declares, and a warm acquire is one request per bucket (one more for
    /// a bucket that sat full, which that write materialises). Explicit
    /// [`Acquire::limits`] are every bucket's limits.
    ///
    /// Concurrency limits stored for the entity on the resource
    /// ([`Repository::set_concurrency_limits`]) are taken beside the debits, one request a
    /// slot, all or none; in a cascade the parent's are taken after the debit. The [`Lease`]
    /// holds the slots until it is settled. A namespace that stores none costs nothing more
    /// than a read of its features item once per configuration cache time-to-live.
    ///
    /// # Panics (when awaited)
    /// Outside a Tokio runtime: the requests need Tokio's I/O and timers (see [`Acquire`]).
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
                also: Vec::new(),
                in_flight: None,
            },
        }
    }

    /// Takes a slot of `limit` on `entity_id`'s `resource`: one request when a slot is free.
    ///
    /// # Errors
    /// [`Error::Rejected`] when every slot is held (the retry-after is when the first hold
    /// expires at the latest; a release usually comes sooner) or when writers kept taking the
    /// slots picked first ([`Reason::Contended`](crate::Reason::Contended));
    /// [`Error::Invalid`] for bad names; [`Error::Unavailable`] when DynamoDB fails (a lost
    /// answer may leave a slot held until its hold time passes, never granted twice).
    pub async fn hold(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &super::Concurrency,
    ) -> Result<super::Slot, Error> {
        super::Slot::take(&self.inner.repo, entity_id, resource, limit).await
    }

    /// Each limit of the entity's bucket for `resource`, across every shard: the configured
    /// limit (with its schedules) and the whole tokens available now (capped at the capacity
    /// in force; negative in debt), as [`LimitStatus`](crate::LimitStatus)es. `limits` empty:
    /// the stored configuration's.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input, [`Error::PermissionDenied`], [`Error::Unavailable`].
    pub async fn balances(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
    ) -> Result<Vec<crate::LimitStatus>, Error> {
        self.availability(entity_id, resource, limits, &BTreeMap::new())
            .await
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
        attr::validate_limits(limits)?;
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
        let now = self.inner.clock.epoch_millis();
        self.inner
            .engine
            .availability(entity_id, resource, limits, needed, now)
            .await
            .map_err(|e| repo_error(entity_id, resource, e))?
            .map_err(|message| Error::Unavailable {
                entity_id: entity_id.to_owned(),
                resource: resource.to_owned(),
                message,
            })
    }

    /// Waits until every rollback of a dropped lease has been written (or has failed), every
    /// acquire whose caller stopped waiting has finished (and rolled back), and every refusal
    /// report under way has been written (or has failed).
    pub async fn settle(&self) {
        loop {
            let notified = self.inner.settled.notified();
            if self.inner.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The acquire with its span and metrics. A combinator rather than an `async fn`: a
    /// generator awaiting the decision would keep a second copy of the decision's state (the
    /// future moved into the await), and this future is allocated once per acquire.
    fn run(&self, request: Request) -> impl Future<Output = Result<Lease, Error>> + Send + '_ {
        let span = tracing::debug_span!(
            "dynalimit.acquire",
            entity_id = %request.entity_id,
            resource = %request.resource,
            outcome = tracing::field::Empty,
        );
        let started = self.inner.clock.monotonic();
        let decided = dynalimit_repository::counting_requests(tracing::Instrument::instrument(
            self.decide(request),
            span.clone(),
        ));
        futures::FutureExt::map(decided, move |(result, requests)| {
            let took = self.inner.clock.monotonic().saturating_sub(started);
            let outcome =
                crate::metrics::record_acquire(result.as_ref().map(Lease::is_degraded), took);
            crate::metrics::record_requests(outcome, requests);
            span.record("outcome", outcome);
            result
        })
    }

    /// An acquire with its concurrency slots: the stored concurrency limits of the entity on
    /// each resource and [`Acquire::in_flight`]'s are taken beside the debits, a cascade
    /// parent's after them (the parent is known from the debit), all or none.
    async fn with_slots(&self, mut request: Request) -> Result<Lease, Error> {
        let entity = request.entity_id.clone();
        let mut own: Vec<(String, super::Concurrency)> = Vec::new();
        if let Some(c) = request.in_flight.take() {
            own.push((request.resource.clone(), c));
        }
        // Explicit limits bypass the stored configuration, its concurrency limits included.
        // A namespace known to store none reads nothing for them.
        let stored = request.limits.is_none() && self.inner.repo.may_store_concurrency();
        if stored {
            // Bad input is refused before the configuration is read.
            let r = &request;
            validate_request(&r.entity_id, &r.resource, &r.consume, None, &r.also)?;
            let resources =
                std::iter::once(&request.resource).chain(request.also.iter().map(|(r, _)| r));
            for resource in resources {
                let found =
                    Box::pin(self.stored_concurrency(&entity, resource, request.on_unavailable))
                        .await?;
                own.extend(found.into_iter().map(|c| (resource.clone(), c)));
            }
        }
        if own.is_empty() && !(stored && self.inner.repo.may_store_concurrency()) {
            return self.run(request).await;
        }
        Box::pin(self.with_slots_held(entity, own, stored, request)).await
    }

    /// [`RateLimiter::with_slots`] once there are slots to take (boxed: an acquire that
    /// takes none keeps a small future).
    async fn with_slots_held(
        &self,
        entity: String,
        own: Vec<(String, super::Concurrency)>,
        stored: bool,
        request: Request,
    ) -> Result<Lease, Error> {
        let on_unavailable = request.on_unavailable;
        let (slots, lease) = futures::join!(self.take_slots(&entity, &own), self.run(request));
        let (mut held, lease) = match (slots, lease) {
            (Ok(slots), Ok(lease)) if lease.is_degraded() => {
                give_back(slots).await;
                return Ok(lease);
            }
            (Ok(slots), Ok(lease)) => (slots, lease),
            // Admitted without the limiter: the slots could not be taken either.
            (Err(Error::Unavailable { .. }), Ok(lease)) if lease.is_degraded() => return Ok(lease),
            (Err(e), Ok(lease)) => return Err(undo(Vec::new(), lease, e).await),
            (Ok(slots), Err(e)) => {
                give_back(slots).await;
                return Err(e);
            }
            // The debits' refusal says more than the slots'.
            (Err(_), Err(e)) => return Err(e),
        };
        if stored {
            let mut parents = Vec::new();
            for (owner, resource) in lease.other_owners(&entity) {
                match self
                    .stored_concurrency(&owner, &resource, on_unavailable)
                    .await
                {
                    Ok(found) => parents.extend(
                        found
                            .into_iter()
                            .map(|c| (owner.clone(), resource.clone(), c)),
                    ),
                    Err(e) => return Err(undo(held, lease, e).await),
                }
            }
            if !parents.is_empty() {
                let taken = futures::future::join_all(
                    parents
                        .iter()
                        .map(|(owner, resource, c)| self.hold(owner, resource, c)),
                )
                .await;
                match first_error(taken) {
                    Ok(more) => held.extend(more),
                    Err(e) => return Err(undo(held, lease, e).await),
                }
            }
        }
        for slot in &mut held {
            slot.keep_alive();
        }
        Ok(lease.with_slots(held))
    }

    /// The concurrency limits stored for `entity_id` on `resource`. A failure to read them
    /// is an outage of the limiter, under `on_unavailable` like the debits' (`allow`: none).
    async fn stored_concurrency(
        &self,
        entity_id: &str,
        resource: &str,
        on_unavailable: Option<OnUnavailable>,
    ) -> Result<Vec<super::Concurrency>, Error> {
        match self
            .inner
            .repo
            .resolve_concurrency(entity_id, resource)
            .await
        {
            Ok((found, _)) => Ok(found),
            Err(e) => match repo_error(entity_id, resource, e) {
                Error::Unavailable { message, .. }
                    if self.on_unavailable(on_unavailable).await == OnUnavailable::Allow =>
                {
                    tracing::warn!(%entity_id, %resource, %message, "concurrency limits unreadable; admitting without them");
                    Ok(Vec::new())
                }
                other => Err(other),
            },
        }
    }

    /// A slot of each of `limits` on `entity_id`, concurrently; when one is refused or
    /// fails, the others are given back and the first error returned.
    async fn take_slots(
        &self,
        entity_id: &str,
        limits: &[(String, super::Concurrency)],
    ) -> Result<Vec<super::Slot>, Error> {
        let taken =
            futures::future::join_all(limits.iter().map(|(r, c)| self.hold(entity_id, r, c))).await;
        first_error(taken)
    }

    async fn decide(&self, request: Request) -> Result<Lease, Error> {
        let Request {
            entity_id,
            resource,
            consume,
            limits,
            on_unavailable,
            also,
            // Taken beside the debits, in `Acquire::into_future`.
            in_flight: _,
        } = request;
        let (demand, further) =
            validate_request(&entity_id, &resource, &consume, limits.as_deref(), &also)?;
        if !further.is_empty() {
            let mut parts = vec![(resource, demand)];
            parts.extend(further);
            return Box::pin(self.run_many(&entity_id, parts, on_unavailable)).await;
        }
        match self
            .cascade_acquire(&entity_id, &resource, &demand, limits.as_deref())
            .await
        {
            Ok(entries) => Ok(Lease::new(Arc::clone(&self.inner), entries)),
            Err(Refused {
                owner,
                refusal,
                unsettled,
            }) => {
                let refused = self.refused(entity_id, resource, owner, refusal, on_unavailable);
                with_unsettled(Box::pin(refused).await, unsettled)
            }
        }
    }

    /// A multi-resource acquire (see [`Acquire::also`]), `parts` validated.
    async fn run_many(
        &self,
        entity_id: &str,
        parts: Vec<(String, BTreeMap<String, i64>)>,
        on_unavailable: Option<OnUnavailable>,
    ) -> Result<Lease, Error> {
        // A resource known short refuses before any write.
        if let Some(rejection) = self.inner.known_short(entity_id, &parts) {
            return Err(Error::Rejected(rejection));
        }
        let outcomes = futures::future::join_all(
            parts
                .iter()
                .map(|(resource, demand)| self.cascade_acquire(entity_id, resource, demand, None)),
        )
        .await;
        if outcomes.iter().all(Result::is_ok) {
            let mut leases =
                parts
                    .into_iter()
                    .zip(outcomes)
                    .filter_map(|((resource, _), outcome)| {
                        Some((resource, Lease::new(Arc::clone(&self.inner), outcome.ok()?)))
                    });
            let Some((_, first)) = leases.next() else {
                return Err(CoreError::invalid_value("also", 0, "no resource").into());
            };
            return Ok(first.with_also(leases.collect()));
        }
        let mut refusals = Vec::new();
        let mut refunds = Vec::new();
        let mut unsettled = Vec::new();
        for ((resource, _), outcome) in parts.into_iter().zip(outcomes) {
            match outcome {
                Ok(entries) => refunds.extend(entries),
                Err(refused) => {
                    unsettled.extend(refused.unsettled);
                    refusals.push((resource, refused.owner, refused.refusal));
                }
            }
        }
        unsettled.extend(
            futures::future::join_all(refunds.iter().map(|e| self.inner.compensate(e)))
                .await
                .into_iter()
                .flatten(),
        );
        // A disabled resource outranks a rejection, a rejection anything else.
        let rank = |r: &NotDebited| match r {
            NotDebited::Disabled => 0,
            NotDebited::Rejected { .. } | NotDebited::Paused(_) => 1,
            _ => 2,
        };
        refusals.sort_by_key(|(_, _, r)| rank(r));
        let longest = refusals
            .iter()
            .filter_map(|(_, _, r)| match r {
                NotDebited::Rejected { statuses, .. } => {
                    statuses.iter().map(|s| s.retry_after_ms).max()
                }
                NotDebited::Paused(until) => {
                    Some(until.saturating_sub(self.inner.clock.epoch_millis()))
                }
                _ => None,
            })
            .max();
        let (resource, owner, refusal) = refusals.remove(0);
        let outcome = self
            .refused(
                entity_id.to_owned(),
                resource,
                owner,
                refusal,
                on_unavailable,
            )
            .await;
        let outcome = match (outcome, longest) {
            (Err(Error::Rejected(rejection)), Some(ms)) => Err(Error::Rejected(
                rejection.retry_at_least(Duration::from_millis(ms.max(0).unsigned_abs())),
            )),
            (other, _) => other,
        };
        with_unsettled(outcome, unsettled)
    }

    /// What a refused acquire returns: the refusal as an error, or under `on_unavailable =
    /// allow` a degraded lease for an acquire that could not be decided.
    async fn refused(
        &self,
        entity_id: String,
        resource: String,
        owner: String,
        refusal: NotDebited,
        on_unavailable: Option<OnUnavailable>,
    ) -> Result<Lease, Error> {
        match refusal {
            NotDebited::Rejected {
                statuses,
                contended,
            } => Err(Error::Rejected(if contended {
                Rejection::contended(&owner, &resource)
            } else {
                Rejection::limits(&owner, &resource, statuses)
            })),
            NotDebited::Paused(until) => Err(Error::Rejected(Rejection::paused(
                until,
                remaining(until, self.inner.clock.epoch_millis()),
                Some((&owner, &resource)),
            ))),
            NotDebited::Disabled => Err(Error::ResourceDisabled {
                entity_id: owner,
                resource,
            }),
            NotDebited::NoLimits => Err(Error::NoLimits {
                entity_id: owner,
                resource,
            }),
            NotDebited::UnknownLimit(key) => Err(Error::UnknownLimit { key }),
            NotDebited::Repository(e @ RepositoryError::PermissionDenied { .. }) => {
                Err(Error::PermissionDenied(e))
            }
            NotDebited::Repository(e @ RepositoryError::Format(FormatError::Corrupt { .. })) => {
                Err(Error::Corrupt(e))
            }
            NotDebited::Repository(RepositoryError::TransactionConflict { .. }) => {
                Err(Error::Rejected(Rejection::contended(&owner, &resource)))
            }
            // Not outages: the same request fails the same way, whatever `on_unavailable`.
            NotDebited::Repository(RepositoryError::Validation(e)) => Err(Error::Invalid(e)),
            NotDebited::Repository(e) if e.is_invalid_request() => Err(Error::InvalidRequest(e)),
            other => {
                let message = match other {
                    NotDebited::Unsupported(reason) => {
                        format!("fails closed on an unsupported item: {reason}")
                    }
                    NotDebited::Repository(e) => e.to_string(),
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
    ///
    /// Each bucket is sent the consumed names it declares, so that a child and a parent
    /// that keep different limits (per-key `rpm` on the key, a `tpm` budget on the project)
    /// both stay on the fast path. With explicit limits both are given every limit, and
    /// both are sent the whole demand.
    async fn cascade_acquire(
        &self,
        entity_id: &str,
        resource: &str,
        demand: &Demand,
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, Refused> {
        let inner = &self.inner;
        if let Some(Some(parent)) = inner.engine.known().known_parent(entity_id, resource) {
            let shares = match limits {
                Some(_) => Some((Cow::Borrowed(demand), Cow::Borrowed(demand))),
                None => inner
                    .engine
                    .known()
                    .share(entity_id, &parent, resource, demand),
            };
            if let Some((mine, theirs)) = shares {
                // Boxed: two writes' futures side by side would double the size of every
                // acquire's future, cascading or not.
                let parts = (mine.as_ref(), theirs.as_ref());
                return Box::pin(
                    self.warm_cascade(entity_id, &parent, resource, demand, parts, limits),
                )
                .await;
            }
        }
        self.cold_cascade(entity_id, resource, demand, limits).await
    }

    /// The cascade known: the child's part of `demand` and the parent's (`parts`) written at
    /// once.
    async fn warm_cascade(
        &self,
        entity_id: &str,
        parent: &str,
        resource: &str,
        demand: &Demand,
        (mine, theirs): (&Demand, &Demand),
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, Refused> {
        let inner = &self.inner;
        let (child, up) = futures::join!(
            inner.acquire_one(
                entity_id,
                resource,
                mine,
                limits,
                Role::Entity {
                    probe: false,
                    whole: demand,
                    parent: Some(theirs),
                }
            ),
            inner.acquire_one(
                parent,
                resource,
                theirs,
                limits,
                Role::Parent {
                    whole: demand,
                    child: mine,
                }
            ),
        );
        match (child, up) {
            (Ok(c), Ok(p)) => {
                // A slow pass leaves a name its configuration does not declare to the other
                // bucket when that bucket is sent it; when both slow passes did, neither
                // debited it. Decided again from the child's debit, the name is refused.
                let dropped = demand
                    .keys()
                    .any(|n| !c.consumed().contains_key(n) && !p.consumed().contains_key(n));
                if dropped {
                    let mut unsettled: Vec<Unsettled> =
                        Box::pin(inner.compensate(&p)).await.into_iter().collect();
                    unsettled.extend(Box::pin(inner.compensate(&c)).await);
                    let decided =
                        Box::pin(self.cold_cascade(entity_id, resource, demand, limits)).await;
                    return decided.map_err(|refused| refused.with(unsettled));
                }
                if c.cascade_parent() == Some(parent) {
                    return Ok(vec![c, p]);
                }
                // The item says the cascade changed: the item wins.
                let mut unsettled: Vec<Unsettled> =
                    Box::pin(inner.compensate(&p)).await.into_iter().collect();
                let decided = if demand.keys().all(|name| c.consumed().contains_key(name)) {
                    Box::pin(self.cold_parent(c, resource, demand, limits)).await
                } else {
                    // The child was sent only its part: the whole demand is decided again.
                    unsettled.extend(Box::pin(inner.compensate(&c)).await);
                    Box::pin(self.cold_cascade(entity_id, resource, demand, limits)).await
                };
                decided.map_err(|refused| refused.with(unsettled))
            }
            (Ok(c), Err(r)) => {
                let unsettled = Box::pin(inner.compensate(&c)).await;
                Err(Refused::by(parent, r).with(unsettled))
            }
            (Err(r), Ok(p)) => {
                let unsettled = Box::pin(inner.compensate(&p)).await;
                Err(Refused::by(entity_id, r).with(unsettled))
            }
            (Err(r), Err(_)) => Err(Refused::by(entity_id, r)),
        }
    }

    /// The child first, with the whole demand (its slow pass leaves out the names its parent
    /// declares and it does not, and refuses the names neither declares), then the parent
    /// its item names.
    async fn cold_cascade(
        &self,
        entity_id: &str,
        resource: &str,
        demand: &Demand,
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, Refused> {
        let child = self
            .inner
            .acquire_one(
                entity_id,
                resource,
                demand,
                limits,
                Role::entity(demand, true),
            )
            .await
            .map_err(|r| Refused::by(entity_id, r))?;
        self.cold_parent(child, resource, demand, limits).await
    }

    /// After the child's debit: debit the parent named by the child's item, if it cascades,
    /// with the names it declares and every name the child did not debit.
    async fn cold_parent(
        &self,
        child: Entry,
        resource: &str,
        demand: &Demand,
        limits: Option<&[Limit]>,
    ) -> Result<Vec<Entry>, Refused> {
        let Some(parent) = child.cascade_parent().map(str::to_owned) else {
            return Ok(vec![child]);
        };
        let theirs = match limits {
            Some(_) => Cow::Borrowed(demand),
            None => {
                self.inner
                    .engine
                    .known()
                    .parent_part(&parent, resource, demand, child.consumed())
            }
        };
        let role = Role::Parent {
            whole: demand,
            child: child.consumed(),
        };
        match Box::pin(
            self.inner
                .acquire_one(&parent, resource, &theirs, limits, role),
        )
        .await
        {
            Ok(p) => Ok(vec![child, p]),
            Err(r) => {
                let unsettled = Box::pin(self.inner.compensate(&child)).await;
                Err(Refused::by(&parent, r).with(unsettled))
            }
        }
    }
}

/// A refused debit of a cascade: the owner whose bucket refused, why, and the debits given
/// back whose give-back did not land for certain.
struct Refused {
    owner: String,
    refusal: NotDebited,
    unsettled: Vec<Unsettled>,
}

impl Refused {
    fn by(owner: &str, refusal: NotDebited) -> Self {
        Refused {
            owner: owner.to_owned(),
            refusal,
            unsettled: Vec::new(),
        }
    }

    fn with(mut self, unsettled: impl IntoIterator<Item = Unsettled>) -> Self {
        self.unsettled.extend(unsettled);
        self
    }
}

/// A refused acquire's outcome naming the give-backs that did not land for certain: on a
/// rejection, in [`Rejection::unsettled`]. Any other outcome (an unavailable limiter, a
/// disabled resource, a lease admitted under `on_unavailable = allow`) is returned as it is;
/// the warning of each give-back that failed is logged.
fn with_unsettled(
    outcome: Result<Lease, Error>,
    unsettled: Vec<Unsettled>,
) -> Result<Lease, Error> {
    match outcome {
        Err(Error::Rejected(rejection)) if !unsettled.is_empty() => {
            Err(Error::Rejected(rejection.with_unsettled(unsettled)))
        }
        other => other,
    }
}

/// An acquire being set up; await it to run it.
///
/// The requests run in the awaiting task: if the awaiting future is dropped (a timeout, a
/// cancelled request handler) while a write is in flight, the rest finishes on a task of its
/// own, and a lease nobody receives is rolled back like any dropped lease. An acquire dropped
/// before it was first polled sends nothing.
#[derive(Debug)]
#[must_use = "an acquire does nothing until awaited"]
pub struct Acquire<'a> {
    limiter: &'a RateLimiter,
    request: Request,
}

#[derive(Debug, Clone)]
struct Request {
    entity_id: String,
    resource: String,
    consume: Vec<(String, i64)>,
    limits: Option<Vec<Limit>>,
    on_unavailable: Option<OnUnavailable>,
    /// Further resources of the same entity with their amounts (reference §3.11).
    also: Vec<(String, Vec<(String, i64)>)>,
    /// A slot of a concurrency limit taken with the debits, all or none.
    in_flight: Option<super::Concurrency>,
}

impl Acquire<'_> {
    /// Uses these limits instead of the stored configuration.
    ///
    /// At most [`MAX_LIMITS_PER_BUCKET`](dynalimit_format::attr::MAX_LIMITS_PER_BUCKET) (16):
    /// DynamoDB refuses some requests of a bucket with more (a lease's credit passes its limit
    /// of 300 operators in an expression at 19). More, or limits the table cannot store, fail
    /// the acquire with [`Error::Invalid`] before any request.
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.request.limits = Some(limits.into_iter().collect());
        self
    }

    /// Also debits `consume` on another `resource` of the same entity, all or none
    /// (reference §3.11): every resource resolves its own limits, access, cascade and shards
    /// as a single acquire does, their writes run concurrently, and when any resource is
    /// refused, disabled or unavailable every debit already written is given back before the
    /// error is returned. [`Error::ResourceDisabled`] outranks [`Error::Rejected`]; a
    /// rejection names the first refused resource, and its `retry_after` is the longest of
    /// every refused one. The [`Lease`] covers every resource: its own `adjust` and
    /// `consumed` act on the acquire's first resource, [`Lease::resource`] reaches the others,
    /// and its commit and rollback act on all of them.
    ///
    /// At most 16 resources in all, none named twice; not with [`Acquire::limits`]. A resource
    /// whose every shard the local rejection cache knows to be short refuses the whole
    /// acquire before any write.
    ///
    /// ```no_run
    /// # async fn run(limiter: dynalimit::RateLimiter) -> Result<(), dynalimit::Error> {
    /// let lease = limiter
    ///     .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 500)])
    ///     .also("moderation", [("rpm", 1)])
    ///     .await?;
    /// if let Some(moderation) = lease.resource("moderation") {
    ///     moderation.give_back("rpm", 1)?; // not needed after all
    /// }
    /// lease.commit().await?;
    /// # Ok(()) }
    /// ```
    pub fn also<K, I>(mut self, resource: &str, consume: I) -> Self
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        let consume = consume.into_iter().map(|(k, v)| (k.into(), v)).collect();
        self.request.also.push((resource.to_owned(), consume));
        self
    }

    /// Also takes a slot of concurrency limit `limit` on the same entity and resource, all or
    /// none: the slot and the debits are taken concurrently (two requests), and when either
    /// is refused or fails the other is given back before the error is returned. The
    /// [`Lease`] holds the slot, kept alive by heartbeats, until its commit or rollback (or
    /// its drop) gives it back with the tokens. See [`RateLimiter::hold`].
    ///
    /// ```no_run
    /// # async fn run(limiter: dynalimit::RateLimiter) -> Result<(), dynalimit::Error> {
    /// use dynalimit::Concurrency;
    /// let lease = limiter
    ///     .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 500)])
    ///     .in_flight(Concurrency::new("streams", 5)?)
    ///     .await?; // refused when 5 streams of key-1 are in flight
    /// // ... stream the answer ...
    /// lease.commit().await?; // and the slot is given back
    /// # Ok(()) }
    /// ```
    pub fn in_flight(mut self, limit: super::Concurrency) -> Self {
        self.request.in_flight = Some(limit);
        self
    }

    /// Overrides the limiter's `on_unavailable` policy for this acquire.
    pub fn on_unavailable(mut self, mode: OnUnavailable) -> Self {
        self.request.on_unavailable = Some(mode);
        self
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let limiter = self.limiter.clone();
        let pending = Pending::new(&limiter.inner);
        // Polled in the caller's task; dropped while its write is in flight, the acquire
        // finishes on the runtime, and the lease it returns is dropped there, which rolls it
        // back. The lease is dropped before `pending`, so its rollback is registered before
        // the acquire stops counting.
        let run = Detach::new("an acquire", async move {
            let result = limiter.with_slots(self.request).await;
            (result, pending)
        });
        Box::pin(async move { run.await.0 })
    }
}

/// A further resource of an acquire with its demand in millitokens.
type Part = (String, BTreeMap<String, i64>);

/// Checks an acquire before any request: ids, amounts, explicit limits and the further
/// resources; returns the demand in millitokens and each further resource's.
fn validate_request(
    entity_id: &str,
    resource: &str,
    consume: &[(String, i64)],
    limits: Option<&[Limit]>,
    also: &[(String, Vec<(String, i64)>)],
) -> Result<(BTreeMap<String, i64>, Vec<Part>), Error> {
    validate_entity_id(entity_id)?;
    validate_resource(resource)?;
    let demand = validate_demand(consume)?;
    if let Some(limits) = limits {
        attr::validate_limits(limits)?;
        if let Some(name) = unknown_name(&demand, limits) {
            return Err(Error::UnknownLimit { key: name.clone() });
        }
    }
    let mut further: Vec<Part> = Vec::with_capacity(also.len());
    if !also.is_empty() && limits.is_some() {
        return Err(CoreError::invalid_value(
            "also",
            also.len(),
            "further resources cannot be combined with explicit limits",
        )
        .into());
    }
    for (other, consume) in also {
        validate_resource(other)?;
        if other == resource || further.iter().any(|(r, _)| r == other) {
            return Err(CoreError::invalid_value(
                "also",
                other,
                "a resource may appear once per acquire",
            )
            .into());
        }
        further.push((other.clone(), validate_demand(consume)?));
    }
    if further.len() + 1 > MAX_ACQUIRE_RESOURCES {
        return Err(CoreError::invalid_value(
            "also",
            further.len() + 1,
            format!("at most {MAX_ACQUIRE_RESOURCES} resources per acquire"),
        )
        .into());
    }
    Ok((demand, further))
}

/// Every slot of `taken`, or (the others given back) its first error.
fn first_error(taken: Vec<Result<super::Slot, Error>>) -> Result<Vec<super::Slot>, Error> {
    let mut held = Vec::with_capacity(taken.len());
    let mut failed = None;
    for t in taken {
        match t {
            Ok(slot) => held.push(slot),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        None => Ok(held),
        Some(e) => {
            // Dropped, the slots are given back by tasks of their own.
            drop(held);
            Err(e)
        }
    }
}

/// Gives `slots` back; a failure leaves a slot held until its hold time passes.
async fn give_back(slots: Vec<super::Slot>) {
    for slot in slots {
        if let Err(undo) = slot.release().await {
            tracing::warn!(error = %undo, "giving back the slot of a refused acquire failed; it frees at its expiry");
        }
    }
}

/// Gives back `slots` and `lease`'s debits, and returns `e`.
async fn undo(slots: Vec<super::Slot>, lease: Lease, e: Error) -> Error {
    give_back(slots).await;
    if let Err(undo) = lease.rollback().await {
        tracing::warn!(error = %undo, "giving back the debits of an acquire refused a slot failed");
    }
    e
}

/// The most resources one acquire may debit (reference §3.11).
const MAX_ACQUIRE_RESOURCES: usize = 16;

/// Validates an acquire's amounts: limit names, whole non-negative amounts within bounds,
/// each name once; returns them in millitokens.
fn validate_demand(consume: &[(String, i64)]) -> Result<BTreeMap<String, i64>, Error> {
    attr::validate_limit_count("consume", consume.len())?;
    let mut demand = BTreeMap::new();
    for (name, amount) in consume {
        attr::validate_limit_name(name)?;
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
    Ok(demand)
}

#[cfg(test)]
mod tests {
    /// An acquire's future is moved several times before its first poll (into the box that
    /// keeps it alive when dropped half-way, into its slot when awaited), and each move copies
    /// its whole size: the slow branches, the warm cascade's two writes and the write's own
    /// future are boxed where they are taken, and no wrapper holds a second copy of the
    /// decision. (At 64 KiB each acquire's allocation went through the allocator's large-chunk
    /// paths; at 9 KiB its moves copied 36 KB.)
    #[cfg(feature = "memory")]
    #[tokio::test]
    async fn an_acquire_s_future_stays_small() {
        use super::{RateLimiter, Request};
        let repo = dynalimit_repository::Repository::builder()
            .in_memory()
            .open()
            .await
            .unwrap();
        let limiter = RateLimiter::new(repo);
        let request = Request {
            entity_id: "e".into(),
            resource: "r".into(),
            consume: vec![("rpm".into(), 1)],
            limits: None,
            on_unavailable: None,
            also: vec![],
            in_flight: None,
        };
        let decide = std::mem::size_of_val(&limiter.decide(request.clone()));
        let run = std::mem::size_of_val(&limiter.run(request));
        assert!(run < decide + 512, "run {run} B, decide {decide} B");
        assert!(run < 4 << 10, "an acquire's future is {run} B");
    }
}
