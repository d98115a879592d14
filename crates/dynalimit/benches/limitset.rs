//! LimitSet and LimitPool hot paths: one full cycle (try_acquire, update, release) with
//! capacities so large that nothing is ever refused, on one and eight threads, plus the pool's
//! selection.
//!
//! `cargo bench -p dynalimit --no-default-features --bench limitset`
//!
//! Criterion reports its estimate of the time per iteration; after it, a second pass prints
//! latency percentiles (p50, p90, p99) of the same operations: many short batches, each timed
//! with one pair of clock readings, one sample per batch (the batch time divided by its
//! length). A filter argument (`-- three_limits`) selects both the criterion benchmarks and the
//! percentile rows by name.

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use dynalimit::limitset::{Algorithm, CallLimit, LimitSet, RateLimit, ResourceLimit};
use dynalimit::pool::{LimitPool, LoadBalancing};
use dynalimit_core::{Clock, SystemClock};

const HUGE: f64 = 1e15;

fn rate(key: &str, algorithm: Algorithm) -> RateLimit {
    RateLimit::builder(key)
        .capacity(HUGE)
        .window(1)
        .algorithm(algorithm)
        .build()
        .unwrap()
}

fn one_limit(algorithm: Algorithm) -> LimitSet {
    LimitSet::builder()
        .limit(rate("tokens", algorithm))
        .build()
        .unwrap()
}

/// call_count + tokens (token buckets) + connections.
fn three_limits() -> LimitSet {
    LimitSet::builder()
        .limit(CallLimit::from_rate(rate("calls", Algorithm::TokenBucket)))
        .limit(rate("tokens", Algorithm::TokenBucket))
        .limit(ResourceLimit::new("connections", u64::MAX / 2).unwrap())
        .build()
        .unwrap()
}

fn one_cycle(set: &LimitSet) {
    let mut acquisition = set.try_acquire([("tokens", 1.0)]).unwrap();
    acquisition.update([("tokens", 1.0)]).unwrap();
    acquisition.release().unwrap();
}

/// Acquire 10 tokens (plus the auto-included call and connection), use 7 (refund 3), release.
fn three_cycle(set: &LimitSet) {
    let mut acquisition = set.try_acquire([("tokens", 10.0)]).unwrap();
    acquisition.update([("tokens", 7.0)]).unwrap();
    acquisition.release().unwrap();
}

/// [`three_cycle`] through a pool of three-limit sets.
fn pool_cycle(pool: &LimitPool) {
    let mut acquisition = pool.try_acquire([("tokens", 10.0)]).unwrap();
    acquisition.update([("tokens", 7.0)]).unwrap();
    acquisition.release().unwrap();
}

/// Runs `iters` cycles split over `threads` threads and returns the span from the first
/// thread's start to the last thread's end (each thread reads the clock itself, so thread
/// start-up and the scheduling of the coordinating thread are not counted): the time per
/// cycle criterion reports is then the inverse of the aggregate throughput.
fn on_threads(threads: u64, iters: u64, set: &LimitSet, cycle: fn(&LimitSet)) -> Duration {
    let barrier = Barrier::new(threads as usize);
    let per_thread = iters.div_ceil(threads);
    let spans: Vec<(Duration, Duration)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let start = SystemClock.monotonic();
                    for _ in 0..per_thread {
                        cycle(black_box(set));
                    }
                    (start, SystemClock.monotonic())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let first = spans.iter().map(|s| s.0).min().unwrap_or_default();
    let last = spans.iter().map(|s| s.1).max().unwrap_or_default();
    last.saturating_sub(first)
}

/// The one-limit sets, by benchmark name.
const ONE_LIMIT: [(&str, Algorithm); 4] = [
    ("one_limit_token_bucket", Algorithm::TokenBucket),
    ("one_limit_gcra", Algorithm::Gcra),
    ("one_limit_fixed_window", Algorithm::FixedWindow),
    ("one_limit_leaky_bucket", Algorithm::LeakyBucket),
];

fn resource_only() -> LimitSet {
    LimitSet::builder()
        .limit(ResourceLimit::new("connections", u64::MAX / 2).unwrap())
        .build()
        .unwrap()
}

/// Takes the one connection (auto-included) and gives it back on drop.
fn resource_cycle(set: &LimitSet) {
    let acquisition = set.try_acquire(dynalimit::limitset::NO_AMOUNTS).unwrap();
    drop(black_box(acquisition));
}

fn cycles(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle");
    for (name, algorithm) in ONE_LIMIT {
        let set = one_limit(algorithm);
        group.bench_function(name, |b| b.iter(|| one_cycle(black_box(&set))));
    }
    let resource = resource_only();
    group.bench_function("one_limit_resource", |b| {
        b.iter(|| resource_cycle(black_box(&resource)));
    });
    let set = three_limits();
    group.bench_function("three_limits_1_thread", |b| {
        b.iter(|| three_cycle(black_box(&set)));
    });
    let set = three_limits();
    group.bench_function("three_limits_8_threads", |b| {
        b.iter_custom(|iters| on_threads(8, iters, &set, three_cycle));
    });
    let set = one_limit(Algorithm::TokenBucket);
    group.bench_function("one_limit_token_bucket_8_threads", |b| {
        b.iter_custom(|iters| on_threads(8, iters, &set, one_cycle));
    });
    group.finish();
}

