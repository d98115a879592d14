//! `dynalimit bench`: latency, throughput, requests and client CPU of the hot paths.
//!
//! One run starts a fresh DynamoDB Local (the emulator slows down as it fills, so runs never
//! share one) unless an endpoint (`--endpoint-url`, `AWS_ENDPOINT_URL`, …) is given, and measures, at each concurrency, on one hot
//! entity and on many entities:
//!
//! | operation | what one operation is |
//! |---|---|
//! | `raw-update` | one plain `UpdateItem` (`ADD n 1`) through the transport acquires use (the fast path when it is on): the floor every acquire is measured against |
//! | `raw-sdk` | the same `UpdateItem` through the AWS SDK's client |
//! | `store-consume` | the warm acquire's own `UpdateItem` (every condition of the speculative consume, `ALL_NEW`), sent by the bucket store without the limiter around it |
//! | `warm-acquire` | acquire `rpm=1, tpm=100` on an existing bucket, then commit |
//! | `first-touch` | the first acquire of a bucket (new resource on the hot entity, new entity otherwise), then commit |
//! | `warm-cascade` | a warm acquire by a child whose bucket cascades to its parent, then commit |
//! | `gateway-cascade` | an LLM gateway's request: a key declaring only `rpm` cascades to a project declaring only `tpm`; acquire `rpm=1, tpm=500`, adjust `tpm` to the real count, commit (due: one request per bucket for the acquire, one for the commit) |
//! | `adjust` | a warm acquire, `adjust(tpm, +50)`, commit |
//! | `rejected-flood` | an acquire on a spent bucket (1 request an hour), refused: with the limiter's rejection cache, most cost no request |
//!
//! For each: p50, p90, p99 and mean latency, operations per second, DynamoDB requests per
//! operation (counted by an SDK interceptor) and client CPU per operation (the CPU time of
//! every thread of this process, from `/proc/self/task/*/schedstat`, divided by operations).
//! Each case first runs a quarter of its operations (at most 500) unmeasured, so that the
//! emulator's compilation of a new kind of request is not charged to it.
//! `scripts/client-instructions` counts the client's instructions per operation by component.
//! After the cases, the `tpm` consumed on every shard of the gateway case's project buckets is
//! held against the tokens its committed leases reported (the adjusted counts).
//!
//! Then the admission case (`admission`), once per concurrency: that many tasks acquire 1 of a
//! refill-bound limit (10 a second, capacity 10) on one fresh bucket for `--admission-seconds`,
//! each trying again at once when refused. Its efficiency is admitted / (capacity + refill rate
//! x elapsed): 1.0 admits everything the limit allows, and a figure above 1.0 (beyond the slack
//! of the client's clock) would be over-admission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::output::bench::{Admission, Case, Machine, Processor, Report, Verdict};
use anyhow::Context as _;
use aws_sdk_dynamodb::Client;
use clap::Args;
use dynalimit::{Limit, RateLimiter};
use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_demo::{Target, print_table};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_repository::aws::AwsSettings;
use dynalimit_repository::bucket::{BucketKey, BucketStore, OnThrottle};
use dynalimit_repository::{NewEntity, Repository, RequestCounter};

/// Options of `dynalimit bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Measured operations per case.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub(crate) ops: u64,
    /// Entities in the "many" shape.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub(crate) entities: u64,
    /// Concurrency levels (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub(crate) concurrency: Vec<usize>,
    /// The client's Tokio runtime: `multi-thread` (two workers) or `current-thread`.
    #[arg(long, default_value = "multi-thread", value_parser = ["multi-thread", "current-thread"])]
    runtime: String,
    /// Only these operations (comma-separated names, e.g. `raw-update,warm-acquire`).
    #[arg(long, value_delimiter = ',', value_parser = parse_op)]
    only: Vec<Op>,
    /// Measure the aggregator's stream processor too when `--only` names operations (it is
    /// measured by default).
    #[arg(long)]
    aggregator: bool,
    /// Seconds of each admission run (the refill-bound case).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub(crate) admission_seconds: u64,
    /// Measure a peer library on the same emulator too and print both side by side: `zae`
    /// (zae-limiter 0.17, run by the Python of `--python`).
    #[arg(long, value_parser = ["zae"])]
    pub(crate) compare: Option<String>,
    /// The Python with zae-limiter 0.17 for `--compare zae` and `--mixed` (default:
    /// `DYNALIMIT_PYTHON`, then `.cache/venv-zae/bin/python` under the current directory).
    #[arg(long)]
    pub(crate) python: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) hot: crate::hot_key::HotKeyArgs,
    #[command(flatten)]
    pub(crate) mixed: MixedArgs,
}

/// Options of the mixed run (`dynalimit bench --mixed`).
#[derive(Debug, Args)]
pub(crate) struct MixedArgs {
    /// Run dynalimit and zae-limiter 0.17 fleets together on one bucket that splits during
    /// the run, each partition limited to `--partition-rate` writes per second, and compare
    /// what they admit with what the limit allows (instead of the latency cases).
    #[arg(long)]
    pub(crate) mixed: bool,
    /// Seconds both fleets acquire in the mixed run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub(crate) mixed_seconds: u64,
    /// dynalimit's concurrent acquiring tasks in the mixed run (0 leaves its fleet idle).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub(crate) mixed_tasks: u64,
    /// zae-limiter's concurrent acquiring tasks (asyncio) in the mixed run (0 leaves its fleet
    /// idle).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub(crate) zae_tasks: u64,
}

impl BenchArgs {
    /// Whether the benchmark runs on a current-thread runtime.
    pub(crate) fn current_thread(&self) -> bool {
        self.runtime == "current-thread"
    }
}

