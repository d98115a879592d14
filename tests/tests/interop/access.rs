//! Disable and enable (reference §12.1) written by each library and honoured by the other:
//! the flag items match field by field, the bucket stamps of one library's fan-out refuse
//! the other's acquires, and an entity override carves one entity out. A bypass stored by
//! zae-limiter ratchets the table to 0.17.0, which dynalimit opens (it refuses a higher
//! minimum and says what it implements). Multi-resource acquires (§3.11) of both libraries spend the same budgets.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Access, DisabledFlag, Error, Limit, RateLimiter};
use dynalimit_repository::{Repository, RepositoryError};
use dynalimit_tests::TestTable;
use serde_json::{Value, json};

use crate::python::{Python, shared_table};

const NS: &str = "access";

fn access(method: &str, args: &[&str]) -> Value {
    json!({"op": "access", "method": method, "args": args})
}

fn python_acquire(entity: &str) -> Value {
    json!({"op": "acquire", "entity": entity, "resource": "gpt-4", "consume": {"rpm": 1},
           "continue": true})
}

/// Whether Python admits one acquire of `entity` on gpt-4 (`Err` with the exception name).
async fn python_admits(python: &Python, entity: &str) -> Result<(), String> {
    match python.run(NS, vec![python_acquire(entity)]).await.remove(0) {
        Ok(v) if v["admitted"] == json!(true) => Ok(()),
        Ok(v) => Err(format!("rejected: {v}")),
        Err(e) => Err(e.kind),
    }
}

/// Whether dynalimit admits one acquire of `entity` on gpt-4 (`Err` naming whom refused).
async fn rust_admits(limiter: &RateLimiter, entity: &str) -> Result<(), String> {
    match limiter.acquire(entity, "gpt-4", [("rpm", 1)]).await {
        Ok(lease) => {
            lease.commit().await.expect("commit");
            Ok(())
        }
        Err(Error::ResourceDisabled { entity_id, .. }) => Err(entity_id),
        Err(other) => panic!("{entity}: unexpected {other}"),
    }
}

/// The item at (`pk`, `sk`) without the attributes that name its owner.
async fn item_without(
    table: &TestTable,
    pk: String,
    sk: &str,
    owner: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    let mut found = table
        .client()
        .get_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk))
        .key("SK", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("read")
        .item
        .expect("the item exists");
    found.retain(|_, v| v.as_s().map_or(true, |s| !s.contains(owner)));
    found
}

