//! The aggregator as Lambda runs it: the `bootstrap` built with cargo-lambda, started with
//! exactly the environment `infra/template.yaml` gives the function for default parameters,
//! polling cargo-lambda's Lambda Runtime API emulator, and invoked with the DynamoDB Streams
//! events the event source mapping would deliver for real acquires on DynamoDB Local.
//!
//! The binary is built for the host's architecture (x86_64 on CI), not for the template's
//! default arm64, which cannot run here; the code and the build path are the same.
//!
//! Skipped with a printed reason when cargo-lambda is not installed, unless
//! `DYNALIMIT_REQUIRE_CARGO_LAMBDA=1` (set by `scripts/test`) or `CI` is set.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, Record, ShardIteratorType};
use dynalimit::{Limit, RateLimiter};
use dynalimit_aggregator::SnapshotWindow;
use dynalimit_core::Clock;
use dynalimit_format::item::{Item, get_s, key, s};
use dynalimit_format::keys;
use dynalimit_format::keys::usage_sk as snapshot_sk;
use dynalimit_repository::{Repository, UsageQuery};
use dynalimit_tests::lambda::{CargoLambda, Function, RuntimeApi, endpoint_environment};
use dynalimit_tests::template::{
    filter_matches, function_environment_with, parameter_default, stream_filters, template,
};
use dynalimit_tests::{TestTable, endpoint};
use serde_json::{Value, json};

use super::{counters, sdk_for};

const RESOURCE: &str = "gpt-4";

fn value_json(v: &StreamValue) -> Value {
    match v {
        StreamValue::S(x) => json!({ "S": x }),
        StreamValue::N(x) => json!({ "N": x }),
        StreamValue::Bool(x) => json!({ "BOOL": x }),
        StreamValue::Null(x) => json!({ "NULL": x }),
        StreamValue::Ss(x) => json!({ "SS": x }),
        StreamValue::Ns(x) => json!({ "NS": x }),
        StreamValue::B(x) => json!({ "B": aws_smithy_types::base64::encode(x.as_ref()) }),
        StreamValue::Bs(x) => json!({
            "BS": x.iter().map(|b| aws_smithy_types::base64::encode(b.as_ref())).collect::<Vec<_>>()
        }),
        StreamValue::L(x) => json!({ "L": x.iter().map(value_json).collect::<Vec<_>>() }),
        StreamValue::M(x) => json!({ "M": item_json(x) }),
        other => panic!("attribute value the stream should not carry: {other:?}"),
    }
}

fn item_json(item: &HashMap<String, StreamValue>) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