fn parse_op(name: &str) -> Result<Op, String> {
    Op::ALL
        .into_iter()
        .find(|op| op.name() == name)
        .ok_or_else(|| {
            let names: Vec<_> = Op::ALL.iter().map(|op| op.name()).collect();
            format!("unknown operation {name:?}; one of {}", names.join(", "))
        })
}

/// The limit of the `slot-hold` case: as many slots as a limit has, so the case measures
/// the requests, never a refusal.
static SLOT_LIMIT: std::sync::LazyLock<dynalimit::Concurrency> = std::sync::LazyLock::new(|| {
    dynalimit::Concurrency::new("streams", 1000).expect("a valid concurrency limit")
});

/// What one measured operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    RawUpdate,
    RawSdk,
    StoreConsume,
    WarmAcquire,
    FirstTouch,
    WarmCascade,
    GatewayCascade,
    Adjust,
    RejectedFlood,
    /// A slot of a fleet-wide concurrency limit taken and released.
    SlotHold,
    /// The refill-bound admission case (measured apart from the latency cases).
    Admission,
}

impl Op {
    const ALL: [Op; 11] = [
        Op::RawSdk,
        Op::RawUpdate,
        Op::StoreConsume,
        Op::WarmAcquire,
        Op::WarmCascade,
        Op::GatewayCascade,
        Op::Adjust,
        Op::FirstTouch,
        Op::RejectedFlood,
        Op::SlotHold,
        Op::Admission,
    ];

    /// The latency cases a peer library is measured on too, in the order they run.
    pub(crate) const COMPARED: [Op; 4] =
        [Op::WarmAcquire, Op::WarmCascade, Op::Adjust, Op::FirstTouch];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::RawUpdate => "raw-update",
            Op::RawSdk => "raw-sdk",
            Op::StoreConsume => "store-consume",
            Op::WarmAcquire => "warm-acquire",
            Op::FirstTouch => "first-touch",
            Op::WarmCascade => "warm-cascade",
            Op::GatewayCascade => "gateway-cascade",
            Op::Adjust => "adjust",
            Op::RejectedFlood => "rejected-flood",
            Op::SlotHold => "slot-hold",
            Op::Admission => "admission",
        }
    }
}

/// One entity for everything, or many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Hot,
    Many,
}

impl Shape {
    /// Both shapes, in the order they run.
    pub(crate) const ALL: [Shape; 2] = [Shape::Hot, Shape::Many];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Shape::Hot => "hot",
            Shape::Many => "many",
        }
    }
}

/// The figures of one case.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    op: Op,
    shape: Shape,
    concurrency: usize,
    ops: u64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    mean_us: f64,
    ops_per_s: f64,
    requests_per_op: f64,
    /// Requests per operation by DynamoDB operation name.
    requests_by_operation: BTreeMap<String, f64>,
    cpu_us_per_op: f64,
}

impl Figures {
    pub(crate) fn to_output(&self) -> Case {
        Case {
            op: self.op.name().to_owned(),
            shape: self.shape.name().to_owned(),
            concurrency: self.concurrency,
            ops: self.ops,
            p50_us: self.p50_us.round(),
            p90_us: self.p90_us.round(),
            p99_us: self.p99_us.round(),
            mean_us: self.mean_us.round(),
            ops_per_s: self.ops_per_s.round(),
            requests_per_op: (self.requests_per_op * 100.0).round() / 100.0,
            requests_by_operation: self
                .requests_by_operation
                .iter()
                .map(|(k, v)| (k.clone(), (v * 100.0).round() / 100.0))
                .collect(),
            cpu_us_per_op: (self.cpu_us_per_op * 10.0).round() / 10.0,
        }
    }
}

/// Everything a case needs.
#[derive(Debug, Clone)]
struct Bench {
    client: Client,
    /// The bucket store of the benchmark's namespace.
    store: BucketStore,
    /// The benchmark's repository (its fast path, when it is on, carries the raw updates).
    repo: Repository,
    table: String,
    limiter: RateLimiter,
    counter: RequestCounter,
    entities: u64,
    /// Distinguishes first-touch buckets across cases.
    fresh: Arc<AtomicUsize>,
    /// The tokens the gateway case's committed leases report for the projects' `tpm`: the
    /// estimate, adjusted to the real count where a lease was adjusted.
    gateway_tokens: Arc<AtomicI64>,
}

/// The resource of every latency case.
pub(crate) const RESOURCE: &str = "model";

/// The resource of the admission case.
pub(crate) const ADMISSION_RESOURCE: &str = "admission";

/// The limits every latency case acquires under, far above what any run can spend, so every
/// acquire is admitted. Hourly, so the buckets' TTL (7 x the time to fill, reference §2.6)
/// outlives the run: a per-second limit's buckets would expire after 7 s and send warm
/// acquires down the slow path.
pub(crate) fn bench_limits() -> [Limit; 2] {
    [
        Limit::per_hour("rpm", 1_000_000_000_000),
        Limit::per_hour("tpm", 1_000_000_000_000),
    ]
}

/// The admission case's limit: refill binds (10 a second, capacity 10).
pub(crate) fn admission_limit() -> Limit {
    Limit::per_second("rps", 10)
}

/// What one admission run counted.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct AdmissionRun {
    /// Concurrent acquiring tasks.
    pub(crate) concurrency: usize,
    /// Seconds from the run's start (before the first acquire) to its end (after the last).
    pub(crate) seconds: f64,
    pub(crate) admitted: u64,
    pub(crate) rejected: u64,
    /// Acquires that failed otherwise.
    pub(crate) errors: u64,
    /// The first such failure.
    pub(crate) first_error: Option<String>,
    /// DynamoDB requests sent during the run.
    pub(crate) requests: u64,
}

