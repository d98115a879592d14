//! The partition throughput emulator (`dynalimit_local::throttle`) in front of DynamoDB Local:
//! DynamoDB's refusal beyond one key's rate, as the limiter meets it.

use std::sync::Arc;
use std::time::Duration;

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_format::attr;
use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};
use dynalimit_repository::Repository;
use dynalimit_repository::bucket::BucketKey;

/// A repository of `table` whose requests pass `proxy`, with one attempt per request.
async fn through(table: &dynalimit_tests::TestTable, proxy: &ThrottleProxy) -> Repository {
    let base = dynalimit_tests::client().await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        base.config()
            .to_builder()
            .endpoint_url(proxy.url())
            .retry_config(aws_smithy_types::retry::RetryConfig::standard().with_max_attempts(1))
            .build(),
    );
    table
        .builder()
        .client(client)
        .namespace("hot")
        .open()
        .await
        .expect("open through the proxy")
}

/// A proxy allowing ten writes (thirty reads) per key and second, whose clock stands still:
/// no key refills until the test moves it.
async fn frozen_proxy() -> (ThrottleProxy, ManualClock) {
    let clock = ManualClock::new(0);
    let proxy = ThrottleProxy::start_with_clock(
        dynalimit_tests::endpoint().url(),
        PartitionLimits::new(attr::PK, 10),
        Arc::new(clock.clone()),
    )
    .await
    .expect("proxy");
    (proxy, clock)
}

fn limits() -> [Limit; 1] {
    [Limit::per_hour("rpm", 1_000_000)]
}

/// Acquires (and commits) until the first failure: how many were admitted, and the failure.
async fn until_refused(limiter: &RateLimiter) -> (u64, Error) {
    let mut admitted = 0;
    loop {
        match limiter
            .acquire("hot-key", "model", [("rpm", 1)])
            .limits(limits())
            .await
        {
            Ok(lease) => {
                lease.commit().await.expect("commit sends nothing");
                admitted += 1;
            }
            Err(e) => return (admitted, e),
        }
        assert!(admitted < 1000, "the proxy never throttled");
    }
}

#[tokio::test]
async fn a_key_past_its_write_rate_is_refused_as_dynamodb_refuses_and_nothing_is_applied() {
    if dynalimit_tests::skipped_on_the_memory_backend(
        "the partition emulator is an HTTP proxy in front of an emulator's endpoint",
    ) {
        return;
    }
    let table = dynalimit_tests::table().await;
    let (proxy, clock) = frozen_proxy().await;
    let repo = through(&table, &proxy).await;
    let limiter = RateLimiter::new(repo.clone());

    // The first acquire creates the bucket (two write units of a transaction), the warm ones
    // take one each, until the key's ten are spent.
    let (first, refused) = until_refused(&limiter).await;
    assert!((1..10).contains(&first), "admitted {first}");
    match &refused {
        Error::Unavailable { message, .. } => {
            assert!(message.contains("throttled"), "{message}");
            assert!(message.contains("exceeds the emulated rate"), "{message}");
        }
        other => panic!("expected the limiter to be unavailable, got {other:?}"),
    }
    assert!(proxy.throttled() >= 1);

    // A second of the proxy's time refills the key's ten: exactly ten warm acquires.
    clock.advance(Duration::from_secs(1));
    let (second, _) = until_refused(&limiter).await;
    assert_eq!(second, 10);

    // What the table recorded is exactly what was admitted: a refused write applied nothing.
    let direct = table.repository("hot").await;
    let stored = direct
        .buckets()
        .read(&BucketKey::new("hot-key", "model", 0))
        .await
        .expect("read")
        .expect("bucket");
    assert_eq!(
        stored.limits["rpm"].tc,
        i64::try_from(first + second).unwrap() * 1000
    );
}

#[tokio::test]
async fn each_shard_of_a_bucket_is_its_own_partition() {
    if dynalimit_tests::skipped_on_the_memory_backend(
        "the partition emulator is an HTTP proxy in front of an emulator's endpoint",
    ) {
        return;
    }
    let table = dynalimit_tests::table().await;
    // The bucket, split to four shards straight on the emulator: every shard holds a share
    // of the tokens at once.
    let direct = table.repository("hot").await;
    RateLimiter::new(direct.clone())
        .acquire("hot-key", "model", [("rpm", 1)])
        .limits(limits())
        .await
        .expect("first acquire")
        .commit()
        .await
        .expect("commit");
    let key = BucketKey::new("hot-key", "model", 0);
    for count in [1, 2] {
        let doubled = direct
            .buckets()
            .double_shards(&key, count, count * 2, 0)
            .await
            .expect("double");
        assert_eq!(doubled.count, count * 2);
    }
    let (proxy, _clock) = frozen_proxy().await;
    let limiter = RateLimiter::new(through(&table, &proxy).await);
    let mut admitted = 0i64;
    for _ in 0..200 {
        if let Ok(lease) = limiter
            .acquire("hot-key", "model", [("rpm", 1)])
            .limits(limits())
            .await
        {
            lease.commit().await.expect("commit sends nothing");
            admitted += 1;
        }
    }
    // One frozen second: four keys' ten each (a draw to a spent shard is refused).
    assert!((31..=40).contains(&admitted), "admitted {admitted}");
    assert!(proxy.throttled() > 0);
    let mut recorded = 0;
    for shard in 0..4 {
        if let Some(image) = direct
            .buckets()
            .read(&key.with_shard(shard))
            .await
            .expect("read")
        {
            recorded += image.limits["rpm"].tc;
        }
    }
    assert_eq!(recorded, (admitted + 1) * 1000);
}
