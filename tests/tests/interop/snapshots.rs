//! Usage snapshots: the same stream records through zae-limiter 0.17's aggregator
//! (`process_stream_records`, as its Lambda runs it) into one table and through dynalimit's
//! into another, then every snapshot item compared attribute by attribute. The records hit
//! the windows that share an item: hour 00 of the first of a month (its day's and its month's
//! item too, with `hourly,daily,monthly`), and a year end.

use std::collections::BTreeMap;

use aws_lambda_events::event::dynamodb::Event;
use dynalimit_aggregator::{Aggregator, Settings, SnapshotWindow, handler};
use dynalimit_format::item::{Item, get_i64, key, n, s};
use dynalimit_format::keys;
use dynalimit_tests::TestTable;
use serde_json::{Value, json};

use crate::python::shared_table;

const NS: &str = "snapns";
/// 2026-12-31T23:50:00Z and 2027-01-01T00:10:00Z.
const DEC31_2350: i64 = 1_798_761_000_000;
const JAN01_0010: i64 = 1_798_762_200_000;
const MINUTE: i64 = 60_000;
/// A soft limit's stamp deadline far in the future (present = soft for both readers).
const SOFT_UNTIL: i64 = 1_900_000_000_000;

/// A bucket item of `u1` on `gpt-4` with `rpm`, `tpm`, the soft `req.v2-x` and `wcu`.
fn bucket(shard: u32, rf: i64) -> Item {
    let mut it = key(keys::bucket_pk(NS, "u1", "gpt-4", shard), keys::STATE_SK);
    for (k, v) in [
        ("entity_id", s("u1")),
        ("resource", s("gpt-4")),
        ("rf", n(rf)),
        ("shard_count", n(2)),
        ("b_req.v2-x_soft", n(SOFT_UNTIL)),
    ] {
        it.insert(k.to_owned(), v);
    }
    for (limit, cp) in [
        ("wcu", 1_000_000),
        ("rpm", 100_000),
        ("tpm", 10_000_000),
        ("req.v2-x", 5_000),
    ] {
        for (field, value) in [
            ("tk", cp),
            ("cp", cp),
            ("ra", cp),
            ("rp", 60_000),
            ("tc", 0),
        ] {
            it.insert(format!("b_{limit}_{field}"), n(value));
        }
    }
    it
}

/// The image after a write at `rf` that moved `tc` by `milli` per limit (and `tk` the other
/// way), as the acquire path leaves it.
fn after(image: &Item, rf: i64, milli: &[(&str, i64)]) -> Item {
    let mut next = image.clone();
    next.insert("rf".into(), n(rf));
    for (limit, d) in milli {
        for (field, sign) in [("tc", 1), ("tk", -1)] {
            let attr = format!("b_{limit}_{field}");
            let v = get_i64(&next, &attr).unwrap() + sign * d;
            next.insert(attr, n(v));
        }
    }
    next
}

/// An attribute value in DynamoDB's JSON form, as stream records carry it.
/// Lambda stream records (MODIFY, new and old images) for consecutive images of one item.
fn records(images: &[Item], first_seq: u64) -> Vec<Value> {
    images
        .windows(2)
        .zip(first_seq..)
        .map(|(pair, seq)| crate::fixture::record(&pair[0], &pair[1], seq))
        .collect()
}

/// The batch: shard 1 at the year end, shard 0 through hour 00 of 2027-01-01 and beyond, with
/// fractional tokens, a return and a soft limit going into debt.
fn batch() -> Vec<Value> {
    let s1 = bucket(1, DEC31_2350);
    let s1_images = vec![
        s1.clone(),
        after(&s1, DEC31_2350, &[("rpm", 1_000), ("tpm", 250_500)]),
    ];
    let s0 = bucket(0, JAN01_0010);
    let mut s0_images = vec![s0.clone()];
    for (rf, milli) in [
        (JAN01_0010, vec![("rpm", 1_000), ("tpm", 500_500)]),
        (JAN01_0010 + 20 * MINUTE, vec![("tpm", -700)]),
        // The soft limit's 5 000 milli capacity overdrawn: tk below zero.
        (
            JAN01_0010 + 30 * MINUTE,
            vec![("rpm", 2_000), ("req.v2-x", 7_000)],
        ),
        (
            JAN01_0010 + 300 * MINUTE,
            vec![("rpm", 3_000), ("req.v2-x", 1_500)],
        ),
    ] {
        let next = after(s0_images.last().unwrap(), rf, &milli);
        s0_images.push(next);
    }
    let mut out = records(&s1_images, 100);
    out.extend(records(&s0_images, 200));
    out
}

