//! An operator's reset or top-up of one (entity, resource) (reference §12.6): what one
//! `rf`-locked pass writes on each shard of the bucket, consuming nothing.
//!
//! Every shard is first **materialised** as an acquire's slow path would: each limit on it,
//! the `wcu` tracker included, is refilled to `now` (reference §2.4). The operation is then
//! applied to the named limits, and each limit's change is written as a **delta** (`ADD
//! b_{name}_tk`), never as a new balance: a fast-path debit landing between the read and the
//! write is kept and counts against the new balance.
//!
//! * A **reset** brings every resolved limit of every shard back to its ceiling, `cp // S`
//!   with `S` the shard's `shard_count` (debt is forgiven).
//! * A **top-up** adds whole tokens to the named limits. A dripping limit gains at most its
//!   headroom, the room below the ceiling after the refill, summed over the shards; the
//!   amount is split over the shards in proportion to their headroom ([`split_by_headroom`]).
//!
//! A limit's ceiling is the capacity in force (its schedule applied). A **quota** resets to
//! its shard's share of the capacity in force with its grant count set to the shard count
//! and its operator-reset counter (`rn`) raised; a quota whose reset edge passed since the
//! item's refill gets the new period's grant whichever operation runs. A quota's top-up adds
//! exactly the amount, split over its shards by the part of the allowance each one's grant
//! covers, to the balances and to the period's top-ups (`tu`), which raise the ceilings as
//! much until the next period.
//! A **session quota** applies a newer window a sibling opened whichever operation runs; its
//! reset does not touch the balance but marks the window ended and applied
//! (`ws = wa = now - window`), so the next acquire opens a new window with the whole share.
//!
//! ```
//! use dynalimit_core::Limit;
//! use dynalimit_core::image::{BucketImage, LimitState, TtlAction};
//! use dynalimit_core::operation::{OperationShard, plan_reset};
//!
//! let rpm = Limit::per_minute("rpm", 100);
//! let mut image = BucketImage { rf: 0, shard_count: 1, ..BucketImage::default() };
//! image.limits.insert("rpm".into(), LimitState { tk: -5_000, ..LimitState::starting(&rpm, 1, 0) });
//! let shard = OperationShard { shard: 0, stored_count: Some(1), image };
//! // 30 s later the refill has brought 50 tokens back (45 000 milli); the reset adds the rest.
//! let plan = plan_reset(&[shard], &[rpm], 30_000, TtlAction::Keep);
//! assert_eq!(plan.writes[0].deltas["rpm"], 105_000);
//! assert_eq!(plan.amounts["rpm"], 55); // restored beyond what the refill gave back
//! assert_eq!(plan.writes[0].rf_new, 30_000);
//! ```

use std::collections::BTreeMap;

use crate::CoreError;
use crate::bucket::{ShardParams, WCU, refill};
use crate::image::{BucketImage, TtlAction};
use crate::limit::{Limit, MAX_TOKENS as MAX_AMOUNT, MILLI};

/// Which operation a call performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Every limit back to its ceiling.
    Reset,
    /// Tokens added to named limits.
    TopUp,
}

/// One shard of the bucket as read (strongly consistent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationShard {
    /// Shard id.
    pub shard: u32,
    /// The `shard_count` stored on the item; `None` when the item stores none (it reads as 1).
    /// The write is pinned on it.
    pub stored_count: Option<u32>,
    /// The item as read.
    pub image: BucketImage,
}

/// What one shard's write does: `ADD b_{name}_tk :delta` per limit, `SET rf = rf_new, vu = 0`
/// and the `ttl` action, conditioned on `rf = rf_read` and the shard count read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardWrite {
    /// Shard id.
    pub shard: u32,
    /// `rf` read: the lock.
    pub rf_read: i64,
    /// `rf` written: `max(now, rf_read + 1)`, strictly past the lock, so that any writer
    /// locked on the value read (an aggregator's refill of a stale image) loses.
    pub rf_new: i64,
    /// `shard_count` read (`None`: the item stores none and must still store none).
    pub count_pin: Option<u32>,
    /// Millitokens added per limit (`wcu` included); zero deltas are left out.
    pub deltas: BTreeMap<String, i64>,
    /// What happens to `ttl`.
    pub ttl: TtlAction,
    /// Quotas given a new grant (reference §12.3): `SET b_{name}_gc` to this count.
    pub grants: Vec<(String, u32)>,
    /// Quotas whose period's top-ups the new grant drops: `REMOVE b_{name}_tu`.
    pub drop_top_ups: Vec<String>,
    /// Quotas reset by the operator: `ADD b_{name}_rn 1` (a credit pinned on the count read
    /// then never lands).
    pub reset_counters: Vec<String>,
    /// Session quotas' windows written (reference §12.6).
    pub windows: BTreeMap<String, WindowOp>,
    /// Quotas topped up: `SET b_{name}_tu` to this (the period's top-ups, millitokens).
    pub top_ups: BTreeMap<String, i64>,
}