impl AdmissionRun {
    /// The run's figures for `library`, its efficiency computed against `limit`.
    pub(crate) fn to_output(&self, library: &str, limit: &Limit) -> Admission {
        let refill_per_s = limit.refill_amount() as f64 / limit.refill_period_seconds() as f64;
        let allowance = limit.capacity() as f64 + refill_per_s * self.seconds;
        Admission {
            library: library.to_owned(),
            concurrency: self.concurrency,
            capacity: limit.capacity(),
            refill_per_s,
            seconds: (self.seconds * 1000.0).round() / 1000.0,
            admitted: self.admitted,
            rejected: self.rejected,
            errors: self.errors,
            first_error: self.first_error.clone(),
            requests: self.requests,
            allowance: (allowance * 10.0).round() / 10.0,
            efficiency: (self.admitted as f64 / allowance * 1000.0).round() / 1000.0,
        }
    }
}

/// What one run measured.
#[derive(Debug)]
pub(crate) struct Measured {
    /// The latency cases.
    pub(crate) cases: Vec<Figures>,
    /// The admission runs, one per concurrency (none when not asked for).
    pub(crate) admission: Vec<AdmissionRun>,
    /// The gateway case's check of the projects' `tpm` (none when it did not run).
    pub(crate) gateway_debit: Option<GatewayDebit>,
}

/// What the gateway case's projects were debited against what its leases reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatewayDebit {
    /// The tokens the committed leases report (the adjusted counts, the estimate where a
    /// lease was not adjusted).
    pub(crate) reported: i64,
    /// The `tpm` consumed (`tc`) on every shard of every project bucket, in tokens.
    pub(crate) debited: i64,
}

/// The gateway case's key limit (`rpm` only) and project limit (`tpm` only), stored for
/// each entity; hourly and far above what a run spends, as [`bench_limits`].
fn gateway_limits() -> (Limit, Limit) {
    (
        Limit::per_hour("rpm", 1_000_000_000_000),
        Limit::per_hour("tpm", 1_000_000_000_000),
    )
}

/// What the gateway case charges first: one request and an estimate of 500 tokens.
const GATEWAY_CHARGE: [(&str, i64); 2] = [("rpm", 1), ("tpm", 500)];

/// The limits of the spent buckets the rejected flood acquires on: one request an hour.
fn spent_limits() -> [Limit; 2] {
    [
        Limit::per_hour("rpm", 1),
        Limit::per_hour("tpm", 1_000_000_000_000),
    ]
}

/// Runs the benchmark against the endpoint `settings` configure (with their region and
/// profile), or a fresh private DynamoDB Local when they configure none; `stack` is the table.
pub(crate) async fn run(
    args: &BenchArgs,
    settings: &AwsSettings,
    stack: &str,
) -> anyhow::Result<()> {
    if args.hot.hot_key {
        return crate::hot_key::run(&args.hot, settings, stack, args.json).await;
    }
    check_concurrency(args)?;
    if !args.json {
        eprintln!(
            "Starting the endpoint and preparing {} entities...",
            args.entities
        );
    }
    let selected = |op: &Op| args.only.is_empty() || args.only.contains(op);
    let ops: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| *op != Op::Admission && selected(op))
        .collect();
    let target = Target::from_settings(settings).await?;
    let outcome = measure(args, &target, stack, &ops, selected(&Op::Admission)).await;
    target.stop().await;
    let Measured {
        cases: results,
        admission,
        gateway_debit,
    } = outcome?;
    let limit = admission_limit();
    let admission: Vec<Admission> = admission
        .iter()
        .map(|run| run.to_output(LIBRARY, &limit))
        .collect();
    let processor = (args.only.is_empty() || args.aggregator).then(processor_throughput);
    if args.json {
        let report = Report {
            machine: Machine::this_host(),
            ops_per_case: args.ops,
            entities: args.entities,
            results: results.iter().map(Figures::to_output).collect(),
            admission,
            targets: targets(&results, gateway_debit),
            aggregator: processor.map(|records_per_s| Processor {
                batch: PROCESSOR_BATCH,
                records_per_s_one_core: records_per_s.round(),
                target: 100_000,
            }),
        };
        let report = serde_json::to_value(&report)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if !results.is_empty() {
            print_results(&results, gateway_debit);
        }
        if !admission.is_empty() {
            println!();
            print_admission(&admission);
        }
        if let Some(records_per_s) = processor {
            println!(
                "\naggregator stream processor: {records_per_s:.0} records/s on one core \
                 (extract and plan, batches of {PROCESSOR_BATCH}; target 100 000)"
            );
        }
    }
    Ok(())
}

/// This library's name in the admission figures.
pub(crate) const LIBRARY: &str = "dynalimit";

/// Rejects concurrency levels out of range (before any I/O).
pub(crate) fn check_concurrency(args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.concurrency.is_empty() && args.concurrency.iter().all(|c| (1..=1024).contains(c)),
        "--concurrency takes levels between 1 and 1024"
    );
    Ok(())
}

/// Records per batch of the processor measurement.
const PROCESSOR_BATCH: usize = 1000;

