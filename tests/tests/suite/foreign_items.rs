//! Index reads against items another namespace planted: IAM constrains only the base table's
//! partition key, so a writer of namespace `alpha` may give its own items index keys that
//! name namespace `bravo`. Every reader of GSI1–GSI4 skips them (and items of `bravo` whose
//! index keys their base key does not imply), and counts them.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Limit, RateLimiter};
use dynalimit_repository::{NewEntity, Repository, UsageQuery};
use dynalimit_tests::TestTable;
use dynalimit_tests::raw::put_item;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Two namespaces of one table: `alpha`, the writer of the planted items, and `bravo`, with
/// their ids.
struct Tenants {
    table: TestTable,
    alpha: Repository,
    bravo: Repository,
    a: String,
    b: String,
}

async fn tenants() -> Tenants {
    let table = dynalimit_tests::table().await;
    let alpha = table.repository("alpha").await;
    let bravo = table.repository("bravo").await;
    let (a, b) = (
        alpha.namespace_id().to_owned(),
        bravo.namespace_id().to_owned(),
    );
    Tenants {
        table,
        alpha,
        bravo,
        a,
        b,
    }
}

fn item(pairs: Vec<(&str, AttributeValue)>) -> HashMap<String, AttributeValue> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A usage snapshot of `entity` in partition `pk_ns`, indexed under `index_ns`'s resource.
fn snapshot(
    pk_ns: &str,
    index_ns: &str,
    entity: &str,
    rpm: i64,
) -> HashMap<String, AttributeValue> {
    let start = "2026-03-10T10:00:00Z";
    item(vec![
        ("PK", s(&format!("{pk_ns}/ENTITY#{entity}"))),
        ("SK", s(&format!("#USAGE#gpt-4#{start}"))),
        ("entity_id", s(entity)),
        ("resource", s("gpt-4")),
        ("window", s("hourly")),
        ("window_start", s(start)),
        ("rpm", n(rpm)),
        ("total_events", n(1)),
        ("GSI2PK", s(&format!("{index_ns}/RESOURCE#gpt-4"))),
        ("GSI2SK", s(&format!("USAGE#{start}#{entity}"))),
        ("GSI4PK", s(pk_ns)),
        ("GSI4SK", s(&format!("{pk_ns}/ENTITY#{entity}"))),
    ])
}

#[tokio::test]
async fn usage_reports_skip_snapshots_another_namespace_indexed_under_this_one() {
    let Tenants {
        table,
        alpha,
        bravo,
        a,
        b,
    } = tenants().await;
    put_item(&table, snapshot(&b, &b, "honest", 5)).await;
    // alpha's own partition, bravo's index key: a fake report entry for bravo.
    put_item(&table, snapshot(&a, &b, "mallory", 1_000_000)).await;
    // bravo's partition, but an index key naming another entity than the key's.
    let mut moved = snapshot(&b, &b, "shifty", 7);
    moved.insert("GSI2SK".into(), s("USAGE#2026-03-10T10:00:00Z#honest"));
    put_item(&table, moved).await;

    let page = bravo
        .usage_snapshots(&UsageQuery::resource("gpt-4"), 100, None)
        .await
        .expect("bravo's usage");
    let entities: Vec<&str> = page
        .snapshots
        .iter()
        .map(|s| s.entity_id.as_str())
        .collect();
    assert_eq!(entities, ["honest"]);
    let summary = bravo
        .usage_summary(&UsageQuery::resource("gpt-4"))
        .await
        .expect("bravo's summary");
    assert_eq!(summary.total["rpm"], 5);
    assert_eq!(summary.snapshot_count, 1);
    // alpha reads its own partition as it is: the item is alpha's to keep.
    let own = alpha
        .usage_snapshots(&UsageQuery::entity("mallory"), 100, None)
        .await
        .expect("alpha's usage");
    assert_eq!(own.snapshots.len(), 1);
}

/// A bucket item of `entity` in partition `pk_ns`, shard 1, every index key naming
/// `index_ns`, holding `tokens` of `rpm`.
fn bucket(
    pk_ns: &str,
    index_ns: &str,
    entity: &str,
    tokens: i64,
) -> HashMap<String, AttributeValue> {
    item(vec![
        ("PK", s(&format!("{pk_ns}/BUCKET#{entity}#gpt-4#1"))),
        ("SK", s("#STATE")),
        ("entity_id", s(entity)),
        ("resource", s("gpt-4")),
        ("rf", n(1_700_000_000_000)),
        ("shard_count", n(1)),
        ("b_rpm_tk", n(tokens * 1000)),
        ("b_rpm_cp", n(tokens * 1000)),
        ("b_rpm_ra", n(tokens * 1000)),
        ("b_rpm_rp", n(60_000)),
        ("b_rpm_tc", n(0)),
        ("GSI2PK", s(&format!("{index_ns}/RESOURCE#gpt-4"))),
        ("GSI2SK", s(&format!("BUCKET#{entity}#1"))),
        ("GSI3PK", s(&format!("{index_ns}/ENTITY#{entity}"))),
        ("GSI3SK", s("BUCKET#gpt-4#1")),
        ("GSI4PK", s(index_ns)),
        ("GSI4SK", s(&format!("BUCKET#{entity}#gpt-4#1"))),
    ])
}

