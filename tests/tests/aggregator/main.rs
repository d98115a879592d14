//! The aggregator end to end on a real DynamoDB endpoint: bucket writes → the table's stream →
//! the stream runner → usage snapshots, and at-least-once delivery counted once.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use dynalimit_aggregator::runner::{PollReport, Runner, RunnerOptions};
use dynalimit_aggregator::{Aggregator, EventKind, SequenceNumber, Settings, StreamRecord};
use dynalimit_core::ManualClock;
use dynalimit_format::item::{Item, get_s, key, n, s};
use dynalimit_format::keys;
use dynalimit_repository::aws::local_credentials;
use dynalimit_repository::{Repository, UsageQuery, UsageSnapshot};
use dynalimit_tests::TestTable;

mod alerts;
mod bootstrap;
mod lambda;
mod proactive;
mod provisioner;
mod restart;
mod shared_windows;
mod with_limiter;

/// 2026-03-10T14:10:00Z: two writes an hour apart stay within one day.
const T: i64 = 1_773_151_800_000;
const HOUR: i64 = 3_600_000;

pub(crate) async fn sdk_for(url: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(local_credentials())
        .endpoint_url(url)
        .load()
        .await
}

/// The aggregator's settings for `table` with both proactive passes off: counting only.
pub(crate) fn counting_only(table: &str) -> Settings {
    let mut settings = Settings::new(table);
    settings.proactive_refill = false;
    settings.proactive_sharding = false;
    settings
}

pub(crate) async fn runner(table: &TestTable) -> Runner {
    let sdk = sdk_for(dynalimit_tests::endpoint().url()).await;
    Runner::from_sdk_config(&sdk, counting_only(table.name()), RunnerOptions::default())
}

/// Polls until a poll reads nothing (bounded), summing the reports.
pub(crate) async fn drain(runner: &mut Runner) -> PollReport {
    let mut total = PollReport::default();
    for _ in 0..50 {
        let r = runner.poll_once().await.expect("poll");
        total.records += r.records;
        total.counted += r.counted;
        total.duplicates += r.duplicates;
        total.failed += r.failed;
        total.snapshots_written += r.snapshots_written;
        if r.records == 0 && r.failed == 0 {
            return total;
        }
    }
    panic!("the stream did not drain: {total:?}");
}

/// A bucket item in the §1.4.7 format, limits `(name, capacity tokens, refill per minute)`.
pub(crate) fn bucket_item(ns: &str, entity: &str, resource: &str, shard: u32, rf: i64) -> Item {
    let mut it = key(keys::bucket_pk(ns, entity, resource, shard), keys::STATE_SK);
    for (k, v) in [
        ("entity_id", s(entity)),
        ("resource", s(resource)),
        ("rf", n(rf)),
        ("shard_count", n(2)),
        ("cascade", AttributeValue::Bool(false)),
        ("GSI2PK", s(keys::resource_pk(ns, resource))),
        ("GSI2SK", s(keys::bucket_gsi2sk(entity, shard))),
        ("GSI3PK", s(keys::entity_pk(ns, entity))),
        ("GSI3SK", s(keys::bucket_gsi3sk(resource, shard))),
        ("GSI4PK", s(ns)),
        ("GSI4SK", s(keys::bucket_gsi4sk(entity, resource, shard))),
    ] {
        it.insert(k.to_owned(), v);
    }
    for (limit, cp, ra, rp) in [
        ("wcu", 1_000_000, 1_000_000, 1000),
        ("rpm", 100_000, 100_000, 60_000),
        ("tpm", 10_000_000, 10_000_000, 60_000),
    ] {
        it.insert(format!("b_{limit}_tk"), n(cp));
        it.insert(format!("b_{limit}_cp"), n(cp));
        it.insert(format!("b_{limit}_ra"), n(ra));
        it.insert(format!("b_{limit}_rp"), n(rp));
        it.insert(format!("b_{limit}_tc"), n(0));
    }
    it
}

/// Writes bucket items the way the acquire path does, returning each write's new image.
pub(crate) struct Writer<'a> {
    client: &'a Client,
    table: String,
    ns: String,
}

impl<'a> Writer<'a> {
    /// A writer on table `table` through `client`, in namespace id `ns`.
    pub(crate) fn new(client: &'a Client, table: &str, ns: &str) -> Self {
        Writer {
            client,
            table: table.to_owned(),
            ns: ns.to_owned(),
        }
    }

