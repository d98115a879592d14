//! The bucket writes as expressions (reference §3.4–§3.9), built from the core's plans.

use std::collections::BTreeMap;

use crate::bucket::decide::{
    DeltaPlan, Move, MovePeriod, MovePin, ProactiveRefill, QuotaPin, RefillPlan, StampChange,
    TtlAction, WindowWrite,
};
use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_core::bounds::Stamp;
use dynalimit_core::bucket::{WCU, WCU_DEBIT_MILLI};
use dynalimit_core::operation::ShardWrite;
use dynalimit_core::schedule::{ResetSchedule, Schedule};
use dynalimit_format::attr::{self, BucketField, QuotaField, bucket_limit};
use dynalimit_format::bucket::Owner;
use dynalimit_format::expr::{Expr, num};
use dynalimit_format::schedule::{self, UNSCHEDULED};

use super::pause::not_paused;

fn tk(name: &str) -> String {
    bucket_limit(name, BucketField::Tk)
}

fn tc(name: &str) -> String {
    bucket_limit(name, BucketField::Tc)
}

/// The speculative consume (reference §3.4, enforce shape): ADD to every declared limit and
/// to `wcu`, conditioned on existence, balances (a live bypass stamp, or a limit's live soft
/// stamp, admits whatever the balance; an expired stamp fails the write so that a slow pass
/// renews or removes it), write capacity, `ttl`, `disabled` and `vu` (which a live bypass
/// outlasts), and on the absence of a pause stamp in force. On an item found bypassed the
/// caller gives the balances back (`tc` keeps the count).
///
/// A stamp is live from the next millisecond up to its horizon
/// ([`dynalimit_core::bounds::Stamp`]): `stamp BETWEEN :next AND :horizon`, so a stamp further
/// ahead counts as expired, here as in the client's decisions. The bypass term, the same for
/// every limit, is taken out of the per-limit terms (`bypass OR (limit AND limit …)`) to
/// keep the expression short.
///
/// The values are declared in the order [`super::consume::ConsumeShape::numbers`] writes
/// them.
pub(crate) fn speculative_consume(demand: &BTreeMap<String, i64>, now: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    let (next, horizon) = (
        e.num(now.saturating_add(1)),
        e.num(Stamp::Deadline.horizon(now)),
    );
    let live =
        |e: &mut Expr, stamp: &str| format!("{} BETWEEN {next} AND {horizon}", e.name(stamp));
    let bypassed = live(&mut e, attr::BYPASS);
    let mut balances = Vec::with_capacity(demand.len());
    for (name, &m) in demand {
        e.add(&tc(name), m);
        e.add(&tk(name), -m);
        let soft = attr::bucket_soft(name);
        let live = live(&mut e, &soft);
        let (has_cp, has_tk) = (
            e.exists(&bucket_limit(name, BucketField::Cp)),
            e.exists(&tk(name)),
        );
        let enough = e.cmp(&tk(name), ">=", m);
        balances.push(format!("({live} AND {has_cp} AND {has_tk}) OR {enough}"));
        let unstamped = e.not_exists(&soft);
        e.when(format!("{unstamped} OR {live}"));
    }
    // DynamoDB refuses parentheses around what is already one term.
    match balances.as_slice() {
        [] => {}
        [one] => e.when(format!("{bypassed} OR {one}")),
        many => {
            let all: Vec<String> = many.iter().map(|b| format!("({b})")).collect();
            e.when(format!("{bypassed} OR ({})", all.join(" AND ")));
        }
    }
    let unstamped = e.not_exists(attr::BYPASS);
    e.when(format!("{unstamped} OR {bypassed}"));
    e.add(&tk(WCU), -WCU_DEBIT_MILLI);
    e.add(&tc(WCU), WCU_DEBIT_MILLI);
    let c = e.cmp(&tk(WCU), ">=", WCU_DEBIT_MILLI);
    e.when(c);
    let (missing, live) = (
        e.not_exists(attr::TTL),
        e.cmp(attr::TTL, ">", now.div_euclid(1000)),
    );
    e.when(format!("{missing} OR {live}"));
    let c = e.not_exists(attr::DISABLED);
    e.when(c);
    let (missing, boundary) = (e.not_exists(attr::VU), e.name(attr::VU));
    let far = e.num(Stamp::Boundary.horizon(now));
    e.when(format!(
        "{bypassed} OR {missing} OR {boundary} BETWEEN {next} AND {far}"
    ));
    not_paused(&mut e, now, now);
    e
}

/// The consume of a bypassed pair on the slow path (reference §12.1): `ADD tc` per declared
/// limit and the bypass stamp renewed, on an item that still carries a stamp; no balance
/// moves and `rf` is untouched. Refused while a pause stamp is in force at `now`.
pub(crate) fn bypass_consume(demand: &BTreeMap<String, i64>, until: i64, now: i64) -> Expr {
    let mut e = Expr::default();
    for (name, &m) in demand {
        e.add(&tc(name), m);
    }
    e.set(attr::BYPASS, num(until));
    let c = e.exists(attr::PK);
    e.when(c);
    let c = e.exists(attr::BYPASS);
    e.when(c);
    not_paused(&mut e, now, now);
    e
}

