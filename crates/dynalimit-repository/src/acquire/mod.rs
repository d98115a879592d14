//! One bucket owner's acquire (reference §3.4–§3.8): the shard draw, the warm debit, and after
//! a failure the decision from the image it returned (probes, the slow pass, a create, a
//! split). [`Engine`] is the seam: the `dynalimit` crate's limiter layers the cascade, leases
//! and the public API on top, and calls nothing of [`crate::bucket`] itself.
//!
//! The engine plans with `bucket::decide` (no I/O) and writes through
//! [`BucketStore`]. It keeps what it learnt of each bucket
//! ([`Knowledge`]) and the rejection cache (`rejections`).

use std::collections::BTreeMap;
use std::sync::Arc;

use dynalimit_core::bucket::{MAX_SHARD_COUNT, bucket_ttl};
use dynalimit_core::limit::MILLI;
use dynalimit_core::schedule::{ResetSchedule, Schedule};
use dynalimit_core::{Clock, Limit};
use dynalimit_format::config::{self, ConfigLevel, LimitConfig, walk};
use rand::Rng;

use crate::bucket::decide::{
    BucketImage, CreatePlan, DeltaPlan, FastFailure, Gate, LimitState, LimitStatus, Plan, QuotaPin,
    QuotaState, Stamps, TtlAction, WcuDecision, WindowState, admitted_status,
    classify_fast_failure, consumption_retry, debit_beyond_ceiling, decide_wcu_exhaustion,
    fast_rejection_gate, plan_bypass_refund, plan_counted, plan_create, plan_delta, plan_funding,
    plan_materialise, plan_refill, plan_refund, shard_in, stamp_deadline, statuses_from_image,
};
use crate::bucket::throttling::decide_throttling;
use crate::bucket::{
    BucketKey, BucketStore, ConsumeOutcome, CreateOutcome, MetaCheck, OnThrottle, RefillOutcome,
    SlowRead, live_windows_of,
};

mod known;
mod rejections;

use crate::{Repository, RepositoryError};
pub use known::{Demand, KNOWN_IDLE, Knowledge, MAX_KNOWN_PAIRS, unknown_name};
pub use rejections::{DEFAULT_REJECTION_CACHE_TTL, MAX_PAIRS as MAX_REFUSED_PAIRS};
use rejections::{Moment, RejectionCache, Verdict};

/// One limiter's acquire against the table (reference §3.4–§3.8): what it learnt of each
/// bucket, its rejection cache, and the bucket store it writes through. The limiter of the
/// `dynalimit` crate holds one and layers leases, cascades and the public API on it.
pub struct Engine {
    store: BucketStore,
    clock: Arc<dyn Clock>,
    ttl_multiplier: i64,
    repo: Repository,
    /// What the items said of each bucket.
    known: Knowledge,
    rejections: RejectionCache,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("namespace_id", &self.store.namespace_id())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The engine of a limiter on `repo`'s namespace.
    pub fn new(repo: Repository) -> Self {
        Engine {
            store: repo.buckets(),
            clock: Arc::clone(repo.clock()),
            known: Knowledge::new(Arc::clone(repo.clock())),
            ttl_multiplier: i64::from(repo.bucket_ttl_multiplier()),
            repo,
            rejections: RejectionCache::new(DEFAULT_REJECTION_CACHE_TTL),
        }
    }

    /// What this engine learnt of the buckets it used (a cascade's shape and names).
    pub fn known(&self) -> &Knowledge {
        &self.known
    }

    /// How long a refusing shard's image is remembered ([`DEFAULT_REJECTION_CACHE_TTL`]
    /// unless set); zero remembers none.
    pub fn set_rejection_ttl(&self, ttl: std::time::Duration) {
        self.rejections.set_ttl(ttl);
    }

    /// The rejection cache's time to live.
    pub fn rejection_ttl(&self) -> std::time::Duration {
        self.rejections.ttl()
    }

    /// Acquires the rejection cache refused without a request.
    pub fn rejection_refusals(&self) -> u64 {
        self.rejections.refusals()
    }

    /// Stamps a pause until `until` (epoch ms) on every shard of `(entity, resource)`
    /// ([`BucketStore::stamp_pause`]) and forgets the refusals remembered for the pair, so
    /// that this process's acquires report the pause.
    ///
    /// # Errors
    /// As [`BucketStore::stamp_pause`].
    pub async fn stamp_pause(
        &self,
        entity: &str,
        resource: &str,
        until: i64,
        now: i64,
    ) -> Result<Option<i64>, RepositoryError> {
        let stamped = self.store.stamp_pause(entity, resource, until, now).await;
        self.rejections.forget_pair(entity, resource);
        stamped
    }

    /// The pause stamped on `(entity, resource)`'s bucket ([`BucketStore::read_pause`]).
    ///
    /// # Errors
    /// As [`BucketStore::read_pause`].
    pub async fn read_pause(
        &self,
        entity: &str,
        resource: &str,
        now: i64,
    ) -> Result<Option<i64>, RepositoryError> {
        self.store.read_pause(entity, resource, now).await
    }

    /// The statuses of `limits` on `entity`'s bucket for `resource` against `needed`
    /// millitokens, as its shards' items stand at `now` (no write).
    ///
    /// The inner error is the reason an item cannot be read by this client (a feature it does
    /// not implement).
    ///
    /// # Errors
    /// When the items cannot be read.
    pub async fn availability(
        &self,
        entity: &str,
        resource: &str,
        limits: &[Limit],
        needed: &BTreeMap<String, i64>,
        now: i64,
    ) -> Result<Result<Vec<LimitStatus>, String>, RepositoryError> {
        let images: Vec<BucketImage> = self
            .store
            .entity_buckets(entity)
            .await?
            .into_iter()
            .filter(|(k, _)| k.resource == resource)
            .map(|(_, img)| img)
            .collect();
        if let Some(reason) = images.iter().find_map(BucketImage::unsupported_reason) {
            return Ok(Err(reason));
        }
        Ok(Ok(crate::bucket::decide::availability(
            &images, limits, needed, now,
        )))
    }
}

