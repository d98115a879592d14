//! The acquire's decisions: what to write, given what was read (reference §3).
//!
//! [`BucketStore`](super::BucketStore) turns a [`BucketImage`] (a bucket item as read, or as
//! returned by a failed or successful conditional write) into these plain structs and sends
//! the plans as DynamoDB requests; nothing here performs I/O or reads a clock — `now` is
//! always an argument.
//!
//! Amounts in a *demand* (`BTreeMap<String, i64>`) are millitokens keyed by limit name.

use std::collections::BTreeMap;

use dynalimit_core::bounds::Stamp;
use dynalimit_core::bucket::{
    MAX_SHARD_COUNT, ShardParams, WCU, WCU_DEBIT_MILLI, available_tokens, doubled_shard_count,
    refill, retry_after_ms, try_consume,
};
use dynalimit_core::image::quota_params;
pub use dynalimit_core::image::{
    BucketImage, CreatePlan, LimitState, LimitStatus, LimitWrite, NewShard, QuotaPin, QuotaState,
    Seed, StampChange, TtlAction, VuWrite, WindowState, WindowWrite, wcu_seed,
};
use dynalimit_core::limit::{Limit, MILLI};
use dynalimit_core::schedule::{self, Params, ResetSchedule, Schedule};

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
    if img.bypass_expired(now) || img.soft_expired(demand.keys(), now) {
        return FastFailure::ScheduleBoundary;
    }
    let bypassed = img.bypass_at(now);
    if img.boundary_passed(now) && !bypassed {
        return FastFailure::ScheduleBoundary;
    }
    let limit_short = !bypassed
        && demand.iter().any(|(name, &m)| {
            !img.soft_at(name, now) && img.limits.get(name).is_some_and(|s| s.tk < m)
        });
    let wcu_short = img.wcu.is_none_or(|w| w.tk < WCU_DEBIT_MILLI);
    match (wcu_short, limit_short) {
        (true, true) => FastFailure::BothExhausted,
        (true, false) => FastFailure::WcuExhausted,
        _ => FastFailure::AppLimitExhausted,
    }
}

/// The first demanded limit whose debit on the fast path came from tokens its limit never
/// granted: the balance before the debit (`tk + m` on `img`, the item after the debit) was
/// above the ceiling in force at `now`, or the item holds no such limit (a stray balance
/// without its capacity). Another writer left that balance; the fast path's condition checks
/// only `tk >= m`, so the caller gives the debit back ([`plan_refund`]) and decides on the
/// slow path, whose refill trims the balance to the ceiling. A bypassed item and a live soft
/// limit admit whatever the balance, and are not reported.
pub fn debit_beyond_ceiling<'a>(
    img: &BucketImage,
    demand: &'a BTreeMap<String, i64>,
    now: i64,
) -> Option<&'a str> {
    if img.bypass_at(now) {
        return None;
    }
    demand
        .iter()
        .find(|(name, m)| {
            !img.soft_at(name, now)
                && **m > 0
                && img.limits.get(name.as_str()).is_none_or(|state| {
                    state.tk.saturating_add(**m) > img.params_at(name, state, now).ceiling
                })
        })
        .map(|(name, _)| name.as_str())
}

/// A soft limit's status: never exceeded, whatever its balance (reference §12.4).
fn passed(mut st: LimitStatus) -> LimitStatus {
    st.overdrawn = st.exceeded;
    st.exceeded = false;
    st.retry_after_ms = 0;
    st
}

/// A limit's status on one shard at `now`: the share in force (the schedule applied, then
/// divided), the refilled balance, and the wait for a request that does not fit (walked across
/// the schedule's windows, reference §2.5).
fn status(
    name: &str,
    state: &LimitState,
    sched: Sched<'_>,
    shards: u32,
    after_refill: i64,
    want: i64,
    now: i64,
) -> LimitStatus {
    let exceeded = after_refill < want;
    let (schedule, reset) = (sched.schedule, sched.reset);
    let retry_after_ms = match (exceeded, schedule, reset) {
        (false, _, _) => 0,
        // A session quota's balance comes back when its window ends (a half-open window: no
        // extra millisecond); one that ended without a new one holds the share, so a request
        // it does not cover waits a whole window.
        (true, _, None) if sched.window.is_some() => {
            let (rsa, ws) = sched.window.unwrap_or_default();
            let w = WindowState {
                ws,
                ..WindowState::default()
            };
            match w.end(rsa) {
                Some(end) if end > now => end - now,
                _ => rsa.saturating_mul(1000),
            }
        }
        (true, None, None) => retry_after_ms(want - after_refill, state.params(shards)),
        (true, _, _) => {
            let base = if reset.is_some() {
                Params::new(state.cp, 0, state.rp)
            } else {
                state.base()
            };
            schedule::retry_after_ms(want - after_refill, base, schedule, reset, now, shards)
        }
    };
    let stored = state.limit(name);
    let (limit, bucket_limit) = if reset.is_some() || sched.window.is_some() {
        // A quota reports its grant in force, `cp // gc + tu` (reference §2.5); the
        // bucket's allowance is the capacity in force.
        let gc = sched.gc.unwrap_or(i64::from(shards.max(1)));
        let quota = |ceiling: i64| {
            let capacity = ceiling.div_euclid(dynalimit_core::limit::MILLI).max(1);
            Limit::custom(name, capacity, 0, state.rp.div_euclid(1000).max(1))
                .with_optional_reset(reset.cloned())
                .with_optional_window(sched.window.map(|(rsa, _)| rsa))
        };
        (
            quota(quota_params(state, schedule, gc, sched.tu, now).ceiling),
            quota(quota_params(state, schedule, 1, 0, now).ceiling),
        )
    } else {
        match schedule {
            None => (stored.shard_share(shards), stored.shard_share(1)),
            Some(s) => {
                let scheduled = stored.with_schedule(s.clone());
                (
                    scheduled.shard_share_at(shards, now),
                    scheduled.shard_share_at(1, now),
                )
            }
        }
    };
    let resets_at_ms = sched.window.and_then(|(rsa, ws)| {
        let w = WindowState {
            ws,
            ..WindowState::default()
        };
        w.end(rsa).filter(|end| *end > now)
    });
    LimitStatus {
        limit,
        bucket_limit,
        available: available_tokens(after_refill),
        requested: want.div_euclid(dynalimit_core::limit::MILLI),
        exceeded,
        retry_after_ms,
        overdrawn: false,
        resets_at_ms,
    }
}

/// The schedules a status is computed with: a parameter schedule, a quota's reset schedule
/// and its grant (`gc`, `tu`), a session quota's window (`rsa` seconds, `ws`).
#[derive(Debug, Clone, Copy, Default)]
struct Sched<'a> {
    schedule: Option<&'a Schedule>,
    reset: Option<&'a ResetSchedule>,
    gc: Option<i64>,
    tu: i64,
    window: Option<(i64, Option<i64>)>,
}

