//! Limit configuration at every level (entity, entity `_default_`, resource, system) in both
//! directions, and the resolution both libraries derive from it.

use dynalimit_core::Limit;
use dynalimit_repository::{ConfigLevel, DisabledFlag, OnUnavailable};
use serde_json::{Value, json};

use crate::python::shared_table;
use crate::{limit_from_json, limits_json};

fn entity_limits() -> Vec<Limit> {
    vec![
        Limit::per_minute("rpm", 100).with_burst(150),
        Limit::custom("input_tokens", 40_000, 10_000, 60),
        Limit::per_hour("req.v2-x", 5000),
    ]
}

fn entity_default_limits() -> Vec<Limit> {
    vec![Limit::per_minute("rpm", 20)]
}

fn resource_limits() -> Vec<Limit> {
    vec![
        Limit::per_minute("rpm", 60),
        Limit::per_minute("tpm", 90_000).with_burst(120_000),
    ]
}

fn system_limits() -> Vec<Limit> {
    vec![Limit::per_second("rps", 10), Limit::per_day("rpd", 10_000)]
}

/// (entity, resource, the level both must resolve to, its limits).
fn resolution_cases() -> Vec<(&'static str, &'static str, &'static str, Vec<Limit>)> {
    vec![
        ("key-1", "gpt-4", "entity", entity_limits()),
        ("key-1", "claude", "entity_default", entity_default_limits()),
        ("key-2", "gpt-4", "resource", resource_limits()),
        ("key-2", "claude", "system", system_limits()),
    ]
}

fn level_name(level: Option<ConfigLevel>) -> Value {
    level.map_or(Value::Null, |l| Value::from(l.as_str()))
}

fn sorted(mut limits: Vec<Limit>) -> Vec<Limit> {
    limits.sort_by(|a, b| a.name().cmp(b.name()));
    limits
}

#[tokio::test]
async fn configs_written_by_dynalimit_are_read_by_zae_limiter() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    repo.set_limits("key-1", "gpt-4", &entity_limits())
        .await
        .unwrap();
    repo.set_limits("key-1", "_default_", &entity_default_limits())
        .await
        .unwrap();
    repo.set_resource_defaults("gpt-4", &resource_limits())
        .await
        .unwrap();
    repo.set_system_defaults(&system_limits(), Some(OnUnavailable::Block))
        .await
        .unwrap();

    let mut ops = vec![
        json!({"op": "get_limits", "entity": "key-1", "resource": "gpt-4"}),
        json!({"op": "get_limits", "entity": "key-1", "resource": "_default_"}),
        json!({"op": "get_resource_defaults", "resource": "gpt-4"}),
        json!({"op": "get_system_defaults"}),
        json!({"op": "get_limits", "entity": "key-2", "resource": "gpt-4"}),
    ];
    for (entity, resource, _, _) in resolution_cases() {
        ops.push(json!({"op": "resolve_limits", "entity": entity, "resource": resource}));
    }
    let seen = py.ok("default", ops).await;
    assert_eq!(seen[0], limits_json(&entity_limits()));
    assert_eq!(seen[1], limits_json(&entity_default_limits()));
    assert_eq!(seen[2], limits_json(&resource_limits()));
    assert_eq!(
        seen[3],
        json!({"limits": limits_json(&system_limits()), "on_unavailable": "block"})
    );
    assert_eq!(seen[4], json!([]), "no config stored for key-2 on gpt-4");
    for (i, (entity, resource, level, limits)) in resolution_cases().into_iter().enumerate() {
        assert_eq!(
            seen[5 + i],
            json!({"limits": limits_json(&limits), "source": level}),
            "zae-limiter's resolution of {entity} on {resource}"
        );
    }
}

#[tokio::test]
async fn configs_written_by_zae_limiter_are_read_by_dynalimit() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let json_of = |limits: Vec<Limit>| limits_json(&limits);
    py.ok(
        "default",
        vec![
            json!({"op": "set_limits", "entity": "key-1", "resource": "gpt-4",
                   "limits": json_of(entity_limits())}),
            json!({"op": "set_limits", "entity": "key-1", "resource": "_default_",
                   "limits": json_of(entity_default_limits()), "disabled": false}),
            json!({"op": "set_limits", "entity": "key-3", "resource": "gpt-4",
                   "limits": json_of(entity_default_limits()), "disabled": true}),
            json!({"op": "set_resource_defaults", "resource": "gpt-4",
                   "limits": json_of(resource_limits())}),
            json!({"op": "set_system_defaults", "limits": json_of(system_limits()),
                   "on_unavailable": "allow"}),
        ],
    )
    .await;

    let entity = repo.get_limits("key-1", "gpt-4").await.unwrap().unwrap();
    assert_eq!(entity.limits, sorted(entity_limits()));
    assert_eq!((entity.disabled, entity.cascade), (None, None));
    let default = repo
        .get_limits("key-1", "_default_")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(default.limits, sorted(entity_default_limits()));
    assert_eq!(default.disabled, Some(DisabledFlag::Enabled));
    let off = repo.get_limits("key-3", "gpt-4").await.unwrap().unwrap();
    assert_eq!(off.disabled, Some(DisabledFlag::Disabled));
    let resource = repo.get_resource_defaults("gpt-4").await.unwrap().unwrap();
    assert_eq!(resource.limits, sorted(resource_limits()));
    let system = repo.get_system_defaults().await.unwrap().unwrap();
    assert_eq!(system.limits, sorted(system_limits()));
    assert_eq!(system.on_unavailable, Some(OnUnavailable::Allow));
    assert!(repo.get_limits("key-2", "gpt-4").await.unwrap().is_none());

    for (entity, resource, level, limits) in resolution_cases() {
        let resolved = repo.resolve_limits(entity, resource).await.unwrap();
        assert_eq!(
            (level_name(resolved.source), resolved.limits),
            (Value::from(level), sorted(limits)),
            "dynalimit's resolution of {entity} on {resource}"
        );
    }
    assert_eq!(
        repo.list_resources_with_defaults().await.unwrap(),
        ["gpt-4"]
    );
    let mut with_entity_configs = repo.list_resources_with_entity_configs().await.unwrap();
    with_entity_configs.sort();
    assert_eq!(with_entity_configs, ["_default_", "gpt-4"]);
}

#[tokio::test]
async fn a_level_rewritten_by_the_other_library_replaces_it_whole() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    repo.set_limits("key-1", "gpt-4", &entity_limits())
        .await
        .unwrap();
    let replaced = vec![Limit::per_minute("tpm", 1234)];
    py.one(
        "default",
        json!({"op": "set_limits", "entity": "key-1", "resource": "gpt-4",
               "limits": limits_json(&replaced)}),
    )
    .await;
    let stored = repo.get_limits("key-1", "gpt-4").await.unwrap().unwrap();
    assert_eq!(stored.limits, replaced, "override, not merge");

    let back = py
        .one(
            "default",
            json!({"op": "get_limits", "entity": "key-1", "resource": "gpt-4"}),
        )
        .await;
    let parsed: Vec<Limit> = back
        .as_array()
        .unwrap()
        .iter()
        .map(limit_from_json)
        .collect();
    assert_eq!(parsed, replaced);
    repo.set_limits("key-1", "gpt-4", &entity_limits())
        .await
        .unwrap();
    let again = py
        .one(
            "default",
            json!({"op": "get_limits", "entity": "key-1", "resource": "gpt-4"}),
        )
        .await;
    assert_eq!(again, limits_json(&entity_limits()));
}
