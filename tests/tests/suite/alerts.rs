//! Alert thresholds on quotas: set, listed, cleared, refused before any request when bad,
//! and read back safely whatever another writer stored.

use std::collections::BTreeMap;

use dynalimit_format::alert::thresholds_key;
use dynalimit_format::item::{get_s, s};
use dynalimit_repository::RepositoryError;

use crate::engine::rig;

#[tokio::test]
async fn thresholds_are_set_listed_and_cleared_per_limit_and_resource() {
    let r = rig().await;
    let repo = &r.repo;
    assert_eq!(
        repo.set_alert_thresholds("acme", "gpt-4", "tpd", &[100, 80])
            .await
            .unwrap(),
        vec![80, 100]
    );
    repo.set_alert_thresholds("acme", "gpt-4", "rpd", &[50])
        .await
        .unwrap();
    repo.set_alert_thresholds("acme", "claude", "tpd", &[90])
        .await
        .unwrap();
    // Replaces that limit's thresholds; set twice (a lost answer sent again) is the same.
    for _ in 0..2 {
        repo.set_alert_thresholds("acme", "gpt-4", "tpd", &[75, 95])
            .await
            .unwrap();
    }
    let listed = repo.alert_thresholds("acme").await.unwrap();
    let flat: Vec<(String, BTreeMap<String, Vec<u8>>)> = listed
        .iter()
        .map(|t| (t.resource.clone(), t.levels.clone()))
        .collect();
    assert_eq!(
        flat,
        vec![
            (
                "claude".to_owned(),
                BTreeMap::from([("tpd".to_owned(), vec![90])])
            ),
            (
                "gpt-4".to_owned(),
                BTreeMap::from([
                    ("rpd".to_owned(), vec![50]),
                    ("tpd".to_owned(), vec![75, 95])
                ])
            ),
        ]
    );
    assert!(repo.alert_thresholds("other").await.unwrap().is_empty());

    // The item is the entity's, in its namespace, purgeable through GSI4.
    let stored = r.table.scan_all().await;
    let item = stored
        .iter()
        .find(|it| get_s(it, "SK") == Some("#ALERTS#gpt-4"))
        .expect("the threshold item");
    assert_eq!(get_s(item, "t_tpd"), Some("75,95"));
    assert_eq!(get_s(item, "entity_id"), Some("acme"));
    assert_eq!(get_s(item, "GSI4PK"), Some(repo.namespace_id()));

    // One limit, then the rest; clearing what is not there says so and creates nothing.
    assert!(
        repo.clear_alert_thresholds("acme", "gpt-4", Some("tpd"))
            .await
            .unwrap()
    );
    assert!(
        !repo
            .clear_alert_thresholds("acme", "gpt-4", Some("tpd"))
            .await
            .unwrap()
    );
    assert!(
        !repo
            .clear_alert_thresholds("nobody", "gpt-4", Some("tpd"))
            .await
            .unwrap()
    );
    assert!(
        repo.clear_alert_thresholds("acme", "gpt-4", None)
            .await
            .unwrap()
    );
    let left: Vec<String> = repo
        .alert_thresholds("acme")
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.resource)
        .collect();
    assert_eq!(left, vec!["claude".to_owned()]);
    assert!(
        !r.table
            .scan_all()
            .await
            .iter()
            .any(|it| get_s(it, "PK").is_some_and(|pk| pk.ends_with("ENTITY#nobody")))
    );
}

#[tokio::test]
async fn bad_thresholds_are_refused_before_any_request() {
    let r = rig().await;
    r.counter.reset();
    let repo = &r.repo;
    let cases: Vec<(&str, &str, &str, Vec<u8>)> = vec![
        ("acme", "gpt-4", "tpd", vec![]),
        ("acme", "gpt-4", "tpd", vec![0]),
        ("acme", "gpt-4", "tpd", vec![101]),
        ("acme", "gpt-4", "tpd", vec![80, 80]),
        ("acme", "gpt-4", "tpd", (1..=11).collect()),
        ("acme", "gpt-4", "wcu", vec![80]),
        ("acme", "gpt-4", "t#d", vec![80]),
        ("acme", "_default_", "tpd", vec![80]),
        ("ac#me", "gpt-4", "tpd", vec![80]),
    ];
    for (entity, resource, limit, levels) in cases {
        let err = repo
            .set_alert_thresholds(entity, resource, limit, &levels)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RepositoryError::Validation(_)),
            "{entity} {resource} {limit} {levels:?}: {err}"
        );
    }
    assert!(matches!(
        repo.clear_alert_thresholds("acme", "gpt-4", Some("bad name"))
            .await
            .unwrap_err(),
        RepositoryError::Validation(_)
    ));
    assert_eq!(r.counter.total(), 0, "{:?}", r.counter.snapshot());
    assert!(
        !r.table
            .scan_all()
            .await
            .iter()
            .any(|it| get_s(it, "SK").is_some_and(|sk| sk.starts_with("#ALERTS#")))
    );
}

#[tokio::test]
async fn thresholds_another_writer_stored_out_of_bounds_are_reported_not_used() {
    let r = rig().await;
    let ns = r.repo.namespace_id().to_owned();
    let mut it = thresholds_key(&ns, "acme", "gpt-4");
    for (name, value) in [
        ("t_tpd", "80,100"),
        ("t_huge", "80,1000000000000"),
        ("t_many", &"1,".repeat(5000)),
        ("t_neg", "-5"),
        ("entity_id", "acme"),
    ] {
        it.insert(name.to_owned(), s(value));
    }
    dynalimit_tests::raw::put_item(&r.table, it).await;
    let listed = r.repo.alert_thresholds("acme").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].levels,
        BTreeMap::from([("tpd".to_owned(), vec![80, 100])])
    );
    assert_eq!(listed[0].unreadable.len(), 3, "{:?}", listed[0].unreadable);
}