impl<'a> Sched<'a> {
    fn of(schedule: Option<&'a Schedule>, reset: Option<&'a ResetSchedule>) -> Self {
        Sched {
            schedule,
            reset,
            ..Sched::default()
        }
    }

    fn image(img: &'a BucketImage, name: &str, now: i64) -> Self {
        let window = img.window_length(name).map(|rsa| {
            let w = img.windows.get(name).copied().unwrap_or_default();
            (
                rsa,
                w.ws.filter(|_| w.end(rsa).is_some_and(|end| end > now)),
            )
        });
        // A window that ended or a newer one not yet applied is granted anew at the item's
        // shard count.
        let regranted = window.is_some() && {
            let w = img.windows.get(name).copied().unwrap_or_default();
            window.is_some_and(|(_, ws)| ws.is_none()) || w.rolled(img.rf)
        };
        let (gc, tu) = if regranted {
            (i64::from(img.shards()), 0)
        } else {
            img.grant(name)
        };
        Sched {
            schedule: img.schedule(name),
            reset: img.resets.get(name),
            gc: Some(gc),
            tu,
            window,
        }
    }
}

/// Limit `name`'s status on an image, refilled to `now` by the schedule stored on the item.
fn image_status(
    img: &BucketImage,
    name: &str,
    state: &LimitState,
    want: i64,
    now: i64,
) -> LimitStatus {
    let after = if img.window_length(name).is_some() {
        img.window_view(name, state, now)
    } else {
        refill(state.tk, img.rf, now, img.params_at(name, state, now)).0
    };
    status(
        name,
        state,
        Sched::image(img, name, now),
        img.shards(),
        after,
        want,
        now,
    )
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
    if img.bypass.is_some() {
        // A bypassed item admits everything; an expired stamp waits for a slow pass.
        return Gate::SlowPath;
    }
    let mut statuses = Vec::with_capacity(demand.len());
    for (name, &want) in demand {
        let Some(state) = img.limits.get(name) else {
            return Gate::SlowPath;
        };
        let st = image_status(img, name, state, want, now);
        statuses.push(if img.soft_at(name, now) {
            passed(st)
        } else {
            st
        });
    }
    if statuses.iter().any(|s| s.exceeded) {
        Gate::Reject(statuses)
    } else {
        Gate::SlowPath
    }
}

/// What a remembered image of a shard says about `demand` at `now` (reference §3.3, the local
/// rejection cache): the statuses when a declared limit is short even after refill, `None`
/// when the image may not be used to refuse (its `vu` stamp has passed, is past its `ttl`, is
/// disabled or carries what the core profile cannot interpret, lacks a declared limit, or
/// holds a declared limit defined otherwise than in `limits`, the acquire's explicit limits,
/// which its slow pass would write) or the limits would cover the request. Only declared
/// limits count: a `wcu` shortfall never refuses. A remembered image is never used to admit.
pub fn remembered_rejection(
    img: &BucketImage,
    demand: &BTreeMap<String, i64>,
    limits: Option<&[Limit]>,
    now: i64,
) -> Option<Vec<LimitStatus>> {
    if img.disabled
        || !img.unsupported.is_empty()
        || img
            .vu
            .is_some_and(|vu| vu <= now || vu > Stamp::Boundary.horizon(now))
        || img.bypass.is_some()
        || demand.keys().any(|name| img.soft.contains_key(name))
    {
        return None;
    }
    if let Some(limits) = limits {
        let agrees = demand.keys().all(|name| {
            let stored = img.limits.get(name).map(|s| s.limit(name));
            stored.is_some_and(|stored| limits.contains(&stored))
        });
        if !agrees {
            return None;
        }
    }
    if img.ttl.is_some_and(|t| t.saturating_mul(1000) <= now) {
        return None;
    }
    match fast_rejection_gate(img, demand, now) {
        Gate::Reject(statuses) => Some(statuses),
        Gate::SlowPath => None,
    }
}

/// Whether refilling the image's `wcu` limit to `now` restores at least one write token.
pub(crate) fn wcu_refill_restores(img: &BucketImage, now: i64) -> bool {
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

pub use dynalimit_core::bounds::STAMP_TTL_MS;

/// The deadline of a stamp written from a configuration read at `read_at`: the stamp
/// time-to-live times `0.8 + 0.2 × draw` (`draw` uniform in `[0, 1)`, so writers spread their
/// renewals).
pub fn stamp_deadline(read_at: i64, draw: f64) -> i64 {
    let share = 0.8 + 0.2 * draw.clamp(0.0, 1.0);
    read_at.saturating_add((STAMP_TTL_MS as f64 * share) as i64)
}

/// What the configuration read uncached on a slow pass says about a bucket's stamps
/// (reference §2.7, §12.1, §12.4): the names of the soft limits, whether the pair is
/// bypassed, and the deadline to write for those stamps (the configuration read time plus
/// the stamp time-to-live, drawn by the caller).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stamps {
    /// Names of the soft limits.
    pub names: std::collections::BTreeSet<String>,
    /// Whether the access walk says bypass.
    pub bypass: bool,
    /// `b_{name}_soft` and `bypass` to write, epoch ms.
    pub until: i64,
    /// Whether the pass writes the stamps (renewing the soft limits', removing the others'):
    /// only a pass whose configuration was read uncached; false for explicit limits.
    pub restamp: bool,
    /// Live session windows read from shard 0 for a shard other than 0 that is created or
    /// seeds a session quota (reference §12.3): the shard joins the entity's window instead
    /// of opening its own. Start of the window, epoch ms, per limit.
    pub joined: BTreeMap<String, i64>,
    /// The balance of each limit on a shard other than 0 being created: what a sibling moves
    /// to it in the create's transaction, or a fresh share ([`plan_funding`]). A limit not
    /// named here starts at its share.
    pub funded: BTreeMap<String, i64>,
}

