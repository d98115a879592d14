//! Every bucket write shape under every way of losing its answer, on the fast path.
//!
//! Each case writes to two identical buckets: one through a fault, one cleanly. A write whose
//! answer was lost must leave its bucket exactly as the clean write left the twin (applied
//! once, never twice), and report what the caller may know: an unknown outcome for a write
//! that is never sent again, the write's own result for a 2xx answer, for a late answer and
//! for a write whose second application its condition refuses (sent again). A request held
//! without reaching DynamoDB (a half-open connection) changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_format::item::{Item, get_i64};
use dynalimit_repository::bucket::decide::{
    Plan, Stamps, TtlAction, plan_create, plan_delta, plan_refill,
};
use dynalimit_repository::bucket::{
    BucketKey, BucketStore, CreateOutcome, MetaCheck, OnThrottle, Owner,
};
use dynalimit_repository::{DisabledFlag, Repository, RepositoryError};
use dynalimit_tests::TestTable;
use dynalimit_tests::fault::{FaultProxy, Lost};
use dynalimit_tests::raw::{double_moving_nothing, put_shard};

/// One minute after the buckets' `rf`.
const NOW: i64 = 1_700_000_060_000;
/// Two hours later: the day of the buckets' refill time (`rf`) has turned.
const AFTER_MIDNIGHT: i64 = NOW + 7_200_000;
const RESOURCE: &str = "gpt-4";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Consume,
    ConsumeOnly,
    BypassConsume,
    Refill,
    Credit,
    TrimCredit,
    Propagation,
    PauseStamp,
    /// The rf-locked write that gives a daily quota its new period's grant (`SET b_gc`).
    QuotaGrant,
    /// A credit to a quota, pinned on its period and grant.
    QuotaCredit,
}

impl Shape {
    /// Whether the write's own condition refuses a second application (sent again).
    fn harmless(self) -> bool {
        matches!(self, Shape::Propagation | Shape::PauseStamp)
    }

    /// Text only the faulted request's body holds (the trim follows a guarded credit).
    fn needle(self) -> Option<&'static str> {
        (self == Shape::TrimCredit).then_some("\"vu\"")
    }
}

/// One way a request's answer goes missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Forwarded and applied, then its answer is lost this way.
    After(Lost),
    /// Held, never forwarded.
    Hold,
}

impl Fault {
    /// Plans this fault for the next request of `operation` through `proxy`.
    pub(crate) fn plan(self, proxy: &FaultProxy, operation: &str, needle: Option<&str>) {
        match self {
            Fault::After(how) => proxy.lose_after_applying(operation, needle, how, 1),
            Fault::Hold => proxy.hold(operation, needle, 1),
        }
    }
}

/// Every fault, in the order the cases run.
pub(crate) const FAULTS: [Fault; 6] = [
    Fault::After(Lost::Answer500),
    Fault::After(Lost::Hang),
    Fault::After(Lost::Reset),
    Fault::After(Lost::CutBody),
    Fault::After(Lost::Delay),
    Fault::Hold,
];

/// A repository through `proxy`: three attempts, 1 s attempt timeout.
async fn through(table: &TestTable, proxy: &FaultProxy) -> Repository {
    let repo = proxy.repository(table, "outcomes").await;
    assert!(repo.fast_path().is_some());
    repo
}

/// The partition key of shard `shard` of `entity`'s bucket on `RESOURCE`.
pub(crate) fn pk(ns: &str, entity: &str, shard: u32) -> String {
    format!("{ns}/BUCKET#{entity}#{RESOURCE}#{shard}")
}

/// A full bucket of `entity` (rpm 100/min) with `shards` shards, debited `debit` millitokens.
async fn bucket(table: &TestTable, ns: &str, entity: &str, shards: u32, debit: i64) {
    for shard in 0..shards {
        let (limits, balance) = (&[("rpm", 100, 100, 60)], &[("rpm", 100_000 - debit)]);
        put_shard(
            table,
            ns,
            entity,
            RESOURCE,
            (shard, shards),
            limits,
            balance,
        )
        .await;
    }
}

