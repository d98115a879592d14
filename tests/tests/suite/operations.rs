//! Operator resets and top-ups (reference §12.6): balances to the millitoken on sharded
//! buckets, the operation record and the audit event of every call, idempotent replays, bad
//! input refused before any request, items dynalimit cannot interpret refused before any
//! write, lost races re-planned, and every way of losing the transaction's answer.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::RateLimiter;
use dynalimit_core::{Limit, ManualClock};
use dynalimit_format::FormatError;
use dynalimit_format::item::{Item, get_i64, get_s};
use dynalimit_repository::{
    BucketOperation, NewEntity, OperationKind, OperationOptions, Repository, RepositoryError,
    RequestCounter,
};
use dynalimit_tests::TestTable;
use dynalimit_tests::fault::FaultProxy;

use super::outcomes::{FAULTS, pk, read_shard};
use dynalimit_tests::raw::put_shard;

/// The `rf` of the raw buckets.
const RF: i64 = 1_700_000_000_000;
/// 30 s after it.
const NOW: i64 = RF + 30_000;
const RESOURCE: &str = "gpt-4";

fn rpm() -> Limit {
    Limit::per_minute("rpm", 100)
}

/// A repository from `builder` (namespace `ops`) whose clock stands at `NOW`.
async fn repo_at(builder: dynalimit_repository::RepositoryBuilder) -> Repository {
    builder
        .namespace("ops")
        .clock(Arc::new(ManualClock::new(NOW)))
        .open()
        .await
        .expect("open")
}

/// A fresh table, a repository on it at `NOW`, its namespace id, and rpm 100/min as the
/// defaults of `RESOURCE`.
async fn with_defaults() -> (TestTable, Repository, String) {
    let table = dynalimit_tests::table().await;
    let repo = repo_at(table.builder()).await;
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(RESOURCE, &[rpm()])
        .await
        .unwrap();
    (table, repo, ns)
}

/// A bucket of `entity` (rpm 100/min, 4 000 milli consumed) with one shard per entry of
/// `tks`, each holding that balance, every shard stamped `shard_count = count`.
async fn bucket(table: &TestTable, ns: &str, entity: &str, count: u32, tks: &[(u32, i64)]) {
    for &(shard, tk) in tks {
        let at = (shard, count);
        put_shard(
            table,
            ns,
            entity,
            RESOURCE,
            at,
            &[("rpm", 100, 100, 60)],
            &[("rpm", tk)],
        )
        .await;
    }
}

/// Shard `shard` of `entity`'s bucket, read consistently (empty when absent).
async fn shard(table: &TestTable, ns: &str, entity: &str, shard: u32) -> Item {
    read_shard(table, ns, entity, shard)
        .await
        .unwrap_or_default()
}