/// The rf-locked materialising write (reference §3.7.2): `SET rf`, `ttl`, seeds, stamps;
/// `ADD` refill deltas and consumption; conditioned on `rf = :read`, floors, pins and the `vu`
/// read. With `owner` (from the META this pass read) the owner stamp is written too,
/// pinned so that it never lowers a stamp of the same incarnation (§12.5). A pause stamp
/// later than the new refill time fails the write.
pub(crate) fn refill_write(plan: &RefillPlan, owner: Option<&Owner>) -> Expr {
    let mut e = Expr::default();
    let c = e.cmp(attr::RF, "=", plan.rf_read);
    e.when(c);
    if let Some(owner) = owner {
        owner_stamp(&mut e, owner);
    }
    not_paused(&mut e, plan.rf_new, plan.now);
    e.set(attr::RF, num(plan.rf_new));
    match plan.ttl {
        TtlAction::Set(t) => e.set(attr::TTL, num(t)),
        TtlAction::Remove => e.remove(attr::TTL),
        TtlAction::Keep => {}
    }
    if plan.vu.changes() {
        match plan.vu.next {
            Some(next) => e.set(attr::VU, num(next)),
            None => e.remove(attr::VU),
        }
        let c = match plan.vu.read {
            Some(read) => e.cmp(attr::VU, "=", read),
            None => e.not_exists(attr::VU),
        };
        e.when(c);
        let c = shard_count_pin(&mut e, plan.shard_count);
        e.when(c);
    }
    // The item's zone, written once however many seeds carry a schedule (one zone per item;
    // DynamoDB refuses an update that names one path twice).
    let mut zone: Option<&str> = None;
    for w in &plan.writes {
        if let Some(seed) = &w.seed {
            e.set(&tk(&w.name), num(seed.tk));
            e.set(&bucket_limit(&w.name, BucketField::Cp), num(seed.cp));
            e.set(&bucket_limit(&w.name, BucketField::Ra), num(seed.ra));
            e.set(&bucket_limit(&w.name, BucketField::Rp), num(seed.rp));
            e.add(&tc(&w.name), w.add_tc);
            if w.name != WCU {
                let seeded =
                    seed_schedules(&mut e, &w.name, seed.schedule.as_ref(), seed.reset.as_ref());
                zone = zone.or(seeded);
            }
            if let Some(count) = w.grant {
                e.set(
                    &attr::bucket_quota(&w.name, QuotaField::Gc),
                    num(i64::from(count)),
                );
            }
            if let Some(win) = w.window {
                window_write(&mut e, &w.name, win, true);
            }
            let (no_cp, no_tk) = (
                e.not_exists(&bucket_limit(&w.name, BucketField::Cp)),
                e.not_exists(&tk(&w.name)),
            );
            e.when(format!("{no_cp} OR {no_tk}"));
            continue;
        }
        if w.add_tk != 0 {
            e.add(&tk(&w.name), w.add_tk);
        }
        if w.add_tc != 0 {
            e.add(&tc(&w.name), w.add_tc);
        }
        if let Some(floor) = w.floor {
            // A limit soft on the item while its stamp is live has no floor.
            let live = soft_live(&mut e, &w.name, plan.now);
            let c = e.cmp(&tk(&w.name), ">=", floor);
            e.when(format!("{live} OR {c}"));
        }
        if let Some(pin) = w.pin_max {
            let c = e.cmp(&tk(&w.name), "<=", pin);
            e.when(c);
        }
        // A quota's new period: the grant sized at the item's count, the top-ups dropped.
        if let Some(count) = w.grant {
            e.set(
                &attr::bucket_quota(&w.name, QuotaField::Gc),
                num(i64::from(count)),
            );
        }
        if w.drop_top_up {
            e.remove(&attr::bucket_quota(&w.name, QuotaField::Tu));
        }
        if let Some(win) = w.window {
            window_write(&mut e, &w.name, win, false);
        }
    }
    if let Some(z) = zone {
        e.set(attr::SCHED_TZ, AttributeValue::S(z.to_owned()));
    }
    if let Some(count) = plan.grant_pin {
        let (missing, at_most) = (
            e.not_exists(attr::SHARD_COUNT),
            e.cmp(attr::SHARD_COUNT, "<=", i64::from(count)),
        );
        e.when(format!("{missing} OR {at_most}"));
    }
    for w in &plan.writes {
        if let Some(stamp) = w.soft {
            stamp_change(&mut e, &attr::bucket_soft(&w.name), stamp);
        }
    }
    if let Some(stamp) = plan.bypass {
        stamp_change(&mut e, attr::BYPASS, stamp);
    }
    e
}

/// A session quota's window on an rf-locked write (reference §12.3): the start it opens (or
/// a seed's, joined or opened) with its length, the length alone when the configuration
/// changed it, and the start the balance now reflects (`wa`). No condition: the `rf` lock
/// orders every writer of `wa`.
fn window_write(e: &mut Expr, name: &str, win: WindowWrite, seed: bool) {
    let field = |f| attr::bucket_quota(name, f);
    if let Some(ws) = win.ws
        && (win.opened || seed)
    {
        e.set(&field(QuotaField::Ws), num(ws));
    }
    if win.opened || win.set_length || seed {
        e.set(&field(QuotaField::Rsa), num(win.rsa));
    }
    if let Some(ws) = win.ws {
        e.set(&field(QuotaField::Wa), num(ws));
    }
}

/// The fan-out of a session window a shard opened to one sibling shard (reference §12.3):
/// `SET b_{name}_ws = start, b_{name}_rsa = length, vu = 0, b_{name}_wtc = b_{name}_tc` (what
/// the sibling spent until now is not charged to the new window), only where the sibling's own
/// window had ended by `start` and the sibling reads `wa` (or its refill time is before
/// `start`). Absolute values: applied twice it leaves the same item, and a lost answer
/// needs nothing (a sibling it missed applies the window at its own next opening).
pub(crate) fn window_fanout(name: &str, start: i64, rsa: i64) -> Expr {
    let field = |f| attr::bucket_quota(name, f);
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    let (marked, before) = (
        e.exists(&field(QuotaField::Wa)),
        e.cmp(attr::RF, "<", start),
    );
    e.when(format!("{marked} OR {before}"));
    let floor = start - rsa.saturating_mul(1000);
    let (none, ended) = (
        e.not_exists(&field(QuotaField::Ws)),
        e.cmp(&field(QuotaField::Ws), "<=", floor),
    );
    e.when(format!("{none} OR {ended}"));
    e.set(&field(QuotaField::Ws), num(start));
    e.set(&field(QuotaField::Rsa), num(rsa));
    e.set(attr::VU, num(0));
    e.set_from_if_absent(&field(QuotaField::Wtc), &tc(name), num(0));
    e
}

