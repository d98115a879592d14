//! How many limits one bucket carries (`docs/limits-per-bucket.md`): more than
//! `MAX_LIMITS_PER_BUCKET` is refused before any request and nothing is written; the maximum,
//! in its largest kinds, works through every request of a bucket; and a request the table
//! refuses as invalid is an error under `on_unavailable = allow`, never an admission.

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;

use dynalimit::limitset::{Algorithm, Distributed, RateLimit};
use dynalimit::{Error, Limit, OnUnavailable, RateLimiter};
use dynalimit_core::CoreError;
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use dynalimit_format::FormatError;
use dynalimit_format::attr::MAX_LIMITS_PER_BUCKET;
use dynalimit_repository::bucket::BucketKey;
use dynalimit_repository::{NewEntity, OperationOptions, Repository, RepositoryError};
use dynalimit_tests::fault::FaultProxy;

use super::engine::rig;

/// `n` limit names of 64 characters, the longest a name may be.
fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("limit-{i:02}-{}", "x".repeat(55)))
        .collect()
}

/// `n` limits of the kinds that add the most to a bucket's requests, in turn: a scheduled
/// limit (its parameters change every minute), a calendar quota, a session quota and a
/// soft limit.
fn wide(n: usize, capacity: i64) -> Vec<Limit> {
    names(n)
        .into_iter()
        .enumerate()
        .map(|(i, name)| match i % 4 {
            0 => {
                let odd = Entry::scaled("1-59/2 * * * *", 0.5).expect("entry");
                let schedule = Schedule::new(Zone::utc(), vec![odd]).expect("schedule");
                Limit::per_minute(name, capacity).with_schedule(schedule)
            }
            1 => Limit::quota_per_day(name, capacity, Zone::utc()),
            2 => Limit::session_quota(name, capacity, 3600),
            _ => Limit::per_minute(name, capacity).soft(),
        })
        .collect()
}

fn each(n: usize, amount: i64) -> Vec<(String, i64)> {
    names(n).into_iter().map(|name| (name, amount)).collect()
}

fn too_many(e: &CoreError, given: usize) -> bool {
    matches!(e, CoreError::TooManyLimits { given: g, max, .. }
        if *g == given && *max == MAX_LIMITS_PER_BUCKET)
}

#[tokio::test]
async fn more_limits_than_a_bucket_carries_are_refused_before_any_request() {
    let r = rig().await;
    let before = r.table.scan_all().await;
    r.counter.reset();
    for given in [MAX_LIMITS_PER_BUCKET + 1, 20] {
        let over = wide(given, 100);
        for stored in [
            r.repo.set_limits("key", "gpt-4", &over).await,
            r.repo.set_resource_defaults("gpt-4", &over).await,
            r.repo.set_system_defaults(&over, None).await,
        ] {
            match stored {
                Err(RepositoryError::Validation(e)) => assert!(too_many(&e, given), "{e}"),
                other => panic!("stored {given} limits: {other:?}"),
            }
        }
        let passed = r
            .limiter
            .acquire("key", "gpt-4", [(names(1)[0].clone(), 1)])
            .limits(over.clone())
            .on_unavailable(OnUnavailable::Allow)
            .await;
        assert!(
            matches!(&passed, Err(Error::Invalid(e)) if too_many(e, given)),
            "{passed:?}"
        );
        let consumed = r
            .limiter
            .acquire("key", "gpt-4", each(given, 1))
            .on_unavailable(OnUnavailable::Allow)
            .await;
        assert!(
            matches!(&consumed, Err(Error::Invalid(e)) if too_many(e, given)),
            "{consumed:?}"
        );
        let available = r.limiter.available("key", "gpt-4", &over).await;
        assert!(
            matches!(&available, Err(Error::Invalid(e)) if too_many(e, given)),
            "{available:?}"
        );
        let balances = r.limiter.balances("key", "gpt-4", &over).await;
        assert!(
            matches!(&balances, Err(Error::Invalid(e)) if too_many(e, given)),
            "{balances:?}"
        );
        let until = r
            .limiter
            .time_until_available("key", "gpt-4", each(1, 1), &over)
            .await;
        assert!(
            matches!(&until, Err(Error::Invalid(e)) if too_many(e, given)),
            "{until:?}"
        );
        let set = Distributed::builder(&r.limiter, "key", "gpt-4")
            .limits(names(given).into_iter().map(|name| {
                RateLimit::new(name, 10.0, "minute")
                    .expect("rate limit")
                    .with_algorithm(Algorithm::TokenBucket)
            }))
            .build();
        assert!(
            matches!(set, Err(Error::TooManyLimits { max, given: g }) if max == MAX_LIMITS_PER_BUCKET && g == given),
            "{set:?}"
        );
        let topped = r
            .repo
            .top_up("key", "gpt-4", each(given, 1), &OperationOptions::new())
            .await;
        assert!(
            matches!(&topped, Err(RepositoryError::Validation(e)) if too_many(e, given)),
            "{topped:?}"
        );
    }
    assert_eq!(r.counter.total(), 0, "{:?}", r.counter.snapshot());
    assert_eq!(r.table.scan_all().await, before, "nothing was written");
}

