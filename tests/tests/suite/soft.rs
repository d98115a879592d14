//! Soft limits (reference §12.4): debited like any other, never refusing while the bucket's
//! stamp is live, reported as overdrawn; the stamp is renewed by a slow pass from the
//! configuration and removed once the limit is hard again.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit};
use dynalimit_core::Clock;
use dynalimit_format::item::{Item, get_i64};

use super::engine::{Rig, rig};

/// Resource `gpt-4` with `rpm` 3/min (soft when `soft`) and `tpm` 10/min (hard).
async fn configure(r: &Rig, soft: bool) {
    r.repo
        .set_resource_defaults(
            "gpt-4",
            &[Limit::per_minute("rpm", 3), Limit::per_minute("tpm", 10)],
        )
        .await
        .unwrap();
    if soft {
        // As zae-limiter 0.17 stores a soft limit (`l_{name}_soft = true`).
        let values = [(":t", AttributeValue::Bool(true))];
        r.update_resource_config("gpt-4", "SET l_rpm_soft = :t", &values)
            .await;
    }
}

async fn bucket(r: &Rig) -> Item {
    r.first_shard("k", "gpt-4").await
}

/// One acquire of `rpm` (and `tpm` when given) by `k`; the overdrawn limits when admitted.
async fn acquire(r: &Rig, tpm: Option<i64>) -> Result<Vec<String>, Error> {
    let mut consume = vec![("rpm", 1)];
    consume.extend(tpm.map(|t| ("tpm", t)));
    let lease = r.limiter.acquire("k", "gpt-4", consume).await?;
    let overdrawn = lease.overdrawn().to_vec();
    lease.commit().await?;
    Ok(overdrawn)
}

#[tokio::test]
async fn a_soft_limit_is_debited_past_its_capacity_and_reported_overdrawn() {
    let r = rig().await;
    configure(&r, true).await;
    let now = r.clock.epoch_millis();
    let mut overdrawn = Vec::new();
    for _ in 0..6 {
        overdrawn.push(acquire(&r, None).await.expect("a soft limit never refuses"));
    }
    let empty: Vec<String> = Vec::new();
    let rpm = vec!["rpm".to_string()];
    assert_eq!(
        overdrawn,
        [
            empty.clone(),
            empty.clone(),
            empty,
            rpm.clone(),
            rpm.clone(),
            rpm
        ]
    );
    let item = bucket(&r).await;
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(-3000));
    assert_eq!(get_i64(&item, "b_rpm_tc"), Some(6000));
    let until = get_i64(&item, "b_rpm_soft").expect("stamped by the create");
    assert!(
        (now + 48_000..=now + 60_000).contains(&until),
        "{until} - {now}"
    );
    assert_eq!(get_i64(&item, "b_tpm_soft"), None, "tpm is hard");
    // The hard limit of the same bucket still refuses; the rejection reports the soft limit
    // as passed and overdrawn.
    let Err(Error::Rejected(rejection)) = acquire(&r, Some(11)).await else {
        panic!("tpm is hard");
    };
    let tpm = rejection.status("tpm").expect("tpm");
    assert!(tpm.exceeded && !tpm.overdrawn);
    let rpm = rejection.status("rpm").expect("rpm");
    assert!(!rpm.exceeded && rpm.overdrawn, "{rpm:?}");
}

#[tokio::test]
async fn an_expired_stamp_is_renewed_by_a_slow_pass_and_removed_once_the_limit_is_hard() {
    let r = rig().await;
    configure(&r, true).await;
    for _ in 0..4 {
        acquire(&r, None).await.unwrap();
    }
    let first = get_i64(&bucket(&r).await, "b_rpm_soft").unwrap();
    // Past the deadline the fast path fails and the slow pass renews the stamp.
    r.clock.advance(Duration::from_secs(61));
    assert!(acquire(&r, None).await.is_ok());
    let renewed = get_i64(&bucket(&r).await, "b_rpm_soft").unwrap();
    assert!(renewed > first + 60_000 * 8 / 10, "{renewed} vs {first}");
    assert!(renewed > r.clock.epoch_millis());

    // The limit becomes hard: once the stamp expires a slow pass removes it and refuses.
    configure(&r, false).await;
    r.clock.advance(Duration::from_secs(61));
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        outcomes.push(acquire(&r, None).await.is_ok());
    }
    assert!(
        outcomes.contains(&false),
        "a hard limit refuses: {outcomes:?}"
    );
    assert_eq!(get_i64(&bucket(&r).await, "b_rpm_soft"), None);
    let tk = get_i64(&bucket(&r).await, "b_rpm_tk").unwrap();
    assert!(tk >= 0, "no debt taken on while hard: {tk}");
}

#[tokio::test]
async fn soft_limits_stored_by_dynalimit_are_stamped_at_once_and_raise_the_minimum_version() {
    let r = rig().await;
    let hard = [Limit::per_minute("rpm", 3), Limit::per_minute("tpm", 10)];
    let soft = [
        Limit::per_minute("rpm", 3).soft(),
        Limit::per_minute("tpm", 10),
    ];
    r.repo.set_resource_defaults("gpt-4", &hard).await.unwrap();
    for _ in 0..3 {
        acquire(&r, None).await.unwrap();
    }
    assert!(matches!(acquire(&r, None).await, Err(Error::Rejected(_))));
    // Made soft at the resource level: the bucket is stamped by the fan-out, so the very next
    // acquire is admitted (a refusal from the image alone would otherwise stand).
    r.repo.set_resource_defaults("gpt-4", &soft).await.unwrap();
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.17.0");
    let stored = r
        .repo
        .get_resource_defaults("gpt-4")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.limits, soft);
    assert!(stored.soft.contains("rpm"));
    let now = r.clock.epoch_millis();
    let until = get_i64(&bucket(&r).await, "b_rpm_soft").expect("stamped by the fan-out");
    assert!((now + 48_000..=now + 60_000).contains(&until), "{until}");
    assert_eq!(
        acquire(&r, None).await.unwrap(),
        ["rpm"],
        "admitted, overdrawn"
    );
    // Hard again: the stamp is removed at once and the limit refuses.
    r.repo.set_resource_defaults("gpt-4", &hard).await.unwrap();
    assert!(!bucket(&r).await.contains_key("b_rpm_soft"));
    assert!(matches!(acquire(&r, None).await, Err(Error::Rejected(_))));
    // At the entity level, the parameter sync stamps the entity's buckets.
    r.repo.set_limits("k", "gpt-4", &soft).await.unwrap();
    assert!(bucket(&r).await.contains_key("b_rpm_soft"));
    assert_eq!(acquire(&r, None).await.unwrap(), ["rpm"]);
    // An explicit soft limit is soft for that acquire.
    let lease = r
        .limiter
        .acquire("other", "gpt-4", [("rpm", 5)])
        .limits([Limit::per_minute("rpm", 3).soft()])
        .await
        .expect("an explicit soft limit never refuses");
    assert_eq!(lease.overdrawn(), ["rpm"]);
    lease.commit().await.unwrap();
}

#[tokio::test]
async fn a_soft_limit_is_stored_only_where_the_aggregator_reads_it() {
    let r = rig().await;
    r.table
        .set_version_attribute("lambda_version", "0.16.1")
        .await;
    let e = r
        .repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3).soft()])
        .await
        .unwrap_err();
    assert!(
        matches!(e, dynalimit::RepositoryError::ReadersTooOld { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("soft limits"), "{e}");
    assert!(
        r.repo
            .get_resource_defaults("gpt-4")
            .await
            .unwrap()
            .is_none()
    );
    let record = r.repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.0.0");
}
