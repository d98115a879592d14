//! LimitSet and LimitPool hot paths: one full cycle (try_acquire, update, release) with
//! capacities so large that nothing is ever refused, on one and eight threads, plus the pool's
//! selection.
//!
//! `cargo bench -p dynalimit --no-default-features --bench limitset`

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dynalimit::limitset::{
    Algorithm, CallLimit, LimitSet, RateLimit, ResourceLimit, SystemTimer, Timer,
};
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
    let mut acquisition = set.try_acquire([("tokens", 1.0)]).unwrap().unwrap();
    acquisition.update([("tokens", 1.0)]).unwrap();
    acquisition.release().unwrap();
}

/// Acquire 10 tokens (plus the auto-included call and connection), use 7 (refund 3), release.
fn three_cycle(set: &LimitSet) {
    let mut acquisition = set.try_acquire([("tokens", 10.0)]).unwrap().unwrap();
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

fn cycles(c: &mut Criterion) {
    let mut group = c.benchmark_group("cycle");
    for (name, algorithm) in [
        ("one_limit_token_bucket", Algorithm::TokenBucket),
        ("one_limit_gcra", Algorithm::Gcra),
        ("one_limit_fixed_window", Algorithm::FixedWindow),
        ("one_limit_leaky_bucket", Algorithm::LeakyBucket),
    ] {
        let set = one_limit(algorithm);
        group.bench_function(name, |b| b.iter(|| one_cycle(black_box(&set))));
    }
    let resource = LimitSet::builder()
        .limit(ResourceLimit::new("connections", u64::MAX / 2).unwrap())
        .build()
        .unwrap();
    group.bench_function("one_limit_resource", |b| {
        b.iter(|| {
            let acquisition = resource
                .try_acquire(dynalimit::limitset::NO_AMOUNTS)
                .unwrap()
                .unwrap();
            drop(black_box(acquisition));
        });
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
    c.bench_function("clock/system_timer_now", |b| b.iter(|| SystemTimer.now()));
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
        b.iter(|| {
            let mut acquisition = round_robin
                .try_acquire([("tokens", 10.0)])
                .unwrap()
                .unwrap();
            acquisition.update([("tokens", 7.0)]).unwrap();
            acquisition.release().unwrap();
        });
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
criterion_main!(benches);
