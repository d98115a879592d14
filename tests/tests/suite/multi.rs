//! Multi-resource acquires (reference §3.11): one lease over several resources of one entity,
//! all or none.

use std::time::Duration;

use dynalimit::{DisabledFlag, Error, Limit};
use dynalimit_format::item::get_i64;

use super::engine::{Rig, rig};

fn rpm(n: i64) -> Limit {
    Limit::per_minute("rpm", n)
}

/// `b_rpm_{field}` of `entity`'s shard-0 bucket on `resource`, in millitokens.
async fn rpm_field(r: &Rig, entity: &str, resource: &str, field: &str) -> Option<i64> {
    let pk = format!("{}/BUCKET#{entity}#{resource}#0", r.repo.namespace_id());
    r.table
        .scan_all()
        .await
        .into_iter()
        .find(|i| dynalimit_format::item::get_s(i, "PK") == Some(pk.as_str()))
        .and_then(|i| get_i64(&i, &format!("b_rpm_{field}")))
}

/// An acquire of `gpt` on gpt-4 and `moderation` on moderation by entity `k`.
fn both(r: &Rig, gpt: i64, moderation: i64) -> dynalimit::limiter::Acquire<'_> {
    r.limiter
        .acquire("k", "gpt-4", [("rpm", gpt)])
        .also("moderation", [("rpm", moderation)])
}

/// One committed acquire of 1 rpm on gpt-4 by `k`.
async fn one(r: &Rig) {
    let lease = r.limiter.acquire("k", "gpt-4", [("rpm", 1)]).await;
    lease.unwrap().commit().await.unwrap();
}

async fn configured() -> Rig {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[rpm(10)])
        .await
        .unwrap();
    r.repo
        .set_resource_defaults("moderation", &[rpm(2)])
        .await
        .unwrap();
    r
}

#[tokio::test]
async fn every_resource_is_debited_or_none_is() {
    let r = configured().await;
    for _ in 0..2 {
        let lease = both(&r, 1, 1).await.unwrap();
        lease.commit().await.unwrap();
    }
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tc").await, Some(2000));
    assert_eq!(rpm_field(&r, "k", "moderation", "tc").await, Some(2000));

    // moderation is spent: the acquire is refused and gpt-4's debit is given back.
    let err = both(&r, 1, 1).await.unwrap_err();
    let Error::Rejected(rejection) = err else {
        panic!("expected a rejection, got {err}");
    };
    assert_eq!(rejection.resource(), Some("moderation"));
    assert!(rejection.retry_after().unwrap() > Duration::ZERO);
    r.limiter.settle().await;
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tc").await, Some(2000));
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tk").await, Some(8000));

    // The rejection cache now knows moderation is short: refused before any write.
    r.counter.reset();
    let err = both(&r, 1, 1).await.unwrap_err();
    assert!(matches!(err, Error::Rejected(_)), "{err}");
    assert_eq!(r.counter.total(), 0, "no request");
    // A single acquire of gpt-4 still succeeds.
    one(&r).await;
}

#[tokio::test]
async fn a_disabled_resource_outranks_a_rejection_and_nothing_stays_debited() {
    let r = configured().await;
    // Spend gpt-4 and disable moderation.
    for _ in 0..10 {
        one(&r).await;
    }
    r.repo
        .set_resource_disabled("moderation", Some(DisabledFlag::Disabled))
        .await
        .unwrap();
    let err = both(&r, 1, 1).await.unwrap_err();
    assert!(
        matches!(&err, Error::ResourceDisabled { resource, .. } if resource == "moderation"),
        "{err}"
    );
    // A third resource that admitted is refunded.
    r.repo
        .set_resource_defaults("embeddings", &[rpm(5)])
        .await
        .unwrap();
    let err = r
        .limiter
        .acquire("k", "embeddings", [("rpm", 1)])
        .also("moderation", [("rpm", 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ResourceDisabled { .. }), "{err}");
    r.limiter.settle().await;
    assert_eq!(rpm_field(&r, "k", "embeddings", "tk").await, Some(5000));
    assert_eq!(rpm_field(&r, "k", "embeddings", "tc").await, Some(0));
}

#[tokio::test]
async fn the_lease_reaches_each_resource_and_settles_them_all() {
    let r = configured().await;
    let lease = both(&r, 2, 1).await.unwrap();
    assert!(lease.resource("gpt-4").is_some());
    assert!(lease.resource("other").is_none());
    let moderation = lease.resource("moderation").expect("moderation");
    assert_eq!(moderation.consumed()["rpm"], 1);
    moderation.adjust("rpm", 1).unwrap();
    lease.adjust("rpm", -1).unwrap();
    lease.commit().await.unwrap();
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tc").await, Some(1000));
    assert_eq!(rpm_field(&r, "k", "moderation", "tc").await, Some(2000));

    let lease = both(&r, 3, 0).await.unwrap();
    lease.rollback().await.unwrap();
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tc").await, Some(1000));
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tk").await, Some(9000));
    // A dropped lease gives every resource back.
    drop(both(&r, 1, 0).await.unwrap());
    r.limiter.settle().await;
    assert_eq!(rpm_field(&r, "k", "gpt-4", "tc").await, Some(1000));
}

#[tokio::test]
async fn bad_resource_lists_are_refused_before_any_request() {
    let r = configured().await;
    r.counter.reset();
    let many = (0..16).fold(r.limiter.acquire("k", "gpt-4", [("rpm", 1)]), |a, i| {
        a.also(&format!("r{i}"), [("rpm", 1)])
    });
    let cases = [
        many.await.err(),
        r.limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .also("gpt-4", [("rpm", 1)])
            .await
            .err(),
        both(&r, 1, 1).also("moderation", [("rpm", 1)]).await.err(),
        r.limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .limits([rpm(5)])
            .also("moderation", [("rpm", 1)])
            .await
            .err(),
        r.limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .also("bad#name", [("rpm", 1)])
            .await
            .err(),
        both(&r, 1, -1).await.err(),
    ];
    for case in cases {
        assert!(matches!(case, Some(Error::Invalid(_))), "{case:?}");
    }
    assert_eq!(r.counter.total(), 0, "nothing sent");
}
