//! Buckets shared by both libraries: the same item spent alternately with identical balances
//! to the millitoken, both clients hammering one bucket together, and dynalimit refusing
//! (failing closed on) buckets that carry a 0.15–0.17 feature.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit, OnUnavailable, RateLimiter};
use dynalimit_core::{Clock, ManualClock, SystemClock};
use dynalimit_format::keys;
use dynalimit_repository::NewEntity;
use dynalimit_repository::Repository;
use serde_json::{Value, json};

use crate::python::{Python, shared_table};
use crate::timed::clocked;

const ENTITY: &str = "key-1";
const RESOURCE: &str = "gpt-4";

/// Who performs a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Rust,
    Python,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Rust => Side::Python,
            Side::Python => Side::Rust,
        }
    }
}

/// One acquire at a fixed instant and the bucket expected after it.
struct Step {
    /// Milliseconds after the script's start.
    at: i64,
    consume: &'static [(&'static str, i64)],
    /// Applied to the lease before it commits (whole tokens).
    adjust: &'static [(&'static str, i64)],
    /// `None`: admitted. `Some(ms)`: rejected with this retry-after, nothing written.
    rejected_retry_ms: Option<i64>,
    /// Expected `rf` (offset), then `(tk, tc)` in millitokens of `rpm` and `tpm`.
    rf: i64,
    rpm: (i64, i64),
    tpm: (i64, i64),
}

/// rpm 100/min and tpm 10 000/min from the resource defaults; every figure below is worked
/// out by hand from the reference's formulas (refill `elapsed × ra // rp`, capped at the
/// capacity; `rf` stamped at the write's instant; fast-path debits leave `rf` alone).
const SCRIPT: &[Step] = &[
    // Creates the bucket: 100 000 − 30 000; 10 000 000 − 4 000 000, then +123 tokens adjusted.
    Step {
        at: 0,
        consume: &[("rpm", 30), ("tpm", 4000)],
        adjust: &[("tpm", 123)],
        rejected_retry_ms: None,
        rf: 0,
        rpm: (70_000, 30_000),
        tpm: (5_877_000, 4_123_000),
    },
    // Fast path (enough tokens): plain debits, a credit of 1000 tokens, rf unchanged.
    Step {
        at: 777,
        consume: &[("rpm", 50), ("tpm", 5000)],
        adjust: &[("tpm", -1000)],
        rejected_retry_ms: None,
        rf: 0,
        rpm: (20_000, 80_000),
        tpm: (1_877_000, 8_123_000),
    },
    // Slow path: 1500 ms refill rpm 2500, tpm 250 000; then −21 000 rpm.
    Step {
        at: 1500,
        consume: &[("rpm", 21)],
        adjust: &[],
        rejected_retry_ms: None,
        rf: 1500,
        rpm: (1500, 101_000),
        tpm: (2_127_000, 8_123_000),
    },
    // Slow path: 4321 ms refill rpm 7201 (of 7201.67), tpm 720 166 (of 720 166.67).
    Step {
        at: 5821,
        consume: &[("rpm", 5), ("tpm", 2200)],
        adjust: &[],
        rejected_retry_ms: None,
        rf: 5821,
        rpm: (3701, 106_000),
        tpm: (647_166, 10_323_000),
    },
    // Slow path: 4178 ms refill rpm 6963 (of 6963.33), tpm 696 333 (of 696 333.33).
    Step {
        at: 9999,
        consume: &[("rpm", 10)],
        adjust: &[],
        rejected_retry_ms: None,
        rf: 9999,
        rpm: (664, 116_000),
        tpm: (1_343_499, 10_323_000),
    },
    // 1 ms later: 665 milli after refill; the deficit of 335 milli takes
    // (335 × 60 000 // 100 000 + 1) = 202 ms. Both refuse the same way and write nothing.
    Step {
        at: 10_000,
        consume: &[("rpm", 1)],
        adjust: &[],
        rejected_retry_ms: Some(202),
        rf: 9999,
        rpm: (664, 116_000),
        tpm: (1_343_499, 10_323_000),
    },
    Step {
        at: 10_000,
        consume: &[("rpm", 1)],
        adjust: &[],
        rejected_retry_ms: Some(202),
        rf: 9999,
        rpm: (664, 116_000),
        tpm: (1_343_499, 10_323_000),
    },
];