/// What an operation writes of a session quota's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOp {
    /// The window start the balance reflects: `SET b_{name}_wa`.
    pub wa: i64,
    /// A reset's new (already ended) window: `SET b_{name}_ws` to it and `b_{name}_rsa`.
    pub start: Option<(i64, i64)>,
    /// `REMOVE b_{name}_wtc` (a reset: nothing spent is carried into the next window).
    pub clear_wtc: bool,
}

/// Every shard's write, and what the operation did per named limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationPlan {
    /// One write per shard read, by shard id.
    pub writes: Vec<ShardWrite>,
    /// Whole tokens per named limit: what a top-up granted (at most the headroom), or what a
    /// reset restored beyond the refill (floor of the millitoken sum; negative when a balance
    /// sat above a lowered ceiling).
    pub amounts: BTreeMap<String, i64>,
}

/// Checks a top-up's amounts before any I/O: at least one limit, each amount a whole number of
/// tokens in `1..=10^15`. Limit names are checked by the caller against the table's rules.
///
/// # Errors
/// [`CoreError::InvalidValue`] naming the first bad amount.
pub fn validate_top_up(amounts: &BTreeMap<String, i64>) -> Result<(), CoreError> {
    if amounts.is_empty() {
        return Err(CoreError::invalid_value(
            "amounts",
            "{}",
            "name at least one limit to top up",
        ));
    }
    for (name, &amount) in amounts {
        if !(1..=MAX_AMOUNT).contains(&amount) {
            return Err(CoreError::invalid_value(
                "amounts",
                format!("{name}={amount}"),
                format!("each amount must be a whole number of tokens from 1 to {MAX_AMOUNT}"),
            ));
        }
    }
    Ok(())
}

/// The shards whose stored count is below the highest one read, and that count: a doubling
/// whose propagation has not reached them yet. The operation raises them first and reads
/// again, so that every shard is planned at one count (`None` when they agree).
pub fn lagging(shards: &[OperationShard]) -> Option<(u32, Vec<u32>)> {
    let top = shards.iter().map(|s| s.image.shards()).max()?;
    let behind: Vec<u32> = shards
        .iter()
        .filter(|s| s.image.shards() < top)
        .map(|s| s.shard)
        .collect();
    (!behind.is_empty()).then_some((top, behind))
}

/// One shard during planning: its balances after the refill to `now`, changed by the
/// operation.
struct Working<'a> {
    shard: &'a OperationShard,
    tokens: BTreeMap<String, i64>,
    /// Each limit's ceiling at `now`: the capacity in force divided by the shard count, or a
    /// quota's grant plus its top-ups.
    ceilings: BTreeMap<String, i64>,
    /// Quotas given a new grant by this write: `SET b_{name}_gc`, `REMOVE b_{name}_tu`.
    grants: Vec<String>,
    /// Quotas reset by the operator: `ADD b_{name}_rn 1`.
    resets: Vec<String>,
    /// Session windows written.
    windows: BTreeMap<String, WindowOp>,
    /// Quotas topped up: their new `b_{name}_tu`.
    top_ups: BTreeMap<String, i64>,
}

impl<'a> Working<'a> {
    /// Every limit on the item (resolved or not) and `wcu`, refilled to `now` by the
    /// configuration's schedules (the item's for a limit no longer configured); a quota whose
    /// reset edge passed since the item's refill gets the period's grant first.
    fn materialise(shard: &'a OperationShard, limits: &[Limit], now: i64) -> Self {
        let img = &shard.image;
        let mut w = Working {
            shard,
            tokens: BTreeMap::new(),
            ceilings: BTreeMap::new(),
            grants: Vec::new(),
            resets: Vec::new(),
            windows: BTreeMap::new(),
            top_ups: BTreeMap::new(),
        };
        for (name, state) in &img.limits {
            let (sched, reset, window) = img.timing(name, limits);
            let (from, p) = match reset {
                None if window.is_some() => {
                    // A newer window a sibling opened is applied, even one that has ended
                    // since; an operation never opens one.
                    let ws = img.windows.get(name).copied().unwrap_or_default();
                    let rolled = ws.rolled(img.rf);
                    let (gc, tu) = if rolled {
                        w.grants.push(name.clone());
                        (i64::from(img.shards()), 0)
                    } else {
                        img.grant(name)
                    };
                    let p = crate::image::quota_params(state, sched, gc, tu, now);
                    match ws.ws {
                        Some(start) if rolled => {
                            w.windows.insert(
                                name.clone(),
                                WindowOp {
                                    wa: start,
                                    start: None,
                                    clear_wtc: false,
                                },
                            );
                            (ws.roll_target(p.ceiling, state.tc), p)
                        }
                        _ => (state.tk, p),
                    }
                }
                None => (state.tk, state.params_at(sched, img.shards(), now)),
                Some(r) => {
                    let q = img.quota_at(name, state, sched, r, now);
                    if q.granted {
                        w.grants.push(name.clone());
                    }
                    (q.tokens, q.params)
                }
            };
            let (tokens, ceiling) = (refill(from, img.rf, now, p).0, p.ceiling);
            w.tokens.insert(name.clone(), tokens);
            w.ceilings.insert(name.clone(), ceiling);
        }
        if let Some(wcu) = img.wcu {
            w.tokens.insert(
                WCU.to_owned(),
                refill(wcu.tk, img.rf, now, ShardParams::wcu()).0,
            );
        }
        w
    }