    pub(crate) async fn create(&self, entity: &str, shard: u32, rf: i64) -> Item {
        let it = bucket_item(&self.ns, entity, "gpt-4", shard, rf);
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(it.clone()))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await
            .expect("create bucket");
        it
    }

    /// `ADD b_{l}_tc :d, b_{l}_tk :-d` per limit (negative `d` is a rollback or a return),
    /// optionally moving `rf` like a slow-path write.
    pub(crate) async fn consume(
        &self,
        entity: &str,
        shard: u32,
        tokens: &[(&str, i64)],
        rf: Option<i64>,
    ) -> Item {
        let mut adds = Vec::new();
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(
                keys::bucket_pk(&self.ns, entity, "gpt-4", shard),
                keys::STATE_SK,
            )))
            .condition_expression("attribute_exists(PK)")
            .return_values(ReturnValue::AllNew);
        for (i, (limit, t)) in tokens.iter().enumerate() {
            adds.push(format!("#c{i} :c{i}, #k{i} :k{i}"));
            req = req
                .expression_attribute_names(format!("#c{i}"), format!("b_{limit}_tc"))
                .expression_attribute_names(format!("#k{i}"), format!("b_{limit}_tk"))
                .expression_attribute_values(format!(":c{i}"), n(t * 1000))
                .expression_attribute_values(format!(":k{i}"), n(-t * 1000));
        }
        let mut expr = format!("ADD {}", adds.join(", "));
        if let Some(rf) = rf {
            expr = format!("SET rf = :rf {expr}");
            req = req.expression_attribute_values(":rf", n(rf));
        }
        req.update_expression(expr)
            .send()
            .await
            .expect("consume")
            .attributes
            .expect("new image")
    }
}

/// Every snapshot item of the table, by (PK, SK).
pub(crate) async fn snapshot_items(table: &TestTable) -> BTreeMap<(String, String), Item> {
    table
        .scan_all()
        .await
        .into_iter()
        .filter(|it| get_s(it, "SK").is_some_and(|sk| sk.starts_with(keys::USAGE_SK_PREFIX)))
        .map(|it| {
            (
                (
                    get_s(&it, "PK").unwrap().to_owned(),
                    get_s(&it, "SK").unwrap().to_owned(),
                ),
                it,
            )
        })
        .collect()
}

fn by_window(snaps: &[UsageSnapshot]) -> BTreeMap<(String, String), BTreeMap<String, i64>> {
    snaps
        .iter()
        .map(|s| {
            (
                (s.window.clone(), s.window_start.clone()),
                s.counters.clone(),
            )
        })
        .collect()
}

