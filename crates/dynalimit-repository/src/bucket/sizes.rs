//! Every request shape of a bucket, rendered in its largest form at
//! [`MAX_LIMITS_PER_BUCKET`] limits and measured against DynamoDB's expression limits: an
//! expression string of at most 4 KB, at most 300 operators and functions in it, an
//! attribute name of at most 255 bytes, and no path written twice by one update.
//!
//! Each shape turns every option on for every limit (schedules, quotas with their grants and
//! top-ups, session windows, soft stamps, floors and pins, the owner stamp), names every limit
//! with 64 characters (the longest a name may be), and uses 13-digit times. Attribute names
//! and values travel as `#a{i}` and `:v{i}` placeholders, so a name's length shows only in the
//! attribute names; the expressions grow with the number of limits.
//!
//! `cargo test -p dynalimit-repository --lib sizes -- --nocapture` prints the table that
//! `docs/limits-per-bucket.md` quotes.

use std::collections::BTreeMap;

use crate::bucket::decide::{
    CreditGuard, DeltaPlan, LimitWrite, Move, MovePeriod, MovePin, ProactiveDelta, ProactiveRefill,
    QuotaPin, RefillPlan, Seed, StampChange, TtlAction, VuWrite, WindowWrite,
};
use dynalimit_core::Limit;
use dynalimit_core::bucket::WCU;
use dynalimit_core::operation::{ShardWrite, WindowOp};
use dynalimit_core::schedule::{Entry, ResetSchedule, Schedule, Zone};
use dynalimit_format::attr::{self, MAX_LIMITS_PER_BUCKET};
use dynalimit_format::bucket::{MetaCheck, Owner};
use dynalimit_format::expr::Expr;

use super::writes;

/// DynamoDB's longest expression string, bytes.
const MAX_EXPRESSION_BYTES: usize = 4096;
/// DynamoDB's most operators and functions in one expression.
const MAX_OPERATORS: usize = 300;
/// DynamoDB's longest attribute name, bytes.
const MAX_NAME_BYTES: usize = 255;
/// A time as every write carries it (ms since the epoch).
const NOW: i64 = 1_700_000_000_123;

/// `n` limit names of 64 characters, distinct.
fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let name = format!("l{i:03}{}", "x".repeat(60));
            assert_eq!(name.len(), 64);
            assert!(attr::validate_limit_name(&name).is_ok(), "{name}");
            name
        })
        .collect()
}

/// A zone of the longest kind the item stores.
fn zone() -> Zone {
    Zone::get("America/Argentina/ComodRivadavia").unwrap_or_else(|_| Zone::utc())
}

/// `n` limits, each with its own parameter schedule and soft; even ones calendar quotas with
/// their own reset schedule, odd ones session quotas.
fn limits(n: usize) -> Vec<Limit> {
    names(n)
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let minute = i % 60;
            let schedule = Schedule::new(
                zone(),
                vec![Entry::scaled(&format!("{minute} * * * 1-5"), 0.5).expect("entry")],
            )
            .expect("schedule");
            let limit = if i % 2 == 0 {
                Limit::quota(name, 1_000_000, &format!("{minute} 0 * * *"), zone()).expect("quota")
            } else {
                Limit::session_quota(name, 1_000_000, 86_400)
            };
            limit.with_schedule(schedule).soft()
        })
        .collect()
}

fn demand(n: usize) -> BTreeMap<String, i64> {
    names(n)
        .into_iter()
        .map(|n| (n, 1_000_000_000_000))
        .collect()
}

fn owner() -> Owner {
    Owner {
        cascade: true,
        parent_id: Some("p".repeat(64)),
        pgen: Some(NOW),
        pinc: Some("01J".repeat(9)),
    }
}

fn window() -> WindowWrite {
    WindowWrite {
        rsa: 86_400,
        ws: Some(NOW),
        opened: true,
        set_length: true,
    }
}