/// Every snapshot item of `table`, by sort key.
async fn snapshots(table: &TestTable) -> BTreeMap<String, Item> {
    table
        .scan_all()
        .await
        .into_iter()
        .filter_map(|it| {
            let sk = it.get("SK")?.as_s().ok()?.clone();
            sk.starts_with(keys::USAGE_SK_PREFIX).then_some((sk, it))
        })
        .collect()
}

#[tokio::test]
async fn snapshots_of_shared_windows_match_zae_limiter_attribute_by_attribute() {
    let (theirs, python) = shared_table!();
    let ours = dynalimit_tests::table().await;
    let batch = batch();
    let windows = [
        SnapshotWindow::Hourly,
        SnapshotWindow::Daily,
        SnapshotWindow::Monthly,
    ];

    let answer = python
        .one(
            "default",
            json!({
                "op": "aggregate",
                "records": batch,
                "windows": windows.iter().map(|w| w.as_str()).collect::<Vec<_>>(),
            }),
        )
        .await;
    let snapshot_errors: Vec<&Value> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.as_str().is_some_and(|e| e.contains("snapshot")))
        .collect();
    assert!(snapshot_errors.is_empty(), "{answer}");

    let mut settings = Settings::new(ours.name());
    settings.windows = windows.to_vec();
    settings.proactive_refill = false;
    settings.proactive_sharding = false;
    let aggregator = Aggregator::new(ours.client().clone(), settings);
    let event: Event = serde_json::from_value(json!({ "Records": batch })).expect("event");
    let report = aggregator.process(&handler::records_of(event)).await;
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.counted, 5);

    let (theirs, ours) = (snapshots(&theirs).await, snapshots(&ours).await);
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>()
    );
    for (sk, their_item) in &theirs {
        let our_item = &ours[sk];
        let names = |it: &Item| {
            let mut v: Vec<String> = it.keys().cloned().collect();
            v.sort();
            v
        };
        assert_eq!(names(their_item), names(our_item), "{sk}");
        for (attr, theirs_value) in their_item {
            if attr == "ttl" {
                // Both set it once from their own wall clock: now + 90 days.
                let (a, b) = (get_i64(their_item, attr), get_i64(our_item, attr));
                assert!(
                    a.zip(b).is_some_and(|(a, b)| (a - b).abs() <= 300),
                    "{sk}: ttl {a:?} vs {b:?}"
                );
                continue;
            }
            assert_eq!(Some(theirs_value), our_item.get(attr), "{sk}: {attr}");
        }
    }

    // What the shared item holds: 00:10, 00:30 and 00:40 once per window (three), 05:10 twice
    // (day, month); events one per (record, limit, window); overdraws once per window.
    let pk = keys::entity_pk(NS, "u1");
    let shared = &ours["#USAGE#gpt-4#2027-01-01T00:00:00Z"];
    assert_eq!(shared["PK"], s(&pk));
    assert_eq!(get_i64(shared, "rpm"), Some((1 + 2) * 3 + 3 * 2));
    // tpm: 500 (floor of 500.5) and −1 (floor of −0.7), three times each.
    assert_eq!(get_i64(shared, "tpm"), Some((500 - 1) * 3));
    assert_eq!(get_i64(shared, "req.v2-x"), Some(7 * 3 + 2));
    // Both debits of the soft limit leave it in debt.
    assert_eq!(get_i64(shared, "req.v2-x#od"), Some(3 + 2));
    assert_eq!(
        get_i64(shared, "total_events"),
        Some((2 + 1 + 2) * 3 + 2 * 2)
    );
    assert_eq!(shared["window"], s("hourly"));
    assert_eq!(ours.len(), 5, "{:?}", ours.keys());
}
