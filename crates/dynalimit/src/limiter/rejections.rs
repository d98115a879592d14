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
//! through the repository ([`Repository::config_generation`]) forgets everything. Writes by
//! other processes are seen only when the entry expires: the cost is at most the time to live
//! of refusals this process makes that the table would have admitted (default 1 s).
//!
//! [`Repository::config_generation`]: dynalimit_repository::Repository::config_generation

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dynalimit_core::Limit;
use dynalimit_core::decide::{BucketImage, LimitStatus, remembered_rejection};
use dynalimit_repository::bucket::BucketKey;

/// How long a shard's refusing image is remembered unless configured otherwise.
pub const DEFAULT_REJECTION_CACHE_TTL: Duration = Duration::from_secs(1);

/// At most this many shards are remembered; a full cache forgets its oldest entries first.
pub(super) const MAX_ENTRIES: usize = 10_000;

/// When a use happens: the clock's reading (epoch ms) and the repository's configuration
/// generation ([`Repository::config_generation`]).
///
/// [`Repository::config_generation`]: dynalimit_repository::Repository::config_generation
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Moment {
    pub(super) now: i64,
    pub(super) generation: u64,
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

#[derive(Default)]
struct Entries {
    /// entity → resource → shard → image: two levels, so that a look-up by `&str` allocates
    /// nothing (every acquire looks up while anything is remembered).
    pairs: HashMap<String, HashMap<String, Shards>>,
    /// The repository's configuration generation the entries were remembered under.
    generation: u64,
}

impl Entries {
    fn shards(&mut self, entity: &str, resource: &str) -> Option<&mut Shards> {
        self.pairs.get_mut(entity)?.get_mut(resource)
    }

    /// Removes the pair's shards (all of them, or only when none is left); returns how many
    /// were removed.
    fn remove_pair(&mut self, entity: &str, resource: &str, only_if_empty: bool) -> usize {
        let Some(resources) = self.pairs.get_mut(entity) else {
            return 0;
        };
        let removed = match resources.get(resource) {
            Some(shards) if !only_if_empty || shards.is_empty() => shards.len(),
            _ => return 0,
        };
        resources.remove(resource);
        if resources.is_empty() {
            self.pairs.remove(entity);
        }
        removed
    }
}

/// The cache of one limiter (shared by its clones).
pub(super) struct RejectionCache {
    ttl_ms: AtomicI64,
    /// Shards remembered; zero keeps the common path to one atomic load.
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
            len: AtomicUsize::new(0),
            entries: Mutex::new(Entries::default()),
            refused: AtomicU64::new(0),
        };
        cache.set_ttl(ttl);
        cache
    }

    /// Sets the time to live; zero turns the cache off (and forgets everything).
    pub(super) fn set_ttl(&self, ttl: Duration) {
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self.ttl_ms.store(ms, Ordering::Relaxed);
        if ms == 0 {
            self.clear();
        }
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

    /// What is known about `demand` (with the acquire's explicit `limits`, if any) on the
    /// `shard_count` shards of (entity, resource).
    pub(super) fn check(
        &self,
        (entity, resource): (&str, &str),
        shard_count: u32,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
        at: Moment,
    ) -> Verdict {
        let Moment { now, generation } = at;
        if self.len.load(Ordering::Relaxed) == 0 {
            return Verdict::Unknown;
        }
        let mut entries = self.lock();
        if entries.generation != generation {
            self.forget_all(&mut entries, generation);
            return Verdict::Unknown;
        }
        let Some(shards) = entries.shards(entity, resource) else {
            return Verdict::Unknown;
        };
        let before = shards.len();
        shards.retain(|_, r| r.until > now);
        let expired = before - shards.len();
        let mut short = Vec::new();
        let mut soonest: Option<Vec<LimitStatus>> = None;
        for (&shard, r) in shards.iter() {
            if shard >= shard_count {
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
        entries.remove_pair(entity, resource, true);
        if expired > 0 {
            self.len.fetch_sub(expired, Ordering::Relaxed);
        }
        match soonest {
            Some(statuses) if short.len() as u32 >= shard_count => {
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
        if ttl <= 0 || remembered_rejection(image, demand, None, now).is_none() {
            return;
        }
        let mut entries = self.lock();
        if entries.generation != generation {
            self.forget_all(&mut entries, generation);
        }
        if self.len.load(Ordering::Relaxed) >= MAX_ENTRIES {
            self.evict_oldest(&mut entries);
        }
        let remembered = Remembered {
            image: image.clone(),
            until: now.saturating_add(ttl),
        };
        let shards = entries
            .pairs
            .entry(key.entity_id.clone())
            .or_default()
            .entry(key.resource.clone())
            .or_default();
        if shards.insert(key.shard, remembered).is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets the shard of `key` (this process changed its balance).
    pub(super) fn forget(&self, key: &BucketKey) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut entries = self.lock();
        if let Some(shards) = entries.shards(&key.entity_id, &key.resource)
            && shards.remove(&key.shard).is_some()
        {
            self.len.fetch_sub(1, Ordering::Relaxed);
            entries.remove_pair(&key.entity_id, &key.resource, true);
        }
    }

    /// Forgets every shard of (entity, resource).
    pub(super) fn forget_pair(&self, entity: &str, resource: &str) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let removed = self.lock().remove_pair(entity, resource, false);
        self.len.fetch_sub(removed, Ordering::Relaxed);
    }

    fn clear(&self) {
        let mut entries = self.lock();
        let generation = entries.generation;
        self.forget_all(&mut entries, generation);
    }

    fn forget_all(&self, entries: &mut Entries, generation: u64) {
        entries.pairs.clear();
        entries.generation = generation;
        self.len.store(0, Ordering::Relaxed);
    }

    /// Drops the entry that expires first (a full cache).
    fn evict_oldest(&self, entries: &mut Entries) {
        let oldest = entries
            .pairs
            .iter()
            .flat_map(|(entity, resources)| {
                resources.iter().flat_map(move |(resource, shards)| {
                    shards
                        .iter()
                        .map(move |(shard, r)| (r.until, entity, resource, *shard))
                })
            })
            .min_by_key(|(until, ..)| *until)
            .map(|(_, entity, resource, shard)| (entity.clone(), resource.clone(), shard));
        if let Some((entity, resource, shard)) = oldest
            && let Some(shards) = entries.shards(&entity, &resource)
            && shards.remove(&shard).is_some()
        {
            self.len.fetch_sub(1, Ordering::Relaxed);
            entries.remove_pair(&entity, &resource, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use dynalimit_core::decide::{LimitState, Plan, Stamps, plan_create};

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
    fn a_full_cache_forgets_the_entry_that_expires_first() {
        let cache = RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL);
        let read_at = |rf: i64| BucketImage { rf, ..image(0, 1) };
        for i in 0..MAX_ENTRIES as i64 {
            let when = T0 + i;
            cache.remember(
                &key(&format!("e{i}"), 0),
                &read_at(when),
                &demand(1),
                at(when, 0),
            );
        }
        assert_eq!(cache.len.load(Ordering::Relaxed), MAX_ENTRIES);
        let when = T0 + 20_000;
        cache.remember(&key("new", 0), &read_at(when), &demand(1), at(when, 0));
        assert_eq!(cache.len.load(Ordering::Relaxed), MAX_ENTRIES);
        assert_eq!(
            cache.check(("e0", "r"), 1, &demand(1), None, at(T0 + 1, 0)),
            Verdict::Unknown,
            "the oldest went"
        );
        assert!(matches!(
            cache.check(("new", "r"), 1, &demand(1), None, at(T0 + 20_001, 0)),
            Verdict::Refuse(_)
        ));
    }
}