#[tokio::test]
async fn flags_written_by_either_library_are_the_same_items() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    let ns = repo.namespace_id().to_owned();
    python
        .ok(
            NS,
            vec![
                access("disable_resource", &["py-res"]),
                access("disable_entity", &["py-ent"]),
                access("enable_entity", &["py-ent", "gpt-4"]),
            ],
        )
        .await;
    repo.set_resource_disabled("rs-res", Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    repo.set_entity_disabled("rs-ent", None, Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    repo.set_entity_disabled("rs-ent", Some("gpt-4"), Some(DisabledFlag::Enabled))
        .await
        .unwrap();
    let pairs = [
        (
            (format!("{ns}/RESOURCE#py-res"), "#CONFIG", "py-res"),
            (format!("{ns}/RESOURCE#rs-res"), "#CONFIG", "rs-res"),
        ),
        (
            (format!("{ns}/ENTITY#py-ent"), "#CONFIG#_default_", "py-ent"),
            (format!("{ns}/ENTITY#rs-ent"), "#CONFIG#_default_", "rs-ent"),
        ),
        (
            (format!("{ns}/ENTITY#py-ent"), "#CONFIG#gpt-4", "py-ent"),
            (format!("{ns}/ENTITY#rs-ent"), "#CONFIG#gpt-4", "rs-ent"),
        ),
    ];
    for ((py_pk, sk, py_owner), (rs_pk, _, rs_owner)) in pairs {
        let py = item_without(&table, py_pk, sk, py_owner).await;
        let rs = item_without(&table, rs_pk, sk, rs_owner).await;
        assert_eq!(py, rs, "{sk}");
        assert!(py.contains_key("disabled"));
    }
    // Both counted their new entity levels in the registry, once per level.
    let registry = item_without(
        &table,
        format!("{ns}/SYSTEM#"),
        "#ENTITY_CONFIG_RESOURCES",
        "\u{0}",
    )
    .await;
    assert_eq!(
        registry.get("_default_"),
        Some(&AttributeValue::N("2".into()))
    );
    assert_eq!(registry.get("gpt-4"), Some(&AttributeValue::N("2".into())));
    // Both registered the resources they disabled.
    let resources = repo.list_resources_with_defaults().await.unwrap();
    assert!(resources.contains(&"py-res".to_string()) && resources.contains(&"rs-res".to_string()));
    // Each library reads the other's flags through its walk.
    assert_eq!(
        repo.resolve_access("py-ent", "llama").await.unwrap(),
        Access::Disabled
    );
    assert_eq!(
        repo.resolve_access("py-ent", "gpt-4").await.unwrap(),
        Access::Enforced
    );
}

#[tokio::test]
async fn a_resource_disabled_by_either_library_is_refused_by_the_other() {
    let (table, python) = shared_table!();
    let repo: Repository = table.repository(NS).await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    rust_admits(&limiter, "a").await.unwrap();
    python_admits(&python, "p").await.unwrap();

    // zae-limiter disables: its fan-out stamps dynalimit's bucket too.
    let stamped = python.one(NS, access("disable_resource", &["gpt-4"])).await;
    assert_eq!(stamped, json!(2));
    repo.invalidate_config_cache().await;
    assert_eq!(rust_admits(&limiter, "a").await, Err("a".into()));
    assert_eq!(rust_admits(&limiter, "new").await, Err("new".into()));
    python
        .one(NS, access("enable_entity", &["a", "gpt-4"]))
        .await;
    repo.invalidate_config_cache().await;
    rust_admits(&limiter, "a").await.unwrap();
    assert_eq!(rust_admits(&limiter, "p").await, Err("p".into()));
    python
        .one(NS, access("clear_resource_disabled", &["gpt-4"]))
        .await;
    repo.invalidate_config_cache().await;
    rust_admits(&limiter, "p").await.unwrap();

    // dynalimit disables: its fan-out stamps zae-limiter's bucket, and `a` keeps the
    // entity-level enable zae-limiter wrote.
    let stamped = repo
        .set_resource_disabled("gpt-4", Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    assert_eq!(
        stamped, 2,
        "a and p; new was refused before it had a bucket"
    );
    assert_eq!(
        python_admits(&python, "p").await,
        Err("ResourceDisabled".into())
    );
    assert_eq!(
        python_admits(&python, "fresh").await,
        Err("ResourceDisabled".into())
    );
    python_admits(&python, "a").await.unwrap();
    repo.set_entity_disabled("p", Some("gpt-4"), Some(DisabledFlag::Enabled))
        .await
        .unwrap();
    python_admits(&python, "p").await.unwrap();
    repo.set_resource_disabled("gpt-4", None).await.unwrap();
    python_admits(&python, "fresh").await.unwrap();
}

#[tokio::test]
async fn a_table_ratcheted_to_0_17_by_a_zae_limiter_bypass_opens_in_dynalimit() {
    let (table, python) = shared_table!();
    table.repository(NS).await;
    // A table dynalimit opened first records its reader version, which zae-limiter's gate
    // accepts: it stores the bypass and ratchets the table to 0.17.0.
    python.one(NS, access("bypass_resource", &["gpt-4"])).await;
    let repo = table.builder().namespace(NS).connect().await.unwrap();
    let record = repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.17.0");
    assert_eq!(record.lambda_version.as_deref(), Some("0.17.0"));
    // A minimum above what dynalimit implements still refuses, and says so.
    table
        .set_version_attribute("client_min_version", "0.18.0")
        .await;
    match table.builder().namespace(NS).connect().await {
        Err(RepositoryError::IncompatibleVersion {
            required, message, ..
        }) => {
            assert_eq!(required, "0.18.0");
            assert!(message.contains("0.17.0 feature set"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn multi_resource_acquires_of_both_libraries_share_the_same_budgets() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    repo.set_resource_defaults("moderation", &[Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let rust_multi = || async {
        limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .also("moderation", [("rpm", 1)])
            .await
    };
    for _ in 0..2 {
        rust_multi().await.unwrap().commit().await.unwrap();
    }
    let python_multi = json!({"op": "acquire", "entity": "k", "resource": "gpt-4",
        "consume": {"rpm": 1}, "also": {"moderation": {"rpm": 1}}, "continue": true});
    let answers = python
        .run(NS, vec![python_multi.clone(), python_multi])
        .await;
    let admitted: Vec<bool> = answers
        .iter()
        .map(|a| a.as_ref().expect("answered")["admitted"] == json!(true))
        .collect();
    assert_eq!(admitted, [true, false], "moderation holds 3");
    assert!(matches!(rust_multi().await, Err(Error::Rejected(_))));
    limiter.settle().await;
    // Every refused acquire gave gpt-4 back: each resource was debited three times in all.
    let tc = |resource: &'static str| {
        let table = &table;
        let ns = repo.namespace_id().to_owned();
        async move {
            let pk = format!("{ns}/BUCKET#k#{resource}#0");
            let found = item_without(table, pk, "#STATE", "\u{0}").await;
            found["b_rpm_tc"].as_n().unwrap().parse::<i64>().unwrap()
        }
    };
    assert_eq!(tc("gpt-4").await, 3000);
    assert_eq!(tc("moderation").await, 3000);
}