/// The donor's side of the moves of one create (reference §12.3, ADR-145, generalised),
/// merged into one update of the donor item (one transaction may touch an item once): per
/// limit, `ADD b_{name}_tk -amount` under `b_{name}_tk >= amount` and the pin of the move: a
/// quota's grant count read (or its absence with the item's `shard_count`) and the period
/// read (`rf >= edge` for a calendar quota, `b_{name}_wa` as read for a session quota); a
/// dripping limit's `shard_count` read. Sent in the create's transaction, so it lands with
/// the new shard or not at all; the transaction is sent again after a lost answer with its
/// client request token, and applies once.
pub(crate) fn moves(moves: &[&Move]) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    for m in moves {
        e.add(&tk(&m.limit), -m.amount);
        let c = e.cmp(&tk(&m.limit), ">=", m.amount);
        e.when(c);
        let (donor_gc, donor_count, period) = match m.pin {
            MovePin::Share { donor_count } => {
                let c = shard_count_pin(&mut e, donor_count);
                e.when(c);
                continue;
            }
            MovePin::Grant {
                donor_gc,
                donor_count,
                period,
            } => (donor_gc, donor_count, period),
        };
        let gc = attr::bucket_quota(&m.limit, QuotaField::Gc);
        let c = match donor_gc {
            Some(g) => e.cmp(&gc, "=", g),
            None => {
                let (none, count) = (
                    e.not_exists(&gc),
                    e.cmp(attr::SHARD_COUNT, "=", donor_count),
                );
                format!("{none} AND {count}")
            }
        };
        e.when(c);
        let c = match period {
            MovePeriod::Calendar { edge } => e.cmp(attr::RF, ">=", edge),
            MovePeriod::Session { wa } => {
                let wa_attr = attr::bucket_quota(&m.limit, QuotaField::Wa);
                match wa {
                    Some(v) => e.cmp(&wa_attr, "=", v),
                    None => e.not_exists(&wa_attr),
                }
            }
        };
        e.when(c);
    }
    e
}

/// A seeded limit's schedules, spelled out rather than inherited from the item's default
/// (reference §12.2): `b_{name}_sched` and `b_{name}_rsched` (each its encoding or `"-"`).
/// Returns the zone of its schedules, which the write gives the item.
fn seed_schedules<'a>(
    e: &mut Expr,
    name: &str,
    schedule: Option<&'a Schedule>,
    reset: Option<&'a ResetSchedule>,
) -> Option<&'a str> {
    let own = schedule.map_or_else(|| UNSCHEDULED.to_owned(), schedule::encode);
    e.set(&attr::bucket_sched(name), AttributeValue::S(own));
    let own = reset
        .and_then(|r| schedule::encode_reset(r).ok())
        .unwrap_or_else(|| UNSCHEDULED.to_owned());
    e.set(&attr::bucket_rsched(name), AttributeValue::S(own));
    schedule
        .map(Schedule::zone)
        .or_else(|| reset.map(ResetSchedule::zone))
        .map(|z| z.name())
}

/// The owner stamp of an rf-locked write (reference §3.7.2, §12.5): `cascade`, `parent_id`
/// (or its removal) and, when the META carries them, `pgen` and `pinc`, under the pin
/// `attribute_not_exists(pinc) OR (pinc = :inc AND (attribute_not_exists(pgen) OR pgen <=
/// :g))` (without an incarnation, only the generation part).
fn owner_stamp(e: &mut Expr, owner: &Owner) {
    if let Some(pin) = owner_sets(e, owner) {
        let OwnerPin {
            no_pgen,
            lower,
            pinc,
        } = pin;
        match pinc {
            Some(pinc) => {
                let no_pinc = e.not_exists(attr::PINC);
                let same = e.eq(attr::PINC, AttributeValue::S(pinc));
                e.when(format!("{no_pinc} OR ({same} AND ({no_pgen} OR {lower}))"));
            }
            None => e.when(format!("{no_pgen} OR {lower}")),
        }
    }
}

/// The terms of an owner stamp's generation pin.
struct OwnerPin {
    no_pgen: String,
    lower: String,
    pinc: Option<String>,
}

/// `SET cascade, parent_id (or REMOVE), pgen, pinc` of an owner stamp; the pin's terms when
/// the stamp carries a generation.
fn owner_sets(e: &mut Expr, owner: &Owner) -> Option<OwnerPin> {
    e.set(attr::CASCADE, AttributeValue::Bool(owner.cascade));
    match &owner.parent_id {
        Some(parent) => e.set(attr::PARENT_ID, AttributeValue::S(parent.clone())),
        None => e.remove(attr::PARENT_ID),
    }
    let pgen = owner.pgen?;
    e.set(attr::PGEN, num(pgen));
    let (no_pgen, lower) = (e.not_exists(attr::PGEN), e.cmp(attr::PGEN, "<=", pgen));
    if let Some(pinc) = &owner.pinc {
        e.set(attr::PINC, AttributeValue::S(pinc.clone()));
    }
    Some(OwnerPin {
        no_pgen,
        lower,
        pinc: owner.pinc.clone(),
    })
}

/// The owner stamp of a cascade-policy or parent-move fan-out (reference §12.5): the same
/// `cascade`, `parent_id`, `pgen` and `pinc` an rf-locked write stamps, on an existing item
/// only, never lowering the generation of a stamp of the same incarnation (a stamp of another
/// incarnation, a predecessor's leftover, is overwritten). Absolute values: a write whose
/// answer was lost is sent again and lands the same.
pub(crate) fn owner_fanout(owner: &Owner) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    if let Some(pin) = owner_sets(&mut e, owner) {
        let OwnerPin {
            no_pgen,
            lower,
            pinc,
        } = pin;
        match pinc {
            Some(pinc) => {
                let no_pinc = e.not_exists(attr::PINC);
                let other = e.ne(attr::PINC, AttributeValue::S(pinc));
                e.when(format!("{no_pinc} OR {other} OR {no_pgen} OR {lower}"));
            }
            None => e.when(format!("{no_pgen} OR {lower}")),
        }
    }
    e
}

/// `b_{name}_soft` live at `now`: after it, and no further ahead than a stamp lives
/// ([`Stamp::Deadline`]).
fn soft_live(e: &mut Expr, name: &str, now: i64) -> String {
    let stamp = e.name(&attr::bucket_soft(name));
    let (next, horizon) = (
        e.num(now.saturating_add(1)),
        e.num(Stamp::Deadline.horizon(now)),
    );
    format!("{stamp} BETWEEN {next} AND {horizon}")
}

