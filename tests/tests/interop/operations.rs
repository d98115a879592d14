//! Resets and top-ups across the two libraries (reference §12.6, §1.4.8): what one writes, the
//! other reads to the millitoken and admits the same way, and an operation record written by
//! one answers the other's call with the same idempotency key.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::ManualClock;
use dynalimit_repository::{NewEntity, OperationOptions, Repository, RepositoryError};
use dynalimit_tests::TestTable;
use dynalimit_tests::raw::put_shard;
use serde_json::{Value, json};

use crate::buckets::bucket_item;
use crate::python::shared_table;

const RESOURCE: &str = "gpt-4";
/// The `rf` of the buckets as put.
const T0: i64 = 1_700_000_000_000;

/// A repository whose bucket clock stands at `T0 + offset`.
async fn at(table: &TestTable, offset: i64) -> Repository {
    table
        .builder()
        .namespace("default")
        .principal("interop")
        .clock(Arc::new(ManualClock::new(T0 + offset)))
        .open()
        .await
        .unwrap()
}

/// Creates `entity` (dynalimit) with rpm 100/min on `RESOURCE`, and its bucket: one shard per
/// balance in `tks`, `rf = T0`.
async fn entity_with_bucket(table: &TestTable, repo: &Repository, entity: &str, tks: &[i64]) {
    repo.create_entity(NewEntity::new(entity)).await.unwrap();
    repo.set_limits(entity, RESOURCE, &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let count = u32::try_from(tks.len()).unwrap();
    for (shard, tk) in (0u32..).zip(tks) {
        let (ns, limits) = (repo.namespace_id(), &[("rpm", 100, 100, 60)]);
        put_shard(
            table,
            ns,
            entity,
            RESOURCE,
            (shard, count),
            limits,
            &[("rpm", *tk)],
        )
        .await;
    }
}

/// The state of `entity`'s shards: every attribute but those naming the item.
async fn state(
    repo: &Repository,
    entity: &str,
    shards: u32,
) -> Vec<BTreeMap<String, AttributeValue>> {
    let mut out = Vec::new();
    for shard in 0..shards {
        let mut item = bucket_item(repo, entity, shard).await;
        item.retain(|k, _| k != "PK" && k != "entity_id" && !k.starts_with("GSI"));
        out.push(item);
    }
    out
}

fn tk(state: &[BTreeMap<String, AttributeValue>], shard: usize) -> i64 {
    match &state[shard]["b_rpm_tk"] {
        AttributeValue::N(n) => n.parse().unwrap(),
        other => panic!("{other:?}"),
    }
}

/// A Python operation at `T0 + offset`.
fn py_op(op: &str, entity: &str, offset: i64, extra: Value) -> Value {
    let mut doc = json!({"op": op, "entity": entity, "resource": RESOURCE, "now_ms": T0 + offset,
                         "principal": "interop"});
    if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
        doc.extend(extra.clone());
    }
    doc
}