/// The state of every shard of `entity`'s bucket, without the attributes that name it.
async fn state(table: &TestTable, ns: &str, entity: &str, shards: u32) -> Vec<Item> {
    let mut out = Vec::new();
    for shard in 0..shards {
        out.push(state_of_shard(table, ns, entity, shard).await);
    }
    out
}

/// Sends `shape`'s write to `entity`'s bucket.
async fn write(shape: Shape, store: &BucketStore, entity: &str) -> Result<(), RepositoryError> {
    let key = BucketKey::new(entity, RESOURCE, 0);
    let demand: BTreeMap<String, i64> = [("rpm".to_string(), 1000)].into();
    match shape {
        Shape::Consume => store
            .speculative_consume(&key, &demand, NOW, OnThrottle::Retry)
            .await
            .map(drop),
        Shape::ConsumeOnly => store
            .consume_only(&key, &[("rpm".to_string(), 1000)], NOW)
            .await
            .map(drop),
        Shape::BypassConsume => store
            .bypass_consume(&key, &demand, NOW + 60_000, NOW)
            .await
            .map(drop),
        Shape::Refill => {
            let img = store.read(&key).await?.expect("bucket");
            let limits = [Limit::per_minute("rpm", 100)];
            let Plan::Write(plan) = plan_refill(
                &img,
                &limits,
                &demand,
                NOW,
                TtlAction::Keep,
                &Stamps::default(),
            ) else {
                panic!("the refill is admitted");
            };
            store.refill(&key, &plan, None).await.map(drop)
        }
        Shape::Credit | Shape::TrimCredit => {
            let img = store.read(&key).await?.expect("bucket");
            let net = [("rpm".to_string(), -1000)].into();
            let plan = plan_delta(
                &net,
                &img.limits,
                &img.schedules,
                &BTreeMap::new(),
                img.shards(),
                0,
            );
            store.apply_delta(&key, &plan).await.map(drop)
        }
        Shape::Propagation => {
            let report = store.propagate_shard_count(&key, 2, 4).await;
            match report.failed.into_iter().next() {
                Some((_, e)) => Err(e),
                None => Ok(()),
            }
        }
        Shape::PauseStamp => store
            .stamp_pause(entity, RESOURCE, NOW + 30_000, NOW)
            .await
            .map(drop),
        Shape::QuotaGrant => {
            let img = store.read(&key).await?.expect("bucket");
            let limits = [daily_quota()];
            let Plan::Write(plan) = plan_refill(
                &img,
                &limits,
                &demand,
                AFTER_MIDNIGHT,
                TtlAction::Keep,
                &Stamps::default(),
            ) else {
                panic!("the new day's grant is admitted");
            };
            assert!(plan.writes.iter().any(|w| w.grant.is_some()));
            store.refill(&key, &plan, None).await.map(drop)
        }
        Shape::QuotaCredit => {
            let img = store.read(&key).await?.expect("bucket");
            let net = [("rpm".to_string(), -1000)].into();
            let pin = img.quota_pin("rpm").expect("a quota");
            let quotas = [("rpm".to_string(), pin)].into();
            let plan = plan_delta(&net, &img.limits, &img.schedules, &quotas, 1, NOW);
            store.apply_delta(&key, &plan).await.map(drop)
        }
    }
}

/// After `fault` was served on a write to `entity`'s bucket: its shards are exactly
/// `expected`, its clean twin's (the write applied once).
async fn applied_once(
    (table, ns): (&TestTable, &str),
    proxy: &FaultProxy,
    fault: Fault,
    entity: &str,
    expected: &[Item],
) {
    assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
    let shards = u32::try_from(expected.len()).expect("few shards");
    assert_eq!(
        state(table, ns, entity, shards).await,
        expected,
        "{fault:?}: applied once"
    );
}

/// The buckets' `rpm` read as a daily quota of 100 (UTC).
fn daily_quota() -> Limit {
    Limit::quota_per_day("rpm", 100, dynalimit_core::schedule::Zone::utc())
}

