//! The output of `bench --json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// The admission case, one entry per concurrency; empty when `--only` leaves it out.
    pub(crate) admission: Vec<Admission>,
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

impl Machine {
    /// This host: cores, CPU model, memory.
    pub(crate) fn this_host() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kb: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: model,
            memory_gib: (mem_kb as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        }
    }
}

/// The figures of one case. Latencies are in microseconds, rounded to whole ones.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Case {
    /// The operation: `raw-sdk`, `raw-update`, `store-consume`, `warm-acquire`,
    /// `warm-cascade`, `gateway-cascade`, `adjust`, `first-touch`, `rejected-flood` or
    /// `slot-hold`.
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

/// One run of the admission case: concurrent tasks acquiring 1 of a refill-bound limit on one
/// fresh bucket, each trying again at once when refused.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Admission {
    /// The library measured: `dynalimit` or `zae-limiter`.
    pub(crate) library: String,
    /// Concurrent acquiring tasks.
    pub(crate) concurrency: usize,
    /// The limit's capacity, tokens.
    pub(crate) capacity: i64,
    /// The limit's refill rate, tokens per second.
    pub(crate) refill_per_s: f64,
    /// Seconds from the run's start (before the first acquire) to its end (after the last), to
    /// three decimals.
    pub(crate) seconds: f64,
    /// Acquires admitted.
    pub(crate) admitted: u64,
    /// Acquires refused by the limit.
    pub(crate) rejected: u64,
    /// Acquires that failed otherwise.
    pub(crate) errors: u64,
    /// The first such failure; null when none failed.
    pub(crate) first_error: Option<String>,
    /// DynamoDB requests sent during the run.
    pub(crate) requests: u64,
    /// What the limit allows over the run: capacity + refill rate x seconds, to one decimal.
    pub(crate) allowance: f64,
    /// `admitted / allowance`, to three decimals: 1.0 admits everything allowed; above 1.0
    /// (beyond the client clock's slack) would be over-admission.
    pub(crate) efficiency: f64,
}

/// `bench --compare zae --json`: dynalimit and zae-limiter measured on the same emulator in one
/// run, side by side.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct CompareReport {
    /// The machine it ran on.
    pub(crate) machine: Machine,
    /// Measured operations per case (`--ops`).
    pub(crate) ops_per_case: u64,
    /// Entities of the `many` shape (`--entities`).
    pub(crate) entities: u64,
    /// The peer library and how its side was measured.
    pub(crate) peer: Peer,
    /// dynalimit's figures, one entry per case.
    pub(crate) dynalimit: Vec<Case>,
    /// zae-limiter's figures, one entry per case, in the same order.
    pub(crate) zae: Vec<Case>,
    /// The two sides of each case compared.
    pub(crate) ratios: Vec<Ratio>,
    /// The admission case for both libraries: dynalimit's runs, then zae-limiter's.
    pub(crate) admission: Vec<Admission>,
}

/// The peer library of a comparison and how its side was measured.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Peer {
    /// The library: `zae-limiter`.
    pub(crate) library: String,
    /// Its installed version.
    pub(crate) version: String,
    /// The Python version that ran it.
    pub(crate) python: String,
    /// How its client CPU was measured.
    pub(crate) cpu_measure: String,
    /// Requests sent by the peer's own client before the run to check the request counter.
    pub(crate) check_requests_sent: u64,
    /// Requests the counter saw of those (equal when it counts each request once).
    pub(crate) check_requests_counted: u64,
}

/// One case on both sides. Ratios are zae-limiter's figure over dynalimit's, to two decimals
/// (above 1: zae-limiter's is higher).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Ratio {
    /// The operation: `warm-acquire`, `warm-cascade`, `adjust` or `first-touch`.
    pub(crate) op: String,
    /// `hot` (one entity) or `many` (entities in turn).
    pub(crate) shape: String,
    /// Concurrent workers.
    pub(crate) concurrency: usize,
    /// Median latency, zae-limiter / dynalimit.
    pub(crate) p50: f64,
    /// 99th percentile latency, zae-limiter / dynalimit.
    pub(crate) p99: f64,
    /// Mean latency, zae-limiter / dynalimit.
    pub(crate) mean: f64,
    /// Operations per second, zae-limiter / dynalimit.
    pub(crate) ops_per_s: f64,
    /// Client CPU per operation, zae-limiter / dynalimit.
    pub(crate) cpu_per_op: f64,
    /// dynalimit's DynamoDB requests per operation.
    pub(crate) dynalimit_requests_per_op: f64,
    /// zae-limiter's DynamoDB requests per operation.
    pub(crate) zae_requests_per_op: f64,
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

/// `bench --hot-key --json`: admitted acquires per second on one hot entity as its bucket
/// doubles, each partition key limited to `partition_writes_per_s`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct HotKeyReport {
    /// The machine it ran on.
    pub(crate) machine: Machine,
    /// Writes per second one partition key sustains (`--partition-rate`; DynamoDB: 1000).
    pub(crate) partition_writes_per_s: u32,
    /// Concurrent acquiring tasks (`--tasks`).
    pub(crate) tasks: u64,
    /// Seconds a shard count must hold, measured, for the run to end there
    /// (`--hot-key-seconds`).
    pub(crate) steady_seconds: u64,
    /// Splits of the hot bucket during the run, every one the library's own.
    pub(crate) splits: u32,
    /// One entry per shard count the hot bucket held, in the order reached.
    pub(crate) points: Vec<HotKeyPoint>,
    /// Every admitted acquire of the hot entity.
    pub(crate) admitted: u64,
    /// The `rpm` consumption the hot entity's shards recorded, in acquires.
    pub(crate) recorded: f64,
    /// Whether `recorded` equals `admitted`: nothing admitted without being debited, nothing
    /// debited twice.
    pub(crate) conserved: bool,
}

