//! Session quotas (reference §12.3) against DynamoDB Local: the first request after a window
//! ended opens the next one with the whole allowance, a sharded bucket tells its other
//! shards (which apply the window charging what they spent since), a refund never lands in
//! another window, an operator reset ends the window, and writing one raises the table's
//! minimum client version to 0.15.0 after checking that the stack's aggregator reads it.
//!
//! The client's clock is a `ManualClock` set to chosen instants; frozen between steps.

use dynalimit::Limit;
use dynalimit_core::Clock as _;
use dynalimit_format::bucket::BucketKey;
use dynalimit_format::item::{get_i64, get_s};

use crate::engine::rig;

const HOUR: i64 = 3_600_000;
/// 2026-07-15 12:00 UTC.
const NOON: i64 = 1_784_116_800_000;

/// 10 requests per hour from first use.
fn hourly(amount: i64) -> Limit {
    Limit::session_quota("requests", amount, 3600)
}

#[tokio::test]
async fn the_first_request_opens_a_window_and_an_idle_key_starts_afresh() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[hourly(10)])
        .await
        .unwrap();
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(
        record.client_min_version, "0.15.0",
        "the reader gate ratchets"
    );

    let (admitted, rejection) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10);
    let rejection = rejection.expect("the 11th is refused");
    // The wait is until the window ends (half-open: no extra millisecond).
    assert_eq!(
        rejection.retry_after().unwrap().as_millis(),
        u128::try_from(HOUR).unwrap()
    );
    let status = rejection.status("requests").unwrap();
    assert_eq!(status.limit.window_seconds(), Some(3600));
    assert_eq!(status.limit.refill_amount(), 0);
    assert_eq!(status.resets_at_ms, Some(NOON + HOUR));
    let balance = &r.limiter.balances("k", "gpt-4", &[]).await.unwrap()[0];
    assert_eq!(
        (balance.available, balance.resets_at_ms),
        (0, Some(NOON + HOUR))
    );

    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_rsa"), Some(3600));
    assert_eq!(get_i64(&item, "b_requests_ws"), Some(NOON));
    assert_eq!(get_i64(&item, "b_requests_wa"), Some(NOON));
    assert_eq!(get_i64(&item, "b_requests_gc"), Some(1));
    assert_eq!(get_i64(&item, "b_requests_ra"), Some(0));
    assert_eq!(get_i64(&item, "vu"), Some(NOON + HOUR));
    let config = r
        .table
        .scan_all()
        .await
        .into_iter()
        .find(|i| get_s(i, "PK").is_some_and(|pk| pk.ends_with("/RESOURCE#gpt-4")))
        .unwrap();
    assert_eq!(get_i64(&config, "w_requests_rsa"), Some(3600));
    assert_eq!(get_i64(&config, "w_requests_cp"), Some(10));
    assert!(!config.keys().any(|k| k.starts_with("l_requests")));

    // Still inside the window: nothing came back.
    r.clock.set_epoch_millis(NOON + HOUR - 1);
    assert_eq!(r.spend("requests", 1).await.0, 0, "a quota does not drip");

    // Five idle hours later the next request opens the next window then, not at NOON + 1 h.
    let back = NOON + 5 * HOUR;
    r.clock.set_epoch_millis(back);
    let (admitted, rejection) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10, "the next window's allowance");
    assert_eq!(
        rejection.unwrap().retry_after().unwrap().as_millis(),
        u128::try_from(HOUR).unwrap()
    );
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_ws"), Some(back));
    assert_eq!(get_i64(&item, "vu"), Some(back + HOUR));
    assert_eq!(get_i64(&item, "b_requests_tc"), Some(20_000));
}

