//! The output of `bench --json`.

use std::collections::BTreeMap;

use serde::Serialize;

/// `bench --json`: the run's figures, its machine, and the targets evaluated on them.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Report {
    /// The machine it ran on.
    pub(crate) machine: Machine,
    /// Measured operations per case (`--ops`).
    pub(crate) ops_per_case: u64,
    /// Entities of the `many` shape (`--entities`).
    pub(crate) entities: u64,
    /// One entry per case: operation, shape and concurrency.
    pub(crate) results: Vec<Case>,
    /// The targets whose cases were measured, evaluated.
    pub(crate) targets: Vec<Verdict>,
    /// The aggregator's stream processor; null when it was not measured (`--only` without
    /// `--aggregator`).
    pub(crate) aggregator: Option<Processor>,
}

/// The machine, for the record.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Machine {
    /// Logical CPUs this process may use.
    pub(crate) cpus: usize,
    /// The CPU model (`/proc/cpuinfo`); empty when unknown.
    pub(crate) cpu_model: String,
    /// Memory in GiB, to one decimal.
    pub(crate) memory_gib: f64,
}

/// The figures of one case. Latencies are in microseconds, rounded to whole ones.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Case {
    /// The operation: `raw-sdk`, `raw-update`, `store-consume`, `warm-acquire`,
    /// `warm-cascade`, `adjust`, `first-touch` or `rejected-flood`.
    pub(crate) op: String,
    /// `hot` (one entity) or `many` (entities in turn).
    pub(crate) shape: String,
    /// Concurrent workers.
    pub(crate) concurrency: usize,
    /// Operations measured.
    pub(crate) ops: u64,
    /// Median latency, microseconds.
    pub(crate) p50_us: f64,
    /// 90th percentile latency, microseconds.
    pub(crate) p90_us: f64,
    /// 99th percentile latency, microseconds.
    pub(crate) p99_us: f64,
    /// Mean latency, microseconds.
    pub(crate) mean_us: f64,
    /// Operations per second, whole.
    pub(crate) ops_per_s: f64,
    /// DynamoDB requests per operation, to two decimals.
    pub(crate) requests_per_op: f64,
    /// DynamoDB requests per operation by request name (`UpdateItem`, …), to two decimals;
    /// names the case never sent are absent.
    pub(crate) requests_by_operation: BTreeMap<String, f64>,
    /// Client CPU time per operation (every thread of the process), microseconds, to one
    /// decimal.
    pub(crate) cpu_us_per_op: f64,
}

/// One target, evaluated on this run's figures.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Verdict {
    /// What is compared, with the bound and the case it reads.
    pub(crate) target: String,
    /// The figure measured (a ratio, requests or microseconds, as `target` says), to three
    /// decimals (CPU: one).
    pub(crate) value: f64,
    /// Whether the bound is met; null for a figure reported for information, with no bound.
    pub(crate) met: Option<bool>,
}

/// The aggregator's pure stream processor (extract and plan) on one core.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Processor {
    /// Stream records per batch.
    pub(crate) batch: usize,
    /// Records per second on one core, whole.
    pub(crate) records_per_s_one_core: f64,
    /// The target, records per second.
    pub(crate) target: u64,
}
