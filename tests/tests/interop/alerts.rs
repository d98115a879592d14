//! dynalimit's own items in a table zae-limiter 0.17 shares: alert thresholds (`#ALERTS#…`,
//! quota percentages and refusal alerts) and crossing markers (`#ALERTED#…`) in the entity's
//! partition, concurrency slots (`#SLOTS#…`) and refusal minutes (`#REFUSED#…`) in the
//! partition of the bucket's shard 0. zae-limiter's reads, acquires and aggregator pass them by, and its
//! `delete_entity` removes them with the entity.

use dynalimit::Limit;
use dynalimit_core::Clock as _;
use dynalimit_format::alert::Crossing;
use dynalimit_format::item::{Item, get_s};
use dynalimit_repository::NewEntity;
use serde_json::json;

use crate::fixture::record;
use crate::python::shared_table;

#[tokio::test]
async fn zae_limiter_passes_alert_and_slot_items_by_and_deletes_them_with_the_entity() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let ns = repo.namespace_id().to_owned();
    repo.create_entity(NewEntity::new("acme")).await.unwrap();
    repo.set_limits("acme", "gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    repo.set_alert_thresholds("acme", "gpt-4", "rpm", &[80, 100])
        .await
        .unwrap();
    repo.set_refusal_alert("acme", "gpt-4", "rpm", 5)
        .await
        .unwrap();
    let marker = Crossing {
        entity_id: "acme".into(),
        resource: "gpt-4".into(),
        limit: "rpm".into(),
        level: 80,
        period_start_ms: 1_793_491_200_000,
    }
    .marker_item(&ns, 1_793_500_000_000, "t1", 1_796_169_600);
    dynalimit_tests::raw::put_item(&table, marker.clone()).await;
    let limiter = dynalimit::RateLimiter::new(repo.clone());
    let slot = limiter
        .hold(
            "acme",
            "gpt-4",
            &dynalimit::Concurrency::new("streams", 2).unwrap(),
        )
        .await
        .unwrap();
    // Two minutes in which a limit of the bucket refused.
    let now = repo.clock().epoch_millis();
    for at in [now - 60_000, now] {
        repo.report_refusal("acme", "gpt-4", "rpm", at)
            .await
            .unwrap();
    }
    let alert_items = |items: &[Item]| -> Vec<String> {
        items
            .iter()
            .filter_map(|it| get_s(it, "SK"))
            .filter(|sk| {
                sk.starts_with("#ALERT") || sk.starts_with("#SLOTS#") || sk.starts_with("#REFUSED#")
            })
            .map(str::to_owned)
            .collect()
    };
    let stored = table.scan_all().await;
    assert_eq!(alert_items(&stored).len(), 5);
    let refused_item = stored
        .iter()
        .find(|it| get_s(it, "SK").is_some_and(|sk| sk.starts_with("#REFUSED#rpm#")))
        .unwrap()
        .clone();
    let slot_item = stored
        .iter()
        .find(|it| get_s(it, "SK") == Some("#SLOTS#streams"))
        .unwrap()
        .clone();
    let threshold_item = stored
        .iter()
        .find(|it| get_s(it, "SK") == Some("#ALERTS#gpt-4"))
        .unwrap()
        .clone();

    let seen = py
        .ok(
            "default",
            vec![
                json!({"op": "get_entity", "id": "acme"}),
                json!({"op": "get_limits", "entity": "acme", "resource": "gpt-4"}),
                json!({"op": "resolve_limits", "entity": "acme", "resource": "gpt-4"}),
                json!({"op": "acquire", "entity": "acme", "resource": "gpt-4", "consume": {"rpm": 1}}),
                json!({"op": "aggregate", "windows": ["hourly"], "records": [
                    record(&threshold_item, &threshold_item, 10),
                    record(&marker, &marker, 11),
                    record(&slot_item, &slot_item, 12),
                    record(&refused_item, &refused_item, 13),
                ]}),
                // Acquires on the bucket beside the refusal items, up to its limit.
                json!({"op": "acquire", "entity": "acme", "resource": "gpt-4", "consume": {"rpm": 8}}),
                json!({"op": "acquire", "entity": "acme", "resource": "gpt-4", "consume": {"rpm": 2}}),
            ],
        )
        .await;
    assert_eq!(seen[0]["id"], "acme");
    assert_eq!(seen[1].as_array().map(Vec::len), Some(1), "{}", seen[1]);
    assert_eq!(seen[1][0]["name"], "rpm");
    assert_eq!(seen[2]["source"], "entity", "{}", seen[2]);
    assert_eq!(seen[3]["admitted"], true);
    assert_eq!(seen[4], json!({"snapshots_updated": 0, "errors": []}));
    assert_eq!(seen[5]["admitted"], true, "{}", seen[5]);
    assert_eq!(seen[6]["admitted"], false, "{}", seen[6]);
    // Untouched by all of it.
    let listed = repo.alert_thresholds("acme").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].levels["rpm"], vec![80, 100]);
    assert_eq!(listed[0].refusing["rpm"], 5);
    assert_eq!(alert_items(&table.scan_all().await).len(), 5);
    assert_eq!(
        repo.refusal_minutes("acme", "gpt-4", "rpm", 0, now / 60_000)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(slot.release().await.unwrap(), "the slot is still held");

    py.ok(
        "default",
        vec![json!({"op": "delete_entity", "id": "acme"})],
    )
    .await;
    let left: Vec<String> = table
        .scan_all()
        .await
        .iter()
        .filter_map(|it| get_s(it, "PK"))
        .filter(|pk| pk.ends_with("/ENTITY#acme") || pk.contains("/BUCKET#acme#"))
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