impl Stamps {
    fn has(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The bypass stamp change of an item whose stamp read `read`: stamp a bypassed pair,
    /// remove the stamp of one that is not.
    fn bypass_change(&self, read: Option<i64>) -> Option<StampChange> {
        match (self.restamp, self.bypass, read) {
            (false, _, _) => None,
            (true, true, read) => Some(StampChange::Set {
                until: self.until,
                read,
            }),
            (true, false, Some(read)) => Some(StampChange::Remove { read }),
            (true, false, None) => None,
        }
    }

    /// The stamp change of limit `name`, whose stamp read `read`: renew a soft limit's,
    /// remove a hard limit's.
    fn stamp(&self, name: &str, read: Option<i64>) -> Option<StampChange> {
        if !self.restamp {
            return None;
        }
        if self.has(name) {
            Some(StampChange::Set {
                until: self.until,
                read,
            })
        } else {
            read.map(|read| StampChange::Remove { read })
        }
    }
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
    /// The `vu` stamp: the next schedule boundary, or removed (a `vu = 0` trim stamp lifted).
    pub vu: VuWrite,
    /// Shard count the plan's ceilings were computed with.
    pub shard_count: u32,
    /// Millitokens consumed per declared limit.
    pub consumed: BTreeMap<String, i64>,
    /// Statuses of the declared limits (none exceeded).
    pub statuses: Vec<LimitStatus>,
    /// The commit clock reading (a live soft stamp waives a balance floor).
    pub now: i64,
    /// Declared soft limits this write leaves below zero.
    pub overdrawn: Vec<String>,
    /// The change of the item's bypass stamp.
    pub bypass: Option<StampChange>,
    /// A quota's grant is written (a reset or a seed): the write is pinned on
    /// `shard_count <= ` this (the grant's size; a doubling since the read fails it).
    pub grant_pin: Option<u32>,
    /// A consumed quota gets its new period's grant in this write: after a lost lock the
    /// consumption-only retry could debit the old period, so the pass is planned again
    /// (hard case 32).
    pub resets_applied: bool,
}

impl RefillPlan {
    /// The session windows this write opens, `(limit, start, length in seconds)`: after it
    /// lands, a sharded bucket's other shards are told (reference §12.3).
    pub fn opened_windows(&self) -> Vec<(String, i64, i64)> {
        self.writes
            .iter()
            .filter_map(|w| {
                let win = w.window?;
                (win.opened).then_some((w.name.clone(), win.ws?, win.rsa))
            })
            .collect()
    }
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
    soft: &Stamps,
) -> Plan<RefillPlan> {
    let shards = img.shards();
    let mut writes = Vec::new();
    let mut statuses = Vec::new();
    let mut consumed = BTreeMap::new();
    let mut overdrawn = Vec::new();
    let mut names: Vec<&str> = limits.iter().map(Limit::name).collect();
    names.extend(img.limits.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    let mut vu_next: Option<i64> = None;
    let mut vote = |b: i64| vu_next = Some(vu_next.map_or(b, |v: i64| v.min(b)));
    let mut resets_applied = false;
    for name in names {
        let want = demand.get(name).copied();
        let configured = limits.iter().find(|l| l.name() == name);
        // A configured limit's schedules are the configuration's; a carried one keeps the
        // item's.
        let (sched, reset, window) = img.timing(name, limits);
        if let Some(s) = sched {
            vote(s.next_change(now));
        }
        if let Some(r) = reset {
            vote(r.next_edge_or_horizon(now));
        }
        match img.limits.get(name) {
            Some(state) => {
                let q = img.quotas.get(name).copied().unwrap_or_default();
                let quota = match (reset, window) {
                    (Some(r), _) => Some(img.quota_at(name, state, sched, r, now)),
                    (None, Some(rsa)) => Some(img.window_at(name, state, sched, rsa, now)),
                    (None, None) => None,
                };
                let reset_applied = quota.is_some_and(|q| q.granted);
                let (p, from, view) = match quota {
                    Some(quota) => {
                        let view = Sched {
                            schedule: sched,
                            reset,
                            gc: Some(quota.gc),
                            tu: quota.tu,
                            window: window.map(|rsa| (rsa, quota.ws)),
                        };
                        (quota.params, quota.tokens, view)
                    }
                    None => (
                        state.params_at(sched, shards, now),
                        state.tk,
                        Sched::of(sched, None),
                    ),
                };
                let window_write = window.zip(quota).map(|(rsa, q)| {
                    if let Some(ws) = q.ws {
                        vote(ws.saturating_add(rsa.saturating_mul(1000)));
                    }
                    WindowWrite {
                        rsa,
                        ws: q.ws,
                        opened: q.opened,
                        set_length: img.windows.get(name).and_then(|w| w.rsa) != Some(rsa),
                    }
                });
                let trusted = soft.has(name);
                let a = try_consume(from, img.rf, now, p, want.unwrap_or(0));
                if let Some(w) = want {
                    let st = status(name, state, view, shards, a.after_refill, w, now);
                    statuses.push(if trusted { passed(st) } else { st });
                }
                let c = if a.admitted || trusted {
                    want.unwrap_or(0)
                } else {
                    0
                };
                if reset_applied && c > 0 {
                    resets_applied = true;
                }
                let delta = a.after_refill - state.tk;
                if trusted && want.is_some() && a.after_refill - c < 0 {
                    overdrawn.push(name.to_owned());
                }
                writes.push(LimitWrite {
                    name: name.to_owned(),
                    add_tk: delta - c,
                    add_tc: c,
                    floor: (!trusted && c - delta > 0).then_some(c - delta),
                    pin_max: (delta > 0).then_some(state.tk),
                    seed: None,
                    soft: soft.stamp(name, img.soft.get(name).copied()),
                    grant: reset_applied.then_some(shards),
                    drop_top_up: reset_applied && q.tu.is_some(),
                    window: window_write,
                });
                if want.is_some() {
                    consumed.insert(name.to_owned(), c);
                }
            }
            None => {
                let Some(limit) = configured else {
                    continue;
                };
                let state = LimitState::starting(limit, shards, now);
                let w = want.unwrap_or(0);
                let trusted = soft.has(name);
                // A seeded session quota joins the entity's live window (read from shard 0)
                // or opens its own.
                let seed_window = window.map(|rsa| {
                    let joined = soft.joined.get(name).copied().filter(|_| shards > 1);
                    let ws = joined.unwrap_or(now);
                    vote(ws.saturating_add(rsa.saturating_mul(1000)));
                    WindowWrite {
                        rsa,
                        ws: Some(ws),
                        opened: joined.is_none(),
                        set_length: true,
                    }
                });
                let view = Sched {
                    schedule: sched,
                    reset,
                    gc: (reset.is_some() || window.is_some()).then_some(i64::from(shards)),
                    tu: 0,
                    window: seed_window.map(|w| (w.rsa, w.ws)),
                };
                let mut st = status(name, &state, view, shards, state.tk, w, now);
                if trusted {
                    st = passed(st);
                }
                let c = if st.exceeded { 0 } else { w };
                if trusted && want.is_some() && state.tk - c < 0 {
                    overdrawn.push(name.to_owned());
                }
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
                        schedule: sched.cloned(),
                        reset: reset.cloned(),
                    }),
                    soft: soft.stamp(name, img.soft.get(name).copied()),
                    grant: (reset.is_some() || window.is_some()).then_some(shards),
                    drop_top_up: false,
                    window: seed_window,
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
                name: dynalimit_core::bucket::WCU.to_owned(),
                add_tk: delta,
                add_tc: 0,
                floor: None,
                pin_max: (delta > 0).then_some(w.tk),
                seed: None,
                soft: None,
                grant: None,
                drop_top_up: false,
                window: None,
            }
        }
        None => LimitWrite {
            name: dynalimit_core::bucket::WCU.to_owned(),
            add_tk: 0,
            add_tc: 0,
            floor: None,
            pin_max: None,
            seed: Some(wcu_seed()),
            soft: None,
            grant: None,
            drop_top_up: false,
            window: None,
        },
    });
    let vu = VuWrite {
        read: img.vu,
        next: vu_next,
    };
    let ttl = match ttl {
        TtlAction::Remove if img.ttl.is_none() => TtlAction::Keep,
        other => other,
    };
    let grant_pin = writes.iter().any(|w| w.grant.is_some()).then_some(shards);
    // `rf` never moves below a window start (hard case 31): a lagging clock would otherwise
    // read the window as newer than the balance and apply it again.
    let rf_new = writes
        .iter()
        .filter_map(|w| w.window.and_then(|win| win.ws))
        .fold(now.max(img.rf), i64::max);
    Plan::Write(RefillPlan {
        rf_read: img.rf,
        rf_new,
        writes,
        ttl,
        vu,
        shard_count: shards,
        consumed,
        statuses,
        now,
        grant_pin,
        resets_applied,
        overdrawn,
        bypass: soft.bypass_change(img.bypass),
    })
}

