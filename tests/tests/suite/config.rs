//! Four-level limit configuration, its cache, registries and bucket stamping.

use std::time::Duration;

use dynalimit_core::Limit;
use dynalimit_format::FormatError;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::{ConfigLevel, OnUnavailable, RepositoryError};

fn rpm(n: i64) -> Vec<Limit> {
    vec![Limit::per_minute("rpm", n)]
}

#[tokio::test]
async fn resolution_follows_entity_entity_default_resource_system() {
    let table = dynalimit_tests::table().await;
    let repo = table
        .builder()
        .namespace("order")
        .config_cache_ttl(Duration::ZERO)
        .open()
        .await
        .unwrap();
    let resolve = || repo.resolve_limits("key-1", "gpt-4");
    let none = resolve().await.unwrap();
    assert!(none.limits.is_empty());
    assert_eq!(none.source, None);

    repo.set_system_defaults(&rpm(1), Some(OnUnavailable::Allow))
        .await
        .unwrap();
    let r = resolve().await.unwrap();
    assert_eq!((r.limits, r.source), (rpm(1), Some(ConfigLevel::System)));
    assert_eq!(r.on_unavailable, Some(OnUnavailable::Allow));

    repo.set_resource_defaults("gpt-4", &rpm(2)).await.unwrap();
    let r = resolve().await.unwrap();
    assert_eq!((r.limits, r.source), (rpm(2), Some(ConfigLevel::Resource)));
    // Another resource still falls through to the system level.
    let other = repo.resolve_limits("key-1", "claude").await.unwrap();
    assert_eq!(other.source, Some(ConfigLevel::System));

    repo.set_limits("key-1", "_default_", &rpm(3))
        .await
        .unwrap();
    let r = resolve().await.unwrap();
    assert_eq!(
        (r.limits, r.source),
        (rpm(3), Some(ConfigLevel::EntityDefault))
    );

    let two = vec![
        Limit::per_minute("rpm", 4),
        Limit::per_minute("tpm", 10_000).with_burst(20_000),
    ];
    repo.set_limits("key-1", "gpt-4", &two).await.unwrap();
    let r = resolve().await.unwrap();
    assert_eq!(r.source, Some(ConfigLevel::Entity));
    assert_eq!(r.limits, two, "override, not merge");
    assert_eq!(r.on_unavailable, Some(OnUnavailable::Allow));

    // Deleting walks back down the levels.
    assert!(repo.delete_limits("key-1", "gpt-4").await.unwrap());
    assert!(!repo.delete_limits("key-1", "gpt-4").await.unwrap());
    assert_eq!(
        resolve().await.unwrap().source,
        Some(ConfigLevel::EntityDefault)
    );
    assert!(repo.delete_limits("key-1", "_default_").await.unwrap());
    assert_eq!(resolve().await.unwrap().source, Some(ConfigLevel::Resource));
    assert!(repo.delete_resource_defaults("gpt-4").await.unwrap());
    assert_eq!(resolve().await.unwrap().source, Some(ConfigLevel::System));
    // A system write without on_unavailable keeps the stored value.
    repo.set_system_defaults(&rpm(5), None).await.unwrap();
    assert_eq!(
        repo.resolve_on_unavailable().await.unwrap(),
        Some(OnUnavailable::Allow)
    );
    assert!(repo.delete_system_defaults().await.unwrap());
    assert_eq!(resolve().await.unwrap().source, None);
    assert_eq!(repo.resolve_on_unavailable().await.unwrap(), None);
}