/// Makes `entity`'s bucket a daily quota's, as zae-limiter stores one: no refill, the reset
/// schedule, the grant count.
async fn make_quota(table: &TestTable, ns: &str, entity: &str) {
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk(ns, entity, 0)))
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("SET b_rpm_ra = :z, rsched = :r, b_rpm_gc = :g")
        .expression_attribute_values(":z", AttributeValue::N("0".into()))
        .expression_attribute_values(":r", AttributeValue::S("1m0h0".into()))
        .expression_attribute_values(":g", AttributeValue::N("1".into()))
        .send()
        .await
        .expect("stamp the quota");
}

async fn every_fault(shape: Shape) {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let store = repo.buckets();
    let shards = if shape == Shape::Propagation { 2 } else { 1 };
    let debit = if matches!(
        shape,
        Shape::Credit | Shape::QuotaCredit | Shape::QuotaGrant
    ) {
        5000
    } else {
        0
    };
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            bucket(&table, &ns, entity, shards, debit).await;
            if shape == Shape::BypassConsume {
                stamp_bypass(&table, &ns, entity).await;
            }
            if matches!(shape, Shape::QuotaGrant | Shape::QuotaCredit) {
                make_quota(&table, &ns, entity).await;
            }
        }
        let before = state(&table, &ns, &faulted, shards).await;
        write(shape, &store, &clean).await.expect("the clean write");
        let expected = state(&table, &ns, &clean, shards).await;
        assert_ne!(before, expected, "{shape:?} changes the bucket");

        fault.plan(&proxy, "UpdateItem", shape.needle());
        let result = write(shape, &store, &faulted).await;
        assert_eq!(
            proxy.pending(),
            0,
            "{shape:?} {fault:?}: the fault was served"
        );
        let after = state(&table, &ns, &faulted, shards).await;
        let unknown = matches!(result, Err(RepositoryError::OutcomeUnknown { .. }));
        let answered = matches!(fault, Fault::After(Lost::CutBody | Lost::Delay));
        match (shape.harmless(), fault) {
            // Sent again after the held attempt timed out: applied once.
            (true, _) => {
                assert!(result.is_ok(), "{shape:?} {fault:?}: {result:?}");
                assert_eq!(after, expected, "{shape:?} {fault:?}: applied once");
            }
            (false, Fault::Hold) => {
                assert!(unknown, "{shape:?} {fault:?}: {result:?}");
                assert_eq!(after, before, "{shape:?} {fault:?}: never arrived");
            }
            (false, _) if answered => {
                assert!(result.is_ok(), "{shape:?} {fault:?}: {result:?}");
                assert_eq!(after, expected, "{shape:?} {fault:?}: applied once");
            }
            (false, _) => {
                assert!(unknown, "{shape:?} {fault:?}: {result:?}");
                assert_eq!(after, expected, "{shape:?} {fault:?}: applied once");
            }
        }
    }
}

#[tokio::test]
async fn consume() {
    every_fault(Shape::Consume).await;
}

#[tokio::test]
async fn consume_only_retry() {
    every_fault(Shape::ConsumeOnly).await;
}

#[tokio::test]
async fn rf_locked_refill() {
    every_fault(Shape::Refill).await;
}

/// A quota's new grant is the rf-locked write: never sent again (its lock would refuse it),
/// applied once or not at all.
#[tokio::test]
async fn quota_grant() {
    every_fault(Shape::QuotaGrant).await;
}

/// A refund to a quota is never sent again: credited once or not at all, and only in its
/// period.
#[tokio::test]
async fn quota_credit() {
    every_fault(Shape::QuotaCredit).await;
}

#[tokio::test]
async fn guarded_credit() {
    every_fault(Shape::Credit).await;
}

#[tokio::test]
async fn trim_credit() {
    every_fault(Shape::TrimCredit).await;
}

#[tokio::test]
async fn propagation() {
    every_fault(Shape::Propagation).await;
}

#[tokio::test]
async fn bypass_consume() {
    every_fault(Shape::BypassConsume).await;
}

