//! LimitPool contract scenarios 53–59, with the fall-through the port adds.

mod support;

use std::time::Duration;

use dynalimit::limitset::{LimitSet, NO_AMOUNTS};
use dynalimit::pool::{LimitPool, LoadBalancing};
use dynalimit::time::{Clock, ManualClock};
use dynalimit::{Error, blocking};
use support::*;

fn slot_set(name: &str, timer: &ManualClock) -> LimitSet {
    LimitSet::builder()
        .limit(resource("slots", 1))
        .config("name", name)
        .clock(timer.clone())
        .build()
        .unwrap()
}

fn pool_of(n: usize) -> LimitPool {
    let timer = ManualClock::default();
    LimitPool::new((0..n).map(|i| slot_set(&i.to_string(), &timer)).collect()).unwrap()
}

#[test]
fn scenario_53_construction() {
    let err = LimitPool::<dynalimit::limitset::InProcess>::new(Vec::new()).unwrap_err();
    assert!(err.to_string().contains("requires at least one LimitSet"));
    let err = "least_loaded"
        .parse::<LoadBalancing>()
        .unwrap_err()
        .to_string();
    assert!(err.contains("least_loaded"), "{err}");
    assert!(
        err.contains("round_robin") && err.contains("random"),
        "{err}"
    );
    assert_eq!(
        "RoundRobin".parse::<LoadBalancing>().unwrap(),
        LoadBalancing::RoundRobin
    );
    assert_eq!(
        "random".parse::<LoadBalancing>().unwrap(),
        LoadBalancing::Random
    );
    let pool = pool_of(2);
    assert_eq!(pool.balancing(), LoadBalancing::RoundRobin);
    assert_eq!(pool.worker_index(), 0);
}

#[test]
fn scenario_54_round_robin_with_offsets() {
    for (offset, expected) in [
        (0, [0, 1, 2, 0, 1, 2, 0]),
        (1, [1, 2, 0, 1, 2, 0, 1]),
        (2, [2, 0, 1, 2, 0, 1, 2]),
        (5, [2, 0, 1, 2, 0, 1, 2]),
        (7, [1, 2, 0, 1, 2, 0, 1]),
    ] {
        let pool = pool_of(3).with_worker_index(offset);
        let picks: Vec<_> = (0..7).map(|_| pool.select()).collect();
        assert_eq!(picks, expected, "offset {offset}");
    }
    let pool = pool_of(50);
    let picks: Vec<_> = (0..50).map(|_| pool.select()).collect();
    assert_eq!(picks, (0..50).collect::<Vec<_>>());
}

#[test]
fn scenario_55_random_is_uniform() {
    let pool = pool_of(3)
        .with_balancing(LoadBalancing::Random)
        .with_seed(2026);
    let mut counts = [0u32; 3];
    for _ in 0..3_000 {
        counts[pool.select()] += 1;
    }
    for count in counts {
        assert!((900..=1_100).contains(&count), "{counts:?}");
    }
    // a seed makes the sequence reproducible
    let again = pool_of(3)
        .with_balancing(LoadBalancing::Random)
        .with_seed(7);
    let other = pool_of(3)
        .with_balancing(LoadBalancing::Random)
        .with_seed(7);
    let a: Vec<_> = (0..20).map(|_| again.select()).collect();
    let b: Vec<_> = (0..20).map(|_| other.select()).collect();
    assert_eq!(a, b);
}

#[test]
fn scenario_56_one_pick_per_call_with_fall_through() {
    let timer = ManualClock::default();
    let parked = blocking::LimitPool::new(
        LimitPool::new(vec![slot_set("a", &timer), slot_set("b", &timer)]).unwrap(),
    );
    let pool = parked.as_async();
    // set 0 exhausted directly
    let held = pool[0].try_acquire(NO_AMOUNTS).unwrap();
    // pick 0 cannot admit: falls through to set 1, whose config the acquisition carries
    let second = pool.try_acquire(NO_AMOUNTS).unwrap();
    assert_eq!(second.pool_index(), Some(1));
    assert_eq!(second.config()["name"], "b");
    // both exhausted: refused, and the failed try still advanced the counter
    let before = pool.total_dispatched();
    assert!(refused(&pool.try_acquire(NO_AMOUNTS)));
    assert_eq!(pool.total_dispatched(), before + 1);
    // a waiting acquire waits on the picked set after trying them all
    let err = parked
        .acquire_timeout(NO_AMOUNTS, Duration::ZERO)
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }));
    drop(held);
    let third = parked.acquire_timeout(NO_AMOUNTS, Duration::ZERO).unwrap();
    assert_eq!(third.pool_index(), Some(0));
    assert_eq!(timer.monotonic(), Duration::ZERO);
}

