//! Runs a fixed number of three-limit cycles (call + token bucket + resource; acquire 10,
//! use 7, release), for profilers:
//! `cargo build --release -p dynalimit --no-default-features --example cycle_count`, then
//! `perf record` or `valgrind --tool=cachegrind` on the binary with a cycle count.

use dynalimit::limitset::{Algorithm, CallLimit, LimitSet, RateLimit, ResourceLimit};

fn rate(key: &str) -> RateLimit {
    RateLimit::builder(key)
        .capacity(1e15)
        .window(1)
        .algorithm(Algorithm::TokenBucket)
        .build()
        .expect("valid limit")
}

fn main() -> Result<(), dynalimit::Error> {
    let cycles: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let set = LimitSet::builder()
        .limit(CallLimit::from_rate(rate("calls")))
        .limit(rate("tokens"))
        .limit(ResourceLimit::new("connections", u64::MAX / 2)?)
        .build()?;
    for _ in 0..cycles {
        // Capacities are huge: every try is admitted.
        let mut acquisition = set.try_acquire([("tokens", 10.0)])?;
        acquisition.update([("tokens", 7.0)])?;
        acquisition.release()?;
    }
    println!("{cycles} cycles");
    Ok(())
}
