//! The fault soak in its short form (the longer one: `cargo run --release -p dynalimit-tests
//! --bin dynalimit-soak -- --seconds 300`): 64 tasks in 4 processes on cascading buckets, 3 %
//! of the data-plane requests faulted, the parent doubling its shards twice and the emulator
//! killed and restarted twice.

mod fleet;

use std::path::Path;

use dynalimit_tests::soak::{self, Options};

#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_admitted_beyond_capacity_and_every_unknown_outcome_is_accounted_for() {
    if dynalimit_tests::endpoint().is_external() {
        // Killing and restarting needs a private emulator.
        return;
    }
    // 20 s of up time: each phase between the events still admits and refuses by the
    // hundred.
    let options = Options {
        seconds: 20,
        ..Options::default()
    };
    let report = soak::run(&options, Path::new(env!("CARGO_BIN_EXE_dynalimit-soak")))
        .await
        .expect("the soak runs");
    let ledger = &report.ledger;
    println!(
        "soak: {:.0} s ({:.0} s down), admitted {}, rejected {} ({} unsettled), unavailable {} \
         ({} unknown outcomes), \
         failed settlements {}, faults {:?}",
        report.elapsed_s,
        report.down_s,
        ledger.admitted,
        ledger.rejected,
        ledger.unsettled,
        ledger.unavailable,
        ledger.unknown,
        ledger.failed_settlements,
        ledger.faults
    );
    assert!(
        report.failed_workers.is_empty(),
        "{:?}",
        report.failed_workers
    );
    assert_eq!(ledger.stuck, 0, "no task is stuck");
    assert!(ledger.other_errors.is_empty(), "{:?}", ledger.other_errors);
    assert_eq!(report.restarts, options.restarts);
    assert!(report.parent_shards >= 4, "the parent doubled twice");
    // The soak exercised what it claims to: admissions, the parent's limit, faults.
    assert!(ledger.admitted > 0 && ledger.rejected > 0, "{ledger:?}");
    assert!(ledger.faults.len() >= 6, "{:?}", ledger.faults);
    for b in &report.balances {
        println!(
            "{}: table Σtc {}, ledger {:?}, allowance {}, shard counts {:?}",
            b.key, b.table_tc, b.ledger, b.allowance, b.shard_counts
        );
    }
    for b in &report.balances {
        assert!(
            b.accounted(),
            "{}: table Σtc {} outside the ledger {:?}",
            b.key,
            b.table_tc,
            b.ledger
        );
        assert!(
            b.within_allowance(),
            "{}: {:?} beyond capacity plus refill {}",
            b.key,
            b.ledger,
            b.allowance
        );
        assert!(
            b.shards_agree(),
            "{}: shard counts {:?}",
            b.key,
            b.shard_counts
        );
    }
    assert!(report.passed());
}
