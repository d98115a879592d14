//! Counting the requests a client sends, by operation.
//!
//! [`RequestCounter`] is an SDK interceptor: attach it to a DynamoDB client and it counts every
//! attempt that goes on the wire (retries included), keyed by operation (`UpdateItem`,
//! `BatchGetItem`, …). The tests use it to prove "one request per warm acquire"; the benchmark
//! uses it to report requests per operation.
//!
//! ```
//! use dynalimit_repository::metrics::RequestCounter;
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
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Counts requests per DynamoDB operation. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl RequestCounter {
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

    /// Sets every count back to zero.
    pub fn reset(&self) {
        if let Ok(mut c) = self.counts.lock() {
            c.clear();
        }
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "dynalimit::RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("unknown")
            .to_string();
        if let Ok(mut c) = self.counts.lock() {
            *c.entry(operation).or_insert(0) += 1;
        }
        Ok(())
    }
}