/// What one owner's debit produced: the bucket, what was debited, and the image's view of its
/// limits (what a lease's statuses and credits are computed from).
#[derive(Debug, Clone)]
pub struct Entry {
    pub(crate) key: BucketKey,
    /// Millitokens debited per declared limit.
    pub(crate) consumed: BTreeMap<String, i64>,
    /// The lease's view of the limits (capacity) for credit guards.
    pub(crate) states: BTreeMap<String, LimitState>,
    /// The parameter schedules of those limits (their ceilings at a given time).
    pub(crate) schedules: BTreeMap<String, Schedule>,
    /// The quotas among them: their reset schedules and what a credit is pinned on.
    pub(crate) resets: BTreeMap<String, ResetSchedule>,
    pub(crate) quotas: BTreeMap<String, QuotaPin>,
    /// Session quotas' window lengths, seconds.
    pub(crate) windows: BTreeMap<String, i64>,
    pub(crate) shard_count: u32,
    /// Owner stamp of the item: cascade policy and parent.
    pub(crate) cascade: bool,
    pub(crate) parent_id: Option<String>,
    /// Declared soft limits this debit left below zero.
    pub(crate) overdrawn: Vec<String>,
    /// The item is bypassed (reference §12.1): only `tc` counts this debit, and the lease's
    /// credits move only `tc`.
    pub(crate) bypassed: bool,
    /// The balances were debited by an enforcing write on an item found bypassed: they are
    /// given back before the entry is handed out.
    pub(crate) refund: bool,
}

impl Entry {
    /// The shard debited.
    pub fn key(&self) -> &BucketKey {
        &self.key
    }

    /// Millitokens debited per limit name.
    pub fn consumed(&self) -> &BTreeMap<String, i64> {
        &self.consumed
    }

    /// The item was bypassed (reference §12.1): only its `tc` counted the debit.
    pub fn bypassed(&self) -> bool {
        self.bypassed
    }

    /// The declared soft limits this debit left below zero.
    pub fn overdrawn(&self) -> &[String] {
        &self.overdrawn
    }

    /// The parent the item's owner cascades to, if it does.
    pub fn cascade_parent(&self) -> Option<&str> {
        self.parent_id.as_deref().filter(|_| self.cascade)
    }

    /// Limit `name`'s status on the shard at `now`, after the debit of `consumed` millitokens
    /// and `adjusted` more taken since (negative: given back); `None` when the item does not
    /// hold the limit.
    pub fn status_after(
        &self,
        name: &str,
        consumed: i64,
        adjusted: i64,
        now: i64,
    ) -> Option<LimitStatus> {
        let mut after = *self.states.get(name)?;
        after.tk = after.tk.saturating_sub(adjusted);
        let schedule = (
            self.schedules.get(name),
            self.resets.get(name),
            self.windows.get(name).copied(),
        );
        let mut st = admitted_status(
            name,
            &after,
            schedule,
            self.shard_count,
            consumed + adjusted,
            now,
        );
        st.overdrawn = self.overdrawn.iter().any(|n| n == name);
        Some(st)
    }
}

/// Why an owner's debit did not happen.
#[derive(Debug)]
pub enum NotDebited {
    /// Limits short for the demand, or the bucket contended past its attempts.
    Rejected {
        /// The statuses of the limits short (empty when contended).
        statuses: Vec<LimitStatus>,
        /// The writes kept conflicting with other writers'.
        contended: bool,
    },
    /// The bucket is stamped disabled.
    Disabled,
    /// The bucket carries a shared pause until this deadline (epoch ms).
    Paused(i64),
    /// The item carries a feature this client does not implement.
    Unsupported(String),
    /// No limits for the pair.
    NoLimits,
    /// A consumed name is not among the owner's limits (the name).
    UnknownLimit(String),
    /// A DynamoDB failure.
    Repository(RepositoryError),
}

impl From<RepositoryError> for NotDebited {
    fn from(e: RepositoryError) -> Self {
        NotDebited::Repository(e)
    }
}

/// The window lengths (seconds) of an item's session quotas.
fn window_lengths(img: &BucketImage) -> BTreeMap<String, i64> {
    img.limits
        .keys()
        .filter_map(|name| Some((name.clone(), img.window_length(name)?)))
        .collect()
}

fn reject(statuses: Vec<LimitStatus>) -> NotDebited {
    NotDebited::Rejected {
        statuses,
        contended: false,
    }
}

fn contended() -> NotDebited {
    NotDebited::Rejected {
        statuses: Vec::new(),
        contended: true,
    }
}

/// Which owner of an acquire a debit is for, and what the acquire consumes in all (`whole`):
/// a slow pass debits every consumed name its configuration declares, so that a limit newly
/// configured for a bucket is debited from its next slow pass on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role<'a> {
    /// The acquiring entity; `probe` allows trying two other shards on an exhausted shard of
    /// a sharded, non-cascading owner (never for a cascading child, which must not bypass its
    /// parent). `parent` is what its cascade parent is sent at the same time (a warm
    /// cascade), `None` when the parent is written after it, or not at all.
    Entity {
        /// Other shards may be tried when the drawn one is short.
        probe: bool,
        /// What the acquire consumes in all.
        whole: &'a Demand,
        /// What the parent is sent at the same time, if anything.
        parent: Option<&'a Demand>,
    },
    /// The cascade parent of the acquiring entity, whose bucket is sent `child`.
    Parent {
        /// What the acquire consumes in all.
        whole: &'a Demand,
        /// What the child is sent.
        child: &'a Demand,
    },
}

impl<'a> Role<'a> {
    /// The acquiring entity alone, or a cascading child written before its parent.
    pub fn entity(whole: &'a Demand, probe: bool) -> Self {
        Role::Entity {
            probe,
            whole,
            parent: None,
        }
    }

    fn is_parent(self) -> bool {
        matches!(self, Role::Parent { .. })
    }

    fn whole(self) -> &'a Demand {
        match self {
            Role::Entity { whole, .. } | Role::Parent { whole, .. } => whole,
        }
    }

    /// What the other bucket of the cascade is sent, when it is known.
    fn other(self) -> Option<&'a Demand> {
        match self {
            Role::Entity { parent, .. } => parent,
            Role::Parent { child, .. } => Some(child),
        }
    }
}

/// Where the slow path goes next.
enum Next {
    Done(Box<Entry>),
    Slow { shard: u32, shard_count: u32 },
}

/// A shard drawn among `[0, count)` leaving out the ones known short (some shard is not).
fn shard_avoiding(count: u32, short: &[u32]) -> u32 {
    let count = count.clamp(1, MAX_SHARD_COUNT);
    let open: Vec<u32> = (0..count).filter(|s| !short.contains(s)).collect();
    match open.len() {
        0 => random_shard(0, count),
        n => open[rand::rng().random_range(0..n)],
    }
}

