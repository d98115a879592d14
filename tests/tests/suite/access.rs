//! Disabling and re-enabling resources and entities (reference §12.1, §4.3): the flag of a
//! level, the stamps on every bucket it decides, the fast path and the slow path refusing,
//! entity overrides, the registries and the audit log.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Access, DisabledFlag, Error, Limit};
use dynalimit_format::item::{Item, get_i64, get_s};
use dynalimit_repository::RepositoryError;
use dynalimit_tests::raw::put_bucket;

use super::engine::{Rig, rig};

fn rpm(n: i64) -> Limit {
    Limit::per_minute("rpm", n)
}

/// Whether one acquire of `entity` on `resource` is admitted (committed at once), refused as
/// disabled (naming whom), or something else (a panic).
async fn admitted(r: &Rig, entity: &str, resource: &str) -> Result<(), String> {
    match r.limiter.acquire(entity, resource, [("rpm", 1)]).await {
        Ok(lease) => {
            lease.commit().await.expect("commit");
            Ok(())
        }
        Err(Error::ResourceDisabled { entity_id, .. }) => Err(entity_id),
        Err(other) => panic!("{entity} on {resource}: unexpected {other}"),
    }
}

/// The access stamp of every bucket item of `entity` on `resource`, by shard.
async fn stamps(r: &Rig, entity: &str, resource: &str) -> Vec<(Option<bool>, bool)> {
    let prefix = format!("{}/BUCKET#{entity}#{resource}#", r.repo.namespace_id());
    let mut found: Vec<Item> = r
        .table
        .scan_all()
        .await
        .into_iter()
        .filter(|i| get_s(i, "PK").is_some_and(|pk| pk.starts_with(&prefix)))
        .collect();
    found.sort_by_key(|i| get_s(i, "PK").map(str::to_owned));
    found
        .iter()
        .map(|i| {
            let disabled = match i.get("disabled") {
                Some(AttributeValue::Bool(b)) => Some(*b),
                _ => None,
            };
            (disabled, i.contains_key("bypass"))
        })
        .collect()
}

