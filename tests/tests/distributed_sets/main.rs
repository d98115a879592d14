//! Distributed LimitSets: sets whose limits are one DynamoDB entity+resource bucket, on
//! DynamoDB Local through the test kit. Refill is one day per capacity, so nothing refills
//! noticeably while a test runs.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use dynalimit::limitset::{Algorithm, CallLimit, Distributed, LimitSet, RateLimit, ResourceLimit};
use dynalimit::pool::LimitPool;
use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_repository::Repository;
use dynalimit_repository::RequestCounter;

const RESOURCE: &str = "gpt-4";

fn daily(key: &str, capacity: u32) -> RateLimit {
    RateLimit::new(key, capacity, "day")
        .unwrap()
        .with_algorithm(Algorithm::TokenBucket)
}

fn set(limiter: &RateLimiter, entity: &str, capacity: u32) -> LimitSet<Distributed> {
    Distributed::builder(limiter, entity, RESOURCE)
        .limit(daily("rpm", capacity))
        .config("entity", entity)
        .build()
        .unwrap()
}

/// Whole tokens left in `entity`'s bucket for "rpm" of `capacity` per day.
async fn left(limiter: &RateLimiter, entity: &str, capacity: i64) -> i64 {
    limiter
        .available(
            entity,
            RESOURCE,
            &[Limit::custom("rpm", capacity, capacity, 86_400)],
        )
        .await
        .unwrap()["rpm"]
}

/// Acquires one token, uses it, releases; `Ok(false)` when the bucket refused at once.
async fn take_one(set: &LimitSet<Distributed>) -> Result<bool, Error> {
    match set.acquire_timeout([("rpm", 1)], Duration::ZERO).await {
        Ok(mut acquisition) => {
            acquisition.update([("rpm", 1)])?;
            acquisition.release()?;
            Ok(true)
        }
        Err(Error::Timeout { .. }) => Ok(false),
        Err(other) => Err(other),
    }
}

#[tokio::test]
async fn pool_over_three_distributed_sets_spreads_load_and_falls_through() {
    let table = dynalimit_tests::table().await;
    let limiter = RateLimiter::new(table.repository("pool").await);
    let pool = LimitPool::new(vec![
        set(&limiter, "alpha", 3),
        set(&limiter, "beta", 3),
        set(&limiter, "gamma", 3),
    ])
    .unwrap();
    let mut per_entity = BTreeMap::new();
    for _ in 0..6 {
        let mut acquisition = pool.acquire([("rpm", 1)]).await.unwrap();
        acquisition.update([("rpm", 1)]).unwrap();
        *per_entity
            .entry(acquisition.config()["entity"].clone())
            .or_insert(0) += 1;
    }
    // round robin spreads the load evenly
    assert_eq!(
        per_entity.clone().into_iter().collect::<Vec<_>>(),
        [("alpha".into(), 2), ("beta".into(), 2), ("gamma".into(), 2)]
    );
    // exhaust alpha directly: every further pick falls through to beta or gamma
    let mut direct = pool[0].acquire([("rpm", 1)]).await.unwrap();
    direct.update([("rpm", 1)]).unwrap();
    drop(direct);
    for _ in 0..2 {
        let mut acquisition = pool.acquire([("rpm", 1)]).await.unwrap();
        acquisition.update([("rpm", 1)]).unwrap();
        assert_ne!(acquisition.config()["entity"], "alpha");
        *per_entity
            .entry(acquisition.config()["entity"].clone())
            .or_insert(0) += 1;
    }
    assert_eq!(per_entity["beta"] + per_entity["gamma"], 6);
    // every bucket is empty now: a zero timeout tries every set and fails
    assert!(matches!(
        pool.acquire_timeout([("rpm", 1)], Duration::ZERO).await,
        Err(Error::Timeout { .. })
    ));
    for i in 0..pool.len() {
        pool[i].backing().settled().await;
    }
    for entity in ["alpha", "beta", "gamma"] {
        assert_eq!(left(&limiter, entity, 3).await, 0, "{entity}");
    }
}

