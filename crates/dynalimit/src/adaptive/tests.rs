use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::ManualClock;

use super::*;
use crate::time::TokioClock;
use crate::{Overload, Reason, Rejection};

/// The limiter's state a refusal reports: `(limit, inflight, queued)`.
fn state(r: &Rejection) -> (u32, u32, u32) {
    match r.reason() {
        Reason::Overloaded {
            limit,
            inflight,
            queued,
            ..
        } => (*limit, *inflight, *queued),
        other => panic!("not an overload: {other:?}"),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A limiter on tokio's (paused) clock.
fn tokio_limiter(limit: u32) -> AdaptiveLimiter {
    AdaptiveLimiter::builder()
        .initial_limit(limit)
        .clock(TokioClock::new(0))
        .build()
        .unwrap()
}

/// Spawns a task waiting for a permit at `level`, and lets it reach the queue.
async fn queue_at(
    limiter: &AdaptiveLimiter,
    level: u16,
) -> tokio::task::JoinHandle<Result<(), Rejection>> {
    let l = limiter.clone();
    let task = tokio::spawn(async move {
        l.acquire_with_level(Level::new(level).unwrap(), None)
            .await
            .map(|_p| ())
    });
    settle().await;
    task
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn try_acquire_refuses_at_the_limit_and_a_dropped_permit_frees_its_slot() {
    let exceeded = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&exceeded);
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(2)
        .clock(ManualClock::new(0))
        .on_limit_exceeded(move |r| {
            assert_eq!(r.overload(), Some(Overload::Full));
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let a = limiter.try_acquire().unwrap();
    let b = limiter.try_acquire().unwrap();
    let r = limiter.try_acquire().unwrap_err();
    assert_eq!(state(&r), (2, 2, 0));
    assert_eq!(exceeded.load(Ordering::SeqCst), 1);
    assert!(!limiter.can_acquire());
    drop(a);
    assert!(limiter.can_acquire());
    b.record();
    let m = limiter.metrics();
    assert_eq!(
        (m.limit, m.inflight, m.max_inflight, m.queued),
        (2, 0, 2, 0)
    );
}

#[test]
fn invalid_settings_are_refused_by_build() {
    assert!(AdaptiveLimiter::builder().limits(5, 2).build().is_err());
    assert!(
        AdaptiveLimiter::builder()
            .queueing(3.0, 2.0)
            .build()
            .is_err()
    );
    assert!(
        AdaptiveLimiter::builder()
            .queueing(f64::NAN, 2.0)
            .build()
            .is_err()
    );
}

#[test]
fn steady_samples_at_full_load_grow_the_limit_and_notify_listeners() {
    let clock = ManualClock::new(0);
    let changes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&changes);
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(5)
        .clock(clock.clone())
        .on_limit_changed(move |c| sink.lock().unwrap().push(c))
        .build()
        .unwrap();
    // 5 s of completions at a steady 10 ms, always at the limit.
    for _ in 0..500 {
        let limit = limiter.limit();
        let permits: Vec<_> = (0..limit).map(|_| limiter.try_acquire().unwrap()).collect();
        clock.advance(ms(10));
        for p in permits {
            p.record();
        }
    }
    let changes = changes.lock().unwrap();
    assert!(changes.len() >= 3, "{changes:?}");
    assert!(changes.iter().all(|c| c.new == c.old + 1));
    assert_eq!(limiter.limit(), changes.last().unwrap().new);
}

#[test]
fn dropped_permits_leave_the_limit_alone() {
    let clock = ManualClock::new(0);
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(5)
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..500 {
        let permits: Vec<_> = (0..5).map(|_| limiter.try_acquire().unwrap()).collect();
        clock.advance(ms(10));
        drop(permits);
    }
    assert_eq!(limiter.limit(), 5);
}

#[test]
fn an_overload_report_shrinks_the_limit_and_notifies() {
    let changes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&changes);
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(50)
        .clock(ManualClock::new(0))
        .on_limit_changed(move |c| sink.lock().unwrap().push(c))
        .build()
        .unwrap();
    limiter.try_acquire().unwrap().record_overload();
    limiter.try_acquire().unwrap().record_overload();
    assert_eq!(limiter.limit(), 45, "a burst of refusals counts once");
    assert_eq!(limiter.inflight(), 0);
    let changes = changes.lock().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].reason, ChangeReason::Overload);
}

