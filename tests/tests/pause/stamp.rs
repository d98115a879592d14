//! The stamp in one process: refusals without spending, max-merge, expiry, the slow-path
//! writes, leases settling while paused, and bad input.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use dynalimit::Error;
use dynalimit::backoff::{Backoff, bucket_scope};
use dynalimit_core::Clock;
use dynalimit_core::SystemClock;
use dynalimit_format::attr::PAUSE_UNTIL as PAUSE_ATTRIBUTE;
use dynalimit_format::item::get_i64;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::bucket::decide::{Plan, Stamps, TtlAction, plan_refill};
use dynalimit_repository::bucket::{BucketKey, ConsumeOutcome, OnThrottle, RefillOutcome};

use super::{balances, bucket_item, bucket_items, limiter, open_limiter, paused, rpm, spend_one};

const NS: &str = "pause";

#[tokio::test]
async fn a_live_stamp_refuses_without_spending_until_the_deadline() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();

    let t0 = clock.epoch_millis();
    let until = limiter
        .pause("user-1", "llm", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(until, Some(t0 + 30_000));
    let before = balances(&bucket_item(&table, "user-1", "llm").await);

    clock.advance(Duration::from_secs(10));
    assert_eq!(
        paused(spend_one(&limiter).await),
        Some(Duration::from_secs(20))
    );
    clock.advance(Duration::from_millis(19_999));
    let err = limiter
        .acquire("user-1", "llm", [("rpm", 1)])
        .limits([rpm()])
        .await
        .unwrap_err();
    let Error::Rejected(rejection) = err else {
        panic!("rate limited expected")
    };
    assert_eq!(rejection.retry_after(), Some(Duration::from_millis(1)));
    assert_eq!(rejection.retry_after_header(), Some(1));
    // Nothing was spent by the refused acquires: balances, write capacity and counter as before.
    assert_eq!(
        balances(&bucket_item(&table, "user-1", "llm").await),
        before
    );

    clock.advance(Duration::from_millis(1));
    spend_one(&limiter).await.expect("admitted at the deadline");
    let after = balances(&bucket_item(&table, "user-1", "llm").await);
    assert_eq!(after.2, before.2 + 1000, "one more request counted");
}

#[tokio::test]
async fn pauses_max_merge_and_never_shorten() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();
    let t0 = clock.epoch_millis();
    let long = limiter
        .pause("user-1", "llm", Duration::from_secs(60))
        .await
        .unwrap();
    let short = limiter
        .pause("user-1", "llm", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(long, Some(t0 + 60_000));
    assert_eq!(short, long, "the later deadline already stored wins");
    assert_eq!(
        limiter.paused_until("user-1", "llm").await.unwrap(),
        Some(t0 + 60_000)
    );
    let item = bucket_item(&table, "user-1", "llm").await;
    assert_eq!(get_i64(&item, PAUSE_ATTRIBUTE), Some(t0 + 60_000));
    let longer = limiter
        .pause("user-1", "llm", Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(longer, Some(t0 + 90_000));
}

#[tokio::test]
async fn the_refill_write_and_the_consumption_retry_refuse_a_stamped_item() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();
    // The slow path's read happens, then a pause lands before its write.
    let repo = table.repository(NS).await;
    let store = repo.buckets();
    let key = BucketKey::new("user-1", "llm", 0);
    clock.advance(Duration::from_secs(6));
    let now = clock.epoch_millis();
    let img = store.read(&key).await.unwrap().expect("bucket");
    let demand = BTreeMap::from([("rpm".to_owned(), 1000)]);
    let Plan::Write(plan) = plan_refill(
        &img,
        &[rpm()],
        &demand,
        now,
        TtlAction::Keep,
        &Stamps::default(),
    ) else {
        panic!("the refill fits")
    };
    limiter
        .pause("user-1", "llm", Duration::from_secs(30))
        .await
        .unwrap();
    let before = balances(&bucket_item(&table, "user-1", "llm").await);
    assert_eq!(
        store.refill(&key, &plan, None).await.unwrap(),
        RefillOutcome::LostLock
    );
    let retry = [("rpm".to_owned(), 1000)];
    assert_eq!(
        store.consume_only(&key, &retry, now).await.unwrap(),
        ConsumeOutcome::Paused(now + 30_000)
    );
    assert_eq!(
        store
            .speculative_consume(&key, &demand, now, OnThrottle::Retry)
            .await
            .unwrap(),
        ConsumeOutcome::Paused(now + 30_000)
    );
    assert_eq!(
        balances(&bucket_item(&table, "user-1", "llm").await),
        before
    );
    // Past the deadline the same writes go through.
    let later = now + 30_000;
    assert!(matches!(
        store.consume_only(&key, &retry, later).await.unwrap(),
        ConsumeOutcome::Consumed(_)
    ));
}

/// Doubles `user-1`/`llm` to two shards behind the limiter's back (shard 1 not created), then
/// lets the limiter learn the count with one acquire on shard 0.
async fn double_to_two(table: &dynalimit_tests::TestTable, limiter: &dynalimit::RateLimiter) {
    let ns = table.repository(NS).await.namespace_id().to_owned();
    table
        .client()
        .update_item()
        .table_name(table.name())
        .set_key(Some(BucketKey::new("user-1", "llm", 0).key_map(&ns)))
        .update_expression("SET shard_count = :two")
        .expression_attribute_values(":two", AttributeValue::N("2".into()))
        .send()
        .await
        .unwrap();
    spend_one(limiter).await.unwrap();
}