    /// The ceiling of limit `name` on this shard, when the shard holds it.
    fn ceiling(&self, name: &str) -> Option<i64> {
        self.ceilings.get(name).copied()
    }

    /// Whole tokens of room below the ceiling of limit `name` (0 when the shard lacks it).
    fn headroom(&self, name: &str) -> i64 {
        match (self.ceiling(name), self.tokens.get(name)) {
            (Some(ceiling), Some(&tokens)) => (ceiling - tokens).max(0).div_euclid(MILLI),
            _ => 0,
        }
    }

    fn into_write(self, now: i64, ttl: TtlAction) -> ShardWrite {
        let img = &self.shard.image;
        let mut stored: BTreeMap<&str, i64> = img
            .limits
            .iter()
            .map(|(name, state)| (name.as_str(), state.tk))
            .collect();
        if let Some(w) = img.wcu {
            stored.insert(WCU, w.tk);
        }
        let deltas = self
            .tokens
            .iter()
            .filter_map(|(name, &after)| {
                let delta = after - stored.get(name.as_str()).copied().unwrap_or(after);
                (delta != 0).then(|| (name.clone(), delta))
            })
            .collect();
        let mut grants = self.grants;
        grants.sort();
        grants.dedup();
        // A new grant drops the period's top-ups, unless this operation sets new ones.
        let drop_top_ups = grants
            .iter()
            .filter(|name| img.quotas.get(*name).is_some_and(|q| q.tu.is_some()))
            .filter(|name| !self.top_ups.contains_key(*name))
            .cloned()
            .collect();
        let applied = self.windows.values().map(|op| op.wa);
        ShardWrite {
            shard: self.shard.shard,
            rf_read: img.rf,
            rf_new: applied.fold(now.max(img.rf.saturating_add(1)), i64::max),
            count_pin: self.shard.stored_count,
            deltas,
            ttl: match ttl {
                TtlAction::Remove if img.ttl.is_none() => TtlAction::Keep,
                other => other,
            },
            grants: grants
                .into_iter()
                .map(|name| (name, img.shards()))
                .collect(),
            drop_top_ups,
            reset_counters: self.resets,
            windows: self.windows,
            top_ups: self.top_ups,
        }
    }
}

fn finish(
    working: Vec<Working<'_>>,
    amounts: BTreeMap<String, i64>,
    now: i64,
    ttl: TtlAction,
) -> OperationPlan {
    let mut writes: Vec<ShardWrite> = working
        .into_iter()
        .map(|w| w.into_write(now, ttl))
        .collect();
    writes.sort_by_key(|w| w.shard);
    OperationPlan { writes, amounts }
}

/// Plans a reset of every shard read: each limit of `limits` a shard holds goes back to its
/// ceiling, every other limit on the item (and `wcu`) is refilled to `now`. A limit no shard
/// holds yet is left for the next acquire to seed; it restores 0.
///
/// `ttl` is the action for the pair's configuration source; a [`TtlAction::Remove`] is kept
/// only for shards that carry a `ttl`.
pub fn plan_reset(
    shards: &[OperationShard],
    limits: &[Limit],
    now: i64,
    ttl: TtlAction,
) -> OperationPlan {
    let mut working: Vec<Working<'_>> = shards
        .iter()
        .map(|s| Working::materialise(s, limits, now))
        .collect();
    let mut amounts = BTreeMap::new();
    for limit in limits {
        let name = limit.name();
        let mut restored: i128 = 0;
        for w in &mut working {
            let Some(mut ceiling) = w.ceiling(name) else {
                continue;
            };
            if let Some(rsa) = limit.window_seconds() {
                // A session quota: the window ends now and is applied; the balance stays, and
                // the next acquire opens a new window with the whole share.
                let ended = now - rsa.saturating_mul(1000);
                let stored = w.shard.image.windows.get(name).copied().unwrap_or_default();
                w.windows.insert(
                    name.to_owned(),
                    WindowOp {
                        wa: ended,
                        start: Some((ended, rsa)),
                        clear_wtc: stored.wtc.is_some(),
                    },
                );
                let share = limit
                    .params_at(now)
                    .capacity
                    .div_euclid(i64::from(w.shard.image.shards()));
                if let Some(tokens) = w.tokens.get(name) {
                    restored += i128::from(share) - i128::from(*tokens);
                }
                continue;
            }
            if limit.is_quota() {
                // A quota goes back to the shard's share of the capacity in force, sized at
                // the shard count, and counts the operator's reset.
                let count = i64::from(w.shard.image.shards());
                ceiling = limit.params_at(now).capacity.div_euclid(count);
                w.grants.push(name.to_owned());
                w.resets.push(name.to_owned());
            }
            if let Some(tokens) = w.tokens.get_mut(name) {
                restored += i128::from(ceiling) - i128::from(*tokens);
                *tokens = ceiling;
            }
        }
        let whole = restored.div_euclid(i128::from(MILLI));
        amounts.insert(name.to_owned(), i64::try_from(whole).unwrap_or(i64::MAX));
    }
    finish(working, amounts, now, ttl)
}

