//! Scheduled limits (reference §12.2) on a table shared with zae-limiter 0.17: a schedule
//! written by either library is read by the other, both admit exactly what the window in
//! force allows from one bucket, both report the same wait, and a bucket either one creates
//! is the same item to the attribute.
//!
//! Both clocks are fixed at the same instants (zae-limiter's through the driver's `now_ms`,
//! dynalimit's through a `ManualClock`): Wednesday 2026-07-15, 10:00 and 18:00 in Berlin.

use dynalimit::{Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::shared_table;
use crate::timed::{alternate, both_create, clocked};

const NS: &str = "default";
const HOUR: i64 = 3_600_000;
/// 2026-07-15 10:00 in Berlin (08:00 UTC), a Wednesday.
const WED_10_00: i64 = 1_784_102_400_000;
/// 18:00 the same day, after office hours.
const WED_18_00: i64 = WED_10_00 + 8 * HOUR;

/// `rpm` 100 a minute, half of it during office hours in Berlin, as zae-limiter spells it.
fn office_json() -> Value {
    json!({"name": "rpm", "capacity": 100, "refill_amount": 100, "refill_period_seconds": 60,
           "schedule": [{"cron": "* 9-17 * * 1-5", "tz": "Europe/Berlin", "scale": 0.5}]})
}

/// The same limit in dynalimit.
fn office() -> Limit {
    let zone = Zone::get("Europe/Berlin").unwrap();
    let half = Entry::scaled("* 9-17 * * MON-FRI", 0.5).unwrap();
    Limit::per_minute("rpm", 100).with_schedule(Schedule::new(zone, vec![half]).unwrap())
}

#[tokio::test]
async fn a_schedule_written_by_zae_limiter_is_honoured_by_both_from_one_bucket() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(WED_10_00);
    let repo = clocked(&table, &clock).await;
    python
        .one(
            NS,
            json!({"op": "set_resource_defaults", "resource": "gpt-4",
                   "limits": [office_json()]}),
        )
        .await;
    let read = repo.get_resource_defaults("gpt-4").await.unwrap();
    assert_eq!(
        read.expect("resource defaults").limits,
        vec![office()],
        "dynalimit reads zae-limiter's schedule"
    );
    let limiter = RateLimiter::new(repo.clone());

    // Office hours: 50 between them, then both refuse with the wait for one token at 50 a
    // minute.
    let ((rust, py), waits) =
        alternate(&python, &limiter, &clock, ("k", "rpm"), WED_10_00, 12).await;
    assert_eq!(rust + py, 50, "rust {rust} + python {py}");
    assert_eq!(waits, (Some(1201), Some(1201)));
    let item = bucket_item(&repo, "k", 0).await;
    let s = |k: &str| item[k].as_s().unwrap().clone();
    assert_eq!(s("sched"), "1h9-17w1-5s500");
    assert_eq!(s("sched_tz"), "Europe/Berlin");
    assert_eq!(item["vu"].as_n().unwrap(), &WED_18_00.to_string());

    // After 18:00: the base, 100.
    let ((rust, py), _) = alternate(&python, &limiter, &clock, ("k", "rpm"), WED_18_00, 20).await;
    assert_eq!(rust + py, 100, "rust {rust} + python {py}");
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(
        item["b_rpm_tc"].as_n().unwrap(),
        "150000",
        "every debit counted"
    );
}

#[tokio::test]
async fn a_schedule_written_by_dynalimit_is_read_by_zae_limiter_and_both_create_the_same_bucket() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(WED_10_00 + 123_456);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[office(), Limit::per_minute("tpm", 1000)])
        .await
        .unwrap();
    let read = python
        .one(
            NS,
            json!({"op": "get_resource_defaults", "resource": "gpt-4"}),
        )
        .await;
    let tpm = json!({"name": "tpm", "capacity": 1000, "refill_amount": 1000,
                     "refill_period_seconds": 60});
    assert_eq!(read, json!([office_json(), tpm]));

    let (rust, py) = both_create(
        &python,
        &repo,
        &clock,
        WED_10_00 + 123_456,
        &[("rpm", 3), ("tpm", 40)],
    )
    .await;
    assert_eq!(rust, py);
    let rust = bucket_item(&repo, "rust", 0).await;
    assert_eq!(
        rust["b_rpm_tk"].as_n().unwrap(),
        "47000",
        "50 in force, 3 spent"
    );
    assert_eq!(rust["b_tpm_sched"].as_s().unwrap(), "-");
}
