//! The metrics of `dynalimit::metrics`, read from a recorder after real acquires against
//! DynamoDB. A test binary of its own: the recorder is global to the process.

use std::collections::HashMap;
use std::sync::OnceLock;

use dynalimit::{Error, Limit, RateLimiter};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        snapshotter
    })
}

/// Every counter (name and sorted labels) with its value, and every histogram with the
/// number of samples recorded since the previous read (the recorder drains them).
fn read() -> HashMap<(String, Vec<(String, String)>), u64> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value): (CompositeKey, _, _, DebugValue)| {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let n = match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => n,
                (MetricKind::Histogram, DebugValue::Histogram(samples)) => samples.len() as u64,
                _ => return None,
            };
            Some(((key.key().name().to_owned(), labels), n))
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn acquires_rejections_lease_writes_and_cache_look_ups_are_recorded() {
    let _one = SERIAL.lock().await;
    snapshotter();
    let table = dynalimit_tests::table().await;
    let repo = table.repository("metrics").await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_hour("rph", 2)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let before = read();
    limiter
        .acquire("k", "gpt-4", [("rph", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    limiter
        .acquire("k", "gpt-4", [("rph", 1)])
        .await
        .unwrap()
        .rollback()
        .await
        .unwrap();
    let refused = limiter.acquire("k", "gpt-4", [("rph", 5)]).await;
    assert!(matches!(refused, Err(Error::Rejected(_))));
    let invalid = limiter.acquire("k", "bad#resource", [("rph", 1)]).await;
    assert!(matches!(invalid, Err(Error::Invalid(_))));
    for _ in 0..2 {
        repo.resolve_limits("k", "gpt-4").await.unwrap();
    }
    let after = read();
    let grew = |name: &str, pairs: &[(&str, &str)]| {
        let key = (name.to_owned(), labels(pairs));
        after.get(&key).copied().unwrap_or(0)
            - before
                .get(&key)
                .copied()
                .unwrap_or(0)
                .min(after.get(&key).copied().unwrap_or(0))
    };
    use dynalimit::metrics::*;
    assert_eq!(grew(ACQUIRES, &[("outcome", "admitted")]), 2);
    assert_eq!(grew(ACQUIRES, &[("outcome", "rejected")]), 1);
    assert_eq!(grew(ACQUIRES, &[("outcome", "invalid")]), 1);
    let samples = after.get(&(
        ACQUIRE_SECONDS.to_owned(),
        labels(&[("outcome", "admitted")]),
    ));
    assert_eq!(samples.copied(), Some(2), "two admitted acquires timed");
    assert_eq!(
        grew(REJECTED_LIMITS, &[("limit", "rph"), ("reason", "limits")]),
        1
    );
    assert_eq!(
        grew(LEASE_WRITES, &[("kind", "commit"), ("outcome", "ok")]),
        1
    );
    assert_eq!(
        grew(LEASE_WRITES, &[("kind", "rollback"), ("outcome", "ok")]),
        1
    );
    assert!(
        grew(CONFIG_CACHE, &[("result", "miss")]) >= 1,
        "the first resolution"
    );
    assert!(
        grew(CONFIG_CACHE, &[("result", "hit")]) >= 4,
        "the second, four slots"
    );
}

/// The tests of this binary read one global recorder, whose reads drain it: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One metric read: its name, sorted labels and value.
type Read = (String, Vec<(String, String)>, DebugValue);

/// Everything recorded since the previous read, by name and sorted labels.
fn snap() -> Vec<Read> {
    snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value): (CompositeKey, _, _, DebugValue)| {
            let mut l: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            l.sort();
            (key.key().name().to_owned(), l, value)
        })
        .collect()
}

/// A counter's increments in `snapshot`.
fn count(snapshot: &[Read], name: &str, pairs: &[(&str, &str)]) -> u64 {
    let wanted = labels(pairs);
    snapshot
        .iter()
        .filter(|(n, l, _)| n == name && *l == wanted)
        .map(|(_, _, v)| match v {
            DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

/// A histogram's values in `snapshot`.
fn values(snapshot: &[Read], name: &str, pairs: &[(&str, &str)]) -> Vec<f64> {
    let wanted = labels(pairs);
    snapshot
        .iter()
        .filter(|(n, l, _)| n == name && *l == wanted)
        .flat_map(|(_, _, v)| match v {
            DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[tokio::test]
async fn requests_per_acquire_contention_retries_unknown_outcomes_and_the_fast_path_are_recorded() {
    use dynalimit::metrics::*;
    use dynalimit_tests::fault::{FaultProxy, Lost};
    let _one = SERIAL.lock().await;
    snapshotter();
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    snap();
    let repo = proxy.repository(&table, "requests").await;
    assert!(
        repo.fast_path().is_some(),
        "the metrics interceptor keeps it"
    );
    repo.set_resource_defaults("gpt-4", &[Limit::per_hour("rph", 100)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let acquire = || async {
        let lease = limiter.acquire("requests-k", "gpt-4", [("rph", 1)]).await?;
        lease.commit().await
    };
    // Cold: the fast path, then the slow path's read and create; warm: one request.
    acquire().await.unwrap();
    acquire().await.unwrap();
    let seen = snap();
    let per_acquire = values(&seen, ACQUIRE_REQUESTS, &[("outcome", "admitted")]);
    assert!(
        per_acquire.contains(&1.0),
        "a warm acquire is one request: {per_acquire:?}"
    );
    assert!(
        per_acquire.iter().any(|v| *v >= 3.0),
        "a cold one: {per_acquire:?}"
    );
    assert!(count(&seen, DYNAMODB_REQUESTS, &[("operation", "UpdateItem")]) >= 2);
    assert!(
        count(
            &seen,
            DYNAMODB_REQUESTS,
            &[("operation", "TransactWriteItems")]
        ) >= 1
    );
    let fast = seen
        .iter()
        .find(|(n, _, _)| n == FAST_PATH)
        .map(|(_, _, v)| v);
    assert_eq!(fast, Some(&DebugValue::Gauge(1.0.into())));

    // A write that loses to a transaction is sent again.
    proxy.fail_next("UpdateItem", "TransactionConflictException", 1);
    acquire().await.unwrap();
    let seen = snap();
    assert_eq!(
        count(&seen, CONTENTION_RETRIES, &[("operation", "UpdateItem")]),
        1
    );
    // A write whose answer is lost after it was applied is not sent again.
    proxy.lose_after_applying("UpdateItem", None, Lost::Reset, 1);
    assert!(matches!(acquire().await, Err(Error::Unavailable { .. })));
    let seen = snap();
    assert_eq!(
        count(&seen, UNKNOWN_OUTCOMES, &[("operation", "UpdateItem")]),
        1
    );
}

/// Every span opened while it is the default subscriber: its name and fields (as recorded by
/// the time it closed).
#[derive(Clone, Default)]
struct Spans(std::sync::Arc<std::sync::Mutex<Vec<SpanSeen>>>);

/// A span's name and fields.
type SpanSeen = (String, HashMap<String, String>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        fields.insert("#id".to_owned(), id.into_u64().to_string());
        let mut spans = self.0.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().unwrap();
        let wanted = id.into_u64().to_string();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(_, f)| f["#id"] == wanted) {
            values.record(&mut Fields(fields));
        }
    }
}

/// The spans collector, the process's subscriber (an acquire runs on a task of its own, on
/// whichever thread: a thread-local default would miss it).
fn spans() -> &'static Spans {
    static SPANS: OnceLock<Spans> = OnceLock::new();
    SPANS.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let spans = Spans::default();
        let subscriber = tracing_subscriber::registry()
            .with(spans.clone())
            .with(tracing_subscriber::filter::LevelFilter::DEBUG);
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        spans
    })
}

#[tokio::test]
async fn each_acquire_its_dynamodb_requests_and_its_configuration_have_spans() {
    let _one = SERIAL.lock().await;
    let spans = spans();
    let table = dynalimit_tests::table().await;
    let repo = table.repository("spans").await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_hour("rph", 10)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    for _ in 0..2 {
        limiter
            .acquire("span-k", "gpt-4", [("rph", 1)])
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
    }
    repo.resolve_limits("span-k", "gpt-4").await.unwrap();
    let seen: Vec<SpanSeen> = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, f)| f.get("entity_id").map(String::as_str) == Some("span-k"))
        .cloned()
        .collect();
    let named = |name: &str| -> Vec<&HashMap<String, String>> {
        seen.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f)
            .collect()
    };
    let acquires = named("dynalimit.acquire");
    assert_eq!(acquires.len(), 2, "{seen:?}");
    assert!(
        acquires
            .iter()
            .all(|f| f["outcome"] == "admitted" && f["entity_id"] == "span-k")
    );
    let requests = named("dynalimit.dynamodb");
    let of = |operation: &str| {
        requests
            .iter()
            .filter(|f| f["operation"] == operation)
            .count()
    };
    // The cold acquire: a fast-path update that finds no bucket, the slow path's read and the
    // create; the warm one: one update.
    assert!(of("UpdateItem") >= 2, "{requests:?}");
    assert_eq!(of("BatchGetItem"), 1, "{requests:?}");
    assert_eq!(of("TransactWriteItems"), 1, "{requests:?}");
    assert!(
        requests
            .iter()
            .all(|f| f["resource"] == "gpt-4" && f.contains_key("outcome"))
    );
    assert!(
        requests
            .iter()
            .any(|f| f["operation"] == "UpdateItem" && f["outcome"] == "done")
    );
    let configs = named("dynalimit.config");
    assert!(
        configs
            .iter()
            .any(|f| f.get("source").map(String::as_str) == Some("resource")),
        "{configs:?}"
    );
}

#[tokio::test]
async fn requests_outside_the_bucket_store_carry_the_sdk_s_operation_spans() {
    let _one = SERIAL.lock().await;
    let spans = spans();
    let table = dynalimit_tests::table().await;
    let repo = table.repository("sdk-spans").await;
    let before = spans.0.lock().unwrap().len();
    repo.create_entity(dynalimit::NewEntity::new("sdk-span-e"))
        .await
        .unwrap();
    repo.set_limits("sdk-span-e", "gpt-4", &[Limit::per_hour("rph", 10)])
        .await
        .unwrap();
    repo.get_entity("sdk-span-e").await.unwrap();
    let methods: Vec<String> = spans.0.lock().unwrap()[before..]
        .iter()
        .filter(|(name, f)| {
            name.starts_with("DynamoDB.")
                && f.get("rpc.service").map(String::as_str) == Some("DynamoDB")
        })
        .filter_map(|(_, f)| f.get("rpc.method").cloned())
        .collect();
    // The entity's create and read, the configuration write: each its own span, named for
    // its operation.
    assert!(methods.iter().any(|m| m == "GetItem"), "{methods:?}");
    assert!(
        methods
            .iter()
            .any(|m| m == "TransactWriteItems" || m == "PutItem" || m == "UpdateItem"),
        "{methods:?}"
    );
    assert!(methods.len() >= 3, "{methods:?}");
}

#[tokio::test]
async fn index_results_of_another_namespace_are_skipped_and_counted() {
    use dynalimit::metrics::FOREIGN_INDEX_ITEMS;
    let _one = SERIAL.lock().await;
    snapshotter();
    let table = dynalimit_tests::table().await;
    let alpha = table.repository("alpha").await;
    let bravo = table.repository("bravo").await;
    let (a, b) = (alpha.namespace_id(), bravo.namespace_id());
    // An item of alpha's partition whose index key names bravo's resource.
    let start = "2026-03-10T10:00:00Z";
    dynalimit_tests::raw::put_raw(
        &table,
        &[
            ("PK", &format!("{a}/ENTITY#mallory")),
            ("SK", &format!("#USAGE#gpt-4#{start}")),
            ("entity_id", "mallory"),
            ("resource", "gpt-4"),
            ("window", "hourly"),
            ("window_start", start),
            ("GSI2PK", &format!("{b}/RESOURCE#gpt-4")),
            ("GSI2SK", &format!("USAGE#{start}#mallory")),
        ],
    )
    .await;
    let key = (
        FOREIGN_INDEX_ITEMS.to_owned(),
        labels(&[("index", "GSI2"), ("reason", "namespace")]),
    );
    let before = read().get(&key).copied().unwrap_or(0);
    let page = bravo
        .usage_snapshots(&dynalimit::UsageQuery::resource("gpt-4"), 10, None)
        .await
        .unwrap();
    assert!(page.snapshots.is_empty(), "{:?}", page.snapshots);
    let after = read().get(&key).copied().unwrap_or(0);
    assert_eq!(after.saturating_sub(before), 1);
}
