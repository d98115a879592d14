//! The local rejection cache (reference §3.3): the last image of a shard that refused a
//! request, remembered for a short time so that a flood of requests the bucket cannot serve
//! costs no DynamoDB writes.
//!
//! Each use projects the remembered image to now with the refill function
//! ([`remembered_rejection`]), so a remembered shard counts as short only while its own
//! balance, refilled, stays below the request; it is never used to admit. When every shard of
//! the bucket is known short the acquire is refused without a request; when some are, the
//! shard draw avoids them. What this process gives back to a shard (a rollback, a refund, a
//! compensation) or takes from it successfully forgets that shard, a pause it stamps forgets
//! the pair (so that its acquires report the pause); a configuration write
//! through the repository ([`Repository::config_generation`]) forgets everything. A refusal
//! is not remembered when a give-back to its pair landed at or after the moment its acquire
//! began: the refusing image may predate the tokens given back, and a stale refusal would
//! outlive the forgetting that ran before it was remembered. Writes by
//! other processes are seen only when the entry expires: the cost is at most the time to live
//! of refusals this process makes that the table would have admitted (default 1 s).
//!
//! The cache holds at most [`MAX_PAIRS`] (entity, resource) pairs, each with at most
//! [`MAX_SHARD_COUNT`] shards ([`BoundedMap`], its idle time the time to live): under more
//! pairs the least recently refused are forgotten, which costs their next acquire a request.
//! The count of shards a refusal needs is the largest of the limiter's and the remembered
//! images' own, so a pair whose shard count the limiter forgot is never refused for a shard
//! it did not see.
//!
//! [`Repository::config_generation`]: crate::Repository::config_generation

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::bucket::BucketKey;
use crate::bucket::decide::{BucketImage, LimitStatus, remembered_rejection};
use dynalimit_core::Limit;
use dynalimit_core::bounded::{BoundedMap, Pair, PairRef};
use dynalimit_core::bucket::MAX_SHARD_COUNT;

/// How long a shard's refusing image is remembered unless configured otherwise.
pub const DEFAULT_REJECTION_CACHE_TTL: Duration = Duration::from_secs(1);

/// At most this many (entity, resource) pairs are remembered; a full cache forgets the least
/// recently refused first.
pub const MAX_PAIRS: usize = 10_000;

/// When a use happens: the clock's reading (epoch ms) and the repository's configuration
/// generation ([`Repository::config_generation`]).
///
/// [`Repository::config_generation`]: crate::Repository::config_generation
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Moment {
    pub(super) now: i64,
    pub(super) generation: u64,
}

impl Moment {
    /// The reading as the bounded map takes it.
    fn elapsed(self) -> Duration {
        Duration::from_millis(u64::try_from(self.now).unwrap_or(0))
    }
}

/// What the cache says about an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Every shard is known short: refuse with these statuses (the shard that frees first).
    Refuse(Vec<LimitStatus>),
    /// These shards are known short: draw among the others.
    Avoid(Vec<u32>),
    /// Nothing known: go to the table.
    Unknown,
}

struct Remembered {
    image: BucketImage,
    /// Epoch ms after which the entry is not used.
    until: i64,
}

type Shards = BTreeMap<u32, Remembered>;

struct Entries {
    /// (entity, resource) → shard → image, looked up by `(&str, &str)` without allocating
    /// (every acquire looks up while anything is remembered).
    pairs: BoundedMap<Pair, Shards>,
    /// The repository's configuration generation the entries were remembered under.
    generation: u64,
}

impl Entries {
    fn new(ttl_ms: i64) -> Self {
        let idle = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0));
        Entries {
            pairs: BoundedMap::new(MAX_PAIRS, idle),
            generation: 0,
        }
    }
}

/// Slots of [`RejectionCache::gave`]: pairs share a slot by hash, which only makes the cache
/// remember less.
const GIVE_SLOTS: usize = 64;

