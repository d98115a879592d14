//! The distributed backing: a LimitSet whose limits are one DynamoDB entity+resource bucket.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dynalimit_core::Limit;
use dynalimit_core::algorithms::Algorithm;
use dynalimit_core::ids::{validate_entity_id, validate_resource};
use dynalimit_core::limit::MAX_TOKENS;
use tokio::sync::Notify;

use super::backing::{Backing, Outcome, Settle, Take};
use super::limit::{RateLimit, SetLimit};
use super::set::{LimitSet, LimitSetBuilder};
use crate::{Error, Lease, RateLimiter};
use dynalimit_core::time::{Clock, SystemClock};

/// The shortest wait after a refusal, so a contended bucket answering "retry now" is not
/// hammered in a loop.
const MIN_RETRY: Duration = Duration::from_millis(1);

/// A [`Backing`] whose limits live in one DynamoDB entity+resource bucket: a LimitSet shared
/// by every process.
///
/// Every process that builds a [`LimitSet<Distributed>`] over the same table, namespace,
/// entity and resource shares one budget: a take is the [`RateLimiter`] acquire (one
/// conditional write debiting every limit of the plan, all or nothing), and a settlement writes
/// the refunds through the acquire's [`Lease`].
///
/// ```no_run
/// # async fn demo() -> Result<(), dynalimit::Error> {
/// use dynalimit::limitset::{Algorithm, CallLimit, Distributed, RateLimit};
/// use dynalimit::pool::LimitPool;
/// use dynalimit::{RateLimiter, Repository};
///
/// let limiter = RateLimiter::new(Repository::open("tenant-alpha").await.expect("table"));
/// let mut sets = Vec::new();
/// for key in ["key-a", "key-b", "key-c"] {
///     sets.push(
///         Distributed::builder(&limiter, key, "gpt-4")
///             .limit(RateLimit::new("tpm", 10_000, "minute")?.with_algorithm(Algorithm::TokenBucket))
///             .limit(CallLimit::new(100, "minute")?.with_algorithm(Algorithm::Gcra))
///             .config("api_key", key)
///             .build()?,
///     );
/// }
/// let pool = LimitPool::new(sets)?;
/// let mut acquisition = pool.acquire([("tpm", 500)]).await?;
/// acquisition.update([("tpm", 420)])?; // 80 unused tokens are refunded on release
/// acquisition.release()?;
/// # Ok(()) }
/// ```
///
/// # What maps and what does not
/// The bucket is a continuously refilled token bucket counted in integer millitokens of whole
/// tokens, with a limit per name. So:
///
/// | contract feature | distributed |
/// |---|---|
/// | [`RateLimit`] / [`CallLimit`](super::limit::CallLimit) with [`Algorithm::TokenBucket`] or [`Algorithm::Gcra`] | yes: `capacity` tokens, `capacity` back every `window` (the two algorithms admit the same) |
/// | [`Algorithm::SlidingWindow`], [`Algorithm::FixedWindow`], [`Algorithm::LeakyBucket`] (the default algorithm is the sliding window: name one explicitly) | no: [`Error::NotDistributable`] |
/// | [`ResourceLimit`](super::limit::ResourceLimit) (units held until release) | no: [`Error::NotDistributable`]; a bucket counts rates, not concurrent holders |
/// | fractional or infinite capacity, a window that is not whole seconds | no: [`Error::NotDistributable`] |
/// | fractional amounts | no: the acquire fails with [`Error::InvalidAmount`] before any I/O |
/// | refunds of unused tokens | yes, whole tokens (a fractional remainder stays charged) |
/// | missing usage update | as in process: the limit is charged in full and `release` reports it |
/// | `try_acquire`, thread-blocking acquires, `stats` | no: they need an answer without I/O; use `acquire` / `acquire_timeout` |
///
/// Every one of these refusals happens when the set is built (or, for amounts, when the
/// acquire is planned), before any request is sent.
///
/// # Settlement
/// `settle` cannot wait (it also runs when an acquisition is dropped), so it starts the write
/// on the current Tokio runtime and returns: a release that gives back everything taken rolls
/// the lease back, any other release adjusts the lease by `used - requested` per limit and
/// commits it. [`settled`](Self::settled) waits for those writes (call it before shutting the
/// runtime down). Outside a runtime nothing can be written: the lease's own drop logs it and
/// the tokens stay consumed until refill returns them.
///
/// A refusal of the bucket becomes the set's "cannot admit now", retried at the rejection's
/// `retry_after` on the set's clock, so `acquire_timeout` waits and a
/// [`LimitPool`](crate::pool::LimitPool) falls through to its next set.
pub struct Distributed {
    limiter: RateLimiter,
    entity_id: String,
    resource: String,
    limits: Vec<SetLimit>,
    /// The table limits passed with every acquire; `None` uses the stored configuration.
    explicit: Option<Vec<Limit>>,
    names: Vec<String>,
    settling: Arc<Settling>,
}

