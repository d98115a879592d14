//! Decisions of the acquire path: what to write, given what was read (reference §3).
//!
//! The repository turns a [`BucketImage`] (a bucket item as read, or as returned by a failed or
//! successful conditional write) into these plain structs and turns the plans back into
//! DynamoDB expressions; nothing here performs I/O or reads a clock — `now` is always an
//! argument.
//!
//! Amounts in a *demand* (`BTreeMap<String, i64>`) are millitokens keyed by limit name.

use std::collections::BTreeMap;

use crate::bounds::{MAX_STORED_MILLI, Stamp};
use crate::bucket::{
    MAX_SHARD_COUNT, ShardParams, WCU, WCU_CAPACITY_MILLI, WCU_DEBIT_MILLI, WCU_PERIOD_MS,
    WCU_REFILL_MILLI, available_tokens, doubled_shard_count, refill, retry_after_ms, try_consume,
};
use crate::limit::{Limit, MILLI};
use crate::schedule::{self, Params, ResetSchedule, Schedule};

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
    /// A fresh limit on a shard of `shard_count` at `now`: the shard's share of the capacity
    /// in force (`cp // S`, the schedule applied first), nothing consumed; `cp`, `ra` and `rp`
    /// are the base.
    pub fn starting(limit: &Limit, shard_count: u32, now: i64) -> Self {
        LimitState {
            tk: limit
                .params_at(now)
                .capacity
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

    /// The stored base parameters (undivided).
    pub fn base(&self) -> Params {
        Params::new(self.cp, self.ra, self.rp)
    }

    /// This limit's parameters on a shard at `now`: those `schedule` puts in force over the
    /// stored base, then divided by `shard_count` (reference §2.3).
    pub fn params_at(
        &self,
        schedule: Option<&Schedule>,
        shard_count: u32,
        now: i64,
    ) -> ShardParams {
        match schedule {
            None => self.params(shard_count),
            Some(s) => {
                let p = s.params(self.base(), now);
                ShardParams::for_shard(p.capacity, p.refill_amount, p.refill_period, shard_count)
            }
        }
    }

    /// The configured (undivided) limit this state was written from, in whole units.
    pub fn limit(&self, name: &str) -> Limit {
        Limit::from_stored(name, self.cp, self.ra, self.rp)
    }
}

/// A calendar quota's state on a shard beyond the common fields (reference §12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuotaState {
    /// `b_{name}_gc`: the shard count the period's grant was sized at (absent: the item's).
    pub gc: Option<i64>,
    /// `b_{name}_tu`: operator top-ups of the period, millitokens (part of the ceiling).
    pub tu: Option<i64>,
    /// `b_{name}_rn`: how many operator resets the limit has had.
    pub rn: Option<i64>,
}

/// What a credit to a quota is pinned on (reference §12.3): the grant and the period it was
/// read in, so that a refund never lands in the next period or above the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaPin {
    /// The shard count the grant was sized at (`b_{name}_gc`, pinned; absent read as this).
    pub gc: i64,
    /// Whether `b_{name}_gc` was stored (else it is pinned absent).
    pub gc_stored: bool,
    /// Top-ups of the period, as read (pinned).
    pub tu: Option<i64>,
    /// Operator resets, as read (pinned).
    pub rn: Option<i64>,
    /// The first reset edge after the item's refill time: a credit lands only while `rf` is
    /// still before it.
    pub next_edge: Option<i64>,
    /// A session quota's window as read, `(ws, wa)` (pinned, absent values pinned absent):
    /// a credit never lands after a new window opened or was applied.
    pub window: Option<(Option<i64>, Option<i64>)>,
}

impl QuotaPin {
    /// The pin of a quota as an item holds it, with `rf` the item's refill time.
    pub fn of(reset: &ResetSchedule, q: QuotaState, shard_count: u32, rf: i64) -> QuotaPin {
        QuotaPin {
            next_edge: reset.next_edge(rf),
            ..QuotaPin::grant(q, shard_count)
        }
    }

    /// The pin of a session quota as an item holds it (reference §12.3): its grant and the
    /// window it was read in.
    pub fn of_window(w: WindowState, q: QuotaState, shard_count: u32) -> QuotaPin {
        QuotaPin {
            rn: None,
            window: Some((w.ws, w.wa)),
            ..QuotaPin::grant(q, shard_count)
        }
    }