/// An rf-locked write of `n` limits, `seeded` of them seeded (the others refilled, debited,
/// floored and pinned), every one soft-stamped, granted, windowed; with the write-capacity
/// tracker, a `vu` and `ttl` change, the grant pin, the bypass stamp and the owner stamp.
fn refill(n: usize, seeded: impl Fn(usize) -> bool) -> Expr {
    refill_carrying(n, seeded, 0)
}

/// [`refill`] on an item that also holds `carried` limits of an earlier configuration, which
/// the write refills too (each refilled, pinned, its soft stamp removed).
fn refill_carrying(n: usize, seeded: impl Fn(usize) -> bool, carried: usize) -> Expr {
    writes::refill_write(&refill_plan(n, seeded, carried), Some(&owner()))
}

/// A split donor's write: its rf-locked write of every limit (refilled, not seeded: a split
/// materialises what the item holds) with the new shard count, pinned on the old one.
fn split_donor(n: usize) -> Expr {
    writes::split_donor(&refill_plan(n, |_| false, 0), 16, 32)
}

/// The plan of [`refill_carrying`].
fn refill_plan(n: usize, seeded: impl Fn(usize) -> bool, carried: usize) -> RefillPlan {
    let schedules = limits(n);
    let mut writes: Vec<LimitWrite> = names(n)
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let seed = seeded(i).then(|| Seed {
                tk: NOW,
                cp: NOW,
                ra: NOW,
                rp: NOW,
                schedule: schedules[i].schedule().cloned(),
                reset: Some(ResetSchedule::parse("0 0 * * *", zone()).expect("reset schedule")),
            });
            LimitWrite {
                name,
                add_tk: -NOW,
                add_tc: NOW,
                floor: Some(NOW),
                pin_max: Some(NOW),
                seed,
                soft: Some(StampChange::Set {
                    until: NOW,
                    read: Some(NOW - 1),
                }),
                grant: Some(32),
                drop_top_up: true,
                window: Some(window()),
            }
        })
        .collect();
    writes.extend((0..carried).map(|i| LimitWrite {
        name: format!("c{i:03}{}", "x".repeat(60)),
        add_tk: NOW,
        add_tc: 0,
        floor: None,
        pin_max: Some(NOW),
        seed: None,
        soft: Some(StampChange::Remove { read: NOW }),
        grant: None,
        drop_top_up: false,
        window: None,
    }));
    writes.push(LimitWrite {
        name: WCU.to_owned(),
        add_tk: NOW,
        add_tc: NOW,
        floor: None,
        pin_max: Some(NOW),
        seed: None,
        soft: None,
        grant: None,
        drop_top_up: false,
        window: None,
    });
    RefillPlan {
        rf_read: NOW,
        rf_new: NOW + 1,
        writes,
        ttl: TtlAction::Set(NOW / 1000),
        vu: VuWrite {
            read: Some(NOW),
            next: Some(NOW + 1),
        },
        shard_count: 32,
        consumed: BTreeMap::new(),
        statuses: Vec::new(),
        now: NOW,
        overdrawn: Vec::new(),
        bypass: Some(StampChange::Set {
            until: NOW,
            read: Some(NOW - 1),
        }),
        grant_pin: Some(32),
        resets_applied: true,
    }
}

fn quota_pin() -> QuotaPin {
    QuotaPin {
        gc: 32,
        gc_stored: true,
        tu: Some(NOW),
        rn: Some(NOW),
        next_edge: Some(NOW),
        window: Some((Some(NOW), Some(NOW))),
    }
}

/// A lease's credit of `n` limits, every one guarded and pinned as a quota.
fn credit(n: usize, trim: bool) -> Expr {
    let plan = DeltaPlan {
        adds: names(n).into_iter().map(|l| (l, NOW, -NOW)).collect(),
        guards: names(n)
            .into_iter()
            .map(|name| CreditGuard {
                name,
                max_tk: NOW,
                cp: NOW,
                quota: Some(quota_pin()),
            })
            .collect(),
        shard_count: 1,
    };
    writes::delta(&plan, trim)
}

