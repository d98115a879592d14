//! Decisions of the acquire path: what to write, given what was read (reference §3).
//!
//! The repository turns a [`BucketImage`] (a bucket item as read, or as returned by a failed or
//! successful conditional write) into these plain structs and turns the plans back into
//! DynamoDB expressions; nothing here performs I/O or reads a clock — `now` is always an
//! argument.
//!
//! Amounts in a *demand* (`BTreeMap<String, i64>`) are millitokens keyed by limit name.

use std::collections::BTreeMap;

use crate::bucket::{
    MAX_SHARD_COUNT, ShardParams, WCU_CAPACITY_MILLI, WCU_DEBIT_MILLI, WCU_PERIOD_MS,
    WCU_REFILL_MILLI, available_tokens, doubled_shard_count, refill, retry_after_ms, try_consume,
};
use crate::limit::Limit;

/// One limit's stored fields on a bucket item (`b_{name}_{tk,cp,ra,rp,tc}`), millitokens and
/// milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitState {
    /// Tokens of this shard; negative is debt.
    pub tk: i64,
    /// Capacity, undivided.
    pub cp: i64,
    /// Refill amount, undivided.
    pub ra: i64,
    /// Refill period.
    pub rp: i64,
    /// Total consumed counter.
    pub tc: i64,
}

impl LimitState {
    /// A fresh limit on a shard of `shard_count`: the shard's share `cp // S`, nothing
    /// consumed.
    pub fn starting(limit: &Limit, shard_count: u32) -> Self {
        LimitState {
            tk: limit
                .capacity_milli()
                .div_euclid(i64::from(shard_count.max(1))),
            cp: limit.capacity_milli(),
            ra: limit.refill_amount_milli(),
            rp: limit.refill_period_millis(),
            tc: 0,
        }
    }

    /// This limit's parameters on a shard of an item with `shard_count` shards.
    pub fn params(&self, shard_count: u32) -> ShardParams {
        ShardParams::for_shard(self.cp, self.ra, self.rp, shard_count)
    }

    /// The configured (undivided) limit this state was written from, in whole units.
    pub fn limit(&self, name: &str) -> Limit {
        Limit::from_stored(name, self.cp, self.ra, self.rp)
    }
}

/// A bucket item as read (reference §1.4.7), reduced to what the core profile uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketImage {
    /// Shared last-refill timestamp, epoch ms (the optimistic lock).
    pub rf: i64,
    /// Shard count stamped on the item (at least 1).
    pub shard_count: u32,
    /// Owner's resolved cascade policy.
    pub cascade: bool,
    /// Owner's parent, if any.
    pub parent_id: Option<String>,
    /// Expiry, epoch seconds.
    pub ttl: Option<i64>,
    /// `disabled = true` stamp.
    pub disabled: bool,
    /// "Valid until" stamp, epoch ms (`0` forces one slow pass).
    pub vu: Option<i64>,
    /// User limits present on the item (both `tk` and `cp` exist).
    pub limits: BTreeMap<String, LimitState>,
    /// The reserved `wcu` limit, if present.
    pub wcu: Option<LimitState>,
    /// 0.15–0.17 features found on the item that the core profile cannot interpret
    /// (attribute names), see [`unsupported_bucket_attribute`].
    pub unsupported: Vec<String>,
}

impl BucketImage {
    /// Shard count as a divisor (never 0).
    pub fn shards(&self) -> u32 {
        self.shard_count.max(1)
    }

    /// Why the core profile must not materialise this item (reference §12.8), if it must not:
    /// a scheduled/quota/windowed attribute, a real `vu` boundary, or a limit with no refill.
    pub fn unsupported_reason(&self) -> Option<String> {
        if let Some(attr) = self.unsupported.first() {
            return Some(format!("bucket carries unsupported attribute {attr}"));
        }
        if let Some(vu) = self.vu
            && vu > 0
        {
            return Some(format!("bucket carries a schedule boundary vu={vu}"));
        }
        self.limits
            .iter()
            .find(|(_, s)| s.ra <= 0)
            .map(|(name, _)| format!("limit {name} has no refill (a quota)"))
    }
}

