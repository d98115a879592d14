//! The decisions over the most extreme images a reader accepts ([`dynalimit_core::bounds`]): every
//! field at or near its bound, stamps anywhere in the `i64` range, limits and demands at their
//! largest. Each decision returns (no overflow, which the test build checks, and no endless
//! scan), and an admission never drives a hard limit below zero.

use super::*;
use dynalimit_core::bounds::{
    EARLIEST_TIME_MS, LATEST_TIME_MS, MAX_PERIOD_MS, MAX_PERIOD_SECONDS, MAX_STORED_MILLI,
};
use dynalimit_core::limit::MAX_TOKENS;
use dynalimit_core::operation::{OperationShard, plan_reset, plan_top_up};
use dynalimit_core::schedule::{Entry, Zone};
use proptest::prelude::*;

const NAMES: [&str; 3] = ["rpm", "tpm", "q"];

/// An `i64` drawn mostly from the ends and the middle of `lo..=hi`.
fn edgy(lo: i64, hi: i64) -> impl Strategy<Value = i64> {
    let mid = lo / 2 + hi / 2;
    prop_oneof![
        Just(lo),
        Just(hi),
        Just(mid),
        Just(lo.saturating_add(1)),
        Just(hi.saturating_sub(1)),
        lo..=hi,
    ]
}

fn time() -> impl Strategy<Value = i64> {
    edgy(EARLIEST_TIME_MS, LATEST_TIME_MS)
}

fn amount() -> impl Strategy<Value = i64> {
    edgy(-MAX_STORED_MILLI, MAX_STORED_MILLI)
}

fn stamp() -> impl Strategy<Value = Option<i64>> {
    prop::option::of(prop_oneof![any::<i64>(), time(), Just(0)])
}

fn state() -> impl Strategy<Value = LimitState> {
    (
        amount(),
        amount(),
        prop_oneof![Just(0), amount()],
        edgy(1, MAX_PERIOD_MS),
        any::<i64>(),
    )
        .prop_map(|(tk, cp, ra, rp, tc)| LimitState { tk, cp, ra, rp, tc })
}

fn office_hours() -> Schedule {
    Schedule::new(
        Zone::utc(),
        vec![Entry::scaled("* 9-17 * * *", dynalimit_core::schedule::MAX_SCALE).unwrap()],
    )
    .unwrap()
}

fn daily() -> ResetSchedule {
    ResetSchedule::parse("0 0 * * *", Zone::utc()).unwrap()
}

/// An image of up to three limits with every field anywhere in its accepted range.
fn image() -> impl Strategy<Value = BucketImage> {
    let limit = (
        state(),
        stamp(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of((
            prop::option::of(edgy(1, 32)),
            prop::option::of(amount()),
            prop::option::of(any::<i64>()),
        )),
        prop::option::of((
            edgy(1, MAX_PERIOD_SECONDS),
            prop::option::of(time()),
            prop::option::of(time()),
            prop::option::of(any::<i64>()),
        )),
    );
    (
        time(),
        1..=MAX_SHARD_COUNT,
        prop::collection::vec(limit, 0..=NAMES.len()),
        prop::option::of(state()),
        (stamp(), stamp(), stamp()),
    )
        .prop_map(|(rf, shard_count, limits, wcu, (bypass, vu, ttl))| {
            let mut img = BucketImage {
                rf,
                shard_count,
                wcu,
                bypass,
                vu,
                ttl,
                ..BucketImage::default()
            };
            for (name, (state, soft, scheduled, reset, quota, window)) in NAMES.iter().zip(limits) {
                let name = (*name).to_owned();
                img.limits.insert(name.clone(), state);
                if let Some(until) = soft {
                    img.soft.insert(name.clone(), until);
                }
                if scheduled {
                    img.schedules.insert(name.clone(), office_hours());
                }
                if reset && state.ra == 0 {
                    img.resets.insert(name.clone(), daily());
                }
                if let Some((gc, tu, rn)) = quota {
                    img.quotas.insert(name.clone(), QuotaState { gc, tu, rn });
                }
                if let Some((rsa, ws, wa, wtc)) = window {
                    let w = WindowState {
                        rsa: Some(rsa),
                        ws,
                        wa,
                        wtc,
                    };
                    img.windows.insert(name, w);
                }
            }
            img
        })
}

/// Configured limits at their largest: a drip, a scheduled drip, a calendar and a session
/// quota, some soft.
fn limits() -> impl Strategy<Value = Vec<Limit>> {
    let tokens = || edgy(1, MAX_TOKENS);
    (
        tokens(),
        tokens(),
        edgy(1, MAX_PERIOD_SECONDS),
        0..4usize,
        any::<bool>(),
    )
        .prop_map(|(capacity, refill, period, kind, soft)| {
            let rpm = Limit::custom("rpm", capacity, refill, period).with_soft(soft);
            let tpm = Limit::custom("tpm", capacity, refill, period).with_schedule(office_hours());
            let q = match kind {
                0 => Limit::custom("q", capacity, refill, period),
                1 => Limit::custom("q", capacity, 0, 1).with_reset(daily()),
                _ => Limit::session_quota("q", capacity, period),
            };
            vec![rpm, tpm, q]
        })
}

fn demand() -> impl Strategy<Value = BTreeMap<String, i64>> {
    prop::collection::btree_map(
        prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned),
        edgy(0, MAX_TOKENS * MILLI),
        0..=NAMES.len(),
    )
}