/// A `bypass` stamp live until one minute after [`NOW`], as zae-limiter's fan-out writes it.
async fn stamp_bypass(table: &TestTable, ns: &str, entity: &str) {
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk(ns, entity, 0)))
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("SET bypass = :b")
        .expression_attribute_values(":b", AttributeValue::N((NOW + 60_000).to_string()))
        .send()
        .await
        .expect("stamp the bypass");
}

#[tokio::test]
async fn pause_stamp() {
    every_fault(Shape::PauseStamp).await;
}

/// Creates shard 1 of a bucket whose shard 0 says 2 shards (another writer doubled it and
/// moved nothing): funded by a move from shard 0 ([`plan_funding`]), in the create's
/// transaction.
///
/// [`plan_funding`]: dynalimit_repository::bucket::decide::plan_funding
async fn create_with_moves(
    store: &BucketStore,
    entity: &str,
) -> Result<CreateOutcome, RepositoryError> {
    let limits = [Limit::per_minute("rpm", 100)];
    let key = BucketKey::new(entity, RESOURCE, 1);
    let siblings = store.sibling_images(&key, 2).await?;
    let (funded, moves) =
        dynalimit_repository::bucket::decide::plan_funding(&limits, &siblings, 1, 2, NOW);
    assert_eq!(moves.len(), 1, "shard 0 gives");
    let demand: BTreeMap<String, i64> = [("rpm".to_string(), 1000)].into();
    let soft = Stamps {
        funded,
        ..Stamps::default()
    };
    let Plan::Write(plan) = plan_create(&limits, &demand, 2, 1, NOW, None, &soft) else {
        panic!("a funded new shard is written");
    };
    assert!(plan.admitted);
    store
        .create(
            &key,
            &plan,
            &Owner::default(),
            &MetaCheck::Absent,
            &moves,
            &[],
        )
        .await
}

/// The create of a new shard funded by a move from shard 0 under every way of losing its
/// answer: the create and the donor's debit are one transaction, sent again with the same
/// `ClientRequestToken`, which DynamoDB answers without applying it a second time, so the
/// shard exists once and shard 0 is debited once, exactly as their clean twins, and the
/// create reports `Created`.
#[tokio::test]
async fn create_with_a_move() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let store = repo.buckets();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            // Shard 0 of 2 spent 60 of its 100: its share of 50 is not trimmed yet.
            put_shard(
                &table,
                &ns,
                entity,
                RESOURCE,
                (0, 2),
                &[("rpm", 100, 100, 60)],
                &[("rpm", 40_000)],
            )
            .await;
        }
        assert_eq!(
            create_with_moves(&store, &clean)
                .await
                .expect("the clean create"),
            CreateOutcome::Created
        );
        let expected = state(&table, &ns, &clean, 2).await;
        assert_eq!(
            get_i64(&expected[0], "b_rpm_tk"),
            Some(20_000),
            "40 less 20"
        );
        assert_eq!(get_i64(&expected[1], "b_rpm_tk"), Some(19_000), "20 less 1");
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = create_with_moves(&store, &faulted).await;
        applied_once((&table, &ns), &proxy, fault, &faulted, &expected).await;
        assert_eq!(result.ok(), Some(CreateOutcome::Created), "{fault:?}");
    }
}

/// The split of a bucket (its doubling, one transaction) under every way of losing its
/// answer: it is sent again with the same `ClientRequestToken`, which DynamoDB answers
/// without applying it twice, so each shard ends as its clean twin (every donor debited
/// once, every new shard created once with what it was given) and the split reports the
/// new count.
#[tokio::test]
async fn split() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let store = repo.buckets();
    let double = |entity: String| {
        let store = store.clone();
        async move {
            let key = BucketKey::new(entity.as_str(), RESOURCE, 0);
            store.double_shards(&key, 2, 4, NOW).await
        }
    };
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            // Two shards of 50 spent 10 each, a minute before: refilled to the share, then
            // halved.
            bucket(&table, &ns, entity, 2, 60_000).await;
        }
        let doubled = double(clean.clone()).await.expect("the clean split");
        assert_eq!(doubled.count, 4);
        let expected = state(&table, &ns, &clean, 4).await;
        for item in &expected {
            assert_eq!(get_i64(item, "shard_count"), Some(4));
            assert_eq!(get_i64(item, "b_rpm_tk"), Some(25_000));
        }
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = double(faulted.clone()).await;
        applied_once((&table, &ns), &proxy, fault, &faulted, &expected).await;
        assert_eq!(result.map(|d| d.count).ok(), Some(4), "{fault:?}");
    }
}

