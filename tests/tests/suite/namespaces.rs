//! Namespace registry, scoping and purge.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::{NewEntity, RepositoryError};

fn s(item: &dynalimit_format::item::Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

#[tokio::test]
async fn register_is_idempotent_and_ids_are_opaque() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("alpha").await;
    let id = repo.namespace_id().to_string();
    assert_eq!(id.len(), 11);
    assert!(!id.starts_with('-'));
    assert!(
        id.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    );
    // Again, from a fresh repository (no process cache): the same id.
    let again = table.repository("alpha").await;
    assert_eq!(again.namespace_id(), id);
    assert_eq!(repo.register_namespace("alpha").await.unwrap(), id);
    let many = repo.register_namespaces(&["beta", "gamma"]).await.unwrap();
    assert_eq!(many.len(), 2);
    assert_ne!(many["beta"], many["gamma"]);
    let names: Vec<_> = repo
        .list_namespaces()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["alpha", "beta", "default", "gamma"]);
    let info = repo.get_namespace("beta").await.unwrap().unwrap();
    assert_eq!(info.id, many["beta"]);
    assert_eq!(info.status, "active");
}

#[tokio::test]
async fn the_reserved_namespace_is_refused_before_any_request() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo = table.counted_repository(&counter, "ok").await;
    counter.reset();
    for bad in ["_", "a/b", "a#b", ""] {
        let err = repo.register_namespace(bad).await.unwrap_err();
        assert!(
            matches!(err, RepositoryError::Validation(_)),
            "{bad}: {err}"
        );
    }
    let err = table.builder().namespace("_").open().await.unwrap_err();
    assert!(matches!(err, RepositoryError::Validation(_)));
    assert_eq!(counter.total(), 0, "{:?}", counter.snapshot());
}

#[tokio::test]
async fn the_same_entity_in_two_namespaces_never_sees_the_other() {
    let table = dynalimit_tests::table().await;
    let a = table.repository("tenant-a").await;
    let b = a.namespace("tenant-b").await.unwrap();
    a.create_entity(NewEntity::new("shared-id").name("in a"))
        .await
        .unwrap();
    assert!(b.get_entity("shared-id").await.unwrap().is_none());
    b.create_entity(NewEntity::new("shared-id").name("in b"))
        .await
        .unwrap();
    a.set_limits("shared-id", "gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    assert!(b.get_limits("shared-id", "gpt-4").await.unwrap().is_none());
    assert!(
        b.resolve_limits("shared-id", "gpt-4")
            .await
            .unwrap()
            .limits
            .is_empty()
    );
    assert_eq!(
        a.get_entity("shared-id").await.unwrap().unwrap().name,
        "in a"
    );
    assert_eq!(
        b.get_entity("shared-id").await.unwrap().unwrap().name,
        "in b"
    );
    b.delete_entity("shared-id").await.unwrap();
    assert!(a.get_entity("shared-id").await.unwrap().is_some());
}

#[tokio::test]
async fn delete_recover_delete_purge_leaves_no_item_of_the_namespace() {
    let table = dynalimit_tests::table().await;
    let keep = table.repository("keep").await;
    let doomed = keep.namespace("doomed").await.unwrap();
    let id = doomed.namespace_id().to_string();
    // Give both namespaces data of every kind.
    for repo in [&keep, &doomed] {
        repo.create_entity(NewEntity::new("p")).await.unwrap();
        repo.create_entity(NewEntity::new("c").parent("p").cascade(true))
            .await
            .unwrap();
        repo.set_limits("c", "gpt-4", &[Limit::per_minute("rpm", 5)])
            .await
            .unwrap();
        repo.set_limits("c", "_default_", &[Limit::per_minute("rpm", 6)])
            .await
            .unwrap();
        repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 7)])
            .await
            .unwrap();
        repo.set_system_defaults(&[Limit::per_minute("rpm", 8)], None)
            .await
            .unwrap();
    }
    let owned = |items: &[dynalimit_format::item::Item]| {
        items
            .iter()
            .filter(|it| {
                s(it, "PK").is_some_and(|pk| pk.starts_with(&format!("{id}/")))
                    || s(it, "GSI4PK").as_deref() == Some(id.as_str())
                    || s(it, "namespace_id").as_deref() == Some(id.as_str())
            })
            .count()
    };
    assert!(owned(&table.scan_all().await) > 8);

    // Soft delete: gone from the list, listed as an orphan, data untouched.
    assert_eq!(
        keep.delete_namespace("doomed").await.unwrap(),
        Some(id.clone())
    );
    assert!(keep.get_namespace("doomed").await.unwrap().is_none());
    let orphans = keep.list_orphan_namespaces().await.unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].id, id);
    assert!(orphans[0].deleted_at.is_some());
    assert!(matches!(
        keep.connect_namespace("doomed").await.unwrap_err(),
        RepositoryError::NamespaceNotFound { .. }
    ));
    // An active namespace cannot be purged; a deleted one can be recovered.
    assert!(matches!(
        keep.purge_namespace(keep.namespace_id()).await.unwrap_err(),
        RepositoryError::NamespaceState { .. }
    ));
    let recovered = keep.recover_namespace(&id).await.unwrap();
    assert_eq!(recovered.name, "doomed");
    let back = keep.connect_namespace("doomed").await.unwrap();
    assert_eq!(back.namespace_id(), id);
    assert!(back.get_entity("c").await.unwrap().is_some());
    assert!(matches!(
        keep.recover_namespace(&id).await.unwrap_err(),
        RepositoryError::NamespaceState { .. }
    ));

    // Delete again and purge: nothing of it remains, the other namespace is whole.
    keep.delete_namespace("doomed").await.unwrap();
    let before_keep = keep.get_entity("c").await.unwrap();
    let purged = keep.purge_namespace(&id).await.unwrap();
    assert!(purged > 8, "purged {purged}");
    let after = table.scan_all().await;
    assert_eq!(owned(&after), 0, "items of the purged namespace remain");
    assert_eq!(keep.get_entity("c").await.unwrap(), before_keep);
    assert!(keep.list_orphan_namespaces().await.unwrap().is_empty());
    assert!(matches!(
        keep.purge_namespace(&id).await.unwrap_err(),
        RepositoryError::NotFound { .. }
    ));
    // The registry records of the reserved namespace have the documented shape.
    let forward = after
        .iter()
        .find(|it| s(it, "SK").as_deref() == Some("#NAMESPACE#keep"))
        .expect("forward record");
    assert_eq!(s(forward, "PK").as_deref(), Some("_/SYSTEM#"));
    assert_eq!(s(forward, "GSI4PK").as_deref(), Some("_"));
    assert!(matches!(forward.get("status"), Some(AttributeValue::S(st)) if st == "active"));
}