/// Records per second on one core (this thread) of the aggregator's pure processor: `extract`
/// then `plan` over batches of bucket modifications, for about two seconds after a warm-up.
fn processor_throughput() -> f64 {
    use dynalimit_aggregator::processor::{extract, plan};
    let records = dynalimit_aggregator::sample::modifications(PROCESSOR_BATCH);
    let windows = [
        dynalimit_aggregator::SnapshotWindow::Hourly,
        dynalimit_aggregator::SnapshotWindow::Daily,
    ];
    let run = || {
        let extracted = extract(std::hint::black_box(&records));
        std::hint::black_box(plan(
            &extracted.usage,
            &std::collections::HashMap::new(),
            &windows,
        ));
    };
    for _ in 0..20 {
        run();
    }
    let started = SystemClock.monotonic();
    let mut batches = 0u64;
    while SystemClock.monotonic() - started < Duration::from_secs(2) {
        run();
        batches += 1;
    }
    let seconds = (SystemClock.monotonic() - started).as_secs_f64();
    (batches as f64 * PROCESSOR_BATCH as f64) / seconds
}

/// The value at quantile `q` (0 to 1, nearest rank) of sorted `values`; the default when
/// there is none.
pub(crate) fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Measures `ops` at every concurrency of `args`, both shapes each, then, when `admission`
/// is set, the admission case at every concurrency, on the table `stack` of `target` (in the
/// namespace `bench`).
pub(crate) async fn measure(
    args: &BenchArgs,
    target: &Target,
    stack: &str,
    ops: &[Op],
    admission: bool,
) -> anyhow::Result<Measured> {
    let counter = RequestCounter::default();
    let client = target.client(Some(counter.clone())).await?;
    let repo = Repository::builder()
        .client(client.clone())
        .request_counter(counter.clone())
        .stack(stack)
        .namespace("bench")
        .open()
        .await
        .context("opening the benchmark table")?;
    repo.set_system_defaults(&bench_limits(), None).await?;
    if !args.json {
        eprintln!(
            "UpdateItem transport: {}",
            match repo.fast_path() {
                Some(wire) => format!("fast path to {}", wire.uri()),
                None => "AWS SDK (the fast path is off)".into(),
            }
        );
    }
    let bench = Bench {
        client,
        repo: repo.clone(),
        store: repo.buckets(),
        table: stack.to_string(),
        limiter: RateLimiter::new(repo.clone()),
        counter,
        entities: args.entities,
        fresh: Arc::new(AtomicUsize::new(0)),
        gateway_tokens: Arc::new(AtomicI64::new(0)),
    };
    prepare(&bench, &repo, args.ops).await?;

    let mut results = Vec::new();
    for &concurrency in &args.concurrency {
        for &op in ops {
            for shape in Shape::ALL {
                let figures = bench.case(op, shape, concurrency, args.ops).await?;
                if !args.json {
                    eprintln!(
                        "  {:<13} {:<4} c={:<3} p50 {:>7.0} us  {:>6.0} ops/s",
                        op.name(),
                        shape.name(),
                        concurrency,
                        figures.p50_us,
                        figures.ops_per_s
                    );
                }
                results.push(figures);
            }
        }
    }
    let mut runs = Vec::new();
    if admission {
        for &concurrency in &args.concurrency {
            let run = bench.admission(concurrency, args.admission_seconds).await?;
            if !args.json {
                eprintln!(
                    "  {:<13} c={:<3} admitted {} rejected {} errors {}",
                    Op::Admission.name(),
                    concurrency,
                    run.admitted,
                    run.rejected,
                    run.errors
                );
            }
            runs.push(run);
        }
    }
    let gateway_debit = if ops.contains(&Op::GatewayCascade) {
        Some(bench.gateway_debit().await?)
    } else {
        None
    };
    Ok(Measured {
        cases: results,
        admission: runs,
        gateway_debit,
    })
}

/// Creates the cascade parents and children, warms every bucket the warm cases use, and
/// warms the emulator's JIT with unmeasured raw updates.
async fn prepare(bench: &Bench, repo: &Repository, ops: u64) -> anyhow::Result<()> {
    let ids: Vec<u64> = (0..bench.entities).collect();
    run_parallel(16, &ids, |i| async move {
        repo.create_entity(NewEntity::new(format!("p-{i}"))).await?;
        repo.create_entity(
            NewEntity::new(format!("c-{i}"))
                .parent(format!("p-{i}"))
                .cascade(true),
        )
        .await?;
        // The gateway shape: the key declares only rpm, its project only tpm.
        let (key_limit, project_limit) = gateway_limits();
        repo.create_entity(NewEntity::new(format!("gp-{i}")))
            .await?;
        repo.create_entity(
            NewEntity::new(format!("gk-{i}"))
                .parent(format!("gp-{i}"))
                .cascade(true),
        )
        .await?;
        repo.set_limits(&format!("gk-{i}"), RESOURCE, &[key_limit])
            .await?;
        repo.set_limits(&format!("gp-{i}"), RESOURCE, &[project_limit])
            .await?;
        let limiter = &bench.limiter;
        limiter
            .acquire(&format!("gk-{i}"), RESOURCE, GATEWAY_CHARGE)
            .await?
            .commit()
            .await?;
        bench
            .gateway_tokens
            .fetch_add(GATEWAY_CHARGE[1].1, Ordering::Relaxed);
        for entity in [format!("e-{i}"), format!("c-{i}")] {
            limiter
                .acquire(&entity, RESOURCE, [("rpm", 1), ("tpm", 1)])
                .await?
                .commit()
                .await?;
        }
        // The rejected flood's bucket, spent.
        limiter
            .acquire(&format!("x-{i}"), RESOURCE, [("rpm", 1), ("tpm", 1)])
            .limits(spent_limits())
            .await?
            .commit()
            .await?;
        Ok(())
    })
    .await?;
    let warm: Vec<u64> = (0..emulator_warm_up(ops)).collect();
    run_parallel(8, &warm, |i| async move {
        bench.raw_update(i % bench.entities).await
    })
    .await
}

