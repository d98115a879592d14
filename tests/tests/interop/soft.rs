//! Soft limits (reference §12.4) and bypass (§12.1) written by zae-limiter 0.17 and honoured
//! by dynalimit, with both libraries admitted past the bucket's capacity.
//!
//! Storing a soft limit or a bypass raises the table's minimum client version to 0.17.0, above the
//! version dynalimit declares until scheduled limits and quotas are implemented as well; the
//! test lowers it again after the write, which is what declaring 0.17.0 will make
//! unnecessary. Everything else is as on a shared table.

use dynalimit::RateLimiter;
use serde_json::json;

use crate::python::{Python, shared_table};

const NS: &str = "soft";

/// Four rounds of one zae-limiter acquire and one dynalimit acquire of 1 rpm by `k` on gpt-4,
/// each admitted; per dynalimit lease, `(overdrawn limits, bypassed)`.
async fn alternate(python: &Python, limiter: &RateLimiter) -> Vec<(usize, bool)> {
    let python_acquire = json!({"op": "acquire", "entity": "k", "resource": "gpt-4",
                                "consume": {"rpm": 1}});
    let mut seen = Vec::new();
    for _ in 0..4 {
        assert_eq!(
            python.one(NS, python_acquire.clone()).await["admitted"],
            json!(true)
        );
        let lease = limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .await
            .expect("admitted whatever the balance");
        seen.push((lease.overdrawn().len(), lease.bypassed()));
        lease.commit().await.unwrap();
    }
    limiter.settle().await;
    seen
}

#[tokio::test]
async fn a_soft_limit_written_by_zae_limiter_is_debited_by_both_past_its_capacity() {
    let (table, python) = shared_table!();
    table.repository(NS).await;
    let soft_rpm = json!({"name": "rpm", "capacity": 3, "refill_amount": 3,
                          "refill_period_seconds": 60, "soft": true});
    let hard_tpm = json!({"name": "tpm", "capacity": 100, "refill_amount": 100,
                          "refill_period_seconds": 60});
    python
        .one(
            NS,
            json!({"op": "set_resource_defaults", "resource": "gpt-4",
                   "limits": [soft_rpm, hard_tpm]}),
        )
        .await;
    let repo = table.repository(NS).await;
    let limiter = RateLimiter::new(repo.clone());
    let overdrawn: usize = alternate(&python, &limiter)
        .await
        .iter()
        .map(|(o, _)| o)
        .sum();
    assert!(
        overdrawn >= 3,
        "dynalimit saw the debt it made: {overdrawn}"
    );
    let item = crate::buckets::bucket_item(&repo, "k", 0).await;
    let n = |k: &str| item[k].as_n().unwrap().parse::<i64>().unwrap();
    assert_eq!(n("b_rpm_tc"), 8000, "eight debits, to the millitoken");
    assert!(
        n("b_rpm_tk") <= 3000 - 8000 + 1000,
        "in debt: {}",
        n("b_rpm_tk")
    );
    assert!(item.contains_key("b_rpm_soft"));
    // The hard limit of the same bucket still refuses on both sides.
    assert!(limiter.acquire("k", "gpt-4", [("tpm", 101)]).await.is_err());
    let refused = python
        .one(
            NS,
            json!({"op": "acquire", "entity": "k", "resource": "gpt-4",
                        "consume": {"tpm": 101}}),
        )
        .await;
    assert_eq!(refused["admitted"], json!(false));
}

#[tokio::test]
async fn a_bypass_stored_by_zae_limiter_admits_both_and_counts_every_request() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    repo.set_resource_defaults("gpt-4", &[dynalimit::Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    python
        .one(
            NS,
            json!({"op": "access", "method": "bypass_resource", "args": ["gpt-4"]}),
        )
        .await;
    let repo = table.repository(NS).await;
    let limiter = RateLimiter::new(repo.clone());
    let bypassed = alternate(&python, &limiter)
        .await
        .iter()
        .filter(|(_, b)| *b)
        .count();
    assert_eq!(
        bypassed, 4,
        "dynalimit saw the stamp zae-limiter's create wrote"
    );
    let item = crate::buckets::bucket_item(&repo, "k", 0).await;
    let n = |k: &str| item[k].as_n().unwrap().parse::<i64>().unwrap();
    assert_eq!(
        n("b_rpm_tc"),
        8000,
        "eight requests counted, to the millitoken"
    );
    assert!(
        n("b_rpm_tk") >= 2000,
        "at most the create's debit: {}",
        n("b_rpm_tk")
    );
    assert!(item.contains_key("bypass"));
}