#[tokio::test]
async fn scenario_56_async_pool_falls_through_then_waits_on_the_pick() {
    let timer = ManualClock::default();
    let pool = std::sync::Arc::new(
        LimitPool::new(vec![slot_set("a", &timer), slot_set("b", &timer)]).unwrap(),
    );
    let a = pool.acquire(NO_AMOUNTS).await.unwrap();
    let b = pool.acquire(NO_AMOUNTS).await.unwrap();
    assert_eq!((a.pool_index(), b.pool_index()), (Some(0), Some(1)));
    let task = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.acquire(NO_AMOUNTS).await.unwrap().pool_index() })
    };
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert!(!task.is_finished());
    drop(a); // the third pick is set 0 again
    assert_eq!(task.await.unwrap(), Some(0));
    drop(b);
}

#[test]
fn scenario_57_sets_with_different_keys() {
    let timer = ManualClock::default();
    let requests_only = set_of(&timer, vec![token_bucket("requests", 10.0, 1.0).into()]);
    let pool = LimitPool::new(vec![requests_only, three_limits(&timer)]).unwrap();
    let acquisition = pool.try_acquire([("tokens", 1)]).unwrap();
    assert_eq!(acquisition.pool_index(), Some(0));
    assert!(acquisition.is_empty());
}

#[test]
fn scenario_58_integer_indexing() {
    let timer = ManualClock::default();
    let first = slot_set("a", &timer);
    let pool = LimitPool::new(vec![first.clone(), slot_set("b", &timer)]).unwrap();
    assert!(pool[0].ptr_eq(&first));
    assert!(pool.get(0).unwrap().ptr_eq(&first));
    assert_eq!(pool.get(-1).unwrap().config()["name"], "b");
    assert!(pool.get(-2).unwrap().ptr_eq(&first));
    assert!(pool.get(2).is_none());
    assert!(pool.get(-3).is_none());
    assert_eq!(pool.len(), 2);
    assert_eq!(pool[1].limit("slots").unwrap().capacity(), 1.0);
}

#[test]
fn scenario_59_pool_stats() {
    let pool = pool_of(2).with_worker_index(5);
    for _ in 0..3 {
        pool.select();
    }
    let stats = pool.stats();
    assert_eq!(stats.num_limit_sets, 2);
    assert_eq!(stats.load_balancing.name(), "RoundRobin");
    assert_eq!(stats.worker_index, 5);
    assert_eq!(stats.total_dispatched, 3);
    assert_eq!(stats.limit_sets.len(), 2);
    assert_eq!(stats.limit_sets[0][0].key(), "slots");
    let random = pool_of(2).with_balancing(LoadBalancing::Random);
    random.select();
    assert_eq!(random.stats().load_balancing.name(), "Random");
    assert_eq!(random.stats().total_dispatched, 1);
}

#[test]
fn pool_spreads_load_and_falls_through_when_one_set_is_exhausted() {
    let timer = ManualClock::default();
    let sets: Vec<_> = ["k1", "k2", "k3"]
        .iter()
        .map(|name| {
            LimitSet::builder()
                .limit(token_bucket("rpm", 10.0, 60.0))
                .config("key", *name)
                .clock(timer.clone())
                .build()
                .unwrap()
        })
        .collect();
    let pool = LimitPool::new(sets).unwrap();
    let mut per_set = [0; 3];
    for _ in 0..30 {
        let mut acquisition = pool.try_acquire([("rpm", 1)]).unwrap();
        acquisition.update([("rpm", 1)]).unwrap();
        per_set[acquisition.pool_index().unwrap()] += 1;
    }
    assert_eq!(per_set, [10, 10, 10], "round robin spreads evenly");
    assert!(refused(&pool.try_acquire([("rpm", 1)])));
    // a minute later all are full again; exhaust k1 and k3 directly: every pick falls
    // through to k2
    timer.advance(Duration::from_secs(60));
    for i in [0, 2] {
        let mut all = pool[i].try_acquire([("rpm", 10)]).unwrap();
        all.update([("rpm", 10)]).unwrap();
    }
    for _ in 0..10 {
        let mut acquisition = pool.try_acquire([("rpm", 1)]).unwrap();
        acquisition.update([("rpm", 1)]).unwrap();
        assert_eq!(acquisition.pool_index(), Some(1));
        assert_eq!(acquisition.config()["key"], "k2");
    }
    assert!(refused(&pool.try_acquire([("rpm", 1)])));
}