/// Plans the create of missing shard `shard` of a bucket with `shard_count` shards.
///
/// Every resolved limit starts at the shard's share `cp // shard_count` (the capacity in
/// force) minus what this acquire consumes, unless `soft.funded` names its balance: a shard
/// other than 0 created while older shards hold the bucket's tokens is funded by a move from
/// one of them in the create's transaction ([`plan_funding`]), so the create never adds
/// tokens to the bucket. (A shard a doubling brings into use is created by the doubling
/// itself, [`plan_split`]; a create here finds a shard swept by the TTL or brought into use
/// by another writer's doubling.)
///
/// On shard 0 a request that does not fit is refused and nothing is created. On another
/// shard the create is written even then, with nothing consumed (`admitted` false), so the
/// tokens moved to it are not lost with the refusal.
pub fn plan_create(
    limits: &[Limit],
    demand: &BTreeMap<String, i64>,
    shard_count: u32,
    shard: u32,
    now: i64,
    ttl: Option<i64>,
    soft: &Stamps,
) -> Plan<CreatePlan> {
    let shards = shard_count.max(1);
    let mut rows = Vec::with_capacity(limits.len());
    let mut statuses = Vec::new();
    let mut consumed = BTreeMap::new();
    let mut stamps = BTreeMap::new();
    let mut overdrawn = Vec::new();
    // A session quota opens its window now, except on a shard other than 0 of a sharded
    // bucket whose entity has a live window (read from shard 0), which it joins; a shard
    // that opens a window holds its whole share.
    let windows: BTreeMap<String, (i64, bool)> = limits
        .iter()
        .filter(|l| l.window_seconds().is_some())
        .map(|l| {
            let joined = (shard > 0 && shards > 1)
                .then(|| soft.joined.get(l.name()).copied())
                .flatten();
            (
                l.name().to_owned(),
                (joined.unwrap_or(now), joined.is_none()),
            )
        })
        .collect();
    let vu = limits
        .iter()
        .flat_map(|l| {
            let change = l.schedule().map(|s| s.next_change(now));
            let edge = l.reset().map(|r| r.next_edge_or_horizon(now));
            let end = l
                .window_millis()
                .and_then(|w| windows.get(l.name()).map(|(ws, _)| ws.saturating_add(w)));
            change.into_iter().chain(edge).chain(end)
        })
        .min();
    for limit in limits {
        let mut state = LimitState::starting(limit, shards, now);
        if let Some(&funded) = soft.funded.get(limit.name()).filter(|_| shard > 0) {
            state.tk = funded;
        }
        let window = windows
            .get(limit.name())
            .zip(limit.window_seconds())
            .map(|((ws, _), rsa)| (rsa, Some(*ws)));
        let trusted = soft.has(limit.name());
        if trusted {
            stamps.insert(limit.name().to_owned(), soft.until);
        }
        let c = match demand.get(limit.name()) {
            Some(&w) => {
                let view = Sched {
                    window,
                    ..Sched::of(limit.schedule(), limit.reset())
                };
                let mut st = status(limit.name(), &state, view, shards, state.tk, w, now);
                if trusted {
                    st = passed(st);
                    if state.tk - w < 0 {
                        overdrawn.push(limit.name().to_owned());
                    }
                }
                let c = if st.exceeded { 0 } else { w };
                statuses.push(st);
                consumed.insert(limit.name().to_owned(), c);
                c
            }
            None => 0,
        };
        rows.push((limit.clone(), state.tk - c, c));
    }
    let admitted = !statuses.iter().any(|s| s.exceeded);
    if !admitted {
        if shard == 0 || shards == 1 {
            return Plan::Reject(statuses);
        }
        for (_, tk, tc) in &mut rows {
            *tk += *tc;
            *tc = 0;
        }
        consumed.values_mut().for_each(|c| *c = 0);
        overdrawn.clear();
    }
    Plan::Write(CreatePlan {
        rf: now,
        shard_count: shards,
        limits: rows,
        ttl,
        consumed,
        statuses,
        admitted,
        soft: stamps,
        overdrawn,
        bypass: (soft.restamp && soft.bypass).then_some(soft.until),
        vu,
        windows,
    })
}

/// A move of part of one shard's balance to a shard being created, written in the create's
/// transaction (reference §12.3, ADR-145, there for quotas; here for every limit): the donor
/// gives `amount` and the new shard starts with it, so the bucket's tokens are never handed
/// out twice and the new shard serves at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The limit.
    pub limit: String,
    /// The donor shard.
    pub donor: u32,
    /// Millitokens moved (see [`plan_funding`]).
    pub amount: i64,
    /// What the donor's debit is pinned on besides `b_tk >= amount`.
    pub pin: MovePin,
}

/// What a move's debit of its donor is pinned on, so that it lands only on the balance it was
/// sized against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovePin {
    /// A quota's grant: its grant count as read (`None`: absent, pinned absent with the
    /// donor's `shard_count`) and its period.
    Grant {
        /// The donor's grant count as read.
        donor_gc: Option<i64>,
        /// The donor's `shard_count` as read.
        donor_count: i64,
        /// What pins the donor's period.
        period: MovePeriod,
    },
    /// A dripping limit: the donor's `shard_count` as read (its share is what the amount
    /// was sized against).
    Share {
        /// The donor's `shard_count` as read.
        donor_count: u32,
    },
}

/// The period a grant move is pinned on: a calendar quota's donor must still be in the
/// period (`rf` at or after its last reset edge), a session quota's donor in the window it
/// applied (`wa` as read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MovePeriod {
    /// `rf >= edge`.
    Calendar {
        /// The last reset edge at or before now.
        edge: i64,
    },
    /// `b_{name}_wa = wa` (or absent).
    Session {
        /// `wa` as read.
        wa: Option<i64>,
    },
}

