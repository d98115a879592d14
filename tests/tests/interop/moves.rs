//! The writers of zae-limiter 0.17's newest features used by one library and honoured by the
//! other on a shared table (reference §12.1, §12.4, §12.5, §12.6): a parent move and a
//! cascade policy decide which parent the other library debits; a soft limit and a bypass
//! stored by dynalimit admit zae-limiter's acquires past the capacity; a quota topped up by
//! either library leaves the same bucket.

use dynalimit::{Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_core::schedule::Zone;
use dynalimit_repository::{NewEntity, Repository};
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::{Python, shared_table};
use crate::timed::{both_create, clocked};

const NS: &str = "default";

fn call(method: &str, args: Value) -> Value {
    json!({"op": "access", "method": method, "args": args})
}

/// One acquire of 1 rpm of `entity` on gpt-4 by zae-limiter: whether it was admitted.
async fn python_acquire(python: &Python, entity: &str) -> bool {
    let op = json!({"op": "acquire", "entity": entity, "resource": "gpt-4",
                    "consume": {"rpm": 1}, "continue": true});
    python.run(NS, vec![op]).await.remove(0).expect("answered")["admitted"] == json!(true)
}

async fn rust_acquire(limiter: &RateLimiter, entity: &str) {
    limiter
        .acquire(entity, "gpt-4", [("rpm", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    limiter.settle().await;
}

/// Whole tokens `entity` has consumed of rpm on gpt-4 (its shard 0).
async fn consumed(repo: &Repository, entity: &str) -> i64 {
    bucket_item(repo, entity, 0)
        .await
        .get("b_rpm_tc")
        .map_or(0, |n| n.as_n().unwrap().parse::<i64>().unwrap() / 1000)
}

/// gpt-4 at 100 rpm; `org`, `org2` and `key` under `org` (cascading when `cascade`).
async fn family(repo: &Repository, cascade: bool) {
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    for org in ["org", "org2"] {
        repo.create_entity(NewEntity::new(org)).await.unwrap();
    }
    repo.create_entity(NewEntity::new("key").parent("org").cascade(cascade))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_parent_move_by_either_library_sends_the_other_s_debits_to_the_new_parent() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    family(&repo, true).await;
    let limiter = RateLimiter::new(repo.clone());
    assert!(python_acquire(&python, "key").await);
    assert_eq!(consumed(&repo, "org").await, 1);

    // dynalimit moves the key; zae-limiter's next acquire debits the new parent.
    repo.set_parent("key", Some("org2")).await.unwrap();
    assert!(python_acquire(&python, "key").await);
    assert_eq!(
        (consumed(&repo, "org").await, consumed(&repo, "org2").await),
        (1, 1)
    );
    // zae-limiter moves it back; dynalimit's next acquire debits the old parent again.
    python
        .one(NS, call("set_parent", json!(["key", "org"])))
        .await;
    rust_acquire(&limiter, "key").await;
    assert_eq!(
        (consumed(&repo, "org").await, consumed(&repo, "org2").await),
        (2, 1)
    );
    let moved = repo.get_entity("key").await.unwrap().unwrap();
    assert_eq!(moved.parent_id.as_deref(), Some("org"));
}

#[tokio::test]
async fn a_cascade_policy_set_by_either_library_decides_for_both() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    family(&repo, false).await;
    let limiter = RateLimiter::new(repo.clone());
    rust_acquire(&limiter, "key").await;
    assert_eq!(consumed(&repo, "org").await, 0, "no cascade");
    // dynalimit turns the cascade on for gpt-4: zae-limiter debits the parent.
    repo.set_cascade_policy("key", Some("gpt-4"), Some(true))
        .await
        .unwrap();
    assert!(python_acquire(&python, "key").await);
    assert_eq!(consumed(&repo, "org").await, 1);
    // zae-limiter clears it: dynalimit stops debiting the parent.
    python
        .one(NS, call("clear_entity_cascade", json!(["key", "gpt-4"])))
        .await;
    rust_acquire(&limiter, "key").await;
    assert_eq!(consumed(&repo, "org").await, 1);
    // zae-limiter turns it on for the resource: dynalimit debits the parent.
    python
        .one(NS, call("set_resource_cascade", json!(["gpt-4", true])))
        .await;
    rust_acquire(&limiter, "key").await;
    assert_eq!(consumed(&repo, "org").await, 2);
}

#[tokio::test]
async fn soft_limits_and_bypasses_stored_by_dynalimit_admit_zae_limiter_s_acquires() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3).soft()])
        .await
        .unwrap();
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(python_acquire(&python, "k").await);
    }
    assert_eq!(admitted, 5, "a soft limit never refuses");
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(
        item["b_rpm_tk"].as_n().unwrap(),
        "-2000",
        "debited into debt"
    );

    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    assert!(!python_acquire(&python, "k").await, "hard again");
    repo.set_resource_disabled("gpt-4", Some(dynalimit::DisabledFlag::Bypass))
        .await
        .unwrap();
    for _ in 0..4 {
        assert!(python_acquire(&python, "k").await, "bypassed");
    }
    let item = bucket_item(&repo, "k", 0).await;
    assert_eq!(
        item["b_rpm_tc"].as_n().unwrap(),
        "9000",
        "every request counted"
    );
}