/// Shard `shard` of `entity`'s bucket as stored, read consistently.
async fn shard_item(table: &TestTable, ns: &str, entity: &str, shard: u32) -> Item {
    read_shard(table, ns, entity, shard)
        .await
        .expect("the shard exists")
}

/// Shard `shard` of `entity`'s bucket on `RESOURCE` as stored, read consistently, if it
/// exists.
pub(crate) async fn read_shard(
    table: &TestTable,
    ns: &str,
    entity: &str,
    shard: u32,
) -> Option<Item> {
    table
        .client()
        .get_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk(ns, entity, shard)))
        .key("SK", AttributeValue::S("#STATE".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("read")
        .item
}

/// Shard `shard` of `entity`'s bucket, without the attributes that name it.
async fn state_of_shard(table: &TestTable, ns: &str, entity: &str, shard: u32) -> Item {
    let mut item = shard_item(table, ns, entity, shard).await;
    item.retain(|k, _| k != "PK" && k != "entity_id" && !k.starts_with("GSI"));
    item
}

/// The aggregator's pre-created clone of a new shard (of a bucket another writer doubled to
/// 4 shards, moving nothing) under every way of losing its answer: the clone and its donor's
/// debit are one transaction, sent again with the same `ClientRequestToken`, so the shard
/// exists once holding what shard 0 gave it and shard 0 is debited once, exactly as the
/// clean twins; the call reports it created.
#[tokio::test]
async fn aggregator_clone_of_a_new_shard() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let store = repo.buckets();
    let clone = |entity: String| {
        let store = store.clone();
        async move {
            let key = BucketKey::new(entity.as_str(), RESOURCE, 2);
            store.create_shard(&key, 4, NOW).await
        }
    };
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            for shard in 0..2 {
                put_shard(
                    &table,
                    &ns,
                    entity,
                    RESOURCE,
                    (shard, 4),
                    &[("rpm", 100, 100, 60)],
                    &[("rpm", 40_000)],
                )
                .await;
            }
        }
        assert!(clone(clean.clone()).await.expect("the clean clone"));
        let expected = state(&table, &ns, &clean, 3).await;
        assert_eq!(
            get_i64(&expected[0], "b_rpm_tk"),
            Some(20_000),
            "half given"
        );
        assert_eq!(get_i64(&expected[2], "b_rpm_tk"), Some(20_000));
        assert_eq!(get_i64(&expected[2], "b_rpm_tc"), Some(0));
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = clone(faulted.clone()).await;
        applied_once((&table, &ns), &proxy, fault, &faulted, &expected).await;
        assert_eq!(result.ok(), Some(true), "{fault:?}");
    }
}

/// The access stamps of a disable and of the clear that follows, under every way of losing
/// their answers: a stamp sets absolute values and is sent again, so the bucket ends as its
/// clean twin and the call counts it stamped once.
#[tokio::test]
async fn access_stamp() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        bucket(&table, &ns, &faulted, 1, 0).await;
        bucket(&table, &ns, &clean, 1, 0).await;
        for flag in [Some(DisabledFlag::Disabled), None] {
            let stamped = repo
                .set_entity_disabled(&clean, Some(RESOURCE), flag)
                .await
                .expect("the clean change");
            assert_eq!(stamped, 1);
            match fault {
                Fault::After(how) => {
                    proxy.lose_after_applying("UpdateItem", Some("BUCKET#"), how, 1)
                }
                Fault::Hold => proxy.hold("UpdateItem", Some("BUCKET#"), 1),
            }
            let result = repo
                .set_entity_disabled(&faulted, Some(RESOURCE), flag)
                .await;
            assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
            assert_eq!(result.ok(), Some(1), "{fault:?} {flag:?}");
            let (got, want) = (
                state_of_shard(&table, &ns, &faulted, 0).await,
                state_of_shard(&table, &ns, &clean, 0).await,
            );
            assert_eq!(got, want, "{fault:?} {flag:?}");
            assert_eq!(got.contains_key("disabled"), flag.is_some());
        }
    }
}