/// The donor's update of a shard's create: `n` quotas moved, each pinned on an absent grant
/// count (the longest pin) and on its session window.
fn moves(n: usize) -> Expr {
    let moves: Vec<Move> = names(n)
        .into_iter()
        .map(|limit| Move {
            limit,
            donor: 0,
            amount: NOW,
            pin: MovePin::Grant {
                donor_gc: None,
                donor_count: 32,
                period: MovePeriod::Session { wa: Some(NOW) },
            },
        })
        .collect();
    writes::moves(&moves.iter().collect::<Vec<_>>())
}

/// One shard's part of a reset or top-up of `n` limits, every part of it on (the top-ups
/// set rather than dropped, the longer of the two, which never meet on one limit).
fn operation(n: usize) -> Expr {
    let all = names(n);
    let plan = ShardWrite {
        shard: 31,
        rf_read: NOW,
        rf_new: NOW + 1,
        count_pin: Some(32),
        deltas: all.iter().map(|l| (l.clone(), NOW)).collect(),
        ttl: TtlAction::Set(NOW / 1000),
        grants: all.iter().map(|l| (l.clone(), 32)).collect(),
        drop_top_ups: Vec::new(),
        reset_counters: all.clone(),
        windows: all
            .iter()
            .map(|l| {
                let op = WindowOp {
                    wa: NOW,
                    start: Some((NOW, 86_400)),
                    clear_wtc: true,
                };
                (l.clone(), op)
            })
            .collect(),
        top_ups: all.iter().map(|l| (l.clone(), NOW)).collect(),
    };
    writes::operation_write(&plan)
}

fn proactive(n: usize) -> Expr {
    writes::proactive_refill(&proactive_plan(n, Some(32)))
}

fn materialise(n: usize) -> Expr {
    // An unsharded bucket: the count's pin also admits its absence.
    writes::materialise(&proactive_plan(n, Some(1)))
}

fn proactive_plan(n: usize, shard_count: Option<i64>) -> ProactiveRefill {
    let mut deltas: Vec<ProactiveDelta> = names(n)
        .into_iter()
        .map(|limit| ProactiveDelta {
            limit,
            delta: NOW,
            tk_read: NOW,
        })
        .collect();
    deltas.push(ProactiveDelta {
        limit: WCU.to_owned(),
        delta: NOW,
        tk_read: NOW,
    });
    ProactiveRefill {
        rf_read: NOW,
        rf_new: NOW + 1,
        vu_read: Some(NOW),
        shard_count,
        deltas,
    }
}

