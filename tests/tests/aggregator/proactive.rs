//! Proactive refill and doubling against DynamoDB Local, on a manual clock.

use std::sync::Arc;

use dynalimit_aggregator::{Aggregator, Settings};
use dynalimit_core::ManualClock;
use dynalimit_repository::item::{Item, get_i64, key};
use dynalimit_repository::keys;

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

    // A hot shard 0: wcu at 10 % ⇒ the count doubles from 2 to 4, with the acquire path's
    // donations (cp // 4 per limit) and the vu = 0 clamp stamp.
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
    assert_eq!(get_i64(&item, "vu"), Some(0));
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(50_000 - 1_000 - 25_000));
}
