//! The partition throughput emulator (`dynalimit_local::throttle`) in front of DynamoDB Local:
//! DynamoDB's refusal beyond one key's rate, as the limiter meets it.

use std::sync::Arc;
use std::time::Duration;

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_format::attr;
use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};
use dynalimit_repository::bucket::BucketKey;
use dynalimit_repository::{Repository, RepositoryError};

/// A repository of `table` whose requests pass `proxy`, with one attempt per request.
async fn through(table: &dynalimit_tests::TestTable, proxy: &ThrottleProxy) -> Repository {
    through_on(table, proxy, None).await
}

/// [`through`], on `clock` when one is given.
async fn through_on(
    table: &dynalimit_tests::TestTable,
    proxy: &ThrottleProxy,
    clock: Option<&ManualClock>,
) -> Repository {
    let base = dynalimit_tests::client().await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        base.config()
            .to_builder()
            .endpoint_url(proxy.url())
            .retry_config(aws_smithy_types::retry::RetryConfig::standard().with_max_attempts(1))
            .build(),
    );
    let mut builder = table.builder().client(client).namespace("hot");
    if let Some(clock) = clock {
        builder = builder.clock(Arc::new(clock.clone()));
    }
    builder.open().await.expect("open through the proxy")
}

/// Creates the hot bucket straight on the emulator and splits it to four shards: every shard
/// holds a share of the tokens at once. Shard 0's key.
async fn split_to_four(direct: &Repository) -> BucketKey {
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
    key
}

/// The `rpm` consumption the first `shards` shards of `key`'s bucket recorded, in
/// millitokens.
async fn recorded(direct: &Repository, key: &BucketKey, shards: u32) -> i64 {
    let mut recorded = 0;
    for shard in 0..shards {
        let image = direct.buckets().read(&key.with_shard(shard)).await;
        recorded += image.expect("read").expect("shard").limits["rpm"].tc;
    }
    recorded
}

/// Text only a request on shard 0 of the hot bucket holds: its partition key, closed.
fn shard0(repo: &Repository) -> String {
    format!("{}/BUCKET#hot-key#model#0\"", repo.namespace_id())
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
    let direct = table.repository("hot").await;
    let key = split_to_four(&direct).await;
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
    // One frozen second: four keys' ten each (a draw to a spent shard tries others, then is
    // refused).
    assert!((31..=40).contains(&admitted), "admitted {admitted}");
    assert!(proxy.throttled() > 0);
    assert_eq!(recorded(&direct, &key, 4).await, (admitted + 1) * 1000);
}

/// A bucket split to four shards, behind partitions of ten writes whose clock stands still:
/// an acquire whose shard is refused for throughput goes to another shard with tokens (and
/// later draws leave the refused shards out), so the acquires are refused only once every
/// partition's ten are spent: exactly forty admitted before the first refusal. An acquire that
/// retried the refused shard alone would be refused as soon as its draw found a spent
/// partition.
#[tokio::test]
async fn a_throttled_shard_sends_the_acquire_to_another_shard_with_tokens() {
    if dynalimit_tests::skipped_on_the_memory_backend(
        "the partition emulator is an HTTP proxy in front of an emulator's endpoint",
    ) {
        return;
    }
    let table = dynalimit_tests::table().await;
    let direct = table.repository("hot").await;
    let key = split_to_four(&direct).await;
    let (proxy, _proxy_clock) = frozen_proxy().await;
    let clock = ManualClock::new(dynalimit_core::Clock::epoch_millis(
        &dynalimit_core::SystemClock,
    ));
    let limiter = RateLimiter::new(through_on(&table, &proxy, Some(&clock)).await);
    let (admitted, refused) = until_refused(&limiter).await;
    assert_eq!(admitted, 40, "every partition's ten, then a refusal");
    assert!(
        matches!(&refused, Error::Unavailable { message, .. } if message.contains("throttled")),
        "{refused:?}"
    );
    assert_eq!(
        recorded(&direct, &key, 4).await,
        (admitted as i64 + 1) * 1000
    );
}

/// A bucket of one shard whose writes DynamoDB refuses for throughput (the fault proxy
/// answers shard 0's `UpdateItem`s with `ProvisionedThroughputExceededException`, the other
/// requests pass): refused for less than a second, it stays one shard; refused for over a
/// second with nothing taken (a brownout), it stays one shard; refused for a second without a
/// quiet second while some writes are taken, the next refused acquire splits it as a `wcu`
/// shortfall does, and is admitted on the new shard.
/// A bucket of one shard on the emulator, through a fault proxy and on a manual clock, for
/// the acquires of one process that sends each request once.
struct HotBucket {
    _table: dynalimit_tests::TestTable,
    fault: dynalimit_tests::fault::FaultProxy,
    clock: ManualClock,
    repo: Repository,
    limiter: RateLimiter,
}

