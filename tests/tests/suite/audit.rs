//! The audit log: every change recorded, newest first, paged.

use dynalimit_core::Limit;
use dynalimit_repository::NewEntity;

#[tokio::test]
async fn changes_are_audited_newest_first_with_paging() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("audit").await;
    repo.create_entity(NewEntity::new("k").parent("p"))
        .await
        .unwrap();
    for n in 1..=4 {
        repo.set_limits("k", "gpt-4", &[Limit::per_minute("rpm", n)])
            .await
            .unwrap();
    }
    repo.delete_limits("k", "gpt-4").await.unwrap();
    let page = repo.audit_events("k", 100, None).await.unwrap();
    let actions: Vec<_> = page.events.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "limits_deleted",
            "limits_set",
            "limits_set",
            "limits_set",
            "limits_set",
            "entity_created"
        ]
    );
    let ids: Vec<_> = page.events.iter().map(|e| e.event_id.clone()).collect();
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    assert_eq!(page.events[0].resource.as_deref(), Some("gpt-4"));
    assert!(page.events[0].principal.is_none());
    let created = &page.events[5];
    assert_eq!(
        created
            .details
            .get("parent_id")
            .and_then(|v| v.as_s().ok())
            .map(String::as_str),
        Some("p")
    );
    assert!(page.next.is_none());

    // Pages of two walk the same sequence.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let p = repo.audit_events("k", 2, cursor.as_deref()).await.unwrap();
        walked.extend(p.events.into_iter().map(|e| e.event_id));
        match p.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(walked, ids);

    // Config-level ids.
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 1)])
        .await
        .unwrap();
    let r = repo
        .audit_events("$RESOURCE:gpt-4", 10, None)
        .await
        .unwrap();
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].action, "limits_set");
}

#[tokio::test]
async fn retention_follows_the_system_setting() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("retention").await;
    repo.create_entity(NewEntity::new("a")).await.unwrap();
    let days = newest_ttl_days(&table, "a").await;
    assert!(
        (89.9..=90.1).contains(&days),
        "default retention 90 days, got {days}"
    );
}

/// The `ttl` of the newest audit event of `entity`, in days from now.
async fn newest_ttl_days(table: &dynalimit_tests::TestTable, entity: &str) -> f64 {
    let newest = table
        .scan_all()
        .await
        .into_iter()
        .filter(|it| {
            it.get("SK")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|s| s.starts_with("#AUDIT#"))
                && it
                    .get("entity_id")
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str)
                    == Some(entity)
        })
        .max_by_key(|it| it["SK"].as_s().unwrap().clone())
        .expect("an audit event");
    let ttl: i64 = newest["ttl"].as_n().unwrap().parse().unwrap();
    let now = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock) / 1000;
    (ttl - now) as f64 / 86_400.0
}

#[tokio::test]
async fn the_audit_retention_is_set_kept_by_default_changes_and_refused_out_of_range() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("retention-set").await;
    repo.set_system_defaults(&[Limit::per_minute("rpm", 10)], None)
        .await
        .unwrap();
    let before = table.scan_all().await;

    // Out of range: refused before any request, nothing written.
    for days in [0, -1, 36_501] {
        let err = repo.set_audit_retention_days(days).await.unwrap_err();
        assert!(err.to_string().contains("audit retention days"), "{err}");
    }
    assert_eq!(table.scan_all().await, before);

    // Set twice (a write whose answer was lost is simply repeated): events written from then
    // on expire after it, and the system defaults beside it stay.
    for _ in 0..2 {
        repo.set_audit_retention_days(7).await.unwrap();
    }
    repo.set_limits("k", "gpt-4", &[Limit::per_minute("rpm", 1)])
        .await
        .unwrap();
    let days = newest_ttl_days(&table, "k").await;
    assert!((6.9..=7.1).contains(&days), "{days}");
    let defaults = repo.get_system_defaults().await.unwrap().expect("kept");
    assert_eq!(defaults.limits, vec![Limit::per_minute("rpm", 10)]);
    assert_eq!(defaults.audit_retention_days, Some(7));

    // Changing the system defaults, or deleting them, keeps the retention.
    repo.set_system_defaults(&[Limit::per_minute("rpm", 20)], None)
        .await
        .unwrap();
    assert!(
        repo.delete_system_defaults().await.unwrap(),
        "there were defaults"
    );
    let left = repo
        .get_system_defaults()
        .await
        .unwrap()
        .expect("the retention");
    assert!(left.limits.is_empty());
    assert_eq!(left.audit_retention_days, Some(7));
    assert!(!repo.delete_system_defaults().await.unwrap(), "none left");
    repo.set_limits("k", "gpt-4", &[Limit::per_minute("rpm", 2)])
        .await
        .unwrap();
    let days = newest_ttl_days(&table, "k").await;
    assert!((6.9..=7.1).contains(&days), "{days}");
}

#[tokio::test]
async fn a_retention_write_whose_answer_is_lost_is_set_once_when_repeated() {
    use dynalimit_tests::fault::{FaultProxy, Lost};
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    // Three attempts, 1 s each: the SDK repeats a write whose answer did not come.
    let repo = proxy.repository(&table, "retention-lost").await;
    for (days, how) in [
        (14, Lost::Answer500),
        (21, Lost::Reset),
        (30, Lost::CutBody),
    ] {
        proxy.lose_after_applying("UpdateItem", Some("audit_retention_days"), how, 1);
        repo.set_audit_retention_days(days).await.unwrap();
        assert_eq!(proxy.pending(), 0, "{how:?}: the fault was served");
        let stored = repo.get_system_defaults().await.unwrap().expect("the item");
        assert_eq!(stored.audit_retention_days, Some(days), "{how:?}");
        assert!(stored.limits.is_empty(), "{how:?}: nothing else written");
    }
}