/// What a donor holding `balance` gives a new shard whose ceiling is `share`, when the donor
/// may keep at most `keep_max`: half its balance in whole tokens (the fraction stays with the
/// donor, so shards whose balances are whole stay whole), at least what it holds above
/// `keep_max` (which its next pass would trim), at most `share`, never below zero (a balance
/// in debt gives nothing). Floor division throughout: a donor that holds more than
/// `keep_max + share` keeps the excess until its next pass trims it, which happens only when
/// the shares do not divide the capacity (`cp mod S` millitokens at most).
///
/// ```
/// use dynalimit_repository::bucket::decide::split_amount;
/// assert_eq!(split_amount(60_000, 30_000, 30_000), 30_000);
/// assert_eq!(split_amount(7_000, 30_000, 30_000), 3_000);
/// assert_eq!(split_amount(12_500, 12_500, 12_500), 6_000);
/// assert_eq!(split_amount(-4_000, 30_000, 30_000), 0);
/// ```
pub fn split_amount(balance: i64, share: i64, keep_max: i64) -> i64 {
    let b = balance.max(0);
    let half = b.div_euclid(2).div_euclid(MILLI) * MILLI;
    let whole_share = share.max(0).div_euclid(MILLI) * MILLI;
    half.min(whole_share)
        .max(b.saturating_sub(keep_max))
        .min(share)
        .max(0)
}

/// How a shard being created is funded while other shards of its bucket exist (reference
/// §12.3, ADR-145, generalised to dripping limits). `siblings` are the other shards as read,
/// strongly consistent.
///
/// * A quota (calendar or session): the grant moved from the sibling whose grant covers slot
///   `shard` at `shard_count` in the current period (`shard mod gc = donor mod gc`, the
///   largest `gc`, then the lowest id), `min(cp_eff // S, donor balance)` in whole tokens
///   (the reference moves the millitokens too; keeping the fraction on the donor leaves
///   every shard's balance whole when the allowance is, so a 1→32 walk strands no
///   fractions); with no covering sibling, a fresh share `cp_eff // S` (the slot's part of
///   the allowance was never granted this period). A session quota moves only inside a live
///   window its donor applied; once the window ended the new shard opens its own with a
///   fresh share.
/// * A dripping limit: a shard of its line ([`line_of`]: the shard it splits from, that
///   one's, down to shard 0) gives [`split_amount`] of its stored balance (half in whole
///   tokens, at least what it holds above its share, at most the new shard's share
///   `cp_eff // S`): the nearest that holds more than its share (tokens of a doubling that
///   moved nothing, such as zae-limiter's, which its next pass would trim), else the
///   nearest. The donor's refill since its `rf` stays with it, at the same rate. With no
///   shard of the line holding the limit, a fresh share: the slot's tokens left the bucket
///   with the item (a TTL sweep), and the reference does the same.
///
/// Returns the new shard's balance per limit and the moves to write with its create.
pub fn plan_funding(
    limits: &[Limit],
    siblings: &[(u32, BucketImage)],
    shard: u32,
    shard_count: u32,
    now: i64,
) -> (BTreeMap<String, i64>, Vec<Move>) {
    let count = i64::from(shard_count.max(1));
    let mut funding = BTreeMap::new();
    let mut moves = Vec::new();
    for limit in limits {
        let name = limit.name();
        let share = limit.params_at(now).capacity.div_euclid(count);
        let found = if limit.is_quota() {
            grant_donor(limit, siblings, shard, now).map(|(id, img, state, period)| {
                // Whole tokens: the fraction stays with the donor, so moves never leave
                // shards holding parts of a token that no whole-token request can spend.
                let amount = share.min(state.tk).max(0).div_euclid(MILLI) * MILLI;
                let pin = MovePin::Grant {
                    donor_gc: img.quotas.get(name).and_then(|q| q.gc),
                    donor_count: i64::from(img.shards()),
                    period,
                };
                (id, amount, pin)
            })
        } else {
            line_donor(siblings, shard, name, share).map(|(id, img, state)| {
                let amount = split_amount(state.tk, share, share);
                let pin = MovePin::Share {
                    donor_count: img.shards(),
                };
                (id, amount, pin)
            })
        };
        match found {
            None => {
                funding.insert(name.to_owned(), share);
            }
            Some((donor, amount, pin)) => {
                funding.insert(name.to_owned(), amount);
                if amount > 0 {
                    moves.push(Move {
                        limit: name.to_owned(),
                        donor,
                        amount,
                        pin,
                    });
                }
            }
        }
    }
    (funding, moves)
}

/// The shard of `shard`'s line ([`line_of`]) among `siblings` that funds its dripping
/// limit `name` of share `share`: the nearest that holds more than its share (tokens of a
/// split that moved nothing, which its next pass would trim), else the nearest that holds
/// the limit. `None` when no shard of the line exists: the new shard's share is fresh.
fn line_donor<'a>(
    siblings: &'a [(u32, BucketImage)],
    shard: u32,
    name: &str,
    share: i64,
) -> Option<(u32, &'a BucketImage, &'a LimitState)> {
    let mut line = line_of(shard).filter_map(|at| {
        let (_, img) = siblings.iter().find(|(id, _)| *id == at)?;
        Some((at, img, img.limits.get(name)?))
    });
    let nearest = line.next()?;
    let mut line = std::iter::once(nearest).chain(line);
    Some(
        line.find(|(_, _, state)| state.tk > share)
            .unwrap_or(nearest),
    )
}

/// The shards `shard` splits from, nearest first: [`split_from`] repeated down to shard 0
/// (none for shard 0).
///
/// ```
/// use dynalimit_repository::bucket::decide::line_of;
/// assert_eq!(line_of(13).collect::<Vec<_>>(), [5, 1, 0]);
/// assert_eq!(line_of(0).count(), 0);
/// ```
pub fn line_of(shard: u32) -> impl Iterator<Item = u32> {
    std::iter::successors((shard > 0).then(|| split_from(shard)), |&at| {
        (at > 0).then(|| split_from(at))
    })
}

/// The sibling whose grant of `limit` covers slot `shard` in the current period (the largest
/// grant count, then the lowest id), with its state and the period pin.
fn grant_donor<'a>(
    limit: &Limit,
    siblings: &'a [(u32, BucketImage)],
    shard: u32,
    now: i64,
) -> Option<(u32, &'a BucketImage, &'a LimitState, MovePeriod)> {
    let name = limit.name();
    siblings
        .iter()
        .filter(|(id, _)| *id != shard)
        .filter_map(|(id, img)| {
            let state = img.limits.get(name)?;
            let gc = img.grant(name).0;
            let covers = i64::from(shard).rem_euclid(gc) == i64::from(*id).rem_euclid(gc);
            let period = grant_period(limit, img, now)?;
            covers.then_some((*id, img, state, gc, period))
        })
        .max_by_key(|(id, _, _, gc, _)| (*gc, std::cmp::Reverse(*id)))
        .map(|(id, img, state, _, period)| (id, img, state, period))
}