/// The registry records (forward and reverse) of namespace `name`, by scan.
async fn registry_records(table: &dynalimit_tests::TestTable, name: &str) -> Vec<String> {
    let mut sks: Vec<String> = table
        .scan_all()
        .await
        .iter()
        .filter(|it| s(it, "PK").as_deref() == Some("_/SYSTEM#"))
        .filter(|it| s(it, "namespace_name").as_deref() == Some(name))
        .filter_map(|it| s(it, "SK"))
        .collect();
    sks.sort();
    sks
}

#[tokio::test]
async fn opening_an_existing_namespace_only_reads() {
    let table = dynalimit_tests::table().await;
    let first = table.repository("tenant").await;
    let counter = RequestCounter::default();
    let again = table.counted_repository(&counter, "tenant").await;
    assert_eq!(again.namespace_id(), first.namespace_id());
    let sent = counter.snapshot();
    // Item reads only: no writes, and no DescribeTable, which zae-limiter's acquire-only and
    // namespace policies do not grant.
    let others: Vec<_> = sent.keys().filter(|op| op.as_str() != "GetItem").collect();
    assert!(others.is_empty(), "opening sent {sent:?}");
    // The version record (which also says the table exists), `default` and `tenant`.
    assert_eq!(counter.count("GetItem"), 3, "{sent:?}");

    // A missing namespace is registered on open.
    let counter = RequestCounter::default();
    let fresh = table.counted_repository(&counter, "newcomer").await;
    assert_eq!(counter.count("TransactWriteItems"), 1);
    assert_eq!(
        registry_records(&table, "newcomer").await,
        [
            "#NAMESPACE#newcomer".to_string(),
            format!("#NSID#{}", fresh.namespace_id())
        ]
    );
}

#[tokio::test]
async fn concurrent_openers_of_a_new_namespace_agree_on_its_id() {
    let table = dynalimit_tests::table().await;
    table.repository("default").await;
    let (a, b, c, d) = tokio::join!(
        table.repository("racy"),
        table.repository("racy"),
        table.repository("racy"),
        table.repository("racy"),
    );
    let repos = [a, b, c, d];
    let id = repos[0].namespace_id();
    assert!(repos.iter().all(|r| r.namespace_id() == id));
    // One forward and one reverse record: the losers wrote nothing.
    assert_eq!(
        registry_records(&table, "racy").await,
        ["#NAMESPACE#racy".to_string(), format!("#NSID#{id}")]
    );
}

#[tokio::test]
async fn a_registration_whose_answer_is_lost_returns_the_id_it_wrote() {
    let table = dynalimit_tests::table().await;
    table.repository("default").await;
    let proxy = dynalimit_tests::fault::FaultProxy::start().await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        dynalimit_tests::client()
            .await
            .config()
            .to_builder()
            .endpoint_url(proxy.url())
            .build(),
    );
    proxy.lose_next_answer("TransactWriteItems", 1);
    let repo = table
        .builder()
        .client(client)
        .namespace("unlucky")
        .open()
        .await
        .expect("the resend finds the registration it applied");
    assert_eq!(proxy.pending(), 0, "the answer was lost");
    let sent = proxy.seen();
    assert_eq!(
        sent.iter().filter(|op| *op == "TransactWriteItems").count(),
        2,
        "{sent:?}"
    );
    assert_eq!(
        registry_records(&table, "unlucky").await,
        [
            "#NAMESPACE#unlucky".to_string(),
            format!("#NSID#{}", repo.namespace_id())
        ]
    );
    let fresh = table.repository("unlucky").await;
    assert_eq!(fresh.namespace_id(), repo.namespace_id());
}
