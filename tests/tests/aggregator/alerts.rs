//! Quota threshold alerts as Lambda runs them: the `bootstrap` built with cargo-lambda, with
//! the template's environment for an alert bus, invoked through cargo-lambda's Runtime API
//! emulator with the stream records of real acquires on DynamoDB Local, publishing to a moto
//! EventBridge bus whose rule routes the events to an SQS queue the test reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dynalimit::{Limit, RateLimiter};
use dynalimit_aggregator::Aggregator;
use dynalimit_aggregator::alerts::Alerts;
use dynalimit_core::schedule::{ResetSchedule, Zone};
use dynalimit_core::{Clock as _, ManualClock};
use dynalimit_format::item::{Item, get_s, n, s};
use dynalimit_repository::RequestCounter;
use dynalimit_tests::lambda::{Function, RuntimeApi, endpoint_environment};
use dynalimit_tests::moto::MotoServer;
use dynalimit_tests::template::{
    filter_matches, function_environment_with, parameter_default, stream_filters, template,
};
use serde_json::Value;

use super::bootstrap::{built, deliver, is_bucket_of, stream_records};

const RESOURCE: &str = "gpt-4";

fn sequence(r: &Value) -> String {
    r["dynamodb"]["SequenceNumber"]
        .as_str()
        .expect("a sequence number")
        .to_owned()
}

/// The alert markers of the table: `(entity, sort key)`.
async fn markers(table: &dynalimit_tests::TestTable) -> BTreeSet<(String, String)> {
    table
        .scan_all()
        .await
        .into_iter()
        .filter_map(|it| {
            let sk = get_s(&it, "SK").filter(|sk| sk.starts_with("#ALERTED#"))?;
            Some((get_s(&it, "entity_id")?.to_owned(), sk.to_owned()))
        })
        .collect()
}

/// cargo-lambda, the built function and a private moto server for the event sink; `None`
/// (the reason printed) when a test cannot have them.
async fn function_and_bus() -> Option<(
    dynalimit_tests::lambda::CargoLambda,
    std::path::PathBuf,
    MotoServer,
)> {
    let (cargo_lambda, bootstrap) = built().await?;
    let moto = MotoServer::start()?;
    if std::env::var("DYNALIMIT_TEST_AWS_ENDPOINT").is_ok_and(|u| !u.is_empty()) {
        eprintln!("skipped: the event sink needs a private moto server");
        return None;
    }
    Some((cargo_lambda, bootstrap, moto))
}

/// The built function with the template's environment for alert bus `bus` on `table`,
/// publishing to moto's EventBridge.
fn spawn_with_bus(
    t: &Value,
    api: &RuntimeApi,
    bootstrap: &std::path::Path,
    (table, moto): (&dynalimit_tests::TestTable, &MotoServer),
    bus: &str,
) -> Function {
    let on = BTreeMap::from([
        ("AlertEventBusName", bus),
        ("AggregatorCodeKey", "aggregator/test.zip"),
    ]);
    let resources = BTreeMap::from([("RateLimitsTable", table.name().to_owned())]);
    let mut env: Vec<(String, String)> =
        function_environment_with(t, "AggregatorFunction", &resources, &on)
            .into_iter()
            .collect();
    assert!(
        env.contains(&("DYNALIMIT_ALERT_EVENT_BUS".to_owned(), bus.to_owned())),
        "{env:?}"
    );
    env.extend(api.runtime_environment(&parameter_default(t, "LambdaMemorySize")));
    env.extend(endpoint_environment());
    env.push((
        "AWS_ENDPOINT_URL_EVENTBRIDGE".to_owned(),
        moto.url().to_owned(),
    ));
    Function::spawn(bootstrap, &env)
}