#[test]
fn scale_limit_clamps_and_reset_restores_the_initial_limit() {
    let limiter = AdaptiveLimiter::builder()
        .limits(2, 50)
        .initial_limit(40)
        .clock(ManualClock::new(0))
        .build()
        .unwrap();
    assert_eq!(limiter.scale_limit(0.5), 20);
    assert_eq!(limiter.scale_limit(0.01), 2);
    assert_eq!(limiter.scale_limit(100.0), 50);
    limiter.reset();
    assert_eq!(limiter.limit(), 40);
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_fifo_order_when_permits_come_back() {
    let limiter = tokio_limiter(1);
    let held = limiter.try_acquire().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (l, o) = (limiter.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let p = l.acquire().await.unwrap();
            o.lock().unwrap().push(i);
            tokio::time::sleep(ms(5)).await;
            p.record();
        }));
        settle().await;
    }
    assert_eq!(limiter.queued(), 3);
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(limiter.metrics().max_inflight, 1);
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_gives_up_and_leaves_no_waiter_behind() {
    let limiter = tokio_limiter(1);
    let _held = limiter.try_acquire().unwrap();
    let start = tokio::time::Instant::now();
    let r = limiter.acquire_timeout(ms(250)).await.unwrap_err();
    assert_eq!(r.overload(), Some(Overload::Timeout));
    assert_eq!(start.elapsed(), ms(250));
    assert_eq!(limiter.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_does_not_keep_a_permit() {
    let limiter = tokio_limiter(1);
    let held = limiter.try_acquire().unwrap();
    let l = limiter.clone();
    let waiter = tokio::spawn(async move { l.acquire().await.map(|_p| ()) });
    settle().await;
    assert_eq!(limiter.queued(), 1);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(limiter.queued(), 0);
    drop(held);
    assert_eq!(limiter.inflight(), 0);
    assert!(limiter.try_acquire().is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_queue_sheds_gradually_between_the_two_factors() {
    // limit 2: no shedding below 2 queued, all shed from 6 queued.
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(2)
        .queueing(1.0, 3.0)
        .seed(7)
        .clock(TokioClock::new(0))
        .build()
        .unwrap();
    let _a = limiter.try_acquire().unwrap();
    let _b = limiter.try_acquire().unwrap();
    let mut waiting = Vec::new();
    let mut shed = 0;
    let mut shed_below_threshold = 0;
    for _ in 0..200 {
        let before = limiter.queued();
        let l = limiter.clone();
        let mut task = tokio::spawn(async move { l.acquire().await.map(|_p| ()) });
        settle().await;
        if limiter.queued() > before {
            waiting.push(task);
        } else {
            let r = (&mut task).await.unwrap().unwrap_err();
            assert_eq!(r.overload(), Some(Overload::Shed));
            shed += 1;
            if before < 2 {
                shed_below_threshold += 1;
            }
        }
        assert!(limiter.queued() <= 6);
    }
    assert_eq!(shed_below_threshold, 0);
    assert_eq!(limiter.queued(), 6);
    assert_eq!(shed, 194);
    for t in waiting {
        t.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_calibrated_prioritizer_sheds_low_levels_first() {
    let prioritizer = Prioritizer::new();
    let thresholds = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&thresholds);
    prioritizer.on_threshold_changed(move |old, new| sink.lock().unwrap().push((old, new)));
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(2)
        .prioritizer(&prioritizer)
        .seed(1)
        .clock(TokioClock::new(0))
        .build()
        .unwrap();
    let _a = limiter.try_acquire().unwrap();
    let _b = limiter.try_acquire().unwrap();
    // Queue 5 callers at levels spread over every band: threshold 4 and max queue 6 → rate 0.5.
    let mut waiting = Vec::new();
    for level in [50u16, 150, 250, 350, 450] {
        waiting.push(queue_at(&limiter, level).await);
    }
    assert_eq!(limiter.queued(), 5);
    let threshold = prioritizer.calibrate();
    assert_eq!(threshold, Level::new(250).unwrap());
    assert_eq!(thresholds.lock().unwrap().len(), 1);
    let low = limiter
        .acquire_with_level(Level::new(100).unwrap(), Some(ms(1)))
        .await
        .unwrap_err();
    assert_eq!(low.overload(), Some(Overload::Priority));
    let high = limiter
        .acquire_with_priority(Priority::VeryHigh, Some(ms(1)))
        .await
        .unwrap_err();
    assert_eq!(
        high.overload(),
        Some(Overload::Timeout),
        "queued, then timed out"
    );
    for t in waiting {
        t.abort();
        let _ = t.await;
    }
    assert_eq!(limiter.queued(), 0);
    assert_eq!(
        prioritizer.calibrate(),
        Level::MIN,
        "empty queue, no shedding"
    );
}

#[tokio::test(start_paused = true)]
async fn scheduled_calibrations_run_on_the_interval() {
    let prioritizer = Prioritizer::new();
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    prioritizer.on_threshold_changed(move |_, _| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(1)
        .prioritizer(&prioritizer)
        .clock(TokioClock::new(0))
        .build()
        .unwrap();
    let _held = limiter.try_acquire().unwrap();
    let mut waiting = Vec::new();
    for level in [10u16, 20, 30] {
        waiting.push(queue_at(&limiter, level).await);
    }
    let handle = prioritizer.schedule_calibrations(Duration::from_secs(1));
    tokio::time::sleep(ms(1500)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(prioritizer.threshold() > Level::MIN);
    handle.abort();
    for t in waiting {
        t.abort();
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Record(usize, u64),
        Drop(usize),
        Scale(f64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Acquire),
            2 => (any::<usize>(), 1u64..200).prop_map(|(i, ms)| Op::Record(i, ms)),
            1 => any::<usize>().prop_map(Op::Drop),
            1 => (0.1f64..3.0).prop_map(Op::Scale),
        ]
    }

    proptest! {
        #[test]
        fn permits_are_never_granted_beyond_the_limit_and_are_all_returned(ops in proptest::collection::vec(op(), 1..400)) {
            let clock = ManualClock::new(0);
            let limiter = AdaptiveLimiter::builder()
                .limits(1, 30)
                .initial_limit(5)
                .recent_window(ms(50), ms(500), 5)
                .clock(clock.clone())
                .build()
                .unwrap();
            let mut held: Vec<Permit> = Vec::new();
            for op in ops {
                match op {
                    Op::Acquire => match limiter.try_acquire() {
                        Ok(p) => {
                            prop_assert!(limiter.inflight() <= limiter.limit());
                            prop_assert_eq!(p.inflight_at_acquire(), limiter.inflight());
                            held.push(p);
                        }
                        Err(r) => prop_assert!(state(&r).1 >= state(&r).0),
                    },
                    Op::Record(i, t) if !held.is_empty() => {
                        clock.advance(ms(t));
                        held.swap_remove(i % held.len()).record();
                    }
                    Op::Drop(i) if !held.is_empty() => drop(held.swap_remove(i % held.len())),
                    Op::Scale(f) => {
                        limiter.scale_limit(f);
                    }
                    _ => {}
                }
                prop_assert_eq!(limiter.inflight() as usize, held.len());
                prop_assert!((1..=30).contains(&limiter.limit()));
            }
            held.clear();
            prop_assert_eq!(limiter.inflight(), 0);
        }
    }
}