impl fmt::Debug for Distributed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Distributed")
            .field("entity_id", &self.entity_id)
            .field("resource", &self.resource)
            .field("limits", &self.names)
            .field("stored_configuration", &self.explicit.is_none())
            .finish_non_exhaustive()
    }
}

/// What a granted take holds: the acquire's lease and the whole tokens taken per limit index.
#[derive(Debug)]
pub struct DistributedTicket {
    lease: Option<Lease>,
    taken: Vec<(usize, i64)>,
}

#[derive(Debug, Default)]
struct Settling {
    running: AtomicUsize,
    done: Notify,
}

/// Counts one settlement write until dropped.
struct Running(Arc<Settling>);

impl Running {
    fn new(settling: &Arc<Settling>) -> Self {
        settling.running.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(settling))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.done.notify_waiters();
    }
}

impl Distributed {
    /// Starts a distributed set over `entity_id`'s bucket for `resource`, acquired through
    /// `limiter` (whose repository names the table and namespace).
    pub fn builder(
        limiter: &RateLimiter,
        entity_id: impl Into<String>,
        resource: impl Into<String>,
    ) -> DistributedBuilder {
        DistributedBuilder {
            limiter: limiter.clone(),
            entity_id: entity_id.into(),
            resource: resource.into(),
            set: LimitSetBuilder::default(),
        }
    }

    /// The entity whose bucket holds the limits.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The resource of the bucket.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The table limits sent with every acquire, or `None` when the stored configuration
    /// applies.
    pub fn table_limits(&self) -> Option<&[Limit]> {
        self.explicit.as_deref()
    }

    /// Waits until every settlement write started by this backing has finished, then until the
    /// limiter's background rollbacks have.
    pub async fn settled(&self) {
        loop {
            let mut notified = pin!(self.settling.done.notified());
            notified.as_mut().enable();
            if self.settling.running.load(Ordering::SeqCst) == 0 {
                break;
            }
            notified.await;
        }
        self.limiter.settle().await;
    }

    /// The plan in whole tokens; fails before any I/O on a fractional amount.
    fn whole_amounts(&self, plan: &[Take]) -> Result<Vec<(usize, i64)>, Error> {
        plan.iter()
            .map(|take| {
                if take.amount.fract() != 0.0 || !take.amount.is_finite() {
                    return Err(Error::InvalidAmount {
                        key: self.names[take.index].clone(),
                        amount: take.amount,
                        reason: "a distributed limit counts whole tokens".into(),
                    });
                }
                // Validated by the front end: at most the capacity, itself at most MAX_TOKENS.
                Ok((take.index, take.amount as i64))
            })
            .collect()
    }

    fn spawn_settlement(&self, lease: Lease, adjustments: Vec<(usize, i64)>, rollback: bool) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // The lease's drop reports that nothing can be written outside a runtime.
            return;
        };
        for &(index, delta) in &adjustments {
            if let Err(error) = lease.adjust(&self.names[index], delta) {
                tracing::warn!(%error, limit = %self.names[index], "distributed LimitSet adjustment refused");
            }
        }
        let running = Running::new(&self.settling);
        let (entity_id, resource) = (self.entity_id.clone(), self.resource.clone());
        handle.spawn(async move {
            let result = if rollback {
                lease.rollback().await
            } else {
                lease.commit().await
            };
            if let Err(error) = result {
                tracing::warn!(%error, %entity_id, %resource, "distributed LimitSet settlement failed");
            }
            drop(running);
        });
    }
}

