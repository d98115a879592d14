//! Throughput of the pure processor (records per second on one core): `extract` then `plan`
//! over a batch of bucket modifications, as a Lambda batch or a runner poll would bring.
//!
//! `cargo bench -p dynalimit-aggregator --bench processor`

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dynalimit_aggregator::processor::{extract, plan};
use dynalimit_aggregator::{EventKind, SequenceNumber, StreamRecord, Window};
use dynalimit_format::item::Item;

fn image(entity: usize, shard: usize, rf: i64, tc: i64) -> Item {
    let mut item = Item::new();
    let s = |v: String| AttributeValue::S(v);
    let n = |v: i64| AttributeValue::N(v.to_string());
    item.insert(
        "PK".into(),
        s(format!("a7x3kq/BUCKET#user-{entity}#gpt-4#{shard}")),
    );
    item.insert("SK".into(), s("#STATE".into()));
    item.insert("entity_id".into(), s(format!("user-{entity}")));
    item.insert("resource".into(), s("gpt-4".into()));
    item.insert("rf".into(), n(rf));
    item.insert("shard_count".into(), n(2));
    for (limit, per) in [("wcu", 1000), ("rpm", 1000), ("tpm", 250_000)] {
        item.insert(format!("b_{limit}_tk"), n(1_000_000 - tc * per));
        item.insert(format!("b_{limit}_cp"), n(1_000_000));
        item.insert(format!("b_{limit}_ra"), n(1_000_000));
        item.insert(format!("b_{limit}_rp"), n(60_000));
        item.insert(format!("b_{limit}_tc"), n(tc * per));
    }
    item
}

/// `count` modifications spread over 50 entities × 2 shards, rf spanning two hours.
fn batch(count: usize) -> Vec<StreamRecord> {
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
            }
        })
        .collect()
}

fn processor(c: &mut Criterion) {
    let windows = [Window::Hourly, Window::Daily];
    let mut group = c.benchmark_group("processor");
    for size in [100usize, 1000] {
        let records = batch(size);
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(format!("extract_and_plan/{size}"), |b| {
            b.iter(|| {
                let extracted = extract(std::hint::black_box(&records));
                plan(&extracted.usage, &HashMap::new(), &windows)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, processor);
criterion_main!(benches);