/// Shard draws for probes and the slow path.
fn random_shard(from: u32, to: u32) -> u32 {
    shard_in(from, to, rand::rng().random())
}

impl Engine {
    fn entry_from_image(
        &self,
        key: &BucketKey,
        img: BucketImage,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> Entry {
        self.known
            .learn_served(&key.entity_id, &key.resource, &img, now);
        let overdrawn = demand
            .keys()
            .filter(|name| {
                img.soft_at(name, now) && img.limits.get(name.as_str()).is_some_and(|s| s.tk < 0)
            })
            .cloned()
            .collect();
        let bypassed = img.bypass_at(now);
        let quotas = img
            .quota_names()
            .filter_map(|name| img.quota_pin(name).map(|p| (name.clone(), p)))
            .collect();
        let windows = window_lengths(&img);
        Entry {
            key: key.clone(),
            consumed: demand.clone(),
            windows,
            shard_count: img.shards(),
            cascade: img.cascade,
            states: img.limits,
            schedules: img.schedules,
            resets: img.resets,
            quotas,
            parent_id: img.parent_id,
            overdrawn: if bypassed { Vec::new() } else { overdrawn },
            bypassed,
            refund: bypassed,
        }
    }

    /// The resource of a multi-resource acquire whose every shard the rejection cache knows
    /// to be short for its demand, with the statuses to refuse with (no request sent).
    pub fn known_short<'p>(
        &self,
        entity_id: &str,
        parts: &'p [(String, BTreeMap<String, i64>)],
    ) -> Option<(&'p str, Vec<LimitStatus>)> {
        let at = Moment {
            now: self.clock.epoch_millis(),
            generation: self.repo.config_generation(),
        };
        parts.iter().find_map(|(resource, demand)| {
            let known = self.known.shard_count(entity_id, resource);
            match self
                .rejections
                .check((entity_id, resource), known, demand, None, at)
            {
                Verdict::Refuse(statuses) => Some((resource.as_str(), statuses)),
                _ => None,
            }
        })
    }

    /// Debits `demand` from one owner's bucket on `resource`, as `role`.
    pub async fn acquire_one(
        &self,
        entity_id: &str,
        resource: &str,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
        role: Role<'_>,
    ) -> Result<Entry, NotDebited> {
        let probe = matches!(role, Role::Entity { probe: true, .. } | Role::Parent { .. });
        let now = self.clock.epoch_millis();
        // Shards known short, and shards DynamoDB refused for throughput a moment ago, are
        // left out of the draw while another may take the request.
        let (known, mut avoid) = self.known.draw_state(entity_id, resource, now);
        let at = Moment {
            now,
            generation: self.repo.config_generation(),
        };
        match self
            .rejections
            .check((entity_id, resource), known, demand, limits, at)
        {
            Verdict::Refuse(statuses) => return Err(reject(statuses)),
            Verdict::Avoid(short) => avoid.extend(short),
            Verdict::Unknown => {}
        }
        let shard = if avoid.is_empty() {
            random_shard(0, known)
        } else {
            shard_avoiding(known, &avoid)
        };
        let key = BucketKey::new(entity_id, resource, shard);
        // The write's future (the request, its retries, the answer) is boxed: the acquire's
        // own future stays small, and it is moved several times before its first poll.
        let outcome =
            Box::pin(
                self.store
                    .speculative_consume(&key, demand, now, OnThrottle::Return),
            )
            .await?;
        let next = match outcome {
            ConsumeOutcome::Consumed(img) => self.fast_debit(&key, img, demand, now).await,
            ConsumeOutcome::Contended => Next::Slow {
                shard,
                shard_count: known,
            },
            ConsumeOutcome::Paused(until) => return Err(NotDebited::Paused(until)),
            ConsumeOutcome::Failed(old) => {
                // The slow branches are boxed: a warm acquire's future stays small (it is
                // allocated and moved once per acquire).
                Box::pin(self.after_fast_failure(&key, old, demand, now, probe, known)).await?
            }
            ConsumeOutcome::Throttled { operation, message } => {
                let at = (now, known);
                let refused = RepositoryError::Throttled { operation, message };
                Box::pin(self.after_throttling(&key, demand, limits, at, (probe, refused))).await?
            }
        };
        let entry = match next {
            Next::Done(entry) => *entry,
            Next::Slow { shard, shard_count } => {
                Box::pin(self.slow_path(&key.with_shard(shard), shard_count, limits, role)).await?
            }
        };
        // What the item declares after the write: what a warm cascade sends it next.
        self.known
            .learn_names(entity_id, resource, entry.states.keys());
        Ok(self.unbypass(entry).await)
    }