fn pairs(list: &[(&str, i64)]) -> Value {
    list.iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn number(item: &BTreeMap<String, AttributeValue>, name: &str) -> i64 {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().unwrap_or_else(|_| panic!("{name}={n}")),
        other => panic!("attribute {name} is {other:?}"),
    }
}

/// The bucket item of `entity` on `RESOURCE`, shard `shard` (empty when absent).
pub(crate) async fn bucket_item(
    repo: &Repository,
    entity: &str,
    shard: u32,
) -> BTreeMap<String, AttributeValue> {
    repo.client()
        .get_item()
        .table_name(repo.table_name())
        .key(
            "PK",
            AttributeValue::S(keys::bucket_pk(
                repo.namespace_id(),
                entity,
                RESOURCE,
                shard,
            )),
        )
        .key("SK", AttributeValue::S("#STATE".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .map(|i| i.into_iter().collect())
        .unwrap_or_default()
}

async fn spend_alternately(first: Side) {
    let (table, py) = shared_table!();
    let start = SystemClock.epoch_millis().div_euclid(1000) * 1000;
    let clock = ManualClock::new(start);
    let repo = clocked(&table, &clock).await;
    repo.create_entity(NewEntity::new(ENTITY)).await.unwrap();
    repo.set_resource_defaults(
        RESOURCE,
        &[
            Limit::per_minute("rpm", 100),
            Limit::per_minute("tpm", 10_000),
        ],
    )
    .await
    .unwrap();
    let limiter = RateLimiter::new(repo.clone());

    let mut side = first;
    for (i, step) in SCRIPT.iter().enumerate() {
        let now = start + step.at;
        let admitted_or_retry = match side {
            Side::Rust => {
                clock.set_epoch_millis(now);
                match limiter
                    .acquire(ENTITY, RESOURCE, step.consume.iter().map(|(k, v)| (*k, *v)))
                    .await
                {
                    Ok(lease) => {
                        for (name, delta) in step.adjust {
                            lease.adjust(name, *delta).unwrap();
                        }
                        lease.commit().await.unwrap();
                        None
                    }
                    Err(Error::Rejected(r)) => {
                        Some(i64::try_from(r.retry_after().unwrap().as_millis()).unwrap())
                    }
                    Err(e) => panic!("step {i} ({side:?}): {e}"),
                }
            }
            Side::Python => {
                let answer = py
                    .one(
                        "default",
                        json!({"op": "acquire", "entity": ENTITY, "resource": RESOURCE,
                               "consume": pairs(step.consume), "adjust": pairs(step.adjust),
                               "now_ms": now}),
                    )
                    .await;
                if answer["admitted"] == true {
                    None
                } else {
                    Some(answer["retry_after_ms"].as_i64().unwrap())
                }
            }
        };
        assert_eq!(
            admitted_or_retry, step.rejected_retry_ms,
            "step {i} ({side:?}): admitted (None) or retry-after in ms"
        );
        let item = bucket_item(&repo, ENTITY, 0).await;
        let got = (
            number(&item, "rf") - start,
            (number(&item, "b_rpm_tk"), number(&item, "b_rpm_tc")),
            (number(&item, "b_tpm_tk"), number(&item, "b_tpm_tc")),
        );
        assert_eq!(got, (step.rf, step.rpm, step.tpm), "step {i} ({side:?})");
        assert_eq!(
            number(&item, "ttl"),
            (start + step.rf).div_euclid(1000) + 420,
            "step {i} ({side:?}): ttl = rf seconds + 60 s x 7"
        );
        for (attr, value) in [
            ("b_rpm_cp", 100_000),
            ("b_rpm_ra", 100_000),
            ("b_rpm_rp", 60_000),
            ("b_tpm_cp", 10_000_000),
            ("b_tpm_ra", 10_000_000),
            ("b_tpm_rp", 60_000),
            ("shard_count", 1),
        ] {
            assert_eq!(number(&item, attr), value, "step {i} ({side:?}): {attr}");
        }
        side = side.other();
    }
}

#[tokio::test]
async fn a_bucket_created_by_dynalimit_is_spent_by_zae_limiter_to_the_millitoken() {
    spend_alternately(Side::Rust).await;
}

#[tokio::test]
async fn a_bucket_created_by_zae_limiter_is_spent_by_dynalimit_to_the_millitoken() {
    spend_alternately(Side::Python).await;
}

/// Both libraries hammer one 100-per-minute bucket, eight workers and 200 attempts each: the
/// Python side creates the bucket, the Rust side joins as soon as it exists.
#[tokio::test]
async fn both_libraries_together_never_admit_more_than_capacity_plus_refill() {
    const WORKERS: usize = 8;
    const ATTEMPTS: u64 = 200;
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    repo.create_entity(NewEntity::new(ENTITY)).await.unwrap();
    repo.set_limits(ENTITY, RESOURCE, &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());

    let begin = SystemClock.epoch_millis();
    let python = {
        let py: Python = py.clone();
        tokio::spawn(async move {
            py.one(
                "default",
                json!({"op": "hammer", "entity": ENTITY, "resource": RESOURCE,
                       "consume": {"rpm": 1}, "count": ATTEMPTS, "concurrency": WORKERS}),
            )
            .await
        })
    };
    // Join as soon as zae-limiter has created the bucket (bounded wait: 120 s).
    let mut created = false;
    for _ in 0..6000 {
        created = !bucket_item(&repo, ENTITY, 0).await.is_empty();
        if created {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(created, "zae-limiter never created the bucket");
    let next = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (limiter, next, admitted, rejected) = (
            limiter.clone(),
            Arc::clone(&next),
            Arc::clone(&admitted),
            Arc::clone(&rejected),
        );
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < ATTEMPTS {
                match limiter.acquire(ENTITY, RESOURCE, [("rpm", 1)]).await {
                    Ok(lease) => {
                        lease.commit().await.unwrap();
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::Rejected(_)) => {
                        rejected.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("dynalimit: {e}"),
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let python = python.await.unwrap();
    let finished = SystemClock.epoch_millis();

    let rust_admitted = admitted.load(Ordering::Relaxed);
    let py_admitted = python["admitted"].as_u64().unwrap();
    let py_rejected = python["rejected"].as_u64().unwrap();
    assert_eq!(
        py_admitted + py_rejected,
        ATTEMPTS,
        "every Python attempt answered"
    );
    let total = rust_admitted + py_admitted;
    // Capacity plus the refill of everything that could have run, from before the Python
    // process started to the last answer.
    let elapsed = finished - begin;
    let bound = 100 + u64::try_from(elapsed * 100 / 60_000).unwrap();
    eprintln!(
        "rust admitted {rust_admitted} (rejected {}), python admitted {py_admitted} (rejected \
         {py_rejected}), bound {bound} over {elapsed} ms",
        rejected.load(Ordering::Relaxed),
    );
    assert!(
        total <= bound,
        "admitted {total} > capacity + refill {bound}"
    );
    assert!(
        total >= 100,
        "the full capacity should have been admitted, got {total}"
    );
    assert!(
        rust_admitted > 0 && py_admitted > 0,
        "both sides got tokens"
    );
    assert!(
        rejected.load(Ordering::Relaxed) + py_rejected > 0,
        "attempts beyond capacity plus refill were refused"
    );
    // Every admitted token is in the consumption counter: no lost update on either side.
    let item = bucket_item(&repo, ENTITY, 0).await;
    let shards = number(&item, "shard_count");
    let mut consumed = 0;
    for shard in 0..u32::try_from(shards).unwrap() {
        consumed += number(&bucket_item(&repo, ENTITY, shard).await, "b_rpm_tc");
    }
    assert_eq!(consumed, i64::try_from(total).unwrap() * 1000);
}

/// Adds `attribute = value` to the bucket item by hand, as a 0.15–0.17 writer would.
async fn stamp(repo: &Repository, entity: &str, attribute: &str, value: AttributeValue) {
    repo.client()
        .update_item()
        .table_name(repo.table_name())
        .key(
            "PK",
            AttributeValue::S(keys::bucket_pk(repo.namespace_id(), entity, RESOURCE, 0)),
        )
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", attribute)
        .expression_attribute_values(":v", value)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn dynalimit_fails_closed_on_buckets_it_cannot_read() {
    let cases: [(&str, AttributeValue); 5] = [
        // A session window's length that is not a number.
        ("b_rpm_rsa", AttributeValue::S("1h".into())),
        // A schedule that does not decode: not the encoding, and a newer encoding version.
        ("sched", AttributeValue::S("1|0 9 * * 1-5|UTC|50".into())),
        ("sched", AttributeValue::S("2h9s500".into())),
        ("b_rpm_ws", AttributeValue::S("1700000000000".into())),
        // A reset schedule that does not decode (a modifier has no place in it).
        ("rsched", AttributeValue::S("1m0h0s500".into())),
    ];
    let (table, py) = shared_table!();
    let repo = table.repository("default").await;
    let limiter = RateLimiter::with_on_unavailable(repo.clone(), OnUnavailable::Block);
    let mut entity = 0;
    for (attribute, value) in cases {
        entity += 1;
        let id = format!("key-{entity}");
        repo.create_entity(NewEntity::new(&id)).await.unwrap();
        repo.set_limits(&id, RESOURCE, &[Limit::per_minute("rpm", 10)])
            .await
            .unwrap();
        // zae-limiter creates the bucket and spends it down to 2 tokens.
        let made = py
            .one(
                "default",
                json!({"op": "acquire", "entity": id, "resource": RESOURCE,
                       "consume": {"rpm": 8}}),
            )
            .await;
        assert_eq!(made["admitted"], true);
        stamp(&repo, &id, attribute, value).await;
        let before = bucket_item(&repo, &id, 0).await;

        // More than is left: the fast path fails and the slow path must interpret the item.
        let refused = limiter.acquire(&id, RESOURCE, [("rpm", 5)]).await;
        match refused {
            Err(Error::Unavailable { message, .. }) => {
                assert!(!message.is_empty(), "{attribute}: the reason is named");
            }
            other => panic!("{attribute}: expected a fail-closed refusal, got {other:?}"),
        }
        let after = bucket_item(&repo, &id, 0).await;
        assert_eq!(before, after, "{attribute}: nothing was written");
        assert!(
            matches!(
                limiter.available(&id, RESOURCE, &[]).await,
                Err(Error::Unavailable { .. })
            ),
            "{attribute}: available() refuses too"
        );
    }
}

/// A bucket that sat full ten minutes, materialised by dynalimit's first debit after it: zae-limiter
/// reads the materialised item as the shared format says and spends exactly what is left (9 of
/// 10), where the unmaterialised item would have given it the wasted refill (10 more).
#[tokio::test]
async fn zae_limiter_spends_a_bucket_dynalimit_materialised_to_the_millitoken() {
    let (table, py) = shared_table!();
    let start = SystemClock.epoch_millis().div_euclid(1000) * 1000;
    let clock = ManualClock::new(start);
    let repo = clocked(&table, &clock).await;
    repo.create_entity(NewEntity::new(ENTITY)).await.unwrap();
    // At the entity level: the bucket has no time-to-live, so it stays through the wait.
    repo.set_limits(ENTITY, RESOURCE, &[Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    let spend = || async {
        limiter
            .acquire(ENTITY, RESOURCE, [("rpm", 1)])
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
    };
    spend().await;
    let now = start + 600_000;
    clock.set_epoch_millis(now);
    spend().await;
    let item = bucket_item(&repo, ENTITY, 0).await;
    assert_eq!(
        (number(&item, "rf"), number(&item, "b_rpm_tk")),
        (now, 9_000),
        "materialised: rf moved to now, the balance clamped at 10 before the debit"
    );
    let mut answers = Vec::new();
    for amount in [9, 1] {
        let answer = py
            .one(
                "default",
                json!({"op": "acquire", "entity": ENTITY, "resource": RESOURCE,
                       "consume": pairs(&[("rpm", amount)]), "adjust": pairs(&[]),
                       "now_ms": now}),
            )
            .await;
        answers.push(answer["admitted"] == true);
    }
    assert_eq!(answers, [true, false], "9 admitted, then nothing left");
    let item = bucket_item(&repo, ENTITY, 0).await;
    assert_eq!(number(&item, "b_rpm_tk"), 0);
    assert_eq!(number(&item, "b_rpm_tc"), 11_000);
}