#[tokio::test]
async fn a_second_resolve_within_the_ttl_sends_nothing_and_writes_evict() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo = table.counted_repository(&counter, "cache").await;
    repo.set_resource_defaults("gpt-4", &rpm(10)).await.unwrap();
    repo.invalidate_config_cache().await;
    counter.reset();
    let before = repo.cache_stats().await;

    let first = repo.resolve_limits("k", "gpt-4").await.unwrap();
    assert_eq!(first.limits, rpm(10));
    assert_eq!(
        counter.count("BatchGetItem"),
        1,
        "all levels in one BatchGetItem"
    );
    assert_eq!(counter.total(), 1);
    let stats = repo.cache_stats().await;
    assert_eq!(
        (
            stats.hits - before.hits,
            stats.misses - before.misses,
            stats.size
        ),
        (0, 4, 4),
        "four slots, misses cached too"
    );
    assert_eq!(stats.ttl, Duration::from_secs(60));

    counter.reset();
    for _ in 0..5 {
        assert_eq!(repo.resolve_limits("k", "gpt-4").await.unwrap(), first);
    }
    assert_eq!(counter.total(), 0, "cached, misses included");
    assert_eq!(repo.cache_stats().await.hits - stats.hits, 20);

    // A write through the repository evicts its slot: the next resolve reads that level only.
    repo.set_limits("k", "gpt-4", &rpm(11)).await.unwrap();
    counter.reset();
    let after = repo.resolve_limits("k", "gpt-4").await.unwrap();
    assert_eq!(after.limits, rpm(11));
    assert_eq!(after.source, Some(ConfigLevel::Entity));
    assert_eq!(counter.total(), 1);

    // A change made elsewhere is only seen after invalidation (or the TTL).
    let elsewhere = table.repository("cache").await;
    elsewhere.set_limits("k", "gpt-4", &rpm(12)).await.unwrap();
    assert_eq!(
        repo.resolve_limits("k", "gpt-4").await.unwrap().limits,
        rpm(11)
    );
    repo.invalidate_config_cache().await;
    assert_eq!(
        repo.resolve_limits("k", "gpt-4").await.unwrap().limits,
        rpm(12)
    );
}

#[tokio::test]
async fn a_zero_ttl_disables_the_cache_and_a_short_ttl_expires() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let uncached = table
        .counted_builder(&counter)
        .await
        .namespace("nocache")
        .config_cache_ttl(Duration::ZERO)
        .open()
        .await
        .unwrap();
    counter.reset();
    for _ in 0..3 {
        uncached.resolve_limits("k", "r").await.unwrap();
    }
    assert_eq!(counter.count("BatchGetItem"), 3);
    assert_eq!(uncached.cache_stats().await.size, 0);

    let short = table
        .counted_builder(&counter)
        .await
        .namespace("short")
        .config_cache_ttl(Duration::from_millis(300))
        .open()
        .await
        .unwrap();
    counter.reset();
    short.resolve_limits("k", "r").await.unwrap();
    short.resolve_limits("k", "r").await.unwrap();
    assert_eq!(counter.count("BatchGetItem"), 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    short.resolve_limits("k", "r").await.unwrap();
    assert_eq!(
        counter.count("BatchGetItem"),
        2,
        "expired slots are read again"
    );
}

#[tokio::test]
async fn set_is_a_full_replace_that_keeps_stored_flags() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("replace").await;
    repo.set_limits(
        "k",
        "gpt-4",
        &[Limit::per_minute("rpm", 1), Limit::per_minute("tpm", 2)],
    )
    .await
    .unwrap();
    // Flags written by another client (zae-limiter's disable/cascade setters).
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key(
            "PK",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("{}/ENTITY#k", repo.namespace_id())),
        )
        .key(
            "SK",
            aws_sdk_dynamodb::types::AttributeValue::S("#CONFIG#gpt-4".into()),
        )
        .update_expression("SET disabled = :f, #c = :t")
        .expression_attribute_names("#c", "cascade")
        .expression_attribute_values(":f", aws_sdk_dynamodb::types::AttributeValue::Bool(false))
        .expression_attribute_values(":t", aws_sdk_dynamodb::types::AttributeValue::Bool(true))
        .send()
        .await
        .unwrap();
    repo.set_limits("k", "gpt-4", &[Limit::per_hour("rph", 3)])
        .await
        .unwrap();
    let stored = repo.get_limits("k", "gpt-4").await.unwrap().unwrap();
    assert_eq!(stored.limits, [Limit::per_hour("rph", 3)]);
    assert_eq!(stored.cascade, Some(true));
    assert_eq!(
        stored.disabled,
        Some(dynalimit_repository::DisabledFlag::Enabled)
    );
}