/// The period pin of a donor's grant, when its grant is of the current period: a calendar
/// quota's refilled since its last reset edge; a session quota's inside a live window it
/// applied.
fn grant_period(limit: &Limit, img: &BucketImage, now: i64) -> Option<MovePeriod> {
    if let Some(rsa) = limit.window_seconds() {
        let w = img.windows.get(limit.name()).copied().unwrap_or_default();
        let live = w.end(rsa).is_some_and(|end| end > now);
        return (live && !w.rolled(img.rf)).then_some(MovePeriod::Session { wa: w.wa });
    }
    let edge = limit.reset()?.prev_edge(now).unwrap_or(i64::MIN);
    (img.rf >= edge).then_some(MovePeriod::Calendar { edge })
}

/// A doubling of a bucket from `from` to `to` shards, written as one transaction (the
/// split): every existing shard `i < from` gives part of each balance to the shard
/// `i + from` it splits into, which the same transaction creates ([`Split`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitPlan {
    /// The shard count read on shard 0 (every donor's, pinned).
    pub from: u32,
    /// The shard count written on every donor and new shard.
    pub to: u32,
    /// One per existing shard below `from`.
    pub splits: Vec<Split>,
}

/// One existing shard's part of a split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The existing shard, `i < from`.
    pub donor: u32,
    /// Its rf-locked write (reference §3.7.2), materialised to now at `from` shards with
    /// nothing consumed, each limit's balance less what it gives: the refill it earned at the
    /// old share is kept, and `rf` moves to now, from where both halves refill at the new one.
    pub write: RefillPlan,
    /// The shard it splits into, created with what it was given; `None` when that shard
    /// exists already (an item another writer left), which the split leaves alone.
    pub shard: Option<NewShard>,
}

#[cfg(test)]
impl SplitPlan {
    /// The millitokens of `limit` the split moves, over every new shard.
    pub fn moved(&self, limit: &str) -> i64 {
        self.splits
            .iter()
            .filter_map(|s| s.shard.as_ref()?.balances.get(limit))
            .sum()
    }
}

/// Plans the split of a bucket from `from` to `to = 2 × from` shards at `now`, given every
/// shard read (strongly consistent) below `to`.
///
/// Each existing shard `i < from` is materialised by the rf-locked write a slow pass with
/// nothing consumed would make (refill at the old share, a quota's new period, a session
/// window applied or opened), then gives [`split_amount`] of each limit's balance to shard
/// `i + from`: half in whole tokens, at least what it would hold above its new share (a
/// dripping limit's ceiling falls to `cp // to`; a quota keeps its grant, so only the new
/// shard's share bounds it), at most the new shard's share `cp_eff // to`. Nothing is handed
/// out twice: what a donor gives it no longer holds. Nothing is stranded: the two hold what
/// the donor held. The odd millitoken of a share that does not divide stays with the donor,
/// and its next pass trims it when it is full; the whole-token rule keeps the fraction of a
/// balance with the donor, where a later refill or request spends it.
///
/// `None` when the bucket cannot be split this way: shard 0 is missing, or an existing shard
/// below `from` is disabled, carries what the core profile cannot interpret, or holds another
/// shard count than `from` (the caller raises a lagging one first). A shard below `from` that
/// is missing is left missing, with its twin: either is funded when it is created
/// ([`plan_funding`]).
pub fn plan_split(
    shards: &[(u32, BucketImage)],
    from: u32,
    to: u32,
    now: i64,
) -> Option<SplitPlan> {
    if !shards.iter().any(|(id, _)| *id == 0) {
        return None;
    }
    let mut splits = Vec::new();
    for (id, img) in shards.iter().filter(|(id, _)| *id < from) {
        if img.disabled || img.unsupported_reason().is_some() || img.shards() != from.max(1) {
            return None;
        }
        let Plan::Write(mut write) = plan_refill(
            img,
            &[],
            &BTreeMap::new(),
            now,
            TtlAction::Keep,
            &Stamps::default(),
        ) else {
            return None;
        };
        let twin = id + from;
        let exists = shards.iter().any(|(s, _)| *s == twin);
        let mut balances = BTreeMap::new();
        let mut windows = BTreeMap::new();
        for w in write.writes.iter_mut().filter(|w| w.seed.is_none()) {
            if let Some(ws) = w.window.and_then(|win| win.ws) {
                windows.insert(w.name.clone(), ws);
            }
            let Some(state) = img.limits.get(&w.name) else {
                continue;
            };
            if exists {
                continue;
            }
            let quota = img.resets.contains_key(&w.name) || img.window_length(&w.name).is_some();
            let schedule = img.schedule(&w.name);
            let (share, keep_max) = if quota {
                let share = quota_params(state, schedule, i64::from(to), 0, now).ceiling;
                (share, i64::MAX)
            } else {
                let share = state.params_at(schedule, to, now).ceiling;
                (share, share)
            };
            let delta = w.add_tk;
            let amount = split_amount(state.tk + delta, share, keep_max);
            w.add_tk = delta - amount;
            // The donor's balance may have been spent since the read: it must still cover
            // what it gives (hard case 3's floor, with the move as the consumption).
            w.floor = (amount - delta > 0).then_some(amount - delta);
            balances.insert(w.name.clone(), amount);
        }
        let shard = (!exists).then_some(NewShard {
            shard: twin,
            shard_count: to,
            rf: write.rf_new,
            balances,
            windows,
            vu: write.vu.next,
        });
        splits.push(Split {
            donor: *id,
            write,
            shard,
        });
    }
    Some(SplitPlan { from, to, splits })
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
    /// A quota's grant and period, pinned (reference §12.3).
    pub quota: Option<QuotaPin>,
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
/// (`ADD tk -d, tc +d`), negative = give back (a credit, guarded by the ceiling in force at
/// `now` by `states` and `schedules`, the lease's view of the item; a quota's credit by its
/// grant, and pinned on its grant and period by `quotas`).
pub fn plan_delta(
    net: &BTreeMap<String, i64>,
    states: &BTreeMap<String, LimitState>,
    schedules: &BTreeMap<String, Schedule>,
    quotas: &BTreeMap<String, QuotaPin>,
    shard_count: u32,
    now: i64,
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
            let quota = quotas.get(name).copied();
            let ceiling = match quota {
                Some(q) => {
                    quota_params(state, schedules.get(name), q.gc, q.tu.unwrap_or(0), now).ceiling
                }
                None => state.params_at(schedules.get(name), shards, now).ceiling,
            };
            plan.guards.push(CreditGuard {
                name: name.clone(),
                max_tk: ceiling + d,
                cp: state.cp,
                quota,
            });
        }
    }
    plan
}

