use super::*;
use dynalimit_core::bucket::{WCU, WCU_CAPACITY_MILLI, WCU_PERIOD_MS, WCU_REFILL_MILLI};
use dynalimit_core::limit::MILLI;
use dynalimit_core::{Clock, ManualClock};
use proptest::prelude::*;
use std::time::Duration;

const T0: i64 = 1_700_000_000_000;

fn rpm(n: i64) -> Limit {
    Limit::per_minute("rpm", n)
}

fn demand(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs
        .iter()
        .map(|(n, t)| ((*n).to_owned(), t * MILLI))
        .collect()
}

/// Applies a create plan the way the conditional put does.
/// The plan of a write that must not be a rejection.
fn written<T>(plan: Plan<T>) -> T {
    match plan {
        Plan::Write(p) => p,
        Plan::Reject(statuses) => panic!("unexpected rejection: {statuses:?}"),
    }
}

/// The slow pass of hard limits, which must be a write.
fn hard_pass(
    img: &BucketImage,
    limits: &[Limit],
    d: &BTreeMap<String, i64>,
    now: i64,
    ttl: TtlAction,
) -> RefillPlan {
    written(plan_refill(img, limits, d, now, ttl, &Stamps::default()))
}

fn created(plan: &CreatePlan) -> BucketImage {
    let mut img = BucketImage {
        rf: plan.rf,
        shard_count: plan.shard_count,
        ttl: plan.ttl,
        vu: plan.vu,
        wcu: Some(LimitState {
            tk: WCU_CAPACITY_MILLI,
            cp: WCU_CAPACITY_MILLI,
            ra: WCU_REFILL_MILLI,
            rp: WCU_PERIOD_MS,
            tc: 0,
        }),
        ..BucketImage::default()
    };
    for (l, tk, tc) in &plan.limits {
        img.limits.insert(
            l.name().to_owned(),
            LimitState {
                tk: *tk,
                cp: l.capacity_milli(),
                ra: l.refill_amount_milli(),
                rp: l.refill_period_millis(),
                tc: *tc,
            },
        );
        if let Some(s) = l.schedule() {
            img.schedules.insert(l.name().to_owned(), s.clone());
        }
        if let Some(r) = l.reset() {
            img.resets.insert(l.name().to_owned(), r.clone());
            img.quotas.insert(
                l.name().to_owned(),
                QuotaState {
                    gc: Some(i64::from(plan.shard_count)),
                    ..QuotaState::default()
                },
            );
        }
        if let (Some(rsa), Some((ws, _))) = (l.window_seconds(), plan.windows.get(l.name())) {
            img.windows.insert(
                l.name().to_owned(),
                WindowState {
                    rsa: Some(rsa),
                    ws: Some(*ws),
                    wa: Some(*ws),
                    wtc: None,
                },
            );
            img.quotas.insert(
                l.name().to_owned(),
                QuotaState {
                    gc: Some(i64::from(plan.shard_count)),
                    ..QuotaState::default()
                },
            );
        }
    }
    img.soft.clone_from(&plan.soft);
    img.bypass = plan.bypass;
    img
}

/// The speculative consume's condition and update, as DynamoDB evaluates them.
fn fast_consume(img: &mut BucketImage, d: &BTreeMap<String, i64>, now: i64) -> bool {
    let ok = d
        .iter()
        .all(|(n, m)| img.limits.get(n).is_some_and(|s| s.tk >= *m))
        && img.wcu.is_some_and(|w| w.tk >= WCU_DEBIT_MILLI)
        && img.ttl.is_none_or(|t| t > now.div_euclid(1000))
        && !img.disabled
        && img.vu.is_none_or(|v| v > now);
    if ok {
        for (n, m) in d {
            let s = img.limits.get_mut(n).unwrap();
            s.tk -= m;
            s.tc += m;
        }
        let w = img.wcu.as_mut().unwrap();
        w.tk -= WCU_DEBIT_MILLI;
        w.tc += WCU_DEBIT_MILLI;
    }
    ok
}

/// The rf-locked write's condition and update, as DynamoDB evaluates them.
fn apply_refill(img: &mut BucketImage, plan: &RefillPlan) -> bool {
    if img.rf != plan.rf_read || (plan.vu.changes() && img.vu != plan.vu.read) {
        return false;
    }
    for w in &plan.writes {
        let cur = if w.name == WCU {
            img.wcu
        } else {
            img.limits.get(&w.name).copied()
        };
        match (&w.seed, cur) {
            (Some(_), Some(_)) => return false,
            (None, None) => return false,
            (None, Some(s)) => {
                if w.floor.is_some_and(|f| s.tk < f) || w.pin_max.is_some_and(|p| s.tk > p) {
                    return false;
                }
            }
            (Some(_), None) => {}
        }
    }
    for w in &plan.writes {
        let slot = if w.name == WCU {
            img.wcu.get_or_insert_default()
        } else {
            img.limits.entry(w.name.clone()).or_default()
        };
        match &w.seed {
            Some(s) => {
                *slot = LimitState {
                    tk: s.tk,
                    cp: s.cp,
                    ra: s.ra,
                    rp: s.rp,
                    tc: slot.tc + w.add_tc,
                };
            }
            None => {
                slot.tk += w.add_tk;
                slot.tc += w.add_tc;
            }
        }
    }
    for w in &plan.writes {
        if let Some(count) = w.grant {
            img.quotas.entry(w.name.clone()).or_default().gc = Some(i64::from(count));
        }
        if let Some(win) = w.window {
            let stored = img.windows.entry(w.name.clone()).or_default();
            if win.opened || w.seed.is_some() {
                stored.ws = win.ws;
            }
            if win.opened || win.set_length || w.seed.is_some() {
                stored.rsa = Some(win.rsa);
            }
            if win.ws.is_some() {
                stored.wa = win.ws;
            }
        }
    }
    img.rf = plan.rf_new;
    if plan.vu.changes() {
        img.vu = plan.vu.next;
    }
    match plan.ttl {
        TtlAction::Set(t) => img.ttl = Some(t),
        TtlAction::Remove => img.ttl = None,
        TtlAction::Keep => {}
    }
    true
}

fn apply_credit(img: &mut BucketImage, plan: &DeltaPlan) -> bool {
    let ok = img.shards() == plan.shard_count
        && plan.guards.iter().all(|g| {
            img.limits
                .get(&g.name)
                .is_some_and(|s| s.tk <= g.max_tk && s.cp == g.cp)
        });
    if !ok {
        img.vu = Some(0);
    }
    for (n, tk, tc) in &plan.adds {
        let s = img.limits.get_mut(n).unwrap();
        s.tk += tk;
        s.tc += tc;
    }
    ok
}

fn fresh(limits: &[Limit], d: &BTreeMap<String, i64>, shards: u32, now: i64) -> BucketImage {
    match plan_create(limits, d, shards, 0, now, None, &Stamps::default()) {
        Plan::Write(p) => created(&p),
        Plan::Reject(s) => panic!("unexpected rejection {s:?}"),
    }
}

#[test]
fn create_starts_at_the_share_minus_consumption_like_the_worked_example() {
    let limits = [rpm(100), Limit::per_minute("tpm", 10_000)];
    let ttl = dynalimit_core::bucket::bucket_ttl(T0, &limits, 7);
    let Plan::Write(p) = plan_create(
        &limits,
        &demand(&[("rpm", 1), ("tpm", 500)]),
        1,
        0,
        T0,
        ttl,
        &Stamps::default(),
    ) else {
        panic!("rejected")
    };
    assert_eq!(p.ttl, Some(1_700_000_420));
    assert_eq!(p.limits[0].1, 99_000);
    assert_eq!(p.limits[0].2, 1_000);
    assert_eq!(p.limits[1].1, 9_500_000);
    assert_eq!(p.limits[1].2, 500_000);
}

#[test]
fn classification_follows_the_reference_order() {
    let d = demand(&[("rpm", 1)]);
    assert_eq!(
        classify_fast_failure(None, &d, T0),
        FastFailure::BucketMissing
    );
    let mut img = fresh(&[rpm(10)], &d, 1, T0);
    img.disabled = true;
    img.vu = Some(T0 - 1);
    assert_eq!(
        classify_fast_failure(Some(&img), &d, T0),
        FastFailure::Disabled
    );
    img.disabled = false;
    assert_eq!(
        classify_fast_failure(Some(&img), &d, T0),
        FastFailure::ScheduleBoundary
    );
    img.vu = None;
    img.wcu.as_mut().unwrap().tk = 500;
    assert_eq!(
        classify_fast_failure(Some(&img), &d, T0),
        FastFailure::WcuExhausted
    );
    img.limits.get_mut("rpm").unwrap().tk = 0;
    assert_eq!(
        classify_fast_failure(Some(&img), &d, T0),
        FastFailure::BothExhausted
    );
    img.wcu.as_mut().unwrap().tk = WCU_CAPACITY_MILLI;
    assert_eq!(
        classify_fast_failure(Some(&img), &d, T0),
        FastFailure::AppLimitExhausted
    );
}

#[test]
fn a_fast_debit_of_a_balance_above_its_ceiling_is_reported_for_a_refund() {
    let d = demand(&[("rpm", 1)]);
    let mut img = fresh(&[rpm(10)], &BTreeMap::new(), 1, T0);
    assert!(fast_consume(&mut img, &d, T0));
    assert_eq!(debit_beyond_ceiling(&img, &d, T0), None, "a full bucket");
    // Another writer stored a balance far above the capacity of 10.
    img.limits.get_mut("rpm").unwrap().tk = 1_000_000_000;
    assert!(fast_consume(&mut img, &d, T0));
    assert_eq!(debit_beyond_ceiling(&img, &d, T0), Some("rpm"));
    // A stray balance with no capacity: the item holds no such limit.
    let stray = BucketImage {
        wcu: img.wcu,
        ..BucketImage::default()
    };
    assert_eq!(debit_beyond_ceiling(&stray, &d, T0), Some("rpm"));
    // Bypassed, or soft and live: admitted whatever the balance.
    let mut bypassed = img.clone();
    bypassed.bypass = Some(T0 + 1);
    assert_eq!(debit_beyond_ceiling(&bypassed, &d, T0), None);
    img.soft.insert("rpm".into(), T0 + 1);
    assert_eq!(debit_beyond_ceiling(&img, &d, T0), None);
    // The refund gives back the balance and the count, unguarded.
    let refund = plan_refund(&d, 1);
    assert_eq!(refund.adds, [("rpm".to_owned(), 1000, -1000)]);
    assert!(refund.guards.is_empty());
}

proptest! {
    /// Fast-path debits the check lets stand never take more than the ceiling and what the
    /// debits before them left: from any stored balance, the balance before each standing
    /// debit is within the ceiling.
    #[test]
    fn standing_fast_debits_come_from_the_ceiling(
        stored in -5_000i64..=5_000_000_000,
        cap in 1i64..=50,
        shards in 1u32..=4,
        takes in proptest::collection::vec(1i64..=5, 1..20),
    ) {
        let mut img = fresh(&[rpm(cap)], &BTreeMap::new(), shards, T0);
        img.limits.get_mut("rpm").unwrap().tk = stored;
        let ceiling = cap * MILLI / i64::from(shards);
        for t in takes {
            let d = demand(&[("rpm", t)]);
            if !fast_consume(&mut img, &d, T0) {
                continue;
            }
            let before = img.limits["rpm"].tk + t * MILLI;
            match debit_beyond_ceiling(&img, &d, T0) {
                None => prop_assert!(before <= ceiling, "{before} > {ceiling}"),
                Some(_) => {
                    // Refunded, then the slow pass trims the balance to the ceiling.
                    let s = img.limits.get_mut("rpm").unwrap();
                    s.tk = (s.tk + t * MILLI).min(ceiling);
                }
            }
        }
    }
}

#[test]
fn gate_rejects_only_when_refill_cannot_help() {
    let clock = ManualClock::new(T0);
    let d = demand(&[("rpm", 1)]);
    let mut img = fresh(&[rpm(10)], &demand(&[("rpm", 10)]), 1, clock.epoch_millis());
    assert!(!fast_consume(&mut img, &d, clock.epoch_millis()));
    let Gate::Reject(statuses) = fast_rejection_gate(&img, &d, clock.epoch_millis()) else {
        panic!("expected a rejection")
    };
    assert_eq!(statuses[0].available, 0);
    // One token per 6 s: 6.001 s from empty.
    assert_eq!(statuses[0].retry_after_ms, 6_001);
    clock.advance(Duration::from_secs(6));
    assert_eq!(
        fast_rejection_gate(&img, &d, clock.epoch_millis()),
        Gate::SlowPath
    );
}