#[tokio::test]
async fn a_disabled_resource_refuses_on_both_paths_and_an_entity_override_re_admits() {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[rpm(100)])
        .await
        .unwrap();
    for entity in ["a", "b"] {
        admitted(&r, entity, "gpt-4").await.unwrap();
    }
    // A second shard of `a`'s bucket: the fan-out stamps every shard.
    let ns = r.repo.namespace_id().to_owned();
    put_bucket(&r.table, &ns, "a", "gpt-4", 1, &[("rpm", 100, 100, 60)]).await;

    let stamped = r
        .repo
        .set_resource_disabled("gpt-4", Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    assert_eq!(stamped, 3, "two shards of a, one of b");
    assert_eq!(stamps(&r, "a", "gpt-4").await, [(Some(true), false); 2]);
    assert_eq!(stamps(&r, "b", "gpt-4").await, [(Some(true), false)]);

    // The fast path refuses from the stamp: one request, nothing written.
    r.counter.reset();
    assert_eq!(admitted(&r, "b", "gpt-4").await, Err("b".into()));
    assert_eq!(r.counter.total(), 1, "refused by the stamp alone");
    // An entity without a bucket is refused by the slow path's walk; nothing is created.
    assert_eq!(admitted(&r, "c", "gpt-4").await, Err("c".into()));
    assert!(stamps(&r, "c", "gpt-4").await.is_empty());

    // An entity-level enable re-admits one entity, on every shard.
    let stamped = r
        .repo
        .set_entity_disabled("a", Some("gpt-4"), Some(DisabledFlag::Enabled))
        .await
        .unwrap();
    assert_eq!(stamped, 2);
    assert_eq!(stamps(&r, "a", "gpt-4").await, [(None, false); 2]);
    assert_eq!(
        r.repo.resolve_access("a", "gpt-4").await.unwrap(),
        Access::Enforced
    );
    admitted(&r, "a", "gpt-4").await.unwrap();
    assert_eq!(admitted(&r, "b", "gpt-4").await, Err("b".into()));

    // Clearing the resource's flag: every bucket is stamped with what now decides it. (The
    // clock moves so that the audit log orders the two changes.)
    r.clock.advance(std::time::Duration::from_millis(5));
    let stamped = r.repo.set_resource_disabled("gpt-4", None).await.unwrap();
    assert_eq!(stamped, 3);
    assert_eq!(stamps(&r, "b", "gpt-4").await, [(None, false)]);
    admitted(&r, "b", "gpt-4").await.unwrap();
    admitted(&r, "c", "gpt-4").await.unwrap();

    // Every change is in the audit log with what it wrote and how many buckets it stamped.
    let events = r
        .repo
        .audit_events("$RESOURCE:gpt-4", 10, None)
        .await
        .unwrap()
        .events;
    let flags: Vec<(Option<AttributeValue>, Option<i64>)> = events
        .iter()
        .filter(|e| e.details.contains_key("disabled"))
        .map(|e| {
            (
                e.details.get("disabled").cloned(),
                e.details
                    .get("buckets_stamped")
                    .and_then(|v| v.as_n().ok()?.parse().ok()),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            (Some(AttributeValue::Null(true)), Some(3)),
            (Some(AttributeValue::Bool(true)), Some(3)),
        ]
    );
    let entity_events = r.repo.audit_events("a", 10, None).await.unwrap().events;
    assert_eq!(entity_events[0].action, "limits_set");
    assert_eq!(entity_events[0].resource.as_deref(), Some("gpt-4"));
    assert_eq!(
        entity_events[0].details.get("disabled"),
        Some(&AttributeValue::Bool(false))
    );
}

#[tokio::test]
async fn an_entity_wide_disable_covers_every_resource_and_counts_its_level_once() {
    let r = rig().await;
    r.repo.set_system_defaults(&[rpm(100)], None).await.unwrap();
    for resource in ["gpt-4", "llama"] {
        admitted(&r, "k", resource).await.unwrap();
    }
    admitted(&r, "other", "gpt-4").await.unwrap();
    for _ in 0..2 {
        let stamped = r
            .repo
            .set_entity_disabled("k", None, Some(DisabledFlag::Disabled))
            .await
            .unwrap();
        assert_eq!(stamped, 2, "both resources of k, nothing of other");
    }
    assert_eq!(admitted(&r, "k", "gpt-4").await, Err("k".into()));
    assert_eq!(admitted(&r, "k", "llama").await, Err("k".into()));
    assert_eq!(admitted(&r, "k", "mistral").await, Err("k".into()));
    admitted(&r, "other", "gpt-4").await.unwrap();

    // The limit-less level is registered once, however often it is written.
    let registry: Item = r
        .table
        .client()
        .get_item()
        .table_name(r.table.name())
        .key(
            "PK",
            AttributeValue::S(format!("{}/SYSTEM#", r.repo.namespace_id())),
        )
        .key("SK", AttributeValue::S("#ENTITY_CONFIG_RESOURCES".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the registry");
    assert_eq!(get_i64(&registry, "_default_"), Some(1));
    // The level carries the flag and no limits: resolution falls through for limits.
    let level = r.repo.get_limits("k", "_default_").await.unwrap().unwrap();
    assert_eq!(
        (level.disabled, level.limits.len()),
        (Some(DisabledFlag::Disabled), 0)
    );

    // A resource-level value of the entity outranks its entity-wide one.
    r.repo
        .set_entity_disabled("k", Some("llama"), Some(DisabledFlag::Enabled))
        .await
        .unwrap();
    admitted(&r, "k", "llama").await.unwrap();
    assert_eq!(admitted(&r, "k", "gpt-4").await, Err("k".into()));
    // Clearing the entity-wide value restamps each bucket from its own resolution.
    let stamped = r.repo.set_entity_disabled("k", None, None).await.unwrap();
    assert_eq!(stamped, 2);
    admitted(&r, "k", "gpt-4").await.unwrap();
    admitted(&r, "k", "llama").await.unwrap();
}

#[tokio::test]
async fn a_child_enabled_on_its_own_still_meets_its_disabled_parent() {
    let r = rig().await;
    r.family(100, "org", "key", true).await;
    admitted(&r, "key", "gpt-4").await.unwrap();
    r.repo
        .set_entity_disabled("key", None, Some(DisabledFlag::Enabled))
        .await
        .unwrap();
    let stamped = r
        .repo
        .set_entity_disabled("org", None, Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    assert_eq!(stamped, 1, "the parent's bucket");
    assert_eq!(admitted(&r, "key", "gpt-4").await, Err("org".into()));
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let r = rig().await;
    r.counter.reset();
    let cases = [
        r.repo
            .set_resource_disabled("bad#resource", Some(DisabledFlag::Disabled))
            .await,
        r.repo
            .set_entity_disabled("", None, Some(DisabledFlag::Disabled))
            .await,
        r.repo
            .set_entity_disabled("k", Some("_default_"), Some(DisabledFlag::Disabled))
            .await,
        r.repo
            .set_entity_disabled("k#1", None, Some(DisabledFlag::Bypass))
            .await,
    ];
    for case in cases {
        match case {
            Err(RepositoryError::Validation(_)) => {}
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
    assert_eq!(r.counter.total(), 0, "nothing sent");
}

#[tokio::test]
async fn a_stored_cascade_policy_decides_whether_a_new_bucket_cascades() {
    let r = rig().await;
    r.family(100, "org", "key", false).await;
    // zae-limiter 0.16 stores a cascade policy as `cascade = true` on a level.
    r.table
        .client()
        .update_item()
        .table_name(r.table.name())
        .key(
            "PK",
            AttributeValue::S(format!("{}/RESOURCE#gpt-4", r.repo.namespace_id())),
        )
        .key("SK", AttributeValue::S("#CONFIG".into()))
        .update_expression("SET #c = :t")
        .expression_attribute_names("#c", "cascade")
        .expression_attribute_values(":t", AttributeValue::Bool(true))
        .send()
        .await
        .unwrap();
    r.repo.invalidate_config_cache().await;
    let lease = r
        .limiter
        .acquire("key", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(lease.entities(), ["key", "org"], "the policy outranks META");
    lease.commit().await.unwrap();
}

/// Hard case 37: an acquire that read the configuration before a disable creates its bucket
/// after the fan-out's first discovery; the second discovery pass stamps it.
#[tokio::test]
async fn hard_case_37_a_bucket_created_during_the_fan_out_is_stamped_by_the_second_pass() {
    use dynalimit_tests::fault::FaultProxy;
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let client = proxy
        .client(3, Some(std::time::Duration::from_secs(1)))
        .await;
    let repo = table
        .builder()
        .client(client)
        .namespace("race")
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_owned();
    put_bucket(&table, &ns, "a", "gpt-4", 0, &[("rpm", 100, 100, 60)]).await;
    // The first stamp is held (not forwarded) until its attempt times out: the first
    // discovery is over, the second has not begun.
    proxy.hold("UpdateItem", Some("BUCKET#"), 1);
    let fan_out = tokio::spawn(async move {
        repo.set_resource_disabled("gpt-4", Some(DisabledFlag::Disabled))
            .await
    });
    while proxy.pending() > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    put_bucket(&table, &ns, "late", "gpt-4", 0, &[("rpm", 100, 100, 60)]).await;
    assert_eq!(fan_out.await.unwrap().unwrap(), 2, "a, then late");
    for entity in ["a", "late"] {
        let pk = format!("{ns}/BUCKET#{entity}#gpt-4#0");
        let item = table
            .scan_all()
            .await
            .into_iter()
            .find(|i| get_s(i, "PK") == Some(pk.as_str()))
            .unwrap();
        assert_eq!(
            item.get("disabled"),
            Some(&AttributeValue::Bool(true)),
            "{entity}"
        );
    }
}