/// A record read through the DynamoDB Streams API, in the shape the Lambda event source
/// mapping delivers it.
fn lambda_record(r: &Record, stream_arn: &str) -> Value {
    let c = r.dynamodb().expect("the record's change");
    let mut change = json!({
        "ApproximateCreationDateTime": c.approximate_creation_date_time().map(|t| t.secs()),
        "Keys": item_json(c.keys().expect("keys")),
        "SequenceNumber": c.sequence_number().expect("sequence number"),
        "SizeBytes": c.size_bytes().expect("size"),
        "StreamViewType": c.stream_view_type().expect("view type").as_str(),
    });
    if let Some(image) = c.new_image() {
        change["NewImage"] = item_json(image);
    }
    if let Some(image) = c.old_image() {
        change["OldImage"] = item_json(image);
    }
    let mut record = json!({
        "eventID": r.event_id().expect("event id"),
        "eventName": r.event_name().expect("event name").as_str(),
        "eventVersion": r.event_version().expect("event version"),
        "eventSource": r.event_source().expect("event source"),
        "awsRegion": r.aws_region().expect("region"),
        "dynamodb": change,
        "eventSourceARN": stream_arn,
    });
    if let Some(who) = r.user_identity() {
        record["userIdentity"] = json!({ "type": who.r#type(), "principalId": who.principal_id() });
    }
    record
}

/// Every record of the table's stream so far, as Lambda records, shard by shard.
pub(super) async fn stream_records(table: &TestTable) -> Vec<Value> {
    let arn = table
        .client()
        .describe_table()
        .table_name(table.name())
        .send()
        .await
        .expect("DescribeTable")
        .table
        .and_then(|t| t.latest_stream_arn)
        .expect("the table has a stream");
    let streams = aws_sdk_dynamodbstreams::Client::new(&sdk_for(endpoint().url()).await);
    let mut shards = Vec::new();
    let mut start = None;
    loop {
        let page = streams
            .describe_stream()
            .stream_arn(&arn)
            .set_exclusive_start_shard_id(start.take())
            .send()
            .await
            .expect("DescribeStream");
        let desc = page.stream_description().expect("stream description");
        shards.extend(
            desc.shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_owned)),
        );
        match desc.last_evaluated_shard_id() {
            Some(last) => start = Some(last.to_owned()),
            None => break,
        }
    }
    let mut out = Vec::new();
    for shard in shards {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator")
            .shard_iterator;
        while let Some(it) = iterator {
            let page = streams
                .get_records()
                .shard_iterator(it)
                .limit(1000)
                .send()
                .await
                .expect("GetRecords");
            if page.records().is_empty() {
                break;
            }
            out.extend(page.records().iter().map(|r| lambda_record(r, &arn)));
            iterator = page.next_shard_iterator;
        }
    }
    out
}

pub(super) fn new_sk(record: &Value) -> Option<&str> {
    record["dynamodb"]["NewImage"]["SK"]["S"].as_str()
}

pub(super) fn is_bucket_of(record: &Value, entity: &str) -> bool {
    let pk = record["dynamodb"]["Keys"]["PK"]["S"].as_str().unwrap_or("");
    record["dynamodb"]["Keys"]["SK"]["S"] == keys::STATE_SK
        && keys::parse_bucket_pk(pk).is_some_and(|b| b.entity_id == entity)
}

/// Whether the record changes a consumption counter (`b_{limit}_tc`): the records whose usage
/// the aggregator must count.
fn carries_usage(record: &Value) -> bool {
    let change = &record["dynamodb"];
    let tc = |image: &Value, attr: &str| image[attr]["N"].as_str().map(str::to_owned);
    change["NewImage"].as_object().is_some_and(|new| {
        new.keys()
            .filter(|a| a.starts_with("b_") && a.ends_with("_tc") && *a != "b_wcu_tc")
            .any(|a| {
                let old = tc(&change["OldImage"], a).unwrap_or_else(|| "0".into());
                tc(&change["NewImage"], a) != Some(old)
            })
    })
}