#[test]
fn hard_case_02_double_refill_loses_the_rf_lock() {
    let clock = ManualClock::new(T0);
    let d = demand(&[("rpm", 1)]);
    let mut item = fresh(&[rpm(10)], &demand(&[("rpm", 10)]), 1, clock.epoch_millis());
    clock.advance(Duration::from_secs(30));
    let now = clock.epoch_millis();
    // Two slow paths read the same image and both plan to credit the same 30 s.
    let read = item.clone();
    let a = hard_pass(&read, &[rpm(10)], &d, now, TtlAction::Keep);
    let b = hard_pass(&read, &[rpm(10)], &d, now, TtlAction::Keep);
    assert!(apply_refill(&mut item, &a));
    assert!(
        !apply_refill(&mut item, &b),
        "second refill must lose the lock"
    );
    // The loser takes the consumption-only retry: no refill.
    let retry = consumption_retry(&b.consumed);
    assert_eq!(retry, vec![("rpm".to_owned(), MILLI)]);
    assert_eq!(item.limits["rpm"].tk, 4_000);
}

#[test]
fn hard_case_03_slow_path_drain_race_is_stopped_by_the_floor_guard() {
    let clock = ManualClock::new(T0);
    let mut item = fresh(&[rpm(10)], &demand(&[("rpm", 9)]), 1, clock.epoch_millis());
    clock.advance(Duration::from_secs(1)); // +166 milli: still 1.166 tokens.
    let now = clock.epoch_millis();
    let read = item.clone();
    let plan = hard_pass(
        &read,
        &[rpm(10)],
        &demand(&[("rpm", 1)]),
        now,
        TtlAction::Keep,
    );
    assert_eq!(plan.writes[0].floor, Some(1_000 - 166));
    // A fast-path debit drains the stored token between read and write.
    assert!(fast_consume(&mut item, &demand(&[("rpm", 1)]), now));
    // Without a floor the slow path would still debit; with it the write fails.
    let mut unguarded = plan.clone();
    unguarded.writes[0].floor = None;
    unguarded.writes[0].pin_max = None;
    let mut probe = item.clone();
    probe.rf = plan.rf_read;
    assert!(apply_refill(&mut probe, &unguarded));
    assert!(probe.limits["rpm"].tk < 0, "unguarded write over-admits");
    assert!(!apply_refill(&mut item, &plan));
}

#[test]
fn hard_case_04_refund_between_read_and_write_is_caught_by_the_pin() {
    let clock = ManualClock::new(T0);
    let mut item = fresh(&[rpm(10)], &demand(&[("rpm", 10)]), 1, clock.epoch_millis());
    clock.advance(Duration::from_secs(12));
    let now = clock.epoch_millis();
    let read = item.clone();
    let plan = hard_pass(
        &read,
        &[rpm(10)],
        &demand(&[("rpm", 1)]),
        now,
        TtlAction::Keep,
    );
    assert_eq!(plan.writes[0].pin_max, Some(0));
    // A rollback credits 3 tokens before the write lands.
    let credit = plan_delta(
        &demand(&[("rpm", -3)]),
        &read.limits,
        &BTreeMap::new(),
        &BTreeMap::new(),
        read.shard_count,
        T0,
    );
    assert!(apply_credit(&mut item, &credit));
    assert!(
        !apply_refill(&mut item, &plan),
        "refill must not stack on the credit"
    );
}

#[test]
fn hard_case_05_credit_above_the_ceiling_stamps_vu_zero() {
    let d = demand(&[("rpm", 2)]);
    let mut item = fresh(&[rpm(10)], &d, 1, T0);
    let states = item.limits.clone();
    // The bucket refilled to full behind the lease's back; crediting 2 would exceed 10.
    item.limits.get_mut("rpm").unwrap().tk = 10_000;
    let credit = plan_delta(
        &demand(&[("rpm", -2)]),
        &states,
        &BTreeMap::new(),
        &BTreeMap::new(),
        1,
        T0,
    );
    assert_eq!(credit.guards[0].max_tk, 8_000);
    assert!(!apply_credit(&mut item, &credit));
    assert_eq!(item.vu, Some(0));
    // The next fast path refuses, the slow pass trims back to the ceiling and clears vu.
    assert!(!fast_consume(&mut item, &demand(&[("rpm", 1)]), T0));
    assert_eq!(
        classify_fast_failure(Some(&item), &demand(&[("rpm", 1)]), T0),
        FastFailure::AppLimitExhausted
    );
    let plan = hard_pass(
        &item,
        &[rpm(10)],
        &demand(&[("rpm", 1)]),
        T0,
        TtlAction::Keep,
    );
    assert_eq!(
        plan.vu,
        VuWrite {
            read: Some(0),
            next: None
        }
    );
    assert!(apply_refill(&mut item, &plan));
    assert_eq!(item.limits["rpm"].tk, 9_000);
    assert_eq!(item.vu, None);
}

#[test]
fn hard_case_06_usage_is_derived_from_tc_not_from_the_balance() {
    let clock = ManualClock::new(T0);
    let d = demand(&[("rpm", 3)]);
    let mut item = fresh(&[rpm(10)], &d, 1, clock.epoch_millis());
    let mut consumed = 3_000;
    for _ in 0..5 {
        clock.advance(Duration::from_secs(30));
        let p = hard_pass(&item, &[rpm(10)], &d, clock.epoch_millis(), TtlAction::Keep);
        assert!(apply_refill(&mut item, &p));
        consumed += 3_000;
    }
    // The balance is full again (refill > consumption) but tc counted every token.
    assert_eq!(item.limits["rpm"].tc, consumed);
}

#[test]
fn hard_case_11_expired_ttl_goes_to_the_slow_path_which_refreshes_it() {
    let d = demand(&[("rpm", 1)]);
    let mut item = fresh(&[rpm(10)], &d, 1, T0);
    item.ttl = Some(T0 / 1000 - 1);
    assert!(!fast_consume(&mut item, &d, T0));
    assert_eq!(
        classify_fast_failure(Some(&item), &d, T0),
        FastFailure::AppLimitExhausted
    );
    assert_eq!(fast_rejection_gate(&item, &d, T0), Gate::SlowPath);
    let ttl = dynalimit_core::bucket::bucket_ttl(T0, &[rpm(10)], 7).unwrap();
    let p = hard_pass(&item, &[rpm(10)], &d, T0, TtlAction::Set(ttl));
    assert!(apply_refill(&mut item, &p));
    assert_eq!(item.ttl, Some(T0 / 1000 + 420));
}

#[test]
fn hard_case_14_limit_added_after_the_bucket_existed_is_seeded() {
    let clock = ManualClock::new(T0);
    let mut item = fresh(&[rpm(10)], &demand(&[("rpm", 1)]), 2, clock.epoch_millis());
    let tpm = Limit::per_minute("tpm", 1000);
    let d = demand(&[("rpm", 1), ("tpm", 100)]);
    assert!(!fast_consume(&mut item, &d, clock.epoch_millis()));
    assert_eq!(
        fast_rejection_gate(&item, &d, clock.epoch_millis()),
        Gate::SlowPath
    );
    let p = hard_pass(
        &item,
        &[rpm(10), tpm],
        &d,
        clock.epoch_millis(),
        TtlAction::Keep,
    );
    assert!(apply_refill(&mut item, &p));
    // The seed starts at this shard's share (1000 // 2) minus the consumption.
    assert_eq!(item.limits["tpm"].tk, 400_000);
    assert_eq!(item.limits["tpm"].tc, 100_000);
    assert!(fast_consume(&mut item, &d, clock.epoch_millis()));
}

#[test]
fn hard_case_19_no_doubling_on_the_way_to_a_rejection() {
    let d = demand(&[("rpm", 1)]);
    let mut item = fresh(&[rpm(10)], &demand(&[("rpm", 10)]), 1, T0);
    item.wcu.as_mut().unwrap().tk = 0;
    assert_eq!(
        classify_fast_failure(Some(&item), &d, T0),
        FastFailure::BothExhausted
    );
    assert!(matches!(
        decide_wcu_exhaustion(&item, &d, T0),
        WcuDecision::Reject(_)
    ));
    item.limits.get_mut("rpm").unwrap().tk = 10_000;
    assert_eq!(
        decide_wcu_exhaustion(&item, &d, T0),
        WcuDecision::Double { from: 1, to: 2 }
    );
}

#[test]
fn hard_case_22_doubling_projects_wcu_and_stops_at_32() {
    let d = demand(&[("rpm", 1)]);
    let mut item = fresh(&[rpm(1000)], &d, 32, T0);
    item.wcu.as_mut().unwrap().tk = 0;
    // At the cap: no doubling, slow path instead.
    assert_eq!(decide_wcu_exhaustion(&item, &d, T0), WcuDecision::SlowPath);
    // Below the cap, but time since rf restores write capacity: not hot.
    item.shard_count = 4;
    assert_eq!(
        decide_wcu_exhaustion(&item, &d, T0 + 2),
        WcuDecision::SlowPath
    );
    assert_eq!(
        decide_wcu_exhaustion(&item, &d, T0),
        WcuDecision::Double { from: 4, to: 8 }
    );
}

#[test]
fn hard_case_25_capacity_shrink_surplus_is_trimmed_by_the_slow_pass() {
    let d = demand(&[("rpm", 1)]);
    let mut item = fresh(&[rpm(100)], &BTreeMap::new(), 1, T0);
    // A param sync shrank the capacity to 10 and stamped vu = 0.
    let s = item.limits.get_mut("rpm").unwrap();
    s.cp = 10_000;
    s.ra = 10_000;
    item.vu = Some(0);
    assert!(!fast_consume(&mut item, &d, T0));
    let p = hard_pass(&item, &[rpm(10)], &d, T0, TtlAction::Keep);
    assert!(apply_refill(&mut item, &p));
    assert_eq!(item.limits["rpm"].tk, 9_000);
}

#[test]
fn hard_case_26_request_larger_than_a_share_reports_the_share() {
    let d = demand(&[("rpm", 30)]);
    let Plan::Reject(statuses) = plan_create(&[rpm(100)], &d, 4, 0, T0, None, &Stamps::default())
    else {
        panic!("30 > 100 // 4 must be rejected")
    };
    assert_eq!(statuses[0].limit.capacity(), 25);
    assert_eq!(statuses[0].limit.refill_amount(), 25);
    assert_eq!(statuses[0].available, 25);
    assert!(statuses[0].exceeded);
}

#[test]
fn unsupported_items_are_recognised() {
    let mut item = fresh(&[rpm(10)], &BTreeMap::new(), 1, T0);
    assert_eq!(item.unsupported_reason(), None);
    item.vu = Some(0);
    assert_eq!(item.unsupported_reason(), None);
    // A real boundary is a schedule's, which is implemented.
    item.vu = Some(T0 + 5);
    assert_eq!(item.unsupported_reason(), None);
    item.vu = None;
    item.limits.get_mut("rpm").unwrap().ra = 0;
    assert!(item.unsupported_reason().is_some());
    item.limits.get_mut("rpm").unwrap().ra = 10_000;
    item.unsupported.push("b_rpm_gc".into());
    assert!(item.unsupported_reason().is_some());
}

#[test]
fn availability_sums_shards_and_caps_at_capacity() {
    let a = fresh(&[rpm(100)], &demand(&[("rpm", 20)]), 2, T0);
    let b = fresh(&[rpm(100)], &demand(&[("rpm", 40)]), 2, T0);
    let st = availability(&[a.clone(), b], &[rpm(100)], &demand(&[("rpm", 50)]), T0);
    assert_eq!(st[0].available, 40);
    assert!(st[0].exceeded);
    assert_eq!(st[0].limit.capacity(), 100);
    let full = availability(&[], &[rpm(100)], &BTreeMap::new(), T0);
    assert_eq!(full[0].available, 100);
}