/// A request shape at a given number of limits.
type Shape = (&'static str, fn(usize) -> Expr);

/// Every shape whose expressions grow with the number of limits.
const SHAPES: [Shape; 16] = [
    ("consume (fast path)", |n| {
        writes::speculative_consume(&demand(n), NOW)
    }),
    ("consume, bypassed", |n| {
        writes::bypass_consume(&demand(n), NOW, NOW)
    }),
    ("consume only", |n| {
        let retry: Vec<(String, i64)> = demand(n).into_iter().collect();
        writes::consumption_only(&retry, NOW)
    }),
    ("refill, every limit refilled", |n| refill(n, |_| false)),
    ("refill, every limit seeded", |n| refill(n, |_| true)),
    ("refill, seeded and refilled", |n| refill(n, |i| i % 2 == 0)),
    ("refill, n seeded + n carried", |n| {
        refill_carrying(n, |_| true, n)
    }),
    ("create, moves", moves),
    ("split, a donor's write", split_donor),
    ("commit/rollback credit", |n| credit(n, false)),
    ("credit, trimmed", |n| credit(n, true)),
    ("reset/top-up shard", operation),
    ("parameter sync", |n| {
        writes::sync_parameters(&limits(n), true, NOW)
    }),
    ("soft stamps", |n| writes::soft_stamps(&limits(n), NOW)),
    ("proactive refill", proactive),
    ("materialise after a fast debit", materialise),
];

/// The shapes whose expressions do not depend on the limits.
fn fixed_shapes() -> Vec<(&'static str, Expr)> {
    let present = MetaCheck::Present {
        pgen: Some(NOW),
        pinc: None,
        created_at: Some("2026-03-10T00:00:00Z".into()),
    };
    vec![
        (
            "session window fan-out",
            writes::window_fanout(&names(1)[0], NOW, 86_400),
        ),
        ("owner stamp fan-out", writes::owner_fanout(&owner())),
        ("create, owner check", super::meta_condition(&present)),
        ("create, absent item", crate::namespace::absent()),
        ("shard count propagation", writes::propagate(32)),
        ("pause stamp", super::pause::stamp(NOW, NOW)),
        (
            "access stamp",
            dynalimit_format::bucket::access_stamp(dynalimit_format::config::Access::Bypass, NOW),
        ),
    ]
}

/// Operators and functions of an expression, as DynamoDB counts them: comparators, `AND`,
/// `OR`, `NOT`, `BETWEEN` (its `AND` not counted), `IN`, `+`, `-`, and every function call.
fn operators(text: &str) -> usize {
    const FUNCTIONS: [&str; 8] = [
        "attribute_exists",
        "attribute_not_exists",
        "attribute_type",
        "begins_with",
        "contains",
        "size",
        "if_not_exists",
        "list_append",
    ];
    const OPERATORS: [&str; 12] = [
        "=", "<>", "<", "<=", ">", ">=", "AND", "OR", "NOT", "BETWEEN", "IN", "+",
    ];
    let spaced = text.replace('(', " ( ").replace([')', ','], " ");
    // The `AND` of `a BETWEEN b AND c` is part of its `BETWEEN`, which counts once.
    let mut between = false;
    spaced
        .split_whitespace()
        .filter(|t| {
            if *t == "BETWEEN" {
                between = true;
            } else if *t == "AND" && std::mem::take(&mut between) {
                return false;
            }
            FUNCTIONS.contains(t) || OPERATORS.contains(t) || *t == "-"
        })
        .count()
}

/// The path each clause of an update expression writes (its first token: an alias).
fn written_paths(update: &str) -> Vec<&str> {
    const KEYWORDS: [&str; 4] = ["SET", "ADD", "REMOVE", "DELETE"];
    let (mut out, mut expect_path, mut depth) = (Vec::new(), false, 0i64);
    for token in update.split_whitespace() {
        if depth == 0 && KEYWORDS.contains(&token) {
            expect_path = true;
            continue;
        }
        if expect_path {
            out.push(token.trim_end_matches(','));
            expect_path = false;
        }
        depth += token.matches('(').count() as i64 - token.matches(')').count() as i64;
        if depth == 0 && token.ends_with(',') {
            expect_path = true;
        }
    }
    out
}

/// One measured shape.
#[derive(Debug)]
struct Measured {
    update: usize,
    condition: usize,
    update_operators: usize,
    condition_operators: usize,
    longest_name: usize,
    /// A path the update writes twice, which DynamoDB refuses ("Two document paths
    /// overlap").
    written_twice: Option<String>,
}

impl Measured {
    fn of(e: &Expr) -> Measured {
        let update = e.update_expression().unwrap_or_default();
        let condition = e.condition_expression().unwrap_or_default();
        Measured {
            update: update.len(),
            condition: condition.len(),
            update_operators: operators(&update),
            condition_operators: operators(&condition),
            longest_name: e
                .name_pairs()
                .iter()
                .map(|(_, attr)| attr.len())
                .max()
                .unwrap_or(0),
            written_twice: {
                let paths = written_paths(&update);
                paths
                    .iter()
                    .enumerate()
                    .find(|(i, p)| paths[..*i].contains(p))
                    .map(|(_, p)| (*p).to_owned())
            },
        }
    }

    fn fits(&self) -> bool {
        self.update <= MAX_EXPRESSION_BYTES
            && self.condition <= MAX_EXPRESSION_BYTES
            && self.update_operators <= MAX_OPERATORS
            && self.condition_operators <= MAX_OPERATORS
            && self.longest_name <= MAX_NAME_BYTES
            && self.written_twice.is_none()
    }
}

/// The most limits `shape` carries within DynamoDB's limits (searched up to 64).
fn largest_fitting(shape: fn(usize) -> Expr) -> usize {
    (1..=64)
        .take_while(|&n| Measured::of(&shape(n)).fits())
        .last()
        .unwrap_or(0)
}

#[test]
fn every_shape_fits_dynamodb_s_limits_at_the_maximum() {
    println!(
        "{:<30} {:>7} {:>5} {:>9} {:>5} {:>8}",
        "shape", "update", "ops", "condition", "ops", "fits up to"
    );
    for (shape, build) in SHAPES {
        let m = Measured::of(&build(MAX_LIMITS_PER_BUCKET));
        let largest = largest_fitting(build);
        println!(
            "{shape:<30} {:>7} {:>5} {:>9} {:>5} {largest:>8}",
            m.update, m.update_operators, m.condition, m.condition_operators
        );
        assert!(m.fits(), "{shape} at {MAX_LIMITS_PER_BUCKET} limits: {m:?}");
        assert!(largest >= MAX_LIMITS_PER_BUCKET, "{shape}");
    }
    for (shape, e) in fixed_shapes() {
        let m = Measured::of(&e);
        println!(
            "{shape:<30} {:>7} {:>5} {:>9} {:>5} {:>8}",
            m.update, m.update_operators, m.condition, m.condition_operators, "any"
        );
        assert!(m.fits(), "{shape}: {m:?}");
    }
}

#[test]
fn the_maximum_is_the_round_number_below_the_tightest_shape() {
    // The tightest shape, a lease's credit, overflows DynamoDB's 300 operators at 19 limits:
    // the maximum keeps a margin below it, and is not set needlessly low.
    let tightest = SHAPES
        .iter()
        .map(|(_, build)| largest_fitting(*build))
        .min()
        .unwrap_or(0);
    assert!(
        (MAX_LIMITS_PER_BUCKET + 1..=MAX_LIMITS_PER_BUCKET + 4).contains(&tightest),
        "the tightest shape fits up to {tightest} limits"
    );
    let over = Measured::of(&credit(MAX_LIMITS_PER_BUCKET + 3, false));
    assert!(over.condition_operators > MAX_OPERATORS, "{over:?}");
    // The consume of every acquire, with its stamps bounded (`BETWEEN` terms): over 4 KB or
    // 300 operators a few limits further.
    let over = Measured::of(&writes::speculative_consume(&demand(23), NOW));
    assert!(!over.fits(), "23 limits: {over:?}");
}

#[test]
fn more_limits_than_the_maximum_are_refused_before_any_request() {
    let at = limits(MAX_LIMITS_PER_BUCKET);
    assert!(attr::validate_limits(&at).is_ok());
    let over = limits(MAX_LIMITS_PER_BUCKET + 1);
    assert!(matches!(
        attr::validate_limits(&over),
        Err(dynalimit_core::CoreError::TooManyLimits { given, max, .. })
            if given == MAX_LIMITS_PER_BUCKET + 1 && max == MAX_LIMITS_PER_BUCKET
    ));
}

#[test]
fn operators_are_counted_as_dynamodb_counts_them() {
    assert_eq!(
        operators("(attribute_not_exists(#a0) OR #a0 <= :v1) AND (#a2 = :v3)"),
        5
    );
    assert_eq!(operators("SET #a0 = if_not_exists(#a0, :v0) + :v1"), 3);
    assert_eq!(operators("ADD #a0 :v0, #a1 :v1 REMOVE #a2"), 0);
    assert_eq!(
        operators("#a0 BETWEEN :v0 AND :v1 AND NOT (#a1 BETWEEN :v0 AND :v1)"),
        4
    );
}

#[test]
fn the_paths_an_update_writes_are_read_clause_by_clause() {
    assert_eq!(
        written_paths(
            "SET #a0 = if_not_exists(#a0, :v0) + :v1, #a2 = :v3 ADD #a4 :v4, #a5 :v5 REMOVE #a6, #a7"
        ),
        ["#a0", "#a2", "#a4", "#a5", "#a6", "#a7"]
    );
}
