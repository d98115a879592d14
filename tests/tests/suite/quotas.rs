//! Calendar quotas (reference §12.3) against DynamoDB Local: a bucket admits the period's
//! allowance and nothing more until the reset edge, the first acquire after the edge gives
//! the new period's grant, a refund never lands in the next period, and the item carries what
//! zae-limiter reads (`rsched`, `b_{name}_gc`, `vu` at the next edge).
//!
//! The client's clock is a `ManualClock` set to chosen instants; frozen between steps.

use dynalimit::{Error, Limit};
use dynalimit_core::Clock as _;
use dynalimit_core::schedule::Zone;
use dynalimit_format::item::{get_i64, get_s};
use dynalimit_tests::raw::double_moving_nothing;

use crate::engine::{Rig, rig};

const HOUR: i64 = 3_600_000;
/// 2026-07-15 12:00 UTC.
const NOON: i64 = 1_784_116_800_000;
/// The next midnight, 2026-07-16 00:00 UTC.
const MIDNIGHT: i64 = NOON + 12 * HOUR;

fn daily(amount: i64) -> Limit {
    Limit::quota_per_day("requests", amount, Zone::utc())
}

#[tokio::test]
async fn a_daily_quota_admits_its_allowance_until_midnight_then_again() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(10)])
        .await
        .unwrap();

    let (admitted, rejection) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10);
    let rejection = rejection.expect("the 11th is refused");
    // The wait is until the reset edge, not a drip.
    assert_eq!(
        rejection.retry_after().unwrap().as_millis(),
        u128::try_from(MIDNIGHT - NOON + 1).unwrap()
    );
    let status = rejection.status("requests").unwrap();
    assert_eq!(status.limit.capacity(), 10);
    assert_eq!(status.limit.refill_amount(), 0);

    // Hours later, still the same day: nothing came back.
    r.clock.set_epoch_millis(MIDNIGHT - 1);
    let (admitted, _) = r.spend("requests", 1).await;
    assert_eq!(admitted, 0, "a quota does not drip");

    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_s(&item, "rsched"), Some("1m0h0"));
    assert_eq!(get_s(&item, "sched_tz"), Some("UTC"));
    assert_eq!(get_i64(&item, "b_requests_gc"), Some(1));
    assert_eq!(get_i64(&item, "b_requests_ra"), Some(0));
    assert_eq!(get_i64(&item, "vu"), Some(MIDNIGHT));

    // After midnight the fast path refuses on `vu`; the slow pass gives the new grant.
    r.clock.set_epoch_millis(MIDNIGHT + 5_000);
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10, "the new day's allowance");
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(
        get_i64(&item, "b_requests_tc"),
        Some(20_000),
        "every debit counted"
    );
    assert_eq!(get_i64(&item, "vu"), Some(MIDNIGHT + 24 * HOUR));
}

#[tokio::test]
async fn a_refund_never_lands_in_the_next_period() {
    let r = rig().await;
    r.clock.set_epoch_millis(MIDNIGHT - HOUR);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(10)])
        .await
        .unwrap();
    // A lease of 4 is held across midnight.
    let held = r
        .limiter
        .acquire("k", "gpt-4", [("requests", 4)])
        .await
        .unwrap();
    r.clock.set_epoch_millis(MIDNIGHT + HOUR);
    // The first acquire of the new day gives the grant: 10, minus 1.
    r.limiter
        .acquire("k", "gpt-4", [("requests", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    // Rolling back yesterday's 4 must not lift today's balance to 13 of 10 (or to 10 with
    // yesterday's tokens): the refund is dropped.
    held.rollback().await.unwrap();
    r.limiter.settle().await;
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tk"), Some(9_000));
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 9, "today's allowance, less today's debit");
}

#[tokio::test]
async fn a_refund_in_the_same_period_is_given_back() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(10)])
        .await
        .unwrap();
    let held = r
        .limiter
        .acquire("k", "gpt-4", [("requests", 4)])
        .await
        .unwrap();
    held.rollback().await.unwrap();
    r.limiter.settle().await;
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10);
}

#[tokio::test]
async fn quotas_and_a_reset_every_minute_are_checked_before_any_write() {
    let r = rig().await;
    assert!(Limit::quota("q", 10, "* * * * *", Zone::utc()).is_err());
    assert!(Limit::quota("q", 10, "0 0 L * *", Zone::utc()).is_err());
    let before = r.counter.total();
    let dripping_with_reset =
        Limit::per_minute("q", 10).with_reset(daily(10).reset().unwrap().clone());
    let e = r
        .repo
        .set_resource_defaults("gpt-4", &[dripping_with_reset])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not refill"), "{e}");
    let e = r
        .repo
        .set_resource_defaults("gpt-4", &[Limit::custom("q", 10, 0, 1)])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("reset schedule"), "{e}");
    assert_eq!(r.counter.total(), before, "nothing was sent");
}