/// Both libraries top up and then reset twin two-shard buckets at the same instants: the
/// buckets are identical to the millitoken after each step, whichever library wrote, and
/// each library reads the other's result as its own.
#[tokio::test]
async fn a_top_up_and_a_reset_leave_identical_buckets_whichever_library_writes() {
    let (table, py) = shared_table!();
    let repo = at(&table, 30_000).await;
    // Two shards, ceiling 50 000 each, 50 000/min each: 30 s later shard 0 holds 25 000 and
    // shard 1 45 000.
    entity_with_bucket(&table, &repo, "by-python", &[0, 20_000]).await;
    entity_with_bucket(&table, &repo, "by-rust", &[0, 20_000]).await;

    let py_top = py
        .one(
            "default",
            py_op(
                "top_up",
                "by-python",
                30_000,
                json!({"amounts": {"rpm": 12}}),
            ),
        )
        .await;
    let rs_top = repo
        .top_up("by-rust", RESOURCE, [("rpm", 12)], &OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(py_top["shards"], 2);
    assert_eq!(py_top["amounts"], json!(rs_top.amounts));
    let python_wrote = state(&repo, "by-python", 2).await;
    assert_eq!(python_wrote, state(&repo, "by-rust", 2).await);
    // 12 × 25 // 30 = 10 and 12 × 5 // 30 = 2.
    assert_eq!(
        (tk(&python_wrote, 0), tk(&python_wrote, 1)),
        (35_000, 47_000)
    );

    // Each reads the other's buckets: 82 tokens across the shards.
    let limiter = RateLimiter::new(repo.clone());
    for entity in ["by-python", "by-rust"] {
        assert_eq!(
            limiter.available(entity, RESOURCE, &[]).await.unwrap()["rpm"],
            82
        );
        let seen = py
            .one("default", py_op("available", entity, 30_000, json!({})))
            .await;
        assert_eq!(seen["rpm"], 82, "{entity}");
    }

    // 10 s later both reset: every shard back to 50 000.
    let later = at(&table, 40_000).await;
    let py_reset = py
        .one(
            "default",
            py_op("reset_bucket", "by-python", 40_000, json!({})),
        )
        .await;
    let rs_reset = later
        .reset_bucket("by-rust", RESOURCE, &OperationOptions::new())
        .await
        .unwrap();
    // Refill of 10 s: +8 333 on each; restored 50 000 − 43 333 + 50 000 − 50 000 → 6.
    assert_eq!(py_reset["amounts"], json!(rs_reset.amounts));
    assert_eq!(rs_reset.amounts["rpm"], 6);
    let python_reset = state(&repo, "by-python", 2).await;
    assert_eq!(python_reset, state(&repo, "by-rust", 2).await);
    assert_eq!(
        (tk(&python_reset, 0), tk(&python_reset, 1)),
        (50_000, 50_000)
    );
}

/// After the other library's top-up, each admits exactly the balance and refuses one more.
#[tokio::test]
async fn each_library_admits_what_the_other_topped_up() {
    let (table, py) = shared_table!();
    let repo = at(&table, 30_000).await;
    // One shard: 10 000 + 50 000 refilled; a top-up of 50 fits 40.
    entity_with_bucket(&table, &repo, "py-topped", &[10_000]).await;
    entity_with_bucket(&table, &repo, "rs-topped", &[10_000]).await;
    let granted = py
        .one(
            "default",
            py_op(
                "top_up",
                "py-topped",
                30_000,
                json!({"amounts": {"rpm": 50}}),
            ),
        )
        .await;
    assert_eq!(granted["amounts"], json!({"rpm": 40}));
    let limiter = RateLimiter::new(repo.clone());
    assert!(matches!(
        limiter.acquire("py-topped", RESOURCE, [("rpm", 101)]).await,
        Err(Error::Rejected(_))
    ));
    limiter
        .acquire("py-topped", RESOURCE, [("rpm", 100)])
        .await
        .expect("dynalimit admits the whole topped-up balance")
        .commit()
        .await
        .unwrap();
    assert!(matches!(
        limiter.acquire("py-topped", RESOURCE, [("rpm", 1)]).await,
        Err(Error::Rejected(_))
    ));

    let done = repo
        .top_up(
            "rs-topped",
            RESOURCE,
            [("rpm", 50)],
            &OperationOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(done.amounts["rpm"], 40);
    let outcomes = py
        .ok(
            "default",
            vec![
                py_op(
                    "acquire",
                    "rs-topped",
                    30_000,
                    json!({"consume": {"rpm": 101}}),
                ),
                py_op(
                    "acquire",
                    "rs-topped",
                    30_000,
                    json!({"consume": {"rpm": 100}}),
                ),
                py_op(
                    "acquire",
                    "rs-topped",
                    30_000,
                    json!({"consume": {"rpm": 1}}),
                ),
            ],
        )
        .await;
    let admitted: Vec<bool> = outcomes
        .iter()
        .map(|o| o["admitted"].as_bool().unwrap())
        .collect();
    assert_eq!(admitted, [false, true, false]);
}

/// An operation record written by either library answers the other's call with the same key:
/// the stored result comes back and nothing is applied twice; a key of the other kind is
/// refused by both.
#[tokio::test]
async fn an_idempotency_key_is_recognised_by_the_other_library() {
    let (table, py) = shared_table!();
    let repo = at(&table, 1_000).await;
    entity_with_bucket(&table, &repo, "shared", &[0]).await;

    // dynalimit first: 1 s of refill (1 666), then 30 granted.
    let first = repo
        .top_up(
            "shared",
            RESOURCE,
            [("rpm", 30)],
            &OperationOptions::new().idempotency_key("rust-1"),
        )
        .await
        .unwrap();
    assert_eq!(first.amounts["rpm"], 30);
    let after_rust = state(&repo, "shared", 1).await;
    assert_eq!(tk(&after_rust, 0), 31_666);
    let replay = py
        .one(
            "default",
            py_op(
                "top_up",
                "shared",
                2_000,
                json!({"amounts": {"rpm": 30}, "idempotency_key": "rust-1"}),
            ),
        )
        .await;
    assert_eq!(
        replay,
        json!({"entity_id": "shared", "resource": RESOURCE, "shards": 1, "amounts": {"rpm": 30}})
    );
    assert_eq!(
        state(&repo, "shared", 1).await,
        after_rust,
        "Python applied nothing"
    );

    // Python first: 1 s more refill, 20 granted.
    let python = py
        .one(
            "default",
            py_op(
                "top_up",
                "shared",
                2_000,
                json!({"amounts": {"rpm": 20}, "idempotency_key": "python-1"}),
            ),
        )
        .await;
    assert_eq!(python["amounts"], json!({"rpm": 20}));
    let after_python = state(&repo, "shared", 1).await;
    assert_eq!(tk(&after_python, 0), 31_666 + 1_666 + 20_000);
    let later = at(&table, 3_000).await;
    let replayed = later
        .top_up(
            "shared",
            RESOURCE,
            [("rpm", 20)],
            &OperationOptions::new().idempotency_key("python-1"),
        )
        .await
        .unwrap();
    assert!(replayed.replayed);
    assert_eq!((replayed.shards, replayed.amounts["rpm"]), (1, 20));
    assert_eq!(
        state(&repo, "shared", 1).await,
        after_python,
        "dynalimit applied nothing"
    );

    // A top-up's key is not a reset's, whoever wrote it.
    let refused = py
        .run(
            "default",
            vec![py_op(
                "reset_bucket",
                "shared",
                3_000,
                json!({"idempotency_key": "rust-1"}),
            )],
        )
        .await;
    let error = refused[0].clone().unwrap_err();
    assert_eq!(error.kind, "ValidationError", "{}", error.message);
    let error = later
        .reset_bucket(
            "shared",
            RESOURCE,
            &OperationOptions::new().idempotency_key("python-1"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, RepositoryError::IdempotencyKeyReused { .. }),
        "{error}"
    );
    assert_eq!(state(&repo, "shared", 1).await, after_python);

    // Python's reset under a key, replayed by dynalimit.
    let reset = py
        .one(
            "default",
            py_op(
                "reset_bucket",
                "shared",
                3_000,
                json!({"idempotency_key": "py-reset"}),
            ),
        )
        .await;
    let after_reset = state(&repo, "shared", 1).await;
    assert_eq!(tk(&after_reset, 0), 100_000);
    let seen = later
        .reset_bucket(
            "shared",
            RESOURCE,
            &OperationOptions::new().idempotency_key("py-reset"),
        )
        .await
        .unwrap();
    assert!(seen.replayed);
    assert_eq!(json!(seen.amounts), reset["amounts"]);
    assert_eq!(state(&repo, "shared", 1).await, after_reset);
}