#[tokio::test]
async fn registries_and_listing_with_a_cursor() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("lists").await;
    for r in ["gpt-4", "claude", "openai/o1"] {
        repo.set_resource_defaults(r, &rpm(1)).await.unwrap();
    }
    repo.delete_resource_defaults("claude").await.unwrap();
    assert_eq!(
        repo.list_resources_with_defaults().await.unwrap(),
        ["gpt-4", "openai/o1"]
    );
    for i in 0..7 {
        repo.set_limits(&format!("key-{i}"), "gpt-4", &rpm(i + 1))
            .await
            .unwrap();
    }
    // Setting the same config twice does not count it twice.
    repo.set_limits("key-0", "gpt-4", &rpm(9)).await.unwrap();
    repo.set_limits("key-0", "llama3:8b", &rpm(9))
        .await
        .unwrap();
    assert_eq!(
        repo.list_resources_with_entity_configs().await.unwrap(),
        ["gpt-4", "llama3:8b"]
    );
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (ids, next) = repo
            .list_entities_with_custom_limits("gpt-4", 3, cursor.as_deref())
            .await
            .unwrap();
        assert!(ids.len() <= 3);
        seen.extend(ids);
        pages += 1;
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, (0..7).map(|i| format!("key-{i}")).collect::<Vec<_>>());
    assert!(pages >= 3);
    // Deleting the last config of a resource drops it from the registry.
    repo.delete_limits("key-0", "llama3:8b").await.unwrap();
    assert_eq!(
        repo.list_resources_with_entity_configs().await.unwrap(),
        ["gpt-4"]
    );
}

#[tokio::test]
async fn a_session_quota_stored_under_w_is_read_and_a_corrupt_one_refused() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("newer").await;
    let ns = repo.namespace_id().to_string();
    // A session-window quota at the resource level, as zae-limiter 0.15+ writes it.
    let n = |v: i64| aws_sdk_dynamodb::types::AttributeValue::N(v.to_string());
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
    table
        .client()
        .put_item()
        .table_name(table.name())
        .item("PK", s(&format!("{ns}/RESOURCE#gpt-4")))
        .item("SK", s("#CONFIG"))
        .item("resource", s("gpt-4"))
        .item("w_tpd_cp", n(1000))
        .item("w_tpd_ra", n(0))
        .item("w_tpd_rp", n(1))
        .item("w_tpd_rsa", n(86_400))
        .send()
        .await
        .unwrap();
    assert_eq!(
        repo.resolve_limits("k", "gpt-4").await.unwrap().limits,
        [Limit::session_quota("tpd", 1000, 86_400)]
    );
    // Without its length the limit cannot be read: the level is corrupt (no outage: no
    // `on_unavailable` mode admits past it).
    table
        .client()
        .put_item()
        .table_name(table.name())
        .item("PK", s(&format!("{ns}/RESOURCE#gpt-4")))
        .item("SK", s("#CONFIG"))
        .item("resource", s("gpt-4"))
        .item("w_tpd_cp", n(1000))
        .item("w_tpd_ra", n(0))
        .item("w_tpd_rp", n(1))
        .send()
        .await
        .unwrap();
    // (A repository of its own: the first one has the readable level cached.)
    let fresh = table.repository("newer").await;
    let err = fresh.resolve_limits("k", "gpt-4").await.unwrap_err();
    assert!(err.to_string().contains("has no w_tpd_rsa"), "{err}");
    assert!(
        matches!(err, RepositoryError::Format(FormatError::Corrupt { .. })),
        "{err:?}"
    );
    assert!(!err.is_unavailable());
    // An entity-level config in front of it answers first and is fine.
    repo.set_limits("k", "gpt-4", &rpm(5)).await.unwrap();
    assert_eq!(
        repo.resolve_limits("k", "gpt-4").await.unwrap().limits,
        rpm(5)
    );
}