/// One shard count the hot bucket held during the hot-key run.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct HotKeyPoint {
    /// Shards of the entity's bucket.
    pub(crate) shards: u32,
    /// Seconds measured at this count (from a quarter second after it was reached until the
    /// next split, or the end of the run).
    pub(crate) seconds: f64,
    /// Admitted acquires per second over the measured seconds, whole.
    pub(crate) admitted_per_s: f64,
    /// The target: 0.8 x shards x the partition rate, whole.
    pub(crate) target_per_s: f64,
    /// Admitted acquires per second of the same load with no throttling, on another entity
    /// split to as many shards: what the client machine and the emulator can drive, whole.
    pub(crate) ceiling_per_s: f64,
    /// Whether `admitted_per_s` reaches the target, or the client ceiling when the target is
    /// above it.
    pub(crate) met: bool,
    /// Acquires that failed while measured (throttled beyond the client's retries).
    pub(crate) failed: u64,
    /// Requests the partition emulator refused while measured.
    pub(crate) throttled_requests: u64,
    /// Requests the partition emulator forwarded while measured.
    pub(crate) forwarded_requests: u64,
}

/// `bench --mixed --json`: dynalimit and zae-limiter fleets acquiring together on one bucket
/// that splits during the run, against what its limit allows.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct MixedReport {
    /// The machine it ran on.
    pub(crate) machine: Machine,
    /// Writes per second one partition key sustains (`--partition-rate`; DynamoDB: 1000).
    pub(crate) partition_writes_per_s: u32,
    /// Seconds from the bucket's creation to after both fleets ended.
    pub(crate) seconds: f64,
    /// Seconds from the fleets' start to the bucket's creation (by the first acquire).
    pub(crate) created_after_s: f64,
    /// The limit's capacity, tokens.
    pub(crate) capacity: i64,
    /// The limit's refill amount, tokens per `refill_period_seconds`.
    pub(crate) refill_amount: i64,
    /// The limit's refill period, seconds.
    pub(crate) refill_period_seconds: i64,
    /// What the limit allows over `seconds`: capacity + floor(elapsed ms x refill amount /
    /// refill period), counted in millitokens, in tokens.
    pub(crate) allowance: f64,
    /// dynalimit's fleet.
    pub(crate) dynalimit: MixedSide,
    /// zae-limiter's fleet.
    pub(crate) zae: MixedSide,
    /// Acquires both fleets admitted.
    pub(crate) admitted: u64,
    /// `admitted / allowance`, floored to three decimals.
    pub(crate) ratio: f64,
    /// What the limit allows from the bucket's creation to the deadline, when the fleets
    /// stop starting acquires (the acquires in flight then still finish), in tokens.
    pub(crate) allowance_at_deadline: f64,
    /// Admitted acquires that returned by the deadline, both fleets.
    pub(crate) admitted_at_deadline: u64,
    /// `admitted_at_deadline / allowance_at_deadline`, floored to three decimals: the share
    /// of the allowance the fleets took while both were asking. Neither the acquires that
    /// finished after the deadline (retrying on throttling) nor the refill of that tail
    /// count.
    pub(crate) ratio_at_deadline: f64,
    /// The share of the allowance the fleets must admit together while both ask.
    pub(crate) target: f64,
    /// Whether `admitted_at_deadline` reaches `target` x `allowance_at_deadline`.
    pub(crate) met: bool,
    /// Whether `admitted` exceeds `allowance` (the command then fails).
    pub(crate) over_admitted: bool,
    /// The bucket's shard count at the end (shard 0's).
    pub(crate) shards: u32,
    /// Splits during the run, every one a library's own (the bucket starts as one shard).
    pub(crate) splits: u32,
    /// The consumption every shard recorded, in acquires.
    pub(crate) recorded: f64,
    /// Whether `recorded` equals `admitted`.
    pub(crate) conserved: bool,
    /// Tokens the shards hold at the end, refilled to the end: allowed, not handed out.
    pub(crate) held: f64,
    /// Requests the partition emulator refused.
    pub(crate) throttled_requests: u64,
    /// Requests the partition emulator forwarded.
    pub(crate) forwarded_requests: u64,
}

/// One fleet of the mixed run.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct MixedSide {
    /// The library.
    pub(crate) library: String,
    /// Its version.
    pub(crate) version: String,
    /// Concurrent acquiring tasks.
    pub(crate) tasks: u64,
    /// Acquires admitted.
    pub(crate) admitted: u64,
    /// Acquires refused by the limit.
    pub(crate) rejected: u64,
    /// Acquires that failed otherwise.
    pub(crate) errors: u64,
    /// The first such failure.
    pub(crate) first_error: Option<String>,
    /// Requests the fleet's client sent, retries included; null when not counted
    /// (dynalimit's are in the partition emulator's counts).
    pub(crate) requests: Option<u64>,
}