impl HotBucket {
    async fn new() -> HotBucket {
        let table = dynalimit_tests::table().await;
        let fault = dynalimit_tests::fault::FaultProxy::start().await;
        let clock = ManualClock::new(dynalimit_core::Clock::epoch_millis(
            &dynalimit_core::SystemClock,
        ));
        let repo = table
            .builder()
            .client(fault.client(1, None).await)
            .namespace("hot")
            .clock(Arc::new(clock.clone()))
            .open()
            .await
            .expect("open through the fault proxy");
        let limiter = RateLimiter::new(repo.clone());
        let hot = HotBucket {
            _table: table,
            fault,
            clock,
            repo,
            limiter,
        };
        hot.acquire().await.expect("the bucket is created");
        hot
    }

    /// One acquire, committed: a lease dropped uncommitted gives its tokens back.
    async fn acquire(&self) -> Result<(), Error> {
        self.limiter
            .acquire("hot-key", "model", [("rpm", 1)])
            .limits(limits())
            .await?
            .commit()
            .await
    }

    /// DynamoDB refuses the next write to shard 0 for throughput.
    fn throttle_next(&self) {
        self.fault.fail_matching(
            "UpdateItem",
            &shard0(&self.repo),
            "ProvisionedThroughputExceededException",
            1,
        );
    }

    /// An acquire whose write to shard 0 DynamoDB refuses for throughput.
    async fn refused(&self) {
        self.throttle_next();
        let refused = self.acquire().await.unwrap_err();
        assert!(matches!(refused, Error::Unavailable { .. }), "{refused:?}");
    }

    /// An acquire the partition takes.
    async fn admitted(&self) {
        self.acquire()
            .await
            .expect("the partition takes some writes");
    }

    /// An acquire that DynamoDB refuses on shard 0 once and is admitted (after a split, on a
    /// new shard).
    async fn refused_then_admitted(&self) {
        self.throttle_next();
        self.acquire()
            .await
            .expect("split, then admitted on the new shard");
        assert_eq!(self.fault.pending(), 0);
    }

    /// The count shard 0 holds.
    async fn shards(&self) -> u32 {
        let key = BucketKey::new("hot-key", "model", 0);
        let image = self.repo.buckets().read(&key).await.expect("read");
        image.expect("shard 0").shards()
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }
}

#[tokio::test]
async fn sustained_throttling_of_shard_0_splits_the_bucket() {
    let hot = HotBucket::new().await;
    // Half a second of refusals (one attempt each: the client retries nothing), then two
    // quiet seconds: no split.
    for _ in 0..5 {
        hot.refused().await;
        hot.advance(100);
    }
    hot.advance(2_000);
    hot.acquire()
        .await
        .expect("admitted once the partition takes writes");
    assert_eq!(hot.shards().await, 1);
    hot.advance(100);
    // A second of refusals, 100 ms apart, and nothing taken: a brownout, no split.
    for _ in 0..12 {
        hot.refused().await;
        hot.advance(100);
    }
    assert_eq!(
        hot.shards().await,
        1,
        "the table refuses, not the partition"
    );
    hot.advance(2_000);
    // A second of refusals, 100 ms apart, while the partition takes some writes: hot.
    for i in 0..10 {
        hot.refused().await;
        if i == 5 {
            hot.admitted().await;
        }
        hot.advance(100);
    }
    assert_eq!(hot.shards().await, 1, "not a second yet");
    hot.refused_then_admitted().await;
    assert_eq!(hot.shards().await, 2, "split after a second of refusals");
    let new = hot
        .repo
        .buckets()
        .read(&BucketKey::new("hot-key", "model", 1))
        .await
        .expect("read")
        .expect("shard 1 created by the split");
    assert_eq!(new.limits["rpm"].tc, 1000, "the acquire was admitted there");
}

/// A process with one request in flight (a Lambda function's instance, a worker acquiring
/// in turn) sees a hot partition's refusals far apart: here 600 ms, with its other writes
/// taken between them. They are one run of throttling, which splits the bucket at its fourth
/// refusal, a second and more after the first.
#[tokio::test]
async fn one_request_in_flight_sees_a_hot_partition_and_splits_the_bucket() {
    let hot = HotBucket::new().await;
    for _ in 0..3 {
        hot.refused().await;
        hot.admitted().await;
        hot.advance(600);
    }
    assert_eq!(hot.shards().await, 1, "three refusals");
    hot.refused_then_admitted().await;
    assert_eq!(hot.shards().await, 2, "four refusals over 1.8 s");
}

