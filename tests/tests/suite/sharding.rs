//! Splits and shard counts (reference §3.8): a split moves part of every shard's balance to
//! the shard it splits into in one transaction, whose lost answer is harmless; a doubling
//! another writer made is adopted and propagated, a propagation that fails on one shard
//! updates the others, reports the failure, and is healed by the next propagation; a bucket
//! swept by its TTL comes back whole. Against DynamoDB Local through the fault proxy, and on
//! the in-memory store.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::get_i64;
use dynalimit_repository::bucket::{BucketKey, BucketStore};
use dynalimit_repository::{Repository, RepositoryError};
use dynalimit_tests::TestTable;
use dynalimit_tests::fault::FaultProxy;
use dynalimit_tests::raw::{double_moving_nothing, put_bucket};

/// rpm capacity in millitokens.
const CP: i64 = 100_000;

/// A repository whose requests go through `proxy`, making at most `attempts` attempts each.
async fn through(table: &TestTable, proxy: &FaultProxy, attempts: u32) -> Repository {
    let client = proxy.client(attempts, None).await;
    table
        .builder()
        .client(client)
        .namespace("shards")
        .open()
        .await
        .expect("open through the proxy")
}

/// Shards `0..count` of `hot`/`gpt-4`, each with `shard_count = count` and a full rpm of 100.
async fn buckets(table: &TestTable, ns: &str, count: u32) {
    for shard in 0..count {
        put_bucket(table, ns, "hot", "gpt-4", shard, &[("rpm", 100, 100, 60)]).await;
        table
            .client()
            .update_item()
            .table_name(table.name())
            .key("PK", AttributeValue::S(pk(ns, shard)))
            .key("SK", AttributeValue::S("#STATE".into()))
            .update_expression("SET shard_count = :c")
            .expression_attribute_values(":c", AttributeValue::N(count.to_string()))
            .send()
            .await
            .expect("stamp the count");
    }
}

fn pk(ns: &str, shard: u32) -> String {
    format!("{ns}/BUCKET#hot#gpt-4#{shard}")
}

/// `(shard_count, rpm tk)` of every existing shard below `upto`, by shard.
async fn counts(table: &TestTable, ns: &str, upto: u32) -> Vec<Option<(i64, i64)>> {
    let mut out = Vec::new();
    for shard in 0..upto {
        let item = table
            .client()
            .get_item()
            .table_name(table.name())
            .key("PK", AttributeValue::S(pk(ns, shard)))
            .key("SK", AttributeValue::S("#STATE".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("read")
            .item;
        out.push(item.map(|i| {
            (
                get_i64(&i, "shard_count").expect("count"),
                get_i64(&i, "b_rpm_tk").expect("tk"),
            )
        }));
    }
    out
}

/// The rpm ceilings of shards `0..n` summed: each existing shard claims `cp // its count`, a
/// shard not created yet will claim `cp // n` (it is created at the current count).
fn sum_of_shares(shards: &[Option<(i64, i64)>]) -> i64 {
    let n = i64::try_from(shards.len()).expect("few shards");
    shards
        .iter()
        .map(|s| CP / s.map_or(n, |(count, _)| count))
        .sum()
}

/// A minute after the buckets' `rf`.
const NOW: i64 = 1_700_000_060_000;

async fn lost_split_answer(attempts: u32) {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy, attempts).await;
    let ns = repo.namespace_id().to_owned();
    buckets(&table, &ns, 4).await;
    let store: BucketStore = repo.buckets();
    proxy.lose_next_answer("TransactWriteItems", 1);
    let doubling = store
        .double_shards(&BucketKey::new("hot", "gpt-4", 2), 4, 8, NOW)
        .await
        .expect("the split landed");
    assert_eq!(proxy.pending(), 0, "the answer was lost");
    assert_eq!(doubling.count, 8);
    assert!(doubling.failed.is_empty(), "{:?}", doubling.failed);
    let after = counts(&table, &ns, 8).await;
    // Every shard holds the new count; each old one (trimmed to its share of 25 by the
    // split's pass) gave half to its twin, once.
    assert_eq!(after, [Some((8, CP / 8)); 8], "{after:?}");
    assert_eq!(sum_of_shares(&after), CP);
}

#[tokio::test]
async fn a_split_whose_answer_is_lost_and_resent_lands_once() {
    // The transaction is sent again with its client request token; DynamoDB answers
    // it as the first time without applying it again.
    lost_split_answer(3).await;
}

#[tokio::test]
async fn a_split_whose_outcome_is_unknown_reads_shard_zero_back() {
    // One attempt only: the lost answer is an error, so the outcome is unknown; shard 0
    // holds the new count, so the transaction landed, whole.
    lost_split_answer(1).await;
}

#[tokio::test]
async fn a_split_that_did_not_land_returns_its_error_and_writes_no_shard() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy, 1).await;
    let ns = repo.namespace_id().to_owned();
    buckets(&table, &ns, 2).await;
    proxy.fail_next_with(
        "TransactWriteItems",
        "InternalServerError",
        http::StatusCode::INTERNAL_SERVER_ERROR,
        1,
    );
    let err = repo
        .buckets()
        .double_shards(&BucketKey::new("hot", "gpt-4", 0), 2, 4, NOW)
        .await
        .expect_err("shard 0 still holds the old count");
    assert!(err.is_unavailable(), "{err:?}");
    assert_eq!(
        counts(&table, &ns, 4).await,
        [Some((2, CP)), Some((2, CP)), None, None]
    );
}

