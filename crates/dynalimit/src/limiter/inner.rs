//! What the clones of one [`RateLimiter`](super::RateLimiter) share: the repository's bucket
//! engine (the acquire against the table, with what it learnt of each bucket and its rejection
//! cache), the clock, the configuration fallbacks, the refusal reports and the count of
//! background writes that [`RateLimiter::settle`](super::RateLimiter::settle) waits for.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::image::LimitStatus;
use dynalimit_core::{Clock, Limit};
use dynalimit_format::FormatError;
use dynalimit_repository::acquire::{Engine, Entry, NotDebited, Role};
use dynalimit_repository::{OnUnavailable, Repository, RepositoryError};
use tokio::sync::Notify;

use super::refusals::RefusalReports;
use crate::{Error, Rejection, Unsettled};

pub(crate) struct Inner {
    /// The acquire against the table.
    pub(super) engine: Engine,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) repo: Repository,
    pub(super) on_unavailable: Option<OnUnavailable>,
    pub(super) last_on_unavailable: Mutex<Option<OnUnavailable>>,
    pub(super) pending: Arc<AtomicUsize>,
    pub(super) settled: Arc<Notify>,
    /// The refusal reports (they count in `pending`).
    pub(super) refusals: RefusalReports,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("namespace_id", &self.repo.namespace_id())
            .field("on_unavailable", &self.on_unavailable)
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(super) fn new(repo: Repository, on_unavailable: Option<OnUnavailable>) -> Self {
        let pending = Arc::new(AtomicUsize::new(0));
        let settled = Arc::new(Notify::new());
        Inner {
            engine: Engine::new(repo.clone()),
            clock: Arc::clone(repo.clock()),
            repo,
            on_unavailable,
            last_on_unavailable: Mutex::new(None),
            refusals: RefusalReports::new(Arc::clone(&pending), Arc::clone(&settled)),
            pending,
            settled,
        }
    }
}

impl Inner {
    /// Debits `demand` from one owner's bucket on `resource`, as `role`
    /// ([`Engine::acquire_one`]). A refusal because limits are short is reported for refusal
    /// alerts (in the background, see `refusals.rs`), whether DynamoDB or the rejection cache
    /// refused.
    pub(super) async fn acquire_one(
        &self,
        entity_id: &str,
        resource: &str,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
        role: Role<'_>,
    ) -> Result<Entry, NotDebited> {
        let outcome = self
            .engine
            .acquire_one(entity_id, resource, demand, limits, role)
            .await;
        if let Err(NotDebited::Rejected {
            statuses,
            contended: false,
        }) = &outcome
        {
            self.report_refused(entity_id, resource, statuses);
        }
        outcome
    }

    /// The rejection of a multi-resource acquire when the rejection cache knows every shard
    /// of one of its resources to be short for its demand (no request sent); reported as
    /// [`Inner::acquire_one`] reports.
    pub(super) fn known_short(
        &self,
        entity_id: &str,
        parts: &[(String, BTreeMap<String, i64>)],
    ) -> Option<Rejection> {
        let (resource, statuses) = self.engine.known_short(entity_id, parts)?;
        self.report_refused(entity_id, resource, &statuses);
        Some(Rejection::limits(entity_id, resource, statuses))
    }

    /// Gives back everything `entry` debited for a refused acquire; the give-back when it
    /// failed or its outcome is unknown (it is not sent again, and the debit may stand).
    pub(super) async fn compensate(&self, entry: &Entry) -> Option<Unsettled> {
        let amounts = self.engine.compensate(entry).await?;
        let key = entry.key();
        Some(Unsettled::new(&key.entity_id, &key.resource, amounts))
    }

    /// Reports a refusal of `entity_id`'s bucket on `resource` for the limits of `statuses`
    /// that did not fit, for refusal alerts (in the background, see `refusals.rs`).
    fn report_refused(&self, entity_id: &str, resource: &str, statuses: &[LimitStatus]) {
        self.refusals.refused(
            &self.repo,
            (entity_id, resource),
            statuses,
            self.clock.epoch_millis(),
            self.clock.monotonic(),
        );
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

/// The limiter's error for a repository failure on `entity_id`'s `resource`: a permission,
/// bad input, an invalid request and a corrupt item are what they are; everything else is
/// unavailable.
pub(crate) fn repo_error(entity_id: &str, resource: &str, e: RepositoryError) -> Error {
    match e {
        RepositoryError::PermissionDenied { .. } => Error::PermissionDenied(e),
        RepositoryError::Format(FormatError::Corrupt { .. }) => Error::Corrupt(e),
        RepositoryError::Validation(e) => Error::Invalid(e),
        e if e.is_invalid_request() => Error::InvalidRequest(e),
        other => Error::Unavailable {
            entity_id: entity_id.to_owned(),
            resource: resource.to_owned(),
            message: other.to_string(),
        },
    }
}

/// Time left until `until` (epoch ms) at `now`, never negative.
pub(super) fn remaining(until: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(until.saturating_sub(now)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_never_goes_negative() {
        assert_eq!(remaining(1_500, 1_000), Duration::from_millis(500));
        assert_eq!(remaining(1_000, 1_500), Duration::ZERO);
    }
}