#[tokio::test(flavor = "multi_thread")]
async fn each_threshold_is_published_once_per_period_under_redelivery_and_refusal() {
    let Some((cargo_lambda, bootstrap, moto)) = function_and_bus().await else {
        return;
    };
    let table = dynalimit_tests::table().await;
    let repo = table
        .builder()
        .namespace("alerts")
        .clock(dynalimit_tests::clock_clear_of_midnight())
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(
        RESOURCE,
        &[
            Limit::per_minute("rpm", 1000),
            Limit::quota_per_month("tpd", 10, Zone::utc()),
        ],
    )
    .await
    .unwrap();
    repo.set_alert_thresholds("acme", RESOURCE, "tpd", &[50, 100])
        .await
        .unwrap();
    repo.set_alert_thresholds("beta", RESOURCE, "tpd", &[100])
        .await
        .unwrap();
    let month_start = ResetSchedule::parse("0 0 1 * *", Zone::utc())
        .unwrap()
        .prev_edge(repo.clock().epoch_millis())
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let spend = |entity: &'static str, tokens: i64| {
        let limiter = limiter.clone();
        async move {
            let lease = limiter
                .acquire(entity, RESOURCE, [("rpm", 1), ("tpd", tokens)])
                .await
                .expect("admitted");
            lease.commit().await.unwrap();
            limiter.settle().await;
        }
    };

    // The function with the template's environment for an alert bus, DynamoDB Local, and
    // moto's EventBridge.
    let t = template();
    let api = RuntimeApi::start(&cargo_lambda);
    let spawn = |bus: &str| spawn_with_bus(&t, &api, &bootstrap, (&table, &moto), bus);
    let patterns = stream_filters(&t, &BTreeMap::new());
    let mut seen = BTreeSet::new();
    let mut fresh = |records: Vec<Value>, entity: &str| -> Vec<Value> {
        records
            .into_iter()
            .filter(|r| patterns.iter().any(|p| filter_matches(p, r)))
            .filter(|r| is_bucket_of(r, entity) && seen.insert(sequence(r)))
            .collect()
    };

    let sink = moto.event_sink("default");
    let mut function = spawn("default");

    // 3 of 10: nothing. 6 of 10: the 50 % threshold. 10 of 10: the 100 % one.
    let mut delivered = Vec::new();
    let mut published = Vec::new();
    for (tokens, want) in [(3, vec![]), (3, vec![50]), (4, vec![100])] {
        spend("acme", tokens).await;
        let batch = fresh(stream_records(&table).await, "acme");
        assert!(!batch.is_empty());
        let failed = deliver(&api, &mut function, std::slice::from_ref(&batch)).await;
        assert!(failed.is_empty(), "{failed:?}\n{}", function.output());
        delivered.extend(batch);
        let events = sink.drain();
        let levels: Vec<i64> = events
            .iter()
            .map(|e| e["detail"]["threshold_percent"].as_i64().unwrap())
            .collect();
        assert_eq!(levels, want, "{events:?}\n{}", function.output());
        published.extend(events);
    }
    for e in &published {
        assert_eq!(e["source"], dynalimit_aggregator::alerts::EVENT_SOURCE);
        assert_eq!(e["detail-type"], dynalimit_aggregator::alerts::DETAIL_TYPE);
        let d = &e["detail"];
        assert_eq!(d["namespace_id"], ns.as_str());
        assert_eq!(d["entity_id"], "acme");
        assert_eq!(d["resource"], RESOURCE);
        assert_eq!(d["limit"], "tpd");
        assert_eq!(d["grant"], 10);
        assert_eq!(d["period_start_ms"], month_start);
    }
    assert_eq!(published[0]["detail"]["consumed"], 6);
    assert_eq!(published[1]["detail"]["consumed"], 10);
    let acme_markers = markers(&table).await;
    assert_eq!(
        acme_markers,
        [50, 100]
            .into_iter()
            .map(|l| (
                "acme".to_owned(),
                format!("#ALERTED#{RESOURCE}#tpd#{l}#{month_start}")
            ))
            .collect()
    );

    // Delivered again, whole and then one record at a time, by a new process (nothing
    // remembered): nothing more is published.
    drop(function);
    let mut function = spawn("default");
    let singles: Vec<Vec<Value>> = delivered.iter().map(|r| vec![r.clone()]).collect();
    for batches in [vec![delivered.clone()], singles] {
        let failed = deliver(&api, &mut function, &batches).await;
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(sink.drain(), Vec::<Value>::new(), "{}", function.output());
    }
    assert_eq!(markers(&table).await, acme_markers);
    drop(function);

    // A bus EventBridge does not know refuses the event: the record comes back to be
    // delivered again and the marker is undone, so the next delivery publishes it.
    spend("beta", 10).await;
    let batch = fresh(stream_records(&table).await, "beta");
    let mut function = spawn("no-such-bus");
    let failed = deliver(&api, &mut function, std::slice::from_ref(&batch)).await;
    let last = sequence(batch.last().unwrap());
    assert_eq!(failed, BTreeSet::from([last]), "{}", function.output());
    assert!(
        function.output().contains("refused by EventBridge"),
        "{}",
        function.output()
    );
    assert_eq!(markers(&table).await, acme_markers, "the marker is undone");
    drop(function);
    let mut function = spawn("default");
    for _ in 0..2 {
        let failed = deliver(&api, &mut function, std::slice::from_ref(&batch)).await;
        assert!(failed.is_empty(), "{failed:?}\n{}", function.output());
    }
    let events = sink.drain();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["detail"]["entity_id"], "beta");
    assert_eq!(events[0]["detail"]["threshold_percent"], 100);
    assert_eq!(markers(&table).await.len(), 3);
}