/// A bypassed lease's net change (reference §12.1): only `tc` moves (the balances were never
/// debited), so nothing needs a ceiling guard.
pub fn plan_counted(net: &BTreeMap<String, i64>) -> DeltaPlan {
    DeltaPlan {
        adds: net
            .iter()
            .filter(|(_, d)| **d != 0)
            .map(|(name, d)| (name.clone(), 0, *d))
            .collect(),
        guards: Vec::new(),
        shard_count: 1,
    }
}

/// The refund of a debit an enforcing write made on an item found bypassed (reference §3.4):
/// the balances get `consumed` back, `tc` keeps the count, and nothing can exceed a ceiling
/// the debit did not lower it from, so no guard is needed.
pub fn plan_bypass_refund(consumed: &BTreeMap<String, i64>, shard_count: u32) -> DeltaPlan {
    DeltaPlan {
        adds: consumed
            .iter()
            .filter(|(_, m)| **m != 0)
            .map(|(name, m)| (name.clone(), *m, 0))
            .collect(),
        guards: Vec::new(),
        shard_count,
    }
}

/// The refund of a fast-path debit taken beyond the ceiling ([`debit_beyond_ceiling`]):
/// balances and counters get `consumed` back. No guard: it returns only what the debit took,
/// and the slow pass that follows trims the balance.
pub fn plan_refund(consumed: &BTreeMap<String, i64>, shard_count: u32) -> DeltaPlan {
    DeltaPlan {
        adds: consumed
            .iter()
            .filter(|(_, m)| **m != 0)
            .map(|(name, m)| (name.clone(), *m, -*m))
            .collect(),
        guards: Vec::new(),
        shard_count,
    }
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

/// The status of a declared limit after an admitted request (a lease's view at `now`):
/// `available` is what `tk` (millitokens, after the debit) leaves on the shard, `requested`
/// the `consumed` millitokens in whole tokens.
pub fn admitted_status(
    name: &str,
    state: &LimitState,
    schedules: (Option<&Schedule>, Option<&ResetSchedule>, Option<i64>),
    shards: u32,
    consumed: i64,
    now: i64,
) -> LimitStatus {
    let view = Sched {
        window: schedules.2.map(|rsa| (rsa, None)),
        ..Sched::of(schedules.0, schedules.1)
    };
    let mut st = status(name, state, view, shards, state.tk, 0, now);
    st.requested = consumed.div_euclid(dynalimit_core::limit::MILLI);
    st
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
            Some(image_status(img, name, state, want, now))
        })
        .collect()
}

/// Entity-wide availability of a resource (reference §3.12): per limit, the sum over shards of
/// the projected balances (each by the schedule stored on its item), capped at the undivided
/// capacity in force; a limit no shard holds counts as full. Statuses report the undivided
/// limit, and `retry_after_ms` is computed against the undivided rate.
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
            let mut window_end: Option<i64> = None;
            for img in shards {
                if let Some(state) = img.limits.get(limit.name()) {
                    if let Some(rsa) = img.window_length(limit.name()) {
                        // A session quota: the share again once its window ended, the roll
                        // target of a newer window, else the balance; the latest live end.
                        let w = img.windows.get(limit.name()).copied().unwrap_or_default();
                        if let Some(end) = w.end(limit.window_seconds().unwrap_or(rsa).max(rsa))
                            && end > now
                        {
                            window_end = Some(window_end.map_or(end, |e: i64| e.max(end)));
                        }
                        let after = img.window_view(limit.name(), state, now);
                        total = Some(total.unwrap_or(0).saturating_add(after));
                        continue;
                    }
                    let p = img.params_at(limit.name(), state, now);
                    // A quota whose reset edge passed since the shard's refill holds its new
                    // grant, the share of the capacity in force.
                    let pending = limit
                        .reset()
                        .and_then(|r| r.prev_edge(now))
                        .is_some_and(|edge| edge > img.rf);
                    let after = if pending {
                        limit
                            .params_at(now)
                            .capacity
                            .div_euclid(i64::from(img.shards()))
                    } else {
                        refill(state.tk, img.rf, now, p).0
                    };
                    total = Some(total.unwrap_or(0).saturating_add(after));
                }
            }
            let cp = limit.params_at(now).capacity;
            let balance = total.unwrap_or(cp).min(cp);
            let state = LimitState {
                tk: balance,
                cp: limit.capacity_milli(),
                ra: limit.refill_amount_milli(),
                rp: limit.refill_period_millis(),
                tc: 0,
            };
            let want = needed.get(limit.name()).copied().unwrap_or(0);
            let view = Sched {
                window: limit
                    .window_seconds()
                    .map(|rsa| (rsa, window_end.map(|end| end - rsa.saturating_mul(1000)))),
                ..Sched::of(limit.schedule(), limit.reset())
            };
            let mut st = status(limit.name(), &state, view, 1, balance, want, now);
            st.limit = limit.clone();
            st.bucket_limit = limit.clone();
            st
        })
        .collect()
}

/// A random shard in `[from, to)`, given a uniform draw `r`.
pub fn shard_in(from: u32, to: u32, r: u32) -> u32 {
    let span = to.saturating_sub(from).max(1);
    (from + r % span).min(MAX_SHARD_COUNT - 1)
}

/// The shard that `shard` was split from: the doubling that brought shard `k` into use
/// (from a count of `2^m` with `2^m <= k < 2^(m+1)`) split shard `k - 2^m`. Shard 0 is its own.
///
/// A split funds shard `k` from that shard ([`plan_split`]); a shard created later is funded
/// from the nearest one of its line that exists ([`plan_funding`]).
///
/// ```
/// use dynalimit_repository::bucket::decide::split_from;
/// assert_eq!([0, 1, 2, 3, 5, 7, 12].map(split_from), [0, 0, 0, 1, 1, 3, 4]);
/// ```
pub fn split_from(shard: u32) -> u32 {
    match shard.checked_ilog2() {
        Some(bit) => shard - (1 << bit),
        None => 0,
    }
}

/// One limit's part of a proactive refill (reference §7.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProactiveDelta {
    /// Limit name (`wcu` included).
    pub limit: String,
    /// Millitokens to add (negative: a trim).
    pub delta: i64,
    /// Balance on the image, pinned when the delta is positive.
    pub tk_read: i64,
}

/// A proactive refill of one bucket item, as the aggregator plans it (reference §7.3): `ADD`
/// the deltas and `SET rf = rf_new` under the `rf` lock, with pins on `vu`, `shard_count`
/// and each raised balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProactiveRefill {
    /// `rf` on the image (the lock).
    pub rf_read: i64,
    /// `rf` to stamp: `max(now, rf_read)`.
    pub rf_new: i64,
    /// `vu` on the image, pinned (absent: must stay absent).
    pub vu_read: Option<i64>,
    /// `shard_count` stored on the image, pinned (absent: must stay absent); the ceilings
    /// depend on it.
    pub shard_count: Option<i64>,
    /// Per-limit deltas.
    pub deltas: Vec<ProactiveDelta>,
}