fn counters(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

pub(crate) async fn setup() -> (TestTable, Repository) {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("usage").await;
    (table, repo)
}

#[tokio::test]
async fn runner_turns_bucket_writes_into_exact_snapshots_and_a_second_pass_changes_nothing() {
    let (table, repo) = setup().await;
    let w = Writer::new(table.client(), table.name(), repo.namespace_id());
    w.create("u1", 0, T).await;
    w.consume("u1", 0, &[("rpm", 1), ("tpm", 500)], None).await;
    w.consume("u1", 0, &[("rpm", 1), ("tpm", 700)], None).await;
    // A rollback of the second acquire's tpm, then an adjustment of +100.
    w.consume("u1", 0, &[("tpm", -700)], None).await;
    w.consume("u1", 0, &[("tpm", 100)], None).await;
    // Shard 1 in the same hour.
    w.create("u1", 1, T).await;
    w.consume("u1", 1, &[("rpm", 4)], None).await;
    // A slow-path write an hour later moves rf and consumes.
    w.consume("u1", 0, &[("rpm", 2), ("tpm", 50)], Some(T + HOUR))
        .await;
    // Another entity.
    w.create("u2", 0, T).await;
    w.consume("u2", 0, &[("rpm", 9)], None).await;

    let mut r = runner(&table).await;
    let report = drain(&mut r).await;
    assert_eq!(report.failed, 0);
    assert_eq!(report.duplicates, 0);
    // The creates carry tc = 0 and add nothing; seven writes consumed.
    assert_eq!(report.counted, 7, "{report:?}");

    let page = repo
        .usage_snapshots(&UsageQuery::entity("u1"), 100, None)
        .await
        .unwrap();
    assert!(page.next.is_none());
    let got = by_window(&page.snapshots);
    let expected = BTreeMap::from([
        (
            ("hourly".to_owned(), "2026-03-10T14:00:00Z".to_owned()),
            counters(&[("rpm", 6), ("tpm", 600)]),
        ),
        (
            ("hourly".to_owned(), "2026-03-10T15:00:00Z".to_owned()),
            counters(&[("rpm", 2), ("tpm", 50)]),
        ),
        (
            ("daily".to_owned(), "2026-03-10T00:00:00Z".to_owned()),
            counters(&[("rpm", 8), ("tpm", 650)]),
        ),
    ]);
    assert_eq!(got, expected);
    let h14 = page
        .snapshots
        .iter()
        .find(|s| s.window_start == "2026-03-10T14:00:00Z")
        .unwrap();
    // Events: 2 + 2 + 1 + 1 (shard 0) + 1 (shard 1), one per (record, limit).
    assert_eq!(h14.total_events, 7);

    // By resource across entities (GSI2), and the summary.
    let by_resource = repo
        .usage_snapshots(
            &UsageQuery::resource("gpt-4").with_window("daily"),
            100,
            None,
        )
        .await
        .unwrap();
    let mut entities: Vec<&str> = by_resource
        .snapshots
        .iter()
        .map(|s| s.entity_id.as_str())
        .collect();
    entities.sort_unstable();
    assert_eq!(entities, vec!["u1", "u2"]);
    let summary = repo
        .usage_summary(&UsageQuery::entity("u1").with_window("hourly"))
        .await
        .unwrap();
    assert_eq!(summary.snapshot_count, 2);
    assert_eq!(summary.total, counters(&[("rpm", 8), ("tpm", 650)]));
    assert!((summary.average["rpm"] - 4.0).abs() < f64::EPSILON);

    // The raw item carries the reference's keys and attributes.
    let items = snapshot_items(&table).await;
    let ns = repo.namespace_id();
    let raw = &items[&(
        keys::entity_pk(ns, "u1"),
        "#USAGE#gpt-4#2026-03-10T14:00:00Z".to_owned(),
    )];
    assert_eq!(
        get_s(raw, "GSI2PK"),
        Some(keys::resource_pk(ns, "gpt-4").as_str())
    );
    assert_eq!(get_s(raw, "GSI2SK"), Some("USAGE#2026-03-10T14:00:00Z#u1"));
    assert_eq!(get_s(raw, "GSI4PK"), Some(ns));
    assert_eq!(get_s(raw, "window"), Some("hourly"));
    assert_eq!(get_s(raw, "window_start"), Some("2026-03-10T14:00:00Z"));
    assert!(matches!(raw.get("ttl"), Some(AttributeValue::N(_))));

    // A second runner starts from the beginning of the stream: everything is a duplicate and
    // no snapshot changes, ttl included.
    let mut again = runner(&table).await;
    let second = drain(&mut again).await;
    assert_eq!(second.counted, 0, "{second:?}");
    assert_eq!(second.duplicates, 7);
    assert_eq!(snapshot_items(&table).await, items);
}

/// Builds stream records from the images the writes returned, with increasing sequence numbers.
pub(crate) fn records_of(images: &[Item], first_seq: u64) -> Vec<StreamRecord> {
    let mut out = Vec::new();
    for (i, pair) in images.windows(2).enumerate() {
        out.push(StreamRecord {
            event_id: format!("e{i}"),
            kind: EventKind::Modify,
            sequence_number: SequenceNumber::parse(&(first_seq + i as u64).to_string()).unwrap(),
            old_image: Some(pair[0].clone()),
            new_image: Some(pair[1].clone()),
            removed_by_ttl: false,
        });
    }
    out
}

#[tokio::test]
async fn the_same_batch_processed_twice_or_concurrently_counts_once() {
    let (table, repo) = setup().await;
    let w = Writer::new(table.client(), table.name(), repo.namespace_id());
    let mut images = vec![w.create("u1", 0, T).await];
    for t in 1..=5 {
        images.push(w.consume("u1", 0, &[("rpm", t)], None).await);
    }
    let records = records_of(&images, 1000);
    let clock = Arc::new(ManualClock::new(T));
    let settings = counting_only(table.name());
    let a = Aggregator::with_clock(table.client().clone(), settings.clone(), clock.clone());
    let b = Aggregator::with_clock(table.client().clone(), settings, clock);

    // Two aggregators race on the same batch: exactly one counts each record.
    let (ra, rb) = tokio::join!(a.process(&records), b.process(&records));
    assert!(
        ra.failed.is_empty() && rb.failed.is_empty(),
        "{ra:?} {rb:?}"
    );
    assert_eq!(ra.counted + rb.counted, 5, "{ra:?} {rb:?}");
    let after_first = snapshot_items(&table).await;
    let daily = repo
        .usage_summary(&UsageQuery::entity("u1").with_window("daily"))
        .await
        .unwrap();
    assert_eq!(daily.total, counters(&[("rpm", 15)]));
    assert_eq!(daily.total_events, 5);

    // Delivered again, whole: nothing changes.
    let again = a.process(&records).await;
    assert_eq!((again.counted, again.duplicates), (0, 5));
    assert_eq!(snapshot_items(&table).await, after_first);

    // Delivered again from the middle with two new records: only the new ones count.
    images.push(w.consume("u1", 0, &[("rpm", 10)], None).await);
    images.push(w.consume("u1", 0, &[("rpm", 20)], None).await);
    let all = records_of(&images, 1000);
    let tail = &all[3..];
    let r = b.process(tail).await;
    assert_eq!((r.counted, r.duplicates), (2, 2), "{r:?}");
    let daily = repo
        .usage_summary(&UsageQuery::entity("u1").with_window("daily"))
        .await
        .unwrap();
    assert_eq!(daily.total, counters(&[("rpm", 45)]));
    assert_eq!(daily.total_events, 7);
}