/// A bucket item with the monthly quota `tpd` (10 tokens) beside `rpm` and `tpm`, and one
/// without it.
fn quota_bucket(ns: &str, entity: &str, rf: i64, tpd_left: i64) -> Item {
    let mut it = super::bucket_item(ns, entity, RESOURCE, 0, rf);
    for (field, v) in [
        ("tk", tpd_left),
        ("cp", 10_000),
        ("ra", 0),
        ("rp", 1000),
        ("tc", 10_000 - tpd_left),
    ] {
        it.insert(format!("b_tpd_{field}"), n(v));
    }
    let monthly = ResetSchedule::parse("0 0 1 * *", Zone::utc()).unwrap();
    it.insert(
        "b_tpd_rsched".into(),
        s(dynalimit_format::schedule::encode_reset(&monthly).unwrap()),
    );
    it.insert("sched_tz".into(), s("UTC"));
    it
}

/// A consuming write of one `rpm` token after `image`.
fn consumed(image: &Item, rf: i64) -> Item {
    let mut next = image.clone();
    next.insert("rf".into(), n(rf));
    let tc = dynalimit_format::item::get_i64(image, "b_rpm_tc").unwrap();
    next.insert("b_rpm_tc".into(), n(tc + 1000));
    next
}

#[tokio::test]
async fn thresholds_are_read_once_a_minute_per_bucket_with_a_quota_and_never_without_a_bus() {
    let table = dynalimit_tests::table().await;
    let ns = "ns-alerts";
    let counter = RequestCounter::default();
    let client = dynalimit_tests::client_with(Some(counter.clone())).await;
    let clock = ManualClock::new(1_794_700_800_000);
    let sdk = super::sdk_for(dynalimit_tests::endpoint().url()).await;
    let settings = super::counting_only(table.name());
    let with_bus =
        Aggregator::with_clock(client.clone(), settings.clone(), Arc::new(clock.clone()))
            .with_alerts(Alerts::new(&sdk, "default"));
    let without = Aggregator::with_clock(client, settings, Arc::new(clock.clone()));
    let batch = |seq: u64| {
        let rf = clock.epoch_millis();
        let q = quota_bucket(ns, "acme", rf - 1000, 5_000);
        let plain = super::bucket_item(ns, "bob", RESOURCE, 0, rf - 1000);
        let mut records = super::records_of(&[q.clone(), consumed(&q, rf)], seq);
        records.extend(super::records_of(
            &[plain.clone(), consumed(&plain, rf)],
            seq + 1,
        ));
        records
    };
    let reads = || counter.snapshot().get("BatchGetItem").copied().unwrap_or(0);

    // No bus: the quota's thresholds are never read (the watermarks are: one BatchGetItem per
    // entity).
    counter.reset();
    let report = without.process(&batch(100)).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(reads(), 2, "{:?}", counter.snapshot());

    // With a bus: one read of acme's thresholds (none are set: nothing published); bob has no
    // quota and costs nothing more.
    counter.reset();
    let report = with_bus.process(&batch(200)).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.alerts_published, 0);
    assert_eq!(reads(), 3, "{:?}", counter.snapshot());
    // Within the minute: from the cache.
    clock.advance(std::time::Duration::from_secs(59));
    counter.reset();
    with_bus.process(&batch(300)).await;
    assert_eq!(reads(), 2, "{:?}", counter.snapshot());
    // A minute on: read again.
    clock.advance(std::time::Duration::from_secs(2));
    counter.reset();
    with_bus.process(&batch(400)).await;
    assert_eq!(reads(), 3, "{:?}", counter.snapshot());
    assert_eq!(
        counter.snapshot().get("PutItem"),
        None,
        "no marker without a crossing"
    );
}