/// The aggregator's own items: snapshots and watermarks.
async fn aggregator_items(table: &TestTable) -> BTreeMap<(String, String), Item> {
    table
        .scan_all()
        .await
        .into_iter()
        .filter(|it| {
            get_s(it, "SK")
                .is_some_and(|sk| sk.starts_with("#USAGE#") || sk.starts_with("#AGGREGATOR#"))
        })
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

/// The `(rpm, tpm)` the function's embedded-metric lines report per entity of namespace
/// `ns`, summed over every line written so far.
fn emf_totals(output: &str, ns: &str) -> BTreeMap<String, (i64, i64)> {
    let mut totals: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for line in output.lines() {
        let Ok(parsed) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if !parsed["_aws"].is_object() {
            continue;
        }
        let directive = &parsed["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(
            directive["Namespace"],
            dynalimit_aggregator::emf::METRIC_NAMESPACE
        );
        assert_eq!(parsed["NamespaceId"], ns, "{line}");
        assert_eq!(parsed["Resource"], RESOURCE, "{line}");
        let entity = parsed["Entity"].as_str().expect("Entity").to_owned();
        let t = totals.entry(entity).or_default();
        t.0 += parsed["rpm"].as_i64().unwrap_or(0);
        t.1 += parsed["tpm"].as_i64().unwrap_or(0);
    }
    totals
}

/// Deletes `items` (by their keys) from the table.
async fn delete_items(table: &TestTable, items: &[Item]) {
    for it in items {
        table
            .client()
            .delete_item()
            .table_name(table.name())
            .set_key(Some(key(
                get_s(it, "PK").unwrap(),
                get_s(it, "SK").unwrap(),
            )))
            .send()
            .await
            .unwrap();
    }
}

/// Invokes the function with each batch in turn and returns the identifiers of the failed
/// records, failing fast (with the function's output) if the process ends.
pub(super) async fn deliver(
    api: &RuntimeApi,
    function: &mut Function,
    batches: &[Vec<Value>],
) -> BTreeSet<String> {
    let mut failed = BTreeSet::new();
    for batch in batches {
        let event = json!({ "Records": batch });
        let invocation = api.invoke(&event);
        tokio::pin!(invocation);
        let (status, answer) = loop {
            tokio::select! {
                answer = &mut invocation => break answer,
                () = tokio::time::sleep(Duration::from_millis(100)) => {
                    if let Some(status) = function.exited() {
                        panic!("the bootstrap exited ({status}):\n{}", function.output());
                    }
                }
            }
        };
        assert_eq!(status, 200, "{answer}\n{}", function.output());
        let failures = answer["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("not a partial batch response: {answer}"));
        failed.extend(failures.iter().map(|f| {
            f["itemIdentifier"]
                .as_str()
                .expect("itemIdentifier")
                .to_owned()
        }));
    }
    failed
}

/// Every hourly and every daily snapshot of each of `entities` sums to what it consumed.
async fn assert_totals(
    repo: &Repository,
    entities: &[&str],
    expected: &BTreeMap<&str, (i64, i64)>,
) {
    for window in ["hourly", "daily"] {
        for &entity in entities {
            let summary = repo
                .usage_summary(&UsageQuery::entity(entity).with_window(window))
                .await
                .unwrap();
            let (rpm, tpm) = expected[entity];
            let want = counters(&[("rpm", rpm), ("tpm", tpm)]);
            assert_eq!(summary.total, want, "{entity} {window}");
        }
    }
}

/// cargo-lambda and the aggregator's `bootstrap` built with it; `None` (the test is skipped)
/// without cargo-lambda.
pub(super) async fn built() -> Option<(CargoLambda, std::path::PathBuf)> {
    let cargo_lambda = CargoLambda::find()?;
    let builder = cargo_lambda.clone();
    let bootstrap = tokio::task::spawn_blocking(move || builder.build_aggregator())
        .await
        .expect("build");
    Some((cargo_lambda, bootstrap))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bootstrap_counts_stream_events_under_the_runtime_api_with_the_template_environment() {
    let Some((cargo_lambda, bootstrap)) = built().await else {
        return;
    };
    let table = dynalimit_tests::table().await;
    // Acquires stay clear of hour 00, whose snapshot item is also the day's.
    let repo = table
        .builder()
        .namespace("lambda")
        .clock(dynalimit_tests::clock_clear_of_midnight())
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_owned();

    // Real acquires. mallory's usage cannot be counted: a daily snapshot item of hers holds a
    // counter that is not a number (today's and tomorrow's, so a run across midnight is
    // covered), so DynamoDB refuses the snapshot transaction that adds to it.
    repo.set_resource_defaults(
        RESOURCE,
        &[
            Limit::per_minute("rpm", 1000),
            Limit::per_minute("tpm", 1_000_000),
        ],
    )
    .await
    .unwrap();
    let now = repo.clock().epoch_millis();
    let corrupt: Vec<Item> = [now, now + 86_400_000]
        .into_iter()
        .map(|t| {
            let mut it = key(
                keys::entity_pk(&ns, "mallory"),
                snapshot_sk(RESOURCE, &SnapshotWindow::Daily.key(t)),
            );
            it.insert("rpm".into(), s("not a number"));
            it
        })
        .collect();
    for it in &corrupt {
        table
            .client()
            .put_item()
            .table_name(table.name())
            .set_item(Some(it.clone()))
            .send()
            .await
            .unwrap();
    }
    let limiter = RateLimiter::new(repo.clone());
    let mut expected: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for (i, entity) in [
        "alice", "bob", "alice", "mallory", "alice", "bob", "mallory",
    ]
    .into_iter()
    .enumerate()
    {
        let tpm = 100 + i as i64;
        let lease = limiter
            .acquire(entity, RESOURCE, [("rpm", 1), ("tpm", tpm)])
            .await
            .expect("admitted");
        lease.commit().await.unwrap();
        let e = expected.entry(entity).or_default();
        e.0 += 1;
        e.1 += tpm;
    }
    limiter.settle().await;

    // What the event source mapping delivers: the stream's records through the template's
    // filter, in batches of the template's default size.
    let t = template();
    let patterns = stream_filters(&t, &BTreeMap::new());
    let passes = |r: &Value| patterns.iter().any(|p| filter_matches(p, r));
    let records = stream_records(&table).await;
    let delivered: Vec<Value> = records.iter().filter(|r| passes(r)).cloned().collect();
    assert!(delivered.iter().all(|r| new_sk(r) == Some(keys::STATE_SK)));
    for r in &records {
        if new_sk(r) == Some(keys::STATE_SK) {
            assert!(passes(r), "a bucket write is filtered out: {r}");
        }
    }
    assert!(
        records.len() > delivered.len(),
        "the table's other writes (config, registry, the corrupt snapshots) are not delivered"
    );
    let batch_size: usize = parameter_default(&t, "StreamBatchSize").parse().unwrap();
    let batches: Vec<Vec<Value>> = delivered
        .chunks(batch_size)
        .map(<[Value]>::to_vec)
        .collect();
    let poisoned: BTreeSet<String> = delivered
        .iter()
        .filter(|r| is_bucket_of(r, "mallory") && carries_usage(r))
        .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned())
        .collect();
    assert!(!poisoned.is_empty());

    // The function: the template's environment for default parameters, the emulator's
    // Runtime API, and DynamoDB Local.
    let api = RuntimeApi::start(&cargo_lambda);
    let resources = BTreeMap::from([("RateLimitsTable", table.name().to_owned())]);
    // Tenant metrics on (the parameter's only change to the environment).
    let metrics_on = BTreeMap::from([("EnableTenantMetrics", "true")]);
    let mut env: Vec<(String, String)> =
        function_environment_with(&t, "AggregatorFunction", &resources, &metrics_on)
            .into_iter()
            .collect();
    env.extend(api.runtime_environment(&parameter_default(&t, "LambdaMemorySize")));
    env.extend(endpoint_environment());
    let mut function = Function::spawn(&bootstrap, &env);

    // First delivery: everything but mallory's usage is counted; exactly her records with
    // usage come back as partial batch failures.
    let failed = deliver(&api, &mut function, &batches).await;
    assert_eq!(failed, poisoned, "{}", function.output());
    assert_totals(&repo, &["alice", "bob"], &expected).await;
    let after_first = aggregator_items(&table).await;
    for it in &corrupt {
        let stored = &after_first[&(
            get_s(it, "PK").unwrap().to_owned(),
            get_s(it, "SK").unwrap().to_owned(),
        )];
        assert_eq!(stored, it, "the refused snapshot is untouched");
    }
    assert!(
        !after_first.keys().any(
            |(pk, sk)| *pk == keys::entity_pk(&ns, "mallory") && sk.starts_with("#AGGREGATOR#")
        ),
        "mallory's usage is not marked as counted"
    );
    // The metrics report what was counted: alice's and bob's usage, none of mallory's.
    let counted_only = |names: &[&str]| -> BTreeMap<String, (i64, i64)> {
        names
            .iter()
            .map(|e| ((*e).to_owned(), expected[e]))
            .collect()
    };
    assert_eq!(
        emf_totals(&function.output(), &ns),
        counted_only(&["alice", "bob"])
    );

    // Second delivery of the same batches: the same failures, no change, no new metrics.
    let again = deliver(&api, &mut function, &batches).await;
    assert_eq!(again, poisoned);
    assert_eq!(aggregator_items(&table).await, after_first);
    assert_eq!(
        emf_totals(&function.output(), &ns),
        counted_only(&["alice", "bob"])
    );

    // The corruption removed, the retried records are counted once; the rest stays as it was.
    delete_items(&table, &corrupt).await;
    let retried = deliver(&api, &mut function, &batches).await;
    assert!(retried.is_empty(), "{retried:?}");
    assert_totals(&repo, &["alice", "bob", "mallory"], &expected).await;
    assert_eq!(
        emf_totals(&function.output(), &ns),
        counted_only(&["alice", "bob", "mallory"])
    );

    // Lambda's log format applies: with the template's LoggingConfig every line is JSON, a
    // log event or an embedded-metric line.
    let output = function.output();
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.iter().any(|l| l.contains("batch processed")),
        "{output}"
    );
    for line in lines {
        let parsed: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            parsed["level"].is_string() || parsed["_aws"].is_object(),
            "{line}"
        );
    }
    assert!(function.exited().is_none(), "the function keeps serving");
}