#[tokio::test]
async fn a_failed_propagation_write_updates_the_other_shards_and_a_later_pass_heals_it() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy, 3).await;
    let ns = repo.namespace_id().to_owned();
    buckets(&table, &ns, 4).await;
    let store = repo.buckets();
    let key = BucketKey::new("hot", "gpt-4", 0);
    // Another writer raised shard 0's count and propagated nothing: the next split adopts
    // the count and propagates it.
    double_moving_nothing(&table, &ns, ("hot", "gpt-4"), 1, 8).await;
    proxy.fail_matching(
        "UpdateItem",
        &format!("{}\"", pk(&ns, 2)),
        "ValidationException",
        1,
    );
    let doubling = store
        .double_shards(&key, 4, 8, NOW)
        .await
        .expect("shard 0 doubled");
    assert_eq!(doubling.count, 8);
    let failed: Vec<u32> = doubling.failed.iter().map(|(s, _)| *s).collect();
    assert_eq!(failed, [2], "{:?}", doubling.failed);
    assert!(matches!(
        doubling.failed[0].1,
        RepositoryError::InvalidRequest { .. }
    ));
    let stale = counts(&table, &ns, 8).await;
    let healed = Some((8, CP));
    assert_eq!(stale[..4], [healed, healed, Some((4, CP)), healed]);
    assert_eq!(stale[4..], [None; 4], "adopting a count creates no shard");
    // The stale shard claims a quarter where an eighth is its share: 112.5 % of capacity.
    assert_eq!(sum_of_shares(&stale), CP + CP / 8);

    let again = store.propagate_shard_count(&key, 4, 8).await;
    assert_eq!(again.updated, [2]);
    assert!(again.failed.is_empty(), "{:?}", again.failed);
    let after = counts(&table, &ns, 8).await;
    assert_eq!(after[..4], [healed; 4]);
    assert_eq!(sum_of_shares(&after), CP);

    // Idempotent: a third pass writes nothing.
    let third = store.propagate_shard_count(&key, 4, 8).await;
    assert!(third.updated.is_empty() && third.failed.is_empty());
    assert_eq!(counts(&table, &ns, 8).await, after);
}

/// A propagation write whose answer is lost is sent again: harmless, because the write that
/// landed makes the repeat fail its `shard_count < :new` guard, so it lands once.
#[tokio::test]
async fn a_propagation_whose_answer_is_lost_is_sent_again_and_lands_once() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy, 3).await;
    let ns = repo.namespace_id().to_owned();
    buckets(&table, &ns, 4).await;
    let key = BucketKey::new("hot", "gpt-4", 0);
    proxy.replace_answer(
        "UpdateItem",
        Some(&format!("{}\"", pk(&ns, 2))),
        http::StatusCode::INTERNAL_SERVER_ERROR,
        r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"lost"}"#,
        1,
    );
    proxy.clear_requests();
    let report = repo.buckets().propagate_shard_count(&key, 4, 8).await;
    assert_eq!(proxy.pending(), 0, "the answer was lost");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let to_shard_2 = proxy
        .requests()
        .iter()
        .filter(|q| q.body["Key"]["PK"]["S"] == pk(&ns, 2).as_str())
        .count();
    assert_eq!(to_shard_2, 2, "sent again after the lost answer");
    let after = counts(&table, &ns, 8).await;
    assert_eq!(after[1..4], [Some((8, CP)); 3], "{after:?}");
}

/// A bucket split to 4 shards whose every item the TTL sweep then deleted, acquired again
/// by a process that remembers the 4 shards: the first acquire creates every shard at its
/// share in one transaction, so the entity gets its whole allowance back, not a quarter of
/// it. The clock stands still: 40 an hour refills nothing.
#[tokio::test]
async fn a_bucket_swept_by_its_ttl_comes_back_whole_at_the_count_remembered() {
    use dynalimit::{Error, Limit, RateLimiter};
    use dynalimit_core::ManualClock;
    let table = dynalimit_tests::table().await;
    let clock = ManualClock::new(NOW);
    let repo = table
        .builder()
        .clock(std::sync::Arc::new(clock.clone()))
        .namespace("swept")
        .open()
        .await
        .expect("open");
    let limiter = RateLimiter::new(repo.clone());
    let limits = [Limit::per_hour("rpm", 40)];
    let acquire = || async {
        match limiter
            .acquire("hot", "gpt-4", [("rpm", 1)])
            .limits(limits.clone())
            .await
        {
            Ok(lease) => {
                lease.commit().await.expect("commit");
                true
            }
            Err(Error::Rejected(_)) => false,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(acquire().await);
    let key = BucketKey::new("hot", "gpt-4", 0);
    for (from, to) in [(1, 2), (2, 4)] {
        let split = repo.buckets().double_shards(&key, from, to, NOW).await;
        assert_eq!(split.expect("split").count, to);
    }
    // The limiter learns the count from the next answer.
    assert!(acquire().await);
    let ns = repo.namespace_id().to_owned();
    for shard in 0..4 {
        table
            .client()
            .delete_item()
            .table_name(table.name())
            .key("PK", AttributeValue::S(pk(&ns, shard)))
            .key("SK", AttributeValue::S("#STATE".into()))
            .send()
            .await
            .expect("sweep");
    }
    let mut admitted = 0;
    for _ in 0..200 {
        admitted += i32::from(acquire().await);
    }
    assert_eq!(admitted, 40, "the whole allowance, across the 4 shards");
    let after = counts(&table, &ns, 4).await;
    assert!(
        after.iter().all(|s| s.is_some_and(|(count, _)| count == 4)),
        "every shard recreated at the count: {after:?}"
    );
}
