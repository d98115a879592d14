//! The namespace registry in both directions.

use serde_json::{Value, json};

use crate::python::shared_table;

#[tokio::test]
async fn namespaces_registered_by_dynalimit_are_resolved_by_zae_limiter() {
    let (table, py) = shared_table!();
    let alpha = table.repository("tenant-alpha").await;
    let root = table.repository("default").await;
    let beta_id = root.register_namespace("tenant-beta").await.unwrap();

    let seen = py
        .ok(
            "tenant-alpha",
            vec![
                json!({"op": "connect"}),
                json!({"op": "connect", "namespace": "tenant-beta"}),
                json!({"op": "connect", "namespace": "default"}),
                json!({"op": "list_namespaces"}),
            ],
        )
        .await;
    assert_eq!(seen[0]["namespace_id"], alpha.namespace_id());
    assert_eq!(seen[0]["namespace_name"], "tenant-alpha");
    assert_eq!(seen[1]["namespace_id"], beta_id.as_str());
    assert_eq!(seen[2]["namespace_id"], root.namespace_id());

    let mut listed: Vec<Value> = root
        .list_namespaces()
        .await
        .unwrap()
        .iter()
        .map(|n| json!({"name": n.name, "namespace_id": n.id}))
        .collect();
    listed.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    assert_eq!(seen[3], Value::Array(listed));
    assert_eq!(seen[3].as_array().unwrap().len(), 3);

    // An unregistered name is refused by connect(), as it is by dynalimit.
    let missing = py
        .run(
            "default",
            vec![json!({"op": "connect", "namespace": "nobody"})],
        )
        .await;
    let error = missing[0].as_ref().unwrap_err();
    assert_eq!(error.kind, "NamespaceNotFoundError");
    assert!(table.builder().namespace("nobody").connect().await.is_err());
}

#[tokio::test]
async fn namespaces_registered_by_zae_limiter_are_resolved_by_dynalimit() {
    let (table, py) = shared_table!();
    let root = table.repository("default").await;

    let ids = py
        .ok(
            "default",
            vec![
                json!({"op": "register_namespace", "name": "team-red"}),
                json!({"op": "register_namespace", "name": "team-blue"}),
                json!({"op": "register_namespace", "name": "team-red"}),
            ],
        )
        .await;
    assert_eq!(ids[0], ids[2], "registering twice returns the same id");
    let red = ids[0].as_str().unwrap();
    let blue = ids[1].as_str().unwrap();
    assert_ne!(red, blue);

    assert_eq!(root.namespace_id_of("team-red").await.unwrap(), red);
    assert_eq!(root.namespace_id_of("team-blue").await.unwrap(), blue);
    let connected = table
        .builder()
        .namespace("team-blue")
        .connect()
        .await
        .unwrap();
    assert_eq!(connected.namespace_id(), blue);
    let info = root.get_namespace("team-red").await.unwrap().unwrap();
    assert_eq!(
        (info.name.as_str(), info.id.as_str(), info.status.as_str()),
        ("team-red", red, "active")
    );
    let by_id = root.get_namespace_by_id(blue).await.unwrap().unwrap();
    assert_eq!(by_id.name, "team-blue");

    // Data written by Python in its namespace is visible to dynalimit in the same one only.
    py.one("team-red", json!({"op": "create_entity", "id": "member-1"}))
        .await;
    assert!(connected.get_entity("member-1").await.unwrap().is_none());
    let red_repo = root.connect_namespace("team-red").await.unwrap();
    assert!(red_repo.get_entity("member-1").await.unwrap().is_some());
}
