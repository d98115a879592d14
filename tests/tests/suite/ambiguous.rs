//! Writes whose answer is lost after DynamoDB applied them (issue: ambiguous outcomes), on the
//! fast path and on the SDK path alike: an applied write is never applied twice, an unknown
//! consume is reported as unavailable, an unknown credit is never escalated to the unguarded
//! trim, and an answer whose 2xx status arrived counts as applied.

use std::time::Duration;

use aws_smithy_types::timeout::TimeoutConfig;
use dynalimit::{Error, OnUnavailable};
use dynalimit_format::item::get_i64;
use dynalimit_repository::RepositoryError;

use super::fast_path::{Rig, rig_edited};
/// One request of `rpm`, in millitokens.
const ONE: i64 = 1000;

/// A repository through a fault proxy whose client would retry up to 3 times, with a 1 s
/// attempt timeout; `fast` chooses the transport of bucket writes.
async fn rig(fast: bool) -> Rig {
    rig_edited(fast, |config| {
        config.timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(1))
                .build(),
        )
    })
    .await
}

impl Rig {
    /// `(tk, tc)` of `rpm` on `entity`'s bucket.
    pub(crate) async fn rpm(&self, entity: &str) -> (i64, i64) {
        let item = self.bucket(entity).await;
        (
            get_i64(&item, "b_rpm_tk").unwrap(),
            get_i64(&item, "b_rpm_tc").unwrap(),
        )
    }