#[tokio::test]
async fn two_sets_on_one_bucket_share_one_budget() {
    let table = dynalimit_tests::table().await;
    let limiter = RateLimiter::new(table.repository("shared").await);
    let a = set(&limiter, "shared", 10);
    let b = set(&limiter, "shared", 10);
    // sequential, alternating: exactly the capacity is granted in total
    let mut granted = 0;
    for i in 0..16 {
        let s = if i % 2 == 0 { &a } else { &b };
        if take_one(s).await.unwrap() {
            granted += 1;
        }
    }
    assert_eq!(granted, 10);

    // concurrent, from several tasks on two sets: never more than the capacity
    let c = set(&limiter, "concurrent", 20);
    let d = set(&limiter, "concurrent", 20);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let s = if i % 2 == 0 { c.clone() } else { d.clone() };
        tasks.push(tokio::spawn(async move { take_one(&s).await.unwrap() }));
    }
    let mut granted = 0;
    for task in tasks {
        granted += i64::from(task.await.unwrap());
    }
    assert!((1..=20).contains(&granted), "granted {granted}");
    c.backing().settled().await;
    d.backing().settled().await;
    // conservation: the bucket lost exactly what was granted
    assert_eq!(left(&limiter, "concurrent", 20).await, 20 - granted);
}

#[tokio::test]
async fn release_refunds_unused_tokens_and_rolls_back_unused_acquisitions() {
    let table = dynalimit_tests::table().await;
    let limiter = RateLimiter::new(table.repository("settle").await);
    let s = set(&limiter, "refunds", 10);

    let mut used_two = s.acquire([("rpm", 5)]).await.unwrap();
    used_two.update([("rpm", 2)]).unwrap();
    used_two.release().unwrap();
    s.backing().settled().await;
    assert_eq!(left(&limiter, "refunds", 10).await, 8);

    let mut unused = s.acquire([("rpm", 4)]).await.unwrap();
    unused.update([("rpm", 0)]).unwrap();
    drop(unused);
    s.backing().settled().await;
    assert_eq!(left(&limiter, "refunds", 10).await, 8);

    // a missing update charges the request in full and is reported
    let mut missing = s.acquire([("rpm", 3)]).await.unwrap();
    assert!(matches!(
        missing.release(),
        Err(Error::MissingUpdate { keys }) if keys == ["rpm"]
    ));
    s.backing().settled().await;
    assert_eq!(left(&limiter, "refunds", 10).await, 5);
}

#[tokio::test]
async fn call_limits_are_taken_with_every_acquisition() {
    let table = dynalimit_tests::table().await;
    let limiter = RateLimiter::new(table.repository("calls").await);
    let s = Distributed::builder(&limiter, "caller", RESOURCE)
        .limit(daily("tpm", 100))
        .limit(
            CallLimit::new(2, "day")
                .unwrap()
                .with_algorithm(Algorithm::Gcra),
        )
        .build()
        .unwrap();
    for _ in 0..2 {
        let mut acquisition = s.acquire([("tpm", 10)]).await.unwrap();
        acquisition.update([("tpm", 10)]).unwrap();
    }
    // the third call is refused by the call limit although tokens remain
    assert!(matches!(
        s.acquire_timeout([("tpm", 10)], Duration::ZERO).await,
        Err(Error::Timeout { .. })
    ));
    s.backing().settled().await;
    let left = limiter
        .available(
            "caller",
            RESOURCE,
            &[
                Limit::custom("tpm", 100, 100, 86_400),
                Limit::custom("call_count", 2, 2, 86_400),
            ],
        )
        .await
        .unwrap();
    assert_eq!((left["tpm"], left["call_count"]), (80, 0));
}

#[tokio::test]
async fn stored_configuration_supplies_the_limits() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("stored").await;
    repo.set_limits("configured", RESOURCE, &[Limit::per_day("rpm", 2)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo);
    let s = Distributed::builder(&limiter, "configured", RESOURCE)
        .build_from_stored()
        .await
        .unwrap();
    assert!(s.backing().table_limits().is_none());
    assert_eq!(s.limit("rpm").unwrap().capacity(), 2.0);
    assert!(matches!(
        s.acquire([("rpm", 3)]).await,
        Err(Error::ExceedsCapacity { .. })
    ));
    assert!(take_one(&s).await.unwrap());
    assert!(take_one(&s).await.unwrap());
    assert!(!take_one(&s).await.unwrap());
    assert!(matches!(
        Distributed::builder(&limiter, "unconfigured", RESOURCE)
            .build_from_stored()
            .await,
        Err(Error::NoLimits { .. })
    ));
}