/// Whether an attribute of a bucket item belongs to a 0.15–0.17 feature the core profile does
/// not implement (reference §12.8). `string_value` is the attribute's value when it is a string
/// (per-limit schedule strings equal to `"-"` mean "explicitly unscheduled" and are harmless).
///
/// ```
/// use dynalimit_core::decide::unsupported_bucket_attribute;
/// assert!(unsupported_bucket_attribute("sched", Some("1|…")));
/// assert!(unsupported_bucket_attribute("b_rpm_gc", None));
/// assert!(!unsupported_bucket_attribute("b_rpm_sched", Some("-")));
/// assert!(!unsupported_bucket_attribute("b_rpm_tk", None));
/// ```
pub fn unsupported_bucket_attribute(name: &str, string_value: Option<&str>) -> bool {
    if matches!(name, "sched" | "rsched" | "sched_tz") {
        return true;
    }
    let Some(rest) = name.strip_prefix("b_") else {
        return false;
    };
    let Some((_, field)) = rest.rsplit_once('_') else {
        return false;
    };
    match field {
        "sched" | "rsched" => string_value != Some("-"),
        "rsa" | "ws" | "wa" | "wtc" | "gc" | "tu" | "rn" => true,
        _ => false,
    }
}

/// Why a speculative consume failed, classified from the old image (reference §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastFailure {
    /// No item.
    BucketMissing,
    /// The item is stamped disabled.
    Disabled,
    /// `vu` has passed: a slow pass must materialise the item.
    ScheduleBoundary,
    /// Only the `wcu` limit was short.
    WcuExhausted,
    /// `wcu` and some declared limit were short.
    BothExhausted,
    /// A declared limit was short or missing, or the `ttl` has passed.
    AppLimitExhausted,
}

/// Classifies a failed speculative consume from the image returned on failure.
pub fn classify_fast_failure(
    old: Option<&BucketImage>,
    demand: &BTreeMap<String, i64>,
    now: i64,
) -> FastFailure {
    let Some(img) = old else {
        return FastFailure::BucketMissing;
    };
    if img.disabled {
        return FastFailure::Disabled;
    }
    if let Some(vu) = img.vu
        && vu <= now
        && vu != 0
    {
        return FastFailure::ScheduleBoundary;
    }
    let limit_short = demand
        .iter()
        .any(|(name, &m)| img.limits.get(name).is_some_and(|s| s.tk < m));
    let wcu_short = img.wcu.is_none_or(|w| w.tk < WCU_DEBIT_MILLI);
    match (wcu_short, limit_short) {
        (true, true) => FastFailure::BothExhausted,
        (true, false) => FastFailure::WcuExhausted,
        _ => FastFailure::AppLimitExhausted,
    }
}

/// One limit's verdict, reported per shard (reference §2.5): the limit is this shard's share,
/// `available` the refilled balance in whole tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    /// The shard's share of the limit (capacity and refill divided by the shard count, floored
    /// at 1 token), or the undivided limit for an entity-wide availability check.
    pub limit: Limit,
    /// Whole tokens available after refill (floor; negative in debt).
    pub available: i64,
    /// Whole tokens requested.
    pub requested: i64,
    /// Whether the request does not fit.
    pub exceeded: bool,
    /// Milliseconds until it would fit (0 when it fits).
    pub retry_after_ms: i64,
}

fn status(
    name: &str,
    state: &LimitState,
    shards: u32,
    after_refill: i64,
    want: i64,
) -> LimitStatus {
    let p = state.params(shards);
    let exceeded = after_refill < want;
    LimitStatus {
        limit: state.limit(name).shard_share(shards),
        available: available_tokens(after_refill),
        requested: want.div_euclid(crate::limit::MILLI),
        exceeded,
        retry_after_ms: if exceeded {
            retry_after_ms(want - after_refill, p)
        } else {
            0
        },
    }
}

/// Verdict of the fast-rejection gate (`would_refill_satisfy`, reference §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Refill to now leaves a declared limit short: reject without another request.
    Reject(Vec<LimitStatus>),
    /// Refill would help, or a declared limit is missing: take the slow path.
    SlowPath,
}

