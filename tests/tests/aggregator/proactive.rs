//! Proactive refill and doubling against DynamoDB Local, on a manual clock.

use std::sync::Arc;

use aws_sdk_dynamodb::types::ReturnValue;
use dynalimit_aggregator::{Aggregator, Settings};
use dynalimit_core::ManualClock;
use dynalimit_format::item::{Item, get_i64, key, n};
use dynalimit_format::keys;

use super::{T, Writer, records_of};

async fn read(table: &dynalimit_tests::TestTable, ns: &str, shard: u32) -> Item {
    table
        .client()
        .get_item()
        .table_name(table.name())
        .set_key(Some(key(
            keys::bucket_pk(ns, "hot", "gpt-4", shard),
            keys::STATE_SK,
        )))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("bucket")
}

#[tokio::test]
async fn busy_buckets_are_refilled_under_the_rf_lock_and_hot_ones_double() {
    let table = dynalimit_tests::table().await;
    let ns = "nsp".to_owned();
    let w = Writer::new(table.client(), table.name(), &ns);
    // The test buckets carry shard_count 2; shard 0 of 2 has a 50-token rpm ceiling.
    let mut images = vec![w.create("hot", 0, T).await];
    images.push(w.consume("hot", 0, &[("rpm", 45)], None).await);
    let records = records_of(&images, 10);
    let clock = Arc::new(ManualClock::new(T + 6_000));
    let mut settings = Settings::new(table.name());
    settings.proactive_sharding = false;
    let agg = Aggregator::with_clock(table.client().clone(), settings, clock.clone());

    let report = agg.process(&records).await;
    assert_eq!(report.refills_written, 1, "{report:?}");
    let item = read(&table, &ns, 0).await;
    // The image had 100 − 45 = 55 tokens, trimmed to the 50-token ceiling plus 6 s of refill
    // at 50 tokens/min = 5 tokens: 50 (the ceiling caps it).
    assert_eq!(get_i64(&item, "rf"), Some(T + 6_000));
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(50_000));
    // The usage was counted too.
    assert_eq!(report.counted, 1);

    // The same image again: rf moved, the lock is lost and nothing is written.
    let again = agg.process(&records).await;
    assert_eq!(again.refills_written, 0);
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!(read(&table, &ns, 0).await, item);

    // A hot shard 0: wcu at 10 % ⇒ the bucket splits from 2 to 4 shards. Shard 0 (49 of its
    // 50-token share) gives half in whole tokens (24) to shard 2, created with them, and
    // keeps 25, its new share; shard 1 was never created, so neither is shard 3.
    let mut settings = Settings::new(table.name());
    settings.proactive_refill = false;
    let agg = Aggregator::with_clock(table.client().clone(), settings, clock);
    let before = read(&table, &ns, 0).await;
    let after = w
        .consume("hot", 0, &[("wcu", 900), ("rpm", 1)], Some(T + 6_000))
        .await;
    let report = agg.process(&records_of(&[before, after], 20)).await;
    assert_eq!(report.shards_stamped, 1, "{report:?}");
    let item = read(&table, &ns, 0).await;
    assert_eq!(get_i64(&item, "shard_count"), Some(4));
    assert_eq!(get_i64(&item, "vu"), None);
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(25_000));
    let twin = read(&table, &ns, 2).await;
    assert_eq!(get_i64(&twin, "shard_count"), Some(4));
    assert_eq!(get_i64(&twin, "b_rpm_tk"), Some(24_000));
    assert_eq!(get_i64(&twin, "b_rpm_tc"), Some(0));
    assert_eq!(get_i64(&twin, "b_wcu_tk"), Some(1_000_000));
}

#[tokio::test]
async fn a_count_raised_by_another_writer_reaches_the_older_shards_and_the_new_ones_are_created() {
    let table = dynalimit_tests::table().await;
    let ns = "nsq".to_owned();
    let w = Writer::new(table.client(), table.name(), &ns);
    // Two shards of 2; shard 0 is doubled to 4 by a writer that never propagated (its
    // answer was lost, or it stopped): shard 1 keeps the old count.
    let before = w.create("hot", 0, T).await;
    w.create("hot", 1, T).await;
    let after = table
        .client()
        .update_item()
        .table_name(table.name())
        .set_key(Some(key(
            keys::bucket_pk(&ns, "hot", "gpt-4", 0),
            keys::STATE_SK,
        )))
        .update_expression("SET shard_count = :to")
        .condition_expression("shard_count = :from")
        .expression_attribute_values(":to", n(4))
        .expression_attribute_values(":from", n(2))
        .return_values(ReturnValue::AllNew)
        .send()
        .await
        .expect("doubled")
        .attributes
        .expect("image");
    let mut settings = Settings::new(table.name());
    settings.proactive_refill = false;
    let clock = Arc::new(ManualClock::new(T + 1_000));
    let agg = Aggregator::with_clock(table.client().clone(), settings, clock);
    let records = records_of(&[before, after], 30);
    let report = agg.process(&records).await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!((report.shards_stamped, report.shards_created), (1, 2));

    // Shard 1: the new count; it gave its twin (shard 3) a share, and what it holds above
    // its own is trimmed by its next materialising write.
    let shard1 = read(&table, &ns, 1).await;
    assert_eq!(get_i64(&shard1, "shard_count"), Some(4));
    assert_eq!(get_i64(&shard1, "b_rpm_tk"), Some(75_000));
    assert_eq!(get_i64(&shard1, "vu"), None);
    // Shards 2 and 3: clones of shards 0 and 1 with their own keys, each holding the share
    // its donor moved to it in the clone's transaction (the donors held the doubling's
    // tokens: nothing is added).
    let mut shares = 0;
    for shard in 0..4 {
        let item = read(&table, &ns, shard).await;
        let count = get_i64(&item, "shard_count").expect("count");
        assert_eq!(count, 4, "shard {shard}");
        shares += get_i64(&item, "b_rpm_cp").expect("cp") / count;
        if shard >= 2 {
            assert_eq!(get_i64(&item, "b_rpm_tk"), Some(25_000));
            assert_eq!(get_i64(&item, "b_rpm_tc"), Some(0));
            assert_eq!(get_i64(&item, "b_wcu_tk"), Some(1_000_000));
            assert_eq!(get_i64(&item, "rf"), Some(T + 1_000));
            assert_eq!(get_i64(&item, "vu"), None);
            assert_eq!(
                dynalimit_format::item::get_s(&item, "GSI4SK"),
                Some(keys::bucket_gsi4sk("hot", "gpt-4", shard).as_str())
            );
        }
    }
    assert_eq!(
        shares, 100_000,
        "the shares sum to the capacity once healed"
    );

    // The same records again (a redelivery): nothing is written twice.
    let mut snapshot = Vec::new();
    for shard in 0..4 {
        snapshot.push(read(&table, &ns, shard).await);
    }
    let again = agg.process(&records).await;
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!((again.shards_stamped, again.shards_created), (0, 0));
    for (shard, item) in (0..4).zip(&snapshot) {
        assert_eq!(&read(&table, &ns, shard).await, item, "shard {shard}");
    }
}
