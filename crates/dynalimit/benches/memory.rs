//! What a million distinct callers leave in memory: each per-caller map of the crate is
//! driven with a million distinct keys, and the bench prints the entries it holds and the
//! growth of the process's resident memory.
//!
//! `cargo bench -p dynalimit --bench memory`
//!
//! Each row runs in a process of its own (the bench starts itself once per row), so memory
//! freed by one row does not hide the growth of the next; the growth is given at the end of the
//! row and at its peak (`VmRSS` and `VmHWM`, Linux). The backoff gate, the LimitSet's
//! unknown-key warnings and the in-memory pause store are driven through their public calls.
//! The RateLimiter's two maps (what it learnt per entity and resource, and its rejection
//! cache) cannot be driven to a million keys through acquires in reasonable time (each new
//! pair creates a bucket), so their rows fill the same bounded map with the same bound, key
//! and value types the limiter uses; the lib's unit tests drive the limiter's own maps and
//! assert the bounds. The first row is the map the limiter kept before it was bounded: the
//! same keys in a plain `HashMap`. A last pair of rows gives the time of one look-up that
//! hits, bounded and plain, the cost every warm acquire pays.

#![allow(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::process::Command;
use std::time::Duration;

use dynalimit::backoff::{Backoff, MemoryPauseStore, PauseStore};
use dynalimit::limitset::{LimitSet, ResourceLimit};
use dynalimit_core::bounded::{BoundedMap, Pair, PairRef};
use dynalimit_core::image::{BucketImage, LimitState};
use dynalimit_core::{Clock, Limit, ManualClock, SystemClock};
use dynalimit_repository::acquire::{KNOWN_IDLE as IDLE, MAX_KNOWN_PAIRS, MAX_REFUSED_PAIRS};

const KEYS: usize = 1_000_000;

/// The limiter's knowledge of one pair, as `dynalimit_repository::acquire::Knowledge` keeps it.
#[allow(dead_code)]
#[derive(Default)]
struct Known {
    shard_count: u32,
    cascade: bool,
    parent_id: Option<String>,
    seen: bool,
}

/// The rejection cache's bound on pairs.
const MAX_REJECTED_PAIRS: usize = MAX_REFUSED_PAIRS;

/// Resident memory of this process now (`VmRSS`) or at its peak (`VmHWM`), in KiB (Linux).
fn resident_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn caller(i: usize) -> String {
    format!("caller-{i:07}")
}

/// Fills one map with a million keys; returns the entries it holds at the end (if known).
fn fill(row: &str) -> Option<usize> {
    let zero = Duration::ZERO;
    match row {
        "plain" => {
            let mut map: HashMap<String, HashMap<String, Known>> = HashMap::new();
            for i in 0..KEYS {
                map.entry(caller(i))
                    .or_default()
                    .entry("gpt-4".to_owned())
                    .or_default();
            }
            let held = map.len();
            black_box(map);
            Some(held)
        }
        "known" => {
            let mut map: BoundedMap<Pair, Known> = BoundedMap::new(MAX_KNOWN_PAIRS, zero + IDLE);
            for i in 0..KEYS {
                let entity = caller(i);
                let key = (entity.as_str(), "gpt-4");
                map.get_or_insert_with(
                    &key as &dyn PairRef,
                    zero,
                    || (Pair::new(&entity, "gpt-4"), Known::default()),
                    |k| k.seen = true,
                );
            }
            let held = map.len();
            black_box(map);
            Some(held)
        }
        "rejections" => {
            let image = refused_image();
            let mut map: BoundedMap<Pair, BTreeMap<u32, (BucketImage, i64)>> =
                BoundedMap::new(MAX_REJECTED_PAIRS, Duration::from_secs(1));
            for i in 0..KEYS {
                let entity = caller(i);
                let key = (entity.as_str(), "gpt-4");
                let remembered = (image.clone(), 0);
                map.get_or_insert_with(
                    &key as &dyn PairRef,
                    zero,
                    || (Pair::new(&entity, "gpt-4"), BTreeMap::new()),
                    |shards| shards.insert(0, remembered),
                );
            }
            let held = map.len();
            black_box(map);
            Some(held)
        }
        "backoff" => {
            let clock = ManualClock::new(0);
            let gate = Backoff::builder().clock(clock.clone()).build().ok()?;
            for i in 0..KEYS {
                gate.pause(&caller(i), Some(Duration::from_millis(10)));
                if i % 1_000 == 999 {
                    clock.advance(Duration::from_secs(1));
                }
            }
            Some(gate.scope_count())
        }
        "limitset" => {
            let set = LimitSet::builder()
                .limit(ResourceLimit::new("connections", 1_000).ok()?)
                .build()
                .ok()?;
            for i in 0..KEYS {
                let key = caller(i);
                let mut held = set.try_acquire([(key.as_str(), 1.0)]).ok()?;
                held.release().ok()?;
            }
            None
        }
        "pause-store" => {
            let clock = ManualClock::new(1_700_000_000_000);
            let store = MemoryPauseStore::with_clock(clock.clone());
            for i in 0..KEYS {
                let until = clock.epoch_millis() + 10;
                futures::executor::block_on(store.publish(&caller(i), until)).ok()?;
                if i % 1_000 == 999 {
                    clock.advance(Duration::from_secs(1));
                }
            }
            Some(store.len())
        }
        _ => None,
    }
}