/// The floor under every cycle that holds a rate limit: one reading of the monotonic clock.
fn clock(c: &mut Criterion) {
    c.bench_function("clock/system_clock_monotonic", |b| {
        b.iter(|| SystemClock.monotonic())
    });
}

fn pool(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool");
    let sets = || (0..4).map(|_| three_limits()).collect::<Vec<_>>();
    let round_robin = LimitPool::new(sets()).unwrap();
    group.bench_function("select_round_robin", |b| {
        b.iter(|| black_box(&round_robin).select());
    });
    let random = LimitPool::new(sets())
        .unwrap()
        .with_balancing(LoadBalancing::Random);
    group.bench_function("select_random", |b| b.iter(|| black_box(&random).select()));
    group.bench_function("three_limits_cycle_through_pool", |b| {
        b.iter(|| pool_cycle(black_box(&round_robin)));
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = cycles, clock, pool
}

/// Batches timed per percentile row.
const BATCHES: usize = 20_000;

/// Nanoseconds per operation of `BATCHES` batches of `batch` calls of `op` (after a warm-up of
/// a tenth as many), sorted.
fn batch_samples(batch: u32, mut op: impl FnMut()) -> Vec<f64> {
    for _ in 0..BATCHES / 10 * batch as usize {
        op();
    }
    let mut samples = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = SystemClock.monotonic();
        for _ in 0..batch {
            op();
        }
        let span = SystemClock.monotonic().saturating_sub(start);
        samples.push(span.as_nanos() as f64 / f64::from(batch));
    }
    samples.sort_by(f64::total_cmp);
    samples
}

/// The same, from `threads` threads running at once on one set (every thread's batches
/// pooled): the latency one caller sees under contention.
fn batch_samples_on_threads(
    threads: usize,
    batch: u32,
    set: &LimitSet,
    cycle: fn(&LimitSet),
) -> Vec<f64> {
    let barrier = Barrier::new(threads);
    let mut samples: Vec<f64> = thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    batch_samples(batch, || cycle(black_box(set)))
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    samples.sort_by(f64::total_cmp);
    samples
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}

fn print_row(name: &str, batch: u32, samples: &[f64]) {
    println!(
        "{name:<40} {batch:>6} {:>9.1} {:>9.1} {:>9.1}",
        quantile(samples, 0.5),
        quantile(samples, 0.9),
        quantile(samples, 0.99)
    );
}

/// Percentiles of the single-threaded operations, of the eight-thread cycles and of the
/// pool's selection.
fn percentiles(filter: Option<&str>) {
    let wanted = |name: &str| filter.is_none_or(|f| name.contains(f));
    println!();
    println!(
        "latency percentiles, ns per operation ({BATCHES} batches per row, one sample per batch)"
    );
    println!(
        "{:<40} {:>6} {:>9} {:>9} {:>9}",
        "operation", "batch", "p50", "p90", "p99"
    );
    // generic rather than `dyn`, so that the operation is inlined as in criterion's loop
    fn row(wanted: impl Fn(&str) -> bool, name: &str, batch: u32, op: impl FnMut()) {
        if wanted(name) {
            print_row(name, batch, &batch_samples(batch, op));
        }
    }
    for (name, algorithm) in ONE_LIMIT {
        let set = one_limit(algorithm);
        row(wanted, &format!("cycle/{name}"), 32, || {
            one_cycle(black_box(&set));
        });
    }
    let resource = resource_only();
    row(wanted, "cycle/one_limit_resource", 32, || {
        resource_cycle(black_box(&resource));
    });
    let set = three_limits();
    row(wanted, "cycle/three_limits_1_thread", 32, || {
        three_cycle(black_box(&set))
    });
    for (name, set, cycle) in [
        (
            "cycle/three_limits_8_threads",
            three_limits(),
            three_cycle as fn(&LimitSet),
        ),
        (
            "cycle/one_limit_token_bucket_8_threads",
            one_limit(Algorithm::TokenBucket),
            one_cycle,
        ),
    ] {
        if wanted(name) {
            print_row(name, 32, &batch_samples_on_threads(8, 32, &set, cycle));
        }
    }
    row(wanted, "clock/system_clock_monotonic", 32, || {
        black_box(SystemClock.monotonic());
    });
    let sets = || (0..4).map(|_| three_limits()).collect::<Vec<_>>();
    let round_robin = LimitPool::new(sets()).unwrap();
    row(wanted, "pool/select_round_robin", 1024, || {
        black_box(black_box(&round_robin).select());
    });
    let random = LimitPool::new(sets())
        .unwrap()
        .with_balancing(LoadBalancing::Random);
    row(wanted, "pool/select_random", 1024, || {
        black_box(black_box(&random).select());
    });
    row(wanted, "pool/three_limits_cycle_through_pool", 32, || {
        pool_cycle(black_box(&round_robin));
    });
}

/// The positional argument criterion takes as its filter (values of criterion's options are
/// skipped).
fn filter(args: &[String]) -> Option<&str> {
    const WITH_VALUE: [&str; 14] = [
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
        "--color",
    ];
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `--list`, `--test` (cargo test --benches) and `--profile-time` runs skip the percentiles.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .iter()
        .any(|a| a == "--list" || a == "--test" || a == "--profile-time")
    {
        return;
    }
    percentiles(filter(&args));
}