/// Runs `work` on every item with `workers` concurrent workers.
async fn run_parallel<'a, F, Fut>(workers: usize, items: &'a [u64], work: F) -> anyhow::Result<()>
where
    F: Fn(u64) -> Fut + Clone + 'a,
    Fut: Future<Output = anyhow::Result<()>> + 'a,
{
    let next = AtomicUsize::new(0);
    let worker = |work: F| {
        let next = &next;
        async move {
            while let Some(&i) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                work(i).await?;
            }
            anyhow::Ok(())
        }
    };
    let all = (0..workers).map(|_| worker(work.clone()));
    futures::future::try_join_all(all).await.map(|_| ())
}

impl Bench {
    /// The `tpm` consumed on the gateway case's project buckets (every shard, read strongly
    /// consistently after the cases) against the tokens its committed leases reported.
    async fn gateway_debit(&self) -> anyhow::Result<GatewayDebit> {
        let max = dynalimit_core::bucket::MAX_SHARD_COUNT;
        let mut millitokens = 0i64;
        for i in 0..self.entities {
            // A shard index past every shard: all of 0..max are its siblings.
            let past = BucketKey::new(format!("gp-{i}"), RESOURCE, max);
            for (_, image) in self.store.sibling_images(&past, max).await? {
                let tc = image.limits.get("tpm").map_or(0, |state| state.tc);
                millitokens = millitokens.saturating_add(tc);
            }
        }
        Ok(GatewayDebit {
            reported: self.gateway_tokens.load(Ordering::Relaxed),
            debited: millitokens / 1000,
        })
    }

    fn entity_index(&self, shape: Shape, i: u64) -> u64 {
        match shape {
            Shape::Hot => 0,
            Shape::Many => i % self.entities,
        }
    }

    /// The item a raw update adds to: the bucket item of entity `raw-{index}`, which no
    /// acquire touches.
    fn raw_key(&self, index: u64) -> dynalimit_format::Item {
        BucketKey::new(format!("raw-{index}"), RESOURCE, 0).key_map(self.store.namespace_id())
    }

    /// The raw `UpdateItem` through the transport acquires use.
    async fn raw_update(&self, index: u64) -> anyhow::Result<()> {
        let Some(wire) = self.repo.fast_path() else {
            return self.raw_sdk(index).await;
        };
        let mut add = Expr::default();
        add.add("n", 1);
        dynalimit_repository::send_update(wire, &self.table, &self.raw_key(index), &add).await?;
        Ok(())
    }

