//! Calendar quotas (reference §12.3) on a table shared with zae-limiter 0.17: a quota written
//! by either library is read by the other; both spend one period's allowance from one
//! bucket and no more, quote the same wait (the next reset edge), both get the new period's
//! grant after the edge, and a bucket either one creates is the same item to the attribute.
//!
//! Both clocks are fixed at the same instants (zae-limiter's through the driver's `now_ms`,
//! dynalimit's through a `ManualClock`).

use dynalimit::{Limit, RateLimiter};
use dynalimit_core::schedule::Zone;
use dynalimit_core::{Clock, ManualClock, SystemClock};
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::{Python, shared_table};
use crate::timed::{alternate, both_create, clocked};

const NS: &str = "default";
const HOUR: i64 = 3_600_000;
/// 2026-07-15 12:00 UTC.
const NOON: i64 = 1_784_116_800_000;
/// The next midnight in New York (04:00 UTC on the 16th).
const NY_MIDNIGHT: i64 = NOON + 16 * HOUR;

fn quota_json() -> Value {
    json!({"name": "requests", "capacity": 10, "refill_amount": 0, "refill_period_seconds": 1,
           "reset": [{"cron": "0 0 * * *", "tz": "America/New_York"}]})
}

fn quota() -> Limit {
    Limit::quota_per_day("requests", 10, Zone::get("America/New_York").unwrap())
}

#[tokio::test]
async fn a_quota_written_by_zae_limiter_is_spent_by_both_once_per_period() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    python
        .one(
            NS,
            json!({"op": "set_resource_defaults", "resource": "gpt-4",
                   "limits": [quota_json()]}),
        )
        .await;
    let read = repo.get_resource_defaults("gpt-4").await.unwrap();
    assert_eq!(read.expect("resource defaults").limits, vec![quota()]);
    let limiter = RateLimiter::new(repo.clone());

    let ((rust, py), waits) =
        alternate(&python, &limiter, &clock, ("k", "requests"), NOON, 3).await;
    assert_eq!(rust + py, 10, "rust {rust} + python {py}");
    let wait = NY_MIDNIGHT - NOON + 1;
    assert_eq!(
        waits,
        (Some(wait), Some(wait)),
        "both wait for midnight in New York"
    );
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(item["rsched"].as_s().unwrap(), "1m0h0");
    assert_eq!(item["sched_tz"].as_s().unwrap(), "America/New_York");
    assert_eq!(item["b_requests_gc"].as_n().unwrap(), "1");
    assert_eq!(item["vu"].as_n().unwrap(), &NY_MIDNIGHT.to_string());

    // The next day, both spend the new period's allowance once.
    let ((rust, py), _) = alternate(
        &python,
        &limiter,
        &clock,
        ("k", "requests"),
        NY_MIDNIGHT + HOUR,
        4,
    )
    .await;
    assert_eq!(rust + py, 10, "rust {rust} + python {py}");
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(item["b_requests_tc"].as_n().unwrap(), "20000");
}

#[tokio::test]
async fn a_quota_written_by_dynalimit_is_read_by_zae_limiter_and_both_create_the_same_bucket() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON + 777);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[quota(), Limit::per_minute("rpm", 100)])
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
    assert_eq!(read, json!([quota_json(), rpm]));

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
    assert_eq!(rust["b_rpm_rsched"].as_s().unwrap(), "-");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_and_rust_contending_on_one_quota_never_admit_more_than_its_allowance() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    let limiter = RateLimiter::new(repo.clone());
    // Both sides start together and ask for about three times the allowance.
    repo.set_resource_defaults(
        "gpt-4",
        &[Limit::quota_per_day(
            "requests",
            100,
            Zone::get("America/New_York").unwrap(),
        )],
    )
    .await
    .unwrap();
    let (rust, py) = hammer_both(&python, &limiter).await;

    assert!(
        rust + py <= 100,
        "rust {rust} + python {py} over the allowance"
    );
    assert!(
        rust + py >= 99,
        "rust {rust} + python {py}: under 99 % of a wanted allowance"
    );
    assert!(
        rust > 0 && py > 0,
        "both sides were admitted: rust {rust}, python {py}"
    );
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(
        item["b_requests_tc"].as_n().unwrap(),
        &((rust + py) * 1000).to_string(),
        "every admission counted once"
    );
}