/// A split is what relieves a hot partition, and its transaction needs that partition: it is
/// sent again soon and often when refused for throughput, whether DynamoDB refuses the
/// request (`ProvisionedThroughputExceededException`, past the client's three attempts) or
/// cancels it for the hot item (`ThrottlingError` among the cancellation reasons), and lands
/// once, each refused attempt sent again under a new `ClientRequestToken`. A client that
/// retries nothing gets the refusal at once; a refusal that outlasts eight attempts is an
/// error; neither changes the bucket. Once an answer is lost, every later attempt carries that
/// attempt's token, and the split lands once.
#[tokio::test]
async fn a_split_refused_for_throughput_is_sent_again_soon_and_lands() {
    use dynalimit_tests::fault::FaultProxy;
    let table = dynalimit_tests::table().await;
    let fault = FaultProxy::start().await;
    let open = |attempts| {
        let (table, fault) = (&table, &fault);
        async move {
            table
                .builder()
                .client(fault.client(attempts, None).await)
                .namespace("hot")
                .open()
                .await
                .expect("open through the fault proxy")
        }
    };
    let (repo, once) = (open(3).await, open(1).await);
    RateLimiter::new(repo.clone())
        .acquire("hot-key", "model", [("rpm", 1)])
        .limits(limits())
        .await
        .expect("the bucket is created")
        .commit()
        .await
        .expect("commit");
    let key = BucketKey::new("hot-key", "model", 0);
    let shard0 = shard0(&repo);
    // The transactions sent since the last `refuse`, and their distinct tokens.
    let sent = || {
        let requests = fault.requests().into_iter();
        requests
            .filter(|r| r.operation == "TransactWriteItems")
            .map(|r| r.body)
            .collect::<Vec<_>>()
    };
    let transactions = || sent().len();
    let tokens = || {
        sent()
            .iter()
            .map(|body| {
                body["ClientRequestToken"]
                    .as_str()
                    .expect("token")
                    .to_owned()
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    let shards = || async {
        let image = repo.buckets().read(&key).await.expect("read");
        image.expect("shard 0").shards()
    };
    // The next `n` splits refused as a request, past shard 0's partition's throughput.
    let refuse = |n| {
        fault.clear_requests();
        fault.fail_matching(
            "TransactWriteItems",
            &shard0,
            "ProvisionedThroughputExceededException",
            n,
        );
    };

    // No retry asked: refused at once, nothing written.
    refuse(1);
    let refused = once.buckets().double_shards(&key, 1, 2, 0).await;
    assert!(
        matches!(refused, Err(RepositoryError::Throttled { .. })),
        "{refused:?}"
    );
    assert_eq!(transactions(), 1);
    assert_eq!(shards().await, 1);

    // Five refusals of the request: the sixth attempt lands.
    refuse(5);
    let doubled = repo.buckets().double_shards(&key, 1, 2, 0).await;
    assert_eq!(doubled.expect("split").count, 2);
    assert_eq!((transactions(), fault.pending()), (6, 0));
    assert_eq!(shards().await, 2);

    // Five cancellations for the hot item: the sixth attempt lands.
    let cancelled = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "message":"Transaction cancelled, please refer cancellation reasons for specific reasons [ThrottlingError, None, None, None]",
        "CancellationReasons":[{"Code":"ThrottlingError","Message":"Throughput exceeds the current capacity for one or more global secondary indexes."},
        {"Code":"None"},{"Code":"None"},{"Code":"None"}]}"#;
    fault.clear_requests();
    fault.refuse_matching(
        "TransactWriteItems",
        &shard0,
        http::StatusCode::BAD_REQUEST,
        cancelled,
        5,
    );
    let doubled = repo.buckets().double_shards(&key, 2, 4, 0).await;
    assert_eq!(doubled.expect("split").count, 4);
    assert_eq!((transactions(), fault.pending()), (6, 0));
    assert_eq!(shards().await, 4);

    // Refused past eight attempts: an error, and the bucket keeps its count.
    refuse(8);
    let refused = repo.buckets().double_shards(&key, 4, 8, 0).await;
    assert!(
        matches!(refused, Err(RepositoryError::Throttled { .. })),
        "{refused:?}"
    );
    assert_eq!((transactions(), fault.pending()), (8, 0));
    assert_eq!(shards().await, 4);
    assert_eq!(
        recorded(&repo, &key, 4).await,
        1000,
        "one acquire recorded, across the shards"
    );
    assert_eq!(tokens().len(), 8, "a new token for each refused attempt");

    // Its answer lost, then refused for throughput: the transaction may have landed, so every
    // later attempt carries the first one's token, and DynamoDB answers the third as the
    // first without applying it again.
    fault.clear_requests();
    fault.lose_after_applying(
        "TransactWriteItems",
        Some(&shard0),
        dynalimit_tests::fault::Lost::Answer500,
        1,
    );
    refuse(1);
    let doubled = repo.buckets().double_shards(&key, 4, 8, 0).await;
    assert_eq!(doubled.expect("split").count, 8);
    assert_eq!((transactions(), tokens().len(), fault.pending()), (3, 1, 0));
    assert_eq!(shards().await, 8);
    assert_eq!(
        recorded(&repo, &key, 8).await,
        1000,
        "the split landed once"
    );
}