#[tokio::test]
async fn the_slow_path_refuses_an_unborn_shard_of_a_paused_pair() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();
    // Another writer doubled the count to 2 but shard 1 is not created yet; this limiter
    // knows the count and may draw shard 1, whose create must be refused too.
    double_to_two(&table, &limiter).await;
    limiter
        .pause("user-1", "llm", Duration::from_secs(30))
        .await
        .unwrap();
    for _ in 0..20 {
        assert!(paused(spend_one(&limiter).await).is_some_and(|d| d > Duration::ZERO));
    }
    assert_eq!(
        bucket_items(&table, "user-1", "llm").await.len(),
        1,
        "no shard was created while paused"
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(paused(spend_one(&limiter).await), None);
}

#[tokio::test]
async fn leases_settle_while_paused() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    let lease = limiter
        .acquire("user-1", "llm", [("rpm", 4)])
        .limits([rpm()])
        .await
        .unwrap();
    let spent = balances(&bucket_item(&table, "user-1", "llm").await);
    limiter
        .pause("user-1", "llm", Duration::from_secs(30))
        .await
        .unwrap();
    lease.rollback().await.unwrap();
    let back = balances(&bucket_item(&table, "user-1", "llm").await);
    assert_eq!(back.0, spent.0 + 4000, "the rollback gave the tokens back");
}

#[tokio::test]
async fn bad_pauses_are_refused_before_any_write_and_missing_buckets_are_not_created() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    let before = table.scan_all().await.len();
    for bad in [Duration::ZERO, Duration::from_secs(86_401)] {
        assert!(matches!(
            limiter.pause("user-1", "llm", bad).await,
            Err(Error::Invalid(_))
        ));
    }
    assert!(matches!(
        limiter.pause("bad#id", "llm", Duration::from_secs(1)).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(
        limiter
            .pause("nobody", "llm", Duration::from_secs(1))
            .await
            .unwrap(),
        None
    );
    assert_eq!(table.scan_all().await.len(), before, "nothing was written");
}

#[tokio::test]
async fn a_backoff_gate_over_the_bucket_store_pauses_the_limiter() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();
    let gate = Backoff::builder()
        .clock(clock.clone())
        .store(limiter.pause_store())
        .build()
        .unwrap();
    let scope = bucket_scope("user-1", "llm");
    let reported = gate
        .report(&scope, Some(Duration::from_secs(12)))
        .await
        .unwrap();
    assert_eq!(reported.retry_after(), Duration::from_secs(12));
    assert_eq!(
        paused(spend_one(&limiter).await),
        Some(Duration::from_secs(12))
    );
    // A second gate (another worker) learns the pause from the bucket item.
    let other = Backoff::builder()
        .clock(clock.clone())
        .store(limiter.pause_store())
        .build()
        .unwrap();
    assert!(other.check(&scope).is_ok());
    let seen = other.refresh(&scope).await.unwrap().expect("paused");
    assert_eq!(seen.until_epoch_ms(), reported.until_epoch_ms());
}

#[tokio::test]
async fn a_warm_paused_acquire_costs_one_request_and_a_pause_one_per_shard_plus_a_read() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let builder = table.counted_builder(&counter).await;
    let (limiter, _clock) = open_limiter(builder, NS, SystemClock.epoch_millis()).await;
    spend_one(&limiter).await.unwrap();
    counter.reset();
    limiter
        .pause("user-1", "llm", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(counter.count("GetItem"), 1);
    assert_eq!(counter.count("UpdateItem"), 1);
    assert_eq!(counter.total(), 2);
    counter.reset();
    for _ in 0..5 {
        assert!(paused(spend_one(&limiter).await).is_some());
    }
    assert_eq!(
        counter.total(),
        5,
        "one conditional write per refusal: {:?}",
        counter.snapshot()
    );
}

#[tokio::test]
async fn a_pause_stamps_every_existing_shard() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    spend_one(&limiter).await.unwrap();
    double_to_two(&table, &limiter).await;
    // Acquire until shard 1 exists (a draw of shard 1, or a probe once shard 0 is spent).
    // Shard 1 holds half of what shard 0 held when it is created, so once both are spent an
    // acquire may be refused.
    for _ in 0..10 {
        if bucket_items(&table, "user-1", "llm").await.len() == 2 {
            break;
        }
        match spend_one(&limiter).await {
            Ok(()) | Err(Error::Rejected(_)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(bucket_items(&table, "user-1", "llm").await.len(), 2);
    let until = limiter
        .pause("user-1", "llm", Duration::from_secs(45))
        .await
        .unwrap();
    assert_eq!(until, Some(clock.epoch_millis() + 45_000));
    for item in bucket_items(&table, "user-1", "llm").await {
        assert_eq!(get_i64(&item, PAUSE_ATTRIBUTE), until);
    }
    for _ in 0..6 {
        assert_eq!(
            paused(spend_one(&limiter).await),
            Some(Duration::from_secs(45))
        );
    }
}