/// Projects the image to `now` and decides whether the request can only be rejected.
pub fn fast_rejection_gate(img: &BucketImage, demand: &BTreeMap<String, i64>, now: i64) -> Gate {
    let mut statuses = Vec::with_capacity(demand.len());
    for (name, &want) in demand {
        let Some(state) = img.limits.get(name) else {
            return Gate::SlowPath;
        };
        let (after, _) = refill(state.tk, img.rf, now, state.params(img.shards()));
        statuses.push(status(name, state, img.shards(), after, want));
    }
    if statuses.iter().any(|s| s.exceeded) {
        Gate::Reject(statuses)
    } else {
        Gate::SlowPath
    }
}

/// Whether refilling the image's `wcu` limit to `now` restores at least one write token.
pub fn wcu_refill_restores(img: &BucketImage, now: i64) -> bool {
    let Some(w) = img.wcu else {
        return true;
    };
    let (after, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
    after >= WCU_DEBIT_MILLI
}

/// What to do after a `wcu` shortfall (reference §3.5 and §3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WcuDecision {
    /// A declared limit is short even after refill: reject, do not double.
    Reject(Vec<LimitStatus>),
    /// Refill restores write capacity, or the shard count is at the cap: slow path on the same
    /// shard.
    SlowPath,
    /// Hot partition: double `shard_count` on shard 0 from `from` to `to`, then take the slow
    /// path on a random shard in `[from, to)`.
    Double {
        /// Shard count observed on the image.
        from: u32,
        /// Shard count to write.
        to: u32,
    },
}

/// Decides the response to a `WcuExhausted` / `BothExhausted` failure, gating the doubling
/// behind the fast-rejection check (hard case 19) and the projected `wcu` (hard case 22).
pub fn decide_wcu_exhaustion(
    img: &BucketImage,
    demand: &BTreeMap<String, i64>,
    now: i64,
) -> WcuDecision {
    if let Gate::Reject(statuses) = fast_rejection_gate(img, demand, now) {
        return WcuDecision::Reject(statuses);
    }
    if wcu_refill_restores(img, now) {
        return WcuDecision::SlowPath;
    }
    match doubled_shard_count(img.shards()) {
        Some(to) => WcuDecision::Double {
            from: img.shards(),
            to,
        },
        None => WcuDecision::SlowPath,
    }
}

/// What each existing shard gives up when the count doubles from `from` to `to`: per limit,
/// `cp // to` millitokens (`wcu` excluded).
///
/// The `to - from` shards that the doubling brings into use are created later, each funded
/// with `cp // to`. Debiting each of the `from` existing shards by the same amount (with the
/// doubling write on shard 0 and the propagation writes on the others) keeps the sum of all
/// balances unchanged by the split, so tokens spent before the doubling are not handed out a
/// second time. A shard that was nearly empty goes into debt, which refill repays: the split
/// can under-admit briefly, never over-admit.
///
/// ```
/// use dynalimit_core::decide::{doubling_donations, BucketImage, LimitState};
/// let mut img = BucketImage::default();
/// img.limits.insert("rpm".into(), LimitState { tk: 50_000, cp: 100_000, ra: 100_000, rp: 60_000, tc: 0 });
/// assert_eq!(doubling_donations(&img, 2), vec![("rpm".to_owned(), 50_000)]);
/// ```
pub fn doubling_donations(img: &BucketImage, to: u32) -> Vec<(String, i64)> {
    img.limits
        .iter()
        .map(|(name, s)| (name.clone(), s.cp.div_euclid(i64::from(to.max(1)))))
        .filter(|(_, d)| *d > 0)
        .collect()
}

/// How an rf-locked write treats `ttl` (reference §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlAction {
    /// Leave it as it is (multiplier 0).
    Keep,
    /// Stamp this expiry (epoch seconds): limits from resource/system level or an override.
    Set(i64),
    /// Remove it (limits from entity level); only emitted when the item carries one.
    Remove,
}