    /// The pin of a quota's grant alone (`gc`, `tu`, `rn` as read), with no period.
    fn grant(q: QuotaState, shard_count: u32) -> QuotaPin {
        QuotaPin {
            gc: q
                .gc
                .filter(|g| *g >= 1)
                .unwrap_or(i64::from(shard_count.max(1))),
            gc_stored: q.gc.is_some(),
            tu: q.tu,
            rn: q.rn,
            next_edge: None,
            window: None,
        }
    }
}

/// A session quota's window on a shard (reference §12.3): `b_{name}_rsa`, `_ws`, `_wa`,
/// `_wtc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowState {
    /// The window length in seconds, as stored (the configuration's decides).
    pub rsa: Option<i64>,
    /// The start of the entity's current window, epoch ms (replicated to every shard).
    pub ws: Option<i64>,
    /// The window start this shard's balance reflects (`wa <= ws`).
    pub wa: Option<i64>,
    /// The shard's `tc` when a sibling's new window reached it: what it spent since is
    /// charged to the new window when the shard applies it.
    pub wtc: Option<i64>,
}

impl WindowState {
    /// Whether a newer window reached this shard than its balance reflects (`ws > wa`, or
    /// `ws > rf` on an item without `wa`).
    pub fn rolled(&self, rf: i64) -> bool {
        self.ws.is_some_and(|ws| ws > self.wa.unwrap_or(rf))
    }

    /// The end of the window of length `rsa` seconds, when one was opened.
    pub fn end(&self, rsa: i64) -> Option<i64> {
        self.ws
            .map(|ws| ws.saturating_add(rsa.saturating_mul(1000)))
    }

    /// The balance of a shard applying a new window: its share, less what it spent after
    /// the window reached it (`tc - wtc`, when a fan-out recorded `wtc`). The counters may
    /// hold any value another writer stored: the difference is taken exactly and the balance
    /// is never below `-MAX_STORED_MILLI`.
    pub fn roll_target(&self, share: i64, tc: i64) -> i64 {
        match self.wtc {
            Some(wtc) => {
                let spent = (i128::from(tc) - i128::from(wtc)).max(0);
                let target = (i128::from(share) - spent).max(-i128::from(MAX_STORED_MILLI));
                i64::try_from(target).unwrap_or(share)
            }
            None => share,
        }
    }
}

/// A quota on a shard at a given time ([`BucketImage::quota_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaAt {
    /// The reset edge passed since the item's refill: the balance is the new grant.
    pub granted: bool,
    /// The balance before any refill clamp: the new grant, or the stored balance.
    pub tokens: i64,
    /// The quota's parameters on the shard (ceiling `cp // gc + tu`, no drip).
    pub params: ShardParams,
    /// The grant count in force.
    pub gc: i64,
    /// The top-ups in force.
    pub tu: i64,
    /// A session quota's window start after the pass (opened now, or as read).
    pub ws: Option<i64>,
    /// A session quota's window was opened by this pass (its start is `now`).
    pub opened: bool,
}

