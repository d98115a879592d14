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