fn statuses_are_sane(statuses: &[LimitStatus]) -> Result<(), TestCaseError> {
    for s in statuses {
        prop_assert!(s.retry_after_ms >= 0, "{s:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// The fast path's decisions and the reads of an image return on any accepted image.
    #[test]
    fn fast_path_decisions_return_on_extreme_images(
        img in image(),
        demand in demand(),
        limits in limits(),
        now in time(),
    ) {
        let _ = classify_fast_failure(Some(&img), &demand, now);
        match fast_rejection_gate(&img, &demand, now) {
            Gate::Reject(statuses) => statuses_are_sane(&statuses)?,
            Gate::SlowPath => {}
        }
        if let Some(statuses) = remembered_rejection(&img, &demand, Some(&limits), now) {
            statuses_are_sane(&statuses)?;
        }
        let _ = decide_wcu_exhaustion(&img, &demand, now);
        statuses_are_sane(&statuses_from_image(&img, &demand, now))?;
        statuses_are_sane(&availability(std::slice::from_ref(&img), &limits, &demand, now))?;
        let _ = plan_proactive_refill(&img, Some(i64::from(img.shards())), &demand, now);
        let _ = plan_proactive_doubling(&img, now);
        for name in NAMES {
            let _ = img.quota_pin(name);
            if let Some(state) = img.limits.get(name) {
                let _ = img.params_at(name, state, now);
            }
        }
        let net = demand.iter().map(|(n, d)| (n.clone(), -d)).collect();
        let states = img.limits.clone();
        let _ = plan_delta(&net, &states, &img.schedules, &BTreeMap::new(), img.shards(), now);
    }

    /// The slow path's plans return on any accepted image, and an admission never leaves a
    /// hard limit it debits below zero.
    #[test]
    fn slow_path_plans_return_and_never_overdraw_a_hard_limit(
        img in image(),
        demand in demand(),
        limits in limits(),
        now in time(),
        restamp in any::<bool>(),
        bypass in any::<bool>(),
    ) {
        let soft = Stamps {
            names: limits.iter().filter(|l| l.is_soft()).map(|l| l.name().to_owned()).collect(),
            bypass,
            until: stamp_deadline(now, 0.5),
            restamp,
            ..Stamps::default()
        };
        match plan_refill(&img, &limits, &demand, now, TtlAction::Keep, &soft) {
            Plan::Write(plan) => {
                statuses_are_sane(&plan.statuses)?;
                for w in &plan.writes {
                    let Some(&c) = plan.consumed.get(&w.name) else { continue };
                    if c == 0 || soft.names.contains(&w.name) {
                        continue;
                    }
                    let after = match &w.seed {
                        Some(seed) => seed.tk,
                        None => img.limits[&w.name].tk + w.add_tk,
                    };
                    prop_assert!(after >= 0, "{} admitted {c} and left {after}", w.name);
                }
            }
            Plan::Reject(statuses) => statuses_are_sane(&statuses)?,
        }
        let count = img.shards();
        for shard in [0, count - 1] {
            let _ = plan_create(&limits, &demand, count, shard, now, None, &soft);
        }
        if count > 1 {
            let _ = plan_funding(&limits, &[(0, img.clone())], count - 1, count, now);
        }
        if count < 32 {
            let _ = plan_split(&[(0, img.clone())], count, count * 2, now);
        }
    }

    /// An operator's reset and top-up return on any accepted shards.
    #[test]
    fn operations_return_on_extreme_shards(
        images in prop::collection::vec(image(), 1..4),
        limits in limits(),
        amount in edgy(1, MAX_TOKENS),
        now in time(),
    ) {
        let shards: Vec<OperationShard> = images
            .into_iter()
            .enumerate()
            .map(|(i, image)| OperationShard {
                shard: i as u32,
                stored_count: Some(image.shards()),
                image,
            })
            .collect();
        let _ = plan_reset(&shards, &limits, now, TtlAction::Keep);
        let amounts = NAMES.iter().map(|n| ((*n).to_owned(), amount)).collect();
        let _ = plan_top_up(&shards, &limits, &amounts, now, TtlAction::Keep);
    }
}
