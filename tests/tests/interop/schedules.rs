//! Scheduled limits (reference §12.2) on a table shared with zae-limiter 0.17: a schedule
//! written by either library is read by the other, both admit exactly what the window in
//! force allows from one bucket, both report the same wait, and a bucket either one creates
//! is the same item to the attribute.
//!
//! Both clocks are fixed at the same instants (zae-limiter's through the driver's `now_ms`,
//! dynalimit's through a `ManualClock`): Wednesday 2026-07-15, 10:00 and 18:00 in Berlin.

use std::sync::Arc;

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_repository::Repository;
use dynalimit_tests::TestTable;
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::{Python, shared_table};

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

async fn clocked(table: &TestTable, clock: &ManualClock) -> Repository {
    table
        .builder()
        .namespace(NS)
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap()
}

/// Three rounds of `batch` acquires of 1 rpm by `entity` at `now` on each side in turn:
/// admitted per side, and the retry-after (ms) of each side's last refusal.
async fn alternate(
    python: &Python,
    limiter: &RateLimiter,
    clock: &ManualClock,
    entity: &str,
    now: i64,
    batch: usize,
) -> ((usize, usize), (Option<i64>, Option<i64>)) {
    clock.set_epoch_millis(now);
    let (mut rust, mut py) = (0, 0);
    let (mut rust_wait, mut py_wait) = (None, None);
    let acquire = json!({"op": "acquire", "entity": entity, "resource": "gpt-4",
                         "consume": {"rpm": 1}, "now_ms": now});
    for _ in 0..3 {
        for answer in python.ok(NS, vec![acquire.clone(); batch]).await {
            if answer["admitted"] == true {
                py += 1;
            } else {
                py_wait = answer["retry_after_ms"].as_i64();
            }
        }
        for _ in 0..batch {
            match limiter.acquire(entity, "gpt-4", [("rpm", 1)]).await {
                Ok(lease) => {
                    lease.commit().await.unwrap();
                    rust += 1;
                }
                Err(Error::Rejected(r)) => {
                    rust_wait = Some(i64::try_from(r.retry_after().unwrap().as_millis()).unwrap());
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    ((rust, py), (rust_wait, py_wait))
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
    let ((rust, py), waits) = alternate(&python, &limiter, &clock, "k", WED_10_00, 12).await;
    assert_eq!(rust + py, 50, "rust {rust} + python {py}");
    assert_eq!(waits, (Some(1201), Some(1201)));
    let item = bucket_item(&repo, "k", 0).await;
    let s = |k: &str| item[k].as_s().unwrap().clone();
    assert_eq!(s("sched"), "1h9-17w1-5s500");
    assert_eq!(s("sched_tz"), "Europe/Berlin");
    assert_eq!(item["vu"].as_n().unwrap(), &WED_18_00.to_string());

    // After 18:00: the base, 100.
    let ((rust, py), _) = alternate(&python, &limiter, &clock, "k", WED_18_00, 20).await;
    assert_eq!(rust + py, 100, "rust {rust} + python {py}");
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(
        item["b_rpm_tc"].as_n().unwrap(),
        "150000",
        "every debit counted"
    );
}

/// The attributes of a bucket item that do not name its owner.
fn state_of(item: &BTreeMap<String, AttributeValue>) -> Vec<(String, String)> {
    let owner = ["PK", "GSI2SK", "GSI3PK", "GSI3SK", "GSI4SK", "entity_id"];
    let mut out: Vec<(String, String)> = item
        .iter()
        .filter(|(k, _)| !owner.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), format!("{v:?}")))
        .collect();
    out.sort();
    out
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

    let limiter = RateLimiter::new(repo.clone());
    limiter
        .acquire("rust", "gpt-4", [("rpm", 3), ("tpm", 40)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let answer = python
        .one(
            NS,
            json!({"op": "acquire", "entity": "python", "resource": "gpt-4",
                   "consume": {"rpm": 3, "tpm": 40}, "now_ms": WED_10_00 + 123_456}),
        )
        .await;
    assert_eq!(answer["admitted"], json!(true));
    let rust = bucket_item(&repo, "rust", 0).await;
    let py = bucket_item(&repo, "python", 0).await;
    assert_eq!(state_of(&rust), state_of(&py));
    assert_eq!(
        rust["b_rpm_tk"].as_n().unwrap(),
        "47000",
        "50 in force, 3 spent"
    );
    assert_eq!(rust["b_tpm_sched"].as_s().unwrap(), "-");
}