/// A stamp change (a soft or the bypass stamp, reference §12.1, §12.4), pinned on the value
/// read.
fn stamp_change(e: &mut Expr, soft: &str, stamp: StampChange) {
    let (read, change) = match stamp {
        StampChange::Set { until, read } => (read, Some(until)),
        StampChange::Remove { read } => (Some(read), None),
    };
    if read == change {
        return;
    }
    match change {
        Some(until) => e.set(soft, num(until)),
        None => e.remove(soft),
    }
    let pin = match read {
        Some(read) => e.cmp(soft, "=", read),
        None => e.not_exists(soft),
    };
    e.when(pin);
}

/// The consumption-only retry (reference §3.7.4): no refill, `rf` untouched; a limit with a
/// live soft stamp is debited whatever its balance; refused while a pause stamp is in force
/// at `now`.
pub(crate) fn consumption_only(retry: &[(String, i64)], now: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    for (name, c) in retry {
        e.add(&tk(name), -c);
        e.add(&tc(name), *c);
        let live = soft_live(&mut e, name, now);
        let (has_cp, has_tk) = (
            e.exists(&bucket_limit(name, BucketField::Cp)),
            e.exists(&tk(name)),
        );
        let cond = e.cmp(&tk(name), ">=", *c);
        e.when(format!("{cond} OR ({live} AND {has_cp} AND {has_tk})"));
    }
    not_paused(&mut e, now, now);
    e
}

/// A lease's net change (commit of adjustments, rollback, compensation), reference §3.9.
///
/// `trim = false`: the guarded shape — every credited limit may land only at or below
/// `ceiling - credit`, pinned on `b_cp` and `shard_count`. `trim = true`: the fallback after
/// the guard failed — unguarded, with `SET vu = 0` so the fast path cannot spend the excess
/// before a slow pass clamps it. Both require the item to exist (an adjustment never
/// resurrects a swept item).
pub(crate) fn delta(plan: &DeltaPlan, trim: bool) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    for (name, add_tk, add_tc) in &plan.adds {
        if *add_tk != 0 {
            e.add(&tk(name), *add_tk);
        }
        if *add_tc != 0 {
            e.add(&tc(name), *add_tc);
        }
    }
    // A quota's credit lands only in the period and grant it was read in, trimmed or not.
    for g in &plan.guards {
        if let Some(q) = g.quota {
            quota_period_pins(&mut e, &g.name, q);
        }
    }
    if trim {
        e.set(attr::VU, num(0));
        return e;
    }
    for g in &plan.guards {
        let c = e.cmp(&tk(&g.name), "<=", g.max_tk);
        e.when(c);
        let c = e.cmp(&bucket_limit(&g.name, BucketField::Cp), "=", g.cp);
        e.when(c);
    }
    if !plan.guards.is_empty() {
        let c = shard_count_pin(&mut e, plan.shard_count);
        e.when(c);
    }
    e
}

/// The pins of a credit to a quota (reference §12.3): the grant (`gc`), the top-ups (`tu`) and
/// the operator resets (`rn`) as read, and the item's refill time still before the first
/// reset edge after the one read.
fn quota_period_pins(e: &mut Expr, name: &str, q: QuotaPin) {
    let gc = q.gc_stored.then_some(q.gc);
    for (field, read) in [
        (QuotaField::Gc, gc),
        (QuotaField::Tu, q.tu),
        (QuotaField::Rn, q.rn),
    ] {
        let attr_name = attr::bucket_quota(name, field);
        let c = match read {
            Some(v) => e.cmp(&attr_name, "=", v),
            None => e.not_exists(&attr_name),
        };
        e.when(c);
    }
    if let Some(edge) = q.next_edge {
        let c = e.cmp(attr::RF, "<", edge);
        e.when(c);
    }
    // A session quota's credit lands only in the window it was read in, as applied then.
    if let Some((ws, wa)) = q.window {
        for (field, read) in [(QuotaField::Ws, ws), (QuotaField::Wa, wa)] {
            let attr_name = attr::bucket_quota(name, field);
            let c = match read {
                Some(v) => e.cmp(&attr_name, "=", v),
                None => e.not_exists(&attr_name),
            };
            e.when(c);
        }
    }
}

/// `shard_count = :n` (an absent count reads as 1).
fn shard_count_pin(e: &mut Expr, count: u32) -> String {
    let pinned = e.cmp(attr::SHARD_COUNT, "=", i64::from(count));
    if count <= 1 {
        let missing = e.not_exists(attr::SHARD_COUNT);
        format!("{missing} OR {pinned}")
    } else {
        pinned
    }
}

/// The parameter sync of a configuration change (reference §4.3): `SET vu = 0` (the next
/// acquire takes one slow pass that materialises the new ceiling), every limit's stored
/// parameters and schedules (the item's zone and default parameter and reset schedules, each
/// limit's own where it differs, removed where none; a quota's grant, top-ups and reset
/// counter are left as they are; a session quota's length follows, its window is left), the
/// soft stamps ([`soft_stamps`]), `REMOVE ttl` when the limits come from the entity level, on
/// an existing item only. Every value is absolute, so the write may be applied twice.
pub(crate) fn sync_parameters(limits: &[Limit], remove_ttl: bool, soft_until: i64) -> Expr {
    let mut e = soft_stamps(limits, soft_until);
    e.set(attr::VU, num(0));
    for l in limits {
        for (field, value) in [
            (BucketField::Cp, l.capacity_milli()),
            (BucketField::Ra, l.refill_amount_milli()),
            (BucketField::Rp, l.refill_period_millis()),
        ] {
            e.set(&bucket_limit(l.name(), field), num(value));
        }
    }
    // A session quota's length follows the configuration; its window is left as it is.
    for l in limits {
        let rsa = attr::bucket_quota(l.name(), QuotaField::Rsa);
        match l.window_seconds() {
            Some(seconds) => e.set(&rsa, num(seconds)),
            None => e.remove(&rsa),
        }
    }
    let limits: Vec<&Limit> = limits.iter().collect();
    for (name, value) in schedule::item_attributes(&limits) {
        match value {
            Some(v) => e.set(&name, AttributeValue::S(v)),
            None => e.remove(&name),
        }
    }
    if remove_ttl {
        e.remove(attr::TTL);
    }
    e
}

