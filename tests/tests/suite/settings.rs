//! The client settings the fast path honours: the client's own HTTP client, the operation
//! timeout, stalled-stream protection and the retry quota; and the one it cannot (adaptive
//! retry), which keeps bucket writes on the SDK.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use dynalimit::{Error, OnUnavailable};
use dynalimit_format::item::get_i64;
use dynalimit_repository::Repository;

use super::fast_path::{Rig, rig_edited};

/// An HTTP client that counts the `UpdateItem`s it carries and hands every request to the
/// SDK's default client.
#[derive(Debug, Clone)]
struct Counting {
    inner: SharedHttpClient,
    update_items: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct CountingConnector {
    inner: SharedHttpConnector,
    update_items: Arc<AtomicUsize>,
}

impl HttpClient for Counting {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(CountingConnector {
            inner: self.inner.http_connector(settings, components),
            update_items: Arc::clone(&self.update_items),
        })
    }
}

impl HttpConnector for CountingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        if request
            .headers()
            .get("x-amz-target")
            .is_some_and(|t| t.ends_with(".UpdateItem"))
        {
            self.update_items.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.call(request)
    }
}

#[tokio::test]
async fn the_fast_path_sends_through_the_clients_own_http_client() {
    let update_items = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&update_items);
    // A plain HTTP client of the SDK's own making (the proxy speaks plain HTTP).
    let inner = aws_smithy_http_client::Builder::new().build_http();
    let r = rig_edited(true, move |config| {
        config.http_client(SharedHttpClient::new(Counting {
            inner,
            update_items: seen,
        }))
    })
    .await;
    r.warm("a").await;
    let before = update_items.load(Ordering::SeqCst);
    r.spend("a").await;
    assert!(r.repo.fast_path().is_some(), "the fast path stays on");
    assert_eq!(r.counter.count("UpdateItem"), 1);
    assert_eq!(
        update_items.load(Ordering::SeqCst) - before,
        1,
        "the warm acquire's UpdateItem went through the client's HTTP client"
    );
}

async fn bucket_tc(r: &Rig, entity: &str) -> i64 {
    get_i64(&r.bucket(entity).await, "b_rpm_tc").unwrap()
}

#[tokio::test]
async fn the_operation_timeout_bounds_a_write_and_its_outcome_is_unknown() {
    for fast in [true, false] {
        let r = rig_edited(fast, |config| {
            config.timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_millis(700))
                    .build(),
            )
        })
        .await;
        r.warm("a").await;
        r.proxy.hang_after_applying("UpdateItem", 1);
        r.unknown_consume_is_unavailable_and_counted_once("a").await;
    }
}

#[tokio::test]
async fn a_2xx_answer_that_stalls_counts_as_applied() {
    for fast in [true, false] {
        let r = rig_edited(fast, |config| {
            config.stalled_stream_protection(
                StalledStreamProtectionConfig::enabled()
                    .grace_period(Duration::from_secs(1))
                    .build(),
            )
        })
        .await;
        r.warm("a").await;
        let before = bucket_tc(&r, "a").await;
        r.proxy.stall_answer_body("UpdateItem", 1);
        r.spend("a").await;
        assert_eq!(r.proxy.pending(), 0, "fast path {fast}");
        assert_eq!(r.counter.count("UpdateItem"), 1, "fast path {fast}");
        assert_eq!(r.counter.count("GetItem"), 1, "read back; fast path {fast}");
        assert_eq!(bucket_tc(&r, "a").await - before, 1000, "fast path {fast}");
    }
}

#[tokio::test]
async fn adaptive_retry_keeps_bucket_writes_on_the_sdk() {
    let table = dynalimit_tests::table().await;
    let base = dynalimit_tests::client().await;
    let client = Client::from_conf(
        base.config()
            .to_builder()
            .retry_config(RetryConfig::adaptive())
            .build(),
    );
    let repo = Repository::builder()
        .client(client)
        .stack(table.name().to_owned())
        .namespace("adaptive")
        .open()
        .await
        .unwrap();
    assert!(repo.fast_path().is_none());
}

#[tokio::test]
async fn a_throttling_brownout_is_not_amplified_beyond_the_retry_budget() {
    const ACQUIRES: u64 = 150;
    for fast in [true, false] {
        let r = rig_edited(fast, |config| config).await;
        r.warm("a").await;
        r.proxy
            .fail_next("UpdateItem", "ThrottlingException", 100_000);
        for _ in 0..ACQUIRES {
            let refused = r
                .limiter
                .acquire("a", "gpt-4", [("rpm", 1)])
                .on_unavailable(OnUnavailable::Block)
                .await;
            assert!(
                matches!(refused, Err(Error::Unavailable { .. })),
                "{refused:?}"
            );
        }
        // Three attempts each until the budget is spent, one each afterwards: the budget of
        // the SDK's standard retry quota (500 units) pays 100 retries after throttling (5
        // each), as docs/performance.md states. Refused throughout with nothing taken, the
        // bucket does not split: the table refuses, not one partition.
        let retries = 500 / 5;
        assert_eq!(
            r.counter.count("UpdateItem"),
            ACQUIRES + retries,
            "fast path {fast}"
        );
        let key = dynalimit_repository::bucket::BucketKey::new("a", "gpt-4", 0);
        let shards = r.repo.buckets().read(&key).await.unwrap().unwrap().shards();
        assert_eq!(shards, 1, "fast path {fast}");
    }
}