/// A limit that the rf-locked write adds to the item because it is configured but missing
/// (hard case 14), written with `SET` under `attribute_not_exists(b_cp) OR
/// attribute_not_exists(b_tk)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed {
    /// Starting tokens (the shard's share minus what this acquire consumes).
    pub tk: i64,
    /// Capacity, undivided, milli.
    pub cp: i64,
    /// Refill amount, undivided, milli.
    pub ra: i64,
    /// Refill period, ms.
    pub rp: i64,
}

/// One limit's part of an rf-locked write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitWrite {
    /// Limit name (`wcu` for the write tracker).
    pub name: String,
    /// `ADD b_tk` (refill delta minus consumption); unused for a seed.
    pub add_tk: i64,
    /// `ADD b_tc` (consumption).
    pub add_tc: i64,
    /// Guard `b_tk >= floor` when `floor = max(0, consumed - refill) > 0` (hard case 3).
    pub floor: Option<i64>,
    /// Pin `b_tk <= tk_read` when the refill delta is positive (hard case 4).
    pub pin_max: Option<i64>,
    /// Seed instead of a delta.
    pub seed: Option<Seed>,
}

/// An rf-locked materialising write (reference §3.7.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillPlan {
    /// Condition `rf = :rf_read`.
    pub rf_read: i64,
    /// `SET rf = max(now, rf_read)`.
    pub rf_new: i64,
    /// Every limit on the item and every resolved limit (declared, carried or seeded), plus
    /// `wcu` (carried).
    pub writes: Vec<LimitWrite>,
    /// TTL handling.
    pub ttl: TtlAction,
    /// `REMOVE vu` pinned on the value read (a `vu = 0` trim stamp), together with a pin on
    /// the shard count read (a doubling landing in between re-stamps `vu = 0`, which must not
    /// be erased by a write planned with the old share).
    pub remove_vu: Option<i64>,
    /// Shard count the plan's ceilings were computed with.
    pub shard_count: u32,
    /// Millitokens consumed per declared limit.
    pub consumed: BTreeMap<String, i64>,
    /// Statuses of the declared limits (none exceeded).
    pub statuses: Vec<LimitStatus>,
}

/// A create of a missing bucket (reference §3.7.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePlan {
    /// `rf = now`.
    pub rf: i64,
    /// Shard count stamped on the new item.
    pub shard_count: u32,
    /// Per limit: the configured limit, starting tokens and `tc`.
    pub limits: Vec<(Limit, i64, i64)>,
    /// Expiry, epoch seconds, when the limits did not come from entity level.
    pub ttl: Option<i64>,
    /// Millitokens consumed per declared limit.
    pub consumed: BTreeMap<String, i64>,
    /// Statuses of the declared limits.
    pub statuses: Vec<LimitStatus>,
}

/// A plan, or a rejection carrying every declared limit's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan<T> {
    /// Write this.
    Write(T),
    /// Nothing is written; at least one status is exceeded.
    Reject(Vec<LimitStatus>),
}