/// The flag writes of a disable under every way of losing their answers: a new entity
/// level is created in a transaction the SDK sends again with the same client request
/// token, and a resource level is an upsert of absolute values. Each level ends as its clean
/// twin, and the registry counts the faulted entity's level once.
#[tokio::test]
async fn access_flag_writes() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let level = |pk: String, sk: &'static str| {
        let table = &table;
        async move {
            let mut item = table
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
                .expect("the level exists");
            item.retain(|k, _| !k.starts_with("GSI") && k != "PK" && k != "entity_id");
            item
        }
    };
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        repo.set_entity_disabled(&clean, Some(RESOURCE), Some(DisabledFlag::Disabled))
            .await
            .expect("the clean write");
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = repo
            .set_entity_disabled(&faulted, Some(RESOURCE), Some(DisabledFlag::Disabled))
            .await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        assert_eq!(result.ok(), Some(0), "{fault:?}: no bucket to stamp");
        let sk = "#CONFIG#gpt-4";
        assert_eq!(
            level(format!("{ns}/ENTITY#{faulted}"), sk).await,
            level(format!("{ns}/ENTITY#{clean}"), sk).await,
            "{fault:?}"
        );
        let registry = table
            .client()
            .get_item()
            .table_name(table.name())
            .key("PK", AttributeValue::S(format!("{ns}/SYSTEM#")))
            .key("SK", AttributeValue::S("#ENTITY_CONFIG_RESOURCES".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("read")
            .item
            .expect("the registry");
        let counted = get_i64(&registry, RESOURCE);
        assert_eq!(counted, Some(2 * (i as i64 + 1)), "{fault:?}: counted once");

        let resource = format!("r{i}");
        fault.plan(&proxy, "UpdateItem", Some("#CONFIG"));
        let result = repo
            .set_resource_disabled(&resource, Some(DisabledFlag::Disabled))
            .await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        assert_eq!(result.ok(), Some(0), "{fault:?}");
        let stored = level(format!("{ns}/RESOURCE#{resource}"), "#CONFIG").await;
        assert_eq!(stored.get("disabled"), Some(&AttributeValue::Bool(true)));
    }
}

/// Entities `org` and `entity` (under `org`, not cascading) through `repo`.
async fn child_of_org(repo: &Repository, entity: &str) {
    use dynalimit_repository::NewEntity;
    if repo.get_entity("org").await.unwrap().is_none() {
        repo.create_entity(NewEntity::new("org")).await.unwrap();
    }
    repo.create_entity(NewEntity::new(entity).parent("org"))
        .await
        .unwrap();
}

/// The owner stamp of a bucket: `cascade`, `parent_id`.
fn owner_of(item: &Item) -> (Option<AttributeValue>, Option<AttributeValue>) {
    (item.get("cascade").cloned(), item.get("parent_id").cloned())
}

