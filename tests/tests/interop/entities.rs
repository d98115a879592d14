//! Entities (META items) in both directions.

use dynalimit_repository::{Entity, NewEntity};
use serde_json::{Value, json};

use crate::python::shared_table;

/// The driver's form of a dynalimit entity, for field-by-field comparison.
fn entity_json(e: &Entity) -> Value {
    json!({
        "id": e.id,
        "name": e.name,
        "parent_id": e.parent_id,
        "cascade": e.cascade,
        "metadata": e.metadata,
        "created_at": e.created_at,
        "parent_generation": e.parent_generation,
        "incarnation": e.incarnation,
    })
}

#[tokio::test]
async fn entities_written_by_dynalimit_are_read_by_zae_limiter() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let tenant = table.repository("tenant-a").await;

    let project = repo
        .create_entity(
            NewEntity::new("project-1")
                .name("Project One")
                .metadata("tier", "gold"),
        )
        .await
        .unwrap();
    let key = repo
        .create_entity(
            NewEntity::new("key-1")
                .parent("project-1")
                .cascade(true)
                .metadata("owner", "team-a")
                .metadata("env", "prod"),
        )
        .await
        .unwrap();
    let bare = repo.create_entity(NewEntity::new("key-2")).await.unwrap();
    let elsewhere = tenant
        .create_entity(NewEntity::new("key-9").name("Tenant key"))
        .await
        .unwrap();

    let seen = py
        .ok(
            "default",
            vec![
                json!({"op": "get_entity", "id": "project-1"}),
                json!({"op": "get_entity", "id": "key-1"}),
                json!({"op": "get_entity", "id": "key-2"}),
                json!({"op": "get_entity", "id": "key-9"}),
            ],
        )
        .await;
    assert_eq!(seen[0], entity_json(&project));
    assert_eq!(seen[1], entity_json(&key));
    assert_eq!(seen[2], entity_json(&bare));
    assert_eq!(seen[3], Value::Null, "namespaces keep entities apart");
    assert_eq!(seen[1]["parent_id"], "project-1");
    assert_eq!(seen[1]["cascade"], true);
    assert_eq!(seen[2]["name"], "key-2", "the name defaults to the id");

    let in_tenant = py
        .one("tenant-a", json!({"op": "get_entity", "id": "key-9"}))
        .await;
    assert_eq!(in_tenant, entity_json(&elsewhere));
}

#[tokio::test]
async fn entities_written_by_zae_limiter_are_read_by_dynalimit() {
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let tenant = table.repository("tenant-b").await;

    let written = py
        .ok(
            "default",
            vec![
                json!({"op": "create_entity", "id": "org-7", "name": "Org Seven",
                       "metadata": {"plan": "enterprise"}}),
                json!({"op": "create_entity", "id": "svc.key-3", "parent_id": "org-7",
                       "cascade": true, "metadata": {"a": "1", "b": "two"}}),
                json!({"op": "create_entity", "id": "solo"}),
            ],
        )
        .await;
    let in_tenant = py
        .one(
            "tenant-b",
            json!({"op": "create_entity", "id": "org-7", "name": "Other org"}),
        )
        .await;

    for expected in &written {
        let id = expected["id"].as_str().unwrap();
        let found = repo.get_entity(id).await.unwrap().expect(id);
        assert_eq!(&entity_json(&found), expected, "entity {id}");
    }
    let found = tenant.get_entity("org-7").await.unwrap().unwrap();
    assert_eq!(entity_json(&found), in_tenant);
    assert_eq!(found.name, "Other org");

    let children = repo.children("org-7").await.unwrap();
    let ids: Vec<&str> = children.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["svc.key-3"]);
    let parent = repo.parent("svc.key-3").await.unwrap().unwrap();
    assert_eq!(parent.id, "org-7");
    assert!(tenant.get_entity("solo").await.unwrap().is_none());
}