    /// The raw `UpdateItem` through the SDK's client.
    async fn raw_sdk(&self, index: u64) -> anyhow::Result<()> {
        let mut add = Expr::default();
        add.add("n", 1);
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.raw_key(index)))
            .with_expr(&add)
            .send()
            .await?;
        Ok(())
    }

    async fn one(&self, op: Op, shape: Shape, i: u64) -> anyhow::Result<()> {
        let e = self.entity_index(shape, i);
        let consume = [("rpm", 1), ("tpm", 100)];
        match op {
            Op::RawUpdate => self.raw_update(e).await,
            Op::RawSdk => self.raw_sdk(e).await,
            Op::StoreConsume => {
                let key = BucketKey::new(format!("e-{e}"), RESOURCE, 0);
                let demand =
                    BTreeMap::from([("rpm".to_string(), 1000), ("tpm".to_string(), 100_000)]);
                // Any answer counts: the request is what is measured (a hot bucket's write
                // capacity may refuse some at high concurrency).
                self.store
                    .speculative_consume(
                        &key,
                        &demand,
                        SystemClock.epoch_millis(),
                        OnThrottle::Retry,
                    )
                    .await?;
                Ok(())
            }
            Op::WarmAcquire | Op::WarmCascade => {
                // Cascading entities are the `c-` ones.
                let prefix = if matches!(op, Op::WarmCascade) {
                    'c'
                } else {
                    'e'
                };
                let lease = self
                    .limiter
                    .acquire(&format!("{prefix}-{e}"), RESOURCE, consume)
                    .await?;
                Ok(lease.commit().await?)
            }
            Op::GatewayCascade => {
                let lease = self
                    .limiter
                    .acquire(&format!("gk-{e}"), RESOURCE, GATEWAY_CHARGE)
                    .await?;
                // The model's real count, known after the call.
                let real = i64::try_from(i % 1000)?;
                lease.adjust("tpm", real - GATEWAY_CHARGE[1].1)?;
                lease.commit().await?;
                self.gateway_tokens.fetch_add(real, Ordering::Relaxed);
                Ok(())
            }
            Op::Adjust => {
                let lease = self
                    .limiter
                    .acquire(&format!("e-{e}"), RESOURCE, consume)
                    .await?;
                lease.adjust("tpm", 50)?;
                Ok(lease.commit().await?)
            }
            Op::RejectedFlood => {
                let refused = self
                    .limiter
                    .acquire(&format!("x-{e}"), RESOURCE, consume)
                    .limits(spent_limits())
                    .await;
                match refused {
                    Err(dynalimit::Error::Rejected(_)) => Ok(()),
                    Err(e) => Err(e.into()),
                    Ok(_) => anyhow::bail!("a spent bucket admitted an acquire"),
                }
            }
            Op::FirstTouch => {
                let n = self.fresh.fetch_add(1, Ordering::Relaxed);
                let (entity, resource) = match shape {
                    Shape::Hot => ("e-0".to_string(), format!("fresh-{n}")),
                    Shape::Many => (format!("fresh-{n}"), RESOURCE.to_string()),
                };
                let lease = self.limiter.acquire(&entity, &resource, consume).await?;
                Ok(lease.commit().await?)
            }
            Op::SlotHold => {
                let slot = self
                    .limiter
                    .hold(&format!("e-{e}"), RESOURCE, &SLOT_LIMIT)
                    .await?;
                slot.release().await?;
                Ok(())
            }
            Op::Admission => anyhow::bail!("the admission case is not a latency case"),
        }
    }

    /// The admission case at `concurrency`: tasks acquiring 1 of [`admission_limit`] on one
    /// fresh bucket (its limit stored for the entity) for `seconds`, each trying again at once
    /// when refused.
    async fn admission(&self, concurrency: usize, seconds: u64) -> anyhow::Result<AdmissionRun> {
        let entity = Arc::new(format!("adm-{concurrency}"));
        let limit = admission_limit();
        self.repo
            .set_limits(&entity, ADMISSION_RESOURCE, std::slice::from_ref(&limit))
            .await?;
        let name = Arc::new(limit.name().to_owned());
        let requests_before = self.counter.total();
        let started = SystemClock.monotonic();
        let deadline = started + Duration::from_secs(seconds);
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (limiter, entity, name) =
                (self.limiter.clone(), Arc::clone(&entity), Arc::clone(&name));
            workers.push(tokio::spawn(async move {
                let mut tally = (0u64, 0u64, 0u64, None::<String>);
                while SystemClock.monotonic() < deadline {
                    let outcome = match limiter
                        .acquire(&entity, ADMISSION_RESOURCE, [(name.as_str(), 1)])
                        .await
                    {
                        Ok(lease) => lease.commit().await,
                        Err(e) => Err(e),
                    };
                    match outcome {
                        Ok(()) => tally.0 += 1,
                        Err(dynalimit::Error::Rejected(_)) => tally.1 += 1,
                        Err(e) => {
                            tally.2 += 1;
                            tally.3.get_or_insert_with(|| e.to_string());
                        }
                    }
                    // A refusal from the rejection cache sends nothing and may not yield:
                    // let the other tasks run.
                    tokio::task::yield_now().await;
                }
                tally
            }));
        }
        let mut run = AdmissionRun {
            concurrency,
            seconds: 0.0,
            admitted: 0,
            rejected: 0,
            errors: 0,
            first_error: None,
            requests: 0,
        };
        for worker in workers {
            let (admitted, rejected, errors, first_error) = worker.await?;
            run.admitted += admitted;
            run.rejected += rejected;
            run.errors += errors;
            run.first_error = run.first_error.or(first_error);
        }
        run.seconds = (SystemClock.monotonic() - started).as_secs_f64();
        run.requests = self.counter.total() - requests_before;
        self.limiter.settle().await;
        Ok(run)
    }

    async fn case(
        &self,
        op: Op,
        shape: Shape,
        concurrency: usize,
        ops: u64,
    ) -> anyhow::Result<Figures> {
        // Unmeasured first: the emulator compiles each kind of request as it first meets it,
        // on the same cores as the client, and that would be charged to whichever case came
        // first.
        self.drive(op, shape, concurrency, warm_up(ops)).await?;
        self.limiter.settle().await;
        let total = usize::try_from(ops)?;
        let requests_before = self.counter.total();
        let by_op_before = self.counter.snapshot();
        let cpu_before = process_cpu()?;
        let started = SystemClock.monotonic();
        let mut latencies = self.drive(op, shape, concurrency, total).await?;
        let wall = SystemClock.monotonic() - started;
        let cpu = process_cpu()? - cpu_before;
        let requests = self.counter.total() - requests_before;
        let by_op_after = self.counter.snapshot();
        self.limiter.settle().await;
        latencies.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let pick = |q: f64| us(quantile(&latencies, q));
        let n = latencies.len() as f64;
        Ok(Figures {
            op,
            shape,
            concurrency,
            ops,
            p50_us: pick(0.50),
            p90_us: pick(0.90),
            p99_us: pick(0.99),
            mean_us: latencies.iter().map(|d| us(*d)).sum::<f64>() / n,
            ops_per_s: n / wall.as_secs_f64(),
            requests_per_op: requests as f64 / n,
            requests_by_operation: by_op_after
                .iter()
                .map(|(k, v)| {
                    let before = by_op_before.get(k).copied().unwrap_or(0);
                    (k.clone(), (v - before) as f64 / n)
                })
                .filter(|(_, v)| *v > 0.0)
                .collect(),
            cpu_us_per_op: us(cpu) / n,
        })
    }

    /// Runs `total` operations `op` on `shape` with `concurrency` workers; their latencies.
    async fn drive(
        &self,
        op: Op,
        shape: Shape,
        concurrency: usize,
        total: usize,
    ) -> anyhow::Result<Vec<Duration>> {
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (bench, next) = (self.clone(), Arc::clone(&next));
            workers.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return anyhow::Ok(latencies);
                    }
                    let t0 = SystemClock.monotonic();
                    bench.one(op, shape, u64::try_from(i)?).await?;
                    latencies.push(SystemClock.monotonic() - t0);
                }
            }));
        }
        let mut latencies = Vec::with_capacity(total);
        for w in workers {
            latencies.extend(w.await??);
        }
        Ok(latencies)
    }
}

/// The unmeasured operations run before a case's measured ones: a quarter of them, at most
/// 500.
fn warm_up(ops: u64) -> usize {
    usize::try_from(ops.div_ceil(4).min(500)).unwrap_or(500)
}