/// `tc` of every limit of `entity`'s bucket on gpt-4 (millitokens consumed).
async fn consumed(repo: &Repository, entity: &str) -> Vec<i64> {
    let image = repo
        .buckets()
        .read(&BucketKey::new(entity, "gpt-4", 0))
        .await
        .expect("read")
        .expect("bucket");
    names(MAX_LIMITS_PER_BUCKET)
        .iter()
        .map(|name| image.limits[name].tc)
        .collect()
}

#[tokio::test]
async fn the_maximum_is_served_by_every_request_of_a_bucket_and_its_cascade() {
    let r = rig().await;
    let max = MAX_LIMITS_PER_BUCKET;
    r.repo
        .create_entity(NewEntity::new("org"))
        .await
        .expect("parent");
    r.repo
        .create_entity(NewEntity::new("key").parent("org").cascade(true))
        .await
        .expect("child");
    for entity in ["org", "key"] {
        r.repo
            .set_limits(entity, "gpt-4", &wide(max, 1_000_000))
            .await
            .expect("the maximum is stored");
    }

    // Created on the slow path for both owners; a credit on commit.
    let lease = r
        .limiter
        .acquire("key", "gpt-4", each(max, 2))
        .await
        .expect("create");
    for name in names(max) {
        lease.adjust(&name, -1).expect("adjust");
    }
    lease.commit().await.expect("a credit of every limit");
    // The fast path, then a rollback.
    r.counter.reset();
    let lease = r
        .limiter
        .acquire("key", "gpt-4", each(max, 1))
        .await
        .expect("fast path");
    assert_eq!(
        r.counter.snapshot().get("UpdateItem").copied(),
        Some(2),
        "one consume per owner"
    );
    lease.rollback().await.expect("rollback");
    // A minute later the schedule has changed the parameters: the refill on the slow path.
    r.clock.advance(Duration::from_secs(61));
    r.limiter
        .acquire("key", "gpt-4", each(max, 1))
        .await
        .expect("refill")
        .commit()
        .await
        .expect("commit");
    assert_eq!(consumed(&r.repo, "key").await, vec![2000; max]);
    assert_eq!(consumed(&r.repo, "org").await, vec![2000; max]);

    // An operator's reset and top-up of every limit, and a change stamped on the buckets.
    r.repo
        .reset_bucket("key", "gpt-4", &OperationOptions::new())
        .await
        .expect("reset");
    r.repo
        .top_up("key", "gpt-4", each(max, 1), &OperationOptions::new())
        .await
        .expect("top-up");
    r.repo
        .set_limits("key", "gpt-4", &wide(max, 2_000_000))
        .await
        .expect("a change fanned out to the buckets");
    let statuses = r
        .limiter
        .balances("key", "gpt-4", &[])
        .await
        .expect("balances");
    assert_eq!(statuses.len(), max);
    assert!(statuses.iter().all(|s| s.limit.capacity() == 2_000_000));

    // A pause stamped on the bucket holds the next acquire of every limit.
    let until = r
        .limiter
        .pause("key", "gpt-4", Duration::from_secs(30))
        .await
        .expect("pause")
        .expect("the bucket exists");
    let paused = r.limiter.acquire("key", "gpt-4", each(max, 1)).await;
    assert!(
        matches!(&paused, Err(Error::Rejected(rej)) if rej.paused_until() == Some(until)),
        "{paused:?}"
    );
}

/// A repository of `table` whose requests pass `proxy` (one attempt each), bucket writes on
/// the fast path or the SDK.
async fn through(table: &dynalimit_tests::TestTable, proxy: &FaultProxy, fast: bool) -> Repository {
    table
        .builder()
        .client(proxy.client(1, None).await)
        .fast_path(fast)
        .namespace("invalid")
        .open()
        .await
        .expect("open through the proxy")
}