/// Plans the rf-locked write for an existing item.
///
/// `limits` are the resolved limits, `demand` the millitokens to consume per declared limit
/// (names that match no resolved limit must have been removed by the caller), `now` the commit
/// clock reading. Limits present on the item but not resolved are carried (refilled, not
/// debited) so advancing `rf` never discards their refill; `wcu` is carried too.
///
/// The caller must have refused items for which [`BucketImage::unsupported_reason`] is `Some`.
pub fn plan_refill(
    img: &BucketImage,
    limits: &[Limit],
    demand: &BTreeMap<String, i64>,
    now: i64,
    ttl: TtlAction,
) -> Plan<RefillPlan> {
    let shards = img.shards();
    let mut writes = Vec::new();
    let mut statuses = Vec::new();
    let mut consumed = BTreeMap::new();
    let mut names: Vec<&str> = limits.iter().map(Limit::name).collect();
    names.extend(img.limits.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    for name in names {
        let want = demand.get(name).copied();
        match img.limits.get(name) {
            Some(state) => {
                let p = state.params(shards);
                let a = try_consume(state.tk, img.rf, now, p, want.unwrap_or(0));
                if let Some(w) = want {
                    statuses.push(status(name, state, shards, a.after_refill, w));
                }
                let c = if a.admitted { want.unwrap_or(0) } else { 0 };
                let delta = a.after_refill - state.tk;
                writes.push(LimitWrite {
                    name: name.to_owned(),
                    add_tk: delta - c,
                    add_tc: c,
                    floor: (c - delta > 0).then_some(c - delta),
                    pin_max: (delta > 0).then_some(state.tk),
                    seed: None,
                });
                if want.is_some() {
                    consumed.insert(name.to_owned(), c);
                }
            }
            None => {
                let Some(limit) = limits.iter().find(|l| l.name() == name) else {
                    continue;
                };
                let state = LimitState::starting(limit, shards);
                let w = want.unwrap_or(0);
                let st = status(name, &state, shards, state.tk, w);
                let c = if st.exceeded { 0 } else { w };
                if want.is_some() {
                    statuses.push(st);
                    consumed.insert(name.to_owned(), c);
                }
                writes.push(LimitWrite {
                    name: name.to_owned(),
                    add_tk: 0,
                    add_tc: c,
                    floor: None,
                    pin_max: None,
                    seed: Some(Seed {
                        tk: state.tk - c,
                        cp: state.cp,
                        ra: state.ra,
                        rp: state.rp,
                    }),
                });
            }
        }
    }
    if statuses.iter().any(|s| s.exceeded) {
        return Plan::Reject(statuses);
    }
    writes.push(match img.wcu {
        Some(w) => {
            let (after, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
            let delta = after - w.tk;
            LimitWrite {
                name: crate::bucket::WCU.to_owned(),
                add_tk: delta,
                add_tc: 0,
                floor: None,
                pin_max: (delta > 0).then_some(w.tk),
                seed: None,
            }
        }
        None => LimitWrite {
            name: crate::bucket::WCU.to_owned(),
            add_tk: 0,
            add_tc: 0,
            floor: None,
            pin_max: None,
            seed: Some(wcu_seed()),
        },
    });
    let ttl = match ttl {
        TtlAction::Remove if img.ttl.is_none() => TtlAction::Keep,
        other => other,
    };
    Plan::Write(RefillPlan {
        rf_read: img.rf,
        rf_new: now.max(img.rf),
        writes,
        ttl,
        remove_vu: img.vu,
        shard_count: shards,
        consumed,
        statuses,
    })
}

/// The `wcu` block of a new item: full.
pub fn wcu_seed() -> Seed {
    Seed {
        tk: WCU_CAPACITY_MILLI,
        cp: WCU_CAPACITY_MILLI,
        ra: WCU_REFILL_MILLI,
        rp: WCU_PERIOD_MS,
    }
}

/// Plans the create of a missing shard item: every resolved limit starts at the shard's share
/// `cp // shard_count` minus what this acquire consumes.
pub fn plan_create(
    limits: &[Limit],
    demand: &BTreeMap<String, i64>,
    shard_count: u32,
    now: i64,
    ttl: Option<i64>,
) -> Plan<CreatePlan> {
    let shards = shard_count.max(1);
    let mut rows = Vec::with_capacity(limits.len());
    let mut statuses = Vec::new();
    let mut consumed = BTreeMap::new();
    for limit in limits {
        let state = LimitState::starting(limit, shards);
        let c = match demand.get(limit.name()) {
            Some(&w) => {
                let st = status(limit.name(), &state, shards, state.tk, w);
                let c = if st.exceeded { 0 } else { w };
                statuses.push(st);
                consumed.insert(limit.name().to_owned(), c);
                c
            }
            None => 0,
        };
        rows.push((limit.clone(), state.tk - c, c));
    }
    if statuses.iter().any(|s| s.exceeded) {
        return Plan::Reject(statuses);
    }
    Plan::Write(CreatePlan {
        rf: now,
        shard_count: shards,
        limits: rows,
        ttl,
        consumed,
        statuses,
    })
}

/// A per-limit guard of a credit (reference §3.9, hard case 5): the credit may land only while
/// `b_tk <= max_tk`, `b_cp = cp` and `shard_count = shard_count`, so it can never lift the
/// shard above its ceiling; otherwise it is re-sent with `SET vu = 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditGuard {
    /// Limit name.
    pub name: String,
    /// Largest balance the credit may land on: `ceiling - credit`.
    pub max_tk: i64,
    /// Capacity the ceiling was computed from.
    pub cp: i64,
}

/// A net change written by a lease (commit of adjustments, rollback, compensation).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeltaPlan {
    /// `(name, ADD b_tk, ADD b_tc)` per limit with a non-zero delta.
    pub adds: Vec<(String, i64, i64)>,
    /// Guards for the limits that receive tokens back.
    pub guards: Vec<CreditGuard>,
    /// Shard count the guards were computed with (pinned when there are guards).
    pub shard_count: u32,
}

