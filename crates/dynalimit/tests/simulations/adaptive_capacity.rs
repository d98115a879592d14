//! A downstream of concurrency capacity C whose latency grows under overload, driven well past
//! its capacity; C changes twice. The limiter must settle near C, keep p99 latency bounded, and
//! follow C when it changes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use dynalimit::adaptive::{AdaptiveLimiter, Permit};
use dynalimit_core::{Clock, ManualClock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Latency of one request when the downstream is not overloaded.
const BASE_LATENCY: Duration = Duration::from_millis(100);
/// Offered load, requests per second: 1.2 to 3 × the capacity's throughput.
const ARRIVALS_PER_SEC: u64 = 1200;
/// Capacity phases: (C, length).
const PHASES: [(u32, u64); 3] = [(50, 300), (100, 300), (50, 300)];
/// Length of the settled part of each phase, over which the figures are taken.
const SETTLED: u64 = 100;

enum Event {
    Arrival,
    Completion(u64),
}

struct Phase {
    capacity: u32,
    start: Duration,
    end: Duration,
    limits: Vec<(Duration, u32)>,
    settled_latencies: Vec<Duration>,
    admitted: u64,
    rejected: u64,
}

fn p99(v: &mut [Duration]) -> Duration {
    v.sort();
    v[(v.len() * 99).div_ceil(100) - 1]
}

#[test]
fn the_limit_settles_near_capacity_and_follows_it() {
    // Three seeds in release builds; one in debug builds, where a run costs seconds.
    let seeds: &[u64] = if cfg!(debug_assertions) {
        &[42]
    } else {
        &[42, 3, 8]
    };
    for seed in seeds {
        simulate(*seed);
    }
}

/// Runs the three phases with arrivals and latencies drawn from `seed`, prints the figures and
/// asserts the targets.
fn simulate(seed: u64) {
    let clock = ManualClock::new(0);
    let limiter = AdaptiveLimiter::builder()
        .clock(clock.clone())
        .seed(1)
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut phases: Vec<Phase> = Vec::new();
    let mut t0 = Duration::ZERO;
    for (capacity, secs) in PHASES {
        let end = t0 + Duration::from_secs(secs);
        phases.push(Phase {
            capacity,
            start: t0,
            end,
            limits: Vec::new(),
            settled_latencies: Vec::new(),
            admitted: 0,
            rejected: 0,
        });
        t0 = end;
    }
    let horizon = t0;

    // Event queue in virtual nanoseconds; permits in flight by id.
    let mut events: BinaryHeap<Reverse<(u128, u64, u64)>> = BinaryHeap::new();
    let mut in_flight: std::collections::HashMap<u64, (Permit, Duration)> = Default::default();
    let mut seq = 0u64;
    let push = |events: &mut BinaryHeap<_>, at: Duration, kind: u64, seq: &mut u64| {
        *seq += 1;
        events.push(Reverse((at.as_nanos(), *seq, kind)));
    };
    let gap = Duration::from_secs(1) / u32::try_from(ARRIVALS_PER_SEC).unwrap();
    push(&mut events, gap, u64::MAX, &mut seq);
    let mut next_sample = Duration::ZERO;
    let mut phase = 0;

    while let Some(Reverse((at, id, kind))) = events.pop() {
        let at = Duration::from_nanos(u64::try_from(at).unwrap());
        if at >= horizon {
            break;
        }
        clock.advance(at - clock.monotonic());
        while at >= phases[phase].end {
            phase += 1;
        }
        while next_sample <= at {
            let p = phases
                .iter_mut()
                .find(|p| p.start <= next_sample && next_sample < p.end)
                .unwrap();
            p.limits.push((next_sample, limiter.limit()));
            next_sample += Duration::from_secs(1);
        }
        let event = if kind == u64::MAX {
            Event::Arrival
        } else {
            Event::Completion(kind)
        };
        match event {
            Event::Arrival => {
                // Poisson arrivals.
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                push(&mut events, at + gap.mul_f64(-u.ln()), u64::MAX, &mut seq);
                match limiter.try_acquire() {
                    Ok(permit) => {
                        let p = &mut phases[phase];
                        p.admitted += 1;
                        let n = in_flight.len() + 1;
                        let load =
                            (f64::from(u32::try_from(n).unwrap()) / f64::from(p.capacity)).max(1.0);
                        let latency = BASE_LATENCY.mul_f64(load * rng.random_range(0.9..1.1));
                        in_flight.insert(id, (permit, at));
                        push(&mut events, at + latency, id, &mut seq);
                    }
                    Err(_) => phases[phase].rejected += 1,
                }
            }
            Event::Completion(id) => {
                let (permit, started) = in_flight.remove(&id).unwrap();
                permit.record();
                let p = &mut phases[phase];
                if at + Duration::from_secs(SETTLED) >= p.end {
                    p.settled_latencies.push(at - started);
                }
            }
        }
    }

    println!(
        "adaptive limit vs capacity (base latency {BASE_LATENCY:?}, offered {ARRIVALS_PER_SEC}/s, Poisson, seed {seed})"
    );
    println!(
        "{:>6} {:>10} {:>12} {:>10} {:>10} {:>14} {:>9}",
        "C", "phase", "settled L", "L/C", "p99", "recovery", "admitted"
    );
    for (i, p) in phases.iter_mut().enumerate() {
        let c = f64::from(p.capacity);
        let settled: Vec<u32> = p
            .limits
            .iter()
            .filter(|(t, _)| *t + Duration::from_secs(SETTLED) >= p.end)
            .map(|(_, l)| *l)
            .collect();
        let mean = f64::from(settled.iter().sum::<u32>())
            / f64::from(u32::try_from(settled.len()).unwrap());
        let (lo, hi) = (settled.iter().min().unwrap(), settled.iter().max().unwrap());
        // Recovery: from the phase start until the limit enters ±20 % of C and stays there.
        let within = |l: u32| (f64::from(l) - c).abs() <= 0.2 * c;
        let last_outside = p.limits.iter().rposition(|(_, l)| !within(*l));
        let recovery = last_outside.map_or(Duration::ZERO, |k| {
            p.limits[k].0 + Duration::from_secs(1) - p.start
        });
        let p99 = p99(&mut p.settled_latencies);
        println!(
            "{:>6} {:>4}-{:<5} {:>6.1} [{lo}-{hi}] {:>9.2} {:>10.0?} {:>13.0?} {:>9}",
            p.capacity,
            p.start.as_secs(),
            p.end.as_secs(),
            mean,
            mean / c,
            p99,
            recovery,
            p.admitted,
        );
        assert!(
            settled.iter().all(|l| within(*l)),
            "phase {i}: settled limits {lo}..{hi} not within ±20% of {c}"
        );
        assert!(
            p99 <= BASE_LATENCY * 3 / 2,
            "phase {i}: p99 {p99:?} unbounded"
        );
        assert!(
            recovery < Duration::from_secs(p.end.as_secs() - p.start.as_secs() - SETTLED),
            "phase {i}: no recovery before the settled window ({recovery:?})"
        );
    }
}