#[tokio::test]
async fn a_request_the_table_refuses_as_invalid_is_an_error_under_allow() {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let rpm = [Limit::per_minute("rpm", 10)];
    for fast in [true, false] {
        let repo = through(&table, &proxy, fast).await;
        let limiter = RateLimiter::with_on_unavailable(repo, OnUnavailable::Allow);
        let acquire = |entity: &'static str| {
            limiter
                .acquire(entity, "gpt-4", [("rpm", 1)])
                .limits(rpm.clone())
        };
        acquire("warm")
            .await
            .expect("bucket")
            .commit()
            .await
            .unwrap();
        // The consume of a warm bucket.
        proxy.fail_next("UpdateItem", "ValidationException", 1);
        let refused = acquire("warm").await;
        assert!(
            matches!(&refused, Err(Error::InvalidRequest(RepositoryError::InvalidRequest { code, .. })) if code == "ValidationException"),
            "fast path {fast}: {refused:?}"
        );
        // A bucket's create transaction.
        proxy.fail_next("TransactWriteItems", "ValidationException", 1);
        let refused = acquire(if fast { "new-fast" } else { "new-sdk" }).await;
        assert!(
            matches!(&refused, Err(Error::InvalidRequest(_))),
            "fast path {fast}: {refused:?}"
        );
        // An outage, by contrast, is governed by on_unavailable.
        proxy.fail_next("UpdateItem", "ServiceUnavailable", 1);
        let degraded = acquire("warm").await.expect("admitted under allow");
        assert!(degraded.is_degraded());
        proxy.clear();
    }
}

#[tokio::test]
async fn a_stored_configuration_over_the_maximum_is_an_invalid_request_and_writes_nothing() {
    let r = rig().await;
    // As a client without the check (zae-limiter) stores it.
    let over = wide(MAX_LIMITS_PER_BUCKET + 4, 100);
    let item = dynalimit_format::config::level_item(
        r.repo.namespace_id(),
        &dynalimit_format::config::Slot::Resource("gpt-4".into()),
        &over,
        None,
        None,
    );
    dynalimit_tests::raw::put_item(&r.table, item).await;
    let before = r.table.scan_all().await;
    r.counter.reset();
    let refused = r
        .limiter
        .acquire("key", "gpt-4", [(names(1)[0].clone(), 1)])
        .on_unavailable(OnUnavailable::Allow)
        .await;
    assert!(
        matches!(
            &refused,
            Err(Error::InvalidRequest(RepositoryError::Format(
                FormatError::TooManyLimits { given: 20, .. }
            )))
        ),
        "{refused:?}"
    );
    let written = r.counter.snapshot();
    assert!(
        !written.contains_key("TransactWriteItems") && written.get("UpdateItem") == Some(&1),
        "only the consume of the missing bucket was sent: {written:?}"
    );
    assert_eq!(r.table.scan_all().await, before, "nothing was written");
}

/// An `UpdateItem` of one attribute on `table` under `condition` (every `#a` one attribute,
/// every `:one`, or every `:v`, one value).
async fn conditioned(
    table: &dynalimit_tests::TestTable,
    condition: &str,
) -> Result<(), aws_sdk_dynamodb::error::SdkError<UpdateItemError>> {
    // The value's placeholder: `:v` when the condition uses it (a shorter text), else `:one`.
    let value = if condition.contains(":v") {
        ":v"
    } else {
        ":one"
    };
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S("limits/PROBE".into()))
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression(format!("SET #b = {value}"))
        .condition_expression(condition)
        .expression_attribute_names("#a", "a")
        .expression_attribute_names("#b", "b")
        .expression_attribute_values(value, AttributeValue::N("1".into()))
        .send()
        .await
        .map(|_| ())
}

#[tokio::test]
async fn the_table_refuses_a_condition_over_300_operators_or_4_kb_as_invalid() {
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    let table = dynalimit_tests::table().await;
    // `#a = :one` joined by `OR`: k comparators and k - 1 operators. The item does not
    // exist, so an expression the table takes fails its condition.
    let ors = |k: usize| vec!["#a = :one"; k].join(" OR ");
    let taken = conditioned(&table, &ors(150)).await.unwrap_err();
    assert_eq!(
        taken.code(),
        Some("ConditionalCheckFailedException"),
        "299 operators: {taken:?}"
    );
    let refused = conditioned(&table, &ors(151)).await.unwrap_err();
    assert_eq!(refused.code(), Some("ValidationException"), "{refused:?}");
    // `BETWEEN` counts once (its `AND` is not an operator): 150 of them joined by `OR` are
    // 299, 151 are 301.
    let betweens = |k: usize| vec!["#a BETWEEN :one AND :one"; k].join(" OR ");
    let short = |text: String| text.replace(":one", ":v");
    let taken = conditioned(&table, &short(betweens(150)))
        .await
        .unwrap_err();
    assert_eq!(
        taken.code(),
        Some("ConditionalCheckFailedException"),
        "150 BETWEEN: {taken:?}"
    );
    let refused = conditioned(&table, &short(betweens(151)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("ValidationException"), "{refused:?}");
    assert!(
        refused
            .message()
            .is_some_and(|m| m.contains("operator count: 301")),
        "{refused:?}"
    );
    let long = format!("#a = :one{}", " ".repeat(4096));
    let refused = conditioned(&table, &long).await.unwrap_err();
    assert_eq!(refused.code(), Some("ValidationException"), "{refused:?}");
}