/// The owner stamps of a cascade policy's fan-out, and of a parent move's META write and
/// fan-out, under every way of losing their answers: a stamp sets absolute values under a
/// generation pin and is sent again, so the bucket ends stamped as its clean twin; the META
/// write is sent again by the client (its generation raised once or twice, which only orders
/// stamps) and the fan-out stamps the generation it then reads.
#[tokio::test]
async fn owner_stamps_and_parent_moves() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            child_of_org(&repo, entity).await;
            bucket(&table, &ns, entity, 1, 0).await;
        }
        let stamped = repo
            .set_cascade_policy(&clean, Some(RESOURCE), Some(true))
            .await
            .unwrap();
        assert_eq!(stamped, 1);
        fault.plan(&proxy, "UpdateItem", Some("BUCKET#"));
        let result = repo
            .set_cascade_policy(&faulted, Some(RESOURCE), Some(true))
            .await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        assert!(matches!(result, Ok(0 | 1)), "{fault:?}: {result:?}");
        let (got, want) = (
            state_of_shard(&table, &ns, &faulted, 0).await,
            state_of_shard(&table, &ns, &clean, 0).await,
        );
        assert_eq!(owner_of(&got), owner_of(&want), "{fault:?}");
        assert_eq!(
            got.get("cascade"),
            Some(&AttributeValue::Bool(true)),
            "{fault:?}"
        );

        // A move of the faulted entity whose META write loses its answer.
        let before = repo.get_entity(&faulted).await.unwrap().unwrap();
        fault.plan(&proxy, "UpdateItem", Some("#META"));
        let result = repo.set_parent(&faulted, None).await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        let after = repo.get_entity(&faulted).await.unwrap().unwrap();
        assert_eq!(after.parent_id, None, "{fault:?}: moved ({result:?})");
        let raised = after.parent_generation - before.parent_generation;
        assert!((1..=2).contains(&raised), "{fault:?}: raised {raised}");
        let item = state_of_shard(&table, &ns, &faulted, 0).await;
        if result.is_ok() {
            assert_eq!(item.get("parent_id"), None, "{fault:?}");
            assert_eq!(
                get_i64(&item, "pgen"),
                Some(after.parent_generation),
                "{fault:?}: the generation read after the write"
            );
        }
    }
}

/// The soft stamps of a resource level's fan-out under every way of losing their answers:
/// absolute values, sent again; the bucket ends stamped, as its clean twin.
#[tokio::test]
async fn soft_stamps() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let entity = format!("f{i}");
        bucket(&table, &ns, &entity, 1, 0).await;
        repo.set_resource_defaults(RESOURCE, &[Limit::per_minute("rpm", 100)])
            .await
            .unwrap();
        assert!(
            !state_of_shard(&table, &ns, &entity, 0)
                .await
                .contains_key("b_rpm_soft")
        );
        fault.plan(&proxy, "UpdateItem", Some("BUCKET#"));
        let result = repo
            .set_resource_defaults(RESOURCE, &[Limit::per_minute("rpm", 100).soft()])
            .await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        assert!(result.is_ok(), "{fault:?}: {result:?}");
        // Every bucket of the resource (this one and the earlier cases') is stamped.
        for j in 0..=i {
            let item = state_of_shard(&table, &ns, &format!("f{j}"), 0).await;
            assert!(item.contains_key("b_rpm_soft"), "{fault:?}: f{j}");
        }
    }
}

/// The fan-out of a session window opened on shard 1 to shard 0, under every way of losing
/// its answer: absolute values, sent again, and the second application refused by the
/// window floor; shard 0 ends with the new window, `wtc` taken once, as its clean twin.
#[tokio::test]
async fn window_fan_out() {
    use dynalimit::RateLimiter;
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    repo.set_resource_defaults(RESOURCE, &[Limit::session_quota("s", 10, 1)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            // Shard 0 opens a window of 1 s; the bucket is doubled; the window ends.
            limiter
                .acquire(entity.as_str(), RESOURCE, [("s", 1)])
                .await
                .unwrap()
                .commit()
                .await
                .unwrap();
            // Another writer doubles it and moves nothing: shard 1 is missing.
            double_moving_nothing(&table, &ns, (entity.as_str(), RESOURCE), 1, 2).await;
        }
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        // Shard 1 is created now: its window opens, and shard 0 is told.
        let store = repo.buckets();
        let open = |entity: String| {
            let store = store.clone();
            async move {
                let key = BucketKey::new(entity.as_str(), RESOURCE, 1);
                let limits = [Limit::session_quota("s", 10, 1)];
                let now = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock);
                let Plan::Write(plan) = plan_create(
                    &limits,
                    &BTreeMap::from([("s".to_owned(), 1000)]),
                    2,
                    1,
                    now,
                    None,
                    &Stamps::default(),
                ) else {
                    panic!("a fresh window admits");
                };
                let owner = Owner {
                    cascade: false,
                    parent_id: None,
                    pgen: None,
                    pinc: None,
                };
                store
                    .create(&key, &plan, &owner, &MetaCheck::Absent, &[], &[])
                    .await
                    .unwrap();
                store
                    .fan_out_windows(&key, 2, &plan.opened_windows(1))
                    .await
            }
        };
        assert_eq!(open(clean.clone()).await, 1);
        fault.plan(&proxy, "UpdateItem", Some("if_not_exists"));
        let landed = open(faulted.clone()).await;
        assert_eq!(proxy.pending(), 0, "{fault:?}: the fault was served");
        assert!(landed <= 1, "{fault:?}");
        let (got, want) = (
            state_of_shard(&table, &ns, &faulted, 0).await,
            state_of_shard(&table, &ns, &clean, 0).await,
        );
        let window = |item: &Item| {
            (
                get_i64(item, "b_s_wtc"),
                get_i64(item, "vu"),
                get_i64(item, "b_s_ws").is_some_and(|ws| ws > get_i64(item, "b_s_wa").unwrap()),
            )
        };
        assert_eq!(window(&got), window(&want), "{fault:?}");
        assert_eq!(window(&got), (Some(1000), Some(0), true), "{fault:?}");
    }
}

