//! Shared pauses on bucket items against a real DynamoDB endpoint: the stamp and the paths
//! that honour it, two OS processes sharing a table, a zae-limiter 0.17 client on a stamped
//! bucket, and the `RateLimiterLayer` in front of an axum server.

mod layer;
mod processes;
mod python;
mod stamp;

use std::sync::Arc;

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::{Clock, ManualClock, SystemClock};
use dynalimit_format::item::{Item, get_i64};
use dynalimit_repository::RepositoryBuilder;
use dynalimit_tests::TestTable;

/// The limits every test here uses: 10 requests per minute.
fn rpm() -> Limit {
    Limit::per_minute("rpm", 10)
}

/// A limiter on namespace `ns` of `table` with a manual clock started at the wall-clock time.
async fn limiter(table: &TestTable, ns: &str) -> (RateLimiter, ManualClock) {
    open_limiter(table.builder(), ns, SystemClock.epoch_millis()).await
}

/// A limiter on namespace `ns` opened from `builder`, with a manual clock started at `t0`.
async fn open_limiter(builder: RepositoryBuilder, ns: &str, t0: i64) -> (RateLimiter, ManualClock) {
    let clock = ManualClock::new(t0);
    let repo = builder
        .namespace(ns)
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .expect("open namespace");
    (RateLimiter::new(repo), clock)
}

/// Every bucket item of `(entity, resource)` in `table` (any shard), read raw.
async fn bucket_items(table: &TestTable, entity: &str, resource: &str) -> Vec<Item> {
    let marker = format!("/BUCKET#{entity}#{resource}#");
    table
        .scan_all()
        .await
        .into_iter()
        .filter(|i| {
            i.get("PK")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|pk| pk.contains(&marker))
        })
        // The bucket items, not the refusal minutes beside them in shard 0's partition.
        .filter(|i| i.get("SK").and_then(|v| v.as_s().ok()).map(String::as_str) == Some("#STATE"))
        .collect()
}

/// Shard 0's bucket item of `(entity, resource)` in `table`, read raw.
async fn bucket_item(table: &TestTable, entity: &str, resource: &str) -> Item {
    bucket_items(table, entity, resource)
        .await
        .into_iter()
        .find(|i| {
            i.get("PK")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|pk| pk.ends_with("#0"))
        })
        .expect("bucket item")
}

/// `(b_rpm_tk, b_wcu_tk, b_rpm_tc)` of an item.
fn balances(item: &Item) -> (i64, i64, i64) {
    balances_of(item, "rpm")
}

/// `(b_{limit}_tk, b_wcu_tk, b_{limit}_tc)` of a bucket item.
fn balances_of(item: &Item, limit: &str) -> (i64, i64, i64) {
    let tk = format!("b_{limit}_tk");
    (
        get_i64(item, &tk).expect("the balance"),
        get_i64(item, "b_wcu_tk").expect("b_wcu_tk"),
        get_i64(item, &format!("b_{limit}_tc")).unwrap_or(0),
    )
}

/// Acquires one `rpm` on `user-1`/`llm` under [`rpm`] and commits.
async fn spend_one(limiter: &RateLimiter) -> Result<(), Error> {
    limiter
        .acquire("user-1", "llm", [("rpm", 1)])
        .limits([rpm()])
        .await?
        .commit()
        .await
}

/// The time left of a paused rejection; `None` when admitted.
///
/// # Panics
/// On any other outcome.
fn paused(result: Result<(), Error>) -> Option<std::time::Duration> {
    match result {
        Ok(()) => None,
        Err(Error::Rejected(r)) if r.paused_until().is_some() => r.retry_after(),
        Err(other) => panic!("expected a paused rejection, got {other:?}"),
    }
}

/// The standard output of a finished child process, once it is asserted to have succeeded
/// (the failure names the child as `what` and shows both of its outputs).
fn succeeded(out: &std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