#[tokio::test]
async fn a_refund_never_lands_in_the_next_window() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[hourly(10)])
        .await
        .unwrap();
    let held = r
        .limiter
        .acquire("k", "gpt-4", [("requests", 4)])
        .await
        .unwrap();
    r.clock.set_epoch_millis(NOON + 2 * HOUR);
    r.limiter
        .acquire("k", "gpt-4", [("requests", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    held.rollback().await.unwrap();
    r.limiter.settle().await;
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_tk"), Some(9_000), "dropped");
    // Inside one window a refund is given back.
    let held = r
        .limiter
        .acquire("k", "gpt-4", [("requests", 4)])
        .await
        .unwrap();
    held.rollback().await.unwrap();
    r.limiter.settle().await;
    assert_eq!(r.spend("requests", 12).await.0, 9);
}

/// 32 tasks acquire 1 until `attempts` are spent, the clock frozen: the number admitted.
async fn contend(r: &crate::engine::Rig, attempts: i64) -> i64 {
    crate::quotas::contend(r, attempts, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_quota_sharded_to_4_admits_each_window_s_allowance_and_no_more() {
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[hourly(100)])
        .await
        .unwrap();
    assert_eq!(r.spend("requests", 1).await.0, 1);
    let key = BucketKey::new("k", "gpt-4", 0);
    for (from, to) in [(1, 2), (2, 4)] {
        let now = r.clock.epoch_millis();
        let split = r.repo.buckets().double_shards(&key, from, to, now).await;
        assert_eq!(split.unwrap().count, to);
    }
    // The first window: the splits moved half of each shard's balance in it to the shard it
    // split into, which joined the window.
    let first = 1 + contend(&r, 400).await;
    assert_eq!(first, 100, "the first window's allowance, exactly");
    let shards = r.buckets("k").await;
    assert_eq!(shards.len(), 4, "every shard was created");
    for item in &shards {
        assert_eq!(get_i64(item, "b_requests_ws"), Some(NOON), "one window");
    }
    // The window ends; the first request opens the next one on its shard and tells the
    // others, which apply it at their next pass.
    let next = NOON + HOUR + 1_000;
    r.clock.set_epoch_millis(next);
    let second = contend(&r, 400).await;
    assert!(second <= 100, "the second window admitted {second} of 100");
    assert!(
        second >= 99,
        "the second window admitted {second}: at least 99 %"
    );
    for item in &r.buckets("k").await {
        assert_eq!(
            get_i64(item, "b_requests_ws"),
            Some(next),
            "the window fanned out"
        );
        assert_eq!(get_i64(item, "b_requests_gc"), Some(4));
    }
    assert_eq!(
        r.tc("k", "requests").await,
        first + second,
        "every admission counted once"
    );
}

#[tokio::test]
async fn an_operator_reset_ends_the_window_and_the_next_request_opens_a_new_one() {
    use dynalimit_repository::OperationOptions;
    let r = rig().await;
    r.clock.set_epoch_millis(NOON);
    r.repo
        .set_resource_defaults("gpt-4", &[hourly(10)])
        .await
        .unwrap();
    assert_eq!(r.spend("requests", 7).await.0, 7);
    r.clock.set_epoch_millis(NOON + 60_000);
    let done = r
        .repo
        .reset_bucket("k", "gpt-4", &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(done.amounts["requests"], 7);
    let item = r.first_shard("k", "gpt-4").await;
    let ended = NOON + 60_000 - HOUR;
    assert_eq!(get_i64(&item, "b_requests_ws"), Some(ended));
    assert_eq!(get_i64(&item, "b_requests_wa"), Some(ended));
    assert_eq!(
        get_i64(&item, "b_requests_tk"),
        Some(3_000),
        "the balance is left"
    );
    let (admitted, _) = r.spend("requests", 12).await;
    assert_eq!(admitted, 10, "a new window with the whole allowance");
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "b_requests_ws"), Some(NOON + 60_000));
}

#[tokio::test]
async fn a_session_quota_is_stored_only_where_the_aggregator_reads_it() {
    let r = rig().await;
    let before = r.counter.total();
    for bad in [
        Limit::session_quota("requests", 10, 0),
        Limit::session_quota("requests", 10, 1_000_000_001),
        Limit::per_minute("requests", 10).with_window(60),
    ] {
        let e = r
            .repo
            .set_resource_defaults("gpt-4", &[bad])
            .await
            .unwrap_err();
        assert!(
            matches!(e, dynalimit::RepositoryError::Validation(_)),
            "{e}"
        );
    }
    assert_eq!(r.counter.total(), before, "nothing was sent");
    // An aggregator older than the session quotas would not read them: refused, nothing
    // stored, the minimum client version untouched.
    r.table
        .set_version_attribute("lambda_version", "0.14.2")
        .await;
    let e = r
        .repo
        .set_resource_defaults("gpt-4", &[hourly(10)])
        .await
        .unwrap_err();
    assert!(
        matches!(e, dynalimit::RepositoryError::ReadersTooOld { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("0.15.0"), "{e}");
    assert!(
        r.repo
            .get_resource_defaults("gpt-4")
            .await
            .unwrap()
            .is_none()
    );
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.0.0");
    // A newer minimum is never lowered.
    r.table
        .set_version_attribute("lambda_version", "0.17.0")
        .await;
    r.table
        .set_version_attribute("client_min_version", "0.16.0")
        .await;
    r.repo
        .set_resource_defaults("gpt-4", &[hourly(10)])
        .await
        .unwrap();
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.16.0");
}