#[tokio::test]
async fn a_quota_topped_up_by_either_library_leaves_the_same_bucket() {
    let (table, python) = shared_table!();
    // 2026-07-15 12:00 UTC.
    let noon = 1_784_116_800_000;
    let clock = ManualClock::new(noon);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults(
        "gpt-4",
        &[Limit::quota_per_day("requests", 10, Zone::utc())],
    )
    .await
    .unwrap();
    let (rust, py) = both_create(&python, &repo, &clock, noon, &[("requests", 7)]).await;
    assert_eq!(rust, py);
    clock.set_epoch_millis(noon + 1000);
    let topped = repo
        .top_up(
            "rust",
            "gpt-4",
            [("requests", 5)],
            &dynalimit_repository::OperationOptions::new(),
        )
        .await
        .unwrap();
    let answer = python
        .one(
            NS,
            json!({"op": "top_up", "entity": "python", "resource": "gpt-4",
                   "amounts": {"requests": 5}, "now_ms": noon + 1000}),
        )
        .await;
    assert_eq!(answer["amounts"]["requests"], topped.amounts["requests"]);
    let rust = bucket_item(&repo, "rust", 0).await;
    let py = bucket_item(&repo, "python", 0).await;
    for attr in [
        "b_requests_tk",
        "b_requests_tu",
        "b_requests_gc",
        "b_requests_tc",
    ] {
        assert_eq!(rust.get(attr), py.get(attr), "{attr}");
    }
    assert_eq!(rust["b_requests_tk"].as_n().unwrap(), "8000");
    assert_eq!(rust["b_requests_tu"].as_n().unwrap(), "5000");
}

#[tokio::test]
async fn both_libraries_spending_across_a_parent_move_admit_what_each_parent_allows() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    // The parents allow 10 a day (nothing refills while the test runs); the key itself 100
    // a minute.
    repo.set_resource_defaults("gpt-4", &[Limit::per_day("rpm", 10)])
        .await
        .unwrap();
    for org in ["org", "org2"] {
        repo.create_entity(NewEntity::new(org)).await.unwrap();
    }
    repo.create_entity(NewEntity::new("key").parent("org").cascade(true))
        .await
        .unwrap();
    repo.set_limits("key", "gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    // Alternating acquires of both libraries until both are refused: (rust, python).
    let round = || async {
        let (mut rust, mut py) = (0, 0);
        for _ in 0..8 {
            py += i32::from(python_acquire(&python, "key").await);
            if let Ok(lease) = limiter.acquire("key", "gpt-4", [("rpm", 1)]).await {
                lease.commit().await.unwrap();
                rust += 1;
            }
        }
        limiter.settle().await;
        (rust, py)
    };
    let (rust, py) = round().await;
    assert_eq!(rust + py, 10, "org's day: rust {rust}, python {py}");
    assert!(rust > 0 && py > 0);
    repo.set_parent("key", Some("org2")).await.unwrap();
    let (rust, py) = round().await;
    assert_eq!(rust + py, 10, "org2's day: rust {rust}, python {py}");
    assert_eq!(
        (
            consumed(&repo, "org").await,
            consumed(&repo, "org2").await,
            consumed(&repo, "key").await
        ),
        (10, 10, 20),
        "every refused acquire gave the key's debit back"
    );
}
