//! What the clones of one [`RateLimiter`](super::RateLimiter) share: the bucket store, the
//! clock, the configuration fallbacks, what was learnt about each bucket (shard count,
//! cascade, parent) and the count of background writes that
//! [`RateLimiter::settle`](super::RateLimiter::settle) waits for.
//!
//! What was learnt is kept for at most [`MAX_KNOWN_PAIRS`] (entity, resource) pairs, and a
//! pair no acquire used for [`KNOWN_IDLE`] may be forgotten ([`BoundedMap`]). A forgotten pair
//! costs its next acquire what a first one costs: it draws shard 0 (which every bucket has)
//! and learns the count from the item, and it learns the cascade before debiting a parent.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::bounded::{BoundedMap, Pair, PairRef};
use dynalimit_core::{Clock, Limit};
use dynalimit_repository::bucket::decide::BucketImage;
use dynalimit_repository::bucket::throttling::Throttling;
use dynalimit_repository::bucket::{BucketStore, Owner};
use dynalimit_repository::{OnUnavailable, Repository, RepositoryError};
use tokio::sync::Notify;

use super::refusals::RefusalReports;
use super::rejections::{DEFAULT_REJECTION_CACHE_TTL, RejectionCache};
use crate::Error;

/// At most this many (entity, resource) pairs are known; beyond it the least recently used
/// are forgotten.
pub(super) const MAX_KNOWN_PAIRS: usize = 100_000;
/// What was learnt about a pair that no acquire used for this long may be forgotten (while
/// other pairs are learnt, it is gone within twice as long).
pub(super) const KNOWN_IDLE: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Default)]
struct Known {
    shard_count: u32,
    cascade: bool,
    parent_id: Option<String>,
    seen: bool,
    /// Held while a task of this limiter splits the bucket (made at the first split).
    split_gate: Option<Arc<tokio::sync::Mutex<()>>>,
    /// What DynamoDB refused of the bucket's writes for throughput.
    throttling: Throttling,
    /// The limit names the item declared after this process's last write to it, sorted;
    /// `None` until then.
    names: Option<Vec<String>>,
}

impl Known {
    /// Learns shard count (only ever up), cascade and parent from an item image.
    fn note(&mut self, img: &BucketImage) {
        self.shard_count = self.shard_count.max(img.shards());
        self.cascade = img.cascade;
        self.parent_id.clone_from(&img.parent_id);
        self.seen = true;
    }
}