#[tokio::test]
async fn hard_case_33_an_override_pass_still_applies_a_configured_quotas_reset() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(10), Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let (admitted, _) = r.spend("requests", 10).await;
    assert_eq!(admitted, 10);
    // After midnight, an acquire with explicit limits naming only rpm takes the slow pass
    // (the boundary passed): the quota on the item is carried through the same write and
    // gets its new grant, and the boundary moves to the next midnight instead of vanishing.
    r.clock.set_epoch_millis(MIDNIGHT + HOUR);
    r.limiter
        .acquire("k", "gpt-4", [("rpm", 1)])
        .limits([Limit::per_minute("rpm", 100)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tk"), Some(10_000));
    assert_eq!(get_i64(&item, "vu"), Some(MIDNIGHT + 24 * HOUR));
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10, "the new day's allowance, once");
}

/// 32 tasks acquire 1 until `attempts` are spent; after `flip_after` attempts one of them
/// moves the clock to `flip_to`. The number admitted.
pub(crate) async fn contend(r: &Rig, attempts: i64, flip: Option<(i64, i64)>) -> i64 {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    let left = Arc::new(AtomicI64::new(attempts));
    let granted = Arc::new(AtomicI64::new(0));
    let mut handles = Vec::new();
    for _ in 0..32 {
        let (limiter, left, granted) = (r.limiter.clone(), left.clone(), granted.clone());
        let clock = r.clock.clone();
        handles.push(tokio::spawn(async move {
            loop {
                let n = left.fetch_sub(1, Ordering::SeqCst);
                if n <= 0 {
                    break;
                }
                if let Some((after, to)) = flip
                    && attempts - n == after
                {
                    clock.set_epoch_millis(to);
                }
                match limiter.acquire("k", "gpt-4", [("requests", 1)]).await {
                    Ok(lease) => {
                        lease.commit().await.expect("commit");
                        granted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(Error::Rejected(_)) => {}
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    granted.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_monthly_quota_under_32_tasks_admits_each_period_s_allowance_and_no_more() {
    let r = rig().await;
    // 2026-07-15 12:00 UTC; the month turns on 2026-08-01.
    let august = NOON + 17 * 24 * HOUR - 12 * HOUR;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults(
            "gpt-4",
            &[Limit::quota_per_month("requests", 200, Zone::utc())],
        )
        .await
        .unwrap();
    // July: demand above the allowance, a frozen clock.
    let july = contend(&r, 400, None).await;
    assert_eq!(july, 200, "July's allowance, exactly");
    // August begins while 32 tasks are at it: the new period's allowance, and no more.
    let after = contend(&r, 400, Some((40, august + 1))).await;
    assert!(after <= 200, "August admitted {after} of 200");
    assert!(
        after >= 198,
        "August admitted {after}: at least 99 % of 200"
    );
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tc"), Some((july + after) * 1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_monthly_quota_sharded_to_8_conserves_each_period_s_allowance() {
    use dynalimit_format::bucket::BucketKey;
    let r = rig().await;
    let august = NOON + 17 * 24 * HOUR - 12 * HOUR;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults(
            "gpt-4",
            &[Limit::quota_per_month("requests", 200, Zone::utc())],
        )
        .await
        .unwrap();
    let (first, _) = r.spend("requests", 1).await;
    assert_eq!(first, 1);
    // A hot bucket splits to 8 shards: each shard keeps the grant count it was created at
    // (shard 0 July's whole grant, 1) and gives half of what it holds to the shard it splits
    // into, whose grant is sized at the new count.
    let key = BucketKey::new("k", "gpt-4", 0);
    for (from, to) in [(1, 2), (2, 4), (4, 8)] {
        let now = r.clock.epoch_millis();
        let split = r.repo.buckets().double_shards(&key, from, to, now).await;
        assert_eq!(split.unwrap().count, to);
    }
    let july = 1 + contend(&r, 600, None).await;
    assert_eq!(july, 200, "July's allowance across 8 shards, exactly");
    let shards = r.buckets("k").await;
    assert_eq!(shards.len(), 8, "the splits created every shard");
    for item in &shards {
        let shard: u32 = get_s(item, "PK")
            .and_then(|pk| pk.rsplit('#').next()?.parse().ok())
            .unwrap();
        let created_at = if shard == 0 { 1 } else { 2 << shard.ilog2() };
        let gc = get_i64(item, "b_requests_gc");
        assert_eq!(gc, Some(created_at), "grant count of shard {shard}");
        assert_eq!(get_i64(item, "shard_count"), Some(8));
    }
    let after = contend(&r, 600, Some((60, august + 1))).await;
    assert!(after <= 200, "August admitted {after} of 200");
    assert!(
        after >= 198,
        "August admitted {after}: at least 99 % of 200"
    );
    assert_eq!(
        r.tc("k", "requests").await,
        july + after,
        "every admission counted once"
    );
}

#[tokio::test]
async fn an_operator_tops_a_quota_up_for_the_period_and_resets_it() {
    use dynalimit_repository::OperationOptions;
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(10)])
        .await
        .unwrap();
    let (admitted, _) = r.spend("requests", 7).await;
    assert_eq!(admitted, 7);
    let topped = r
        .repo
        .top_up("k", "gpt-4", [("requests", 3)], &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(topped.amounts["requests"], 3, "exactly the amount");
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.17.0");
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tk"), Some(6_000));
    assert_eq!(get_i64(&item, "b_requests_tu"), Some(3_000));
    assert_eq!(
        r.spend("requests", 12).await.0,
        6,
        "the rest and the top-up"
    );
    // The next period drops the top-up: the allowance alone.
    r.clock.set_epoch_millis(MIDNIGHT + 1);
    assert_eq!(r.spend("requests", 12).await.0, 10);
    assert_eq!(
        get_i64(&r.first_shard("k", "gpt-4").await, "b_requests_tu"),
        None
    );
    let done = r
        .repo
        .reset_bucket("k", "gpt-4", &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(done.amounts["requests"], 10);
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tk"), Some(10_000));
    assert_eq!(get_i64(&item, "b_requests_rn"), Some(1));
    assert_eq!(get_i64(&item, "b_requests_gc"), Some(1));
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10, "the whole allowance again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hard_case_28_a_quota_doubled_from_1_to_32_mid_period_never_over_admits() {
    use dynalimit_format::bucket::BucketKey;
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(300)])
        .await
        .unwrap();
    let key = BucketKey::new("k", "gpt-4", 0);
    let mut admitted = 0;
    // A round of 32 tasks between each split, 1 → 2 → … → 32, then until the demand is
    // spent: a split moves part of what its shards hold of the period's allowance, and
    // grants none anew.
    admitted += contend(&r, 40, None).await;
    let mut count = 1;
    while count < 32 {
        let now = r.clock.epoch_millis();
        let split = r
            .repo
            .buckets()
            .double_shards(&key, count, count * 2, now)
            .await;
        assert_eq!(split.unwrap().count, count * 2);
        count *= 2;
        admitted += contend(&r, 40, None).await;
    }
    admitted += contend(&r, 900, None).await;
    assert!(
        admitted <= 300,
        "admitted {admitted} of 300 over a 1→32 walk"
    );
    assert!(admitted >= 297, "admitted {admitted}: at least 99 % of 300");
    assert_eq!(
        r.tc("k", "requests").await,
        admitted,
        "every admission counted once"
    );
}

#[tokio::test]
async fn a_new_quota_shard_is_funded_by_a_move_from_the_grant_that_covers_it() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[daily(100)])
        .await
        .unwrap();
    assert_eq!(r.spend("requests", 10).await.0, 10);
    // Another writer doubles the bucket and moves nothing (as zae-limiter does).
    let ns = r.repo.namespace_id().to_owned();
    double_moving_nothing(&r.table, &ns, ("k", "gpt-4"), 1, 2).await;
    // Acquire until the new shard exists (the limiter draws among the shards).
    let mut admitted = 10;
    while r.buckets("k").await.len() < 2 {
        admitted += i64::try_from(r.spend("requests", 1).await.0).unwrap();
    }
    let (mut held, mut grants) = (0, Vec::new());
    for item in r.buckets("k").await {
        held += get_i64(&item, "b_requests_tk").unwrap();
        grants.push((
            get_s(&item, "PK").unwrap().ends_with("#1"),
            get_i64(&item, "b_requests_gc").unwrap(),
            get_i64(&item, "b_requests_tk").unwrap(),
        ));
    }
    assert_eq!(
        held + admitted * 1000,
        100_000,
        "nothing granted twice: {grants:?}"
    );
    grants.sort();
    // Shard 1 took its share (50) from shard 0's grant, sized at 2; shard 0 keeps its
    // grant of 1 and the rest.
    assert_eq!(grants[0].1, 1);
    assert_eq!(grants[1].1, 2);
    assert!(grants[1].2 >= 49_000, "funded: {grants:?}");
}