/// A quota's parameters on a shard at `now`: the ceiling is the grant, `cp // gc` (the
/// capacity in force), plus the period's top-ups; nothing drips.
pub(crate) fn quota_params(
    state: &LimitState,
    schedule: Option<&Schedule>,
    gc: i64,
    tu: i64,
    now: i64,
) -> ShardParams {
    let cp = schedule.map_or(state.cp, |s| s.params(state.base(), now).capacity);
    ShardParams {
        ceiling: cp.div_euclid(gc.max(1)).saturating_add(tu),
        rate: 0,
        period: state.rp.max(1),
        undivided_rate: 0,
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
    /// Owner's parent generation at stamp time (`pgen`), if stamped.
    pub pgen: Option<i64>,
    /// Owner's incarnation at stamp time (`pinc`), if stamped.
    pub pinc: Option<String>,
    /// Expiry, epoch seconds.
    pub ttl: Option<i64>,
    /// `disabled = true` stamp.
    pub disabled: bool,
    /// "Valid until" stamp, epoch ms (`0` forces one slow pass).
    pub vu: Option<i64>,
    /// User limits present on the item (both `tk` and `cp` exist).
    pub limits: BTreeMap<String, LimitState>,
    /// Soft stamps (`b_{name}_soft`, reference §12.4): the deadline, epoch ms, until which a
    /// limit is debited but never refuses, per limit present on the item.
    pub soft: BTreeMap<String, i64>,
    /// Bypass stamp (reference §12.1): the deadline, epoch ms, until which every request is
    /// admitted, counted in `tc` and debited from no balance (a stamp that is not a number
    /// reads as expired, 0).
    pub bypass: Option<i64>,
    /// The reserved `wcu` limit, if present.
    pub wcu: Option<LimitState>,
    /// Parameter schedules stored on the item (reference §12.2), per limit that has one (the
    /// item's default `sched` resolved against `b_{name}_sched` and its `"-"` marker).
    pub schedules: BTreeMap<String, Schedule>,
    /// Reset schedules stored on the item (reference §12.3), per calendar quota (`rsched`
    /// resolved against `b_{name}_rsched`).
    pub resets: BTreeMap<String, ResetSchedule>,
    /// Grant counts, top-ups and reset counters of the item's quotas.
    pub quotas: BTreeMap<String, QuotaState>,
    /// Session windows of the item's session quotas (reference §12.3), per limit that
    /// carries a window attribute.
    pub windows: BTreeMap<String, WindowState>,
    /// 0.15–0.17 features found on the item that dynalimit cannot interpret
    /// (attribute names, as the table format's bucket codec reports them).
    pub unsupported: Vec<String>,
}

impl BucketImage {
    /// Shard count as a divisor (never 0).
    pub fn shards(&self) -> u32 {
        self.shard_count.max(1)
    }

    /// Whether the item carries a bypass stamp live at `now`: later than `now`, and no
    /// further ahead than a stamp lives ([`Stamp::Deadline`]).
    pub fn bypass_at(&self, now: i64) -> bool {
        self.bypass
            .is_some_and(|until| Stamp::Deadline.live(until, now))
    }

    /// Whether the item carries a bypass stamp that is not live at `now` (expired, or
    /// further ahead than a stamp lives): the fast path refuses it so that a slow pass
    /// renews or removes it.
    fn bypass_expired(&self, now: i64) -> bool {
        self.bypass
            .is_some_and(|until| !Stamp::Deadline.live(until, now))
    }

    /// Whether limit `name` carries a soft stamp live at `now` (as [`BucketImage::bypass_at`]).
    pub fn soft_at(&self, name: &str, now: i64) -> bool {
        self.soft
            .get(name)
            .is_some_and(|&until| Stamp::Deadline.live(until, now))
    }

    /// Whether one of the `names` carries a soft stamp that is not live at `now` (the fast
    /// path refuses it so that a slow pass renews or removes it).
    fn soft_expired<'a>(&self, mut names: impl Iterator<Item = &'a String>, now: i64) -> bool {
        names.any(|name| {
            self.soft
                .get(name)
                .is_some_and(|&until| !Stamp::Deadline.live(until, now))
        })
    }

    /// The parameter schedule stored on the item for limit `name`.
    pub fn schedule(&self, name: &str) -> Option<&Schedule> {
        self.schedules.get(name)
    }

    /// Limit `name`'s parameters on this shard at `now`, by the schedules stored on the item
    /// (a quota's ceiling is its grant plus the period's top-ups).
    pub fn params_at(&self, name: &str, state: &LimitState, now: i64) -> ShardParams {
        if self.resets.contains_key(name) || self.window_length(name).is_some() {
            let (gc, tu) = self.grant(name);
            return quota_params(state, self.schedule(name), gc, tu, now);
        }
        state.params_at(self.schedule(name), self.shards(), now)
    }

    /// The window length (seconds) of limit `name` when the item holds it as a session
    /// quota: a stored `rsa`, no drip, no reset schedule.
    pub fn window_length(&self, name: &str) -> Option<i64> {
        // Most items carry no window: one look-up answers for them.
        let rsa = self.windows.get(name)?.rsa.filter(|r| *r > 0)?;
        let quota =
            !self.resets.contains_key(name) && self.limits.get(name).is_some_and(|s| s.ra == 0);
        quota.then_some(rsa)
    }

    /// The share of limit `name` on this shard at `now`: the capacity in force divided by
    /// the item's shard count (what a new grant gives).
    fn share(state: &LimitState, schedule: Option<&Schedule>, shards: u32, now: i64) -> i64 {
        let cp = schedule.map_or(state.cp, |s| s.params(state.base(), now).capacity);
        cp.div_euclid(i64::from(shards.max(1)))
    }

    /// Session quota `name` on this shard at `now`, with a window of `rsa` seconds (the
    /// configuration's) (reference §12.3): a window that ended (or was never opened) is
    /// opened at `now` with the shard's whole share; a newer window a sibling opened is
    /// applied (the share less what the shard spent since it arrived); otherwise the balance
    /// stands under its grant. Nothing drips.
    pub fn window_at(
        &self,
        name: &str,
        state: &LimitState,
        schedule: Option<&Schedule>,
        rsa: i64,
        now: i64,
    ) -> QuotaAt {
        let w = self.windows.get(name).copied().unwrap_or_default();
        let share = BucketImage::share(state, schedule, self.shards(), now);
        let opened = w.end(rsa).is_none_or(|end| end <= now);
        let rolled = !opened && w.rolled(self.rf);
        let granted = opened || rolled;
        let (gc, tu) = if granted {
            (i64::from(self.shards()), 0)
        } else {
            self.grant(name)
        };
        let tokens = if opened {
            share
        } else if rolled {
            w.roll_target(share, state.tc)
        } else {
            state.tk
        };
        QuotaAt {
            granted,
            tokens,
            params: quota_params(state, schedule, gc, tu, now),
            gc,
            tu,
            ws: if opened { Some(now) } else { w.ws },
            opened,
        }
    }

    /// What a reader sees of session quota `name` at `now` without writing (reference §12.3,
    /// the fast-rejection gate and availability): a window that ended holds the whole share
    /// again, a newer window not yet applied its roll target, otherwise the balance.
    fn window_view(&self, name: &str, state: &LimitState, now: i64) -> i64 {
        let Some(rsa) = self.window_length(name) else {
            return state.tk;
        };
        let w = self.windows.get(name).copied().unwrap_or_default();
        let share = BucketImage::share(state, self.schedule(name), self.shards(), now);
        match w.end(rsa) {
            None => share,
            Some(end) if end <= now => share,
            Some(_) if w.rolled(self.rf) => w.roll_target(share, state.tc),
            Some(_) => refill(state.tk, self.rf, now, self.params_at(name, state, now)).0,
        }
    }

    /// A quota's grant count (`gc`, the item's shard count when absent) and top-ups.
    pub(crate) fn grant(&self, name: &str) -> (i64, i64) {
        let q = self.quotas.get(name).copied().unwrap_or_default();
        let gc = q.gc.filter(|g| *g >= 1).unwrap_or(i64::from(self.shards()));
        (gc, q.tu.unwrap_or(0))
    }

    /// Quota `name` on this shard at `now` by `schedule` and `reset` (reference §12.3): when
    /// its reset edge passed since the item's refill, the new period's grant (the share of
    /// the capacity in force at the item's shard count) replaces the balance; otherwise the
    /// balance stands under the grant it was given (`cp // gc + tu`). Nothing drips.
    pub fn quota_at(
        &self,
        name: &str,
        state: &LimitState,
        schedule: Option<&Schedule>,
        reset: &ResetSchedule,
        now: i64,
    ) -> QuotaAt {
        let granted = reset.prev_edge(now).is_some_and(|edge| edge > self.rf);
        let (gc, tu) = if granted {
            (i64::from(self.shards()), 0)
        } else {
            self.grant(name)
        };
        let params = quota_params(state, schedule, gc, tu, now);
        QuotaAt {
            granted,
            tokens: if granted { params.ceiling } else { state.tk },
            params,
            gc,
            tu,
            ws: None,
            opened: false,
        }
    }

    /// The credit pin of quota `name` on this item, if it is one.
    pub fn quota_pin(&self, name: &str) -> Option<QuotaPin> {
        let q = self.quotas.get(name).copied().unwrap_or_default();
        if self.window_length(name).is_some() {
            let w = self.windows.get(name).copied().unwrap_or_default();
            return Some(QuotaPin::of_window(w, q, self.shards()));
        }
        let reset = self.resets.get(name)?;
        Some(QuotaPin::of(reset, q, self.shards(), self.rf))
    }

    /// The limits as the item stores them: capacity, refill and period (in whole units, as
    /// [`Limit::from_stored`] reads them), with the item's schedules, reset schedules and
    /// session windows. What a writer without the configuration (the aggregator) plans with.
    pub fn stored_limits(&self) -> Vec<Limit> {
        self.limits
            .iter()
            .map(|(name, state)| {
                let mut limit = state.limit(name);
                if state.ra == 0 {
                    limit = Limit::custom(
                        name.as_str(),
                        limit.capacity(),
                        0,
                        limit.refill_period_seconds(),
                    );
                }
                limit
                    .with_optional_schedule(self.schedule(name).cloned())
                    .with_optional_reset(self.resets.get(name).cloned())
                    .with_optional_window(self.window_length(name))
            })
            .collect()
    }

    /// The names of the item's quotas (calendar and session).
    pub fn quota_names(&self) -> impl Iterator<Item = &String> {
        self.limits
            .keys()
            .filter(|name| self.resets.contains_key(*name) || self.window_length(name).is_some())
    }

    /// Whether a `vu` stamp at or before `now` asks for a slow pass: always on an item with a
    /// schedule; on one without, `vu = 0` only asks for a trim, which an ordinary exhausted
    /// consume already implies.
    ///
    /// A `vu` further ahead than a boundary lies ([`Stamp::Boundary`]) asks for one too: the
    /// slow pass writes the item's true boundary.
    fn boundary_passed(&self, now: i64) -> bool {
        let scheduled =
            !self.schedules.is_empty() || !self.resets.is_empty() || !self.windows.is_empty();
        self.vu.is_some_and(|vu| {
            (vu <= now && (vu != 0 || scheduled)) || vu > Stamp::Boundary.horizon(now)
        })
    }

    /// Why this item must not be materialised (reference §12.8), if it must not: a quota,
    /// reset or window attribute, a stored schedule that does not decode, or a limit with no
    /// refill.
    pub fn unsupported_reason(&self) -> Option<String> {
        if let Some(attr) = self.unsupported.first() {
            return Some(format!("bucket carries unsupported attribute {attr}"));
        }
        // A sharded quota's ceilings are its grants; one without a recorded grant count was
        // sized by a client older than the grant counts (reference §12.3).
        if self.shards() > 1
            && let Some(name) = self
                .quota_names()
                .find(|name| self.quotas.get(*name).is_none_or(|q| q.gc.is_none()))
        {
            return Some(format!(
                "quota {name} is sharded over {} shards without a grant count (gc)",
                self.shards()
            ));
        }
        self.limits
            .iter()
            .find(|(name, s)| {
                s.ra <= 0 && !self.resets.contains_key(*name) && self.window_length(name).is_none()
            })
            .map(|(name, _)| {
                format!("limit {name} has no refill, no reset schedule and no session window")
            })
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

/// One limit's verdict, reported per shard (reference §2.5): the limit is this shard's share,
/// `available` the refilled balance in whole tokens. [`LimitStatus::bucket_limit`] and
/// [`LimitStatus::bucket_available`] give the whole bucket's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    /// The shard's share of the limit (capacity and refill divided by the shard count, floored
    /// at 1 token), or the undivided limit for an entity-wide availability check.
    pub limit: Limit,
    /// The whole bucket's limit in force (undivided, the schedule applied; for a quota its
    /// allowance for the period, without top-ups): what a caller is told its limit is.
    pub bucket_limit: Limit,
    /// Whole tokens available after refill (floor; negative in debt).
    pub available: i64,
    /// Whole tokens requested.
    pub requested: i64,
    /// Whether the request does not fit.
    pub exceeded: bool,
    /// Milliseconds until it would fit (0 when it fits).
    pub retry_after_ms: i64,
    /// A soft limit (reference §12.4) that does not cover the request: admitted all the
    /// same, into debt. Never set for a hard limit.
    pub overdrawn: bool,
    /// A session quota's live window's end, epoch ms: when its allowance comes back whole
    /// (`None` for other limits, or when no window is live).
    pub resets_at_ms: Option<i64>,
}

impl LimitStatus {
    /// The whole bucket's balance in whole tokens, estimated from the shard's: `available`
    /// scaled by the bucket's capacity over the shard's (an acquire draws its shard at random,
    /// so each shard carries an even share of the traffic and holds an even share of what is
    /// left), at most the bucket's capacity (negative in debt). Exact on a bucket of one
    /// shard and for an entity-wide availability check.
    ///
    /// ```
    /// use dynalimit_core::Limit;
    /// use dynalimit_core::decide::LimitStatus;
    /// let bucket = Limit::per_minute("rpm", 100);
    /// let status = LimitStatus {
    ///     limit: bucket.shard_share(4), // 25 a minute on each of 4 shards
    ///     bucket_limit: bucket,
    ///     available: 10,
    ///     requested: 1,
    ///     exceeded: false,
    ///     retry_after_ms: 0,
    ///     overdrawn: false,
    ///     resets_at_ms: None,
    /// };
    /// assert_eq!(status.bucket_available(), 40);
    /// ```
    pub fn bucket_available(&self) -> i64 {
        let whole = self.bucket_limit.capacity();
        let share = i128::from(self.limit.capacity().max(1));
        let scaled = (i128::from(self.available) * i128::from(whole)).div_euclid(share);
        i64::try_from(scaled.min(i128::from(whole))).unwrap_or(i64::MIN)
    }
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
            let capacity = ceiling.div_euclid(crate::limit::MILLI).max(1);
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
        requested: want.div_euclid(crate::limit::MILLI),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// Starting tokens (the shard's share minus what this acquire consumes).
    pub tk: i64,
    /// Capacity, undivided, milli.
    pub cp: i64,
    /// Refill amount, undivided, milli.
    pub ra: i64,
    /// Refill period, ms.
    pub rp: i64,
    /// The limit's parameter schedule: a seed spells its own (or `"-"`) rather than inherit
    /// the item's default (reference §12.2).
    pub schedule: Option<Schedule>,
    /// A quota's reset schedule (reference §12.3), spelled likewise.
    pub reset: Option<ResetSchedule>,
}

/// How an rf-locked write leaves `vu` (reference §12.2): stamped with the earliest boundary of
/// the scheduled limits it writes, or removed when none is scheduled; pinned on the value read
/// (with the shard count, since the plan's ceilings depend on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VuWrite {
    /// `vu` as read (`None`: absent).
    pub read: Option<i64>,
    /// `vu` to stamp (`None`: none, removed if read).
    pub next: Option<i64>,
}