/// The unmeasured raw updates that warm the endpoint (an emulator's JIT, the connections)
/// before the first case: twice the measured operations of a case, at most 2,000.
fn emulator_warm_up(ops: u64) -> u64 {
    ops.saturating_mul(2).min(2000)
}

/// CPU time used so far by every live thread of this process (nanosecond resolution).
fn process_cpu() -> anyhow::Result<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").context("reading /proc/self/task")? {
        let path = task?.path().join("schedstat");
        // A thread may end between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(Duration::from_nanos(total))
}

fn find(results: &[Figures], op: Op, shape: Shape, concurrency: usize) -> Option<&Figures> {
    results
        .iter()
        .find(|f| f.op == op && f.shape == shape && f.concurrency == concurrency)
}

/// The targets, evaluated on this run's figures and the gateway case's check.
fn targets(results: &[Figures], gateway_debit: Option<GatewayDebit>) -> Vec<Verdict> {
    let mut out = Vec::new();
    for shape in [Shape::Hot, Shape::Many] {
        if let (Some(raw), Some(warm)) = (
            find(results, Op::RawUpdate, shape, 1),
            find(results, Op::WarmAcquire, shape, 1),
        ) {
            let ratio = warm.p50_us / raw.p50_us;
            out.push(Verdict {
                target: format!(
                    "warm acquire p50 <= 1.15 x raw UpdateItem p50 (c=1, {})",
                    shape.name()
                ),
                value: (ratio * 1000.0).round() / 1000.0,
                met: Some(ratio <= 1.15),
            });
        }
    }
    // Not a target: the same ratio against the acquire's own request sent bare, which
    // separates the limiter's cost from the emulator's cost of the heavier conditional write.
    for shape in [Shape::Hot, Shape::Many] {
        if let (Some(bare), Some(warm)) = (
            find(results, Op::StoreConsume, shape, 1),
            find(results, Op::WarmAcquire, shape, 1),
        ) {
            let ratio = warm.p50_us / bare.p50_us;
            out.push(Verdict {
                target: format!(
                    "warm acquire p50 / store-consume p50 (c=1, {})",
                    shape.name()
                ),
                value: (ratio * 1000.0).round() / 1000.0,
                met: None,
            });
        }
    }
    // The gateway's cascade stays on the fast path: the key's and the project's writes for
    // the acquire, the project's `tpm` correction for the commit. On the hot pair each bucket
    // spends its write capacity (`wcu`, 1000) once every thousand writes, and the slow pass
    // that refills it costs two more requests: about 0.004 per operation.
    for (shape, bound) in [(Shape::Hot, 3.01), (Shape::Many, 3.0)] {
        if let Some(gateway) = find(results, Op::GatewayCascade, shape, 1) {
            out.push(Verdict {
                target: format!(
                    "DynamoDB requests per gateway-cascade acquire and commit <= {bound} (c=1, {})",
                    shape.name()
                ),
                value: (gateway.requests_per_op * 1000.0).round() / 1000.0,
                met: Some(gateway.requests_per_op <= bound),
            });
        }
    }
    // Each commit corrects the project's `tpm` to the real count.
    if let Some(debit) = gateway_debit {
        out.push(Verdict {
            target: "gateway-cascade projects' tpm debited / tokens the leases reported = 1"
                .to_owned(),
            value: (debit.debited as f64 / debit.reported.max(1) as f64 * 1000.0).round() / 1000.0,
            met: Some(debit.debited == debit.reported),
        });
    }
    if let Some(flood) = find(results, Op::RejectedFlood, Shape::Hot, 1) {
        out.push(Verdict {
            target: "DynamoDB requests per rejected request under a flood <= 0.1 (c=1, hot)"
                .to_owned(),
            value: (flood.requests_per_op * 1000.0).round() / 1000.0,
            met: Some(flood.requests_per_op <= 0.1),
        });
    }
    // Client CPU against the raw request of the same run: one request for a warm acquire,
    // two (child and parent) for a warm cascade.
    for (op, bound, requests) in [(Op::WarmAcquire, 1.3, "one"), (Op::WarmCascade, 2.3, "two")] {
        for shape in [Shape::Hot, Shape::Many] {
            if let (Some(raw), Some(case)) = (
                find(results, Op::RawUpdate, shape, 1),
                find(results, op, shape, 1),
            ) {
                let ratio = case.cpu_us_per_op / raw.cpu_us_per_op;
                out.push(Verdict {
                    target: format!(
                        "{} client CPU <= {bound} x raw UpdateItem ({requests} request{}, c=1, {})",
                        op.name(),
                        if requests == "one" { "" } else { "s" },
                        shape.name()
                    ),
                    value: (ratio * 1000.0).round() / 1000.0,
                    met: Some(ratio <= bound),
                });
            }
        }
    }
    // Only when warm acquires were measured: no case is not a pass.
    let worst_cpu = results
        .iter()
        .filter(|f| f.op == Op::WarmAcquire)
        .map(|f| f.cpu_us_per_op)
        .reduce(f64::max);
    if let Some(worst_cpu) = worst_cpu {
        out.push(Verdict {
            target: "client CPU per warm acquire <= 50 us (worst case)".to_owned(),
            value: (worst_cpu * 10.0).round() / 10.0,
            met: Some(worst_cpu <= 50.0),
        });
    }
    if let (Some(raw), Some(warm)) = (
        find(results, Op::RawUpdate, Shape::Many, 32),
        find(results, Op::WarmAcquire, Shape::Many, 32),
    ) {
        let ratio = warm.ops_per_s / raw.ops_per_s;
        out.push(Verdict {
            target: "warm acquire throughput >= 0.9 x raw UpdateItem (c=32, many)".to_owned(),
            value: (ratio * 1000.0).round() / 1000.0,
            met: Some(ratio >= 0.9),
        });
    }
    out
}