/// The removal records of audit items in the table's stream, in stream order.
async fn audit_removals(table: &TestTable) -> Vec<Value> {
    stream_records(table)
        .await
        .into_iter()
        .filter(|r| {
            r["eventName"] == "REMOVE"
                && r["dynamodb"]["Keys"]["SK"]["S"]
                    .as_str()
                    .is_some_and(|sk| sk.starts_with(keys::AUDIT_SK_PREFIX))
        })
        .collect()
}

/// Every object of `bucket`: key and body.
async fn objects(s3: &aws_sdk_s3::Client, bucket: &str) -> BTreeMap<String, Vec<u8>> {
    let listed = s3
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("ListObjectsV2");
    let mut out = BTreeMap::new();
    for o in listed.contents() {
        let key = o.key().expect("key").to_owned();
        let body = s3
            .get_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .expect("GetObject")
            .body
            .collect()
            .await
            .expect("body")
            .into_bytes()
            .to_vec();
        out.insert(key, body);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_audit_events_are_archived_once_each_under_redelivery() {
    let Some((cargo_lambda, bootstrap)) = built().await else {
        return;
    };
    let Some(moto) = dynalimit_tests::moto::MotoServer::start() else {
        return;
    };
    let table = dynalimit_tests::table().await;
    let repo = table.builder().namespace("archive").open().await.unwrap();
    let ns = repo.namespace_id().to_owned();

    // Real audit events: a resource's defaults, three entities' limits. (Not entity
    // creations: DynamoDB Local's stream spells their empty metadata map `{}`, which the
    // Streams SDK cannot read; the Lambda event source is not affected.)
    repo.set_resource_defaults(RESOURCE, &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    for id in ["alice", "bob", "carol"] {
        repo.set_limits(id, RESOURCE, &[Limit::per_minute("rpm", 5)])
            .await
            .unwrap();
    }
    let stored: Vec<Item> = table
        .scan_all()
        .await
        .into_iter()
        .filter(|it| get_s(it, "SK").is_some_and(|sk| sk.starts_with(keys::AUDIT_SK_PREFIX)))
        .collect();
    assert!(stored.len() >= 4, "{stored:?}");

    // They expire: DynamoDB's TTL deletes them, and its stream records say so with the
    // service's identity. DynamoDB Local does not expire items, so the test deletes them and
    // gives the records that identity; the last is a writer's delete and keeps none.
    delete_items(&table, &stored).await;
    let mut removals = audit_removals(&table).await;
    assert_eq!(removals.len(), stored.len());
    let written_off = removals.pop().expect("a writer's delete");
    for r in &mut removals {
        r["userIdentity"] = json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
    }
    removals.push(written_off.clone());

    // Through the template's filter with the archive on: the expiries alone.
    let t = template();
    let on = BTreeMap::from([
        ("EnableAuditArchival", "true"),
        ("AggregatorCodeKey", "aggregator/test.zip"),
    ]);
    let patterns = stream_filters(&t, &on);
    let passes = |r: &Value| patterns.iter().any(|p| filter_matches(p, r));
    let delivered: Vec<Value> = removals.iter().filter(|r| passes(r)).cloned().collect();
    assert_eq!(delivered.len(), stored.len() - 1);
    assert!(!passes(&written_off));
    let sequence = |r: &Value| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned();
    let expired: BTreeSet<String> = delivered.iter().map(sequence).collect();

    let s3 = moto.s3().await;
    let bucket = "dynalimit-audit-archive";
    s3.create_bucket().bucket(bucket).send().await.unwrap();

    let api = RuntimeApi::start(&cargo_lambda);
    let spawn = |bucket: &str| {
        let resources = BTreeMap::from([
            ("RateLimitsTable", table.name().to_owned()),
            ("AuditArchiveBucket", bucket.to_owned()),
        ]);
        let mut env: Vec<(String, String)> =
            function_environment_with(&t, "AggregatorFunction", &resources, &on)
                .into_iter()
                .collect();
        env.extend(api.runtime_environment(&parameter_default(&t, "LambdaMemorySize")));
        env.extend(endpoint_environment());
        env.push(("AWS_ENDPOINT_URL_S3".to_owned(), moto.url().to_owned()));
        Function::spawn(&bootstrap, &env)
    };

    // A bucket that is not there: every expiry comes back to be delivered again, nothing
    // is written.
    let mut function = spawn("no-such-archive");
    let failed = deliver(&api, &mut function, std::slice::from_ref(&delivered)).await;
    assert_eq!(failed, expired, "{}", function.output());
    drop(function);
    assert!(objects(&s3, bucket).await.is_empty());

    // The stack's bucket: one object per expired event, keyed by the event, holding it.
    let mut function = spawn(bucket);
    let failed = deliver(&api, &mut function, std::slice::from_ref(&delivered)).await;
    assert!(failed.is_empty(), "{failed:?}\n{}", function.output());
    let first = objects(&s3, bucket).await;
    let mut want = BTreeMap::new();
    for it in &stored[..stored.len() - 1] {
        let event = dynalimit_format::audit::AuditEvent::from_item(it).unwrap();
        let object_key = dynalimit_aggregator::archive::object_key(
            &ns,
            &event.entity_id,
            &event.event_id,
            &event.timestamp,
        );
        want.insert(object_key, event);
    }
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (object_key, body) in &first {
        let events = dynalimit_aggregator::archive::parse_object(body).unwrap();
        let event = &want[object_key];
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_id, event.event_id);
        assert_eq!(events[0].entity_id, event.entity_id);
        assert_eq!(events[0].action, event.action);
        assert_eq!(events[0].timestamp, event.timestamp);
        assert_eq!(events[0].namespace.as_deref(), Some(ns.as_str()));
    }

    // Delivered again whole, then bisected into single records: the same objects, byte for
    // byte, and no other.
    let singles: Vec<Vec<Value>> = delivered.iter().map(|r| vec![r.clone()]).collect();
    for batches in [vec![delivered.clone()], singles] {
        let failed = deliver(&api, &mut function, &batches).await;
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(objects(&s3, bucket).await, first);
    }
    assert!(
        function.output().contains("\"archived\""),
        "{}",
        function.output()
    );
}