impl VuWrite {
    /// Whether the write touches `vu`.
    pub fn changes(&self) -> bool {
        self.read != self.next
    }
}

pub use crate::bounds::STAMP_TTL_MS;

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

/// A stamp change of an rf-locked write (a soft stamp, or the item's bypass stamp), pinned on
/// the value read (a pass that read the configuration before a fan-out cannot undo the
/// fan-out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampChange {
    /// `SET stamp = until` where the item held `read`.
    Set {
        /// The new deadline.
        until: i64,
        /// The deadline read (`None`: absent).
        read: Option<i64>,
    },
    /// `REMOVE stamp` where the item held `read`.
    Remove {
        /// The deadline read.
        read: i64,
    },
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
    /// The soft stamp to write, when it changes.
    pub soft: Option<StampChange>,
    /// A quota's new grant (reference §12.3): `SET b_{name}_gc` to this shard count, at a
    /// reset or a seed.
    pub grant: Option<u32>,
    /// A quota reset drops the period's top-ups (`REMOVE b_{name}_tu`).
    pub drop_top_up: bool,
    /// A session quota's window attributes to write.
    pub window: Option<WindowWrite>,
}

/// The window attributes an rf-locked write gives a session quota (reference §12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowWrite {
    /// The window length, seconds (`b_{name}_rsa`).
    pub rsa: i64,
    /// The window start the shard's balance now reflects (`SET b_{name}_wa`), when any.
    pub ws: Option<i64>,
    /// This write opens the window at `ws` (`SET b_{name}_ws`, `b_{name}_rsa`); unless it
    /// joined a sibling's live window, a sharded bucket's other shards learn it by a fan-out.
    pub opened: bool,
    /// The stored length differs from the configuration's (`SET b_{name}_rsa`).
    pub set_length: bool,
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
    /// Whether the request fits: false for an empty new shard written without consuming
    /// anything (the acquire is then refused with `statuses`).
    pub admitted: bool,
    /// Soft stamps to write (`b_{name}_soft`), per soft limit.
    pub soft: BTreeMap<String, i64>,
    /// Declared soft limits the create leaves below zero.
    pub overdrawn: Vec<String>,
    /// The bypass stamp to write, when the pair is bypassed.
    pub bypass: Option<i64>,
    /// The earliest schedule boundary of the limits (`vu`), when one is scheduled.
    pub vu: Option<i64>,
    /// Session quotas' windows: `(start, opened)` per limit (`opened` false: a sibling's live
    /// window joined).
    pub windows: BTreeMap<String, (i64, bool)>,
}