proptest! {
    /// Any interleaving of fast consumes, slow passes (some losing the lock to a fast debit)
    /// and credits over a manual clock admits no more than capacity + refill, and tc always
    /// equals what was admitted minus what was credited back.
    #[test]
    fn conservation_and_no_over_admission(
        ops in proptest::collection::vec((0u8..4, 0i64..3, 0i64..4_000), 1..150),
    ) {
        let limits = [Limit::custom("rpm", 20, 10, 1)];
        let clock = ManualClock::new(T0);
        let mut item = fresh(&limits, &BTreeMap::new(), 1, clock.epoch_millis());
        let mut admitted = 0i64;
        for (op, n, dt) in ops {
            clock.advance(Duration::from_millis(dt.unsigned_abs()));
            let now = clock.epoch_millis();
            let d = demand(&[("rpm", n)]);
            match op {
                0 => {
                    if fast_consume(&mut item, &d, now) {
                        admitted += n * MILLI;
                    }
                }
                1 | 2 => {
                    let read = item.clone();
                    if let Plan::Write(p) = plan_refill(&read, &limits, &d, now, TtlAction::Keep, &Stamps::default()) {
                        if op == 2 && fast_consume(&mut item, &demand(&[("rpm", 1)]), now) {
                            admitted += MILLI;
                        }
                        if apply_refill(&mut item, &p) {
                            admitted += p.consumed["rpm"];
                        }
                    }
                }
                _ => {
                    if admitted >= n * MILLI && n > 0 {
                        let states = item.limits.clone();
                        let credit = plan_delta(&demand(&[("rpm", -n)]), &states, &BTreeMap::new(), &BTreeMap::new(), 1, T0);
                        apply_credit(&mut item, &credit);
                        admitted -= n * MILLI;
                    }
                }
            }
            prop_assert_eq!(item.limits["rpm"].tc, admitted);
        }
        let elapsed = clock.epoch_millis() - T0;
        let bound = 20 * MILLI + elapsed * 10;
        prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
    }
}

/// Applies a split as its transaction does: every donor's rf-locked write (with the new
/// count), every new shard created from its donor as read; all or nothing.
fn apply_split(shards: &mut BTreeMap<u32, BucketImage>, plan: &SplitPlan) -> bool {
    let mut after = shards.clone();
    for split in &plan.splits {
        let read = &shards[&split.donor];
        let donor = after.get_mut(&split.donor).unwrap();
        if donor.shards() != plan.from || !apply_refill(donor, &split.write) {
            return false;
        }
        donor.shard_count = plan.to;
        if let Some(new) = &split.shard {
            if after.contains_key(&new.shard) {
                return false;
            }
            after.insert(new.shard, new.image(read));
        }
    }
    *shards = after;
    true
}

/// Creates missing shard `shard` at `count` as a slow pass does while other shards exist:
/// funded by moves ([`plan_funding`]), applied with the create. The consumption admitted.
fn create_funded(
    shards: &mut BTreeMap<u32, BucketImage>,
    limits: &[Limit],
    d: &BTreeMap<String, i64>,
    at: (u32, u32),
    now: i64,
) -> BTreeMap<String, i64> {
    let (shard, count) = at;
    let siblings: Vec<(u32, BucketImage)> =
        shards.iter().map(|(i, img)| (*i, img.clone())).collect();
    let (funded, moves) = plan_funding(limits, &siblings, shard, count, now);
    let stamps = Stamps {
        funded,
        ..Stamps::default()
    };
    let Plan::Write(p) = plan_create(limits, d, count, shard, now, None, &stamps) else {
        return BTreeMap::new();
    };
    for m in &moves {
        let donor = shards.get_mut(&m.donor).unwrap();
        let tk = &mut donor.limits.get_mut(&m.limit).unwrap().tk;
        assert!(*tk >= m.amount, "a move never overdraws its donor");
        *tk -= m.amount;
    }
    shards.insert(shard, created(&p));
    p.consumed
}

proptest! {
    /// Any interleaving of fast consumes on random shards, slow passes (creating missing
    /// shards, refilling existing ones), splits, doublings by another writer that move
    /// nothing (the count raised on every existing shard) and time admits no more than
    /// capacity plus refill: a split never hands the same tokens out twice.
    #[test]
    fn doublings_never_over_admit(
        ops in proptest::collection::vec((0u8..6, 0u32..32, 1i64..6, 0i64..300), 1..250),
    ) {
        // 40 tokens, 40 a minute: demand far above what refills.
        let limits = [Limit::custom("rpm", 40, 40, 60)];
        let clock = ManualClock::new(T0);
        let mut count = 1u32;
        let mut shards = BTreeMap::from([(0, fresh(&limits, &BTreeMap::new(), 1, T0))]);
        let mut admitted = 0i64;
        for (op, pick, n, dt) in ops {
            clock.advance(Duration::from_millis(dt.unsigned_abs()));
            let now = clock.epoch_millis();
            let s = pick % count;
            let d = demand(&[("rpm", n)]);
            match op {
                0 | 1 => {
                    if let Some(img) = shards.get_mut(&s)
                        && fast_consume(img, &d, now)
                    {
                        admitted += n * MILLI;
                    }
                }
                2 | 3 => match shards.get(&s).cloned() {
                    None => {
                        let c = create_funded(&mut shards, &limits, &d, (s, count), now);
                        admitted += c.get("rpm").copied().unwrap_or(0);
                    }
                    Some(mut img) => {
                        if let Plan::Write(p) = plan_refill(&img, &limits, &d, now, TtlAction::Keep, &Stamps::default())
                            && apply_refill(&mut img, &p)
                        {
                            admitted += p.consumed["rpm"];
                            shards.insert(s, img);
                        }
                    }
                },
                4 => {
                    if count < 32 {
                        let read: Vec<(u32, BucketImage)> =
                            shards.iter().map(|(i, img)| (*i, img.clone())).collect();
                        if let Some(plan) = plan_split(&read, count, count * 2, now) {
                            prop_assert!(apply_split(&mut shards, &plan));
                            count *= 2;
                        }
                    }
                }
                _ => {
                    if count < 32 {
                        count *= 2;
                        for img in shards.values_mut() {
                            img.shard_count = count;
                        }
                    }
                }
            }
        }
        // 40 tokens a minute is 2/3 of a millitoken per millisecond.
        let elapsed = clock.epoch_millis() - T0;
        let bound = 40 * MILLI + (elapsed * 2 + 2) / 3;
        prop_assert!(admitted <= bound, "admitted {} > bound {}", admitted, bound);
    }
}

#[test]
fn hard_case_23_a_split_moves_tokens_and_never_adds_any() {
    // Shard 0 of rpm 3000/h spent 1001 tokens, then splits: it gives half of its 1999 in
    // whole tokens (999) to shard 1, which the same transaction creates, and keeps 1000. The
    // bucket still holds 1999 (the reference funds the new shard with 1500 more).
    let limits = [Limit::per_hour("rpm", 3000)];
    let shard0 = fresh(&limits, &demand(&[("rpm", 1001)]), 1, T0);
    let plan = plan_split(&[(0, shard0.clone())], 1, 2, T0).expect("a split");
    let split = &plan.splits[0];
    let new = split.shard.as_ref().expect("shard 1 is created");
    assert_eq!((new.shard, new.shard_count), (1, 2));
    assert_eq!(new.balances["rpm"], 999_000);
    assert_eq!(plan.moved("rpm"), 999_000);
    let mut shards = BTreeMap::from([(0, shard0)]);
    assert!(apply_split(&mut shards, &plan));
    let (donor, twin) = (&shards[&0], &shards[&1]);
    assert_eq!(donor.shard_count, 2);
    assert_eq!(donor.limits["rpm"].tk, 1_000_000);
    assert_eq!(
        donor.limits["rpm"].tc, 1_001_000,
        "the donor's count is kept"
    );
    assert_eq!(twin.limits["rpm"].tk, 999_000);
    assert_eq!(twin.limits["rpm"].tc, 0);
    assert_eq!(twin.wcu.map(|w| w.tk), Some(WCU_CAPACITY_MILLI));
    // Both serve at once, and refill at the new share: 1500 an hour, 25 tokens a minute.
    let later = T0 + 60_000;
    for img in [donor, twin] {
        let p = hard_pass(img, &limits, &demand(&[("rpm", 1)]), later, TtlAction::Keep);
        let w = p.writes.iter().find(|w| w.name == "rpm").unwrap();
        assert_eq!(w.add_tk, 25_000 - 1_000);
    }
    // Applied twice, the split fails its own pins (the `rf` lock, the count): nothing moves
    // twice.
    assert!(!apply_split(&mut shards.clone(), &plan));
}

#[test]
fn a_split_keeps_the_refill_earned_at_the_old_share_and_what_a_donor_cannot_give() {
    let limits = [Limit::per_minute("rpm", 40)];
    // Half a minute after the last pass, 20 tokens refilled at the whole rate: the donor
    // materialises them before it gives half.
    let shard0 = fresh(&limits, &demand(&[("rpm", 40)]), 1, T0);
    let plan = plan_split(&[(0, shard0)], 1, 2, T0 + 30_000).unwrap();
    assert_eq!(plan.splits[0].write.rf_new, T0 + 30_000);
    assert_eq!(plan.moved("rpm"), 10_000);
    let w = &plan.splits[0].write.writes[0];
    assert_eq!((w.name.as_str(), w.add_tk), ("rpm", 20_000 - 10_000));
    assert_eq!(w.floor, None, "the refill covers the move");
    // What the donor gives must still be there at the write (a debit landing meanwhile).
    let shard0 = fresh(&limits, &demand(&[("rpm", 10)]), 1, T0);
    let plan = plan_split(&[(0, shard0)], 1, 2, T0).unwrap();
    let w = &plan.splits[0].write.writes[0];
    assert_eq!((w.add_tk, w.floor), (-15_000, Some(15_000)));
    // A shard missing below the old count is left missing (its twin too); a twin that
    // exists already is left alone, its donor only raised.
    let shards = [
        (0, fresh(&limits, &BTreeMap::new(), 4, T0)),
        (2, fresh(&limits, &BTreeMap::new(), 4, T0)),
        (6, fresh(&limits, &BTreeMap::new(), 8, T0)),
    ];
    let plan = plan_split(&shards, 4, 8, T0).unwrap();
    let donors: Vec<(u32, Option<u32>)> = plan
        .splits
        .iter()
        .map(|s| (s.donor, s.shard.as_ref().map(|n| n.shard)))
        .collect();
    assert_eq!(donors, [(0, Some(4)), (2, None)]);
    // No split of a bucket whose shard 0 is missing, or whose shard below the old count is
    // disabled, holds what the core profile cannot read, or lags behind shard 0's count.
    assert!(plan_split(&shards[1..2], 4, 8, T0).is_none());
    let changes: [fn(&mut BucketImage); 3] = [
        |i| i.disabled = true,
        |i| i.unsupported.push("b_rpm_x".into()),
        |i| i.shard_count = 2,
    ];
    for change in changes {
        let mut bad = shards.clone();
        change(&mut bad[1].1);
        assert!(plan_split(&bad, 4, 8, T0).is_none());
    }
}

/// One limit of each kind, of `cap` tokens (a multiple of 32, so that every share and every
/// move is whole), for the split conservation test: dripping, scheduled (twice `cap`,
/// halved now), calendar quota, session quota, soft.
fn of_kind(kind: u8, cap: i64) -> Limit {
    use dynalimit_core::schedule::{Entry, Schedule, Zone};
    match kind {
        0 => Limit::custom("l", cap, cap, 60),
        1 => {
            // T0 is 13 minutes into its hour: the halving is in force.
            let half = Entry::scaled("0-29 * * * *", 0.5).unwrap();
            Limit::custom("l", 2 * cap, 2 * cap, 60)
                .with_schedule(Schedule::new(Zone::utc(), vec![half]).unwrap())
        }
        2 => Limit::quota_per_day("l", cap, Zone::utc()),
        3 => Limit::session_quota("l", cap, 3600),
        _ => Limit::custom("l", cap, cap, 60).soft(),
    }
}

