//! What the clones of one [`RateLimiter`](super::RateLimiter) share: the bucket store, the
//! clock, the configuration fallbacks, what was learnt about each bucket (shard count,
//! cascade, parent) and the count of background writes that
//! [`RateLimiter::settle`](super::RateLimiter::settle) waits for.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::decide::BucketImage;
use dynalimit_core::{Clock, Limit};
use dynalimit_repository::bucket::{BucketStore, Owner};
use dynalimit_repository::{OnUnavailable, Repository, RepositoryError};
use tokio::sync::Notify;

use super::rejections::{DEFAULT_REJECTION_CACHE_TTL, RejectionCache};
use crate::Error;

#[derive(Debug, Clone, Default)]
struct Known {
    shard_count: u32,
    cascade: bool,
    parent_id: Option<String>,
    seen: bool,
}

pub(crate) struct Inner {
    pub(super) store: BucketStore,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) ttl_multiplier: i64,
    pub(super) repo: Repository,
    pub(super) on_unavailable: Option<OnUnavailable>,
    pub(super) last_on_unavailable: Mutex<Option<OnUnavailable>>,
    /// What the items said, per entity, then per resource (looked up without allocating).
    known: Mutex<HashMap<String, HashMap<String, Known>>>,
    pub(super) pending: AtomicUsize,
    pub(super) settled: Notify,
    pub(super) rejections: RejectionCache,
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
    pub(super) fn new(repo: Repository, on_unavailable: Option<OnUnavailable>) -> Self {
        Inner {
            store: repo.buckets(),
            clock: Arc::clone(repo.clock()),
            ttl_multiplier: i64::from(repo.bucket_ttl_multiplier()),
            repo,
            on_unavailable,
            last_on_unavailable: Mutex::new(None),
            known: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            settled: Notify::new(),
            rejections: RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL),
        }
    }

    fn with_known<T>(&self, entity: &str, resource: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let mut map = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = map.get_mut(entity).and_then(|r| r.get_mut(resource)) {
            return f(known);
        }
        f(map
            .entry(entity.to_owned())
            .or_default()
            .entry(resource.to_owned())
            .or_insert_with(|| Known {
                shard_count: 1,
                ..Known::default()
            }))
    }

    pub(super) fn shard_count(&self, entity: &str, resource: &str) -> u32 {
        self.with_known(entity, resource, |k| k.shard_count.max(1))
    }

    pub(super) fn raise_shard_count(&self, entity: &str, resource: &str, count: u32) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count)
        });
    }

    /// Learns shard count (only ever up), cascade and parent from an item image.
    pub(super) fn learn(&self, entity: &str, resource: &str, img: &BucketImage) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(img.shards());
            k.cascade = img.cascade;
            k.parent_id.clone_from(&img.parent_id);
            k.seen = true;
        });
    }

    pub(super) fn learn_count(&self, entity: &str, resource: &str, count: u32, owner: &Owner) {
        self.with_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count);
            k.cascade = owner.cascade;
            k.parent_id.clone_from(&owner.parent_id);
            k.seen = true;
        });
    }

    /// The parent to debit concurrently, when the cascade is known.
    pub(super) fn known_parent(&self, entity: &str, resource: &str) -> Option<Option<String>> {
        self.with_known(entity, resource, |k| {
            k.seen.then(|| k.parent_id.clone().filter(|_| k.cascade))
        })
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

/// The first consumed name that is not among `limits`.
pub(crate) fn unknown_name<'a>(
    demand: &'a BTreeMap<String, i64>,
    limits: &[Limit],
) -> Option<&'a String> {
    demand
        .keys()
        .find(|name| !limits.iter().any(|l| l.name() == name.as_str()))
}

/// The limiter's error for a repository failure on `entity_id`'s `resource`: a permission,
/// bad input and an invalid request are what they are; everything else is unavailable.
pub(crate) fn repo_error(entity_id: &str, resource: &str, e: RepositoryError) -> Error {
    match e {
        RepositoryError::PermissionDenied { .. } => Error::PermissionDenied(e),
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
