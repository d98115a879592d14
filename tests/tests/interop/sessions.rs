//! Session quotas (reference §12.3) on a table shared with zae-limiter 0.17: a session quota
//! written by either library is read by the other; both spend one window's allowance from
//! one bucket and no more, quote the same wait (the window's end), and open the next window
//! at the first request after it ended; a bucket either one creates is the same item to the
//! attribute, and so is one either one resets; both libraries hammering one sharded session
//! quota never admit more than the allowance.
//!
//! Both clocks are fixed at the same instants (zae-limiter's through the driver's `now_ms`,
//! dynalimit's through a `ManualClock`).

use dynalimit::{Limit, RateLimiter};
use dynalimit_core::ManualClock;
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::shared_table;
use crate::timed::{alternate, both_create, clocked};

const NS: &str = "default";
const HOUR: i64 = 3_600_000;
/// 2026-07-15 12:00 UTC.
const NOON: i64 = 1_784_116_800_000;

fn session_json(capacity: i64) -> Value {
    json!({"name": "requests", "capacity": capacity, "refill_amount": 0,
           "refill_period_seconds": 1, "reset_after_seconds": 3600})
}

#[tokio::test]
async fn a_session_quota_written_by_zae_limiter_is_spent_by_both_once_per_window() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    python
        .one(
            NS,
            json!({"op": "set_resource_defaults", "resource": "gpt-4",
                   "limits": [session_json(10)]}),
        )
        .await;
    let record = repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.15.0", "zae-limiter's ratchet");
    let read = repo.get_resource_defaults("gpt-4").await.unwrap();
    assert_eq!(
        read.expect("resource defaults").limits,
        vec![Limit::session_quota("requests", 10, 3600)]
    );
    let limiter = RateLimiter::new(repo.clone());

    let ((rust, py), waits) =
        alternate(&python, &limiter, &clock, ("k", "requests"), NOON, 3).await;
    assert_eq!(rust + py, 10, "rust {rust} + python {py}");
    assert_eq!(
        waits,
        (Some(HOUR), Some(HOUR)),
        "both wait for the window's end"
    );
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(item["b_requests_rsa"].as_n().unwrap(), "3600");
    assert_eq!(item["b_requests_ws"].as_n().unwrap(), &NOON.to_string());
    assert_eq!(item["vu"].as_n().unwrap(), &(NOON + HOUR).to_string());

    // Three idle hours later, whichever comes first opens the next window then.
    let back = NOON + 3 * HOUR;
    let ((rust, py), _) = alternate(&python, &limiter, &clock, ("k", "requests"), back, 4).await;
    assert_eq!(rust + py, 10, "rust {rust} + python {py}");
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(item["b_requests_ws"].as_n().unwrap(), &back.to_string());
    assert_eq!(item["b_requests_tc"].as_n().unwrap(), "20000");
}

#[tokio::test]
async fn a_session_quota_written_by_dynalimit_is_read_by_zae_limiter_and_both_create_the_same_bucket()
 {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON + 777);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults(
        "gpt-4",
        &[
            Limit::session_quota("requests", 10, 3600),
            Limit::per_minute("rpm", 100),
        ],
    )
    .await
    .unwrap();
    let read = python
        .one(
            NS,
            json!({"op": "get_resource_defaults", "resource": "gpt-4"}),
        )
        .await;
    let rpm = json!({"name": "rpm", "capacity": 100, "refill_amount": 100,
                     "refill_period_seconds": 60});
    assert_eq!(read, json!([session_json(10), rpm]));

    let (rust, py) = both_create(
        &python,
        &repo,
        &clock,
        NOON + 777,
        &[("requests", 3), ("rpm", 1)],
    )
    .await;
    assert_eq!(rust, py);
    let rust = bucket_item(&repo, "rust", 0).await;
    assert_eq!(rust["b_requests_tk"].as_n().unwrap(), "7000");
    assert_eq!(
        rust["b_requests_wa"].as_n().unwrap(),
        &(NOON + 777).to_string()
    );
}

#[tokio::test]
async fn a_session_quota_reset_by_either_library_leaves_the_same_bucket() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[Limit::session_quota("requests", 10, 3600)])
        .await
        .unwrap();
    let (rust, py) = both_create(&python, &repo, &clock, NOON, &[("requests", 7)]).await;
    assert_eq!(rust, py);
    clock.set_epoch_millis(NOON + 1000);
    let reset = repo
        .reset_bucket(
            "rust",
            "gpt-4",
            &dynalimit_repository::OperationOptions::new(),
        )
        .await
        .unwrap();
    let answer = python
        .one(
            NS,
            json!({"op": "reset_bucket", "entity": "python", "resource": "gpt-4",
                   "now_ms": NOON + 1000}),
        )
        .await;
    assert_eq!(answer["amounts"]["requests"], reset.amounts["requests"]);
    let rust = bucket_item(&repo, "rust", 0).await;
    let py = bucket_item(&repo, "python", 0).await;
    for attr in [
        "b_requests_tk",
        "b_requests_gc",
        "b_requests_ws",
        "b_requests_wa",
        "b_requests_rsa",
        "b_requests_tc",
        "rf",
        "vu",
    ] {
        assert_eq!(rust.get(attr), py.get(attr), "{attr}");
    }
    assert_eq!(
        rust["b_requests_ws"].as_n().unwrap(),
        &(NOON + 1000 - HOUR).to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_and_rust_contending_on_one_sharded_session_quota_never_admit_more_than_it() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[Limit::session_quota("requests", 100, 3600)])
        .await
        .unwrap();
    for item in crate::quotas::sharded_and_hammered_by_both(&python, &repo).await {
        if let Some(ws) = item.get("b_requests_ws") {
            assert_eq!(ws.as_n().unwrap(), &NOON.to_string(), "one window");
        }
    }
}