#[tokio::test]
async fn entity_level_changes_are_stamped_on_existing_buckets() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("stamp").await;
    let ns = repo.namespace_id().to_string();
    for shard in 0..2 {
        dynalimit_tests::raw::put_bucket(
            &table,
            &ns,
            "k",
            "gpt-4",
            shard,
            &[("rpm", 100, 100, 60)],
        )
        .await;
    }
    dynalimit_tests::raw::put_bucket(&table, &ns, "k", "claude", 0, &[("rpm", 100, 100, 60)]).await;
    repo.set_limits("k", "gpt-4", &[Limit::per_minute("rpm", 40).with_burst(50)])
        .await
        .unwrap();
    let items = table.scan_all().await;
    let bucket = |pk: &str| {
        items
            .iter()
            .find(|it| it.get("PK").and_then(|v| v.as_s().ok()).map(String::as_str) == Some(pk))
            .unwrap()
            .clone()
    };
    let num =
        |it: &dynalimit_format::item::Item, a: &str| it.get(a).and_then(|v| v.as_n().ok()).cloned();
    for shard in 0..2 {
        let b = bucket(&format!("{ns}/BUCKET#k#gpt-4#{shard}"));
        assert_eq!(num(&b, "b_rpm_cp").as_deref(), Some("50000"));
        assert_eq!(num(&b, "b_rpm_ra").as_deref(), Some("40000"));
        assert_eq!(num(&b, "b_rpm_rp").as_deref(), Some("60000"));
        assert_eq!(num(&b, "vu").as_deref(), Some("0"));
        assert_eq!(
            num(&b, "b_rpm_tk").as_deref(),
            Some("100000"),
            "tk is never set"
        );
    }
    let untouched = bucket(&format!("{ns}/BUCKET#k#claude#0"));
    assert_eq!(num(&untouched, "b_rpm_cp").as_deref(), Some("100000"));
    assert!(!untouched.contains_key("vu"));
    // `_default_` stamps every resource's buckets with what now resolves for it.
    repo.set_limits("k", "_default_", &[Limit::per_minute("rpm", 7)])
        .await
        .unwrap();
    let items = table.scan_all().await;
    let claude = items
        .iter()
        .find(|it| {
            it.get("PK").and_then(|v| v.as_s().ok()).map(String::as_str)
                == Some(&format!("{ns}/BUCKET#k#claude#0"))
        })
        .unwrap();
    assert_eq!(num(claude, "b_rpm_cp").as_deref(), Some("7000"));
    let gpt = items
        .iter()
        .find(|it| {
            it.get("PK").and_then(|v| v.as_s().ok()).map(String::as_str)
                == Some(&format!("{ns}/BUCKET#k#gpt-4#0"))
        })
        .unwrap();
    assert_eq!(
        num(gpt, "b_rpm_cp").as_deref(),
        Some("50000"),
        "entity config wins"
    );
}

/// Refuses every `BatchGetItem` before it is sent, as IAM would for a principal without that
/// action (no emulator offers per-action permissions).
#[derive(Debug)]
struct RefuseBatchGet;