/// The create of a quota's new shard funded by a move from shard 0 (reference §12.3), under
/// every way of losing its answer: the create and the donor's debit are one transaction,
/// sent again with the same `ClientRequestToken`, so the new shard exists once with the
/// moved grant and the donor is debited once, exactly as the clean twins.
#[tokio::test]
async fn create_with_a_grant_move() {
    use dynalimit_repository::bucket::decide::plan_funding;
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let repo = through(&table, &proxy).await;
    let ns = repo.namespace_id().to_owned();
    let store = repo.buckets();
    let limits = [daily_quota()];
    let create = |entity: String| {
        let store = store.clone();
        let limits = limits.clone();
        async move {
            let key = BucketKey::new(entity.as_str(), RESOURCE, 1);
            let siblings = store.sibling_images(&key, 2).await.unwrap();
            let (funded, moves) = plan_funding(&limits, &siblings, 1, 2, NOW);
            assert_eq!(moves.len(), 1, "shard 0's grant covers slot 1");
            let soft = Stamps {
                funded,
                ..Stamps::default()
            };
            let demand: BTreeMap<String, i64> = [("rpm".to_string(), 1000)].into();
            let Plan::Write(plan) = plan_create(&limits, &demand, 2, 1, NOW, None, &soft) else {
                panic!("the moved grant admits");
            };
            store
                .create(
                    &key,
                    &plan,
                    &Owner::default(),
                    &MetaCheck::Absent,
                    &moves,
                    &[],
                )
                .await
        }
    };
    for (i, fault) in FAULTS.into_iter().enumerate() {
        let (faulted, clean) = (format!("f{i}"), format!("c{i}"));
        for entity in [&faulted, &clean] {
            bucket(&table, &ns, entity, 2, 30_000).await;
            make_quota(&table, &ns, entity).await;
            table
                .client()
                .delete_item()
                .table_name(table.name())
                .key("PK", AttributeValue::S(pk(&ns, entity, 1)))
                .key("SK", AttributeValue::S("#STATE".into()))
                .send()
                .await
                .unwrap();
        }
        assert_eq!(create(clean.clone()).await.unwrap(), CreateOutcome::Created);
        fault.plan(&proxy, "TransactWriteItems", None);
        let result = create(faulted.clone()).await;
        let expected = state(&table, &ns, &clean, 2).await;
        applied_once((&table, &ns), &proxy, fault, &faulted, &expected).await;
        assert_eq!(result.ok(), Some(CreateOutcome::Created), "{fault:?}");
        let donor = state_of_shard(&table, &ns, &faulted, 0).await;
        assert_eq!(
            get_i64(&donor, "b_rpm_tk"),
            Some(20_000),
            "70 less the 50 moved"
        );
    }
}