/// Plans a top-up of every shard read: each named limit gains `amounts[name]` whole tokens at
/// most, bounded by its headroom summed over the shards and split over them by
/// [`split_by_headroom`]; every other limit on the items (and `wcu`) is refilled to `now`.
///
/// # Errors
/// [`CoreError::InvalidValue`] when a named limit is not among `limits`, or no shard holds
/// it yet (it is configured but was never seeded: an acquire seeds it).
pub fn plan_top_up(
    shards: &[OperationShard],
    limits: &[Limit],
    amounts: &BTreeMap<String, i64>,
    now: i64,
    ttl: TtlAction,
) -> Result<OperationPlan, CoreError> {
    let unknown: Vec<&str> = amounts
        .keys()
        .map(String::as_str)
        .filter(|name| !limits.iter().any(|l| l.name() == *name))
        .collect();
    if !unknown.is_empty() {
        let configured: Vec<&str> = limits.iter().map(Limit::name).collect();
        return Err(CoreError::invalid_value(
            "limit",
            unknown.join(", "),
            format!(
                "not a limit configured for the pair (configured: {})",
                configured.join(", ")
            ),
        ));
    }
    let mut working: Vec<Working<'_>> = shards
        .iter()
        .map(|s| Working::materialise(s, limits, now))
        .collect();
    let mut granted = BTreeMap::new();
    for (name, &amount) in amounts {
        let holders: Vec<usize> = (0..working.len())
            .filter(|&i| working[i].ceiling(name).is_some())
            .collect();
        if holders.is_empty() && !working.is_empty() {
            return Err(CoreError::invalid_value(
                "amounts",
                name,
                "the limit is configured but not yet on this bucket; acquire once to seed it, \
                 then top up",
            ));
        }
        let quota = limits
            .iter()
            .find(|l| l.name() == name)
            .filter(|l| l.is_quota());
        if let Some(limit) = quota {
            if holders.is_empty() {
                return Err(CoreError::invalid_value(
                    "amounts",
                    name,
                    "the quota has no bucket yet; acquire once to create it, then top up",
                ));
            }
            let portions = top_up_quota(&mut working, &holders, limit, amount, now);
            granted.insert(name.clone(), portions);
            continue;
        }
        let headroom: Vec<i64> = holders.iter().map(|&i| working[i].headroom(name)).collect();
        let portions = split_by_headroom(amount, &headroom);
        for (&i, &portion) in holders.iter().zip(&portions) {
            if let Some(tokens) = working[i].tokens.get_mut(name) {
                *tokens += portion * MILLI;
            }
        }
        granted.insert(name.clone(), portions.iter().sum());
    }
    Ok(finish(working, granted, now, ttl))
}

