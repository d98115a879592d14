//! Entities: create, read, children, parent, deletion.

use dynalimit_core::Limit;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::{NewEntity, RepositoryError};

#[tokio::test]
async fn create_get_children_parent() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("ents").await;
    let project = repo
        .create_entity(NewEntity::new("project-1").name("Project One"))
        .await
        .unwrap();
    assert_eq!(project.name, "Project One");
    assert!(!project.cascade);
    assert_eq!(project.parent_id, None);
    assert_eq!(project.incarnation.as_deref().map(str::len), Some(16));
    assert!(project.parent_generation > 0);
    for key in ["key-b", "key-a"] {
        repo.create_entity(
            NewEntity::new(key)
                .parent("project-1")
                .cascade(true)
                .metadata("tier", "gold"),
        )
        .await
        .unwrap();
    }
    let dup = repo
        .create_entity(NewEntity::new("key-a"))
        .await
        .unwrap_err();
    assert!(
        matches!(dup, RepositoryError::AlreadyExists { .. }),
        "{dup}"
    );

    let got = repo.get_entity("key-a").await.unwrap().unwrap();
    assert_eq!(got.parent_id.as_deref(), Some("project-1"));
    assert!(got.cascade);
    assert_eq!(got.metadata.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(got.name, "key-a");
    let children: Vec<_> = repo
        .children("project-1")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(children, ["key-a", "key-b"]);
    assert!(repo.children("key-a").await.unwrap().is_empty());
    assert_eq!(
        repo.parent("key-a").await.unwrap().map(|p| p.id).as_deref(),
        Some("project-1")
    );
    assert!(repo.parent("project-1").await.unwrap().is_none());
    assert!(matches!(
        repo.parent("nobody").await.unwrap_err(),
        RepositoryError::NotFound { .. }
    ));
    assert!(repo.get_entity("nobody").await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_identifiers_are_rejected_with_zero_requests() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo = table.counted_repository(&counter, "ids").await;
    counter.reset();
    let rpm = [Limit::per_minute("rpm", 10)];
    let results: Vec<RepositoryError> = vec![
        repo.create_entity(NewEntity::new("#x")).await.unwrap_err(),
        repo.create_entity(NewEntity::new("a").parent("b c"))
            .await
            .unwrap_err(),
        repo.create_entity(NewEntity::new("same").parent("same"))
            .await
            .unwrap_err(),
        repo.get_entity("").await.unwrap_err(),
        repo.delete_entity("x/y").await.unwrap_err(),
        repo.children("-x").await.unwrap_err(),
        repo.set_limits("ok", "1bad", &rpm).await.unwrap_err(),
        repo.set_limits("ok", "gpt-4", &[Limit::per_minute("wcu", 1)])
            .await
            .unwrap_err(),
        repo.set_limits("ok", "gpt-4", &[Limit::per_minute("rpm", 0)])
            .await
            .unwrap_err(),
        repo.set_limits("ok", "gpt-4", &[]).await.unwrap_err(),
        repo.set_limits("ok", "gpt-4", &[rpm[0].clone(), rpm[0].clone()])
            .await
            .unwrap_err(),
        repo.set_resource_defaults("_default_", &rpm)
            .await
            .unwrap_err(),
        repo.resolve_limits("ok", "a#b").await.unwrap_err(),
        repo.audit_events("bad id", 10, None).await.unwrap_err(),
        repo.list_entities_with_custom_limits("gpt-4", 0, None)
            .await
            .unwrap_err(),
        repo.list_entities_with_custom_limits("gpt-4", 10, Some("garbage!"))
            .await
            .unwrap_err(),
    ];
    for err in &results {
        assert!(matches!(err, RepositoryError::Validation(_)), "{err}");
    }
    assert_eq!(
        counter.total(),
        0,
        "requests sent: {:?}",
        counter.snapshot()
    );
}

#[tokio::test]
async fn delete_entity_leaves_no_item_of_the_entity_but_its_audit_trail() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("del").await;
    repo.create_entity(NewEntity::new("victim")).await.unwrap();
    repo.create_entity(NewEntity::new("bystander"))
        .await
        .unwrap();
    for entity in ["victim", "bystander"] {
        repo.set_limits(entity, "gpt-4", &[Limit::per_minute("rpm", 5)])
            .await
            .unwrap();
        repo.set_limits(entity, "_default_", &[Limit::per_minute("rpm", 9)])
            .await
            .unwrap();
    }
    // Bucket shards and an operation record, written in the reference's format.
    let ns = repo.namespace_id().to_string();
    for shard in 0..3 {
        dynalimit_tests::raw::put_bucket(
            &table,
            &ns,
            "victim",
            "gpt-4",
            shard,
            &[("rpm", 5, 5, 60)],
        )
        .await;
    }
    dynalimit_tests::raw::put_bucket(&table, &ns, "bystander", "gpt-4", 0, &[("rpm", 5, 5, 60)])
        .await;
    dynalimit_tests::raw::put_raw(
        &table,
        &[
            ("PK", &format!("{ns}/BUCKET#victim#gpt-4#0")),
            ("SK", "#OP#op-1"),
            ("entity_id", "victim"),
            ("GSI4PK", &ns),
            ("GSI4SK", "OP#victim#gpt-4#op-1"),
        ],
    )
    .await;
    // A usage snapshot under the entity partition.
    dynalimit_tests::raw::put_raw(
        &table,
        &[
            ("PK", &format!("{ns}/ENTITY#victim")),
            ("SK", "#USAGE#gpt-4#2026-01-01T00:00:00Z"),
            ("entity_id", "victim"),
        ],
    )
    .await;

    let deleted = repo.delete_entity("victim").await.unwrap();
    assert_eq!(
        deleted, 8,
        "META, 2 configs, 3 buckets, 1 op record, 1 snapshot"
    );
    let remaining: Vec<_> = table
        .scan_all()
        .await
        .into_iter()
        .filter_map(|it| it.get("PK").and_then(|v| v.as_s().ok()).cloned())
        .filter(|pk| pk.contains("victim"))
        .collect();
    assert!(
        remaining
            .iter()
            .all(|pk| pk == &format!("{ns}/AUDIT#victim")),
        "left behind: {remaining:?}"
    );
    let trail = repo.audit_events("victim", 10, None).await.unwrap();
    assert_eq!(trail.events[0].action, "entity_deleted");
    assert!(repo.get_entity("bystander").await.unwrap().is_some());
    assert!(
        repo.get_limits("bystander", "gpt-4")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(repo.delete_entity("victim").await.unwrap(), 0);
}