#[tokio::test]
async fn the_stream_runner_publishes_to_the_bus_its_settings_name() {
    let sdk = super::sdk_for(dynalimit_tests::endpoint().url()).await;
    let mut settings = super::counting_only("t");
    let runner = dynalimit_aggregator::runner::Runner::from_sdk_config(
        &sdk,
        settings.clone(),
        dynalimit_aggregator::runner::RunnerOptions::default(),
    );
    assert!(runner.aggregator().alerts().is_none());
    settings.alert_event_bus = Some("ops-alerts".into());
    let runner = dynalimit_aggregator::runner::Runner::from_sdk_config(
        &sdk,
        settings,
        dynalimit_aggregator::runner::RunnerOptions::default(),
    );
    assert_eq!(
        runner.aggregator().alerts().map(Alerts::bus),
        Some("ops-alerts")
    );
}

/// The refusal items of the table's stream that the template's filter passes with an alert
/// bus: `(entity, record)`.
fn refusal_records(records: Vec<Value>, patterns: &[Value]) -> Vec<(String, Value)> {
    records
        .into_iter()
        .filter(|r| patterns.iter().any(|p| filter_matches(p, r)))
        .filter_map(|r| {
            let sk = r["dynamodb"]["Keys"]["SK"]["S"].as_str()?;
            let pk = r["dynamodb"]["Keys"]["PK"]["S"].as_str()?;
            let b = dynalimit_format::keys::parse_bucket_pk(pk)?;
            sk.starts_with("#REFUSED#")
                .then(|| (b.entity_id, r.clone()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_limit_refusing_for_n_minutes_is_published_once_and_a_gap_publishes_nothing() {
    let Some((cargo_lambda, bootstrap, moto)) = function_and_bus().await else {
        return;
    };
    let table = dynalimit_tests::table().await;
    // The limiter's clock starts 20 minutes ago, at the start of a minute: the function
    // (on the real clock) evaluates minutes of the last hour.
    let m0 = dynalimit_core::SystemClock.epoch_millis() / 60_000 - 20;
    let clock = ManualClock::new(m0 * 60_000 + 1_000);
    let repo = table
        .builder()
        .namespace("refusing")
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_owned();
    for entity in ["acme", "beta"] {
        assert_eq!(
            repo.set_refusal_alert(entity, RESOURCE, "rph", 3)
                .await
                .unwrap(),
            3
        );
    }
    let limiter = RateLimiter::new(repo.clone());
    let acquire = |entity: &'static str| {
        let limiter = limiter.clone();
        async move {
            let outcome = limiter
                .acquire(entity, RESOURCE, [("rph", 1)])
                .limits([Limit::per_hour("rph", 1)])
                .await;
            let admitted = match outcome {
                Ok(lease) => {
                    lease.commit().await.unwrap();
                    true
                }
                Err(dynalimit::Error::Rejected(_)) => false,
                Err(e) => panic!("{e}"),
            };
            limiter.settle().await;
            admitted
        }
    };
    let at_minute = |k: i64| clock.set_epoch_millis((m0 + k) * 60_000 + 1_000);

    let t = template();
    let on = BTreeMap::from([
        ("AlertEventBusName", "default"),
        ("AggregatorCodeKey", "aggregator/test.zip"),
    ]);
    let patterns = stream_filters(&t, &on);
    let api = RuntimeApi::start(&cargo_lambda);
    let spawn = || spawn_with_bus(&t, &api, &bootstrap, (&table, &moto), "default");
    let sink = moto.event_sink("default");
    let mut function = spawn();
    let mut seen = BTreeSet::new();
    let mut delivered = Vec::new();

    // Both entities spend their one token of the hour at minute 0.
    at_minute(0);
    for entity in ["acme", "beta"] {
        assert!(acquire(entity).await, "{entity} admitted");
    }
    // acme refused in minutes 0, 1, 2, 3; beta in minutes 0, 1, 3, 4 (a gap at 2).
    for (k, entities) in [
        (0, vec!["acme", "beta"]),
        (1, vec!["acme", "beta"]),
        (2, vec!["acme"]),
        (3, vec!["acme", "beta"]),
        (4, vec!["beta"]),
    ] {
        at_minute(k);
        for entity in entities {
            for _ in 0..3 {
                assert!(!acquire(entity).await, "{entity} refused in minute {k}");
            }
        }
        // Every refusal INSERT so far, delivered once.
        let batch: Vec<Value> = refusal_records(stream_records(&table).await, &patterns)
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| seen.insert(sequence(r)))
            .collect();
        let failed = deliver(&api, &mut function, std::slice::from_ref(&batch)).await;
        assert!(failed.is_empty(), "{failed:?}\n{}", function.output());
        delivered.extend(batch);
        let events = sink.drain();
        // acme crosses at its third minute (2), from minute 0, and only then.
        let want = usize::from(k == 2);
        assert_eq!(
            events.len(),
            want,
            "minute {k}: {events:?}\n{}",
            function.output()
        );
        for e in &events {
            assert_eq!(e["source"], dynalimit_aggregator::alerts::EVENT_SOURCE);
            assert_eq!(
                e["detail-type"],
                dynalimit_aggregator::refusing::DETAIL_TYPE
            );
            let d = &e["detail"];
            assert_eq!(d["namespace_id"], ns.as_str());
            assert_eq!(d["entity_id"], "acme");
            assert_eq!(d["resource"], RESOURCE);
            assert_eq!(d["limit"], "rph");
            assert_eq!(d["refusing_minutes"], 3);
            assert_eq!(d["first_minute_ms"], m0 * 60_000);
            assert_eq!(d["minute_ms"], (m0 + 2) * 60_000);
        }
    }
    // One item per entity and refusing minute (each process reports a minute once), and
    // one marker, keyed by the run's first minute.
    assert_eq!(delivered.len(), 8, "{delivered:?}");
    let marked = markers(&table).await;
    assert_eq!(
        marked,
        BTreeSet::from([(
            "acme".to_owned(),
            format!("#ALERTED#{RESOURCE}#rph#refusing#{m0:010}")
        )])
    );

    // Delivered again, whole and then one record at a time, by a new process: nothing more.
    drop(function);
    let mut function = spawn();
    let singles: Vec<Vec<Value>> = delivered.iter().map(|r| vec![r.clone()]).collect();
    for batches in [vec![delivered.clone()], singles] {
        let failed = deliver(&api, &mut function, &batches).await;
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(sink.drain(), Vec::<Value>::new(), "{}", function.output());
    }
    assert_eq!(markers(&table).await, marked);
}