pub(crate) struct Inner {
    pub(super) store: BucketStore,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) ttl_multiplier: i64,
    pub(super) repo: Repository,
    pub(super) on_unavailable: Option<OnUnavailable>,
    pub(super) last_on_unavailable: Mutex<Option<OnUnavailable>>,
    /// What the items said, per (entity, resource) pair (looked up without allocating).
    known: Mutex<BoundedMap<Pair, Known>>,
    pub(super) pending: Arc<AtomicUsize>,
    pub(super) settled: Arc<Notify>,
    pub(super) rejections: RejectionCache,
    /// The refusal reports (they count in `pending`).
    pub(super) refusals: RefusalReports,
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
        let pending = Arc::new(AtomicUsize::new(0));
        let settled = Arc::new(Notify::new());
        Inner {
            store: repo.buckets(),
            clock: Arc::clone(repo.clock()),
            ttl_multiplier: i64::from(repo.bucket_ttl_multiplier()),
            repo,
            on_unavailable,
            last_on_unavailable: Mutex::new(None),
            known: Mutex::new(BoundedMap::new(MAX_KNOWN_PAIRS, KNOWN_IDLE)),
            refusals: RefusalReports::new(Arc::clone(&pending), Arc::clone(&settled)),
            pending,
            settled,
            rejections: RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BoundedMap<Pair, Known>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `f` of what is known about the pair, if anything (not counted as a use).
    fn read_known<T>(
        &self,
        entity: &str,
        resource: &str,
        f: impl FnOnce(&Known) -> T,
    ) -> Option<T> {
        self.known().get(&(entity, resource) as &dyn PairRef).map(f)
    }

    /// Changes what is known about the pair (a use), starting from a single shard; returns
    /// what `f` returns.
    fn learn_known<T>(&self, entity: &str, resource: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let now = self.clock.monotonic();
        self.known().get_or_insert_with(
            &(entity, resource) as &dyn PairRef,
            now,
            || {
                let fresh = Known {
                    shard_count: 1,
                    ..Known::default()
                };
                (Pair::new(entity, resource), fresh)
            },
            f,
        )
    }

    pub(super) fn shard_count(&self, entity: &str, resource: &str) -> u32 {
        self.read_known(entity, resource, |k| k.shard_count.max(1))
            .unwrap_or(1)
    }

    /// What a task holds while it splits the bucket of `(entity, resource)`.
    pub(super) fn split_gate(&self, entity: &str, resource: &str) -> Arc<tokio::sync::Mutex<()>> {
        // Evicted with its pair, a gate held by one task may be replaced by a new one; the
        // doubling's own condition still lets only one split land.
        self.learn_known(entity, resource, |k| {
            Arc::clone(k.split_gate.get_or_insert_with(Arc::default))
        })
    }

    /// Records that DynamoDB refused a write to `shard` of the bucket at `now` for
    /// throughput; true when shard 0's refusals are sustained (the bucket should split).
    pub(super) fn throttled(&self, entity: &str, resource: &str, shard: u32, now: i64) -> bool {
        self.learn_known(entity, resource, |k| k.throttling.refused(shard, now))
    }

    /// The shards of the bucket DynamoDB refused for throughput a moment before `now`.
    pub(super) fn throttled_shards(&self, entity: &str, resource: &str, now: i64) -> Vec<u32> {
        self.read_known(entity, resource, |k| k.throttling.avoid(now))
            .unwrap_or_default()
    }

    /// The bucket's shard count and [`Inner::throttled_shards`], in one look-up (what an
    /// acquire draws its shard from).
    pub(super) fn draw_state(&self, entity: &str, resource: &str, now: i64) -> (u32, Vec<u32>) {
        self.read_known(entity, resource, |k| {
            (k.shard_count.max(1), k.throttling.avoid(now))
        })
        .unwrap_or((1, Vec::new()))
    }

    /// Forgets the bucket's throttling: it split.
    pub(super) fn throttling_split(&self, entity: &str, resource: &str) {
        self.learn_known(entity, resource, |k| k.throttling.split());
    }

    pub(super) fn raise_shard_count(&self, entity: &str, resource: &str, count: u32) {
        self.learn_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count)
        });
    }

    /// Learns shard count (only ever up), cascade and parent from an item image.
    pub(super) fn learn(&self, entity: &str, resource: &str, img: &BucketImage) {
        self.learn_known(entity, resource, |k| k.note(img));
    }

    /// [`Inner::learn`], and that the bucket took a write at `now` (a throttled partition
    /// that still takes writes is hot; one that takes none is an outage).
    pub(super) fn learn_served(&self, entity: &str, resource: &str, img: &BucketImage, now: i64) {
        self.learn_known(entity, resource, |k| {
            k.note(img);
            k.throttling.served(now);
        });
    }

    pub(super) fn learn_count(&self, entity: &str, resource: &str, count: u32, owner: &Owner) {
        self.learn_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count);
            k.cascade = owner.cascade;
            k.parent_id.clone_from(&owner.parent_id);
            k.seen = true;
        });
    }

    /// Remembers the limit names a bucket's item declares after a write (`names` sorted).
    pub(super) fn learn_names<'a, I>(&self, entity: &str, resource: &str, names: I)
    where
        I: Iterator<Item = &'a String> + Clone,
    {
        self.learn_known(entity, resource, |k| {
            if k.names
                .as_ref()
                .is_none_or(|known| !known.iter().eq(names.clone()))
            {
                k.names = Some(names.cloned().collect());
            }
        });
    }

    /// How a warm cascade shares `demand` between `child` and `parent`: each bucket is sent
    /// the consumed names its item declares (learnt from this process's last write to it).
    /// `None` when either bucket's names are not known yet, or a consumed name is declared by
    /// neither: the sequential path decides then (a bucket's slow pass seeds a newly
    /// configured limit, and a name no bucket declares is refused before any write).
    pub(super) fn share<'d>(
        &self,
        child: &str,
        parent: &str,
        resource: &str,
        demand: &'d Demand,
    ) -> Option<(Cow<'d, Demand>, Cow<'d, Demand>)> {
        let map = self.known();
        let names = |entity: &str| {
            map.get(&(entity, resource) as &dyn PairRef)?
                .names
                .as_deref()
        };
        let (mine, theirs) = (names(child)?, names(parent)?);
        if demand
            .keys()
            .any(|name| !declares(mine, name) && !declares(theirs, name))
        {
            return None;
        }
        Some((
            part(demand, |name| declares(mine, name)),
            part(demand, |name| declares(theirs, name)),
        ))
    }

    /// What a cascade parent is sent after its child debited `debited`: the consumed names
    /// its item declares (when known) and every name the child did not debit; the whole
    /// demand when its names are not known (its slow pass leaves out the names it does not
    /// declare and the child debited).
    pub(super) fn parent_part<'d>(
        &self,
        parent: &str,
        resource: &str,
        demand: &'d Demand,
        debited: &Demand,
    ) -> Cow<'d, Demand> {
        let map = self.known();
        let Some(names) = map
            .get(&(parent, resource) as &dyn PairRef)
            .and_then(|k| k.names.as_deref())
        else {
            return Cow::Borrowed(demand);
        };
        part(demand, |name| {
            declares(names, name) || !debited.contains_key(name)
        })
    }

    /// The parent to debit concurrently, when the cascade is known.
    pub(super) fn known_parent(&self, entity: &str, resource: &str) -> Option<Option<String>> {
        self.read_known(entity, resource, |k| {
            k.seen.then(|| k.parent_id.clone().filter(|_| k.cascade))
        })
        .flatten()
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

/// Millitokens to consume per limit name.
pub(crate) type Demand = BTreeMap<String, i64>;

/// Whether the sorted `names` hold `name`.
fn declares(names: &[String], name: &str) -> bool {
    names.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
}

/// The part of `demand` whose names `keep` (borrowed when that is all of it).
fn part<'d>(demand: &'d Demand, keep: impl Fn(&str) -> bool) -> Cow<'d, Demand> {
    if demand.keys().all(|name| keep(name)) {
        return Cow::Borrowed(demand);
    }
    Cow::Owned(
        demand
            .iter()
            .filter(|(name, _)| keep(name))
            .map(|(n, m)| (n.clone(), *m))
            .collect(),
    )
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
/// bad input, an invalid request and a corrupt item are what they are; everything else is
/// unavailable.
pub(crate) fn repo_error(entity_id: &str, resource: &str, e: RepositoryError) -> Error {
    match e {
        RepositoryError::PermissionDenied { .. } => Error::PermissionDenied(e),
        RepositoryError::Corrupt { .. } => Error::Corrupt(e),
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

    #[cfg(feature = "memory")]
    #[tokio::test]
    async fn a_million_pairs_keep_the_knowledge_at_its_bound() {
        use dynalimit_core::ManualClock;

        let clock = ManualClock::new(1_700_000_000_000);
        let repo = Repository::builder()
            .in_memory()
            .clock(Arc::new(clock.clone()))
            .open()
            .await
            .unwrap();
        let inner = Inner::new(repo, None);
        let sharded = BucketImage {
            shard_count: 4,
            cascade: true,
            parent_id: Some("parent".into()),
            ..BucketImage::default()
        };
        inner.learn("hot", "r", &sharded);
        let mut most = 0;
        for i in 0..1_000_000 {
            inner.learn(&format!("caller-{i}"), "r", &sharded);
            if i % 10_000 == 0 {
                // The hot pair is used all along.
                inner.learn("hot", "r", &sharded);
            }
            most = most.max(inner.known().len());
        }
        assert!(most <= MAX_KNOWN_PAIRS, "{most} pairs");
        assert_eq!(inner.shard_count("hot", "r"), 4);
        // A forgotten pair is a first acquire again: one shard, the cascade unknown.
        assert_eq!(inner.shard_count("caller-0", "r"), 1);
        assert_eq!(inner.known_parent("caller-0", "r"), None);
        assert_eq!(
            inner.known_parent("hot", "r"),
            Some(Some("parent".to_owned()))
        );
        // Idle pairs go: two turns of the generations later only what was used is left.
        inner.learn("hot", "r", &sharded);
        clock.advance(KNOWN_IDLE);
        inner.learn("fresh", "r", &sharded);
        clock.advance(KNOWN_IDLE);
        inner.learn("hot", "r", &sharded);
        assert_eq!(inner.known().len(), 2, "hot and fresh");
        // Reading is not learning: asking about unknown pairs makes nothing.
        for i in 0..1_000 {
            assert_eq!(inner.shard_count(&format!("stranger-{i}"), "r"), 1);
        }
        assert_eq!(inner.known().len(), 2);
    }

    #[test]
    fn remaining_never_goes_negative() {
        assert_eq!(remaining(1_500, 1_000), Duration::from_millis(500));
        assert_eq!(remaining(1_000, 1_500), Duration::ZERO);
    }
}