/// The soft stamps of `limits` on an existing item (reference §12.4): `SET b_{name}_soft =
/// until` for a soft limit, `REMOVE` it for a hard one.
pub(crate) fn soft_stamps(limits: &[Limit], until: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    for l in limits {
        let stamp = attr::bucket_soft(l.name());
        if l.is_soft() {
            e.set(&stamp, num(until));
        } else {
            e.remove(&stamp);
        }
    }
    e
}

/// The aggregator's proactive refill (reference §7.3): `SET rf`, `ADD` each delta to the
/// limit's balance, under the `rf` lock, with the raised balances pinned at or below what was
/// read and `vu` and `shard_count` pinned at what was read (or still absent).
pub(crate) fn proactive_refill(plan: &ProactiveRefill) -> Expr {
    let mut e = rf_locked_deltas(plan);
    let c = match plan.shard_count {
        Some(v) => e.cmp(attr::SHARD_COUNT, "=", v),
        None => e.not_exists(attr::SHARD_COUNT),
    };
    e.when(c);
    e
}

/// The materialising write after a fast-path debit ([`super::decide::plan_materialise`]): the
/// proactive refill's write, its shard count pinned as the image read it (an absent count
/// reads as 1).
pub(crate) fn materialise(plan: &ProactiveRefill) -> Expr {
    let mut e = rf_locked_deltas(plan);
    let count = plan
        .shard_count
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1);
    let c = shard_count_pin(&mut e, count);
    e.when(c);
    e
}

fn rf_locked_deltas(plan: &ProactiveRefill) -> Expr {
    let mut e = Expr::default();
    let c = e.cmp(attr::RF, "=", plan.rf_read);
    e.when(c);
    e.set(attr::RF, num(plan.rf_new));
    for d in &plan.deltas {
        e.add(&tk(&d.limit), d.delta);
        if d.delta > 0 {
            let c = e.cmp(&tk(&d.limit), "<=", d.tk_read);
            e.when(c);
        }
    }
    let c = match plan.vu_read {
        Some(v) => e.cmp(attr::VU, "=", v),
        None => e.not_exists(attr::VU),
    };
    e.when(c);
    e
}

/// One shard's part of a reset or top-up (reference §12.6): `ADD` each limit's delta (never a
/// new balance, so a debit landing since the read is kept), `SET rf = :new, vu = 0` (one
/// materialising pass clamps whatever a credit lands meanwhile) and the `ttl` action; a
/// quota's new grant count, dropped top-ups and raised reset counter; under `rf = :read` and
/// the shard count read (or its absence). `tc`, the owner stamps and `disabled` are left
/// alone.
pub(crate) fn operation_write(plan: &ShardWrite) -> Expr {
    let mut e = Expr::default();
    let c = e.cmp(attr::RF, "=", plan.rf_read);
    e.when(c);
    let c = match plan.count_pin {
        Some(count) => e.cmp(attr::SHARD_COUNT, "=", i64::from(count)),
        None => e.not_exists(attr::SHARD_COUNT),
    };
    e.when(c);
    e.set(attr::RF, num(plan.rf_new));
    e.set(attr::VU, num(0));
    match plan.ttl {
        TtlAction::Set(t) => e.set(attr::TTL, num(t)),
        TtlAction::Remove => e.remove(attr::TTL),
        TtlAction::Keep => {}
    }
    for (name, delta) in &plan.deltas {
        e.add(&tk(name), *delta);
    }
    for (name, count) in &plan.grants {
        e.set(
            &attr::bucket_quota(name, QuotaField::Gc),
            num(i64::from(*count)),
        );
    }
    for name in &plan.drop_top_ups {
        e.remove(&attr::bucket_quota(name, QuotaField::Tu));
    }
    for name in &plan.reset_counters {
        e.add(&attr::bucket_quota(name, QuotaField::Rn), 1);
    }
    for (name, tu) in &plan.top_ups {
        e.set(&attr::bucket_quota(name, QuotaField::Tu), num(*tu));
    }
    for (name, op) in &plan.windows {
        e.set(&attr::bucket_quota(name, QuotaField::Wa), num(op.wa));
        if let Some((ws, rsa)) = op.start {
            e.set(&attr::bucket_quota(name, QuotaField::Ws), num(ws));
            e.set(&attr::bucket_quota(name, QuotaField::Rsa), num(rsa));
        }
        if op.clear_wtc {
            e.remove(&attr::bucket_quota(name, QuotaField::Wtc));
        }
    }
    e
}

/// A donor's write in a split (see `crate::bucket::decide::plan_split`): its rf-locked
/// materialising write ([`refill_write`], each balance less what it gives the new shard)
/// with `SET shard_count = :to`, under `shard_count = :from` (an absent count reads as 1).
/// Applied twice, the second fails its own `rf` lock and count.
pub(crate) fn split_donor(plan: &RefillPlan, from: u32, to: u32) -> Expr {
    let mut e = refill_write(plan, None);
    e.set(attr::SHARD_COUNT, num(i64::from(to)));
    let c = shard_count_pin(&mut e, from);
    e.when(c);
    e
}