/// A quota's top-up (reference §12.6): exactly `amount` whole tokens, split over the shards
/// that hold it in proportion to the share of the period's allowance each one's grant covers
/// (`max(1, S // gc)`), added to the balance and to the period's top-ups (`tu`), which raise
/// the shard's ceiling by as much. A session quota whose window ended is given a new window
/// first (the top-up belongs to it). Returns the amount.
fn top_up_quota(
    working: &mut [Working<'_>],
    holders: &[usize],
    limit: &Limit,
    amount: i64,
    now: i64,
) -> i64 {
    let name = limit.name();
    for &i in holders {
        let w = &mut working[i];
        let img = &w.shard.image;
        let Some(rsa) = limit.window_seconds() else {
            continue;
        };
        let stored = img.windows.get(name).copied().unwrap_or_default();
        if stored.end(rsa).is_some_and(|end| end > now) {
            continue;
        }
        let share = limit
            .params_at(now)
            .capacity
            .div_euclid(i64::from(img.shards()));
        w.tokens.insert(name.to_owned(), share);
        w.grants.push(name.to_owned());
        w.windows.insert(
            name.to_owned(),
            WindowOp {
                wa: now,
                start: Some((now, rsa)),
                clear_wtc: false,
            },
        );
    }
    let weights: Vec<i64> = holders
        .iter()
        .map(|&i| {
            let img = &working[i].shard.image;
            let regranted = working[i].grants.iter().any(|g| g == name);
            let gc = if regranted {
                i64::from(img.shards())
            } else {
                img.grant(name).0
            };
            (i64::from(img.shards()) / gc.max(1)).max(1)
        })
        .collect();
    let portions = split_weighted(amount, &weights);
    for (&i, &portion) in holders.iter().zip(&portions) {
        let w = &mut working[i];
        let img = &w.shard.image;
        let regranted = w.grants.iter().any(|g| g == name);
        let tu = if regranted { 0 } else { img.grant(name).1 };
        if let Some(tokens) = w.tokens.get_mut(name) {
            *tokens += portion * MILLI;
        }
        if portion > 0 {
            w.top_ups.insert(name.to_owned(), tu + portion * MILLI);
        }
    }
    amount
}

/// Splits `total` whole tokens over slots in proportion to `weights` (each at least 1):
/// floors first, what they leave to the lowest slots, one each.
///
/// ```
/// use dynalimit_core::operation::split_weighted;
/// assert_eq!(split_weighted(10, &[1, 1, 2]), [3, 2, 5]);
/// assert_eq!(split_weighted(7, &[1]), [7]);
/// ```
pub fn split_weighted(total: i64, weights: &[i64]) -> Vec<i64> {
    let weights: Vec<i128> = weights.iter().map(|&w| i128::from(w.max(1))).collect();
    let sum: i128 = weights.iter().sum();
    if sum == 0 {
        return Vec::new();
    }
    let total = i128::from(total.max(0));
    let mut portions: Vec<i128> = weights.iter().map(|w| total * w / sum).collect();
    let mut left = total - portions.iter().sum::<i128>();
    for p in &mut portions {
        if left == 0 {
            break;
        }
        *p += 1;
        left -= 1;
    }
    portions
        .into_iter()
        .map(|p| i64::try_from(p).unwrap_or(i64::MAX))
        .collect()
}

/// Splits up to `total` whole tokens over slots in proportion to each slot's `headroom`,
/// never above it: `min(total, Σ headroom)` is handed out as `total × room // Σ room` per
/// slot, and what the floors leave goes to the lowest slots first, each still within its
/// headroom. The portions sum to `min(total, Σ headroom)` (0 when there is no headroom).
///
/// ```
/// use dynalimit_core::operation::split_by_headroom;
/// assert_eq!(split_by_headroom(10, &[5, 5]), [5, 5]);
/// assert_eq!(split_by_headroom(7, &[10, 10, 10]), [3, 2, 2]);
/// assert_eq!(split_by_headroom(100, &[3, 0, 4]), [3, 0, 4]);
/// ```
pub fn split_by_headroom(total: i64, headroom: &[i64]) -> Vec<i64> {
    let rooms: Vec<i128> = headroom.iter().map(|&h| i128::from(h.max(0))).collect();
    let capacity: i128 = rooms.iter().sum();
    let total = i128::from(total.max(0)).min(capacity);
    if total == 0 {
        return vec![0; headroom.len()];
    }
    let mut portions: Vec<i128> = rooms.iter().map(|room| total * room / capacity).collect();
    let mut remainder = total - portions.iter().sum::<i128>();
    for (portion, room) in portions.iter_mut().zip(&rooms) {
        let add = remainder.min(room - *portion);
        *portion += add;
        remainder -= add;
    }
    portions
        .into_iter()
        .map(|p| i64::try_from(p).unwrap_or(i64::MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LimitState;
    use crate::{Clock, ManualClock};
    use proptest::prelude::*;
    use std::time::Duration;

    const T0: i64 = 1_700_000_000_000;

    fn rpm() -> Limit {
        Limit::per_minute("rpm", 100)
    }

    /// Shard `shard` of `count`, `rpm` at `tk`, `rf` at `rf`, `wcu` at `wcu_tk`.
    fn shard(shard: u32, count: u32, tk: i64, rf: i64) -> OperationShard {
        let mut image = BucketImage {
            rf,
            shard_count: count,
            wcu: Some(LimitState {
                tk: 400_000,
                cp: 1_000_000,
                ra: 1_000_000,
                rp: 1000,
                tc: 0,
            }),
            ..BucketImage::default()
        };
        image.limits.insert(
            "rpm".into(),
            LimitState {
                tk,
                tc: 7_000,
                ..LimitState::starting(&rpm(), count, 0)
            },
        );
        OperationShard {
            shard,
            stored_count: Some(count),
            image,
        }
    }

    #[test]
    fn a_reset_fills_every_shard_to_its_ceiling_from_the_refilled_balance() {
        let clock = ManualClock::new(T0);
        let shards = [shard(0, 4, -10_000, T0), shard(1, 4, 3_000, T0 - 500)];
        clock.advance(Duration::from_millis(1_200));
        let now = clock.epoch_millis();
        let plan = plan_reset(&shards, &[rpm()], now, TtlAction::Keep);
        // Per shard: ceiling 25 000, rate 25 000/min. Shard 0 refilled 1.2 s: +500 → −9 500.
        // Shard 1 refilled 1.7 s: +708 → 3 708.
        let w0 = &plan.writes[0];
        assert_eq!(w0.deltas["rpm"], 35_000);
        assert_eq!(
            w0.deltas["wcu"], 600_000,
            "wcu refilled to full (1.2 s, capped)"
        );
        assert_eq!((w0.rf_read, w0.rf_new, w0.count_pin), (T0, now, Some(4)));
        let w1 = &plan.writes[1];
        assert_eq!(w1.deltas["rpm"], 22_000);
        // Restored beyond the refill: (25 000 + 9 500) + (25 000 − 3 708) = 55 792 → 55.
        assert_eq!(plan.amounts["rpm"], 55);
    }

    #[test]
    fn a_reset_stamps_rf_past_the_lock_even_when_the_clock_is_behind() {
        let shards = [shard(0, 1, 50_000, T0 + 5_000)];
        let plan = plan_reset(&shards, &[rpm()], T0, TtlAction::Keep);
        assert_eq!(plan.writes[0].rf_new, T0 + 5_001);
        assert_eq!(plan.writes[0].deltas["rpm"], 50_000);
    }

    #[test]
    fn a_balance_above_a_lowered_ceiling_is_trimmed_and_restores_a_negative_amount() {
        // Stored cp 100 000, balance 100 000, and a second shard appeared: ceiling 50 000.
        let mut s = shard(0, 2, 100_000, T0);
        s.stored_count = Some(2);
        let plan = plan_reset(&[s], &[rpm()], T0, TtlAction::Keep);
        assert_eq!(plan.writes[0].deltas["rpm"], -50_000);
        assert_eq!(
            plan.amounts["rpm"], 0,
            "the refill clamp trimmed it, not the reset"
        );
    }

    #[test]
    fn unresolved_limits_are_refilled_and_unheld_resolved_limits_restore_nothing() {
        let mut s = shard(0, 1, 0, T0);
        let tpm = Limit::per_minute("tpm", 600);
        s.image.limits.insert(
            "old".into(),
            LimitState {
                tk: 0,
                ..LimitState::starting(&Limit::per_minute("old", 60), 1, 0)
            },
        );
        let plan = plan_reset(&[s], &[rpm(), tpm], T0 + 1_000, TtlAction::Keep);
        assert_eq!(plan.writes[0].deltas["old"], 1_000, "refilled, not reset");
        assert_eq!(plan.writes[0].deltas["rpm"], 100_000);
        assert!(!plan.writes[0].deltas.contains_key("tpm"));
        assert_eq!(plan.amounts["tpm"], 0);
    }

    #[test]
    fn ttl_removal_is_kept_only_where_a_ttl_is_stored() {
        let mut with = shard(0, 2, 0, T0);
        with.image.ttl = Some(5);
        let without = shard(1, 2, 0, T0);
        let plan = plan_reset(&[without, with], &[rpm()], T0, TtlAction::Remove);
        assert_eq!(plan.writes[0].shard, 0);
        assert_eq!(plan.writes[0].ttl, TtlAction::Remove);
        assert_eq!(plan.writes[1].ttl, TtlAction::Keep);
        let plan = plan_reset(&[shard(0, 1, 0, T0)], &[rpm()], T0, TtlAction::Set(9));
        assert_eq!(plan.writes[0].ttl, TtlAction::Set(9));
    }

    #[test]
    fn a_top_up_is_bounded_by_the_headroom_and_split_by_it() {
        let clock = ManualClock::new(T0);
        // Ceilings 50 000 each, refill 50 000/min per shard: 600 ms later shard 0 holds 10 500
        // and shard 1 45 500.
        let shards = [shard(0, 2, 10_000, T0), shard(1, 2, 45_000, T0)];
        clock.advance(Duration::from_millis(600));
        let now = clock.epoch_millis();
        let amounts = BTreeMap::from([("rpm".to_owned(), 20)]);
        let plan = plan_top_up(&shards, &[rpm()], &amounts, now, TtlAction::Keep).unwrap();
        // Headroom 39 and 4 tokens: 20 × 39 // 43 = 18, 20 × 4 // 43 = 1,
        // the remainder 1 to shard 0.
        assert_eq!(plan.amounts["rpm"], 20);
        assert_eq!(plan.writes[0].deltas["rpm"], 500 + 19_000);
        assert_eq!(plan.writes[1].deltas["rpm"], 500 + 1_000);
        let more = BTreeMap::from([("rpm".to_owned(), 1_000)]);
        let plan = plan_top_up(&shards, &[rpm()], &more, now, TtlAction::Keep).unwrap();
        assert_eq!(plan.amounts["rpm"], 43, "only the headroom is granted");
        assert_eq!(plan.writes[0].deltas["rpm"], 39_500);
        assert_eq!(plan.writes[1].deltas["rpm"], 4_500);
    }

    #[test]
    fn a_top_up_refuses_unknown_and_unseeded_limits() {
        let shards = [shard(0, 1, 0, T0)];
        let unknown = BTreeMap::from([("tpm".to_owned(), 5)]);
        let err = plan_top_up(&shards, &[rpm()], &unknown, T0, TtlAction::Keep).unwrap_err();
        assert!(err.to_string().contains("tpm"), "{err}");
        let tpm = Limit::per_minute("tpm", 60);
        let err = plan_top_up(&shards, &[rpm(), tpm], &unknown, T0, TtlAction::Keep).unwrap_err();
        assert!(err.to_string().contains("seed"), "{err}");
        // No shard at all: nothing to plan, nothing granted.
        let plan = plan_top_up(
            &[],
            &[rpm()],
            &BTreeMap::from([("rpm".to_owned(), 5)]),
            T0,
            TtlAction::Keep,
        )
        .unwrap();
        assert!(plan.writes.is_empty());
        assert_eq!(plan.amounts["rpm"], 0);
    }

    #[test]
    fn amounts_are_checked_before_anything_else() {
        assert!(validate_top_up(&BTreeMap::new()).is_err());
        for bad in [0, -1, MAX_AMOUNT + 1] {
            let amounts = BTreeMap::from([("rpm".to_owned(), bad)]);
            assert!(validate_top_up(&amounts).is_err(), "{bad}");
        }
        assert!(validate_top_up(&BTreeMap::from([("rpm".to_owned(), MAX_AMOUNT)])).is_ok());
    }

    #[test]
    fn lagging_shards_are_named_with_the_count_to_raise_them_to() {
        assert_eq!(lagging(&[]), None);
        assert_eq!(lagging(&[shard(0, 2, 0, T0), shard(1, 2, 0, T0)]), None);
        assert_eq!(
            lagging(&[shard(0, 4, 0, T0), shard(1, 2, 0, T0), shard(3, 4, 0, T0)]),
            Some((4, vec![1]))
        );
    }

    fn shards_strategy() -> impl Strategy<Value = (u32, Vec<(i64, i64)>)> {
        prop::sample::select(vec![1u32, 2, 4, 8, 32]).prop_flat_map(|count| {
            (
                Just(count),
                prop::collection::vec((-200_000i64..=200_000, 0i64..=120_000), 1..=count as usize),
            )
        })
    }

    /// rpm `cap`/min on `count` shards, shard `i` holding `states[i].0` with its last refill
    /// `states[i].1` ms before `now`.
    fn generated(
        count: u32,
        states: &[(i64, i64)],
        cap: i64,
        now: i64,
    ) -> (Limit, Vec<OperationShard>) {
        let limit = Limit::per_minute("rpm", cap);
        let shards = (0u32..)
            .zip(states)
            .map(|(i, &(tk, age))| {
                let mut s = shard(i, count, tk, now - age);
                let state = LimitState {
                    tk,
                    ..LimitState::starting(&limit, count, 0)
                };
                s.image.limits.insert("rpm".into(), state);
                s
            })
            .collect();
        (limit, shards)
    }

    proptest! {
        /// A top-up never lifts a shard above its ceiling, never lowers a refilled balance,
        /// and grants exactly the amount when the headroom allows (else all of the headroom).
        #[test]
        fn top_up_respects_every_ceiling((count, states) in shards_strategy(), amount in 1i64..=400, cap in 1i64..=1_000) {
            let now = T0 + 120_000;
            let (limit, shards) = generated(count, &states, cap, now);
            let amounts = BTreeMap::from([("rpm".to_owned(), amount)]);
            let plan = plan_top_up(&shards, std::slice::from_ref(&limit), &amounts, now, TtlAction::Keep).unwrap();
            let mut headroom = 0;
            let mut added = 0;
            for (s, w) in shards.iter().zip(&plan.writes) {
                let state = s.image.limits["rpm"];
                let p = state.params(count);
                let (after, _) = refill(state.tk, s.image.rf, now, p);
                let final_tk = state.tk + w.deltas.get("rpm").copied().unwrap_or(0);
                prop_assert!(final_tk <= p.ceiling);
                prop_assert!(final_tk >= after);
                headroom += (p.ceiling - after).max(0) / MILLI;
                added += final_tk - after;
                prop_assert!(w.rf_new > w.rf_read);
            }
            prop_assert_eq!(added, plan.amounts["rpm"] * MILLI);
            prop_assert_eq!(plan.amounts["rpm"], amount.min(headroom));
        }

        /// A reset leaves every shard exactly at its ceiling, whatever it held.
        #[test]
        fn reset_lands_every_shard_on_its_ceiling((count, states) in shards_strategy(), cap in 1i64..=1_000) {
            let now = T0 + 120_000;
            let (limit, shards) = generated(count, &states, cap, now);
            let plan = plan_reset(&shards, std::slice::from_ref(&limit), now, TtlAction::Keep);
            let mut restored = 0;
            for (s, w) in shards.iter().zip(&plan.writes) {
                let state = s.image.limits["rpm"];
                let p = state.params(count);
                let final_tk = state.tk + w.deltas.get("rpm").copied().unwrap_or(0);
                prop_assert_eq!(final_tk, p.ceiling);
                restored += p.ceiling - refill(state.tk, s.image.rf, now, p).0;
            }
            prop_assert_eq!(plan.amounts["rpm"], restored.div_euclid(MILLI));
        }

        /// The split hands out exactly `min(total, Σ headroom)`, each slot within its room.
        #[test]
        fn split_is_exact_and_bounded(total in 0i64..=1_000_000_000_000_000, rooms in prop::collection::vec(0i64..=1_000_000_000_000_000, 0..=32)) {
            let portions = split_by_headroom(total, &rooms);
            prop_assert_eq!(portions.len(), rooms.len());
            let sum: i128 = portions.iter().map(|&p| i128::from(p)).sum();
            let cap: i128 = rooms.iter().map(|&r| i128::from(r)).sum();
            prop_assert_eq!(sum, i128::from(total).min(cap));
            for (p, r) in portions.iter().zip(&rooms) {
                prop_assert!(*p >= 0 && p <= r);
            }
        }
    }

    #[test]
    fn a_quota_resets_to_its_share_at_the_count_and_counts_the_reset() {
        use crate::image::QuotaState;
        use crate::schedule::Zone;
        let q = Limit::quota_per_day("q", 10, Zone::utc());
        let mut image = BucketImage {
            rf: 1_000,
            shard_count: 2,
            ..BucketImage::default()
        };
        image.limits.insert(
            "q".into(),
            LimitState {
                tk: 1_000,
                ..LimitState::starting(&q, 2, 0)
            },
        );
        image.resets.insert("q".into(), q.reset().unwrap().clone());
        image.quotas.insert(
            "q".into(),
            QuotaState {
                gc: Some(1),
                tu: Some(4_000),
                rn: None,
            },
        );
        let shard = OperationShard {
            shard: 0,
            stored_count: Some(2),
            image,
        };
        let plan = plan_reset(
            std::slice::from_ref(&shard),
            std::slice::from_ref(&q),
            2_000,
            TtlAction::Keep,
        );
        let w = &plan.writes[0];
        assert_eq!(
            w.deltas["q"],
            5_000 - 1_000,
            "the share at the shard count: 10 000 // 2"
        );
        assert_eq!(w.grants, vec![("q".to_owned(), 2)]);
        assert_eq!(w.drop_top_ups, vec!["q".to_owned()]);
        assert_eq!(w.reset_counters, vec!["q".to_owned()]);
        // A top-up of 3 on this shard alone: exactly 3, added to the balance and to the
        // period's top-ups (its grant covers the whole allowance: weight 2 // 1).
        let top = plan_top_up(
            std::slice::from_ref(&shard),
            std::slice::from_ref(&q),
            &BTreeMap::from([("q".to_owned(), 3)]),
            2_000,
            TtlAction::Keep,
        )
        .unwrap();
        assert_eq!(top.amounts["q"], 3);
        let w = &top.writes[0];
        assert_eq!(w.deltas["q"], 3_000);
        assert_eq!(w.top_ups["q"], 7_000, "4 000 already topped up, and 3 000");
        assert!(w.drop_top_ups.is_empty());
        // Two shards, grants of 2 each: split evenly, the odd token to the lower shard.
        let mut other = shard.clone();
        other.shard = 1;
        let mut first = shard;
        for s in [&mut first, &mut other] {
            s.image.quotas.insert(
                "q".into(),
                QuotaState {
                    gc: Some(2),
                    ..QuotaState::default()
                },
            );
        }
        let top = plan_top_up(
            &[first, other],
            std::slice::from_ref(&q),
            &BTreeMap::from([("q".to_owned(), 7)]),
            2_000,
            TtlAction::Keep,
        )
        .unwrap();
        let portions: Vec<i64> = top.writes.iter().map(|w| w.deltas["q"]).collect();
        assert_eq!(portions, [4_000, 3_000]);
        assert_eq!(top.writes[1].top_ups["q"], 3_000);
    }

    #[test]
    fn a_session_quota_s_top_up_opens_an_ended_window_first() {
        use crate::image::WindowState;
        let s = Limit::session_quota("s", 10, 60);
        let mut image = BucketImage {
            rf: 1_000,
            shard_count: 1,
            ..BucketImage::default()
        };
        image.limits.insert(
            "s".into(),
            LimitState {
                tk: 0,
                ..LimitState::starting(&s, 1, 0)
            },
        );
        image.windows.insert(
            "s".into(),
            WindowState {
                rsa: Some(60),
                ws: Some(1_000),
                wa: Some(1_000),
                wtc: None,
            },
        );
        let shard = OperationShard {
            shard: 0,
            stored_count: Some(1),
            image,
        };
        let now = 1_000 + 60_000;
        let top = plan_top_up(
            &[shard],
            &[s],
            &BTreeMap::from([("s".to_owned(), 5)]),
            now,
            TtlAction::Keep,
        )
        .unwrap();
        let w = &top.writes[0];
        assert_eq!(w.deltas["s"], 15_000, "the new window's 10, and 5");
        assert_eq!(w.windows["s"].start, Some((now, 60)));
        assert_eq!(w.grants, vec![("s".to_owned(), 1)]);
        assert_eq!(w.top_ups["s"], 5_000);
    }
}