/// Plans the proactive refill of an item from its image, the `shard_count` stored on it and
/// the batch's consumption per limit (millitokens). Each limit is projected to `now`; a
/// positive delta is written only when the projected balance is below what the batch saw
/// consumed (the bucket is busy), and a trim (a balance above a lowered ceiling) always is.
/// `None` when nothing needs writing or the item must be left alone (disabled, or carrying
/// what the core profile cannot interpret).
pub fn plan_proactive_refill(
    img: &BucketImage,
    shard_count: Option<i64>,
    consumed: &BTreeMap<String, i64>,
    now: i64,
) -> Option<ProactiveRefill> {
    if img.disabled || img.unsupported_reason().is_some() {
        return None;
    }
    let mut deltas = Vec::new();
    for (name, st) in img
        .limits
        .iter()
        .filter(|(n, _)| !img.resets.contains_key(*n) && img.window_length(n).is_none())
    {
        // A quota (calendar or session) is neither refilled nor trimmed here; its slow pass
        // gives the new grant or opens the new window.
        let (projected, _) = refill(st.tk, img.rf, now, img.params_at(name, st, now));
        let delta = projected - st.tk;
        let busy = projected < consumed.get(name).copied().unwrap_or(0).max(0);
        if delta < 0 || (delta > 0 && busy) {
            deltas.push(ProactiveDelta {
                limit: name.clone(),
                delta,
                tk_read: st.tk,
            });
        }
    }
    if deltas.is_empty() {
        return None;
    }
    deltas.extend(img.wcu.and_then(|w| wcu_delta(w.tk, w.tk, img.rf, now)));
    Some(ProactiveRefill {
        rf_read: img.rf,
        rf_new: now.max(img.rf),
        vu_read: img.vu,
        shard_count,
        deltas,
    })
}

/// The materialising write after a fast-path debit, when the bucket it debited had been full for
/// a while: the refill that accrued while it was full is wasted, yet the stored `rf` keeps
/// it, and a later slow pass would credit it (a burst after an idle full bucket admitted up
/// to twice its capacity). Planned from the image the debit returned (`img`, the item after
/// the debit of `demand` and one `wcu` token) as the proactive refill's write: each dripping
/// limit's balance before the debit projected to `now` and clamped, the difference `ADD`ed,
/// `rf` stamped `now`, under the `rf` lock with each raised balance pinned at or below what
/// the image shows. `ADD` keeps every debit that lands meanwhile.
///
/// Planned only when some limit's wasted refill reaches a tenth of its ceiling (at least one
/// millitoken), so a bucket is materialised at most ten times per refill period, and the refill
/// a later pass may credit too much stays below a tenth of the capacity. A scheduled limit
/// is projected with the parameters in force at `now` (a fast debit lands only before the
/// item's next boundary `vu`, which the write pins). A calendar quota's balance is left as
/// it is, and so is a session quota's; an item one of whose quotas passed a reset edge since
/// `rf`, or whose session window opened after `rf`, is not materialised (its slow pass grants the
/// new period). `None` as well for an item carrying soft or bypass stamps, or what dynalimit
/// cannot interpret.
pub fn plan_materialise(
    img: &BucketImage,
    demand: &BTreeMap<String, i64>,
    now: i64,
) -> Option<ProactiveRefill> {
    // Run after every fast debit: the cheap refusals first, then one pass that allocates
    // nothing, and the rest only for a bucket that wasted refill.
    if img.disabled || img.bypass.is_some() || !img.soft.is_empty() || now <= img.rf {
        return None;
    }
    // A quota does not refill: nothing of it is wasted, and it is left as it is.
    let dripping = || {
        img.limits
            .iter()
            .filter(|(n, _)| !img.resets.contains_key(*n) && img.window_length(n).is_none())
            .map(|(name, st)| {
                let before = st.tk.saturating_add(demand.get(name).copied().unwrap_or(0));
                (name, st, before, img.params_at(name, st, now))
            })
    };
    let elapsed = i128::from(now) - i128::from(img.rf);
    let wasted = dripping().any(|(_, _, before, p)| {
        let add = if p.period > 0 && p.rate > 0 {
            (elapsed * i128::from(p.rate)).div_euclid(i128::from(p.period))
        } else {
            0
        };
        i128::from(before) + add - i128::from(p.ceiling) >= i128::from((p.ceiling / 10).max(1))
    });
    if !wasted
        || img.unsupported_reason().is_some()
        // A session window opened since `rf` (on another shard, say) is still to be applied
        // here, which `rf` tells.
        || img.windows.values().any(|w| w.ws.is_none_or(|ws| ws > img.rf))
        // A calendar quota whose reset edge passed since `rf`: its slow pass grants it.
        || img
            .resets
            .values()
            .any(|r| r.prev_edge(now).is_some_and(|edge| edge > img.rf))
    {
        return None;
    }
    let mut deltas: Vec<ProactiveDelta> = dripping()
        .filter_map(|(name, st, before, p)| {
            let (projected, _) = refill(before, img.rf, now, p);
            (projected != before).then(|| ProactiveDelta {
                limit: name.clone(),
                delta: projected - before,
                tk_read: st.tk,
            })
        })
        .collect();
    deltas.extend(
        img.wcu
            .and_then(|w| wcu_delta(w.tk.saturating_add(WCU_DEBIT_MILLI), w.tk, img.rf, now)),
    );
    Some(ProactiveRefill {
        rf_read: img.rf,
        rf_new: now,
        vu_read: img.vu,
        shard_count: Some(i64::from(img.shards())),
        deltas,
    })
}

/// The `wcu` limit's part of an `rf`-locked refill: its balance `before` (any debit of the
/// write that returned the image given back) projected from `rf` to `now`, pinned at
/// `tk_read`, the balance the image shows; `None` when the projection changes nothing.
fn wcu_delta(before: i64, tk_read: i64, rf: i64, now: i64) -> Option<ProactiveDelta> {
    let (projected, _) = refill(before, rf, now, ShardParams::wcu());
    (projected != before).then(|| ProactiveDelta {
        limit: WCU.to_owned(),
        delta: projected - before,
        tk_read,
    })
}

/// Whether shard 0 should double proactively: its `wcu` projected to `now` is below 20 % of
/// capacity and the count is below the cap. Returns `(from, to)`.
pub fn plan_proactive_doubling(img: &BucketImage, now: i64) -> Option<(u32, u32)> {
    if img.disabled || img.unsupported_reason().is_some() {
        return None;
    }
    let w = img.wcu?;
    let (projected, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
    if i128::from(projected) * 5 >= i128::from(w.cp) {
        return None;
    }
    doubled_shard_count(img.shards()).map(|to| (img.shards(), to))
}

#[cfg(test)]
mod extremes;
#[cfg(test)]
mod items;
#[cfg(test)]
mod tests;
