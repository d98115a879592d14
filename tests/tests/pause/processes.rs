//! Two OS processes sharing one table: a pause reported in one holds the other.
//!
//! The parent re-runs this test binary with `--exact` on the `child_*` test, passing the
//! endpoint, the table and a start time through the environment. Both processes read time from
//! a manual clock started at that same instant, so "until the deadline" is exact: the emulator
//! compares the stamp with the `:now` each client sends.

use std::process::Command;
use std::time::Duration;

use dynalimit::Error;
use dynalimit::backoff::{Backoff, bucket_scope};
use dynalimit_core::{Clock, SystemClock};
use dynalimit_repository::Repository;

use super::{open_limiter, paused, spend_one, succeeded};

const NS: &str = "pause-procs";
const CHILD: &str = "processes::child_acquires_on_the_parents_table";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set by the parent"))
}

fn paused_ms(result: Result<(), Error>) -> Option<u128> {
    paused(result).map(|d| d.as_millis())
}

/// Run only as a child of `a_pause_in_one_process_holds_the_other`.
#[tokio::test]
#[ignore = "run as a child process by another test"]
async fn child_acquires_on_the_parents_table() {
    let Ok(table) = std::env::var("DYNALIMIT_PAUSE_CHILD_TABLE") else {
        return;
    };
    let t0: i64 = var("DYNALIMIT_PAUSE_CHILD_T0").parse().unwrap();
    let until: i64 = var("DYNALIMIT_PAUSE_CHILD_UNTIL").parse().unwrap();
    let builder = Repository::builder()
        .client(dynalimit_tests::client().await)
        .stack(table);
    let (limiter, clock) = open_limiter(builder, NS, t0).await;
    let mut report = Vec::new();
    // Refused from the start to one millisecond before the deadline.
    for at in [t0, t0 + 10_000, until - 1] {
        clock.set_epoch_millis(at);
        let left = paused_ms(spend_one(&limiter).await);
        report.push(format!(
            "{at}:{}",
            left.map_or("admitted".into(), |l| l.to_string())
        ));
    }
    clock.set_epoch_millis(until);
    let left = paused_ms(spend_one(&limiter).await);
    report.push(format!(
        "{until}:{}",
        left.map_or("admitted".into(), |l| l.to_string())
    ));
    // Now this process reports a pause through a gate over the bucket store; the parent will
    // find it on the item.
    let gate = Backoff::builder()
        .clock(clock.clone())
        .store(limiter.pause_store())
        .build()
        .unwrap();
    let back = gate
        .report(&bucket_scope("user-1", "llm"), Some(Duration::from_secs(7)))
        .await
        .unwrap();
    report.push(format!("reported:{}", back.until_epoch_ms()));
    println!("PAUSE-CHILD-REPORT {}", report.join(" "));
}

#[tokio::test]
async fn a_pause_in_one_process_holds_the_other() {
    let table = dynalimit_tests::table().await;
    let t0 = SystemClock.epoch_millis();
    let (limiter, clock) = open_limiter(table.builder(), NS, t0).await;
    spend_one(&limiter).await.unwrap();
    let until = limiter
        .pause("user-1", "llm", Duration::from_secs(20))
        .await
        .unwrap()
        .expect("stamped");
    assert_eq!(until, t0 + 20_000);

    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            CHILD,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DYNALIMIT_TEST_ENDPOINT", dynalimit_tests::endpoint().url())
        .env("DYNALIMIT_PAUSE_CHILD_TABLE", table.name())
        .env("DYNALIMIT_PAUSE_CHILD_T0", t0.to_string())
        .env("DYNALIMIT_PAUSE_CHILD_UNTIL", until.to_string())
        .output()
        .expect("run the child process");
    let stdout = succeeded(&out, "child failed");
    let report: Vec<&str> = stdout
        .lines()
        .find_map(|l| l.split_once("PAUSE-CHILD-REPORT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("the child did not report:\n{stdout}"))
        .split(' ')
        .collect();
    assert_eq!(
        report[..4],
        [
            format!("{t0}:20000"),
            format!("{}:10000", t0 + 10_000),
            format!("{}:1", until - 1),
            format!("{until}:admitted"),
        ]
    );
    // The child's pause (7 s from `until`) holds this process.
    let child_until = until + 7_000;
    assert_eq!(report[4], format!("reported:{child_until}"));
    clock.set_epoch_millis(until + 1);
    assert_eq!(paused_ms(spend_one(&limiter).await), Some(6_999));
    clock.set_epoch_millis(child_until);
    assert_eq!(paused_ms(spend_one(&limiter).await), None);
}