/// The cache of one limiter (shared by its clones).
pub(super) struct RejectionCache {
    ttl_ms: AtomicI64,
    /// Per slot of (entity, resource) pairs, the latest clock reading (epoch ms) at which a
    /// give-back of this process had landed.
    gave: [AtomicI64; GIVE_SLOTS],
    /// Pairs remembered; zero keeps the common path to one atomic load.
    len: AtomicUsize,
    entries: Mutex<Entries>,
    /// Uses that refused without a request (for tests and metrics).
    refused: AtomicU64,
}

impl std::fmt::Debug for RejectionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejectionCache")
            .field("ttl_ms", &self.ttl_ms.load(Ordering::Relaxed))
            .field("len", &self.len.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RejectionCache {
    pub(super) fn new(ttl: Duration) -> Self {
        let cache = RejectionCache {
            ttl_ms: AtomicI64::new(0),
            gave: std::array::from_fn(|_| AtomicI64::new(i64::MIN)),
            len: AtomicUsize::new(0),
            entries: Mutex::new(Entries::new(0)),
            refused: AtomicU64::new(0),
        };
        cache.set_ttl(ttl);
        cache
    }

    /// Sets the time to live (and forgets everything); zero turns the cache off.
    pub(super) fn set_ttl(&self, ttl: Duration) {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.ttl_ms.store(ms, Ordering::Relaxed);
        let mut entries = self.lock();
        let generation = entries.generation;
        *entries = Entries {
            generation,
            ..Entries::new(ms)
        };
        self.len.store(0, Ordering::Relaxed);
    }

    pub(super) fn ttl(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.ttl_ms.load(Ordering::Relaxed)).unwrap_or(0))
    }

    /// How many acquires were refused from the cache, without a request.
    pub(super) fn refusals(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts the pairs held after a change.
    fn counted(&self, entries: &Entries) {
        self.len.store(entries.pairs.len(), Ordering::Relaxed);
    }

    /// What is known about `demand` (with the acquire's explicit `limits`, if any) on the
    /// `shard_count` shards of (entity, resource).
    pub(super) fn check(
        &self,
        pair: (&str, &str),
        shard_count: u32,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
        at: Moment,
    ) -> Verdict {
        let now = at.now;
        if self.len.load(Ordering::Relaxed) == 0 {
            return Verdict::Unknown;
        }
        let mut entries = self.lock();
        if entries.generation != at.generation {
            self.forget_all(&mut entries, at.generation);
            return Verdict::Unknown;
        }
        entries.pairs.expire(at.elapsed());
        let key = &pair as &dyn PairRef;
        let found = entries.pairs.get_mut(key, at.elapsed(), |shards| {
            shards.retain(|_, r| r.until > now);
            // A count the limiter forgot (or never learnt) is no reason to refuse: the images
            // say how many shards they saw.
            let count = shards
                .values()
                .map(|r| r.image.shards())
                .fold(shard_count, u32::max);
            let mut short = Vec::new();
            let mut soonest: Option<Vec<LimitStatus>> = None;
            for (&shard, r) in shards.iter() {
                if shard >= count {
                    continue;
                }
                if let Some(statuses) = remembered_rejection(&r.image, demand, limits, now) {
                    short.push(shard);
                    let wait = |s: &[LimitStatus]| s.iter().map(|s| s.retry_after_ms).max();
                    if soonest
                        .as_deref()
                        .is_none_or(|best| wait(&statuses) < wait(best))
                    {
                        soonest = Some(statuses);
                    }
                }
            }
            (shards.is_empty(), short, soonest, count)
        });
        let Some((empty, short, soonest, count)) = found else {
            self.counted(&entries);
            return Verdict::Unknown;
        };
        if empty {
            entries.pairs.remove(key);
        }
        self.counted(&entries);
        match soonest {
            Some(statuses) if short.len() as u32 >= count => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Verdict::Refuse(statuses)
            }
            _ if short.is_empty() => Verdict::Unknown,
            _ => Verdict::Avoid(short),
        }
    }

    /// Remembers the image the shard of `key` refused `demand` with, when it can refuse on
    /// its own.
    pub(super) fn remember(
        &self,
        key: &BucketKey,
        image: &BucketImage,
        demand: &BTreeMap<String, i64>,
        at: Moment,
    ) {
        let Moment { now, generation } = at;
        let ttl = self.ttl_ms.load(Ordering::Relaxed);
        if ttl <= 0
            || key.shard >= MAX_SHARD_COUNT
            || remembered_rejection(image, demand, None, now).is_none()
        {
            return;
        }
        if self.gave[give_slot(&key.entity_id, &key.resource)].load(Ordering::Acquire) >= now {
            return;
        }
        let mut entries = self.lock();
        if entries.generation != generation {
            self.forget_all(&mut entries, generation);
        }
        let remembered = Remembered {
            image: image.clone(),
            until: now.saturating_add(ttl),
        };
        let pair = (key.entity_id.as_str(), key.resource.as_str());
        entries.pairs.get_or_insert_with(
            &pair as &dyn PairRef,
            at.elapsed(),
            || (Pair::new(pair.0, pair.1), Shards::new()),
            |shards| shards.insert(key.shard, remembered),
        );
        self.counted(&entries);
    }

    /// Forgets the shard of `key` (this process changed its balance).
    pub(super) fn forget(&self, key: &BucketKey) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut entries = self.lock();
        let pair = (key.entity_id.as_str(), key.resource.as_str());
        let pair = &pair as &dyn PairRef;
        let emptied = entries.pairs.peek_mut(pair).is_some_and(|shards| {
            shards.remove(&key.shard);
            shards.is_empty()
        });
        if emptied {
            entries.pairs.remove(pair);
        }
        self.counted(&entries);
    }

    /// Records that a give-back to the shard of `key` (a rollback, a commit's credit, a
    /// compensation) had landed by `landed` (a clock reading taken after its answer, or after
    /// its answer was lost), and forgets the shard again: a refusal read before it landed may
    /// have been remembered since the forgetting that ran when it was sent.
    pub(super) fn gave_back(&self, key: &BucketKey, landed: i64) {
        self.gave[give_slot(&key.entity_id, &key.resource)].fetch_max(landed, Ordering::AcqRel);
        self.forget(key);
    }

    /// Forgets every shard of (entity, resource).
    pub(super) fn forget_pair(&self, entity: &str, resource: &str) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut entries = self.lock();
        entries.pairs.remove(&(entity, resource) as &dyn PairRef);
        self.counted(&entries);
    }

    fn forget_all(&self, entries: &mut Entries, generation: u64) {
        entries.pairs.clear();
        entries.generation = generation;
        self.len.store(0, Ordering::Relaxed);
    }
}