/// zae-limiter (4 workers, 150 attempts, its clock at `NOON`) and dynalimit (8 tasks of 20
/// attempts) acquire 1 `requests` of `k` together, from the same wall-clock second:
/// `(rust admitted, python admitted)`.
pub(crate) async fn hammer_both(python: &Python, limiter: &RateLimiter) -> (i64, i64) {
    // Both start at the same wall-clock second, once the Python process is up.
    let wall = || SystemClock.epoch_millis() as f64 / 1000.0;
    let start = wall() + 4.0;
    let py = python.one(
        NS,
        json!({"op": "hammer", "entity": "k", "resource": "gpt-4",
               "consume": {"requests": 1}, "count": 150, "concurrency": 4, "now_ms": NOON,
               "start_at": start}),
    );
    let rust = async {
        let wait = start - wall();
        tokio::time::sleep(std::time::Duration::from_secs_f64(wait.max(0.0))).await;
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..20 {
                    match limiter.acquire("k", "gpt-4", [("requests", 1)]).await {
                        Ok(lease) => {
                            lease.commit().await.unwrap();
                            admitted += 1;
                        }
                        Err(dynalimit::Error::Rejected(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                admitted
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    };
    let (py, rust) = tokio::join!(py, rust);
    (rust, py["admitted"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quota_dynalimit_sharded_is_shared_with_zae_limiter_within_its_allowance() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults(
        "gpt-4",
        &[Limit::quota_per_day(
            "requests",
            100,
            Zone::get("America/New_York").unwrap(),
        )],
    )
    .await
    .unwrap();
    sharded_and_hammered_by_both(&python, &repo).await;
}

/// Entity `k` of `repo` acquires 1 `requests` (shard 0 created), its bucket is split to 4
/// shards (every shard created, holding part of the allowance), then both libraries hammer it ([`hammer_both`]): at most the allowance of 100 is
/// admitted, at least 99, and every admission is counted once over the shards. The 4 shard
/// items, for more assertions.
pub(crate) async fn sharded_and_hammered_by_both(
    python: &Python,
    repo: &dynalimit_repository::Repository,
) -> Vec<std::collections::BTreeMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    use dynalimit_format::bucket::BucketKey;
    let limiter = RateLimiter::new(repo.clone());
    limiter
        .acquire("k", "gpt-4", [("requests", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let key = BucketKey::new("k", "gpt-4", 0);
    for (from, to) in [(1, 2), (2, 4)] {
        let now = repo.clock().epoch_millis();
        let split = repo.buckets().double_shards(&key, from, to, now).await;
        assert_eq!(split.unwrap().count, to);
    }
    let (rust, py) = hammer_both(python, &limiter).await;
    let total = 1 + rust + py;
    assert!(
        total <= 100,
        "rust {rust} + python {py} + 1 over the allowance"
    );
    assert!(total >= 99, "rust {rust} + python {py} + 1: under 99 %");
    let mut items = Vec::new();
    let mut tc = 0;
    for shard in 0..4 {
        let item = bucket_item(repo, "k", shard).await;
        if let Some(n) = item.get("b_requests_tc") {
            tc += n.as_n().unwrap().parse::<i64>().unwrap();
        }
        items.push(item);
    }
    assert_eq!(tc, total * 1000, "every admission counted once");
    items
}

#[tokio::test]
async fn a_quota_reset_by_either_library_leaves_the_same_bucket() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[quota()])
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
    assert_eq!(reset.amounts["requests"], 7);
    let answer = python
        .one(
            NS,
            json!({"op": "reset_bucket", "entity": "python", "resource": "gpt-4",
                   "now_ms": NOON + 1000}),
        )
        .await;
    assert_eq!(answer["amounts"]["requests"], 7);
    let rust = bucket_item(&repo, "rust", 0).await;
    let py = bucket_item(&repo, "python", 0).await;
    for attr in [
        "b_requests_tk",
        "b_requests_gc",
        "b_requests_rn",
        "b_requests_tc",
        "rf",
        "vu",
    ] {
        assert_eq!(rust.get(attr), py.get(attr), "{attr}");
    }
    assert_eq!(rust["b_requests_tk"].as_n().unwrap(), "10000");
    assert_eq!(rust["b_requests_rn"].as_n().unwrap(), "1");
}
