//! A bucket that splits while zae-limiter 0.17 and dynalimit spend it together (reference
//! §3.8): dynalimit's split moves part of every shard's balance to the shard it splits into,
//! created in the same transaction, so zae-limiter finds every shard of the new count there,
//! funded, and the two libraries together admit the allowance and never more.
//!
//! Both clocks stand still at the same instant (zae-limiter's through the driver's `now_ms`,
//! dynalimit's through a `ManualClock`): nothing refills, and the allowance is the capacity.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::{Clock, ManualClock, SystemClock};
use dynalimit_format::bucket::BucketKey;
use dynalimit_repository::Repository;
use serde_json::json;

use crate::buckets::bucket_item;
use crate::python::shared_table;
use crate::timed::clocked;

const NS: &str = "default";
/// 2026-07-15 12:00 UTC.
const NOON: i64 = 1_784_116_800_000;
/// The allowance: 96 a day, so every share up to 32 shards is a whole number of tokens.
const ALLOWANCE: i64 = 96;

/// Σ `b_rpm_tc` over shards `0..count` of `k`'s bucket, in whole tokens.
async fn consumed(repo: &Repository, count: u32) -> i64 {
    recorded(repo, "k", count).await
}

/// Σ `b_rpm_tc` over shards `0..count` of `entity`'s bucket, in whole tokens.
async fn recorded(repo: &Repository, entity: &str, count: u32) -> i64 {
    let mut tc = 0;
    for shard in 0..count {
        if let Some(n) = bucket_item(repo, entity, shard).await.get("b_rpm_tc") {
            tc += n.as_n().unwrap().parse::<i64>().unwrap();
        }
    }
    tc / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bucket_split_while_both_libraries_spend_it_admits_the_allowance_and_no_more() {
    let (table, python) = shared_table!();
    let clock = ManualClock::new(NOON);
    let repo = clocked(&table, &clock).await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_day("rpm", ALLOWANCE)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());
    limiter
        .acquire("k", "gpt-4", [("rpm", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();

    // Both libraries start at the same wall-clock second, once the Python process is up, and
    // together ask for more than three times the allowance.
    let wall = || SystemClock.epoch_millis() as f64 / 1000.0;
    let start = wall() + 4.0;
    let until_start = move || Duration::from_secs_f64((start - wall()).max(0.0));
    let py = python.one(
        NS,
        json!({"op": "hammer", "entity": "k", "resource": "gpt-4", "consume": {"rpm": 1},
               "count": 160, "concurrency": 4, "now_ms": NOON, "start_at": start}),
    );
    let rust = async {
        tokio::time::sleep(until_start()).await;
        let admitted = Arc::new(AtomicI64::new(0));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (limiter, admitted) = (limiter.clone(), admitted.clone());
                tokio::spawn(async move {
                    for _ in 0..40 {
                        match limiter.acquire("k", "gpt-4", [("rpm", 1)]).await {
                            Ok(lease) => {
                                lease.commit().await.unwrap();
                                admitted.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Error::Rejected(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        admitted.load(Ordering::SeqCst)
    };
    // The bucket splits while both spend it: to 2 shards once a fifth of the allowance is
    // spent, to 4 once half is.
    let running = Arc::new(AtomicBool::new(true));
    let splitter = {
        let (repo, running) = (repo.clone(), running.clone());
        tokio::spawn(async move {
            tokio::time::sleep(until_start()).await;
            let key = BucketKey::new("k", "gpt-4", 0);
            let mut splits = Vec::new();
            for (from, to, spent) in [(1, 2, ALLOWANCE / 5), (2, 4, ALLOWANCE / 2)] {
                while running.load(Ordering::SeqCst) && consumed(&repo, from).await < spent {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if !running.load(Ordering::SeqCst) {
                    break;
                }
                let split = repo.buckets().double_shards(&key, from, to, NOON).await;
                splits.push((split.unwrap().count, consumed(&repo, to).await));
            }
            splits
        })
    };
    let (py, rust) = tokio::join!(py, rust);
    running.store(false, Ordering::SeqCst);
    let splits = splitter.await.unwrap();
    let py = py["admitted"].as_i64().unwrap();
    let total = 1 + rust + py;
    println!("rust {rust}, python {py}, splits (count, spent when split) {splits:?}");

    assert_eq!(
        splits.len(),
        2,
        "the bucket split twice while both spent it"
    );
    assert!(
        splits.iter().all(|(_, spent)| *spent < ALLOWANCE),
        "both splits happened before the allowance was spent: {splits:?}"
    );
    assert!(
        total <= ALLOWANCE,
        "rust {rust} + python {py} + 1 over the allowance"
    );
    assert!(
        total * 100 >= ALLOWANCE * 95,
        "rust {rust} + python {py} + 1: under 95 % of the allowance"
    );
    assert!(rust > 0 && py > 0, "both sides were admitted");
    assert_eq!(
        consumed(&repo, 4).await,
        total,
        "every admission counted once"
    );
    for shard in 0..4 {
        let item = bucket_item(&repo, "k", shard).await;
        assert_eq!(item["shard_count"].as_n().unwrap(), "4", "shard {shard}");
    }
}

/// The mixed fleet on a hot partition: both libraries spend one bucket through the partition
/// emulator (each partition key takes 6 writes a second: one shard would need 16 s to hand
/// out the allowance), each with its client's default retries on throttling, until the
/// allowance is spent. zae-limiter's fleet starts a second before dynalimit's, whose acquires
/// split the bucket within seconds of joining and could otherwise spend it all before
/// zae-limiter's retries come back. Nothing splits the bucket by hand: dynalimit's acquires
/// meet a second of throttling and split it themselves, zae-limiter's clients follow the
/// count they read, and together the fleets admit the allowance and never more, every
/// admission recorded once across the shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_fleet_on_a_throttled_partition_splits_it_and_admits_the_allowance() {
    use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};

    let (table, python) = shared_table!();
    let direct = table.repository(NS).await;
    direct
        .set_limits("busy", "gpt-4", &[Limit::per_day("rpm", ALLOWANCE)])
        .await
        .unwrap();
    let proxy = ThrottleProxy::start(
        dynalimit_tests::endpoint().url(),
        PartitionLimits::new(dynalimit_format::attr::PK, 6),
    )
    .await
    .expect("proxy");
    let base = dynalimit_tests::client().await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        base.config().to_builder().endpoint_url(proxy.url()).build(),
    );
    let repo = table
        .builder()
        .client(client)
        .namespace(NS)
        .open()
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo.clone());

    // Both fleets stop once the shards recorded the allowance (read straight from the
    // emulator), or after 60 s.
    let stop_file = std::env::temp_dir().join(format!("dynalimit-mixed-{}", table.name()));
    let _ = std::fs::remove_file(&stop_file);
    let spent = Arc::new(AtomicBool::new(false));
    let wall = || SystemClock.epoch_millis() as f64 / 1000.0;
    let start = wall() + 4.0;
    let deadline = start + 60.0;
    let watcher = {
        let (direct, spent, stop_file) = (direct.clone(), spent.clone(), stop_file.clone());
        tokio::spawn(async move {
            while wall() < deadline && recorded(&direct, "busy", 32).await < ALLOWANCE {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            spent.store(true, Ordering::SeqCst);
            std::fs::write(&stop_file, b"spent").expect("stop file");
        })
    };
    let throttled = python.through(&proxy.url());
    let py = throttled.one(
        NS,
        json!({"op": "hammer", "entity": "busy", "resource": "gpt-4", "consume": {"rpm": 1},
               "count": 100_000, "concurrency": 8, "start_at": start, "deadline": deadline,
               "stop_file": stop_file.to_str().unwrap(), "count_errors": true}),
    );
    let rust = async {
        tokio::time::sleep(Duration::from_secs_f64((start + 1.0 - wall()).max(0.0))).await;
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (limiter, spent) = (limiter.clone(), spent.clone());
                tokio::spawn(async move {
                    let (mut admitted, mut unavailable) = (0_i64, 0_u64);
                    while !spent.load(Ordering::SeqCst) {
                        match limiter.acquire("busy", "gpt-4", [("rpm", 1)]).await {
                            Ok(lease) => {
                                lease.commit().await.unwrap();
                                admitted += 1;
                            }
                            Err(Error::Rejected(_)) => tokio::task::yield_now().await,
                            Err(Error::Unavailable { .. }) => unavailable += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    (admitted, unavailable)
                })
            })
            .collect();
        let (mut admitted, mut unavailable) = (0, 0);
        for task in tasks {
            let (a, u) = task.await.unwrap();
            admitted += a;
            unavailable += u;
        }
        (admitted, unavailable)
    };
    let (py, (rust, unavailable)) = tokio::join!(py, rust);
    watcher.await.unwrap();
    let _ = std::fs::remove_file(&stop_file);
    let shards = direct
        .buckets()
        .read(&BucketKey::new("busy", "gpt-4", 0))
        .await
        .unwrap()
        .expect("shard 0")
        .shards();
    let py_admitted = py["admitted"].as_i64().unwrap();
    let total = rust + py_admitted;
    println!(
        "rust {rust} ({unavailable} unavailable), python {py}, {shards} shards, \
         {} requests throttled of {}, {:.1} s",
        proxy.throttled(),
        proxy.throttled() + proxy.forwarded(),
        wall() - start
    );
    assert!(proxy.throttled() > 0, "the partition refused writes");
    assert!(
        shards >= 2,
        "the bucket split itself under throttling: {shards}"
    );
    // Less than one token refills in a minute of a 96-a-day limit.
    assert!(
        total <= ALLOWANCE,
        "rust {rust} + python {py_admitted} over the allowance"
    );
    assert_eq!(
        total, ALLOWANCE,
        "rust {rust} + python {py_admitted}: the allowance was not handed out in 60 s"
    );
    assert!(rust > 0 && py_admitted > 0, "both sides were admitted");
    assert_eq!(
        recorded(&direct, "busy", 32).await,
        total,
        "every admission counted once"
    );
}