proptest! {
    /// For every limit kind, any sequence of requests on random shards (fast or slow) and
    /// splits up to 32 shards, with the clock still: the tokens the shards hold plus those
    /// admitted are what one unsplit bucket allows, every admission is counted once, and
    /// every whole token held can still be spent by ordinary requests afterwards (nothing
    /// stranded). A soft limit admits beyond it, into debt, and still conserves.
    #[test]
    fn splits_strand_nothing_and_add_nothing(
        kind in 0u8..5,
        units in 1i64..8,
        ops in proptest::collection::vec((0u8..4, 0u32..32, 1i64..9), 1..120),
    ) {
        let limit = of_kind(kind, 32 * units);
        let limits = [limit.clone()];
        let soft = Stamps {
            names: if limit.is_soft() { ["l".to_owned()].into() } else { Default::default() },
            until: T0 + 60_000,
            restamp: true,
            ..Stamps::default()
        };
        let allowance = limit.params_at(T0).capacity;
        let now = T0;
        let mut count = 1u32;
        let first = match plan_create(&limits, &BTreeMap::new(), 1, 0, now, None, &soft) {
            Plan::Write(p) => created(&p),
            Plan::Reject(s) => panic!("{s:?}"),
        };
        let mut shards = BTreeMap::from([(0, first)]);
        let mut admitted = 0i64;
        for (op, pick, n) in ops {
            let s = pick % count;
            let d = demand(&[("l", n)]);
            match op {
                0 => {
                    let img = shards.get_mut(&s).unwrap();
                    if !limit.is_soft() && fast_consume(img, &d, now) {
                        admitted += n * MILLI;
                    }
                }
                1 | 2 => {
                    let img = shards[&s].clone();
                    let mut after = img.clone();
                    if let Plan::Write(p) = plan_refill(&img, &limits, &d, now, TtlAction::Keep, &soft)
                        && apply_refill(&mut after, &p)
                    {
                        admitted += p.consumed["l"];
                        shards.insert(s, after);
                    }
                }
                _ => {
                    if count < 32 {
                        let read: Vec<(u32, BucketImage)> =
                            shards.iter().map(|(i, img)| (*i, img.clone())).collect();
                        let plan = plan_split(&read, count, count * 2, now);
                        prop_assert!(plan.is_some(), "every shard exists and agrees");
                        prop_assert!(apply_split(&mut shards, &plan.unwrap()));
                        count *= 2;
                    }
                }
            }
            let held: i64 = shards.values().map(|img| img.limits["l"].tk).sum();
            prop_assert_eq!(held + admitted, allowance, "{} shards", count);
            let tc: i64 = shards.values().map(|img| img.limits["l"].tc).sum();
            prop_assert_eq!(tc, admitted, "every admission counted once");
        }
        if !limit.is_soft() {
            // Spend what is held, one token at a time, as requests would.
            for img in shards.values_mut() {
                while img.limits["l"].tk >= MILLI {
                    prop_assert!(fast_consume(img, &demand(&[("l", 1)]), now));
                    admitted += MILLI;
                }
            }
            prop_assert_eq!(admitted, allowance, "nothing stranded");
        }
    }
}

mod proactive {
    use super::super::*;

    fn image(rpm_tk: i64, wcu_tk: i64, shards: u32) -> BucketImage {
        let mut img = BucketImage {
            rf: 1_000_000,
            shard_count: shards,
            ..BucketImage::default()
        };
        img.limits.insert(
            "rpm".into(),
            LimitState {
                tk: rpm_tk,
                cp: 100_000,
                ra: 100_000,
                rp: 60_000,
                tc: 0,
            },
        );
        img.wcu = Some(LimitState {
            tk: wcu_tk,
            cp: 1_000_000,
            ra: 1_000_000,
            rp: 1000,
            tc: 0,
        });
        img
    }

    #[test]
    fn refill_is_written_only_for_busy_buckets_and_trims_always() {
        let consumed = BTreeMap::from([("rpm".to_owned(), 30_000)]);
        // 6 s later: +10 tokens; projected 20 tokens is below the 30 consumed: refill.
        let plan = plan_proactive_refill(&image(10_000, 500_000, 1), Some(1), &consumed, 1_006_000)
            .unwrap();
        assert_eq!(plan.rf_new, 1_006_000);
        assert_eq!(
            plan.deltas,
            vec![
                ProactiveDelta {
                    limit: "rpm".into(),
                    delta: 10_000,
                    tk_read: 10_000
                },
                ProactiveDelta {
                    limit: "wcu".into(),
                    delta: 500_000,
                    tk_read: 500_000
                },
            ]
        );
        // Projected 80 tokens is plenty: nothing to write.
        assert!(
            plan_proactive_refill(&image(70_000, 1_000_000, 1), Some(1), &consumed, 1_006_000)
                .is_none()
        );
        // Above the ceiling of 2 shards (50 tokens): trimmed even without consumption.
        let plan = plan_proactive_refill(
            &image(90_000, 1_000_000, 2),
            Some(2),
            &BTreeMap::new(),
            1_000_000,
        )
        .unwrap();
        assert_eq!(plan.deltas[0].delta, -40_000);
        // A clock behind rf never moves rf backward.
        let plan =
            plan_proactive_refill(&image(90_000, 1_000_000, 2), Some(2), &BTreeMap::new(), 5)
                .unwrap();
        assert_eq!(plan.rf_new, 1_000_000);
    }

    #[test]
    fn items_the_core_profile_cannot_read_are_left_alone() {
        let mut img = image(0, 0, 1);
        img.unsupported.push("rsched".into());
        let consumed = BTreeMap::from([("rpm".to_owned(), 30_000)]);
        assert!(plan_proactive_refill(&img, Some(1), &consumed, 1_006_000).is_none());
        assert!(plan_proactive_doubling(&img, 1_000_000).is_none());
        let mut img = image(0, 0, 1);
        img.disabled = true;
        assert!(plan_proactive_refill(&img, Some(1), &consumed, 1_006_000).is_none());
    }

    #[test]
    fn doubling_when_wcu_projects_below_a_fifth_and_below_the_cap() {
        assert_eq!(
            plan_proactive_doubling(&image(0, 100_000, 1), 1_000_000),
            Some((1, 2))
        );
        // 100 ms later the wcu has refilled to 200 tokens: 20 %, no doubling.
        assert_eq!(
            plan_proactive_doubling(&image(0, 100_000, 1), 1_100_000),
            None
        );
        assert_eq!(plan_proactive_doubling(&image(0, 0, 32), 1_000_000), None);
        assert_eq!(
            plan_proactive_doubling(&image(0, 0, 16), 1_000_000),
            Some((16, 32))
        );
    }
}

#[test]
fn every_shard_splits_from_one_that_existed_before_its_doubling() {
    let mut count = 1u32;
    while count < MAX_SHARD_COUNT {
        for shard in count..2 * count {
            assert_eq!(split_from(shard), shard - count, "shard {shard}");
            assert!(split_from(shard) < count);
        }
        count *= 2;
    }
    assert_eq!(split_from(0), 0);
}

#[test]
fn a_remembered_image_refuses_only_while_a_declared_limit_stays_short() {
    // rpm 60: spent to the last token; one token refills per second.
    let limits = [rpm(60)];
    let img = fresh(&limits, &demand(&[("rpm", 60)]), 1, T0);
    let d = demand(&[("rpm", 1)]);
    let statuses = remembered_rejection(&img, &d, None, T0).expect("short now");
    assert!(statuses[0].exceeded);
    let wait = statuses[0].retry_after_ms;
    assert!((1000..=1001).contains(&wait), "{wait}");
    assert!(remembered_rejection(&img, &d, None, T0 + 999).is_some());
    // Projected with refill, never used past the point where the request would fit.
    assert_eq!(remembered_rejection(&img, &d, None, T0 + 1000), None);
    assert_eq!(remembered_rejection(&img, &d, None, T0 + wait), None);
    // Two tokens need two seconds.
    assert!(remembered_rejection(&img, &demand(&[("rpm", 2)]), None, T0 + 1500).is_some());
}

#[test]
fn a_remembered_image_is_not_used_when_it_may_be_stale_or_says_too_little() {
    let limits = [rpm(60)];
    let spent = fresh(&limits, &demand(&[("rpm", 60)]), 1, T0);
    let d = demand(&[("rpm", 1)]);
    assert!(remembered_rejection(&spent, &d, None, T0).is_some());
    type Change = fn(&mut BucketImage);
    let variants: [(&str, Change); 5] = [
        ("vu stamp", |i| i.vu = Some(0)),
        ("past ttl", |i| i.ttl = Some(T0 / 1000)),
        ("disabled", |i| i.disabled = true),
        ("unsupported", |i| i.unsupported.push("b_rpm_gc".into())),
        ("only wcu short", |i| {
            i.limits.get_mut("rpm").unwrap().tk = 60_000;
            i.wcu.as_mut().unwrap().tk = 0;
        }),
    ];
    for (why, change) in variants {
        let mut img = spent.clone();
        change(&mut img);
        assert_eq!(remembered_rejection(&img, &d, None, T0), None, "{why}");
    }
    // A declared limit the item does not hold yet: the slow path would seed it.
    assert_eq!(
        remembered_rejection(&spent, &demand(&[("rpm", 1), ("tpm", 1)]), None, T0),
        None
    );
    // Explicit limits: used only when they define the declared limits as the item does.
    assert!(remembered_rejection(&spent, &d, Some(&limits), T0).is_some());
    assert_eq!(
        remembered_rejection(&spent, &d, Some(&[rpm(120)]), T0),
        None
    );
    assert_eq!(remembered_rejection(&spent, &d, Some(&[]), T0), None);
    // A ttl still ahead is fine.
    let mut img = spent.clone();
    img.ttl = Some(T0 / 1000 + 60);
    assert!(remembered_rejection(&img, &d, None, T0).is_some());
}

mod soft_limits {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn spent(tk: i64) -> BucketImage {
        let limit = Limit::per_minute("rpm", 10);
        let mut img = BucketImage {
            rf: NOW,
            shard_count: 1,
            ..BucketImage::default()
        };
        let mut state = LimitState::starting(&limit, 1, 0);
        state.tk = tk;
        img.limits.insert("rpm".into(), state);
        img.wcu = Some(LimitState {
            tk: WCU_CAPACITY_MILLI,
            cp: WCU_CAPACITY_MILLI,
            ra: WCU_REFILL_MILLI,
            rp: WCU_PERIOD_MS,
            tc: 0,
        });
        img
    }

    fn soft(names: &[&str], until: i64) -> Stamps {
        Stamps {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            until,
            restamp: true,
            bypass: false,
            ..Stamps::default()
        }
    }

    fn demand(tokens: i64) -> BTreeMap<String, i64> {
        BTreeMap::from([("rpm".to_owned(), tokens * MILLI)])
    }

    /// The slow pass of `tokens` of rpm 10/min on `img` with `soft`.
    fn pass(img: &BucketImage, tokens: i64, soft: &Stamps) -> Plan<RefillPlan> {
        let limits = [Limit::per_minute("rpm", 10)];
        plan_refill(img, &limits, &demand(tokens), NOW, TtlAction::Keep, soft)
    }

    #[test]
    fn a_live_stamp_never_refuses_and_an_expired_one_sends_to_the_slow_path() {
        let mut img = spent(0);
        assert_eq!(
            classify_fast_failure(Some(&img), &demand(1), NOW),
            FastFailure::AppLimitExhausted
        );
        assert!(matches!(
            fast_rejection_gate(&img, &demand(1), NOW),
            Gate::Reject(_)
        ));
        img.soft.insert("rpm".into(), NOW + 1);
        assert!(matches!(
            fast_rejection_gate(&img, &demand(1), NOW),
            Gate::SlowPath
        ));
        assert!(remembered_rejection(&img, &demand(1), None, NOW).is_none());
        img.soft.insert("rpm".into(), NOW);
        assert_eq!(
            classify_fast_failure(Some(&img), &demand(1), NOW),
            FastFailure::ScheduleBoundary
        );
    }