    /// An acquire under `block` whose consume is answered ambiguously: unavailable, with the
    /// consume sent once and applied once.
    pub(crate) async fn unknown_consume_is_unavailable_and_counted_once(&self, entity: &str) {
        let (_, tc_before) = self.rpm(entity).await;
        let refused = self
            .limiter
            .acquire(entity, "gpt-4", [("rpm", 1)])
            .on_unavailable(OnUnavailable::Block)
            .await;
        match refused {
            Err(Error::Unavailable { message, .. }) => {
                assert!(
                    message.contains("may or may not have been applied"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(self.proxy.pending(), 0, "the fault was served");
        assert_eq!(self.counter.count("UpdateItem"), 1, "never sent again");
        let (_, tc_after) = self.rpm(entity).await;
        assert_eq!(tc_after - tc_before, ONE, "applied exactly once");
    }
}

async fn a_consume_answered_5xx_after_it_landed(fast: bool) {
    let r = rig(fast).await;
    r.warm("a").await;
    r.proxy.lose_next_answer("UpdateItem", 1);
    r.unknown_consume_is_unavailable_and_counted_once("a").await;
}

#[tokio::test]
async fn fast_path_a_consume_answered_5xx_after_it_landed_is_unknown_and_counted_once() {
    a_consume_answered_5xx_after_it_landed(true).await;
}

#[tokio::test]
async fn sdk_path_a_consume_answered_5xx_after_it_landed_is_unknown_and_counted_once() {
    a_consume_answered_5xx_after_it_landed(false).await;
}

async fn a_consume_never_answered(fast: bool) {
    let r = rig(fast).await;
    r.warm("a").await;
    r.proxy.hang_after_applying("UpdateItem", 1);
    r.unknown_consume_is_unavailable_and_counted_once("a").await;
}

#[tokio::test]
async fn fast_path_a_consume_that_timed_out_after_it_landed_is_unknown_and_counted_once() {
    a_consume_never_answered(true).await;
}

#[tokio::test]
async fn sdk_path_a_consume_that_timed_out_after_it_landed_is_unknown_and_counted_once() {
    a_consume_never_answered(false).await;
}

async fn a_cut_answer_with_a_2xx_status(fast: bool) {
    let r = rig(fast).await;
    r.warm("a").await;
    let (_, tc_before) = r.rpm("a").await;
    r.proxy.cut_answer_body("UpdateItem", 1);
    let lease = r
        .limiter
        .acquire("a", "gpt-4", [("rpm", 1)])
        .on_unavailable(OnUnavailable::Block)
        .await
        .expect("a 2xx status is an applied consume");
    assert!(!lease.is_degraded());
    assert_eq!(r.proxy.pending(), 0, "the fault was served");
    assert_eq!(r.counter.count("UpdateItem"), 1, "never sent again");
    // The item the answer would have carried is read back.
    assert_eq!(r.counter.count("GetItem"), 1, "{:?}", r.counter.snapshot());
    lease.commit().await.unwrap();
    let (_, tc_after) = r.rpm("a").await;
    assert_eq!(tc_after - tc_before, ONE, "applied exactly once");
}

#[tokio::test]
async fn fast_path_a_consume_whose_2xx_answer_was_cut_counts_as_applied() {
    a_cut_answer_with_a_2xx_status(true).await;
}

#[tokio::test]
async fn sdk_path_a_consume_whose_2xx_answer_was_cut_counts_as_applied() {
    a_cut_answer_with_a_2xx_status(false).await;
}

async fn a_rollback_answered_5xx_after_it_landed(fast: bool) {
    let r = rig(fast).await;
    r.warm("a").await;
    let before = r.rpm("a").await;
    let lease = r
        .limiter
        .acquire("a", "gpt-4", [("rpm", 1)])
        .await
        .expect("admitted");
    let debited = r.rpm("a").await;
    assert_eq!(debited.1 - before.1, ONE);
    r.counter.reset();
    r.proxy.lose_next_answer("UpdateItem", 1);
    let err = lease
        .rollback()
        .await
        .expect_err("the credit's outcome is unknown");
    assert!(
        matches!(
            err,
            Error::LeaseWrite(RepositoryError::OutcomeUnknown { .. })
        ),
        "{err:?}"
    );
    assert_eq!(r.proxy.pending(), 0, "the fault was served");
    // One guarded credit, applied once; never sent again, never escalated to the trim.
    assert_eq!(
        r.counter.count("UpdateItem"),
        1,
        "{:?}",
        r.counter.snapshot()
    );
    let after = r.rpm("a").await;
    assert_eq!(after.1, before.1, "the credit landed once");
    assert_eq!(
        after.0,
        debited.0 + ONE,
        "the credit gave back one request, not two"
    );
    assert_ne!(
        get_i64(&r.bucket("a").await, "vu"),
        Some(0),
        "the unguarded trim was not written"
    );
}

#[tokio::test]
async fn fast_path_a_rollback_answered_5xx_after_it_landed_is_credited_once() {
    a_rollback_answered_5xx_after_it_landed(true).await;
}

#[tokio::test]
async fn sdk_path_a_rollback_answered_5xx_after_it_landed_is_credited_once() {
    a_rollback_answered_5xx_after_it_landed(false).await;
}

#[tokio::test]
async fn an_unknown_consume_under_allow_is_admitted_degraded() {
    let r = rig(true).await;
    r.warm("a").await;
    let (_, tc_before) = r.rpm("a").await;
    r.proxy.lose_next_answer("UpdateItem", 1);
    let lease = r
        .limiter
        .acquire("a", "gpt-4", [("rpm", 1)])
        .on_unavailable(OnUnavailable::Allow)
        .await
        .expect("admitted degraded");
    assert!(lease.is_degraded());
    lease.rollback().await.unwrap();
    let (_, tc_after) = r.rpm("a").await;
    // The consume landed; the degraded lease credits nothing back (it cannot know it landed).
    assert_eq!(tc_after - tc_before, ONE);
    assert_eq!(r.counter.count("UpdateItem"), 1);
}

#[tokio::test]
async fn a_throttled_consume_is_still_sent_again() {
    for fast in [true, false] {
        let r = rig(fast).await;
        r.warm("a").await;
        let (_, tc_before) = r.rpm("a").await;
        r.proxy
            .fail_next("UpdateItem", "ProvisionedThroughputExceededException", 2);
        r.spend("a").await;
        assert_eq!(r.counter.count("UpdateItem"), 3, "fast path: {fast}");
        let (_, tc_after) = r.rpm("a").await;
        assert_eq!(tc_after - tc_before, ONE);
    }
}

/// The create of a bucket is a transaction: the SDK sends it again with the same
/// `ClientRequestToken`, which DynamoDB answers as the first time without applying it again.
#[tokio::test]
async fn a_bucket_create_answered_5xx_after_it_landed_is_applied_once() {
    for fast in [true, false] {
        let r = rig(fast).await;
        r.proxy.clear_requests();
        r.proxy.lose_next_answer("TransactWriteItems", 1);
        let lease = r
            .limiter
            .acquire("fresh", "gpt-4", [("rpm", 1)])
            .on_unavailable(OnUnavailable::Block)
            .await;
        assert_eq!(r.proxy.pending(), 0, "the fault was served");
        let sent: Vec<_> = r
            .proxy
            .requests()
            .into_iter()
            .filter(|q| q.operation == "TransactWriteItems")
            .map(|q| q.body["ClientRequestToken"].clone())
            .collect();
        assert_eq!(sent.len(), 2, "sent again: {sent:?}");
        assert!(sent[0].is_string() && sent[0] == sent[1], "{sent:?}");
        lease.expect("the create landed").commit().await.unwrap();
        // Created once, with one request consumed of 100.
        let (tk, tc) = r.rpm("fresh").await;
        assert_eq!((tk, tc), (100 * ONE - ONE, ONE), "fast path: {fast}");
    }
}
