//! The output of `loadtest`.

use std::collections::BTreeMap;

use serde::Serialize;

/// One limit's load: what was admitted against what the entities' own limits allow.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LimitLoad {
    /// The limit's name.
    pub(crate) limit: String,
    /// Tokens each acquire asked for.
    pub(crate) cost: i64,
    /// Tokens of admitted acquires.
    pub(crate) admitted_tokens: i64,
    /// What the entities' own limits allow over the run: capacity plus the refill of the
    /// elapsed time, summed over entities. An upper bound: a bucket may not start full, and
    /// a parent's limits are not in it.
    pub(crate) allowance: i64,
    /// `admitted_tokens / allowance`; above 1 would be over-admission. Null without an
    /// allowance (no entity declares the limit).
    pub(crate) share: Option<f64>,
}

/// What a load test did, from where it ran.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LoadReport {
    /// The entities loaded, in the order tasks take them.
    pub(crate) entities: Vec<String>,
    /// The resource.
    pub(crate) resource: String,
    /// Concurrent acquiring tasks.
    pub(crate) concurrency: u64,
    /// The paced rate (acquires a second), or null for as fast as answers come.
    pub(crate) rate: Option<u64>,
    /// Seconds the run took.
    pub(crate) seconds: f64,
    /// Acquires sent.
    pub(crate) attempts: u64,
    /// Acquires admitted (each then committed).
    pub(crate) admitted: u64,
    /// Acquires refused by a limit.
    pub(crate) rejected: u64,
    /// Failed acquires and commits by kind (`unavailable`, `permission_denied`, …).
    pub(crate) errors: BTreeMap<String, u64>,
    /// The first message of each kind of error.
    pub(crate) first_errors: BTreeMap<String, String>,
    /// Acquires a second.
    pub(crate) acquires_per_second: f64,
    /// Admissions a second.
    pub(crate) admitted_per_second: f64,
    /// Acquire latency, median, milliseconds (admitted and refused alike).
    pub(crate) p50_ms: f64,
    /// Acquire latency, 90th percentile, milliseconds.
    pub(crate) p90_ms: f64,
    /// Acquire latency, 99th percentile, milliseconds.
    pub(crate) p99_ms: f64,
    /// The slowest acquire, milliseconds.
    pub(crate) max_ms: f64,
    /// DynamoDB requests sent during the load (every attempt, on the fast path and through
    /// the SDK).
    pub(crate) requests: u64,
    /// `requests / attempts`: an acquire's requests, its commit's included, on average.
    pub(crate) requests_per_acquire: f64,
    /// The requests by DynamoDB operation.
    pub(crate) requests_by_operation: BTreeMap<String, u64>,
    /// Per limit asked for: tokens admitted against the allowance.
    pub(crate) limits: Vec<LimitLoad>,
}
