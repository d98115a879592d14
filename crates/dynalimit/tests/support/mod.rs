//! Helpers shared by the LimitSet and LimitPool contract tests.

#![allow(dead_code, unreachable_pub)]

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit::limitset::{Algorithm, CallLimit, LimitSet, RateLimit, ResourceLimit, SetLimit};
use dynalimit::time::ManualClock;

/// Runs `f` with a subscriber that records every warning emitted on this thread.
pub fn capture_warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::WARN)
        .finish();
    let result = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let warnings = text
        .lines()
        .filter(|line| line.contains("WARN"))
        .map(str::to_owned)
        .collect();
    (result, warnings)
}

pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

pub fn rate(key: &str, capacity: f64, window: f64, algorithm: Algorithm) -> RateLimit {
    RateLimit::builder(key)
        .capacity(capacity)
        .window(window)
        .algorithm(algorithm)
        .build()
        .unwrap()
}

pub fn token_bucket(key: &str, capacity: f64, window: f64) -> RateLimit {
    rate(key, capacity, window, Algorithm::TokenBucket)
}

pub fn resource(key: &str, capacity: u64) -> ResourceLimit {
    ResourceLimit::new(key, capacity).unwrap()
}

pub fn calls(capacity: f64, window: f64, algorithm: Algorithm) -> CallLimit {
    CallLimit::from_rate(rate("ignored", capacity, window, algorithm))
}

/// call_count 100/1 s (token bucket), tokens 1000/60 s (token bucket), connections 5.
pub fn three_limits(timer: &ManualClock) -> LimitSet {
    LimitSet::builder()
        .limit(calls(100.0, 1.0, Algorithm::TokenBucket))
        .limit(token_bucket("tokens", 1000.0, 60.0))
        .limit(resource("connections", 5))
        .clock(timer.clone())
        .build()
        .unwrap()
}

pub fn available(set: &LimitSet, key: &str) -> f64 {
    set.limit_stats(key).unwrap().available()
}

/// Spins (yielding the CPU) until `timer` has `n` parked threads.
pub fn wait_parked(timer: &ManualClock, n: usize) {
    while timer.parked_threads() < n {
        std::thread::yield_now();
    }
}

/// An in-process set of `limits` on `timer`.
pub fn set_of(timer: &ManualClock, limits: Vec<SetLimit>) -> LimitSet {
    LimitSet::builder()
        .limits(limits)
        .clock(timer.clone())
        .build()
        .unwrap()
}

/// Takes `amount` of `key`, reports it all used and releases.
pub fn spend(set: &LimitSet, key: &str, amount: u32) {
    let mut acquisition = set.try_acquire([(key, amount)]).unwrap();
    acquisition.update([(key, amount)]).unwrap();
    acquisition.release().unwrap();
}

/// Whether an acquire was refused (nothing taken), as opposed to admitted or failed.
pub fn refused<T>(outcome: &Result<T, dynalimit::Error>) -> bool {
    matches!(outcome, Err(dynalimit::Error::Rejected(_)))
}

/// The acquisition of an admitted acquire, `None` when it was refused; panics on a failure.
pub fn admitted<T>(outcome: Result<T, dynalimit::Error>) -> Option<T> {
    match outcome {
        Ok(t) => Some(t),
        Err(dynalimit::Error::Rejected(_)) => None,
        Err(other) => panic!("{other}"),
    }
}