    #[test]
    fn a_soft_limit_is_debited_into_debt_without_a_floor_and_its_stamp_renewed() {
        let img = spent(500);
        let plan = written(pass(&img, 3, &soft(&["rpm"], NOW + 60_000)));
        assert_eq!(plan.consumed["rpm"], 3000);
        assert_eq!(plan.overdrawn, ["rpm"]);
        let rpm = plan.writes.iter().find(|w| w.name == "rpm").unwrap();
        assert_eq!((rpm.add_tk, rpm.add_tc, rpm.floor), (-3000, 3000, None));
        assert_eq!(
            rpm.soft,
            Some(StampChange::Set {
                until: NOW + 60_000,
                read: None
            })
        );
        assert!(plan.statuses.iter().all(|s| !s.exceeded));
        assert!(
            plan.statuses.iter().all(|s| s.overdrawn),
            "reported as overdrawn"
        );
        // The same request on a hard limit is refused.
        assert!(matches!(pass(&img, 3, &Stamps::default()), Plan::Reject(_)));
    }

    #[test]
    fn a_limit_no_longer_soft_loses_its_stamp_pinned_on_the_read() {
        let mut img = spent(5000);
        img.soft.insert("rpm".into(), NOW + 5);
        let plan = written(pass(&img, 1, &soft(&[], NOW + 60_000)));
        let rpm = plan.writes.iter().find(|w| w.name == "rpm").unwrap();
        assert_eq!(rpm.soft, Some(StampChange::Remove { read: NOW + 5 }));
        // Explicit limits (no uncached configuration) leave stamps alone.
        let plan = written(pass(&img, 1, &Stamps::default()));
        assert!(plan.writes.iter().all(|w| w.soft.is_none()));
    }

    #[test]
    fn a_create_stamps_its_soft_limits_and_admits_beyond_the_share() {
        let Plan::Write(plan) = plan_create(
            &[Limit::per_minute("rpm", 10)],
            &demand(25),
            1,
            0,
            NOW,
            None,
            &soft(&["rpm"], NOW + 50_000),
        ) else {
            panic!("a soft limit never refuses");
        };
        assert_eq!(
            plan.soft,
            BTreeMap::from([("rpm".to_owned(), NOW + 50_000)])
        );
        assert_eq!(plan.limits[0].1, -15_000);
        assert_eq!(plan.overdrawn, ["rpm"]);
    }

    #[test]
    fn a_live_bypass_admits_everything_and_an_expired_one_needs_a_slow_pass() {
        let mut img = spent(0);
        img.vu = Some(NOW - 1);
        img.bypass = Some(NOW + 1);
        assert_ne!(
            classify_fast_failure(Some(&img), &demand(5), NOW),
            FastFailure::ScheduleBoundary,
            "a live bypass outlasts a vu boundary"
        );
        assert!(matches!(
            fast_rejection_gate(&img, &demand(5), NOW),
            Gate::SlowPath
        ));
        assert!(remembered_rejection(&img, &demand(5), None, NOW).is_none());
        img.bypass = Some(NOW);
        assert_eq!(
            classify_fast_failure(Some(&img), &demand(5), NOW),
            FastFailure::ScheduleBoundary
        );
    }

    #[test]
    fn slow_passes_stamp_a_bypassed_pair_and_unstamp_one_that_is_not() {
        let img = spent(5000);
        let bypassed = Stamps {
            bypass: true,
            ..soft(&[], NOW + 50_000)
        };
        let plan = written(pass(&img, 1, &bypassed));
        assert_eq!(
            plan.bypass,
            Some(StampChange::Set {
                until: NOW + 50_000,
                read: None
            })
        );
        let mut stamped = img.clone();
        stamped.bypass = Some(NOW - 5);
        let plan = written(pass(&stamped, 1, &soft(&[], NOW + 50_000)));
        assert_eq!(plan.bypass, Some(StampChange::Remove { read: NOW - 5 }));
        let plan = written(pass(&stamped, 1, &Stamps::default()));
        assert_eq!(plan.bypass, None, "explicit limits leave the stamp");
        let Plan::Write(created) = plan_create(
            &[Limit::per_minute("rpm", 10)],
            &demand(1),
            1,
            0,
            NOW,
            None,
            &bypassed,
        ) else {
            panic!("fits");
        };
        assert_eq!(created.bypass, Some(NOW + 50_000));
    }

    #[test]
    fn a_bypassed_lease_moves_only_the_count() {
        let plan = plan_counted(&BTreeMap::from([
            ("rpm".to_owned(), -2000),
            ("tpm".to_owned(), 0),
        ]));
        assert_eq!(plan.adds, [("rpm".to_owned(), 0, -2000)]);
        assert!(plan.guards.is_empty());
        let refund = plan_bypass_refund(
            &BTreeMap::from([("rpm".to_owned(), 3000), ("tpm".to_owned(), 0)]),
            2,
        );
        assert_eq!(refund.adds, [("rpm".to_owned(), 3000, 0)]);
        assert!(refund.guards.is_empty());
    }

    proptest! {
        #[test]
        fn stamp_deadlines_stay_within_the_reference_range(draw in 0.0f64..1.0, at in 0i64..2_000_000_000_000) {
            let until = stamp_deadline(at, draw);
            prop_assert!(until >= at + STAMP_TTL_MS * 8 / 10);
            prop_assert!(until <= at + STAMP_TTL_MS);
        }
    }
}

/// Scheduled limits (reference §12.2): the parameters in force at the pass's time, the next
/// boundary stamped as `vu`, and a boundary that has passed sending the fast path's failure to
/// a slow pass.
mod scheduled {
    use super::*;
    use dynalimit_core::schedule::{Entry, Schedule, Zone};

    const MINUTE: i64 = 60_000;
    /// 2023-11-14 22:13:20 UTC; the hour's first half is the window below.
    const HOUR_START: i64 = T0 - 13 * MINUTE - 20_000;

    /// 100 a minute, halved in the first half of every hour (UTC).
    fn halved(n: i64) -> Limit {
        let half = Entry::scaled("0-29 * * * *", 0.5).unwrap();
        rpm(n).with_schedule(Schedule::new(Zone::utc(), vec![half]).unwrap())
    }

    fn scheduled_item(now: i64) -> BucketImage {
        let plan = written(plan_create(
            &[halved(100)],
            &demand(&[("rpm", 10)]),
            1,
            0,
            now,
            None,
            &Stamps::default(),
        ));
        let mut img = created(&plan);
        img.vu = plan.vu;
        img.schedules
            .insert("rpm".into(), halved(100).schedule().unwrap().clone());
        img
    }

    #[test]
    fn a_create_starts_at_the_share_in_force_and_stamps_the_next_boundary() {
        let plan = written(plan_create(
            &[halved(100)],
            &demand(&[("rpm", 10)]),
            2,
            0,
            T0,
            None,
            &Stamps::default(),
        ));
        // Half of 100, divided by 2 shards, minus 10.
        assert_eq!(plan.limits[0].1, 25_000 - 10_000);
        assert_eq!(plan.vu, Some(HOUR_START + 30 * MINUTE));
        // Unscheduled limits stamp no boundary.
        let plain = written(plan_create(
            &[rpm(100)],
            &BTreeMap::new(),
            1,
            0,
            T0,
            None,
            &Stamps::default(),
        ));
        assert_eq!(plain.vu, None);
    }

    #[test]
    fn a_slow_pass_after_the_boundary_refills_to_the_base_and_moves_vu() {
        let img = scheduled_item(T0);
        let later = HOUR_START + 31 * MINUTE;
        let plan = hard_pass(
            &img,
            &[halved(100)],
            &demand(&[("rpm", 1)]),
            later,
            TtlAction::Keep,
        );
        assert_eq!(
            plan.vu,
            VuWrite {
                read: Some(HOUR_START + 30 * MINUTE),
                next: Some(HOUR_START + 60 * MINUTE)
            }
        );
        let mut after = img.clone();
        assert!(apply_refill(&mut after, &plan));
        // 40 left, 18 minutes at 100 a minute fill to the base capacity 100, minus 1.
        assert_eq!(after.limits["rpm"].tk, 99_000);
        assert_eq!(after.vu, Some(HOUR_START + 60 * MINUTE));
    }

    #[test]
    fn a_slow_pass_inside_the_window_trims_to_the_capacity_in_force() {
        let mut img = scheduled_item(T0);
        img.limits.get_mut("rpm").unwrap().tk = 90_000; // left by a pass before the window
        let plan = hard_pass(&img, &[halved(100)], &BTreeMap::new(), T0, TtlAction::Keep);
        let mut after = img.clone();
        assert!(apply_refill(&mut after, &plan));
        assert_eq!(after.limits["rpm"].tk, 50_000);
    }

    #[test]
    fn a_limit_no_longer_scheduled_removes_the_boundary() {
        let img = scheduled_item(T0);
        let plan = hard_pass(&img, &[rpm(100)], &BTreeMap::new(), T0, TtlAction::Keep);
        assert_eq!(plan.vu.next, None);
        assert!(plan.vu.changes());
    }

    #[test]
    fn a_passed_boundary_is_a_slow_pass_even_at_zero_and_a_trim_stamp_is_not() {
        let mut img = scheduled_item(T0);
        let d = demand(&[("rpm", 1)]);
        img.vu = Some(0);
        assert_eq!(
            classify_fast_failure(Some(&img), &d, T0),
            FastFailure::ScheduleBoundary
        );
        img.vu = Some(T0);
        assert_eq!(
            classify_fast_failure(Some(&img), &d, T0),
            FastFailure::ScheduleBoundary
        );
        img.schedules.clear();
        img.vu = Some(0);
        assert_eq!(
            classify_fast_failure(Some(&img), &d, T0),
            FastFailure::AppLimitExhausted
        );
    }

    #[test]
    fn a_seed_spells_its_own_schedule_and_votes_for_vu() {
        let img = fresh(&[rpm(10)], &BTreeMap::new(), 1, T0);
        let tpm = {
            let half = Entry::scaled("0-29 * * * *", 0.5).unwrap();
            Limit::per_minute("tpm", 1000)
                .with_schedule(Schedule::new(Zone::utc(), vec![half]).unwrap())
        };
        let plan = hard_pass(
            &img,
            &[rpm(10), tpm.clone()],
            &BTreeMap::new(),
            T0,
            TtlAction::Keep,
        );
        let w = plan.writes.iter().find(|w| w.name == "tpm").unwrap();
        let seed = w.seed.as_ref().expect("a seed");
        assert_eq!(seed.tk, 500_000, "the capacity in force");
        assert_eq!(seed.schedule.as_ref(), tpm.schedule());
        assert_eq!(plan.vu.next, Some(HOUR_START + 30 * MINUTE));
    }

    #[test]
    fn a_rejection_reports_the_share_in_force_and_the_walked_wait() {
        let mut img = scheduled_item(T0);
        img.limits.get_mut("rpm").unwrap().tk = 0;
        let Gate::Reject(statuses) = fast_rejection_gate(&img, &demand(&[("rpm", 1)]), T0) else {
            panic!("an empty bucket refuses");
        };
        assert_eq!(statuses[0].limit.capacity(), 50);
        // One token at 50 a minute.
        assert_eq!(statuses[0].retry_after_ms, 1201);
    }

    #[test]
    fn hard_case_34_a_slow_pass_never_erases_a_param_sync_stamp_it_did_not_read() {
        let mut img = scheduled_item(T0);
        img.vu = Some(0); // a parameter sync asked for one materialising pass
        let plan = hard_pass(&img, &[halved(100)], &BTreeMap::new(), T0, TtlAction::Keep);
        // The write is pinned on the stamp it read: a pass that read before the sync fails.
        assert_eq!(plan.vu.read, Some(0));
        // A pass that read before the sync either leaves the stamp alone (its boundary is
        // the one stored) or fails on its pin: the stamp survives it.
        let mut stale = img.clone();
        stale.vu = Some(HOUR_START + 30 * MINUTE);
        let stale_plan = hard_pass(
            &stale,
            &[halved(100)],
            &BTreeMap::new(),
            T0,
            TtlAction::Keep,
        );
        let mut synced = img.clone();
        let _ = apply_refill(&mut synced, &stale_plan);
        assert_eq!(
            synced.vu,
            Some(0),
            "the sync's stamp survives the stale pass"
        );
        assert!(apply_refill(&mut img, &plan));
    }
}

/// Calendar quotas (reference §12.3): the period's grant, no drip, the new grant at the first
/// pass after a reset edge, credits pinned on the period.
mod quotas {
    use super::*;
    use dynalimit_core::schedule::Zone;

