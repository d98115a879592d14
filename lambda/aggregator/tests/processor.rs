//! The pure processor on JSON fixtures shaped like the Lambda event source's deliveries.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::dynamodb::Event;
use dynalimit_aggregator::processor::{
    BucketRef, GroupPlan, MAX_TRANSACT_ITEMS, SnapshotWrite, Usage, extract, plan,
};
use dynalimit_aggregator::{EventKind, SequenceNumber, SnapshotWindow, handler};

fn fixture() -> Event {
    serde_json::from_str(include_str!("fixtures/batch.json")).expect("fixture parses")
}

fn snapshots(plans: &[GroupPlan]) -> BTreeMap<(String, String, String), SnapshotWrite> {
    plans
        .iter()
        .flat_map(|p| p.transactions.iter())
        .flat_map(|t| t.snapshots.iter())
        .map(|s| {
            (
                (
                    s.group.entity_id.clone(),
                    s.group.resource.clone(),
                    s.window_key.clone() + "/" + s.window.as_str(),
                ),
                s.clone(),
            )
        })
        .collect()
}

fn counters(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[test]
fn lambda_records_convert_including_unknown_event_names() {
    let records = handler::records_of(fixture());
    assert_eq!(records.len(), 8);
    let kinds: Vec<EventKind> = records.iter().map(|r| r.kind).collect();
    assert_eq!(kinds[0], EventKind::Insert);
    // DynamoDB Local's UNKNOWN_TO_SDK_VERSION with both images is a modification.
    assert_eq!(kinds[2], EventKind::Modify);
    assert_eq!(kinds[5], EventKind::Remove);
    assert_eq!(records[1].sequence_number.as_str(), "200");
    assert!(records[5].new_image.is_none());
}

#[test]
fn fixture_batch_becomes_hourly_and_daily_snapshots() {
    let records = handler::records_of(fixture());
    let extracted = extract(&records);
    // The TTL removal and the snapshot item's own change are ignored; the create counts.
    assert_eq!(extracted.ignored, 2);
    assert_eq!(extracted.usage.len(), 6);
    let windows = [SnapshotWindow::Hourly, SnapshotWindow::Daily];
    let plans = plan(&extracted.usage, &HashMap::new(), &windows);
    assert_eq!(plans.len(), 2, "one plan per (entity, resource)");
    let snaps = snapshots(&plans);
    let get = |e: &str, r: &str, k: &str| {
        snaps
            .get(&(e.to_owned(), r.to_owned(), k.to_owned()))
            .unwrap_or_else(|| panic!("no snapshot {e} {r} {k}: {:?}", snaps.keys()))
    };
    let h22 = get("u1", "gpt-4", "2023-11-14T22:00:00Z/hourly");
    // rpm: 1 (create) + 1 (fast path) + 2 (shard 1); tpm: 500 + 500 consumed, 200 rolled
    // back.
    assert_eq!(h22.counters, counters(&[("rpm", 4), ("tpm", 800)]));
    assert_eq!(h22.total_events, 6);
    // The slow-path write moved rf into the next hour: its usage lands there.
    let h23 = get("u1", "gpt-4", "2023-11-14T23:00:00Z/hourly");
    assert_eq!(h23.counters, counters(&[("rpm", 3)]));
    assert_eq!(h23.total_events, 1);
    let day = get("u1", "gpt-4", "2023-11-14T00:00:00Z/daily");
    assert_eq!(day.counters, counters(&[("rpm", 7), ("tpm", 800)]));
    assert_eq!(day.total_events, 7);
    // 1.5 tokens floor to 1; a limit name with '.' and '-' is a counter name as is.
    let api = get("u2", "api", "2023-11-14T22:00:00Z/hourly");
    assert_eq!(api.counters, counters(&[("req.v2-x", 1)]));
    assert_eq!(snaps.len(), 5);

    // The u1 transaction moves both shards' watermarks to their last records.
    let u1 = plans.iter().find(|p| p.group.entity_id == "u1").unwrap();
    assert_eq!(u1.transactions.len(), 1);
    let marks: Vec<(u32, &str, Option<&SequenceNumber>)> = u1.transactions[0]
        .markers
        .iter()
        .map(|m| (m.bucket.shard, m.applied.as_str(), m.expected.as_ref()))
        .collect();
    assert_eq!(marks, vec![(0, "400", None), (1, "500", None)]);
    assert_eq!(u1.transactions[0].records.len(), 5);
}

#[test]
fn a_redelivered_batch_plans_nothing_and_a_partial_one_only_the_rest() {
    let records = handler::records_of(fixture());
    let extracted = extract(&records);
    let windows = [SnapshotWindow::Hourly];
    let first = plan(&extracted.usage, &HashMap::new(), &windows);
    let watermarks: HashMap<BucketRef, SequenceNumber> = first
        .iter()
        .flat_map(|p| p.transactions.iter())
        .flat_map(|t| t.markers.iter())
        .map(|m| (m.bucket.clone(), m.applied.clone()))
        .collect();
    assert!(plan(&extracted.usage, &watermarks, &windows).is_empty());

    // Shard 0 counted up to 300 only: record 400 is planned against that watermark.
    let mut partial = watermarks.clone();
    let shard0 = extracted.usage[1].bucket.clone();
    partial.insert(shard0.clone(), SequenceNumber::parse("300").unwrap());
    let again = plan(&extracted.usage, &partial, &windows);
    assert_eq!(again.len(), 1);
    let tx = &again[0].transactions[0];
    assert_eq!(tx.records, vec![SequenceNumber::parse("400").unwrap()]);
    assert_eq!(tx.markers[0].expected.as_ref().unwrap().as_str(), "300");
    assert_eq!(tx.snapshots[0].counters, counters(&[("rpm", 3)]));
}

#[test]
fn long_runs_split_into_transactions_of_at_most_100_items_in_order() {
    let records = handler::records_of(fixture());
    let template = extract(&records).usage[1].clone();
    // 250 records, each in its own hour: 250 hourly snapshots + daily ones.
    let usage: Vec<Usage> = (0..250i64)
        .map(|i| Usage {
            sequence_number: SequenceNumber::parse(&(1000 + i).to_string()).unwrap(),
            at_ms: template.at_ms + i * 3_600_000,
            ..template.clone()
        })
        .collect();
    let windows = [SnapshotWindow::Hourly, SnapshotWindow::Daily];
    let plans = plan(&usage, &HashMap::new(), &windows);
    assert_eq!(plans.len(), 1);
    let txs = &plans[0].transactions;
    assert!(txs.len() >= 3);
    let mut expected: Option<SequenceNumber> = None;
    let mut total_rpm = 0;
    let mut hourly_items = 0;
    for tx in txs {
        assert!(tx.len() <= MAX_TRANSACT_ITEMS);
        assert_eq!(tx.markers.len(), 1);
        // Each transaction expects the watermark the previous one wrote.
        assert_eq!(tx.markers[0].expected, expected);
        expected = Some(tx.markers[0].applied.clone());
        total_rpm += tx.snapshots.iter().map(|s| s.counters["rpm"]).sum::<i64>();
        hourly_items += tx
            .snapshots
            .iter()
            .filter(|s| s.windows.contains(&SnapshotWindow::Hourly))
            .count();
    }
    assert_eq!(expected.unwrap().as_str(), "1249");
    // Each record is counted once per window, 250 hourly and 250 daily; the 00 items carry
    // both.
    assert_eq!(total_rpm, 500);
    assert_eq!(hourly_items, 250);
}

#[test]
fn partial_failure_response_names_the_failed_sequence_numbers() {
    let report = dynalimit_aggregator::BatchReport {
        failed: vec![
            SequenceNumber::parse("300").unwrap(),
            SequenceNumber::parse("400").unwrap(),
        ],
        ..Default::default()
    };
    let response = handler::response_of(&report);
    let json = serde_json::to_value(&response).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": "300"}, {"itemIdentifier": "400"}
        ]})
    );
}