/// Propagation of a new count another writer doubled to, to an existing shard:
/// `shard_count < :new` (never `attribute_not_exists`, which would create a stub item); the
/// balance is kept (a shard created later is funded by a move from it, see
/// `crate::bucket::decide::plan_funding`).
pub(crate) fn propagate(to: u32) -> Expr {
    let mut e = Expr::default();
    e.set(attr::SHARD_COUNT, num(i64::from(to)));
    let c = e.cmp(attr::SHARD_COUNT, "<", i64::from(to));
    e.when(c);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::decide::{BucketImage, LimitState, Plan, Stamps, plan_delta, plan_refill};

    fn render(e: &Expr) -> String {
        // Substitute aliases and placeholders back, to compare against the reference text.
        let mut text = format!(
            "{} IF {}",
            e.update_expression().unwrap_or_default(),
            e.condition_expression().unwrap_or_default()
        );
        let names = e.names().unwrap_or_default();
        let values = e.values().unwrap_or_default();
        let mut aliases: Vec<_> = names.iter().collect();
        aliases.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
        for (alias, attr) in aliases {
            text = text.replace(alias.as_str(), attr);
        }
        let mut placeholders: Vec<_> = values.iter().collect();
        placeholders.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        for (p, v) in placeholders {
            let shown = match v {
                AttributeValue::N(n) => n.clone(),
                AttributeValue::S(s) => format!("{s:?}"),
                AttributeValue::Bool(b) => b.to_string(),
                other => format!("{other:?}"),
            };
            text = text.replace(p.as_str(), &shown);
        }
        text
    }

    #[test]
    fn an_rf_locked_write_stamps_its_owner_under_the_generation_pin() {
        let img = BucketImage {
            rf: 1000,
            shard_count: 1,
            limits: BTreeMap::from([(
                "rpm".to_owned(),
                LimitState {
                    tk: 5000,
                    cp: 10_000,
                    ra: 10_000,
                    rp: 60_000,
                    tc: 0,
                },
            )]),
            wcu: Some(LimitState {
                tk: 1_000_000,
                cp: 1_000_000,
                ra: 1_000_000,
                rp: 1000,
                tc: 0,
            }),
            ..BucketImage::default()
        };
        let demand = BTreeMap::from([("rpm".to_owned(), 1000)]);
        let Plan::Write(plan) = plan_refill(
            &img,
            &[Limit::per_minute("rpm", 10)],
            &demand,
            1000,
            TtlAction::Keep,
            &Stamps::default(),
        ) else {
            panic!("fits")
        };
        let owner = Owner {
            cascade: true,
            parent_id: Some("org".into()),
            pgen: Some(3),
            pinc: Some("abc".into()),
        };
        let text = render(&refill_write(&plan, Some(&owner)));
        assert!(
            text.starts_with(
                "SET cascade = true, parent_id = \"org\", pgen = 3, pinc = \"abc\", rf = 1000"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "(attribute_not_exists(pinc) OR (pinc = \"abc\" AND \
                 (attribute_not_exists(pgen) OR pgen <= 3)))"
            ),
            "{text}"
        );
        let orphan = Owner {
            parent_id: None,
            cascade: false,
            pgen: None,
            pinc: None,
        };
        let text = render(&refill_write(&plan, Some(&orphan)));
        assert!(text.contains("REMOVE parent_id"), "{text}");
        assert!(!text.contains("pgen"), "{text}");
    }

    #[test]
    fn a_window_fan_out_moves_only_a_sibling_whose_window_ended() {
        assert_eq!(
            render(&window_fanout("s", 10_000_000, 3600)),
            "SET b_s_ws = 10000000, b_s_rsa = 3600, vu = 0, b_s_wtc = if_not_exists(b_s_tc, 0) \
             IF (attribute_exists(PK)) AND (attribute_exists(b_s_wa) OR rf < 10000000) AND \
             (attribute_not_exists(b_s_ws) OR b_s_ws <= 6400000)"
        );
    }

    #[test]
    fn an_owner_fan_out_never_lowers_a_generation_of_the_same_incarnation() {
        let owner = Owner {
            cascade: true,
            parent_id: Some("org".into()),
            pgen: Some(7),
            pinc: Some("i1".into()),
        };
        assert_eq!(
            render(&owner_fanout(&owner)),
            "SET cascade = true, parent_id = \"org\", pgen = 7, pinc = \"i1\" IF (attribute_exists(PK)) \
             AND (attribute_not_exists(pinc) OR pinc <> \"i1\" OR attribute_not_exists(pgen) OR \
             pgen <= 7)"
        );
        let detached = Owner {
            cascade: false,
            parent_id: None,
            pgen: None,
            pinc: None,
        };
        assert_eq!(
            render(&owner_fanout(&detached)),
            "SET cascade = false REMOVE parent_id IF (attribute_exists(PK))"
        );
    }

    #[test]
    fn an_operation_write_adds_deltas_under_the_lock_and_the_count_read() {
        let plan = ShardWrite {
            shard: 1,
            rf_read: 1000,
            rf_new: 1001,
            count_pin: Some(2),
            deltas: BTreeMap::from([("rpm.v2".to_owned(), 5000), ("wcu".to_owned(), -7)]),
            ttl: TtlAction::Set(99),
            grants: Vec::new(),
            drop_top_ups: Vec::new(),
            reset_counters: Vec::new(),
            windows: BTreeMap::new(),
            top_ups: BTreeMap::new(),
        };
        assert_eq!(
            render(&operation_write(&plan)),
            "SET rf = 1001, vu = 0, ttl = 99 ADD b_rpm.v2_tk 5000, b_wcu_tk -7 IF (rf = 1000) \
             AND (shard_count = 2)"
        );
        // A quota's reset: the grant sized at the count, top-ups dropped, the reset counted.
        let quota = ShardWrite {
            deltas: BTreeMap::from([("q".to_owned(), 7000)]),
            grants: vec![("q".to_owned(), 2)],
            drop_top_ups: vec!["q".to_owned()],
            reset_counters: vec!["q".to_owned()],
            ..plan.clone()
        };
        assert_eq!(
            render(&operation_write(&quota)),
            "SET rf = 1001, vu = 0, ttl = 99, b_q_gc = 2 ADD b_q_tk 7000, b_q_rn 1 \
             REMOVE b_q_tu IF (rf = 1000) AND (shard_count = 2)"
        );
        let unstored = ShardWrite {
            count_pin: None,
            ttl: TtlAction::Remove,
            deltas: BTreeMap::new(),
            ..plan
        };
        assert_eq!(
            render(&operation_write(&unstored)),
            "SET rf = 1001, vu = 0 REMOVE ttl IF (rf = 1000) AND (attribute_not_exists(shard_count))"
        );
    }

    #[test]
    fn speculative_consume_has_the_enforce_shape_condition() {
        let demand = BTreeMap::from([("rpm".to_owned(), 1000)]);
        let text = render(&speculative_consume(&demand, 1_700_000_000_500));
        assert_eq!(
            text,
            "ADD b_rpm_tc 1000, b_rpm_tk -1000, b_wcu_tk -1000, b_wcu_tc 1000 IF \
             (attribute_exists(PK)) AND \
             (attribute_not_exists(b_rpm_soft) OR \
             b_rpm_soft BETWEEN 1700000000501 AND 1700000120500) AND \
             (bypass BETWEEN 1700000000501 AND 1700000120500 OR \
             (b_rpm_soft BETWEEN 1700000000501 AND 1700000120500 \
             AND attribute_exists(b_rpm_cp) AND attribute_exists(b_rpm_tk)) OR b_rpm_tk >= 1000) \
             AND (attribute_not_exists(bypass) OR bypass BETWEEN 1700000000501 AND 1700000120500) \
             AND (b_wcu_tk >= 1000) AND \
             (attribute_not_exists(ttl) OR ttl > 1700000000) AND \
             (attribute_not_exists(disabled)) AND \
             (bypass BETWEEN 1700000000501 AND 1700000120500 OR attribute_not_exists(vu) OR \
             vu BETWEEN 1700000000501 AND 2700000060500) AND \
             (attribute_not_exists(dl_pause_until) OR \
             NOT (dl_pause_until BETWEEN 1700000000501 AND 1700086460500))"
        );
        assert_eq!(
            render(&bypass_consume(
                &demand,
                1_700_000_050_000,
                1_700_000_000_500
            )),
            "SET bypass = 1700000050000 ADD b_rpm_tc 1000 IF (attribute_exists(PK)) AND \
             (attribute_exists(bypass)) AND \
             (attribute_not_exists(dl_pause_until) OR \
             NOT (dl_pause_until BETWEEN 1700000000501 AND 1700086460500))"
        );
        // With two limits the live bypass is taken out of both balance terms once.
        let two = BTreeMap::from([("rpm".to_owned(), 1000), ("tpm".to_owned(), 5000)]);
        let text = render(&speculative_consume(&two, 1_700_000_000_500));
        assert!(
            text.contains(
                "(bypass BETWEEN 1700000000501 AND 1700000120500 OR \
                 (((b_rpm_soft BETWEEN 1700000000501 AND 1700000120500 AND \
                 attribute_exists(b_rpm_cp) AND attribute_exists(b_rpm_tk)) OR b_rpm_tk >= 1000) \
                 AND ((b_tpm_soft BETWEEN 1700000000501 AND 1700000120500 AND \
                 attribute_exists(b_tpm_cp) AND attribute_exists(b_tpm_tk)) OR b_tpm_tk >= 5000)))"
            ),
            "{text}"
        );
    }

    #[test]
    fn refill_write_carries_lock_floors_pins_and_seeds() {
        let img = BucketImage {
            rf: 1000,
            shard_count: 1,
            vu: Some(0),
            limits: BTreeMap::from([(
                "rpm".to_owned(),
                LimitState {
                    tk: 0,
                    cp: 10_000,
                    ra: 10_000,
                    rp: 60_000,
                    tc: 0,
                },
            )]),
            ..BucketImage::default()
        };
        let limits = [Limit::per_minute("rpm", 10), Limit::per_minute("tpm", 100)];
        let demand = BTreeMap::from([("rpm".to_owned(), 1000), ("tpm".to_owned(), 5000)]);
        let Plan::Write(plan) = plan_refill(
            &img,
            &limits,
            &demand,
            7000,
            TtlAction::Remove,
            &Stamps::default(),
        ) else {
            panic!()
        };
        let text = render(&refill_write(&plan, None));
        assert_eq!(
            text,
            "SET rf = 7000, b_tpm_tk = 95000, b_tpm_cp = 100000, b_tpm_ra = 100000, \
             b_tpm_rp = 60000, b_tpm_sched = \"-\", b_tpm_rsched = \"-\", \
             b_wcu_tk = 1000000, b_wcu_cp = 1000000, b_wcu_ra = 1000000, b_wcu_rp = 1000 \
             ADD b_rpm_tc 1000, b_tpm_tc 5000, b_wcu_tc 0 REMOVE vu IF (rf = 1000) AND \
             (attribute_not_exists(dl_pause_until) OR \
             NOT (dl_pause_until BETWEEN 7001 AND 86467000)) AND (vu = 0) AND \
             (attribute_not_exists(shard_count) OR shard_count = 1) AND \
             (b_rpm_tk <= 0) AND \
             (attribute_not_exists(b_tpm_cp) OR attribute_not_exists(b_tpm_tk)) AND \
             (attribute_not_exists(b_wcu_cp) OR attribute_not_exists(b_wcu_tk))"
        );
    }

    #[test]
    fn a_scheduled_seed_spells_its_schedule_and_the_write_stamps_the_next_boundary() {
        use dynalimit_core::schedule::{Entry, Schedule, Zone};
        let img = BucketImage {
            rf: 1000,
            shard_count: 1,
            limits: BTreeMap::from([(
                "rpm".to_owned(),
                LimitState {
                    tk: 10_000,
                    cp: 10_000,
                    ra: 10_000,
                    rp: 60_000,
                    tc: 0,
                },
            )]),
            ..BucketImage::default()
        };
        let half = Entry::scaled("30-59 * * * *", 0.5).unwrap();
        let zone = Zone::get("Asia/Kolkata").unwrap();
        let tpm =
            Limit::per_minute("tpm", 100).with_schedule(Schedule::new(zone, vec![half]).unwrap());
        let limits = [Limit::per_minute("rpm", 10), tpm];
        let Plan::Write(plan) = plan_refill(
            &img,
            &limits,
            &BTreeMap::new(),
            60_000,
            TtlAction::Keep,
            &Stamps::default(),
        ) else {
            panic!()
        };
        let text = render(&refill_write(&plan, None));
        // 00:01:00 UTC is 05:31 in Kolkata: inside the window, which closes at 06:00 (00:30 UTC).
        assert!(
            text.starts_with(
                "SET rf = 60000, vu = 1800000, b_tpm_tk = 50000, b_tpm_cp = 100000, \
                 b_tpm_ra = 100000, b_tpm_rp = 60000, b_tpm_sched = \"1m30-59s500\", \
                 b_tpm_rsched = \"-\", b_wcu_tk"
            ),
            "{text}"
        );
        assert!(text.contains("(attribute_not_exists(vu))"), "{text}");
        assert!(
            text.contains(", sched_tz = \"Asia/Kolkata\" ADD"),
            "the item's zone, once: {text}"
        );
    }

    #[test]
    fn refill_write_renews_soft_stamps_and_lets_live_stamps_waive_floors() {
        let state = LimitState {
            tk: 500,
            cp: 10_000,
            ra: 10_000,
            rp: 60_000,
            tc: 0,
        };
        let img = BucketImage {
            rf: 1000,
            shard_count: 1,
            limits: BTreeMap::from([
                ("rpm".to_owned(), state),
                ("tpm".to_owned(), LimitState { tk: 5000, ..state }),
            ]),
            soft: BTreeMap::from([("tpm".to_owned(), 900)]),
            ..BucketImage::default()
        };
        let limits = [Limit::per_minute("rpm", 10), Limit::per_minute("tpm", 10)];
        let demand = BTreeMap::from([("rpm".to_owned(), 2000), ("tpm".to_owned(), 1000)]);
        let soft = Stamps {
            names: ["rpm".to_owned()].into(),
            until: 60_000,
            restamp: true,
            bypass: false,
            ..Stamps::default()
        };
        let Plan::Write(plan) = plan_refill(&img, &limits, &demand, 1000, TtlAction::Keep, &soft)
        else {
            panic!("rpm is soft, tpm fits")
        };
        let text = render(&refill_write(&plan, None));
        assert_eq!(
            text,
            "SET rf = 1000, b_wcu_tk = 1000000, b_wcu_cp = 1000000, b_wcu_ra = 1000000, \
             b_wcu_rp = 1000, b_rpm_soft = 60000 ADD b_rpm_tk -2000, b_rpm_tc 2000, \
             b_tpm_tk -1000, b_tpm_tc 1000, b_wcu_tc 0 REMOVE b_tpm_soft IF (rf = 1000) AND \
             (attribute_not_exists(dl_pause_until) OR \
             NOT (dl_pause_until BETWEEN 1001 AND 86461000)) AND \
             (b_tpm_soft BETWEEN 1001 AND 121000 OR b_tpm_tk >= 1000) AND \
             (attribute_not_exists(b_wcu_cp) OR attribute_not_exists(b_wcu_tk)) AND \
             (attribute_not_exists(b_rpm_soft)) AND (b_tpm_soft = 900)"
        );
    }

    #[test]
    fn credits_are_guarded_then_trimmed() {
        let states = BTreeMap::from([(
            "rpm".to_owned(),
            LimitState {
                tk: 0,
                cp: 10_000,
                ra: 10_000,
                rp: 60_000,
                tc: 0,
            },
        )]);
        let plan = plan_delta(
            &BTreeMap::from([("rpm".to_owned(), -2000)]),
            &states,
            &BTreeMap::new(),
            &BTreeMap::new(),
            1,
            0,
        );
        assert_eq!(
            render(&delta(&plan, false)),
            "ADD b_rpm_tk 2000, b_rpm_tc -2000 IF (attribute_exists(PK)) AND \
             (b_rpm_tk <= 8000) AND (b_rpm_cp = 10000) AND \
             (attribute_not_exists(shard_count) OR shard_count = 1)"
        );
        assert_eq!(
            render(&delta(&plan, true)),
            "SET vu = 0 ADD b_rpm_tk 2000, b_rpm_tc -2000 IF (attribute_exists(PK))"
        );
    }

    #[test]
    fn the_pause_stamp_max_merges_on_existing_items() {
        assert_eq!(
            render(&super::super::pause::stamp(
                1_700_000_060_000,
                1_700_000_000_000
            )),
            "SET dl_pause_until = 1700000060000 IF (attribute_exists(PK)) AND \
             (attribute_not_exists(dl_pause_until) OR dl_pause_until < 1700000060000 OR \
             dl_pause_until > 1700086460000)"
        );
    }

    #[test]
    fn a_move_is_pinned_on_the_share_or_the_grant_it_was_sized_against() {
        let share = Move {
            limit: "rpm".into(),
            donor: 0,
            amount: 3000,
            pin: MovePin::Share { donor_count: 2 },
        };
        let grant = Move {
            limit: "q".into(),
            donor: 0,
            amount: 1000,
            pin: MovePin::Grant {
                donor_gc: None,
                donor_count: 2,
                period: MovePeriod::Calendar { edge: 50 },
            },
        };
        assert_eq!(
            render(&moves(&[&share, &grant])),
            "ADD b_rpm_tk -3000, b_q_tk -1000 IF (attribute_exists(PK)) AND (b_rpm_tk >= 3000) \
             AND (shard_count = 2) AND (b_q_tk >= 1000) AND (attribute_not_exists(b_q_gc) AND \
             shard_count = 2) AND (rf >= 50)"
        );
    }

    #[test]
    fn doubling_and_propagation_conditions() {
        let wcu = crate::bucket::decide::wcu_seed();
        let img = BucketImage {
            rf: 7,
            shard_count: 4,
            wcu: Some(LimitState {
                tk: wcu.tk,
                cp: wcu.cp,
                ra: wcu.ra,
                rp: wcu.rp,
                tc: 0,
            }),
            ..BucketImage::default()
        };
        let Plan::Write(plan) = plan_refill(
            &img,
            &[],
            &BTreeMap::new(),
            5,
            TtlAction::Keep,
            &Stamps::default(),
        ) else {
            panic!("nothing consumed");
        };
        assert_eq!(
            render(&split_donor(&plan, 4, 8)),
            "SET rf = 7, shard_count = 8 IF (rf = 7) AND (attribute_not_exists(dl_pause_until) \
             OR NOT (dl_pause_until BETWEEN 8 AND 86460005)) AND (shard_count = 4)"
        );
        assert_eq!(
            render(&propagate(8)),
            "SET shard_count = 8 IF (shard_count < 8)"
        );
        assert_eq!(
            render(&consumption_only(&[("rpm".to_owned(), 1000)], 5000)),
            "ADD b_rpm_tk -1000, b_rpm_tc 1000 IF (attribute_exists(PK)) AND (b_rpm_tk >= 1000 \
             OR (b_rpm_soft BETWEEN 5001 AND 125000 AND attribute_exists(b_rpm_cp) AND \
             attribute_exists(b_rpm_tk))) AND \
             (attribute_not_exists(dl_pause_until) OR \
             NOT (dl_pause_until BETWEEN 5001 AND 86465000))"
        );
    }
}