    /// 2023-11-14 22:13:20 UTC; the next midnight is 1 h 46 min 40 s later.
    const NEXT_MIDNIGHT: i64 = T0 + 6_400_000;
    const DAY: i64 = 86_400_000;

    fn daily(n: i64) -> Limit {
        Limit::quota_per_day("q", n, Zone::utc())
    }

    fn item(now: i64, spent: i64) -> BucketImage {
        let plan = written(plan_create(
            &[daily(10)],
            &demand(&[("q", spent)]),
            1,
            0,
            now,
            None,
            &Stamps::default(),
        ));
        let mut img = created(&plan);
        img.vu = plan.vu;
        img.resets
            .insert("q".into(), daily(10).reset().unwrap().clone());
        img.quotas.insert(
            "q".into(),
            QuotaState {
                gc: Some(1),
                ..QuotaState::default()
            },
        );
        img
    }

    #[test]
    fn a_quota_starts_at_its_allowance_and_waits_for_the_edge() {
        let img = item(T0, 10);
        assert_eq!(img.limits["q"].tk, 0);
        assert_eq!(img.vu, Some(NEXT_MIDNIGHT));
        // Hours later, before the edge: nothing came back; the wait is to the edge.
        let later = NEXT_MIDNIGHT - 1;
        let Plan::Reject(statuses) = plan_refill(
            &img,
            &[daily(10)],
            &demand(&[("q", 1)]),
            later,
            TtlAction::Keep,
            &Stamps::default(),
        ) else {
            panic!("a quota does not drip");
        };
        assert_eq!(statuses[0].retry_after_ms, 2);
        assert_eq!(statuses[0].limit.capacity(), 10);
        assert_eq!(statuses[0].limit.refill_amount(), 0);
    }

    #[test]
    fn the_first_pass_after_the_edge_gives_the_new_grant() {
        let img = item(T0, 10);
        let after = NEXT_MIDNIGHT + 5;
        let plan = hard_pass(
            &img,
            &[daily(10)],
            &demand(&[("q", 3)]),
            after,
            TtlAction::Keep,
        );
        let w = plan.writes.iter().find(|w| w.name == "q").unwrap();
        assert_eq!(w.grant, Some(1));
        assert_eq!(plan.grant_pin, Some(1));
        assert!(plan.resets_applied, "a lost lock must plan again");
        assert_eq!(plan.vu.next, Some(NEXT_MIDNIGHT + DAY));
        let mut item = img.clone();
        assert!(apply_refill(&mut item, &plan));
        assert_eq!(item.limits["q"].tk, 7_000);
        // A second pass the same day gives nothing more.
        item.vu = plan.vu.next;
        let again = hard_pass(
            &item,
            &[daily(10)],
            &BTreeMap::new(),
            after + 1000,
            TtlAction::Keep,
        );
        assert!(!again.resets_applied);
        assert!(again.writes.iter().all(|w| w.grant.is_none()));
    }

    #[test]
    fn a_passed_edge_sends_the_fast_path_to_a_slow_pass() {
        let mut img = item(T0, 10);
        let d = demand(&[("q", 1)]);
        assert_eq!(
            classify_fast_failure(Some(&img), &d, NEXT_MIDNIGHT),
            FastFailure::ScheduleBoundary
        );
        img.vu = Some(0);
        assert_eq!(
            classify_fast_failure(Some(&img), &d, T0),
            FastFailure::ScheduleBoundary
        );
    }

    #[test]
    fn a_sharded_quota_is_read_at_its_grant_and_regranted_at_the_new_count() {
        // Shard 0 held the whole allowance (gc 1) when the bucket doubled to 4: its ceiling
        // stays the whole allowance, and its next period's grant is a quarter.
        let mut img = item(T0, 0);
        img.shard_count = 4;
        assert_eq!(img.unsupported_reason(), None);
        let p = img.params_at("q", &img.limits["q"].clone(), T0);
        assert_eq!(p.ceiling, 10_000);
        let plan = hard_pass(
            &img,
            &[daily(10)],
            &BTreeMap::new(),
            NEXT_MIDNIGHT + 1,
            TtlAction::Keep,
        );
        let w = plan.writes.iter().find(|w| w.name == "q").unwrap();
        assert_eq!(w.grant, Some(4));
        assert_eq!(plan.grant_pin, Some(4));
        let mut after = img.clone();
        assert!(apply_refill(&mut after, &plan));
        assert_eq!(after.limits["q"].tk, 2_500, "10 000 millitokens // 4");
        // A sharded quota without a grant count is not read.
        img.quotas.clear();
        assert!(img.unsupported_reason().unwrap().contains("grant count"));
    }

    #[test]
    fn a_new_quota_shard_starts_with_what_funds_it_and_its_grant_count() {
        let funded = Stamps {
            funded: BTreeMap::from([("q".to_owned(), 2_000)]),
            ..Stamps::default()
        };
        let plan = written(plan_create(
            &[daily(10)],
            &BTreeMap::new(),
            4,
            3,
            T0,
            None,
            &funded,
        ));
        assert_eq!(plan.limits[0].1, 2_000, "what a sibling moved to it");
        assert_eq!(plan.shard_count, 4);
        assert_eq!(created(&plan).quotas["q"].gc, Some(4));
        // Nothing to move from (the bucket's other shards are gone): its share.
        let plan = written(plan_create(
            &[daily(10)],
            &BTreeMap::new(),
            4,
            3,
            T0,
            None,
            &Stamps::default(),
        ));
        assert_eq!(plan.limits[0].1, 2_500);
    }

    #[test]
    fn a_credit_is_pinned_on_the_period_and_the_grant() {
        let img = item(T0, 4);
        let pin = img.quota_pin("q").unwrap();
        assert_eq!(pin.next_edge, Some(NEXT_MIDNIGHT));
        assert_eq!(pin.gc, 1);
        let quotas = BTreeMap::from([("q".to_owned(), pin)]);
        let plan = plan_delta(
            &demand(&[("q", -4)]),
            &img.limits,
            &BTreeMap::new(),
            &quotas,
            1,
            T0,
        );
        assert_eq!(plan.guards[0].max_tk, 10_000 - 4_000);
        assert_eq!(plan.guards[0].quota, Some(pin));
    }

    #[test]
    fn hard_case_31_a_clock_behind_the_refill_time_never_applies_a_reset_again() {
        let img = item(T0, 10);
        let plan = hard_pass(
            &img,
            &[daily(10)],
            &BTreeMap::new(),
            NEXT_MIDNIGHT + 60_000,
            TtlAction::Keep,
        );
        let mut after = img.clone();
        assert!(apply_refill(&mut after, &plan));
        assert_eq!(after.rf, NEXT_MIDNIGHT + 60_000);
        after.limits.get_mut("q").unwrap().tk = 0; // spent again
        // A process whose clock is 30 s behind: rf does not move back, no second grant.
        let slow = hard_pass(
            &after,
            &[daily(10)],
            &BTreeMap::new(),
            NEXT_MIDNIGHT + 30_000,
            TtlAction::Keep,
        );
        assert_eq!(slow.rf_new, NEXT_MIDNIGHT + 60_000);
        assert!(slow.writes.iter().all(|w| w.grant.is_none()));
        assert!(apply_refill(&mut after, &slow));
        assert_eq!(after.limits["q"].tk, 0);
    }

    #[test]
    fn hard_case_32_a_lost_lock_after_a_new_grant_plans_the_pass_again() {
        let img = item(T0, 10);
        let consuming = hard_pass(
            &img,
            &[daily(10)],
            &demand(&[("q", 1)]),
            NEXT_MIDNIGHT + 1,
            TtlAction::Keep,
        );
        assert!(
            consuming.resets_applied,
            "the consumption-only retry could debit July"
        );
        let idle = hard_pass(
            &img,
            &[daily(10)],
            &BTreeMap::new(),
            NEXT_MIDNIGHT + 1,
            TtlAction::Keep,
        );
        assert!(!idle.resets_applied, "nothing consumed, nothing to protect");
    }

    #[test]
    fn hard_case_35_a_quota_grant_is_pinned_on_the_count_it_was_sized_at() {
        // A seed of a quota added to an existing bucket of 2 shards.
        let img = fresh(&[rpm(10)], &BTreeMap::new(), 2, T0);
        let plan = hard_pass(
            &img,
            &[rpm(10), daily(10)],
            &BTreeMap::new(),
            T0,
            TtlAction::Keep,
        );
        let seed = plan.writes.iter().find(|w| w.name == "q").unwrap();
        assert_eq!(seed.grant, Some(2));
        assert_eq!(seed.seed.as_ref().unwrap().tk, 5_000, "10 000 // 2");
        assert_eq!(
            plan.grant_pin,
            Some(2),
            "a doubling since the read fails the write"
        );
    }
}

mod sessions {
    use super::*;

    const HOUR: i64 = 3_600_000;

    /// 10 per window of an hour from first use.
    fn session() -> Limit {
        Limit::session_quota("s", 10, 3600)
    }

    fn pass(img: &BucketImage, tokens: i64, now: i64) -> Plan<RefillPlan> {
        plan_refill(
            img,
            &[session()],
            &demand(&[("s", tokens)]),
            now,
            TtlAction::Keep,
            &Stamps::default(),
        )
    }

    fn window(img: &BucketImage) -> WindowState {
        img.windows["s"]
    }

    #[test]
    fn the_first_use_opens_the_window_and_an_exhausted_one_waits_for_its_end() {
        let img = fresh(&[session()], &demand(&[("s", 3)]), 1, T0);
        assert_eq!(img.limits["s"].tk, 7_000);
        assert_eq!(window(&img).ws, Some(T0));
        assert_eq!(window(&img).wa, Some(T0));
        assert_eq!(
            img.vu,
            Some(T0 + HOUR),
            "the window's end is the item's boundary"
        );
        let mut img = img;
        let plan = written(pass(&img, 7, T0 + 60_000));
        assert!(apply_refill(&mut img, &plan));
        // Spent: refused until the window ends, and a refusal opens nothing.
        let Plan::Reject(statuses) = pass(&img, 1, T0 + 120_000) else {
            panic!("exhausted inside its window");
        };
        assert_eq!(statuses[0].retry_after_ms, HOUR - 120_000);
        assert_eq!(statuses[0].limit.window_seconds(), Some(3600));
        assert_eq!(statuses[0].limit.refill_amount(), 0);
        assert!(matches!(
            fast_rejection_gate(&img, &demand(&[("s", 1)]), T0 + 120_000),
            Gate::Reject(_)
        ));
        assert_eq!(window(&img).ws, Some(T0));
    }

    #[test]
    fn a_window_that_ended_opens_at_the_next_use_not_at_its_end() {
        let mut img = fresh(&[session()], &demand(&[("s", 10)]), 1, T0);
        let idle = T0 + 5 * HOUR;
        // A reader sees the share again; the gate sends the request to the slow pass.
        assert!(matches!(
            fast_rejection_gate(&img, &demand(&[("s", 1)]), idle),
            Gate::SlowPath
        ));
        let plan = written(pass(&img, 1, idle));
        let w = plan.writes.iter().find(|w| w.name == "s").unwrap();
        let win = w.window.unwrap();
        assert!(win.opened);
        assert_eq!(win.ws, Some(idle));
        assert_eq!(w.grant, Some(1));
        assert_eq!(plan.vu.next, Some(idle + HOUR));
        assert_eq!(plan.opened_windows(), [("s".to_owned(), idle, 3600)]);
        assert!(apply_refill(&mut img, &plan));
        assert_eq!(img.limits["s"].tk, 9_000);
        assert_eq!(img.limits["s"].tc, 11_000);
        assert_eq!((window(&img).ws, window(&img).wa), (Some(idle), Some(idle)));
    }

