//! What one limiter learnt about each bucket it used: shard count, cascade and parent, the
//! limit names its item declares after this process's last write, what DynamoDB refused of it
//! for throughput, and the gate a split holds.
//!
//! What was learnt is kept for at most [`MAX_KNOWN_PAIRS`] (entity, resource) pairs, and a
//! pair no acquire used for [`KNOWN_IDLE`] may be forgotten ([`BoundedMap`]). A forgotten pair
//! costs its next acquire what a first one costs: it draws shard 0 (which every bucket has)
//! and learns the count from the item, and it learns the cascade before debiting a parent.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::bounded::{BoundedMap, Pair, PairRef};
use dynalimit_core::{Clock, Limit};

use crate::bucket::Owner;
use crate::bucket::decide::BucketImage;
use crate::bucket::throttling::Throttling;

/// At most this many (entity, resource) pairs are known; beyond it the least recently used
/// are forgotten.
pub const MAX_KNOWN_PAIRS: usize = 100_000;
/// What was learnt about a pair that no acquire used for this long may be forgotten (while
/// other pairs are learnt, it is gone within twice as long).
pub const KNOWN_IDLE: Duration = Duration::from_secs(15 * 60);

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

/// What one limiter learnt about the buckets it used, per (entity, resource) pair (looked up
/// without allocating), bounded ([`MAX_KNOWN_PAIRS`], [`KNOWN_IDLE`]).
pub struct Knowledge {
    map: Mutex<BoundedMap<Pair, Known>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Knowledge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Knowledge")
            .field("pairs", &self.known().len())
            .finish_non_exhaustive()
    }
}

impl Knowledge {
    /// Nothing known yet; idle time is read from `clock`.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Knowledge {
            map: Mutex::new(BoundedMap::new(MAX_KNOWN_PAIRS, KNOWN_IDLE)),
            clock,
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BoundedMap<Pair, Known>> {
        self.map
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

    pub(crate) fn shard_count(&self, entity: &str, resource: &str) -> u32 {
        self.read_known(entity, resource, |k| k.shard_count.max(1))
            .unwrap_or(1)
    }

    /// What a task holds while it splits the bucket of `(entity, resource)`.
    pub(crate) fn split_gate(&self, entity: &str, resource: &str) -> Arc<tokio::sync::Mutex<()>> {
        // Evicted with its pair, a gate held by one task may be replaced by a new one; the
        // doubling's own condition still lets only one split land.
        self.learn_known(entity, resource, |k| {
            Arc::clone(k.split_gate.get_or_insert_with(Arc::default))
        })
    }

    /// Records that DynamoDB refused a write to `shard` of the bucket at `now` for
    /// throughput; true when shard 0's refusals are sustained (the bucket should split).
    pub(crate) fn throttled(&self, entity: &str, resource: &str, shard: u32, now: i64) -> bool {
        self.learn_known(entity, resource, |k| k.throttling.refused(shard, now))
    }

    /// The shards of the bucket DynamoDB refused for throughput a moment before `now`.
    pub(crate) fn throttled_shards(&self, entity: &str, resource: &str, now: i64) -> Vec<u32> {
        self.read_known(entity, resource, |k| k.throttling.avoid(now))
            .unwrap_or_default()
    }

    /// The bucket's shard count and [`Knowledge::throttled_shards`], in one look-up (what an
    /// acquire draws its shard from).
    pub(crate) fn draw_state(&self, entity: &str, resource: &str, now: i64) -> (u32, Vec<u32>) {
        self.read_known(entity, resource, |k| {
            (k.shard_count.max(1), k.throttling.avoid(now))
        })
        .unwrap_or((1, Vec::new()))
    }

    /// Forgets the bucket's throttling: it split.
    pub(crate) fn throttling_split(&self, entity: &str, resource: &str) {
        self.learn_known(entity, resource, |k| k.throttling.split());
    }

    pub(crate) fn raise_shard_count(&self, entity: &str, resource: &str, count: u32) {
        self.learn_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count)
        });
    }

    /// Learns shard count (only ever up), cascade and parent from an item image.
    pub(crate) fn learn(&self, entity: &str, resource: &str, img: &BucketImage) {
        self.learn_known(entity, resource, |k| k.note(img));
    }

    /// [`Knowledge::learn`], and that the bucket took a write at `now` (a throttled partition
    /// that still takes writes is hot; one that takes none is an outage).
    pub(crate) fn learn_served(&self, entity: &str, resource: &str, img: &BucketImage, now: i64) {
        self.learn_known(entity, resource, |k| {
            k.note(img);
            k.throttling.served(now);
        });
    }

    pub(crate) fn learn_count(&self, entity: &str, resource: &str, count: u32, owner: &Owner) {
        self.learn_known(entity, resource, |k| {
            k.shard_count = k.shard_count.max(count);
            k.cascade = owner.cascade;
            k.parent_id.clone_from(&owner.parent_id);
            k.seen = true;
        });
    }

    /// Remembers the limit names a bucket's item declares after a write (`names` sorted).
    pub(crate) fn learn_names<'a, I>(&self, entity: &str, resource: &str, names: I)
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
    pub fn share<'d>(
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
    pub fn parent_part<'d>(
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
    pub fn known_parent(&self, entity: &str, resource: &str) -> Option<Option<String>> {
        self.read_known(entity, resource, |k| {
            k.seen.then(|| k.parent_id.clone().filter(|_| k.cascade))
        })
        .flatten()
    }
}

/// Millitokens to consume per limit name.
pub type Demand = BTreeMap<String, i64>;

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
pub fn unknown_name<'a>(demand: &'a BTreeMap<String, i64>, limits: &[Limit]) -> Option<&'a String> {
    demand
        .keys()
        .find(|name| !limits.iter().any(|l| l.name() == name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_pairs_keep_the_knowledge_at_its_bound() {
        use dynalimit_core::ManualClock;

        let clock = ManualClock::new(1_700_000_000_000);
        let engine = Knowledge::new(Arc::new(clock.clone()));
        let sharded = BucketImage {
            shard_count: 4,
            cascade: true,
            parent_id: Some("parent".into()),
            ..BucketImage::default()
        };
        engine.learn("hot", "r", &sharded);
        let mut most = 0;
        for i in 0..1_000_000 {
            engine.learn(&format!("caller-{i}"), "r", &sharded);
            if i % 10_000 == 0 {
                // The hot pair is used all along.
                engine.learn("hot", "r", &sharded);
            }
            most = most.max(engine.known().len());
        }
        assert!(most <= MAX_KNOWN_PAIRS, "{most} pairs");
        assert_eq!(engine.shard_count("hot", "r"), 4);
        // A forgotten pair is a first acquire again: one shard, the cascade unknown.
        assert_eq!(engine.shard_count("caller-0", "r"), 1);
        assert_eq!(engine.known_parent("caller-0", "r"), None);
        assert_eq!(
            engine.known_parent("hot", "r"),
            Some(Some("parent".to_owned()))
        );
        // Idle pairs go: two turns of the generations later only what was used is left.
        engine.learn("hot", "r", &sharded);
        clock.advance(KNOWN_IDLE);
        engine.learn("fresh", "r", &sharded);
        clock.advance(KNOWN_IDLE);
        engine.learn("hot", "r", &sharded);
        assert_eq!(engine.known().len(), 2, "hot and fresh");
        // Reading is not learning: asking about unknown pairs makes nothing.
        for i in 0..1_000 {
            assert_eq!(engine.shard_count(&format!("stranger-{i}"), "r"), 1);
        }
        assert_eq!(engine.known().len(), 2);
    }
}
