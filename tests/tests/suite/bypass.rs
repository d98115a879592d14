//! Bypass (reference §12.1): a bypassed pair admits every request, counts it in `tc` and
//! debits no balance; the stamp is renewed by a slow pass from the configuration and removed
//! once the pair is enforced again.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit};
use dynalimit_core::Clock;
use dynalimit_format::item::{Item, get_i64};

use super::engine::{Rig, rig};

/// Sets (`Some`) or removes the resource level's `disabled` value as zae-limiter stores it.
async fn resource_flag(r: &Rig, value: Option<&str>) {
    match value {
        Some(v) => {
            let values = [(":v", AttributeValue::S(v.into()))];
            r.update_resource_config("gpt-4", "SET disabled = :v", &values)
                .await;
        }
        None => {
            r.update_resource_config("gpt-4", "REMOVE disabled", &[])
                .await
        }
    }
}

async fn bucket(r: &Rig) -> Item {
    r.first_shard("k", "gpt-4").await
}

/// gpt-4 at 3 rpm, bypassed, and the bucket of `k` created by one acquire.
async fn bypassed() -> Rig {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    resource_flag(&r, Some("bypass")).await;
    acquire(&r).await.unwrap();
    r
}

/// One committed acquire of 1 rpm by `k`: whether it was admitted bypassed.
async fn acquire(r: &Rig) -> Result<bool, Error> {
    let lease = r.limiter.acquire("k", "gpt-4", [("rpm", 1)]).await?;
    let bypassed = lease.bypassed();
    lease.commit().await?;
    Ok(bypassed)
}

#[tokio::test]
async fn a_bypassed_pair_admits_everything_counts_it_and_debits_nothing() {
    // The first acquire creates the bucket, stamped, with its own debit enforced (the
    // manual clock has not moved since).
    let r = bypassed().await;
    let now = r.clock.epoch_millis();
    let created = bucket(&r).await;
    let until = get_i64(&created, "bypass").expect("stamped by the create");
    assert!((now + 48_000..=now + 60_000).contains(&until));
    for _ in 0..9 {
        assert!(acquire(&r).await.expect("a bypassed pair never refuses"));
    }
    r.limiter.settle().await;
    let item = bucket(&r).await;
    assert_eq!(
        get_i64(&item, "b_rpm_tc"),
        Some(10_000),
        "every request counted"
    );
    assert_eq!(
        get_i64(&item, "b_rpm_tk"),
        Some(2000),
        "only the create's debit"
    );
    // A rollback of a bypassed lease takes back the count alone.
    let lease = r.limiter.acquire("k", "gpt-4", [("rpm", 1)]).await.unwrap();
    assert!(lease.bypassed());
    lease.rollback().await.unwrap();
    let item = bucket(&r).await;
    assert_eq!(
        (get_i64(&item, "b_rpm_tc"), get_i64(&item, "b_rpm_tk")),
        (Some(10_000), Some(2000))
    );
}

#[tokio::test]
async fn an_expired_bypass_is_renewed_and_removed_once_the_pair_is_enforced() {
    let r = bypassed().await;
    let first = get_i64(&bucket(&r).await, "bypass").unwrap();
    // Past the deadline the fast path fails; the slow pass counts and renews the stamp.
    r.clock.advance(Duration::from_secs(61));
    assert!(acquire(&r).await.unwrap());
    let item = bucket(&r).await;
    let renewed = get_i64(&item, "bypass").unwrap();
    assert!(renewed > r.clock.epoch_millis() && renewed > first);
    assert_eq!(get_i64(&item, "b_rpm_tc"), Some(2000));
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(2000), "no balance moved");

    // Enforced again: once the stamp expires a slow pass removes it and the limit refuses.
    resource_flag(&r, None).await;
    r.clock.advance(Duration::from_secs(61));
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        outcomes.push(
            acquire(&r)
                .await
                .map_err(|e| matches!(e, Error::Rejected(_))),
        );
    }
    assert_eq!(outcomes[0], Ok(false), "admitted, enforced");
    assert!(outcomes.contains(&Err(true)), "{outcomes:?}");
    assert_eq!(get_i64(&bucket(&r).await, "bypass"), None);
}

#[tokio::test]
async fn a_bypass_stored_by_dynalimit_stamps_the_buckets_and_raises_the_minimum_version() {
    use dynalimit_repository::{DisabledFlag, RepositoryError};
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    for _ in 0..3 {
        acquire(&r).await.unwrap();
    }
    assert!(matches!(acquire(&r).await, Err(Error::Rejected(_))));
    // A stack whose aggregator does not read bypasses: refused, nothing stored.
    r.table
        .set_version_attribute("lambda_version", "0.16.0")
        .await;
    let e = r
        .repo
        .set_resource_disabled("gpt-4", Some(DisabledFlag::Bypass))
        .await
        .unwrap_err();
    assert!(matches!(e, RepositoryError::ReadersTooOld { .. }), "{e}");
    assert!(!bucket(&r).await.contains_key("bypass"));
    r.table
        .set_version_attribute("lambda_version", "0.17.0")
        .await;

    let stamped = r
        .repo
        .set_resource_disabled("gpt-4", Some(DisabledFlag::Bypass))
        .await
        .unwrap();
    assert_eq!(stamped, 1);
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.17.0");
    let now = r.clock.epoch_millis();
    let until = get_i64(&bucket(&r).await, "bypass").expect("stamped");
    assert!((now + 48_000..=now + 60_000).contains(&until), "{until}");
    // Every request admitted, counted, nothing debited.
    for _ in 0..5 {
        assert!(acquire(&r).await.unwrap(), "admitted bypassed");
    }
    let item = bucket(&r).await;
    assert_eq!(get_i64(&item, "b_rpm_tc"), Some(8_000));
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(0));
    // Back to inherit: the stamp goes and the limit refuses again.
    r.repo.set_resource_disabled("gpt-4", None).await.unwrap();
    assert!(!bucket(&r).await.contains_key("bypass"));
    assert!(matches!(acquire(&r).await, Err(Error::Rejected(_))));
}
