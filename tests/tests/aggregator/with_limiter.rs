//! Real acquires, adjustments and rollbacks of the RateLimiter reach the snapshots exactly.

use dynalimit::{Limit, RateLimiter};
use dynalimit_repository::UsageQuery;

use super::{counters, drain, runner};

#[tokio::test]
async fn acquires_adjustments_and_rollbacks_sum_to_the_consumed_tokens() {
    let table = dynalimit_tests::table().await;
    // Acquires stay clear of hour 00, whose snapshot item is also the day's.
    let repo = table
        .builder()
        .namespace("limiter")
        .clock(dynalimit_tests::clock_clear_of_midnight())
        .open()
        .await
        .unwrap();
    repo.set_resource_defaults(
        "gpt-4",
        &[
            Limit::per_minute("rpm", 1000),
            Limit::per_minute("tpm", 1_000_000),
        ],
    )
    .await
    .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let (mut rpm, mut tpm) = (0, 0);
    for i in 0..12i64 {
        let entity = if i % 3 == 0 { "bob" } else { "alice" };
        let lease = limiter
            .acquire(entity, "gpt-4", [("rpm", 1), ("tpm", 100 + i)])
            .await
            .expect("admitted");
        match i % 4 {
            // Rolled back: nothing consumed in the end.
            0 => lease.rollback().await.unwrap(),
            // Adjusted up after the fact.
            1 => {
                lease.adjust("tpm", 250).unwrap();
                lease.commit().await.unwrap();
                if entity == "alice" {
                    rpm += 1;
                    tpm += 100 + i + 250;
                }
            }
            // Returned part of the estimate.
            2 => {
                lease.give_back("tpm", 40).unwrap();
                lease.commit().await.unwrap();
                if entity == "alice" {
                    rpm += 1;
                    tpm += 100 + i - 40;
                }
            }
            _ => {
                lease.commit().await.unwrap();
                if entity == "alice" {
                    rpm += 1;
                    tpm += 100 + i;
                }
            }
        }
    }
    limiter.settle().await;

    let mut r = runner(&table).await;
    let report = drain(&mut r).await;
    assert_eq!(report.failed, 0, "{report:?}");
    for window in ["hourly", "daily"] {
        let summary = repo
            .usage_summary(&UsageQuery::entity("alice").with_window(window))
            .await
            .unwrap();
        assert_eq!(
            summary.total,
            counters(&[("rpm", rpm), ("tpm", tpm)]),
            "{window}"
        );
    }
    // Processing the whole stream again changes nothing.
    let before = super::snapshot_items(&table).await;
    let again = drain(&mut runner(&table).await).await;
    assert_eq!(again.counted, 0, "{again:?}");
    assert_eq!(super::snapshot_items(&table).await, before);
}
