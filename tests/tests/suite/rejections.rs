//! The limiter's local rejection cache (reference §3.3) against DynamoDB Local: what a flood
//! of refused acquires costs, and every event that ends a remembered refusal.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Lease, Limit, Reason};

use crate::engine::{Rig, rig};

const RESOURCE: &str = "gpt-4";

/// Ten an hour: nothing refills in the seconds a test runs.
fn limits() -> [Limit; 1] {
    [Limit::per_hour("rpm", 10)]
}

async fn acquire(r: &Rig, explicit: bool) -> Result<Lease, Error> {
    let acquire = r.limiter.acquire("key-1", RESOURCE, [("rpm", 1)]);
    if explicit {
        acquire.limits(limits()).await
    } else {
        acquire.await
    }
}

/// Spends the whole bucket, one committed acquire at a time.
async fn spend_all(r: &Rig, explicit: bool) {
    for _ in 0..10 {
        acquire(r, explicit)
            .await
            .expect("within capacity")
            .commit()
            .await
            .expect("commit");
    }
}

fn refused(result: Result<Lease, Error>) -> dynalimit::Rejection {
    match result {
        Err(Error::Rejected(r)) => r,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn a_flood_of_refused_acquires_costs_one_request() {
    let r = rig().await;
    assert_eq!(r.limiter.rejection_cache_ttl(), Duration::from_secs(1));
    spend_all(&r, true).await;
    r.counter.reset();
    let from_table = refused(acquire(&r, true).await);
    assert_eq!(r.counter.total(), 1, "the first refusal asks the table");
    for _ in 0..199 {
        let cached = refused(acquire(&r, true).await);
        assert_eq!(cached.reason(), &Reason::Limits);
        assert_eq!(cached.status("rpm"), from_table.status("rpm"));
        assert!(cached.retry_after().is_some_and(|d| d > Duration::ZERO));
    }
    // Besides, the namespace's features are read once, in the background: with a refusal
    // alert set, the refusal minute would be reported.
    r.limiter.settle().await;
    assert_eq!(
        r.counter.total(),
        2,
        "199 refusals without a request: {:?}",
        r.counter.snapshot()
    );
    assert_eq!(r.limiter.cached_rejections(), 199);
}

#[tokio::test]
async fn without_the_cache_every_refusal_is_a_request() {
    let r = rig().await;
    let limiter = r.limiter.clone().with_rejection_cache_ttl(Duration::ZERO);
    assert_eq!(
        r.limiter.rejection_cache_ttl(),
        Duration::ZERO,
        "clones share it"
    );
    spend_all(&r, true).await;
    r.counter.reset();
    for _ in 0..20 {
        refused(
            limiter
                .acquire("key-1", RESOURCE, [("rpm", 1)])
                .limits(limits())
                .await,
        );
    }
    // And one read of the namespace's features, in the background.
    limiter.settle().await;
    assert_eq!(r.counter.total(), 21, "{:?}", r.counter.snapshot());
    assert_eq!(limiter.cached_rejections(), 0);
}

#[tokio::test]
async fn a_rollback_in_the_process_ends_the_refusal_at_once() {
    let r = rig().await;
    for _ in 0..9 {
        acquire(&r, true).await.unwrap().commit().await.unwrap();
    }
    let held = acquire(&r, true).await.expect("the last token");
    refused(acquire(&r, true).await);
    refused(acquire(&r, true).await);
    assert_eq!(r.limiter.cached_rejections(), 1);
    held.rollback().await.expect("rollback");
    let lease = acquire(&r, true).await.expect("the token given back");
    lease.commit().await.unwrap();
}

#[tokio::test]
async fn a_configuration_write_through_the_repository_ends_the_refusal() {
    let r = rig().await;
    r.repo
        .set_resource_defaults(RESOURCE, &limits())
        .await
        .unwrap();
    spend_all(&r, false).await;
    refused(acquire(&r, false).await);
    r.counter.reset();
    refused(acquire(&r, false).await);
    assert_eq!(r.counter.total(), 0, "remembered");
    r.repo
        .set_resource_defaults(RESOURCE, &[Limit::per_hour("rpm", 20)])
        .await
        .unwrap();
    r.counter.reset();
    let _ = acquire(&r, false).await;
    assert!(
        r.counter.total() > 0,
        "the configuration changed: the table is asked again"
    );
}

#[tokio::test]
async fn explicit_limits_other_than_the_buckets_are_not_refused_from_memory() {
    let r = rig().await;
    spend_all(&r, true).await;
    refused(acquire(&r, true).await);
    let cached = r.limiter.cached_rejections();
    r.counter.reset();
    // Limits defined otherwise than the bucket holds them: the table decides.
    let _ = r
        .limiter
        .acquire("key-1", RESOURCE, [("rpm", 1)])
        .limits([Limit::per_hour("rpm", 20)])
        .await;
    assert!(r.counter.total() > 0, "asked the table");
    assert_eq!(r.limiter.cached_rejections(), cached);
    // The bucket's own definition is refused from memory.
    refused(acquire(&r, true).await);
    assert_eq!(r.limiter.cached_rejections(), cached + 1);
}

#[tokio::test]
async fn another_process_refund_is_seen_once_the_entry_expires() {
    let r = rig().await;
    spend_all(&r, true).await;
    refused(acquire(&r, true).await);
    // Another process gives five tokens back (a rollback of its own).
    let ns = r.repo.namespace_id();
    r.table
        .client()
        .update_item()
        .table_name(r.table.name())
        .key(
            "PK",
            AttributeValue::S(format!("{ns}/BUCKET#key-1#{RESOURCE}#0")),
        )
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("ADD b_rpm_tk :five, b_rpm_tc :minus")
        .expression_attribute_values(":five", AttributeValue::N("5000".into()))
        .expression_attribute_values(":minus", AttributeValue::N("-5000".into()))
        .send()
        .await
        .expect("refund");
    // Within the time to live this process still refuses: the documented cost.
    refused(acquire(&r, true).await);
    r.clock.advance(Duration::from_millis(1001));
    let lease = acquire(&r, true)
        .await
        .expect("seen after the entry expired");
    lease.commit().await.unwrap();
}