impl Backing for Distributed {
    type Ticket = DistributedTicket;

    fn limits(&self) -> &[SetLimit] {
        &self.limits
    }

    fn take(
        &self,
        plan: &[Take],
        now: Duration,
    ) -> impl Future<Output = Result<Outcome<DistributedTicket>, Error>> + Send {
        let checked = self.whole_amounts(plan);
        async move {
            let taken = checked?;
            if taken.is_empty() {
                return Ok(Outcome::Granted(DistributedTicket { lease: None, taken }));
            }
            let consume: Vec<(String, i64)> = taken
                .iter()
                .map(|&(index, amount)| (self.names[index].clone(), amount))
                .collect();
            let mut acquire = self
                .limiter
                .acquire(&self.entity_id, &self.resource, consume);
            if let Some(limits) = &self.explicit {
                acquire = acquire.limits(limits.iter().cloned());
            }
            match acquire.await {
                Ok(lease) => Ok(Outcome::Granted(DistributedTicket {
                    lease: Some(lease),
                    taken,
                })),
                Err(Error::Rejected(rejection)) => Ok(Outcome::Rejected {
                    retry_at: Some(
                        now + rejection.retry_after().unwrap_or(MIN_RETRY).max(MIN_RETRY),
                    ),
                }),
                Err(other) => Err(other),
            }
        }
    }

    fn settle(&self, ticket: DistributedTicket, settlement: &[Settle]) {
        let Some(lease) = ticket.lease else {
            return;
        };
        let mut adjustments = Vec::new();
        for line in settlement {
            if let Settle::Refund { index, amount } = *line {
                // Whole tokens only: a fractional remainder stays charged.
                let whole = amount.floor() as i64;
                if whole > 0 {
                    adjustments.push((index, -whole));
                }
            }
        }
        let given_back_in_full = ticket.taken.iter().all(|&(index, amount)| {
            amount == 0
                || adjustments
                    .iter()
                    .any(|&(i, delta)| i == index && delta == -amount)
        });
        if given_back_in_full {
            self.spawn_settlement(lease, Vec::new(), true);
        } else {
            self.spawn_settlement(lease, adjustments, false);
        }
    }
}

/// Builds a [`LimitSet<Distributed>`]; see [`Distributed::builder`].
#[must_use]
pub struct DistributedBuilder {
    limiter: RateLimiter,
    entity_id: String,
    resource: String,
    /// Limits, metadata and clock, as for an in-process set.
    set: LimitSetBuilder,
}

impl fmt::Debug for DistributedBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistributedBuilder")
            .field("entity_id", &self.entity_id)
            .field("resource", &self.resource)
            .field("set", &self.set)
            .finish_non_exhaustive()
    }
}

impl DistributedBuilder {
    /// Adds a limit (a token-bucket or GCRA [`RateLimit`] or [`CallLimit`](super::limit::CallLimit)).
    pub fn limit(mut self, limit: impl Into<SetLimit>) -> Self {
        self.set = self.set.limit(limit);
        self
    }

    /// Adds several limits.
    pub fn limits<L: Into<SetLimit>>(mut self, limits: impl IntoIterator<Item = L>) -> Self {
        self.set = self.set.limits(limits);
        self
    }