#[tokio::test]
async fn limits_a_bucket_cannot_keep_are_refused_before_any_request() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let repo: Repository = table.counted_repository(&counter, "refused").await;
    let limiter = RateLimiter::new(repo);
    let before = counter.total();
    let refused = |limit: dynalimit::limitset::SetLimit| {
        Distributed::builder(&limiter, "e", RESOURCE)
            .limit(limit)
            .build()
    };
    let cases: [(dynalimit::limitset::SetLimit, &str); 5] = [
        (
            ResourceLimit::new("connections", 4).unwrap().into(),
            "connections",
        ),
        (RateLimit::new("sliding", 10, 60).unwrap().into(), "sliding"),
        (
            RateLimit::new("leaky", 10, 60)
                .unwrap()
                .with_algorithm(Algorithm::LeakyBucket)
                .into(),
            "leaky",
        ),
        (
            RateLimit::new("half", 2.5, 60)
                .unwrap()
                .with_algorithm(Algorithm::TokenBucket)
                .into(),
            "half",
        ),
        (
            RateLimit::new("quick", 10, 1.5)
                .unwrap()
                .with_algorithm(Algorithm::Gcra)
                .into(),
            "quick",
        ),
    ];
    for (limit, key) in cases {
        match refused(limit) {
            Err(Error::NotDistributable { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: {other:?}"),
        }
    }
    assert!(matches!(
        Distributed::builder(&limiter, "bad entity#", RESOURCE)
            .limit(daily("rpm", 3))
            .build(),
        Err(Error::Invalid(_))
    ));
    // a fractional amount fails before the acquire is sent
    let s = Distributed::builder(&limiter, "e", RESOURCE)
        .limit(daily("rpm", 3))
        .build()
        .unwrap();
    assert!(matches!(
        s.acquire([("rpm", 1.5)]).await,
        Err(Error::InvalidAmount { .. })
    ));
    assert_eq!(counter.total(), before);
}

const CHILD_ENV: &str = "DYNALIMIT_DISTSET_CHILD";
const CHILD_TEST: &str = "child_takes_from_the_shared_bucket";
const SHARED_CAPACITY: i64 = 12;
const ATTEMPTS: usize = 10;

/// Run only as a child process of `sets_in_two_processes_share_one_budget`: takes up to
/// `ATTEMPTS` tokens from the shared bucket and writes how many it got.
#[tokio::test]
#[ignore = "run as a child process by another test"]
async fn child_takes_from_the_shared_bucket() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (table_name, report) = spec.split_once('|').unwrap();
    let repo = Repository::builder()
        .client(dynalimit_tests::client().await)
        .stack(table_name)
        .namespace("processes")
        .open()
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo);
    let s = set(&limiter, "shared", SHARED_CAPACITY as u32);
    let mut granted = 0;
    for _ in 0..ATTEMPTS {
        granted += i64::from(take_one(&s).await.unwrap());
    }
    s.backing().settled().await;
    std::fs::write(report, granted.to_string()).unwrap();
}

#[tokio::test]
async fn sets_in_two_processes_share_one_budget() {
    let table = dynalimit_tests::table().await;
    let limiter = RateLimiter::new(table.repository("processes").await);
    let s = set(&limiter, "shared", SHARED_CAPACITY as u32);
    let url = dynalimit_tests::endpoint().url().to_owned();
    let dir = std::env::temp_dir();
    let report = dir.join(format!("dynalimit-distset-{}", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let mut child = tokio::process::Command::from({
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--ignored", "--exact", CHILD_TEST, "--test-threads=1"])
            .env("DYNALIMIT_TEST_ENDPOINT", &url)
            .env(CHILD_ENV, format!("{}|{}", table.name(), report.display()));
        command
    })
    .spawn()
    .unwrap();
    let mut granted = 0;
    for _ in 0..ATTEMPTS {
        granted += i64::from(take_one(&s).await.unwrap());
    }
    assert!(child.wait().await.unwrap().success());
    let child_granted: i64 = std::fs::read_to_string(&report)
        .expect("the child reports")
        .parse()
        .unwrap();
    let _ = std::fs::remove_file(&report);
    s.backing().settled().await;
    let total = granted + child_granted;
    assert!(
        (1..=SHARED_CAPACITY).contains(&total),
        "granted {granted} + {child_granted}"
    );
    assert!(child_granted > 0 || granted == SHARED_CAPACITY);
    assert_eq!(
        left(&limiter, "shared", SHARED_CAPACITY).await,
        SHARED_CAPACITY - total
    );
}