/// The slot of [`RejectionCache::gave`] for (entity, resource).
fn give_slot(entity: &str, resource: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (entity, resource).hash(&mut h);
    (h.finish() % GIVE_SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use crate::bucket::decide::{LimitState, Plan, Stamps, plan_create};

    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn at(now: i64, generation: u64) -> Moment {
        Moment { now, generation }
    }

    fn key(entity: &str, shard: u32) -> BucketKey {
        BucketKey::new(entity, "r", shard)
    }

    fn demand(n: i64) -> BTreeMap<String, i64> {
        [("rpm".to_owned(), n * 1000)].into()
    }

    /// A shard of `shards` holding `tokens` of rpm 60, read at `T0`.
    fn image(tokens: i64, shards: u32) -> BucketImage {
        let limits = [Limit::per_minute("rpm", 60)];
        let Plan::Write(p) = plan_create(
            &limits,
            &BTreeMap::new(),
            shards,
            0,
            T0,
            None,
            &Stamps::default(),
        ) else {
            panic!("a create")
        };
        let mut img = BucketImage {
            rf: p.rf,
            shard_count: shards,
            ..BucketImage::default()
        };
        let mut state = LimitState::starting(&limits[0], shards, 0);
        state.tk = tokens * 1000;
        img.limits.insert("rpm".into(), state);
        img
    }

    #[test]
    fn every_shard_short_refuses_some_short_are_avoided() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        assert_eq!(
            cache.check(("e", "r"), 2, &demand(1), None, at(T0, 0)),
            Verdict::Unknown
        );
        cache.remember(&key("e", 1), &image(0, 2), &demand(1), at(T0, 0));
        assert_eq!(
            cache.check(("e", "r"), 2, &demand(1), None, at(T0, 0)),
            Verdict::Avoid(vec![1])
        );
        cache.remember(&key("e", 0), &image(0, 2), &demand(1), at(T0, 0));
        let Verdict::Refuse(statuses) =
            cache.check(("e", "r"), 2, &demand(1), None, at(T0 + 10, 0))
        else {
            panic!("both shards are short")
        };
        assert!(statuses[0].exceeded);
        assert_eq!(cache.refusals(), 1);
        // Another pair, and a count that grew past what is known, are not refused.
        assert_eq!(
            cache.check(("x", "r"), 2, &demand(1), None, at(T0, 0)),
            Verdict::Unknown
        );
        assert_eq!(
            cache.check(("e", "r"), 4, &demand(1), None, at(T0, 0)),
            Verdict::Avoid(vec![0, 1])
        );
    }

    #[test]
    fn refill_expiry_forgetting_and_configuration_writes_end_a_refusal() {
        let cache = RejectionCache::new(Duration::from_millis(1000));
        let spent = image(0, 1);
        cache.remember(&key("e", 0), &spent, &demand(1), at(T0, 7));
        assert!(matches!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0 + 500, 7)),
            Verdict::Refuse(_)
        ));
        // Two tokens take two seconds to refill, but the entry lives one.
        cache.remember(&key("e", 0), &spent, &demand(2), at(T0, 7));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(2), None, at(T0 + 1000, 7)),
            Verdict::Unknown
        );
        assert_eq!(cache.len.load(Ordering::Relaxed), 0);
        // Refill projected: one token is back after a second, whatever the ttl.
        let cache = RejectionCache::new(Duration::from_secs(10));
        cache.remember(&key("e", 0), &spent, &demand(1), at(T0, 7));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0 + 1001, 7)),
            Verdict::Unknown
        );
        // Forgetting the shard, or a configuration write, ends it at once.
        cache.forget(&key("e", 0));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0, 7)),
            Verdict::Unknown
        );
        cache.remember(&key("e", 0), &spent, &demand(1), at(T0, 7));
        cache.forget_pair("e", "r");
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0, 7)),
            Verdict::Unknown
        );
        cache.remember(&key("e", 0), &spent, &demand(1), at(T0, 7));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0, 8)),
            Verdict::Unknown
        );
        assert_eq!(cache.len.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_refusal_read_before_a_give_back_landed_is_not_remembered() {
        let cache = RejectionCache::new(Duration::from_secs(10));
        let spent = image(0, 1);
        // The give-back's forgetting ran first, then it landed at T0 + 5: an acquire that
        // began at T0 + 5 or earlier may have read the balance before it.
        cache.forget(&key("e", 0));
        cache.gave_back(&key("e", 0), T0 + 5);
        for began in [T0, T0 + 5] {
            cache.remember(&key("e", 0), &spent, &demand(1), at(began, 0));
            assert_eq!(cache.len.load(Ordering::Relaxed), 0, "began at {began}");
        }
        // Another pair (unless it shares the slot) and a later acquire are remembered.
        let other = BucketKey::new("f", "r", 0);
        if give_slot("f", "r") != give_slot("e", "r") {
            cache.remember(&other, &spent, &demand(1), at(T0, 0));
            assert_eq!(cache.len.load(Ordering::Relaxed), 1);
            cache.forget(&other);
        }
        cache.remember(&key("e", 0), &spent, &demand(1), at(T0 + 6, 0));
        assert!(matches!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0 + 6, 0)),
            Verdict::Refuse(_)
        ));
        // A give-back landing later forgets the remembered refusal.
        cache.gave_back(&key("e", 0), T0 + 7);
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0 + 7, 0)),
            Verdict::Unknown
        );
    }

    #[test]
    fn only_refusing_images_are_kept_and_a_zero_ttl_keeps_none() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        cache.remember(&key("e", 0), &image(5, 1), &demand(1), at(T0, 0));
        assert_eq!(cache.len.load(Ordering::Relaxed), 0, "it had tokens");
        cache.remember(&key("e", 0), &image(0, 1), &demand(1), at(T0, 0));
        assert_eq!(cache.len.load(Ordering::Relaxed), 1);
        cache.set_ttl(Duration::ZERO);
        assert_eq!(cache.len.load(Ordering::Relaxed), 0);
        cache.remember(&key("e", 0), &image(0, 1), &demand(1), at(T0, 0));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0, 0)),
            Verdict::Unknown
        );
    }

    #[test]
    fn a_full_cache_forgets_the_least_recently_refused_pairs() {
        let cache = RejectionCache::new(Duration::from_secs(3600));
        for i in 0..MAX_PAIRS as i64 {
            cache.remember(
                &key(&format!("e{i}"), 0),
                &image(0, 1),
                &demand(1),
                at(T0, 0),
            );
        }
        assert_eq!(cache.len.load(Ordering::Relaxed), MAX_PAIRS);
        cache.remember(&key("new", 0), &image(0, 1), &demand(1), at(T0, 0));
        assert!(cache.len.load(Ordering::Relaxed) <= MAX_PAIRS);
        assert_eq!(
            cache.check(("e0", "r"), 1, &demand(1), None, at(T0, 0)),
            Verdict::Unknown,
            "the oldest went"
        );
        assert!(matches!(
            cache.check(("new", "r"), 1, &demand(1), None, at(T0, 0)),
            Verdict::Refuse(_)
        ));
    }

    #[test]
    fn a_million_refused_pairs_stay_within_the_bound() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        let base = image(0, 1);
        let mut most = 0;
        for i in 0..1_000_000_i64 {
            // A thousand refusals a second, each on a pair of its own, read as it refused.
            let when = T0 + i;
            let spent = BucketImage {
                rf: when,
                ..base.clone()
            };
            cache.remember(
                &key(&format!("caller-{i}"), 0),
                &spent,
                &demand(1),
                at(when, 0),
            );
            most = most.max(cache.len.load(Ordering::Relaxed));
        }
        assert!(most <= MAX_PAIRS, "{most} pairs");
        let held = cache.lock().pairs.len();
        assert!(
            held <= 2_000,
            "about two seconds of refusals are held: {held}"
        );
    }

    #[test]
    fn a_forgotten_shard_count_never_refuses_for_shards_unseen() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        // Shard 0 of a four-shard bucket refused; the limiter's own count is gone (1).
        cache.remember(&key("e", 0), &image(0, 4), &demand(1), at(T0, 0));
        assert_eq!(
            cache.check(("e", "r"), 1, &demand(1), None, at(T0, 0)),
            Verdict::Avoid(vec![0]),
            "three shards the cache knows nothing of may serve"
        );
    }

    #[test]
    fn shards_past_the_largest_count_are_not_remembered() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        cache.remember(
            &key("e", MAX_SHARD_COUNT),
            &image(0, 1),
            &demand(1),
            at(T0, 0),
        );
        assert_eq!(cache.len.load(Ordering::Relaxed), 0);
    }
}
