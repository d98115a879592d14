//! Hostile items: whatever another writer of the shared table stores, every read path ends in
//! time with a decision the stored limits allow or a typed error; none panics, none hangs,
//! none admits past a valid limit.
//!
//! Each case builds a valid world with dynalimit's own writers (`dynalimit_tests::hostile`),
//! adds items zae-limiter 0.17 writes, mutates them (attributes dropped, retyped, set to
//! extreme numbers and huge strings, stamps far away, keys of the wrong shape, items of
//! another namespace whose index keys name this one), stores them with raw `PutItem`s on the
//! in-memory backend, and drives every read path: acquires (fast path, slow path, cascade,
//! explicit limits), availability, pause, reset, top-up, usage, audit, entity and
//! configuration reads, a second open of the table, and the aggregator's processor on stream
//! records of the changed buckets. Each path runs in a task of its own under a real-time bound
//! ([`drive::PATH_BOUND`]): a panic or an overrun fails the case, with its items printed.
//!
//! An hour later (by the case's manual clock), acquires of one token are counted for a minute
//! and held to what the stored limits allow ([`oracle`]).
//!
//! `PROPTEST_CASES` sets the number of cases (default [`DEFAULT_CASES`], sized for the test
//! command on two cores); the suite prints how many ran.

mod cases;
mod drive;
mod known;
mod oracle;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::test_runner::{TestCaseError, TestRunner};

use dynalimit_tests::hostile::{self, strategy};

/// Cases per run when `PROPTEST_CASES` does not say.
const DEFAULT_CASES: u32 = 40;

#[test]
fn hostile_items() {
    let config = hostile::config(DEFAULT_CASES, "tests/hostile/regressions.txt", 256);
    // With HOSTILE_SURVEY set, every failing case is printed and the run goes on (no
    // shrinking): a list of what fails, rather than the smallest case of the first failure.
    let survey = std::env::var_os("HOSTILE_SURVEY").is_some();
    let ran = Arc::new(AtomicU32::new(0));
    let failed = Arc::new(AtomicU32::new(0));
    let tally = Arc::new(drive::Tally::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy::case(), |case| {
        ran.fetch_add(1, Ordering::Relaxed);
        match drive::run(&case, &tally) {
            Err(e) if survey => {
                failed.fetch_add(1, Ordering::Relaxed);
                eprintln!("FAILED CASE {case:#?}\n{e}\n");
                Ok(())
            }
            other => other.map_err(TestCaseError::fail),
        }
    });
    let n = ran.load(Ordering::Relaxed);
    eprintln!("hostile items: {n} cases");
    eprintln!("{}", tally.summary());
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(n > 0, "no case ran");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "failing cases (listed above)"
    );
}