impl CreatePlan {
    /// The session windows this create opens on a shard other than 0 of a sharded bucket,
    /// `(limit, start, length in seconds)`, which the other shards are told of.
    pub fn opened_windows(&self, shard: u32) -> Vec<(String, i64, i64)> {
        if shard == 0 || self.shard_count <= 1 {
            return Vec::new();
        }
        self.limits
            .iter()
            .filter_map(|(l, _, _)| {
                let (ws, opened) = self.windows.get(l.name())?;
                (*opened).then_some((l.name().to_owned(), *ws, l.window_seconds()?))
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
        let (sched, reset, window) = match configured {
            Some(l) => (l.schedule(), l.reset(), l.window_seconds()),
            None => (
                img.schedule(name),
                img.resets.get(name),
                img.window_length(name),
            ),
        };
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
                name: crate::bucket::WCU.to_owned(),
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
            name: crate::bucket::WCU.to_owned(),
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

/// The `wcu` block of a new item: full.
pub fn wcu_seed() -> Seed {
    Seed {
        tk: WCU_CAPACITY_MILLI,
        cp: WCU_CAPACITY_MILLI,
        ra: WCU_REFILL_MILLI,
        rp: WCU_PERIOD_MS,
        schedule: None,
        reset: None,
    }
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
/// use dynalimit_core::decide::split_amount;
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
/// use dynalimit_core::decide::line_of;
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

/// A shard created whole from a donor shard's item (by a split, [`plan_split`], or by an
/// aggregator's pre-creation): the donor's item with this shard's keys, `shard_count`, `rf`
/// and `vu`; every limit holding its balance from `balances` (0 when not named), nothing
/// consumed (`tc = 0`); the `wcu` block full (it is never divided); a quota's grant sized at
/// the new count, no top-ups, the donor's reset counter; a session quota's window started at
/// `windows`' start and applied (`ws = wa`, no `wtc`), or the donor's when not named. Owner
/// stamps, schedules, `ttl`, soft and bypass stamps are the donor's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewShard {
    /// The shard created.
    pub shard: u32,
    /// Its `shard_count`.
    pub shard_count: u32,
    /// Its `rf`.
    pub rf: i64,
    /// Its balance per limit, millitokens.
    pub balances: BTreeMap<String, i64>,
    /// The window start each session quota holds, applied.
    pub windows: BTreeMap<String, i64>,
    /// Its `vu` (`None`: none).
    pub vu: Option<i64>,
}

impl NewShard {
    /// The image of the shard created from `donor`'s item (the table format's
    /// `bucket::clone_for_shard` writes the same item).
    pub fn image(&self, donor: &BucketImage) -> BucketImage {
        let mut img = donor.clone();
        img.rf = self.rf;
        img.shard_count = self.shard_count;
        img.vu = self.vu;
        for (name, state) in &mut img.limits {
            state.tk = self.balances.get(name).copied().unwrap_or(0);
            state.tc = 0;
        }
        if let Some(w) = &mut img.wcu {
            w.tk = w.cp;
            w.tc = 0;
        }
        let quotas: Vec<String> = donor.quota_names().cloned().collect();
        for name in quotas {
            let q = img.quotas.entry(name).or_default();
            q.gc = Some(i64::from(self.shard_count));
            q.tu = None;
        }
        for (name, w) in &mut img.windows {
            if let Some(&start) = self.windows.get(name) {
                w.ws = Some(start);
                w.wa = Some(start);
            }
            w.wtc = None;
        }
        img
    }
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
    st.requested = consumed.div_euclid(crate::limit::MILLI);
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
/// use dynalimit_core::decide::split_from;
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
    if let Some(w) = img.wcu {
        let (projected, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
        if projected != w.tk {
            deltas.push(ProactiveDelta {
                limit: WCU.to_owned(),
                delta: projected - w.tk,
                tk_read: w.tk,
            });
        }
    }
    Some(ProactiveRefill {
        rf_read: img.rf,
        rf_new: now.max(img.rf),
        vu_read: img.vu,
        shard_count,
        deltas,
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
mod tests;