impl aws_smithy_runtime_api::client::interceptors::Intercept for RefuseBatchGet {
    fn name(&self) -> &'static str {
        "RefuseBatchGet"
    }

    fn read_before_transmit(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("");
        if target.ends_with(".BatchGetItem") {
            return Err("BatchGetItem refused".into());
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_refused_batch_read_falls_back_to_one_read_per_level() {
    let table = dynalimit_tests::table().await;
    let writer = table.repository("fallback").await;
    writer
        .set_resource_defaults("gpt-4", &rpm(3))
        .await
        .unwrap();
    let counter = RequestCounter::default();
    let client = dynalimit_tests::client().await;
    let config = client
        .config()
        .to_builder()
        .interceptor(RefuseBatchGet)
        .interceptor(counter.clone())
        .build();
    let repo = table
        .builder()
        .client(aws_sdk_dynamodb::Client::from_conf(config))
        .namespace("fallback")
        .open()
        .await
        .unwrap();
    counter.reset();
    let resolved = repo.resolve_limits("k", "gpt-4").await.unwrap();
    assert_eq!(resolved.limits, rpm(3));
    assert_eq!(resolved.source, Some(ConfigLevel::Resource));
    assert_eq!(counter.count("GetItem"), 4, "{:?}", counter.snapshot());
}

#[tokio::test]
async fn limit_names_that_are_item_attributes_are_refused_before_any_request() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo = table.counted_repository(&counter, "reserved").await;
    let before = table.scan_all().await;
    counter.reset();
    for name in ["ttl", "total_events", "window", "entity_id", "PK", "GSI2PK"] {
        let limits = vec![Limit::per_minute("rpm", 10), Limit::per_minute(name, 5)];
        let refused = |e: RepositoryError| match e {
            RepositoryError::Validation(dynalimit_core::CoreError::ReservedLimitName {
                name: n,
                ..
            }) => assert_eq!(n, name),
            other => panic!("{name}: {other:?}"),
        };
        refused(repo.set_limits("k", "gpt-4", &limits).await.unwrap_err());
        refused(
            repo.set_limits("k", "_default_", &limits)
                .await
                .unwrap_err(),
        );
        refused(
            repo.set_resource_defaults("gpt-4", &limits)
                .await
                .unwrap_err(),
        );
        refused(
            repo.set_system_defaults(&limits, Some(OnUnavailable::Block))
                .await
                .unwrap_err(),
        );
    }
    assert_eq!(counter.total(), 0, "a request was sent");
    assert_eq!(table.scan_all().await, before, "something was written");
    // Near misses are ordinary names.
    repo.set_system_defaults(&[Limit::per_minute("TTL", 5)], None)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_stored_config_with_a_reserved_limit_name_is_reported_not_misread() {
    let table = dynalimit_tests::table().await;
    let repo = table
        .builder()
        .namespace("stored")
        .config_cache_ttl(Duration::from_secs(60))
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_string();
    let n = |v: i64| aws_sdk_dynamodb::types::AttributeValue::N(v.to_string());
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_string());
    // A resource config as a client that refuses only `wcu` stores a limit named `ttl`.
    let pk = format!("{ns}/RESOURCE#gpt-4");
    let mut item = std::collections::HashMap::from([
        ("PK".to_owned(), s(&pk)),
        ("SK".to_owned(), s("#CONFIG")),
        ("resource".to_owned(), s("gpt-4")),
        ("config_version".to_owned(), n(1)),
    ]);
    for (limit, v) in [("rpm", 100), ("ttl", 5)] {
        item.insert(format!("l_{limit}_cp"), n(v));
        item.insert(format!("l_{limit}_ra"), n(v));
        item.insert(format!("l_{limit}_rp"), n(60));
    }
    dynalimit_tests::raw::put_item(&table, item).await;

    let expect = |e: RepositoryError| {
        match &e {
            RepositoryError::Format(FormatError::ReservedLimitName { key, name }) => {
                assert_eq!(key, &format!("{pk}|#CONFIG"));
                assert_eq!(name, "ttl");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.is_unavailable());
        assert!(e.to_string().contains("\"ttl\""), "{e}");
    };
    expect(repo.get_resource_defaults("gpt-4").await.unwrap_err());
    // Through the cache, twice: the second answer comes from the cached entry.
    expect(repo.resolve_limits("k", "gpt-4").await.unwrap_err());
    expect(repo.resolve_limits("k", "gpt-4").await.unwrap_err());
    // An entity-level config in front of it answers first.
    repo.set_limits("k", "gpt-4", &rpm(5)).await.unwrap();
    assert_eq!(
        repo.resolve_limits("k", "gpt-4").await.unwrap().limits,
        rpm(5)
    );
}
