//! Counting the requests a client sends, by operation.
//!
//! [`RequestCounter`] is an SDK interceptor: attach it to a DynamoDB client and it counts every
//! attempt that goes on the wire (retries included), keyed by operation (`UpdateItem`,
//! `BatchGetItem`, …), and how many were on the wire at once. The tests use it to prove "one
//! request per warm acquire"; the benchmark uses it to report requests per operation. Hand it
//! to [`crate::RepositoryBuilder::request_counter`] as well, so the fast path
//! reports its requests too.
//!
//! ```
//! use dynalimit_repository::RequestCounter;
//!
//! let counter = RequestCounter::default();
//! let config = aws_sdk_dynamodb::Config::builder()
//!     .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
//!     .interceptor(counter.clone())
//!     .build();
//! let _client = aws_sdk_dynamodb::Client::from_conf(config);
//! assert_eq!(counter.total(), 0);
//! ```

use std::collections::BTreeMap;

/// Counter: look-ups of the configuration cache, by `result` (`hit`, `miss`).
pub const CONFIG_CACHE: &str = "dynalimit_config_cache_total";
/// Counter: DynamoDB requests sent (every attempt), by `operation`.
pub const DYNAMODB_REQUESTS: &str = "dynalimit_dynamodb_requests_total";
/// Counter: writes sent again after losing to a transaction (contention), by `operation`.
pub const CONTENTION_RETRIES: &str = "dynalimit_contention_retries_total";
/// Counter: writes whose answer was lost and that were not sent again (their outcome is
/// unknown: applied once or not at all), by `operation`.
pub const UNKNOWN_OUTCOMES: &str = "dynalimit_unknown_outcomes_total";
/// Counter: items a secondary-index query returned that were skipped, by `index` (`GSI1` …
/// `GSI4`) and `reason`: `namespace` (the item's base-table key lies in another namespace,
/// whose writer set an index key naming this one) or `keys` (its index keys are not the ones
/// its base key implies).
pub const FOREIGN_INDEX_ITEMS: &str = "dynalimit_foreign_index_items_total";
/// Gauge: 1 once the fast path carries a repository's bucket writes, 0 when they stay on
/// the SDK.
pub const FAST_PATH: &str = "dynalimit_fast_path";

tokio::task_local! {
    static REQUESTS: std::cell::Cell<u32>;
}

/// Runs `work` counting the DynamoDB requests it sends (every attempt, on the fast path and
/// through the SDK): its output and the count.
pub fn counting_requests<F: std::future::Future>(
    work: F,
) -> impl std::future::Future<Output = (F::Output, u32)> {
    // A combinator, not an `async` block: a generator awaiting `work` would keep a second
    // copy of its state (the future moved into the await), doubling every acquire's future.
    // The count is read inside the scope's poll, where the task-local is set.
    REQUESTS.scope(
        std::cell::Cell::new(0),
        futures::FutureExt::map(work, |output| (output, REQUESTS.with(std::cell::Cell::get))),
    )
}

/// The label of a DynamoDB operation, without allocating (`other` for one dynalimit never
/// sends).
fn operation_label(operation: &str) -> &'static str {
    const SENT: [&str; 12] = [
        "UpdateItem",
        "GetItem",
        "BatchGetItem",
        "PutItem",
        "DeleteItem",
        "Query",
        "Scan",
        "TransactWriteItems",
        "BatchWriteItem",
        "DescribeTable",
        "CreateTable",
        "DescribeTimeToLive",
    ];
    SENT.into_iter()
        .find(|o| *o == operation)
        .unwrap_or("other")
}

/// Records one request sent.
pub(crate) fn request_sent(operation: &str) {
    metrics::counter!(DYNAMODB_REQUESTS, "operation" => operation_label(operation)).increment(1);
    let _ = REQUESTS.try_with(|c| c.set(c.get() + 1));
}

/// Records a write sent again after losing to a transaction.
pub(crate) fn contention_retry(operation: &'static str) {
    metrics::counter!(CONTENTION_RETRIES, "operation" => operation).increment(1);
}

/// Records an index result skipped as foreign.
pub(crate) fn foreign_index_item(index: &'static str, reason: &'static str) {
    metrics::counter!(FOREIGN_INDEX_ITEMS, "index" => index, "reason" => reason).increment(1);
}

/// Records a write whose outcome is unknown.
pub(crate) fn unknown_outcome(operation: &'static str) {
    metrics::counter!(UNKNOWN_OUTCOMES, "operation" => operation).increment(1);
}

/// The SDK interceptor every repository client carries: it records each request sent
/// ([`DYNAMODB_REQUESTS`], and the count of [`counting_requests`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestMetrics;

impl RequestMetrics {
    pub(crate) const NAME: &'static str = "dynalimit::RequestMetrics";
}

impl Intercept for RequestMetrics {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = operation_of(context);
        request_sent(operation);
        Ok(())
    }
}
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

/// Counts requests per DynamoDB operation. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
    in_flight: Arc<(AtomicUsize, AtomicUsize)>,
}

impl RequestCounter {
    /// The interceptor's name, as the SDK reports it.
    pub const NAME: &'static str = "dynalimit::RequestCounter";

    /// Counts one request of `operation` going on the wire (the fast path reports its
    /// requests here); [`RequestCounter::finished`] must follow when its answer is in.
    pub fn started(&self, operation: &str) {
        if let Ok(mut c) = self.counts.lock() {
            match c.get_mut(operation) {
                Some(n) => *n += 1,
                None => {
                    c.insert(operation.to_string(), 1);
                }
            }
        }
        let (now, max) = &*self.in_flight;
        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(n, Ordering::SeqCst);
    }

    /// One request's answer (or failure) is in.
    pub fn finished(&self) {
        let _ = self
            .in_flight
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// The most requests on the wire at once since the last reset.
    pub fn max_in_flight(&self) -> usize {
        self.in_flight.1.load(Ordering::SeqCst)
    }

    /// Requests sent so far, all operations.
    pub fn total(&self) -> u64 {
        self.counts.lock().map(|c| c.values().sum()).unwrap_or(0)
    }

    /// Requests sent so far for `operation` (e.g. `"UpdateItem"`).
    pub fn count(&self, operation: &str) -> u64 {
        self.counts
            .lock()
            .ok()
            .and_then(|c| c.get(operation).copied())
            .unwrap_or(0)
    }

    /// A copy of every count.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Sets every count back to zero, and the in-flight maximum to what is in flight now.
    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
        let (now, max) = &*self.in_flight;
        max.store(now.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// The DynamoDB operation of a request (`UpdateItem`, …), from its `X-Amz-Target`.
fn operation_of<'a>(context: &'a BeforeTransmitInterceptorContextRef<'_>) -> &'a str {
    context
        .request()
        .headers()
        .get("x-amz-target")
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("unknown")
}

/// Marks an attempt whose request went on the wire.
#[derive(Debug, Clone)]
struct OnTheWire;

impl Storable for OnTheWire {
    type Storer = StoreReplace<Self>;
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = operation_of(context);
        self.started(operation);
        cfg.interceptor_state().store_put(OnTheWire);
        Ok(())
    }

    fn read_after_attempt(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // Only attempts that reached the wire were counted as started.
        if cfg.load::<OnTheWire>().is_some() {
            cfg.interceptor_state().unset::<OnTheWire>();
            self.finished();
        }
        Ok(())
    }
}