    #[test]
    fn a_window_a_sibling_opened_is_applied_charging_what_was_spent_since() {
        // Shard 1 of 2 in window T0; a sibling opened a new window at T1 and the fan-out
        // recorded tc = 1 000 (wtc); a lease then spent 2 more there.
        let t1 = T0 + HOUR + 1_000;
        let mut img = BucketImage {
            rf: T0 + 60_000,
            shard_count: 2,
            ..BucketImage::default()
        };
        img.limits.insert(
            "s".into(),
            LimitState {
                tk: 2_000,
                tc: 3_000,
                ..LimitState::starting(&session(), 2, T0)
            },
        );
        img.quotas.insert(
            "s".into(),
            QuotaState {
                gc: Some(2),
                ..QuotaState::default()
            },
        );
        img.windows.insert(
            "s".into(),
            WindowState {
                rsa: Some(3600),
                ws: Some(t1),
                wa: Some(T0),
                wtc: Some(1_000),
            },
        );
        img.vu = Some(0);
        let now = t1 + 60_000;
        assert_eq!(
            classify_fast_failure(Some(&img), &demand(&[("s", 1)]), now),
            FastFailure::ScheduleBoundary
        );
        let plan = written(pass(&img, 1, now));
        let w = plan.writes.iter().find(|w| w.name == "s").unwrap();
        assert!(
            !w.window.unwrap().opened,
            "a rolled window is not opened again"
        );
        assert_eq!(w.window.unwrap().ws, Some(t1));
        assert!(
            plan.opened_windows().is_empty(),
            "no fan-out of an applied window"
        );
        assert!(apply_refill(&mut img, &plan));
        // The share 5 less the 2 spent after the fan-out, less this request's 1.
        assert_eq!(img.limits["s"].tk, 2_000);
        assert_eq!(window(&img).wa, Some(t1));
    }

    #[test]
    fn hard_case_31_a_lagging_clock_never_moves_rf_below_the_window() {
        let img = fresh(&[session()], &demand(&[("s", 1)]), 1, T0);
        // A writer whose clock is 5 s behind the one that opened the window.
        let plan = written(pass(&img, 1, T0 - 5_000));
        assert_eq!(plan.rf_new, T0);
    }

    #[test]
    fn shards_join_a_live_window_or_open_their_own() {
        let joined = Stamps {
            joined: BTreeMap::from([("s".to_owned(), T0)]),
            ..Stamps::default()
        };
        let now = T0 + 60_000;
        let d = demand(&[("s", 1)]);
        // Shard 1 of 2 joins the live window with what shard 0 moved to it.
        let moved = Stamps {
            funded: BTreeMap::from([("s".to_owned(), 0)]),
            ..joined.clone()
        };
        let plan = written(plan_create(&[session()], &d, 2, 1, now, None, &moved));
        assert!(!plan.admitted);
        assert_eq!(plan.windows["s"], (T0, false));
        let plan = written(plan_create(&[session()], &d, 2, 1, now, None, &joined));
        assert!(plan.admitted);
        assert_eq!(plan.limits[0].1, 4_000, "its share, less the request");
        assert_eq!(plan.vu, Some(T0 + HOUR));
        assert!(plan.opened_windows(1).is_empty());
        // With no live window it opens one with its whole share, and tells the others.
        let plan = written(plan_create(
            &[session()],
            &d,
            2,
            1,
            now,
            None,
            &Stamps::default(),
        ));
        assert!(plan.admitted);
        assert_eq!(plan.limits[0].1, 4_000);
        assert_eq!(plan.opened_windows(1), [("s".to_owned(), now, 3600)]);
        // Shard 0 never tells the others about its own window.
        let plan = written(plan_create(
            &[session()],
            &d,
            2,
            0,
            now,
            None,
            &Stamps::default(),
        ));
        assert!(plan.opened_windows(0).is_empty());
    }

    #[test]
    fn a_credit_is_pinned_on_the_window_it_was_read_in() {
        let img = fresh(&[session()], &demand(&[("s", 4)]), 1, T0);
        let pin = img.quota_pin("s").unwrap();
        assert_eq!(pin.window, Some((Some(T0), Some(T0))));
        assert_eq!(pin.gc, 1);
        let plan = plan_delta(
            &demand(&[("s", -4)]),
            &img.limits,
            &BTreeMap::new(),
            &BTreeMap::from([("s".to_owned(), pin)]),
            1,
            T0 + 1,
        );
        assert_eq!(plan.guards[0].quota, Some(pin));
        assert_eq!(plan.guards[0].max_tk, 10_000 - 4_000);
    }

    #[test]
    fn availability_sees_an_ended_window_whole_and_reports_the_live_end() {
        let img = fresh(&[session()], &demand(&[("s", 4)]), 1, T0);
        let d = demand(&[("s", 8)]);
        let st = &availability(std::slice::from_ref(&img), &[session()], &d, T0 + 1_000)[0];
        assert_eq!(st.available, 6);
        assert!(st.exceeded);
        assert_eq!(st.retry_after_ms, HOUR - 1_000);
        let st = &availability(&[img], &[session()], &d, T0 + HOUR)[0];
        assert_eq!(st.available, 10);
        assert!(!st.exceeded);
    }

    #[test]
    fn an_operator_reset_ends_the_window_and_leaves_the_balance() {
        let img = fresh(&[session()], &demand(&[("s", 4)]), 1, T0);
        let now = T0 + 60_000;
        let shard = dynalimit_core::operation::OperationShard {
            shard: 0,
            stored_count: Some(1),
            image: img,
        };
        let plan =
            dynalimit_core::operation::plan_reset(&[shard], &[session()], now, TtlAction::Keep);
        let write = &plan.writes[0];
        assert!(!write.deltas.contains_key("s"), "the balance is left");
        let op = write.windows["s"];
        assert_eq!(op.wa, now - HOUR);
        assert_eq!(op.start, Some((now - HOUR, 3600)));
        assert!(!op.clear_wtc);
        assert_eq!(plan.amounts["s"], 4, "what the next window gives back");
    }

    #[test]
    fn the_aggregator_leaves_a_session_quota_to_the_slow_pass() {
        let mut img = fresh(
            &[session(), rpm(10)],
            &demand(&[("s", 10), ("rpm", 10)]),
            1,
            T0,
        );
        img.windows.get_mut("s").unwrap().ws = Some(T0 - HOUR);
        // Above its grant (a top-up the item no longer shows): a dripping limit would be
        // trimmed here; a quota waits for its slow pass.
        img.limits.get_mut("s").unwrap().tk = 12_000;
        let consumed = demand(&[("s", 10), ("rpm", 10)]);
        let plan = plan_proactive_refill(&img, Some(1), &consumed, T0 + 30_000).unwrap();
        let limits: Vec<&str> = plan.deltas.iter().map(|d| d.limit.as_str()).collect();
        assert!(!limits.contains(&"s"), "{limits:?}");
        assert!(limits.contains(&"rpm"));
    }

    proptest! {
        /// Two shards, requests of 1–3 tokens on either at random times, windows opened,
        /// fanned out (or the fan-out lost) and applied: within any one window of the
        /// entity, no more than the capacity is admitted.
        #[test]
        fn no_window_admits_more_than_the_capacity(
            steps in proptest::collection::vec((0u32..2, 1i64..4, 0i64..900_000, any::<bool>()), 1..80),
        ) {
            let limits = [session()];
            let mut shards = [
                fresh(&limits, &BTreeMap::new(), 2, T0),
                {
                    let p = written(plan_create(&limits, &BTreeMap::new(), 2, 1, T0, None, &Stamps {
                        joined: BTreeMap::from([("s".to_owned(), T0)]),
                        ..Stamps::default()
                    }));
                    created(&p)
                },
            ];
            let mut now = T0;
            // Admitted tokens per window start.
            let mut admitted: BTreeMap<i64, i64> = BTreeMap::new();
            for (shard, tokens, dt, fan_out) in steps {
                now += dt;
                let s = shard as usize;
                let Plan::Write(plan) = pass(&shards[s], tokens, now) else { continue };
                prop_assert!(apply_refill(&mut shards[s], &plan));
                let ws = shards[s].windows["s"].ws.unwrap();
                *admitted.entry(ws).or_default() += plan.consumed["s"];
                for (name, start, rsa) in plan.opened_windows() {
                    let other = &mut shards[1 - s];
                    let w = other.windows.entry(name).or_default();
                    let floor = start - rsa * 1000;
                    if fan_out && w.ws.is_none_or(|ws| ws <= floor) {
                        w.ws = Some(start);
                        w.wtc = Some(other.limits["s"].tc);
                        other.vu = Some(0);
                    }
                }
            }
            for (ws, total) in admitted {
                prop_assert!(total <= 10_000, "window {ws}: {total}");
            }
        }
    }
}

mod funding {
    use super::*;
    use dynalimit_core::schedule::Zone;

    /// 2023-11-14 22:13:20 UTC: the day's edge was at midnight, 22 h 13 min before.
    const DAY: i64 = 86_400_000;

    fn daily(n: i64) -> Limit {
        Limit::quota_per_day("q", n, Zone::utc())
    }

    /// A quota shard of a bucket of `count` shards holding `tk`, granted at `gc`, refilled
    /// at `rf`.
    fn shard(tk: i64, gc: i64, count: u32, rf: i64) -> BucketImage {
        let mut img = BucketImage {
            rf,
            shard_count: count,
            ..BucketImage::default()
        };
        img.limits.insert(
            "q".into(),
            LimitState {
                tk,
                ..LimitState::starting(&daily(100), count, rf)
            },
        );
        img.resets
            .insert("q".into(), daily(100).reset().unwrap().clone());
        img.quotas.insert(
            "q".into(),
            QuotaState {
                gc: Some(gc),
                ..QuotaState::default()
            },
        );
        img
    }

    #[test]
    fn a_new_shard_takes_its_share_from_the_sibling_whose_grant_covers_it() {
        // Shard 0 holds 70 of the day's 100 at a grant of 1: shard 1 (of 2) gets 50 from it.
        let siblings = [(0, shard(70_000, 1, 2, T0))];
        let (funded, moves) = plan_funding(&[daily(100)], &siblings, 1, 2, T0 + 1);
        assert_eq!(funded["q"], 50_000);
        assert_eq!(moves.len(), 1);
        assert_eq!((moves[0].donor, moves[0].amount), (0, 50_000));
        let edge = daily(100).reset().unwrap().prev_edge(T0 + 1).unwrap();
        assert_eq!(
            moves[0].pin,
            MovePin::Grant {
                donor_gc: Some(1),
                donor_count: 2,
                period: MovePeriod::Calendar { edge }
            }
        );
        // What the donor has left is all it can give.
        let siblings = [(0, shard(20_500, 1, 2, T0))];
        let (funded, moves) = plan_funding(&[daily(100)], &siblings, 1, 2, T0 + 1);
        assert_eq!(
            (funded["q"], moves[0].amount),
            (20_000, 20_000),
            "whole tokens: the fraction stays"
        );
        // An exhausted donor gives nothing, and nothing is moved.
        let siblings = [(0, shard(0, 1, 2, T0))];
        let (funded, moves) = plan_funding(&[daily(100)], &siblings, 1, 2, T0 + 1);
        assert_eq!(funded["q"], 0);
        assert!(moves.is_empty());
    }

    #[test]
    fn the_largest_covering_grant_donates_and_a_stale_one_does_not() {
        // At 4 shards: shard 0 granted at 1 covers every slot, shard 1 granted at 2 covers
        // the odd ones; slot 3 takes from shard 1, slot 2 from shard 0.
        let siblings = [(0, shard(40_000, 1, 4, T0)), (1, shard(30_000, 2, 4, T0))];
        let (_, moves) = plan_funding(&[daily(100)], &siblings, 3, 4, T0 + 1);
        assert_eq!(moves[0].donor, 1);
        let (_, moves) = plan_funding(&[daily(100)], &siblings, 2, 4, T0 + 1);
        assert_eq!(moves[0].donor, 0);
        // A day later the siblings' grants are of the past period: a fresh share.
        let (funded, moves) = plan_funding(&[daily(100)], &siblings, 3, 4, T0 + DAY);
        assert_eq!(funded["q"], 25_000);
        assert!(moves.is_empty());
        // A slot no grant covers (siblings sized at the count) gets a fresh share too.
        let siblings = [(0, shard(25_000, 4, 4, T0)), (1, shard(25_000, 4, 4, T0))];
        let (funded, moves) = plan_funding(&[daily(100)], &siblings, 3, 4, T0 + 1);
        assert_eq!(funded["q"], 25_000);
        assert!(moves.is_empty());
        // A dripping limit its line's shards do not hold takes a fresh share.
        let (funded, moves) = plan_funding(&[rpm(10)], &siblings, 3, 4, T0 + 1);
        assert_eq!(funded["rpm"], 2_500);
        assert!(moves.is_empty());
    }

