//! A synthetic stream batch for measuring the processor (`cargo bench -p
//! dynalimit-aggregator`, `dynalimit bench --only aggregator`): bucket modifications as a busy
//! table sends them.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::attr::{self, BucketField, bucket_limit};
use dynalimit_format::item::Item;
use dynalimit_format::keys;

use crate::{EventKind, SequenceNumber, StreamRecord};

fn image(entity: usize, shard: usize, rf: i64, spent: i64) -> Item {
    let mut item = Item::new();
    let s = |v: String| AttributeValue::S(v);
    let n = |v: i64| AttributeValue::N(v.to_string());
    let owner = format!("user-{entity}");
    let shard_id = u32::try_from(shard).unwrap_or(0);
    item.insert(
        attr::PK.into(),
        s(keys::bucket_pk("a7x3kq", &owner, "gpt-4", shard_id)),
    );
    item.insert(attr::SK.into(), s(keys::STATE_SK.into()));
    item.insert(attr::ENTITY_ID.into(), s(owner));
    item.insert(attr::RESOURCE.into(), s("gpt-4".into()));
    item.insert(attr::RF.into(), n(rf));
    item.insert(attr::SHARD_COUNT.into(), n(2));
    for (limit, per) in [("wcu", 1000), ("rpm", 1000), ("tpm", 250_000)] {
        for (field, value) in [
            (BucketField::Tk, 1_000_000 - spent * per),
            (BucketField::Cp, 1_000_000),
            (BucketField::Ra, 1_000_000),
            (BucketField::Rp, 60_000),
            (BucketField::Tc, spent * per),
        ] {
            item.insert(bucket_limit(limit, field), n(value));
        }
    }
    item
}

/// `count` modifications of bucket items spread over 50 entities × 2 shards, three limits
/// each, their refill times spanning two hours (so hourly and daily windows both turn).
pub fn modifications(count: usize) -> Vec<StreamRecord> {
    (0..count)
        .map(|i| {
            let (entity, shard) = (i % 50, (i / 50) % 2);
            let step = i64::try_from(i / 100).unwrap_or(0);
            let rf = 1_700_000_000_000 + i64::try_from(i).unwrap_or(0) * 7_000;
            StreamRecord {
                event_id: format!("ev{i}"),
                kind: EventKind::Modify,
                sequence_number: SequenceNumber::parse(&(1_000_000 + i).to_string())
                    .expect("digits"),
                old_image: Some(image(entity, shard, rf, step)),
                new_image: Some(image(entity, shard, rf, step + 1)),
                removed_by_ttl: false,
            }
        })
        .collect()
}
