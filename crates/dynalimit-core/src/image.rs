//! A bucket item as the acquire reads it and as a create writes it: the decoded image
//! ([`BucketImage`]), what one limit holds, the quota and session-window state, and the shapes
//! of the writes the format encodes ([`CreatePlan`], [`NewShard`]). The decisions over these
//! (what to write, given what was read) live beside the store that sends them, in
//! `dynalimit_repository::bucket::decide`.
//!
//! Amounts are millitokens, times epoch milliseconds; nothing here performs I/O or reads a
//! clock.

use std::collections::BTreeMap;

use crate::bounds::{MAX_STORED_MILLI, Stamp};
use crate::bucket::{ShardParams, WCU_CAPACITY_MILLI, WCU_PERIOD_MS, WCU_REFILL_MILLI, refill};
use crate::limit::Limit;
use crate::schedule::{Params, ResetSchedule, Schedule};

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
    pub(crate) fn roll_target(&self, share: i64, tc: i64) -> i64 {
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
pub fn quota_params(
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
    pub fn bypass_expired(&self, now: i64) -> bool {
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
    pub fn soft_expired<'a>(&self, mut names: impl Iterator<Item = &'a String>, now: i64) -> bool {
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

    /// Limit `name`'s parameter schedule, reset schedule and session window length (seconds):
    /// the configured limit's when `limits` holds it, else the item's own.
    pub fn timing<'a>(
        &'a self,
        name: &str,
        limits: &'a [Limit],
    ) -> (Option<&'a Schedule>, Option<&'a ResetSchedule>, Option<i64>) {
        match limits.iter().find(|l| l.name() == name) {
            Some(l) => (l.schedule(), l.reset(), l.window_seconds()),
            None => (
                self.schedule(name),
                self.resets.get(name),
                self.window_length(name),
            ),
        }
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
    pub fn window_view(&self, name: &str, state: &LimitState, now: i64) -> i64 {
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
    pub fn grant(&self, name: &str) -> (i64, i64) {
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
    /// `Limit::from_stored` reads them), with the item's schedules, reset schedules and
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
    pub fn boundary_passed(&self, now: i64) -> bool {
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
    /// use dynalimit_core::image::LimitStatus;
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

/// A shard created whole from a donor shard's item (by a split, `plan_split`, or by an
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