    /// A shard of rpm 40/min at `count` shards holding `tk`.
    fn dripping(tk: i64, count: u32) -> BucketImage {
        let mut img = fresh(&[rpm(40)], &BTreeMap::new(), count, T0);
        img.limits.get_mut("rpm").unwrap().tk = tk;
        img
    }

    #[test]
    fn a_dripping_limit_is_funded_by_the_nearest_shard_of_its_line() {
        // Slot 5 of 8 splits from 1, which splits from 0: shard 1 is missing, so shard 0
        // gives half of what it holds, in whole tokens.
        let siblings = [(0, dripping(5_500, 8)), (2, dripping(5_000, 8))];
        let (funded, moves) = plan_funding(&[rpm(40)], &siblings, 5, 8, T0 + 1);
        assert_eq!(funded["rpm"], 2_000);
        assert_eq!(
            moves,
            [Move {
                limit: "rpm".into(),
                donor: 0,
                amount: 2_000,
                pin: MovePin::Share { donor_count: 8 },
            }]
        );
        // A donor above its share (another writer doubled without moving anything) gives
        // at least the excess, at most the new shard's share.
        let siblings = [(0, dripping(40_000, 2))];
        let (funded, _) = plan_funding(&[rpm(40)], &siblings, 1, 2, T0 + 1);
        assert_eq!(funded["rpm"], 20_000);
        // A doubling by two levels at once: slot 3's nearest line shard (1) holds its share,
        // shard 0 holds more; shard 0 gives.
        let siblings = [(0, dripping(30_000, 4)), (1, dripping(10_000, 4))];
        let (funded, moves) = plan_funding(&[rpm(40)], &siblings, 3, 4, T0 + 1);
        assert_eq!((funded["rpm"], moves[0].donor), (10_000, 0));
        // A donor in debt gives nothing; shard 0 itself has no line: a fresh share.
        let siblings = [(0, dripping(-3_000, 2))];
        let (funded, moves) = plan_funding(&[rpm(40)], &siblings, 1, 2, T0 + 1);
        assert_eq!(funded["rpm"], 0);
        assert!(moves.is_empty());
        let siblings = [(1, dripping(20_000, 2))];
        let (funded, moves) = plan_funding(&[rpm(40)], &siblings, 0, 2, T0 + 1);
        assert_eq!(funded["rpm"], 20_000);
        assert!(moves.is_empty());
    }

    proptest! {
        /// Doublings from 1 to 32 shards with random spending between them, every new shard
        /// funded by a move: what is held plus what was admitted is the day's allowance,
        /// never more.
        #[test]
        fn moves_conserve_the_period_s_allowance(
            spends in proptest::collection::vec((0u32..32, 0i64..40), 0..60),
        ) {
            let limit = daily(300);
            let mut shards: BTreeMap<u32, BucketImage> = BTreeMap::new();
            let mut first = shard(300_000, 1, 1, T0);
            first.limits.get_mut("q").unwrap().cp = 300_000;
            shards.insert(0, first);
            let mut admitted = 0i64;
            let mut count = 1u32;
            let mut spends = spends.into_iter();
            while count < 32 {
                count *= 2;
                for img in shards.values_mut() {
                    img.shard_count = count;
                }
                for j in count / 2..count {
                    let siblings: Vec<(u32, BucketImage)> =
                        shards.iter().map(|(i, img)| (*i, img.clone())).collect();
                    let (funded, moves) =
                        plan_funding(std::slice::from_ref(&limit), &siblings, j, count, T0 + 1);
                    for m in &moves {
                        let donor = shards.get_mut(&m.donor).unwrap();
                        let tk = &mut donor.limits.get_mut("q").unwrap().tk;
                        prop_assert!(*tk >= m.amount);
                        *tk -= m.amount;
                    }
                    let mut img = shard(funded["q"], i64::from(count), count, T0 + 1);
                    img.limits.get_mut("q").unwrap().cp = 300_000;
                    shards.insert(j, img);
                }
                if let Some((at, n)) = spends.next() {
                    let tk = &mut shards.get_mut(&(at % count)).unwrap().limits.get_mut("q").unwrap().tk;
                    let spent = (n * 1000).min(*tk);
                    *tk -= spent;
                    admitted += spent;
                }
            }
            let held: i64 = shards.values().map(|img| img.limits["q"].tk).sum();
            prop_assert_eq!(held + admitted, 300_000);
        }
    }
}

/// The materialising write, as DynamoDB evaluates it: the `rf` lock, the pins, then the deltas.
fn apply_materialise(img: &mut BucketImage, plan: &ProactiveRefill) -> bool {
    let raised_ok = plan.deltas.iter().all(|d| {
        d.delta <= 0
            || if d.limit == WCU {
                img.wcu.is_some_and(|w| w.tk <= d.tk_read)
            } else {
                img.limits.get(&d.limit).is_some_and(|s| s.tk <= d.tk_read)
            }
    });
    if img.rf != plan.rf_read
        || img.vu != plan.vu_read
        || plan.shard_count != Some(i64::from(img.shards()))
        || !raised_ok
    {
        return false;
    }
    for d in &plan.deltas {
        if d.limit == WCU {
            img.wcu.as_mut().unwrap().tk += d.delta;
        } else {
            img.limits.get_mut(&d.limit).unwrap().tk += d.delta;
        }
    }
    img.rf = plan.rf_new;
    true
}

#[test]
fn a_debit_after_the_bucket_sat_full_materialises_it() {
    let limits = [rpm(10)];
    let mut img = fresh(&limits, &BTreeMap::new(), 1, T0);
    let d = demand(&[("rpm", 1)]);
    // Just created, full: no refill was wasted.
    assert!(fast_consume(&mut img, &d, T0));
    assert_eq!(plan_materialise(&img, &d, T0), None);
    // Six seconds later the one token is back and nothing more: not yet a tenth wasted.
    let now = T0 + 6_000;
    assert!(fast_consume(&mut img, &d, now));
    assert_eq!(plan_materialise(&img, &d, now), None);
    // Ten idle minutes later: the balance before the debit is the ceiling again.
    let now = T0 + 600_000;
    assert!(fast_consume(&mut img, &d, now));
    let plan = plan_materialise(&img, &d, now).expect("a materialise");
    assert_eq!((plan.rf_read, plan.rf_new), (T0, now));
    let rpm_delta = plan.deltas.iter().find(|x| x.limit == "rpm").unwrap();
    // Before the debit: 8 tokens stored; refilled and clamped: 10.
    assert_eq!((rpm_delta.delta, rpm_delta.tk_read), (2 * MILLI, 7 * MILLI));
    assert!(apply_materialise(&mut img, &plan));
    assert_eq!(img.limits["rpm"].tk, 9 * MILLI);
    assert_eq!(img.rf, now);
    // A second materialise from the same image finds the lock moved.
    assert!(!apply_materialise(&mut img, &plan));
}

#[test]
fn items_with_stamps_or_quotas_are_not_materialised() {
    let limits = [rpm(10)];
    let d = demand(&[("rpm", 1)]);
    let now = T0 + 600_000;
    let base = {
        let mut img = fresh(&limits, &BTreeMap::new(), 1, T0);
        assert!(fast_consume(&mut img, &d, now));
        img
    };
    assert!(plan_materialise(&base, &d, now).is_some());
    let mut stamped = base.clone();
    stamped.soft.insert("rpm".into(), now + 1000);
    assert_eq!(plan_materialise(&stamped, &d, now), None);
    let mut bypassed = base.clone();
    bypassed.bypass = Some(now + 1000);
    assert_eq!(plan_materialise(&bypassed, &d, now), None);
    let mut unknown = base.clone();
    unknown.unsupported.push("rsched".into());
    assert_eq!(plan_materialise(&unknown, &d, now), None);
    let mut disabled = base.clone();
    disabled.disabled = true;
    assert_eq!(plan_materialise(&disabled, &d, now), None);
    // A clock behind `rf` materialises nothing.
    assert_eq!(plan_materialise(&base, &d, T0 - 1), None);
    // A session window opened after `rf` is still to be applied; one opened before is not.
    let window = |ws| WindowState {
        rsa: Some(86_400),
        ws: Some(ws),
        wa: Some(ws),
        wtc: None,
    };
    let mut opened = base.clone();
    opened.windows.insert("day".into(), window(T0 + 1));
    assert_eq!(plan_materialise(&opened, &d, now), None);
    opened.windows.insert("day".into(), window(T0));
    assert!(plan_materialise(&opened, &d, now).is_some());
    // A daily reset edge at 22:20 UTC passed since `rf` (22:13:20): its slow pass resets the
    // quota. The edge of midnight, before `rf`, leaves the materialise to go.
    let mut reset = base.clone();
    let daily = |cron| ResetSchedule::parse(cron, dynalimit_core::schedule::Zone::utc()).unwrap();
    reset.resets.insert("day".into(), daily("20 22 * * *"));
    assert_eq!(plan_materialise(&reset, &d, now), None);
    reset.resets.insert("day".into(), daily("0 0 * * *"));
    let plan = plan_materialise(&reset, &d, now).expect("a materialise");
    assert!(plan.deltas.iter().all(|x| x.limit != "day"));
}

/// An ideal token bucket, clamped at every instant, run over the debits a system admitted:
/// how far below zero it went (millitokens).
struct Ideal {
    /// Balance × period (exact, no rounding).
    scaled: i128,
    ceiling: i128,
    rate: i128,
    period: i128,
    at: i64,
    deepest: i128,
}

impl Ideal {
    fn debit(&mut self, now: i64, m: i64) {
        let refill = i128::from(now - self.at) * self.rate;
        self.scaled = (self.scaled + refill).min(self.ceiling * self.period);
        self.at = now;
        self.scaled -= i128::from(m) * self.period;
        self.deepest = self.deepest.min(self.scaled.div_euclid(self.period));
    }
}

proptest! {
    /// Acquires one after another (the fast path, then its materialise; the slow pass when the
    /// fast path is refused), at any pace: measured against an ideal token bucket clamped
    /// at every instant, what was admitted never overdraws it by more than a tenth of the
    /// capacity and one request. Without the materialise, a burst after idling full overdraws it
    /// by up to the whole capacity.
    #[test]
    fn materialised_fast_debits_never_overdraw_an_ideal_bucket(
        ops in proptest::collection::vec(
            (
                0i64..4,
                // Bursts, a steady pace, and idle times of one to fifteen minutes.
                prop_oneof![3 => Just(0u64), 2 => 0u64..6_000, 1 => 60_000u64..900_000],
                proptest::bool::ANY,
            ),
            1..200,
        ),
    ) {
        let limits = [rpm(20)];
        let clock = ManualClock::new(T0);
        let mut item = fresh(&limits, &BTreeMap::new(), 1, T0);
        let mut ideal = Ideal {
            scaled: 20 * MILLI as i128 * 60_000,
            ceiling: 20 * i128::from(MILLI),
            rate: 20 * i128::from(MILLI),
            period: 60_000,
            at: T0,
            deepest: 0,
        };
        for (n, dt, other_first) in ops {
            clock.advance(Duration::from_millis(dt));
            let now = clock.epoch_millis();
            let d = demand(&[("rpm", n)]);
            if fast_consume(&mut item, &d, now) {
                ideal.debit(now, n * MILLI);
                let plan = plan_materialise(&item, &d, now);
                // Another caller's debit may land between the debit and its materialise.
                if other_first && fast_consume(&mut item, &demand(&[("rpm", 1)]), now) {
                    ideal.debit(now, MILLI);
                }
                if let Some(plan) = plan {
                    apply_materialise(&mut item, &plan);
                }
                continue;
            }
            if let Plan::Write(p) = plan_refill(&item.clone(), &limits, &d, now, TtlAction::Keep, &Stamps::default()) {
                prop_assert!(apply_refill(&mut item, &p));
                ideal.debit(now, p.consumed["rpm"]);
            }
        }
        let bound = i128::from(2 * MILLI + 3 * MILLI);
        prop_assert!(ideal.deepest >= -bound, "overdrawn by {} millitokens", -ideal.deepest);
    }
}