    /// A fast-path debit as the answer's image shows it: done, unless it came from tokens
    /// the limit never granted (a balance another writer left above the ceiling, or with no
    /// capacity beside it, [`debit_beyond_ceiling`]): then the debit is given back and the
    /// request decided on the slow path of the same shard, whose refill trims the balance. A
    /// refund whose answer is lost is not sent again: it landed once or not at all, and then
    /// the debit stands, leaving the shard fewer tokens, never more (test
    /// `suite::fast_path::a_debit_of_a_balance_above_the_ceiling_is_given_back_once_when_its_answer_is_lost`).
    async fn fast_debit(
        &self,
        key: &BucketKey,
        img: BucketImage,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> Next {
        self.rejections.forget(key);
        let Some(limit) = debit_beyond_ceiling(&img, demand, now) else {
            self.materialise(key, &img, demand, now).await;
            return Next::Done(Box::new(self.entry_from_image(key, img, demand, now)));
        };
        self.known.learn(&key.entity_id, &key.resource, &img);
        let shard_count = img.shards();
        tracing::warn!(
            entity_id = %key.entity_id, resource = %key.resource, shard = key.shard, limit,
            "a balance above its limit's ceiling: the debit is given back and decided on the slow path"
        );
        let refund = plan_refund(demand, shard_count);
        if let Err(e) = Box::pin(self.store.apply_delta(key, &refund)).await {
            tracing::warn!(
                entity_id = %key.entity_id, resource = %key.resource, error = %e,
                "refund failed or its outcome is unknown (not sent again); the debit stands"
            );
        }
        Next::Slow {
            shard: key.shard,
            shard_count,
        }
    }

    /// After a fast debit of a bucket that had been full for a while, moves its `rf` to now
    /// with the balances clamped as they were ([`plan_materialise`]): otherwise a later slow pass
    /// credits the refill wasted while the bucket was full. Awaited, so the next acquire of
    /// this caller finds the bucket materialised. Best effort: a write refused by its lock (another
    /// writer moved `rf` first) or lost is not sent again, and leaves the bucket as the shared
    /// format's fast path leaves it (test `suite::fast_path::a_lost_answer_to_a_materialising_write_is_not_sent_again`).
    async fn materialise(
        &self,
        key: &BucketKey,
        img: &BucketImage,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) {
        let Some(plan) = plan_materialise(img, demand, now) else {
            return;
        };
        if let Err(e) = Box::pin(self.store.materialise(key, &plan)).await {
            tracing::debug!(
                entity_id = %key.entity_id, resource = %key.resource, error = %e,
                "materialising a bucket after a fast debit failed (not sent again)"
            );
        }
    }

    /// Gives back the balances an enforcing write debited on an item found bypassed (its
    /// `tc` keeps the count), once. Best effort: a failed refund leaves the debit standing
    /// until refill, as a failed compensation does.
    async fn unbypass(&self, mut entry: Entry) -> Entry {
        if !entry.refund {
            return entry;
        }
        entry.refund = false;
        let plan = plan_bypass_refund(&entry.consumed, entry.shard_count);
        if !plan.is_empty()
            && let Err(e) = Box::pin(self.store.apply_delta(&entry.key, &plan)).await
        {
            tracing::warn!(
                entity_id = %entry.key.entity_id, resource = %entry.key.resource, error = %e,
                "refund of a bypassed debit failed or its outcome is unknown; the debit stands"
            );
        }
        entry
    }

    async fn after_fast_failure(
        &self,
        key: &BucketKey,
        old: Option<BucketImage>,
        demand: &BTreeMap<String, i64>,
        now: i64,
        probe: bool,
        known: u32,
    ) -> Result<Next, NotDebited> {
        if let Some(img) = &old {
            self.known.learn(&key.entity_id, &key.resource, img);
            if img.disabled {
                return Err(NotDebited::Disabled);
            }
            if let Some(reason) = img.unsupported_reason() {
                return Err(NotDebited::Unsupported(reason));
            }
        }
        let slow_here = |count: u32| Next::Slow {
            shard: key.shard,
            shard_count: count,
        };
        let class = classify_fast_failure(old.as_ref(), demand, now);
        let Some(img) = old else {
            return Ok(slow_here(known));
        };
        match class {
            FastFailure::BucketMissing | FastFailure::ScheduleBoundary => {
                Ok(slow_here(img.shards()))
            }
            FastFailure::Disabled => Err(NotDebited::Disabled),
            FastFailure::WcuExhausted | FastFailure::BothExhausted => {
                match decide_wcu_exhaustion(&img, demand, now) {
                    WcuDecision::Reject(statuses) => {
                        self.remember_refusal(key, &img, demand, now);
                        Err(reject(statuses))
                    }
                    WcuDecision::SlowPath => Ok(slow_here(img.shards())),
                    WcuDecision::Double { from, to } => {
                        let count = self.split(key, from, to).await?;
                        Ok(Next::Slow {
                            shard: if count > from {
                                random_shard(from, count)
                            } else {
                                key.shard
                            },
                            shard_count: count,
                        })
                    }
                }
            }
            FastFailure::AppLimitExhausted => {
                let only_trim = img.vu == Some(0);
                if img.shards() > 1
                    && probe
                    && !img.cascade
                    && !only_trim
                    && let Some(next) = self
                        .probe_other_shards(key, img.shards(), vec![key.shard], demand, now)
                        .await?
                {
                    return Ok(next);
                }
                match fast_rejection_gate(&img, demand, now) {
                    Gate::Reject(statuses) => {
                        self.remember_refusal(key, &img, demand, now);
                        Err(reject(statuses))
                    }
                    Gate::SlowPath => Ok(slow_here(img.shards())),
                }
            }
        }
    }

    /// After DynamoDB refused the speculative consume on `key`'s shard for throughput
    /// (`ProvisionedThroughputExceededException`, `ThrottlingException`; nothing applied),
    /// with `known` shards at `now`:
    ///
    /// * while another task of this limiter splits the bucket, the request waits for the
    ///   split (its transaction needs the partitions this load would take) and goes on at the
    ///   count it reached;
    /// * the refusal is recorded; when the bucket's shards have been refused for a second, a
    ///   few times without a quiet second, while it took some writes ([`Throttling`]), the
    ///   bucket splits as after a `wcu` shortfall, gated on shard 0's image as read
    ///   ([`decide_throttling`]), and the request takes the slow path on a new shard;
    /// * otherwise the request goes to up to two other shards with tokens, drawn at random
    ///   among those not known short and not refused a moment ago, on the fast path;
    /// * with nowhere else to go (one shard, or every one tried refused), it goes to the same
    ///   shard again, as the client's retry configuration sends it from its first retry.
    ///
    /// [`Throttling`]: dynalimit_repository::bucket::throttling::Throttling
    async fn after_throttling(
        &self,
        key: &BucketKey,
        demand: &BTreeMap<String, i64>,
        limits: Option<&[Limit]>,
        (now, known): (i64, u32),
        (probe, refused): (bool, RepositoryError),
    ) -> Result<Next, NotDebited> {
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        // A split of this bucket in flight in this limiter: wait for it rather than press on
        // the partitions its transaction needs, then draw among the count it reached.
        let gate = self.known.split_gate(entity, resource);
        let known = match gate.try_lock() {
            Ok(_free) => known,
            Err(_) => {
                drop(gate.lock().await);
                self.known.shard_count(entity, resource)
            }
        };
        if self.known.throttled(entity, resource, key.shard, now)
            && let Some(count) = self.split_on_throttling(key, demand, now).await
        {
            return Ok(Next::Slow {
                shard: random_shard(count / 2, count),
                shard_count: count,
            });
        }
        let mut avoid = self.known.throttled_shards(entity, resource, now);
        let at = Moment {
            now,
            generation: self.repo.config_generation(),
        };
        if let Verdict::Avoid(short) =
            self.rejections
                .check((entity, resource), known, demand, limits, at)
        {
            avoid.extend(short);
        }
        avoid.push(key.shard);
        if let Some(next) = self
            .probe_other_shards(key, known, avoid, demand, now)
            .await?
        {
            return Ok(next);
        }
        // Nowhere else: the same shard again, as the client's retry configuration sends it
        // (from its first retry: the first attempt was the refused one). With no retry in
        // that configuration, the refusal is the answer.
        if !self.store.retries_throttled_writes() {
            return Err(refused.into());
        }
        let outcome = self
            .store
            .speculative_consume(key, demand, now, OnThrottle::Resume)
            .await?;
        Ok(match outcome {
            ConsumeOutcome::Consumed(img) => Box::pin(self.fast_debit(key, img, demand, now)).await,
            ConsumeOutcome::Paused(until) => return Err(NotDebited::Paused(until)),
            ConsumeOutcome::Failed(old) => {
                Box::pin(self.after_fast_failure(key, old, demand, now, probe, known)).await?
            }
            // A conflict persisted (`Throttled` is never the answer of a retried consume).
            ConsumeOutcome::Contended | ConsumeOutcome::Throttled { .. } => Next::Slow {
                shard: key.shard,
                shard_count: known,
            },
        })
    }

    /// Splits `key`'s bucket after sustained throttling of its shards, unless shard 0's image
    /// (read eventually consistent, from the partition's read capacity) says the request would
    /// be refused anyway or the count is at the cap: the count reached, when it grew. A split
    /// that fails is logged and the request goes on (the next sustained run tries again).
    async fn split_on_throttling(
        &self,
        key: &BucketKey,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> Option<u32> {
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        let img = self.store.read(&key.with_shard(0)).await.ok()??;
        self.known.learn(entity, resource, &img);
        if img.disabled || img.unsupported_reason().is_some() {
            return None;
        }
        let (from, to) = decide_throttling(&img, demand, now)?;
        match self.split(key, from, to).await {
            Ok(count) if count > from => {
                self.known.throttling_split(entity, resource);
                Some(count)
            }
            Ok(_) => None,
            Err(error) => {
                tracing::warn!(
                    entity_id = %entity, resource = %resource, %error,
                    "a split after sustained throttling failed; the next run of throttling tries again"
                );
                None
            }
        }
    }

    /// Tries the fast path on up to two other shards of the `count`, drawn at random among
    /// those not in `avoid` (reference §3.5; `avoid` holds `key`'s shard and, after a
    /// refusal for throughput, the shards known short or refused a moment ago). A shard
    /// refused for throughput is recorded and the next one drawn.
    async fn probe_other_shards(
        &self,
        key: &BucketKey,
        count: u32,
        mut avoid: Vec<u32>,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> Result<Option<Next>, NotDebited> {
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        for _ in 0..2 {
            let open: Vec<u32> = (0..count).filter(|s| !avoid.contains(s)).collect();
            if open.is_empty() {
                break;
            }
            let shard = open[rand::rng().random_range(0..open.len())];
            avoid.push(shard);
            let probe = key.with_shard(shard);
            let outcome = self
                .store
                .speculative_consume(&probe, demand, now, OnThrottle::Return)
                .await?;
            match outcome {
                ConsumeOutcome::Throttled { .. } => {
                    self.known.throttled(entity, resource, shard, now);
                }
                ConsumeOutcome::Consumed(got) => {
                    return Ok(Some(
                        Box::pin(self.fast_debit(&probe, got, demand, now)).await,
                    ));
                }
                ConsumeOutcome::Contended => {
                    return Ok(Some(Next::Slow {
                        shard,
                        shard_count: count,
                    }));
                }
                ConsumeOutcome::Paused(until) => return Err(NotDebited::Paused(until)),
                ConsumeOutcome::Failed(old) => {
                    match classify_fast_failure(old.as_ref(), demand, now) {
                        FastFailure::BucketMissing | FastFailure::ScheduleBoundary => {
                            return Ok(Some(Next::Slow {
                                shard,
                                shard_count: old.as_ref().map_or(count, BucketImage::shards),
                            }));
                        }
                        FastFailure::Disabled => return Err(NotDebited::Disabled),
                        _ => {}
                    }
                }
            }
        }
        Ok(None)
    }

    /// The slow path on `key`'s shard.
    async fn slow_path(
        &self,
        key: &BucketKey,
        shard_count: u32,
        limits: Option<&[Limit]>,
        role: Role<'_>,
    ) -> Result<Entry, NotDebited> {
        self.slow_pass(key, shard_count, limits, role)
            .await
            .map(|entry| *entry)
    }

    /// Splits `key`'s bucket from `from` to `to` shards ([`BucketStore::double_shards`]),
    /// once per process at a time: a task that finds another of this limiter splitting the
    /// same bucket waits for it and uses the count it reached. The count to use.
    ///
    /// [`BucketStore::double_shards`]: dynalimit_repository::bucket::BucketStore::double_shards
    async fn split(&self, key: &BucketKey, from: u32, to: u32) -> Result<u32, RepositoryError> {
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        let gate = self.known.split_gate(entity, resource);
        let _held = gate.lock().await;
        let known = self.known.shard_count(entity, resource);
        if known > from {
            return Ok(known);
        }
        let now = self.clock.epoch_millis();
        let doubling = self.store.double_shards(key, from, to, now).await?;
        for (shard, error) in &doubling.failed {
            tracing::warn!(
                entity_id = %key.entity_id, resource = %key.resource, shard,
                to = doubling.count, %error,
                "shard count not propagated; the next propagation retries it"
            );
        }
        let count = doubling.count;
        self.known.raise_shard_count(entity, resource, count);
        if count > from {
            tracing::info!(
                entity_id = %key.entity_id, resource = %key.resource,
                from, to = count, "shard count doubled"
            );
        }
        Ok(count)
    }

    /// Read → plan → conditional write on the given shard (reference §3.7).
    ///
    /// One `BatchGetItem` reads the bucket, the owner's META and the four configuration levels
    /// (uncached: the access walk must see the current `disabled` and cascade flags); the
    /// limits come from `limits` when given, else from the first level that has any.
    ///
    /// Each bucket of a cascade debits the consumed names (of the whole acquire) it declares:
    /// per-key `rpm` on the child, a `tpm` budget on the parent. A consumed name that is not
    /// among the resolved limits refuses the acquire before this write
    /// ([`NotDebited::UnknownLimit`]) unless the cascade's other bucket takes it: it is sent to
    /// that bucket at the same time, or, for a cascading child, the parent's configuration
    /// declares it (read uncached, one `BatchGetItem`, only when the child lacks a name the
    /// parent is not sent).
    async fn slow_pass(
        &self,
        key: &BucketKey,
        shard_count: u32,
        limits: Option<&[Limit]>,
        role: Role<'_>,
    ) -> Result<Box<Entry>, NotDebited> {
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        let mut replanned = false;
        // One owner-META re-plan after a changed owner.
        for _ in 0..2 {
            let now = self.clock.epoch_millis();
            let SlowRead {
                image,
                meta,
                pause,
                levels,
            } = self.store.read_for_slow_path(key, now).await?;
            let mut access = resolve_access(levels, limits, now);
            if access.disabled {
                return Err(NotDebited::Disabled);
            }
            let limits = access.limits.as_slice();
            if limits.is_empty() {
                return Err(NotDebited::NoLimits);
            }
            if let Some(until) = pause {
                return Err(NotDebited::Paused(until));
            }
            let whole = role.whole();
            if unknown_name(whole, limits).is_some() {
                let parent = match &image {
                    Some(img) => img.parent_id.clone().filter(|_| img.cascade),
                    None => {
                        let owner = meta.owner(access.cascade.unwrap_or(meta.cascade));
                        owner.parent_id.filter(|_| owner.cascade)
                    }
                };
                // The names neither this bucket declares nor the other bucket is sent.
                let other = role
                    .other()
                    .filter(|_| parent.is_some() || role.is_parent());
                let mut open = whole
                    .keys()
                    .filter(|n| !declared(limits, n) && !other.is_some_and(|o| o.contains_key(*n)));
                let undeclared = match (role, parent) {
                    (Role::Entity { .. }, Some(parent)) => {
                        let theirs = self.store.read_levels(&parent, resource).await?;
                        let theirs = resolve_access(theirs, None, now).limits;
                        open.find(|n| !declared(&theirs, n))
                    }
                    _ => open.next(),
                };
                if let Some(name) = undeclared {
                    return Err(NotDebited::UnknownLimit(name.clone()));
                }
            }
            let demand = known_demand(whole, limits);
            // Entity-level configuration keeps its buckets; resource/system configuration
            // and explicit limits give them a TTL so unused buckets are swept (§2.6).
            let ttl = match access.source {
                Some(ConfigLevel::Entity | ConfigLevel::EntityDefault) => None,
                _ => bucket_ttl(now, limits, self.ttl_multiplier),
            };
            // A shard other than 0 that creates or seeds a session quota joins the entity's
            // live window, read from shard 0 (reference §12.3).
            let seeded: Vec<(String, i64)> = limits
                .iter()
                .filter(|l| {
                    image
                        .as_ref()
                        .is_none_or(|img| !img.limits.contains_key(l.name()))
                })
                .filter_map(|l| Some((l.name().to_owned(), l.window_seconds()?)))
                .collect();
            let count = image.as_ref().map_or(shard_count, BucketImage::shards);
            // A shard created while its bucket has others is funded by moves from them
            // (reference §12.3, ADR-145, generalised to every limit): one strongly consistent
            // read of the siblings, shard 0 among them, which also gives the live windows to
            // join. A bucket none of whose shards exists any more (swept by the TTL) is
            // created whole: every shard of the count at its share, in one transaction.
            let mut moves = Vec::new();
            let mut whole = false;
            if image.is_none() && shard_count > 1 {
                let siblings = self.store.sibling_images(key, shard_count).await?;
                if siblings.is_empty() {
                    whole = true;
                } else if key.shard > 0 {
                    let shard0 = siblings.iter().find(|(s, _)| *s == 0).map(|(_, img)| img);
                    access.soft.joined = live_windows_of(shard0, &seeded, now);
                    let (funded, planned) =
                        plan_funding(limits, &siblings, key.shard, shard_count, now);
                    access.soft.funded = funded;
                    moves = planned;
                }
            } else if key.shard > 0 && count > 1 && !seeded.is_empty() {
                access.soft.joined = self.store.live_windows(key, &seeded, now).await?;
            }
            let Some(img) = image else {
                let plan = match plan_create(
                    limits,
                    &demand,
                    shard_count,
                    key.shard,
                    now,
                    ttl,
                    &access.soft,
                ) {
                    Plan::Write(p) => p,
                    Plan::Reject(statuses) => return Err(reject(statuses)),
                };
                let owner = meta.owner(access.cascade.unwrap_or(meta.cascade));
                let others: Vec<(u32, CreatePlan)> = if whole {
                    (0..shard_count)
                        .filter(|s| *s != key.shard)
                        .filter_map(|s| {
                            let nothing = BTreeMap::new();
                            match plan_create(
                                limits,
                                &nothing,
                                shard_count,
                                s,
                                now,
                                ttl,
                                &access.soft,
                            ) {
                                Plan::Write(p) => Some((s, p)),
                                Plan::Reject(_) => None,
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                match self
                    .store
                    .create(key, &plan, &owner, &meta.check, &moves, &others)
                    .await?
                {
                    CreateOutcome::Created => {
                        self.known
                            .learn_count(entity, resource, plan.shard_count, &owner);
                        if !whole {
                            let opened = plan.opened_windows(key.shard);
                            self.store
                                .fan_out_windows(key, plan.shard_count, &opened)
                                .await;
                        }
                        if !plan.admitted {
                            // A shard other than 0 holding too little for the request: created
                            // all the same, so that what was moved to it serves others.
                            return Err(reject(plan.statuses));
                        }
                        let states = plan
                            .limits
                            .iter()
                            .map(|(l, tk, _)| {
                                let mut state = LimitState::starting(l, plan.shard_count, now);
                                state.tk = *tk;
                                (l.name().to_owned(), state)
                            })
                            .collect();
                        let schedules = plan
                            .limits
                            .iter()
                            .filter_map(|(l, _, _)| {
                                l.schedule().map(|s| (l.name().to_owned(), s.clone()))
                            })
                            .collect();
                        let resets: BTreeMap<String, ResetSchedule> = plan
                            .limits
                            .iter()
                            .filter_map(|(l, _, _)| {
                                l.reset().map(|r| (l.name().to_owned(), r.clone()))
                            })
                            .collect();
                        let grant = QuotaState {
                            gc: Some(i64::from(plan.shard_count)),
                            ..QuotaState::default()
                        };
                        let mut quotas: BTreeMap<String, QuotaPin> = resets
                            .iter()
                            .map(|(name, r)| {
                                let pin = QuotaPin::of(r, grant, plan.shard_count, plan.rf);
                                (name.clone(), pin)
                            })
                            .collect();
                        let mut windows = BTreeMap::new();
                        for (l, _, _) in &plan.limits {
                            if let (Some(rsa), Some((ws, _))) =
                                (l.window_seconds(), plan.windows.get(l.name()))
                            {
                                let w = WindowState {
                                    rsa: Some(rsa),
                                    ws: Some(*ws),
                                    wa: Some(*ws),
                                    wtc: None,
                                };
                                let pin = QuotaPin::of_window(w, grant, plan.shard_count);
                                quotas.insert(l.name().to_owned(), pin);
                                windows.insert(l.name().to_owned(), rsa);
                            }
                        }
                        return Ok(Box::new(Entry {
                            key: key.clone(),
                            consumed: plan.consumed,
                            states,
                            schedules,
                            resets,
                            quotas,
                            windows,
                            shard_count: plan.shard_count,
                            cascade: owner.cascade,
                            parent_id: owner.parent_id,
                            overdrawn: plan.overdrawn,
                            bypassed: false,
                            refund: false,
                        }));
                    }
                    // Another writer created it first: a plan that consumed nothing is planned
                    // again from the item as created.
                    CreateOutcome::Lost if !plan.admitted => continue,
                    CreateOutcome::Lost => {
                        return self
                            .consume_only(key, &plan.consumed, &demand)
                            .await
                            .map(Box::new);
                    }
                    CreateOutcome::OwnerChanged | CreateOutcome::MoveLost => continue,
                    CreateOutcome::Contended => return Err(contended()),
                }
            };
            if let Some(reason) = img.unsupported_reason() {
                return Err(NotDebited::Unsupported(reason));
            }
            if img.disabled {
                return Err(NotDebited::Disabled);
            }
            if access.soft.bypass && img.bypass.is_some() {
                // Bypassed: count, renew the stamp, debit no balance (§12.1). The stamp gone
                // meanwhile: read again and plan enforced.
                let until = access.soft.until;
                match self.store.bypass_consume(key, &demand, until, now).await? {
                    ConsumeOutcome::Consumed(img) => {
                        let mut entry = self.entry_from_image(key, img, &demand, now);
                        entry.bypassed = true;
                        entry.refund = false;
                        return Ok(Box::new(entry));
                    }
                    ConsumeOutcome::Paused(until) => return Err(NotDebited::Paused(until)),
                    ConsumeOutcome::Failed(_) => continue,
                    // (`Throttled` is never the answer of a retried write.)
                    ConsumeOutcome::Contended | ConsumeOutcome::Throttled { .. } => {
                        return Err(contended());
                    }
                }
            }
            let ttl = match (access.source, ttl) {
                (Some(ConfigLevel::Entity | ConfigLevel::EntityDefault), _) => TtlAction::Remove,
                (_, Some(t)) => TtlAction::Set(t),
                (_, None) => TtlAction::Keep,
            };
            let plan = match plan_refill(&img, limits, &demand, now, ttl, &access.soft) {
                Plan::Write(p) => p,
                Plan::Reject(statuses) => {
                    self.remember_refusal(key, &img, &demand, now);
                    return Err(reject(statuses));
                }
            };
            // The owner stamp of the META read on this pass, self-healing a stale one (hard
            // case 39). Never over a stamp of another incarnation: a bucket an earlier
            // entity of the same id left behind keeps its stamp rather than failing every
            // rf-locked write on the pin.
            let owner = match &meta.check {
                MetaCheck::Present { pinc, .. }
                    if img.pinc.is_none() || img.pinc.as_ref() == pinc.as_ref() =>
                {
                    Some(meta.owner(access.cascade.unwrap_or(meta.cascade)))
                }
                _ => None,
            };
            let entry = match self.store.refill(key, &plan, owner.as_ref()).await? {
                RefillOutcome::Applied => {
                    self.store
                        .fan_out_windows(key, img.shards(), &plan.opened_windows())
                        .await;
                    let mut img = img;
                    if let Some(owner) = &owner {
                        img.cascade = owner.cascade;
                        img.parent_id.clone_from(&owner.parent_id);
                    }
                    self.known.learn(entity, resource, &img);
                    let mut states = img.limits.clone();
                    for w in &plan.writes {
                        if let Some(state) = states.get_mut(&w.name) {
                            // The lease's view is the item after this write.
                            state.tk += w.add_tk;
                        }
                        if let Some(seed) = &w.seed {
                            states.insert(
                                w.name.clone(),
                                LimitState {
                                    tk: seed.tk,
                                    cp: seed.cp,
                                    ra: seed.ra,
                                    rp: seed.rp,
                                    tc: 0,
                                },
                            );
                        }
                    }
                    // The configuration's schedules, as the write planned with them, and the
                    // item's grants and refill time after it.
                    let mut after = img.clone();
                    for l in limits {
                        match l.schedule() {
                            Some(s) => after.schedules.insert(l.name().to_owned(), s.clone()),
                            None => after.schedules.remove(l.name()),
                        };
                        match l.reset() {
                            Some(r) => after.resets.insert(l.name().to_owned(), r.clone()),
                            None => after.resets.remove(l.name()),
                        };
                    }
                    for w in &plan.writes {
                        if let Some(count) = w.grant {
                            let q = after.quotas.entry(w.name.clone()).or_default();
                            q.gc = Some(i64::from(count));
                            q.tu = None;
                        }
                        if let Some(win) = w.window {
                            let stored = after.windows.entry(w.name.clone()).or_default();
                            stored.rsa = Some(win.rsa);
                            if win.ws.is_some() {
                                stored.ws = win.ws;
                                stored.wa = win.ws;
                            }
                        }
                    }
                    after.rf = plan.rf_new;
                    let quotas = after
                        .quota_names()
                        .filter_map(|name| after.quota_pin(name).map(|p| (name.clone(), p)))
                        .collect();
                    let windows = window_lengths(&after);
                    Ok(Entry {
                        key: key.clone(),
                        consumed: plan.consumed,
                        states,
                        schedules: after.schedules,
                        resets: after.resets,
                        quotas,
                        windows,
                        shard_count: img.shards(),
                        cascade: img.cascade,
                        parent_id: img.parent_id.clone(),
                        overdrawn: plan.overdrawn,
                        bypassed: false,
                        refund: false,
                    })
                }
                // A consumed quota got its new period's grant in the lost write: the
                // consumption-only retry could debit the old period (hard case 32), so the
                // pass is planned again from a fresh read.
                RefillOutcome::LostLock if plan.resets_applied => {
                    if replanned {
                        return Err(contended());
                    }
                    replanned = true;
                    continue;
                }
                RefillOutcome::LostLock => self.consume_only(key, &plan.consumed, &demand).await,
                RefillOutcome::Contended => Err(contended()),
            };
            return entry.map(Box::new);
        }
        Err(contended())
    }

    /// The consumption-only retry after a lost lock or a lost create (reference §3.7.4).
    async fn consume_only(
        &self,
        key: &BucketKey,
        consumed: &BTreeMap<String, i64>,
        demand: &BTreeMap<String, i64>,
    ) -> Result<Entry, NotDebited> {
        let retry = consumption_retry(consumed);
        let now = self.clock.epoch_millis();
        if retry.is_empty() {
            // Nothing to debit (all-zero request): the read already showed it fits.
            return match self.store.read(key).await? {
                Some(img) => Ok(self.entry_from_image(key, img, consumed, now)),
                None => Err(contended()),
            };
        }
        match self.store.consume_only(key, &retry, now).await? {
            ConsumeOutcome::Consumed(img) => Ok(self.entry_from_image(key, img, consumed, now)),
            ConsumeOutcome::Paused(until) => Err(NotDebited::Paused(until)),
            ConsumeOutcome::Failed(Some(img)) => {
                let statuses = statuses_from_image(&img, demand, now);
                if statuses.iter().any(|s| s.exceeded) {
                    Err(reject(statuses))
                } else {
                    Err(contended())
                }
            }
            ConsumeOutcome::Failed(None)
            | ConsumeOutcome::Contended
            | ConsumeOutcome::Throttled { .. } => Err(contended()),
        }
    }
}

/// What the configuration says about one acquire.
#[derive(Debug)]
struct Access {
    limits: Vec<Limit>,
    /// Which level supplied the limits (`None` for explicit limits).
    source: Option<ConfigLevel>,
    disabled: bool,
    /// The cascade policy of the walk, when a level sets one.
    cascade: Option<bool>,
    /// The stamps the configuration decides: the soft limits of the level that supplied the
    /// limits, whether the pair is bypassed, and their deadline.
    soft: Stamps,
}

/// Resolves limits (unless given) and walks entity → entity default → resource for the
/// access (disabled, bypass) and the cascade policy (reference §3.7 step 2, §4.1).
fn resolve_access(
    levels: Vec<(ConfigLevel, Option<LimitConfig>)>,
    explicit: Option<&[Limit]>,
    now: i64,
) -> Access {
    let (walked, cascade) = walk(levels.iter().map(|(level, c)| (*level, c.as_ref())));
    // The levels were read uncached on this pass, so stamps it writes may be renewed from
    // them (§2.7); with explicit limits the soft stamps are left as they are.
    let mut access = Access {
        limits: explicit.map(<[Limit]>::to_vec).unwrap_or_default(),
        source: None,
        disabled: walked == config::Access::Disabled,
        cascade,
        soft: Stamps {
            bypass: walked == config::Access::Bypass,
            until: stamp_deadline(now, rand::random()),
            // An explicit soft limit is debited, never refusing, like a configured one.
            names: explicit
                .unwrap_or_default()
                .iter()
                .filter(|l| l.is_soft())
                .map(|l| l.name().to_owned())
                .collect(),
            ..Stamps::default()
        },
    };
    if explicit.is_none()
        && let Some((level, config)) = levels
            .into_iter()
            .find_map(|(level, c)| c.filter(|c| !c.limits.is_empty()).map(|c| (level, c)))
    {
        access.limits = config.limits;
        access.source = Some(level);
        access.soft.names = config.soft;
        access.soft.restamp = true;
    }
    access
}

/// Whether `limits` hold one named `name`.
fn declared(limits: &[Limit], name: &str) -> bool {
    limits.iter().any(|l| l.name() == name)
}

/// The demand restricted to the resolved limits (the names another bucket of the cascade
/// declares, which the caller has checked).
fn known_demand(demand: &BTreeMap<String, i64>, limits: &[Limit]) -> BTreeMap<String, i64> {
    demand
        .iter()
        .filter(|(name, _)| declared(limits, name))
        .map(|(n, m)| (n.clone(), *m))
        .collect()
}
impl Engine {
    /// Gives back what `entry` consumed (plus `extra` net adjustments); best effort.
    /// Remembers the image a shard refused with (the local rejection cache).
    fn remember_refusal(
        &self,
        key: &BucketKey,
        img: &BucketImage,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) {
        let at = Moment {
            now,
            generation: self.repo.config_generation(),
        };
        self.rejections.remember(key, img, demand, at);
    }

    /// Gives `net` millitokens per limit back to `entry`'s shard (a negative amount debits),
    /// as the entry's view of the limits allows: a credit never lifts a balance past its
    /// ceiling, nor a quota's past the period it was debited in. Not sent again when its
    /// answer is lost.
    pub async fn credit(
        &self,
        entry: &Entry,
        net: &BTreeMap<String, i64>,
    ) -> Result<(), RepositoryError> {
        self.rejections.forget(&entry.key);
        let plan: DeltaPlan = if entry.bypassed {
            plan_counted(net)
        } else {
            let now = self.clock.epoch_millis();
            plan_delta(
                net,
                &entry.states,
                &entry.schedules,
                &entry.quotas,
                entry.shard_count,
                now,
            )
        };
        let written = self.store.apply_delta(&entry.key, &plan).await.map(|_| ());
        // Landed, refused or lost: a refusal this process read before now may predate it.
        self.rejections
            .gave_back(&entry.key, self.clock.epoch_millis());
        written
    }

    /// Gives back everything `entry` debited for a refused acquire. When the give-back failed
    /// or its outcome is unknown (it is not sent again, and the debit may stand): the whole
    /// tokens per limit that may stay debited.
    pub async fn compensate(&self, entry: &Entry) -> Option<Vec<(String, i64)>> {
        let net = entry
            .consumed
            .iter()
            .map(|(n, c)| (n.clone(), -c))
            .collect();
        let e = self.credit(entry, &net).await.err()?;
        tracing::warn!(
            entity_id = %entry.key.entity_id, resource = %entry.key.resource, error = %e,
            "compensation failed or its outcome is unknown (not sent again); the debit may stand"
        );
        Some(
            entry
                .consumed
                .iter()
                .map(|(n, c)| {
                    (
                        n.clone(),
                        c.div_euclid(MILLI) + i64::from(c.rem_euclid(MILLI) != 0),
                    )
                })
                .collect(),
        )
    }
}