/// The admission runs as a table.
pub(crate) fn print_admission(runs: &[Admission]) {
    println!(
        "Admission efficiency (limit {} a second, capacity {}): admitted / (capacity + rate x elapsed)",
        runs.first().map_or(0.0, |r| r.refill_per_s),
        runs.first().map_or(0, |r| r.capacity)
    );
    let mut rows = vec![[
        "library".to_string(),
        "conc".into(),
        "seconds".into(),
        "admitted".into(),
        "allowance".into(),
        "efficiency".into(),
        "rejected".into(),
        "errors".into(),
        "requests".into(),
    ]];
    for r in runs {
        rows.push([
            r.library.clone(),
            r.concurrency.to_string(),
            format!("{:.2}", r.seconds),
            r.admitted.to_string(),
            format!("{:.1}", r.allowance),
            format!("{:.3}", r.efficiency),
            r.rejected.to_string(),
            r.errors.to_string(),
            r.requests.to_string(),
        ]);
    }
    print_table(&rows);
    for r in runs.iter().filter(|r| r.errors > 0) {
        println!(
            "  {} c={}: first error: {}",
            r.library,
            r.concurrency,
            r.first_error.as_deref().unwrap_or("-")
        );
    }
}

fn print_results(results: &[Figures], gateway_debit: Option<GatewayDebit>) {
    let m = Machine::this_host();
    println!(
        "\nMachine: {} CPUs, {}, {} GiB",
        m.cpus, m.cpu_model, m.memory_gib
    );
    let mut rows = vec![[
        "operation".to_string(),
        "shape".into(),
        "conc".into(),
        "p50 us".into(),
        "p90 us".into(),
        "p99 us".into(),
        "mean us".into(),
        "ops/s".into(),
        "req/op".into(),
        "cpu us/op".into(),
    ]];
    for f in results {
        rows.push([
            f.op.name().to_string(),
            f.shape.name().to_string(),
            f.concurrency.to_string(),
            format!("{:.0}", f.p50_us),
            format!("{:.0}", f.p90_us),
            format!("{:.0}", f.p99_us),
            format!("{:.0}", f.mean_us),
            format!("{:.0}", f.ops_per_s),
            format!("{:.2}", f.requests_per_op),
            format!("{:.1}", f.cpu_us_per_op),
        ]);
    }
    print_table(&rows);
    println!("\nTargets:");
    for t in targets(results, gateway_debit) {
        println!(
            "  [{}] {}: {}",
            match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "info",
            },
            t.target,
            t.value
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(op: Op, cpu_us_per_op: f64) -> Figures {
        Figures {
            op,
            shape: Shape::Hot,
            concurrency: 1,
            ops: 10,
            p50_us: 100.0,
            p90_us: 100.0,
            p99_us: 100.0,
            mean_us: 100.0,
            ops_per_s: 10.0,
            requests_per_op: 1.0,
            requests_by_operation: BTreeMap::new(),
            cpu_us_per_op,
        }
    }

    fn names(targets: &[Verdict]) -> Vec<String> {
        targets.iter().map(|t| t.target.clone()).collect()
    }

    #[test]
    fn a_target_is_reported_only_when_its_cases_were_measured() {
        let raw_only = targets(&[figures(Op::RawUpdate, 60.0)], None);
        assert!(
            names(&raw_only).iter().all(|n| !n.contains("client CPU")),
            "{raw_only:?}"
        );
        let warm = targets(
            &[figures(Op::RawUpdate, 60.0), figures(Op::WarmAcquire, 70.0)],
            None,
        );
        let cpu = warm
            .iter()
            .find(|t| t.target.contains("per warm acquire"))
            .expect("measured");
        assert_eq!(cpu.met, Some(false));
        assert_eq!(cpu.value, 70.0);
        assert!(
            names(&warm).iter().all(|n| !n.contains("warm-cascade")),
            "{warm:?}"
        );
    }

    #[test]
    fn client_cpu_is_held_against_the_raw_request_of_the_same_run() {
        let run = targets(
            &[
                figures(Op::RawUpdate, 60.0),
                figures(Op::WarmAcquire, 70.0),
                figures(Op::WarmCascade, 150.0),
            ],
            None,
        );
        let ratio = |case: &str| {
            run.iter()
                .find(|t| t.target.starts_with(case) && t.target.contains("x raw UpdateItem"))
                .map(|t| (t.value, t.met))
                .expect("measured")
        };
        assert_eq!(ratio("warm-acquire client CPU"), (1.167, Some(true)));
        assert_eq!(ratio("warm-cascade client CPU"), (2.5, Some(false)));
    }

    #[test]
    fn the_gateway_check_is_met_only_when_the_projects_hold_exactly_what_was_reported() {
        let verdict = |reported, debited| {
            let debit = GatewayDebit { reported, debited };
            targets(&[], Some(debit))
                .into_iter()
                .find(|t| t.target.contains("tpm debited"))
                .map(|t| (t.value, t.met))
                .expect("reported")
        };
        assert_eq!(verdict(1_000_000, 1_000_000), (1.0, Some(true)));
        // Every token the estimate overcharged is a miss, however small next to the total.
        assert_eq!(verdict(1_000_000, 1_002_000), (1.002, Some(false)));
        assert_eq!(verdict(1_000_000, 999_999), (1.0, Some(false)));
        assert!(targets(&[], None).is_empty());
    }
}