    /// Adds a metadata entry, copied into every acquisition.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.set = self.set.config(key, value);
        self
    }

    /// The time source the set waits on ([`SystemClock`] by default). The bucket itself runs on
    /// the repository's clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.set = self.set.clock(clock);
        self
    }

    /// The set over the limits given, which are sent with every acquire. No I/O.
    ///
    /// One bucket carries at most
    /// [`MAX_LIMITS_PER_BUCKET`](dynalimit_format::attr::MAX_LIMITS_PER_BUCKET) (16) limits:
    /// DynamoDB refuses the requests of a larger one as too long.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad entity id or resource, [`Error::TooManyLimits`] for more
    /// limits than one bucket carries, [`Error::NotDistributable`] for a limit the bucket
    /// cannot keep (see [`Distributed`]), and the errors of [`LimitSet::from_backing`].
    pub fn build(self) -> Result<LimitSet<Distributed>, Error> {
        validate_entity_id(&self.entity_id)?;
        validate_resource(&self.resource)?;
        let max = dynalimit_format::attr::MAX_LIMITS_PER_BUCKET;
        if self.set.limits.len() > max {
            return Err(Error::TooManyLimits {
                max,
                given: self.set.limits.len(),
            });
        }
        let table = self
            .set
            .limits
            .iter()
            .map(table_limit)
            .collect::<Result<Vec<_>, Error>>()?;
        self.finish(Some(table))
    }

    /// The set over the stored configuration of the entity and resource (entity, then
    /// resource, then system level), read once here to learn the limit names and capacities;
    /// every acquire resolves the configuration again, so later changes apply. Limits given to
    /// [`limit`](Self::limit) are ignored.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad entity id or resource (before any I/O),
    /// [`Error::NoLimits`] when nothing is configured, [`Error::InvalidRequest`] when the
    /// stored configuration names more limits than one bucket carries,
    /// [`Error::PermissionDenied`], and [`Error::Unavailable`] when the configuration cannot
    /// be read.
    pub async fn build_from_stored(mut self) -> Result<LimitSet<Distributed>, Error> {
        validate_entity_id(&self.entity_id)?;
        validate_resource(&self.resource)?;
        let resolved = self
            .limiter
            .repository()
            .resolve_limits(&self.entity_id, &self.resource)
            .await
            .map_err(|e| crate::limiter::repo_error(&self.entity_id, &self.resource, e))?
            .limits;
        if resolved.is_empty() {
            return Err(Error::NoLimits {
                entity_id: self.entity_id,
                resource: self.resource,
            });
        }
        self.set.limits = resolved
            .iter()
            .map(|limit| {
                RateLimit::builder(limit.name())
                    .capacity(limit.capacity() as f64)
                    .window(Duration::from_secs(
                        u64::try_from(limit.refill_period_seconds()).unwrap_or(1),
                    ))
                    .algorithm(Algorithm::TokenBucket)
                    .build()
                    .map(SetLimit::from)
            })
            .collect::<Result<_, _>>()?;
        self.finish(None)
    }

    fn finish(self, explicit: Option<Vec<Limit>>) -> Result<LimitSet<Distributed>, Error> {
        let LimitSetBuilder {
            limits,
            config,
            clock,
        } = self.set;
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        let names = limits.iter().map(|l| l.key().to_owned()).collect();
        let backing = Distributed {
            limiter: self.limiter,
            entity_id: self.entity_id,
            resource: self.resource,
            limits,
            explicit,
            names,
            settling: Arc::default(),
        };
        LimitSet::from_backing(backing, config, clock)
    }
}

fn not_distributable(key: &str, reason: impl Into<String>) -> Error {
    Error::NotDistributable {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// The bucket limit of a LimitSet limit: `capacity` tokens, `capacity` back every `window`.
fn table_limit(limit: &SetLimit) -> Result<Limit, Error> {
    let key = limit.key();
    let Some(rate) = limit.as_rate() else {
        return Err(not_distributable(
            key,
            "a resource limit counts concurrent holders, which a token bucket cannot; keep it in process",
        ));
    };
    let algorithm = rate.algorithm();
    if !matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
        return Err(not_distributable(
            key,
            format!(
                "the bucket is a token bucket; {algorithm:?} cannot be shared (use TokenBucket or Gcra)"
            ),
        ));
    }
    let capacity = rate.capacity();
    if !capacity.is_finite() || capacity.fract() != 0.0 || capacity > MAX_TOKENS as f64 {
        return Err(not_distributable(
            key,
            format!("capacity {capacity} is not a whole number of tokens up to {MAX_TOKENS}"),
        ));
    }
    let window = rate.window().as_duration();
    if window.subsec_nanos() != 0 {
        return Err(not_distributable(
            key,
            format!(
                "window {}s is not a whole number of seconds",
                window.as_secs_f64()
            ),
        ));
    }
    let capacity = capacity as i64;
    let table = Limit::custom(
        key,
        capacity,
        capacity,
        i64::try_from(window.as_secs()).unwrap_or(i64::MAX),
    );
    dynalimit_format::attr::validate_limit(&table)?;
    Ok(table)
}