/// The operation records of `entity`'s bucket.
async fn records(table: &TestTable, ns: &str, entity: &str) -> Vec<Item> {
    table
        .client()
        .query()
        .table_name(table.name())
        .key_condition_expression("PK = :pk AND begins_with(SK, :op)")
        .expression_attribute_values(":pk", AttributeValue::S(pk(ns, entity, 0)))
        .expression_attribute_values(":op", AttributeValue::S("#OP#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("query")
        .items
        .unwrap_or_default()
}

/// The audit events of `entity` with `action`.
async fn audited(
    repo: &Repository,
    entity: &str,
    action: &str,
) -> Vec<dynalimit_repository::AuditEvent> {
    repo.audit_events(entity, 100, None)
        .await
        .expect("audit")
        .events
        .into_iter()
        .filter(|e| e.action == action)
        .collect()
}

fn amounts(pairs: &[(&str, i64)]) -> std::collections::BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn n(item: &Item, name: &str) -> i64 {
    get_i64(item, name).unwrap_or_else(|| panic!("{name} missing in {item:?}"))
}

#[tokio::test]
async fn a_reset_fills_every_shard_to_its_share_and_records_itself() {
    let table = dynalimit_tests::table().await;
    let repo = repo_at(table.builder().principal("ops-tool")).await;
    let ns = repo.namespace_id().to_owned();
    repo.create_entity(NewEntity::new("k1")).await.unwrap();
    repo.set_limits("k1", RESOURCE, &[rpm()]).await.unwrap();
    // 4 shards: ceiling 25 000 each, refill 25 000/min each; 30 s refill 12 500.
    // Shard 0: 0 → 12 500; shard 1: −10 000 → 2 500; shard 2 full; shard 3 holds 100 000 from
    // before the doubling → trimmed to 25 000 by the refill's clamp.
    bucket(
        &table,
        &ns,
        "k1",
        4,
        &[(0, 0), (1, -10_000), (2, 25_000), (3, 100_000)],
    )
    .await;
    let done = repo
        .reset_bucket("k1", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(
        (done.kind, done.shards, done.replayed),
        (OperationKind::Reset, 4, false)
    );
    // (12 500 + 22 500 + 0 + 0) // 1000.
    assert_eq!(done.amounts, amounts(&[("rpm", 35)]));
    for s in 0..4 {
        let item = shard(&table, &ns, "k1", s).await;
        assert_eq!(n(&item, "b_rpm_tk"), 25_000, "shard {s}");
        assert_eq!(n(&item, "b_rpm_tc"), 0, "consumption untouched");
        assert_eq!(n(&item, "b_rpm_cp"), 100_000, "capacity stays undivided");
        assert_eq!(n(&item, "rf"), NOW);
        assert_eq!(
            n(&item, "vu"),
            0,
            "one slow pass materialises the next acquire"
        );
        assert_eq!(n(&item, "shard_count"), 4);
        assert_eq!(n(&item, "b_wcu_tk"), 1_000_000);
    }
    let found = records(&table, &ns, "k1").await;
    assert_eq!(found.len(), 1);
    let op = &found[0];
    let text = |k: &str| get_s(op, k).map(str::to_owned);
    assert_eq!(text("SK"), Some(format!("#OP#{}", done.operation_id)));
    assert_eq!(done.operation_id.len(), 26, "a ULID when no key is given");
    assert_eq!(text("operation").as_deref(), Some("reset"));
    assert_eq!(text("entity_id").as_deref(), Some("k1"));
    assert_eq!(text("resource").as_deref(), Some(RESOURCE));
    let incarnation = repo.get_entity("k1").await.unwrap().unwrap().incarnation;
    assert_eq!(text("ent"), incarnation);
    assert_eq!(text("writer").map(|w| w.len()), Some(24));
    assert_eq!(n(op, "shards"), 4);
    assert_eq!(n(op, "ttl"), NOW / 1000 + 3 * 86_400);
    assert_eq!(text("GSI4PK"), Some(ns.clone()));
    assert_eq!(
        text("GSI4SK"),
        Some(format!("OP#k1#{RESOURCE}#{}", done.operation_id))
    );
    assert!(
        matches!(&op["amounts"], AttributeValue::M(m) if m["rpm"] == AttributeValue::N("35".into()))
    );
    assert!(
        !op.keys()
            .any(|k| k.starts_with("GSI1") || k.starts_with("GSI2") || k.starts_with("GSI3"))
    );
    let events = audited(&repo, "k1", "bucket_reset").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].principal.as_deref(), Some("ops-tool"));
    assert_eq!(events[0].resource.as_deref(), Some(RESOURCE));
    assert_eq!(events[0].details["shards"], AttributeValue::N("4".into()));
    assert!(
        matches!(&events[0].details["amounts"], AttributeValue::M(m) if m["rpm"] == AttributeValue::N("35".into()))
    );
}

#[tokio::test]
async fn a_top_up_grants_at_most_the_headroom_split_by_it_and_the_limiter_spends_it() {
    let table = dynalimit_tests::table().await;
    let clock = ManualClock::new(NOW);
    let repo = table
        .builder()
        .namespace("ops")
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(RESOURCE, &[rpm(), Limit::per_minute("tpm", 1000)])
        .await
        .unwrap();
    // 2 shards, ceiling 50 000, refill 50 000/min: after 30 s shard 0 holds 25 000 (room 25
    // tokens), shard 1 holds 45 000 (room 5).
    bucket(&table, &ns, "k2", 2, &[(0, 0), (1, 20_000)]).await;
    let options = OperationOptions::new().principal("billing");
    let done = repo
        .top_up("k2", RESOURCE, [("rpm", 12)], &options)
        .await
        .unwrap();
    // 12 × 25 // 30 = 10, 12 × 5 // 30 = 2.
    assert_eq!(
        (done.shards, done.amounts.clone()),
        (2, amounts(&[("rpm", 12)]))
    );
    assert_eq!(n(&shard(&table, &ns, "k2", 0).await, "b_rpm_tk"), 35_000);
    assert_eq!(n(&shard(&table, &ns, "k2", 1).await, "b_rpm_tk"), 47_000);
    // A defaults bucket gets the acquire path's ttl: now + 60 s × 7.
    assert_eq!(
        n(&shard(&table, &ns, "k2", 0).await, "ttl"),
        NOW / 1000 + 420
    );
    // 1 ms later only 18 tokens of room are left (15 + 3): that is all a top-up of 100 gives.
    clock.advance(Duration::from_millis(1));
    let more = repo
        .top_up("k2", RESOURCE, [("rpm", 100)], &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(more.amounts, amounts(&[("rpm", 18)]));
    for s in 0..2 {
        let item = shard(&table, &ns, "k2", s).await;
        assert_eq!(n(&item, "b_rpm_tk"), 50_000, "shard {s} at its ceiling");
        assert_eq!(n(&item, "rf"), NOW + 1);
    }
    // An unknown limit name, and a configured limit the bucket does not hold: refused after
    // the read, nothing written.
    let before = table.scan_all().await.len();
    let unknown = repo
        .top_up("k2", RESOURCE, [("rph", 1)], &OperationOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, RepositoryError::Validation(_)),
        "{unknown}"
    );
    let unseeded = repo
        .top_up("k2", RESOURCE, [("tpm", 1)], &OperationOptions::new())
        .await
        .unwrap_err();
    assert!(unseeded.to_string().contains("seed"), "{unseeded}");
    assert_eq!(table.scan_all().await.len(), before);
    // The limiter reads the full allowance and spends it through the vu = 0 slow pass.
    let limiter = RateLimiter::new(repo.clone());
    let available = limiter.available("k2", RESOURCE, &[]).await.unwrap();
    assert_eq!(available["rpm"], 100);
    let lease = limiter
        .acquire("k2", RESOURCE, [("rpm", 50)])
        .await
        .unwrap();
    lease.commit().await.unwrap();
    let events = audited(&repo, "k2", "bucket_topped_up").await;
    assert_eq!(events.len(), 2);
    // The acquire's slow pass seeded tpm on its shard, full: nothing to top up there.
    let seeded = repo
        .top_up("k2", RESOURCE, [("tpm", 1)], &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(seeded.amounts, amounts(&[("tpm", 0)]));
    assert!(
        events
            .iter()
            .any(|e| e.principal.as_deref() == Some("billing"))
    );
}

#[tokio::test]
async fn an_idempotency_key_returns_the_first_result_and_applies_nothing_twice() {
    let table = dynalimit_tests::table().await;
    let repo = repo_at(table.builder()).await;
    let ns = repo.namespace_id().to_owned();
    repo.create_entity(NewEntity::new("k3")).await.unwrap();
    repo.set_limits("k3", RESOURCE, &[rpm()]).await.unwrap();
    bucket(&table, &ns, "k3", 1, &[(0, 10_000)]).await;
    let key = OperationOptions::new().idempotency_key("refund-1");
    let first = repo
        .top_up("k3", RESOURCE, [("rpm", 30)], &key)
        .await
        .unwrap();
    // 10 000 + 50 000 refilled + 30 000.
    assert_eq!(n(&shard(&table, &ns, "k3", 0).await, "b_rpm_tk"), 90_000);
    assert_eq!(first.operation_id, "refund-1");
    let again = repo
        .top_up("k3", RESOURCE, [("rpm", 30)], &key)
        .await
        .unwrap();
    assert!(again.replayed && !first.replayed);
    assert_eq!(
        (again.shards, &again.amounts),
        (first.shards, &first.amounts)
    );
    assert_eq!(
        n(&shard(&table, &ns, "k3", 0).await, "b_rpm_tk"),
        90_000,
        "not applied twice"
    );
    // Another amount under the same key is the same operation: its stored result.
    let other = repo
        .top_up("k3", RESOURCE, [("rpm", 5)], &key)
        .await
        .unwrap();
    assert_eq!(other.amounts, first.amounts);
    assert_eq!(audited(&repo, "k3", "bucket_topped_up").await.len(), 1);
    // A reset under a top-up's key is refused; nothing is written.
    let reused = repo.reset_bucket("k3", RESOURCE, &key).await.unwrap_err();
    assert!(
        matches!(&reused, RepositoryError::IdempotencyKeyReused { recorded, .. } if recorded == "top_up"),
        "{reused}"
    );
    assert_eq!(n(&shard(&table, &ns, "k3", 0).await, "b_rpm_tk"), 90_000);
    assert_eq!(records(&table, &ns, "k3").await.len(), 1);

    // Deleting the entity deletes its records; a new incarnation's call with the key applies.
    assert!(repo.delete_entity("k3").await.unwrap() > 0);
    assert!(records(&table, &ns, "k3").await.is_empty());
    repo.create_entity(NewEntity::new("k3")).await.unwrap();
    repo.set_limits("k3", RESOURCE, &[rpm()]).await.unwrap();
    bucket(&table, &ns, "k3", 1, &[(0, 0)]).await;
    let fresh = repo
        .top_up("k3", RESOURCE, [("rpm", 30)], &key)
        .await
        .unwrap();
    assert!(!fresh.replayed);
    assert_eq!(n(&shard(&table, &ns, "k3", 0).await, "b_rpm_tk"), 80_000);
}

#[tokio::test]
async fn a_record_of_an_earlier_incarnation_is_replaced_not_replayed() {
    let table = dynalimit_tests::table().await;
    let repo = repo_at(table.builder()).await;
    let ns = repo.namespace_id().to_owned();
    repo.create_entity(NewEntity::new("k4")).await.unwrap();
    repo.set_resource_defaults(RESOURCE, &[rpm()])
        .await
        .unwrap();
    bucket(&table, &ns, "k4", 1, &[(0, 0)]).await;
    let key = OperationOptions::new().idempotency_key("k");
    repo.reset_bucket("k4", RESOURCE, &key).await.unwrap();
    // The record outlives a recreate (as when delete_entity could not find it).
    let meta_pk = format!("{ns}/ENTITY#k4");
    table
        .client()
        .delete_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(meta_pk))
        .key("SK", AttributeValue::S("#META".into()))
        .send()
        .await
        .unwrap();
    repo.create_entity(NewEntity::new("k4")).await.unwrap();
    bucket(&table, &ns, "k4", 1, &[(0, 0)]).await;
    let again = repo.reset_bucket("k4", RESOURCE, &key).await.unwrap();
    assert!(
        !again.replayed,
        "another incarnation's record reads as absent"
    );
    assert_eq!(n(&shard(&table, &ns, "k4", 0).await, "b_rpm_tk"), 100_000);
    let found = records(&table, &ns, "k4").await;
    assert_eq!(found.len(), 1);
    let incarnation = repo.get_entity("k4").await.unwrap().unwrap().incarnation;
    assert_eq!(get_s(&found[0], "ent").map(str::to_owned), incarnation);
}

#[tokio::test]
async fn no_bucket_writes_nothing_unless_a_key_records_the_no_op() {
    let (table, repo, ns) = with_defaults().await;
    let before = table.scan_all().await.len();
    let reset = repo
        .reset_bucket("new", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!((reset.shards, reset.amounts), (0, amounts(&[("rpm", 0)])));
    let topped = repo
        .top_up("new", RESOURCE, [("rpm", 7)], &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!((topped.shards, topped.amounts), (0, amounts(&[("rpm", 0)])));
    assert_eq!(table.scan_all().await.len(), before, "nothing written");
    let keyed = OperationOptions::new().idempotency_key("first-touch");
    let noop = repo
        .top_up("new", RESOURCE, [("rpm", 7)], &keyed)
        .await
        .unwrap();
    assert_eq!(noop.shards, 0);
    let found = records(&table, &ns, "new").await;
    assert_eq!(found.len(), 1);
    assert_eq!(n(&found[0], "shards"), 0);
    assert_eq!(audited(&repo, "new", "bucket_topped_up").await.len(), 1);
    assert!(
        shard(&table, &ns, "new", 0).await.is_empty(),
        "no bucket created"
    );
    // Once the bucket exists, the key still returns the recorded no-op.
    bucket(&table, &ns, "new", 1, &[(0, 0)]).await;
    let later = repo
        .top_up("new", RESOURCE, [("rpm", 7)], &keyed)
        .await
        .unwrap();
    assert!(later.replayed && later.amounts["rpm"] == 0);
    assert_eq!(n(&shard(&table, &ns, "new", 0).await, "b_rpm_tk"), 0);
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo = table.counted_repository(&counter, "ops").await;
    counter.reset();
    let plain = OperationOptions::new();
    let mut refused = vec![
        repo.reset_bucket("#x", RESOURCE, &plain).await.unwrap_err(),
        repo.reset_bucket("k", "_default_", &plain)
            .await
            .unwrap_err(),
    ];
    for options in [
        plain.clone().idempotency_key("a#b"),
        plain.clone().idempotency_key("k".repeat(65)),
        plain.clone().idempotency_key(""),
        plain.clone().principal("bad principal"),
    ] {
        refused.push(
            repo.reset_bucket("k", RESOURCE, &options)
                .await
                .unwrap_err(),
        );
    }
    let amounts: [&[(&str, i64)]; 7] = [
        &[("rpm", 0)],
        &[("rpm", -5)],
        &[("rpm", 1_000_000_000_000_001)],
        &[],
        &[("wcu", 1)],
        &[("ttl", 1)],
        &[("rpm", 1), ("rpm", 2)],
    ];
    for asked in amounts {
        let asked = asked.iter().copied();
        refused.push(repo.top_up("k", RESOURCE, asked, &plain).await.unwrap_err());
    }
    for error in refused {
        assert!(matches!(error, RepositoryError::Validation(_)), "{error}");
    }
    assert_eq!(counter.total(), 0, "no request was sent");
}

#[tokio::test]
async fn items_that_cannot_be_read_are_refused_before_any_write() {
    let (table, repo, ns) = with_defaults().await;
    // A bucket carrying a session window's start that is not a number.
    bucket(&table, &ns, "q1", 1, &[(0, 0)]).await;
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk(&ns, "q1", 0)))
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("SET b_rpm_ws = :g")
        .expression_attribute_values(":g", AttributeValue::S("soon".into()))
        .send()
        .await
        .unwrap();
    // An entity configuration with a quota (refill amount 0).
    dynalimit_tests::raw::put_item(
        &table,
        [
            ("PK", AttributeValue::S(format!("{ns}/ENTITY#q2"))),
            ("SK", AttributeValue::S(format!("#CONFIG#{RESOURCE}"))),
            ("l_daily_cp", AttributeValue::N("100".into())),
            ("l_daily_ra", AttributeValue::N("0".into())),
            ("l_daily_rp", AttributeValue::N("1".into())),
            ("l_daily_rsched", AttributeValue::S("1m0h0".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    )
    .await;
    bucket(&table, &ns, "q2", 1, &[(0, 0)]).await;
    let before = table.scan_all().await;
    for entity in ["q1"] {
        for result in [
            repo.reset_bucket(
                entity,
                RESOURCE,
                &OperationOptions::new().idempotency_key("x"),
            )
            .await,
            repo.top_up(entity, RESOURCE, [("rpm", 1)], &OperationOptions::new())
                .await,
        ] {
            let error = result.unwrap_err();
            assert!(
                matches!(
                    error,
                    RepositoryError::Format(FormatError::Unsupported { .. })
                ),
                "{entity}: {error}"
            );
        }
    }
    let mut after = table.scan_all().await;
    let mut before = before;
    let key = |i: &Item| format!("{:?}{:?}", i.get("PK"), i.get("SK"));
    before.sort_by_key(key);
    after.sort_by_key(key);
    assert_eq!(before, after, "nothing written");
}

#[tokio::test]
async fn a_lagging_shard_is_raised_first_and_planned_at_the_shared_count() {
    let (table, repo, ns) = with_defaults().await;
    bucket(&table, &ns, "lag", 4, &[(0, 0), (2, 0)]).await;
    bucket(&table, &ns, "lag", 2, &[(1, 0)]).await;
    let done = repo
        .reset_bucket("lag", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(done.shards, 3);
    for s in 0..3 {
        let item = shard(&table, &ns, "lag", s).await;
        assert_eq!(n(&item, "shard_count"), 4, "shard {s}");
        assert_eq!(n(&item, "b_rpm_tk"), 25_000, "shard {s}");
    }
    assert!(
        shard(&table, &ns, "lag", 3).await.is_empty(),
        "missing slots stay missing"
    );
}

#[tokio::test]
async fn lost_races_are_planned_again_and_end_contended_without_a_write() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let client = proxy.client(1, Some(Duration::from_secs(1))).await;
    let repo = repo_at(table.builder().client(client)).await;
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(RESOURCE, &[rpm()])
        .await
        .unwrap();
    bucket(&table, &ns, "race", 2, &[(0, 0), (1, 0)]).await;
    // Three lost races, then the fourth attempt lands.
    proxy.clear_requests();
    proxy.fail_next("TransactWriteItems", "TransactionCanceledException", 3);
    let done = repo
        .reset_bucket("race", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(proxy.pending(), 0);
    assert_eq!(done.amounts, amounts(&[("rpm", 50)]));
    assert_eq!(n(&shard(&table, &ns, "race", 1).await, "b_rpm_tk"), 50_000);
    assert_eq!(
        proxy
            .seen()
            .iter()
            .filter(|o| *o == "TransactWriteItems")
            .count(),
        4
    );
    // Four lost races: contended (unavailable), nothing written.
    bucket(&table, &ns, "race", 2, &[(0, 0), (1, 0)]).await;
    let before = table.scan_all().await.len();
    proxy.fail_next("TransactWriteItems", "TransactionCanceledException", 4);
    let error = repo
        .reset_bucket("race", RESOURCE, &OperationOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(error, RepositoryError::Contended { .. }),
        "{error}"
    );
    assert!(error.is_unavailable());
    assert_eq!(n(&shard(&table, &ns, "race", 0).await, "b_rpm_tk"), 0);
    assert_eq!(table.scan_all().await.len(), before);
}

/// A top-up (`kind` TopUp) or a reset of `entity`'s two-shard bucket, keyed or not.
async fn operate(
    repo: &Repository,
    kind: OperationKind,
    entity: &str,
    key: bool,
) -> Result<BucketOperation, RepositoryError> {
    let mut options = OperationOptions::new();
    if key {
        options = options.idempotency_key(format!("key-{entity}"));
    }
    match kind {
        OperationKind::Reset => repo.reset_bucket(entity, RESOURCE, &options).await,
        OperationKind::TopUp => repo.top_up(entity, RESOURCE, [("rpm", 30)], &options).await,
    }
}

/// The bucket, its records and its audit events after a call, without what names the call.
async fn outcome(table: &TestTable, repo: &Repository, entity: &str) -> (Vec<Item>, usize, usize) {
    let ns = repo.namespace_id();
    let mut shards = Vec::new();
    for s in 0..2 {
        let mut item = shard(table, ns, entity, s).await;
        item.retain(|k, _| k != "PK" && k != "entity_id" && !k.starts_with("GSI"));
        shards.push(item);
    }
    let events = repo
        .audit_events(entity, 100, None)
        .await
        .unwrap()
        .events
        .len();
    (shards, records(table, ns, entity).await.len(), events)
}

/// Every way of losing the transaction's answer, with the SDK sending it again (`attempts`
/// 3) or not (1): the call reports what it did, the bucket ends exactly as its clean twin's,
/// with one record and one audit event.
async fn every_fault(kind: OperationKind, key: bool, attempts: u32) {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let client = proxy.client(attempts, Some(Duration::from_secs(1))).await;
    let repo = repo_at(table.builder().client(client)).await;
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(RESOURCE, &[rpm()])
        .await
        .unwrap();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            bucket(&table, &ns, entity, 2, &[(0, -20_000), (1, 10_000)]).await;
        }
        let expected = operate(&repo, kind, &clean, key)
            .await
            .expect("the clean call");
        let clean_outcome = outcome(&table, &repo, &clean).await;
        assert_eq!(expected.shards, 2);
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = operate(&repo, kind, &faulted, key).await;
        let label = format!("{kind:?} key={key} attempts={attempts} {fault:?}");
        assert_eq!(proxy.pending(), 0, "{label}: the fault was served");
        let got = result.unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(
            (got.shards, &got.amounts),
            (2, &expected.amounts),
            "{label}"
        );
        assert!(!got.replayed, "{label}: applied by this call");
        assert_eq!(
            outcome(&table, &repo, &faulted).await,
            clean_outcome,
            "{label}: applied once"
        );
    }
}

#[tokio::test]
async fn a_lost_answer_of_a_top_up_without_a_key_is_applied_once() {
    every_fault(OperationKind::TopUp, false, 1).await;
    every_fault(OperationKind::TopUp, false, 3).await;
}

#[tokio::test]
async fn a_lost_answer_of_a_keyed_top_up_is_applied_once() {
    every_fault(OperationKind::TopUp, true, 1).await;
    every_fault(OperationKind::TopUp, true, 3).await;
}

#[tokio::test]
async fn a_lost_answer_of_a_reset_is_applied_once() {
    every_fault(OperationKind::Reset, false, 1).await;
    every_fault(OperationKind::Reset, true, 3).await;
}

#[tokio::test]
async fn a_limiter_on_the_same_repository_forgets_its_refusals_after_a_reset() {
    let (table, repo, ns) = with_defaults().await;
    bucket(&table, &ns, "cache", 1, &[(0, 0)]).await;
    let limiter = RateLimiter::new(repo.clone());
    // 30 s of refill gave 50 tokens back: 50 pass, the 51st is refused and remembered.
    limiter
        .acquire("cache", RESOURCE, [("rpm", 50)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(
            limiter
                .acquire("cache", RESOURCE, [("rpm", 1)])
                .await
                .is_err()
        );
    }
    repo.reset_bucket("cache", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    limiter
        .acquire("cache", RESOURCE, [("rpm", 100)])
        .await
        .expect("the whole allowance is back, and no remembered refusal stands in the way")
        .commit()
        .await
        .unwrap();
    assert_eq!(n(&shard(&table, &ns, "cache", 0).await, "b_rpm_tk"), 0);
}
