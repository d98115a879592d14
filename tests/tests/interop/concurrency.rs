//! Concurrency limits stored on configuration levels (`c_{name}_max`, `c_{name}_hold`) in a
//! table zae-limiter 0.17 shares: its reads and acquires see the same rate limits, a level that
//! holds only concurrency limits is no level with limits to it, and its full-replace write of
//! a level drops them (as documented).

use dynalimit::{Concurrency, Limit};
use serde_json::json;

use crate::python::shared_table;

#[tokio::test]
async fn zae_limiter_reads_levels_with_concurrency_limits_as_their_rate_limits_alone() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let streams = Concurrency::new("streams", 2).unwrap();
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    repo.set_concurrency_limits(None, Some("gpt-4"), std::slice::from_ref(&streams))
        .await
        .unwrap();
    // An entity level with concurrency limits only: no rate limits, for either library.
    repo.set_concurrency_limits(Some("acme"), Some("gpt-4"), std::slice::from_ref(&streams))
        .await
        .unwrap();
    let seen = py
        .ok(
            "default",
            vec![
                json!({"op": "get_resource_defaults", "resource": "gpt-4"}),
                json!({"op": "resolve_limits", "entity": "acme", "resource": "gpt-4"}),
                json!({"op": "acquire", "entity": "acme", "resource": "gpt-4", "consume": {"rpm": 1}}),
            ],
        )
        .await;
    assert_eq!(seen[0].as_array().map(Vec::len), Some(1), "{}", seen[0]);
    assert_eq!(seen[0][0]["name"], "rpm");
    assert_eq!(seen[1]["source"], "resource", "{}", seen[1]);
    assert_eq!(seen[2]["admitted"], true);
    // dynalimit resolves the same rate limits, and its acquire holds the stored slot.
    let resolved = repo.resolve_limits("acme", "gpt-4").await.unwrap();
    assert_eq!(resolved.limits, [Limit::per_minute("rpm", 10)]);
    let limiter = dynalimit::RateLimiter::new(repo.clone());
    let lease = limiter
        .acquire("acme", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(lease.slots().len(), 1);
    lease.commit().await.unwrap();
    let balances = limiter.balances("acme", "gpt-4", &[]).await.unwrap();
    assert_eq!(balances[0].available, 8, "one acquire each");

    // zae-limiter's write of the resource level replaces the item: the concurrency limits go.
    py.ok(
        "default",
        vec![json!({"op": "set_resource_defaults", "resource": "gpt-4",
            "limits": [{"name": "rpm", "capacity": 20, "refill_amount": 20, "refill_period_seconds": 60}]})],
    )
    .await;
    assert!(
        repo.concurrency_limits(None, Some("gpt-4"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        repo.concurrency_limits(Some("acme"), Some("gpt-4"))
            .await
            .unwrap(),
        [streams]
    );
}