/// A bucket image as the rejection cache keeps one: two limits, spent.
fn refused_image() -> BucketImage {
    let mut image = BucketImage {
        rf: 1_700_000_000_000,
        shard_count: 1,
        ..BucketImage::default()
    };
    for limit in [
        Limit::per_minute("rpm", 100),
        Limit::per_minute("tpm", 10_000),
    ] {
        let mut state = LimitState::starting(&limit, 1, 0);
        state.tk = 0;
        image.limits.insert(limit.name().to_owned(), state);
    }
    image
}

/// Nanoseconds of one look-up that hits in a map of `MAX_KNOWN_PAIRS / 2` pairs, bounded and
/// plain: the best of five alternating rounds of each.
fn lookup_ns() -> (f64, f64) {
    const ROUNDS: usize = 2_000_000;
    let entities: Vec<String> = (0..MAX_KNOWN_PAIRS / 2).map(caller).collect();
    let mut plain: HashMap<String, HashMap<String, Known>> = HashMap::new();
    let mut map: BoundedMap<Pair, Known> = BoundedMap::new(MAX_KNOWN_PAIRS, IDLE);
    for e in &entities {
        plain
            .entry(e.clone())
            .or_default()
            .insert("gpt-4".into(), Known::default());
        map.insert(Pair::new(e, "gpt-4"), Known::default(), Duration::ZERO);
    }
    let round = |bounded: bool| {
        let start = SystemClock.monotonic();
        let mut found = 0u32;
        for i in 0..ROUNDS {
            // A stride that visits the pairs in no cache-friendly order.
            let e = entities[(i * 7_919) % entities.len()].as_str();
            let hit = if bounded {
                map.get(&(e, "gpt-4") as &dyn PairRef)
                    .map(|k| k.shard_count)
            } else {
                plain
                    .get(e)
                    .and_then(|r| r.get("gpt-4"))
                    .map(|k| k.shard_count)
            };
            found = found.wrapping_add(black_box(hit).unwrap_or(1));
        }
        black_box(found);
        let took = SystemClock.monotonic().saturating_sub(start);
        took.as_nanos() as f64 / ROUNDS as f64
    };
    let (mut bounded, mut nested) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        bounded = bounded.min(round(true));
        nested = nested.min(round(false));
    }
    (bounded, nested)
}

const ROWS: [(&str, &str, usize); 6] = [
    (
        "plain",
        "limiter knowledge before the bound (HashMap)",
        usize::MAX,
    ),
    (
        "known",
        "limiter knowledge (entity, resource)",
        MAX_KNOWN_PAIRS,
    ),
    (
        "rejections",
        "rejection cache (entity, resource)",
        MAX_REJECTED_PAIRS,
    ),
    (
        "backoff",
        "backoff gate scopes",
        dynalimit::backoff::MAX_SCOPES,
    ),
    (
        "limitset",
        "LimitSet unknown keys warned",
        dynalimit::limitset::MAX_WARNED_KEYS,
    ),
    (
        "pause-store",
        "MemoryPauseStore stamps",
        dynalimit::backoff::MAX_SCOPES,
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--row") {
        let row = args.get(at + 1).map_or("", String::as_str);
        let before = resident_kib("VmRSS:").unwrap_or(0);
        let held = fill(row);
        let after = resident_kib("VmRSS:").unwrap_or(0);
        let peak = resident_kib("VmHWM:").unwrap_or(0);
        let held = held.map_or("-".to_owned(), |n| n.to_string());
        println!(
            "{held} {} {}",
            after.saturating_sub(before),
            peak.saturating_sub(before)
        );
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find the bench's own executable");
        return;
    };
    println!("{KEYS} distinct keys per map; resident growth of a process of its own\n");
    println!(
        "| map | bound | entries held | resident growth MiB, at the end | at the peak |\n\
         |---|---:|---:|---:|---:|"
    );
    for (row, what, bound) in ROWS {
        let out = Command::new(&me).args(["--row", row]).output();
        let text = out
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        let mut parts = text.split_whitespace();
        let held = parts.next().unwrap_or("?");
        let mut mib = || {
            parts
                .next()
                .and_then(|k| k.parse::<f64>().ok())
                .map_or(f64::NAN, |k| k / 1024.0)
        };
        let (end, peak) = (mib(), mib());
        let bound = if bound == usize::MAX {
            "none".to_owned()
        } else {
            bound.to_string()
        };
        println!("| {what} | {bound} | {held} | {end:.1} | {peak:.1} |");
    }
    let (bounded, nested) = lookup_ns();
    println!(
        "\none look-up that hits among {} pairs (best of five rounds): bounded {bounded:.1} ns, \
         plain nested HashMap {nested:.1} ns",
        MAX_KNOWN_PAIRS / 2
    );
}