impl DeltaPlan {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty()
    }
}

/// Plans a lease's net change: `net` holds millitokens per limit, positive = consume more
/// (`ADD tk -d, tc +d`), negative = give back (a credit, guarded by the ceiling seen in
/// `states`, the lease's view of the item).
pub fn plan_delta(
    net: &BTreeMap<String, i64>,
    states: &BTreeMap<String, LimitState>,
    shard_count: u32,
) -> DeltaPlan {
    let shards = shard_count.max(1);
    let mut plan = DeltaPlan {
        shard_count: shards,
        ..DeltaPlan::default()
    };
    for (name, &d) in net {
        if d == 0 {
            continue;
        }
        plan.adds.push((name.clone(), -d, d));
        if d < 0
            && let Some(state) = states.get(name)
        {
            plan.guards.push(CreditGuard {
                name: name.clone(),
                max_tk: state.params(shards).ceiling + d,
                cp: state.cp,
            });
        }
    }
    plan
}

/// The consumption-only retry after a lost `rf` lock or a lost create (reference §3.7.4):
/// `ADD tk -c, tc +c` under `tk >= c` for every limit with `c > 0`.
pub fn consumption_retry(consumed: &BTreeMap<String, i64>) -> Vec<(String, i64)> {
    consumed
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(n, c)| (n.clone(), *c))
        .collect()
}

/// Rejection statuses built from the image returned by a failed consumption-only retry.
pub fn statuses_from_image(
    img: &BucketImage,
    demand: &BTreeMap<String, i64>,
    now: i64,
) -> Vec<LimitStatus> {
    demand
        .iter()
        .filter_map(|(name, &want)| {
            let state = img.limits.get(name)?;
            let (after, _) = refill(state.tk, img.rf, now, state.params(img.shards()));
            Some(status(name, state, img.shards(), after, want))
        })
        .collect()
}

/// Entity-wide availability of a resource (reference §3.12): per limit, the sum over shards of
/// the projected balances, capped at the undivided capacity; a limit no shard holds counts as
/// full. Statuses report the undivided limit, and `retry_after_ms` is computed against the
/// undivided rate.
pub fn availability(
    shards: &[BucketImage],
    limits: &[Limit],
    needed: &BTreeMap<String, i64>,
    now: i64,
) -> Vec<LimitStatus> {
    limits
        .iter()
        .map(|limit| {
            let mut total: Option<i64> = None;
            for img in shards {
                if let Some(state) = img.limits.get(limit.name()) {
                    let (after, _) = refill(state.tk, img.rf, now, state.params(img.shards()));
                    total = Some(total.unwrap_or(0).saturating_add(after));
                }
            }
            let cp = limit.capacity_milli();
            let balance = total.unwrap_or(cp).min(cp);
            let state = LimitState {
                tk: balance,
                cp,
                ra: limit.refill_amount_milli(),
                rp: limit.refill_period_millis(),
                tc: 0,
            };
            let want = needed.get(limit.name()).copied().unwrap_or(0);
            let mut st = status(limit.name(), &state, 1, balance, want);
            st.limit = limit.clone();
            st
        })
        .collect()
}

/// A random shard in `[from, to)`, given a uniform draw `r`.
pub fn shard_in(from: u32, to: u32, r: u32) -> u32 {
    let span = to.saturating_sub(from).max(1);
    (from + r % span).min(MAX_SHARD_COUNT - 1)
}

#[cfg(test)]
mod tests;
