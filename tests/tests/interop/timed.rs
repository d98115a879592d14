//! Helpers for tests that fix both libraries' clocks at chosen instants: zae-limiter's through
//! the driver's `now_ms`, dynalimit's through a `ManualClock`.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_repository::Repository;
use dynalimit_tests::TestTable;
use serde_json::json;

use crate::python::Python;

/// Namespace `default` of `table`, on `clock`.
pub(crate) async fn clocked(table: &TestTable, clock: &ManualClock) -> Repository {
    table
        .builder()
        .namespace("default")
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap()
}

/// Three rounds of `batch` acquires of 1 `limit` by `entity` on gpt-4 at `now`, zae-limiter
/// then dynalimit: admitted per side `(rust, python)`, and the retry-after (ms) of each
/// side's last refusal.
pub(crate) async fn alternate(
    python: &Python,
    limiter: &RateLimiter,
    clock: &ManualClock,
    (entity, limit): (&str, &str),
    now: i64,
    batch: usize,
) -> ((usize, usize), (Option<i64>, Option<i64>)) {
    clock.set_epoch_millis(now);
    let (mut rust, mut py) = (0, 0);
    let (mut rust_wait, mut py_wait) = (None, None);
    let acquire = json!({"op": "acquire", "entity": entity, "resource": "gpt-4",
                         "consume": {limit: 1}, "now_ms": now});
    for _ in 0..3 {
        for answer in python.ok("default", vec![acquire.clone(); batch]).await {
            if answer["admitted"] == true {
                py += 1;
            } else {
                py_wait = answer["retry_after_ms"].as_i64();
            }
        }
        for _ in 0..batch {
            match limiter.acquire(entity, "gpt-4", [(limit, 1)]).await {
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

/// Entity `rust` acquires `consume` on gpt-4 through dynalimit (its clock at `now`) and entity
/// `python` the same through zae-limiter (at `now`); both are admitted. The two bucket items,
/// `(rust, python)`, each with the attributes that do not name its owner.
pub(crate) async fn both_create(
    python: &Python,
    repo: &Repository,
    clock: &ManualClock,
    now: i64,
    consume: &[(&str, i64)],
) -> (Vec<(String, String)>, Vec<(String, String)>) {
    clock.set_epoch_millis(now);
    RateLimiter::new(repo.clone())
        .acquire("rust", "gpt-4", consume.iter().copied())
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let consume: serde_json::Map<String, serde_json::Value> = consume
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let answer = python
        .one(
            "default",
            json!({"op": "acquire", "entity": "python", "resource": "gpt-4",
                   "consume": consume, "now_ms": now}),
        )
        .await;
    assert_eq!(answer["admitted"], json!(true));
    let rust = crate::buckets::bucket_item(repo, "rust", 0).await;
    let py = crate::buckets::bucket_item(repo, "python", 0).await;
    (state_of(&rust), state_of(&py))
}

/// The attributes of a bucket item that do not name its owner, for comparing two owners'
/// items.
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
