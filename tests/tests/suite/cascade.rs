//! Cascade policies and parent moves written by dynalimit (reference §12.5): the policy is
//! stored on its level and stamped on every bucket in scope at once, so the next acquire
//! follows it; a move rewrites META (a new generation) and restamps the entity's buckets, so
//! the next acquire debits the new parent; both raise the table's minimum client version
//! after checking the stack's aggregator reads them.

use dynalimit::{Error, Limit};
use dynalimit_format::item::{get_i64, get_s, n};
use dynalimit_repository::{NewEntity, RepositoryError};

use crate::engine::{Rig, rig};

async fn acquire(r: &Rig, entity: &str) {
    r.limiter
        .acquire(entity, "gpt-4", [("rpm", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
}

fn cascade_of(item: &dynalimit_format::item::Item) -> Option<bool> {
    item.get("cascade").and_then(|v| v.as_bool().ok()).copied()
}

#[tokio::test]
async fn a_cascade_policy_is_stamped_at_once_and_decides_whether_the_parent_is_debited() {
    let r = rig().await;
    r.family(100, "org", "key", false).await;
    acquire(&r, "key").await;
    assert_eq!(r.tc("org", "rpm").await, 0, "no cascade yet");
    assert_eq!(
        cascade_of(&r.first_shard("key", "gpt-4").await),
        Some(false)
    );

    let stamped = r
        .repo
        .set_cascade_policy("key", Some("gpt-4"), Some(true))
        .await
        .unwrap();
    assert_eq!(stamped, 1);
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.16.0");
    assert_eq!(cascade_of(&r.first_shard("key", "gpt-4").await), Some(true));
    acquire(&r, "key").await;
    assert_eq!(r.tc("org", "rpm").await, 1, "the parent is debited now");

    // A resource-level "off" does not outrank the entity's own policy...
    r.repo
        .set_resource_cascade_policy("gpt-4", Some(false))
        .await
        .unwrap();
    assert_eq!(cascade_of(&r.first_shard("key", "gpt-4").await), Some(true));
    // ...and once that is cleared, the resource's decides.
    r.repo
        .set_cascade_policy("key", Some("gpt-4"), None)
        .await
        .unwrap();
    assert_eq!(
        cascade_of(&r.first_shard("key", "gpt-4").await),
        Some(false)
    );
    acquire(&r, "key").await;
    assert_eq!(r.tc("org", "rpm").await, 1);
    // Cleared everywhere: the entity's own flag (false) decides again.
    r.repo
        .set_resource_cascade_policy("gpt-4", None)
        .await
        .unwrap();
    assert_eq!(
        cascade_of(&r.first_shard("key", "gpt-4").await),
        Some(false)
    );
}

#[tokio::test]
async fn a_parent_move_restamps_the_buckets_and_the_next_acquire_debits_the_new_parent() {
    let r = rig().await;
    r.family(100, "org", "key", true).await;
    r.repo.create_entity(NewEntity::new("org2")).await.unwrap();
    acquire(&r, "key").await;
    assert_eq!(r.tc("org", "rpm").await, 1);

    let generation = r
        .repo
        .get_entity("key")
        .await
        .unwrap()
        .unwrap()
        .parent_generation;
    let stamped = r.repo.set_parent("key", Some("org2")).await.unwrap();
    assert_eq!(stamped, 1);
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.17.0");
    let moved = r.repo.get_entity("key").await.unwrap().unwrap();
    assert_eq!(moved.parent_id.as_deref(), Some("org2"));
    assert_eq!(moved.parent_generation, generation + 1);
    assert!(moved.cascade, "the move keeps the entity's own flag");
    let bucket = r.first_shard("key", "gpt-4").await;
    assert_eq!(get_s(&bucket, "parent_id"), Some("org2"));
    assert_eq!(get_i64(&bucket, "pgen"), Some(generation + 1));
    assert_eq!(
        r.repo.children("org2").await.unwrap()[0].id,
        "key",
        "the parent index follows"
    );
    assert!(r.repo.children("org").await.unwrap().is_empty());

    // The limiter learned the old parent; the item's stamp wins and the old parent is
    // given back what the warm path debited.
    acquire(&r, "key").await;
    r.limiter.settle().await;
    assert_eq!(
        r.tc("org", "rpm").await,
        1,
        "nothing more on the old parent"
    );
    assert_eq!(r.tc("org2", "rpm").await, 1, "the new parent is debited");

    // To no parent: nothing cascades.
    r.repo.set_parent("key", None).await.unwrap();
    assert_eq!(
        get_s(&r.first_shard("key", "gpt-4").await, "parent_id"),
        None
    );
    acquire(&r, "key").await;
    assert_eq!(r.tc("org2", "rpm").await, 1);
    let events = r.repo.audit_events("key", 10, None).await.unwrap().events;
    assert!(
        events
            .iter()
            .filter(|e| e.action == "entity_parent_changed")
            .count()
            == 2,
        "{events:?}"
    );
}

#[tokio::test]
async fn moves_that_would_break_the_hierarchy_are_refused_and_write_nothing() {
    let r = rig().await;
    r.family(100, "org", "key", true).await;
    r.counter.reset();
    let e = r.repo.set_parent("key", Some("key")).await.unwrap_err();
    assert!(matches!(e, RepositoryError::Validation(_)), "{e}");
    let e = r.repo.set_parent("bad#id", Some("org")).await.unwrap_err();
    assert!(matches!(e, RepositoryError::Validation(_)), "{e}");
    assert_eq!(r.counter.total(), 0, "nothing sent");
    let before = r.table.scan_all().await;
    let e = r.repo.set_parent("org", Some("key")).await.unwrap_err();
    assert!(e.to_string().contains("cycle"), "{e}");
    let e = r.repo.set_parent("key", Some("nobody")).await.unwrap_err();
    assert!(matches!(e, RepositoryError::NotFound { .. }), "{e}");
    let e = r.repo.set_parent("nobody", Some("org")).await.unwrap_err();
    assert!(matches!(e, RepositoryError::NotFound { .. }), "{e}");
    let mut after = r.table.scan_all().await;
    // The version record's ratchet is the only change.
    after.retain(|i| get_s(i, "SK") != Some("#VERSION"));
    let mut before = before;
    before.retain(|i| get_s(i, "SK") != Some("#VERSION"));
    assert_eq!(after, before);
    // An aggregator older than moves: refused.
    r.table
        .set_version_attribute("lambda_version", "0.16.0")
        .await;
    let e = r.repo.set_parent("key", None).await.unwrap_err();
    assert!(matches!(e, RepositoryError::ReadersTooOld { .. }), "{e}");
    // It reads cascade policies (0.16).
    r.repo
        .set_cascade_policy("key", None, Some(false))
        .await
        .unwrap();
}

#[tokio::test]
async fn hard_case_42_the_fan_outs_read_the_levels_and_meta_strongly_consistently() {
    use dynalimit::Limit;
    use dynalimit_tests::fault::FaultProxy;
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = table
        .builder()
        .client(proxy.client(3, None).await)
        .namespace("consistent")
        .open()
        .await
        .unwrap();
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    repo.create_entity(NewEntity::new("org")).await.unwrap();
    repo.create_entity(NewEntity::new("key").parent("org"))
        .await
        .unwrap();
    let limiter = dynalimit::RateLimiter::new(repo.clone());
    limiter
        .acquire("key", "gpt-4", [("rpm", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    // Each fan-out, from the write of its level to its last stamp.
    let reads = |proxy: &FaultProxy| {
        proxy
            .requests()
            .into_iter()
            .filter(|r| r.operation == "GetItem" || r.operation == "BatchGetItem")
            .map(|r| r.body)
            // The system level is read through the cache for the audit event's retention,
            // which decides no stamp.
            .filter(|body| {
                let text = body.to_string();
                text.contains("/ENTITY#") || text.contains("/RESOURCE#")
            })
            .collect::<Vec<_>>()
    };
    let consistent = |body: &serde_json::Value| match body.get("RequestItems") {
        Some(items) => items
            .as_object()
            .unwrap()
            .values()
            .all(|t| t["ConsistentRead"] == serde_json::json!(true)),
        None => body["ConsistentRead"] == serde_json::json!(true),
    };
    proxy.clear_requests();
    assert_eq!(
        repo.set_cascade_policy("key", None, Some(true))
            .await
            .unwrap(),
        1
    );
    let seen = reads(&proxy);
    assert!(seen.len() >= 2, "META and the levels: {seen:?}");
    assert!(seen.iter().all(consistent), "{seen:?}");
    proxy.clear_requests();
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 10).soft()])
        .await
        .unwrap();
    let seen = reads(&proxy);
    assert!(!seen.is_empty(), "the levels: {seen:?}");
    assert!(seen.iter().all(consistent), "{seen:?}");
    let bucket = r_first_shard(&table, &repo).await;
    assert!(bucket.contains_key("b_rpm_soft"), "stamped by the fan-out");
}

/// Shard 0 of `key`'s gpt-4 bucket.
async fn r_first_shard(
    table: &dynalimit_tests::TestTable,
    repo: &dynalimit_repository::Repository,
) -> dynalimit_format::item::Item {
    let pk = format!("{}/BUCKET#key#gpt-4#0", repo.namespace_id());
    table
        .scan_all()
        .await
        .into_iter()
        .find(|i| get_s(i, "PK") == Some(pk.as_str()))
        .unwrap()
}

/// Where a refused acquire had debited and gave back.
#[derive(Debug, Clone, Copy)]
enum Given {
    /// The child, when its parent (`org`) refused.
    Child,
    /// Another resource of a multi-resource acquire (`gpt-4`, when `moderation` refused).
    OtherResource,
}

/// A refused acquire of `key` on gpt-4 whose debit of `key`'s gpt-4 bucket is given back
/// through a proxy that loses the give-back's answer in `fault`'s way: the rejection, and the
/// bucket's `tc` after it (1 when the debit stands, 0 when it was given back).
async fn a_refused_acquire(
    given: Given,
    fault: crate::outcomes::Fault,
) -> (dynalimit::Rejection, i64) {
    use dynalimit::Limit;
    use dynalimit_tests::fault::FaultProxy;
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = proxy.repository(&table, "unsettled").await;
    let one = [Limit::per_minute("rpm", 1)];
    repo.create_entity(NewEntity::new("org")).await.unwrap();
    let key = match given {
        Given::Child => NewEntity::new("key").parent("org").cascade(true),
        Given::OtherResource => NewEntity::new("key"),
    };
    repo.create_entity(key).await.unwrap();
    repo.set_limits("key", "gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    // The bucket that refuses, its only token spent.
    let (owner, resource) = match given {
        Given::Child => ("org", "gpt-4"),
        Given::OtherResource => ("key", "moderation"),
    };
    repo.set_limits(owner, resource, &one).await.unwrap();
    let limiter = dynalimit::RateLimiter::new(repo.clone());
    let spend = limiter.acquire(owner, resource, [("rpm", 1)]).await;
    spend.unwrap().commit().await.unwrap();
    // The give-back: a credit, pinned on the shard count (the debits are not).
    fault.plan(&proxy, "UpdateItem", Some("\"shard_count\""));
    let acquire = limiter.acquire("key", "gpt-4", [("rpm", 1)]);
    let err = match given {
        Given::Child => acquire.await,
        Given::OtherResource => acquire.also("moderation", [("rpm", 1)]).await,
    }
    .unwrap_err();
    let rejection = err.rejection().expect("a rejection").clone();
    assert_eq!(rejection.entity_id(), Some(owner));
    assert_eq!(rejection.resource(), Some(resource));
    let item = r_first_shard(&table, &repo).await;
    (rejection, get_i64(&item, "b_rpm_tc").unwrap() / 1000)
}

#[tokio::test]
async fn a_give_back_that_did_not_land_for_certain_is_named_by_the_rejection() {
    use crate::outcomes::Fault;
    use dynalimit_tests::fault::Lost;
    for given in [Given::Child, Given::OtherResource] {
        // Never forwarded: the debit stands, and the rejection says it may.
        let (rejection, tc) = a_refused_acquire(given, Fault::Hold).await;
        assert_eq!(tc, 1, "{given:?}: the give-back never reached the table");
        let unsettled = rejection.unsettled();
        assert_eq!(unsettled.len(), 1, "{given:?}: {rejection}");
        assert_eq!(unsettled[0].entity_id(), "key");
        assert_eq!(unsettled[0].resource(), "gpt-4");
        assert_eq!(unsettled[0].amounts(), [("rpm".to_owned(), 1)]);
        assert!(rejection.to_string().contains("may stand"), "{rejection}");
        // Applied, answer lost: given back, and still named (nobody can know it landed).
        let (rejection, tc) = a_refused_acquire(given, Fault::After(Lost::Answer500)).await;
        assert_eq!(tc, 0, "{given:?}: the give-back landed once");
        assert_eq!(rejection.unsettled().len(), 1, "{given:?}: {rejection}");
        // A 2xx whose body is cut is a landed give-back: nothing unsettled.
        let (rejection, tc) = a_refused_acquire(given, Fault::After(Lost::CutBody)).await;
        assert_eq!(tc, 0, "{given:?}");
        assert!(rejection.unsettled().is_empty(), "{given:?}: {rejection}");
    }
}

/// The configuration of both owners replaced (as zae-limiter's full-replace writes do) by one
/// that no longer declares a limit their buckets still hold, and both buckets sent to their
/// slow passes: a warm cascade whose two slow passes each left the name to the other is
/// decided again, so the name is debited (the buckets still hold it) or refused, never
/// admitted undebited.
#[tokio::test]
async fn a_name_both_configurations_dropped_is_never_admitted_undebited() {
    let r = rig().await;
    r.family(100, "project", "key-1", true).await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_hour("tph", 2)])
        .await
        .unwrap();
    let first = r.limiter.acquire("key-1", "gpt-4", [("tph", 1)]).await;
    first.unwrap().commit().await.unwrap();
    // Neither level declares tph any more; both buckets still do, with a token left.
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    r.repo.invalidate_config_cache().await;
    let mut admitted = 0;
    for _ in 0..3 {
        // Both buckets go to their slow passes (a boundary stamp, as a fan-out writes).
        for entity in ["key-1", "project"] {
            r.update_bucket(entity, "gpt-4", "SET vu = :z", &[(":z", n(0))])
                .await;
        }
        match r.limiter.acquire("key-1", "gpt-4", [("tph", 1)]).await {
            Ok(lease) => {
                assert_eq!(lease.consumed().get("tph"), Some(&1), "debited");
                admitted += 1;
                lease.commit().await.unwrap();
            }
            Err(e) => assert!(
                matches!(&e, Error::UnknownLimit { key } if key == "tph")
                    || e.rejection().is_some(),
                "{e}"
            ),
        }
    }
    assert!(admitted <= 1, "one token was left: {admitted} admitted");
}