#[tokio::test]
async fn bucket_listings_resets_and_deletions_skip_another_namespace_s_buckets() {
    let Tenants {
        table,
        alpha: _,
        bravo,
        a,
        b,
    } = tenants().await;
    let limiter = RateLimiter::new(bravo.clone());
    let rpm = [Limit::per_minute("rpm", 10)];
    bravo
        .set_limits("victim", "gpt-4", &rpm)
        .await
        .expect("limits");
    limiter
        .acquire("victim", "gpt-4", [("rpm", 3)])
        .await
        .expect("bravo's own bucket")
        .commit()
        .await
        .expect("commit");
    let planted = bucket(&a, &b, "victim", 1_000_000);
    put_item(&table, planted.clone()).await;

    // Availability sums every shard GSI3 lists: bravo's own shard only.
    let available = limiter
        .available("victim", "gpt-4", &rpm)
        .await
        .expect("available");
    assert_eq!(available["rpm"], 7);
    let listed = bravo
        .buckets()
        .resource_buckets("gpt-4")
        .await
        .expect("resource listing");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0.shard, 0);
    let of_entity = bravo
        .buckets()
        .entity_buckets("victim")
        .await
        .expect("entity listing");
    assert_eq!(of_entity.len(), 1);

    // A reset discovers bravo's shards only; the planted item is not touched.
    bravo
        .reset_bucket(
            "victim",
            "gpt-4",
            &dynalimit_repository::OperationOptions::new(),
        )
        .await
        .expect("reset");
    assert_eq!(
        limiter
            .available("victim", "gpt-4", &rpm)
            .await
            .expect("available")["rpm"],
        10
    );
    // Deleting the entity deletes bravo's items, never alpha's.
    bravo.delete_entity("victim").await.expect("delete");
    let remaining = table.scan_all().await;
    assert!(remaining.contains(&planted), "alpha's item was deleted");
    assert!(
        !remaining
            .iter()
            .any(|i| i.get("PK") == Some(&s(&format!("{b}/BUCKET#victim#gpt-4#0")))),
        "bravo's bucket remains"
    );
}

#[tokio::test]
async fn entity_listings_skip_configs_and_children_another_namespace_indexed_here() {
    let Tenants {
        table,
        alpha: _,
        bravo,
        a,
        b,
    } = tenants().await;
    bravo
        .set_limits("honest", "gpt-4", &[Limit::per_minute("rpm", 10)])
        .await
        .expect("bravo's entity config");
    put_item(
        &table,
        item(vec![
            ("PK", s(&format!("{a}/ENTITY#mallory"))),
            ("SK", s("#CONFIG#gpt-4")),
            ("entity_id", s("mallory")),
            ("resource", s("gpt-4")),
            ("GSI3PK", s(&format!("{b}/ENTITY_CONFIG#gpt-4"))),
            ("GSI3SK", s("mallory")),
        ]),
    )
    .await;
    let (ids, _) = bravo
        .list_entities_with_custom_limits("gpt-4", 100, None)
        .await
        .expect("listing");
    assert_eq!(ids, ["honest"]);

    bravo
        .create_entity(NewEntity::new("boss"))
        .await
        .expect("parent");
    bravo
        .create_entity(NewEntity::new("kid").parent("boss"))
        .await
        .expect("child");
    // A META of alpha's, claiming to be a child of bravo's `boss`, and one without the
    // attributes an entity has (which made the listing fail).
    for (entity, with_id) in [("mallory", true), ("broken", false)] {
        let mut meta = item(vec![
            ("PK", s(&format!("{a}/ENTITY#{entity}"))),
            ("SK", s("#META")),
            ("parent_id", s("boss")),
            ("GSI1PK", s(&format!("{b}/PARENT#boss"))),
            ("GSI1SK", s(&format!("CHILD#{entity}"))),
        ]);
        if with_id {
            meta.insert("entity_id".into(), s(entity));
        }
        put_item(&table, meta).await;
    }
    let children = bravo.children("boss").await.expect("children");
    let ids: Vec<&str> = children.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["kid"]);
}

#[tokio::test]
async fn a_purge_deletes_none_of_another_namespace_s_items() {
    let Tenants {
        table,
        alpha,
        bravo,
        a,
        b,
    } = tenants().await;
    bravo
        .create_entity(NewEntity::new("kept-for-now"))
        .await
        .expect("an item to purge");
    let planted = snapshot(&a, &b, "mallory", 1);
    let mut planted = planted;
    planted.insert("GSI4PK".into(), s(&b));
    put_item(&table, planted.clone()).await;
    alpha.delete_namespace("bravo").await.expect("delete bravo");
    let purged = alpha.purge_namespace(&b).await.expect("purge bravo");
    assert!(purged >= 1, "purged {purged}");
    let remaining = table.scan_all().await;
    assert!(
        remaining.contains(&planted),
        "the purge deleted alpha's item"
    );
    assert!(
        !remaining.iter().any(|i| matches!(
            i.get("PK"),
            Some(AttributeValue::S(pk)) if pk.starts_with(&format!("{b}/"))
        )),
        "an item of bravo remains"
    );
}
