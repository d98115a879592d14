use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::{Clock, ManualClock};
use tokio::time::Instant;

use super::*;
use crate::time::TokioClock;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn pauses_max_merge_and_are_capped() {
    let clock = ManualClock::new(1_000_000);
    let gate = Backoff::builder()
        .clock(clock.clone())
        .max_pause(secs(60))
        .build()
        .unwrap();
    gate.pause("s", Some(secs(10)));
    clock.advance(secs(4));
    // 3 s from now ends before the 6 s left: no change.
    assert_eq!(gate.pause("s", Some(secs(3))).retry_after(), secs(6));
    let p = gate.pause("s", Some(secs(600)));
    assert_eq!(p.retry_after(), secs(60), "capped by max_pause");
    assert_eq!(p.until_epoch_ms(), 1_000_000 + 4_000 + 60_000);
    assert_eq!(gate.incidents("s"), 1, "extensions are one incident");
    assert!(gate.check("other").is_ok(), "scopes are independent");
    clock.advance(secs(60));
    assert!(gate.check("s").is_ok());
    gate.pause("s", Some(secs(1)));
    assert_eq!(gate.incidents("s"), 2);
}

#[test]
fn without_retry_after_the_pause_doubles_with_jitter_and_restarts_after_quiet() {
    let clock = ManualClock::new(0);
    let gate = Backoff::builder()
        .clock(clock.clone())
        .exponential(secs(1), secs(8), secs(30))
        .seed(3)
        .build()
        .unwrap();
    let mut bounds = Vec::new();
    for _ in 0..5 {
        let p = gate.pause("s", None);
        bounds.push(p.retry_after());
        // Let it expire, then fail again at once: same episode.
        clock.advance(p.retry_after());
    }
    for (i, got) in bounds.iter().enumerate() {
        let full = secs(1 << i.min(3));
        assert!(
            *got >= full / 2 && *got <= full,
            "pause {i}: {got:?} vs {full:?}"
        );
    }
    clock.advance(secs(31));
    let p = gate.pause("s", None);
    assert!(
        p.retry_after() <= secs(1),
        "episode restarted: {:?}",
        p.retry_after()
    );
}

#[test]
fn a_past_stamp_changes_nothing_and_a_future_one_pauses() {
    let clock = ManualClock::new(50_000);
    let gate = Backoff::builder().clock(clock.clone()).build().unwrap();
    assert_eq!(gate.observe("s", 49_000), None);
    assert!(gate.check("s").is_ok());
    let p = gate.observe("s", 57_500).unwrap();
    assert_eq!(p.retry_after(), Duration::from_millis(7_500));
    assert_eq!(p.until_epoch_ms(), 57_500);
}

#[test]
fn bad_settings_are_refused() {
    assert!(
        Backoff::builder()
            .exponential(Duration::ZERO, secs(1), secs(1))
            .build()
            .is_err()
    );
    assert!(
        Backoff::builder()
            .exponential(secs(2), secs(1), secs(1))
            .build()
            .is_err()
    );
    assert!(
        Backoff::builder()
            .slow_start(0, secs(1), 3)
            .build()
            .is_err()
    );
}

#[test]
fn a_million_paused_scopes_keep_the_gate_at_its_bound() {
    let clock = ManualClock::new(0);
    let gate = Backoff::builder().clock(clock.clone()).build().unwrap();
    let mut most = 0;
    for i in 0..1_000_000 {
        gate.pause(&format!("caller-{i}"), Some(Duration::from_millis(1)));
        most = most.max(gate.scope_count());
        if i % 1_000 == 0 {
            clock.advance(secs(1));
        }
    }
    assert!(most <= MAX_SCOPES, "{most} scopes");
    // Checks and waits on scopes never paused make nothing.
    let before = gate.scope_count();
    for i in 0..1_000 {
        assert!(gate.check(&format!("stranger-{i}")).is_ok());
        assert_eq!(gate.incidents(&format!("stranger-{i}")), 0);
    }
    assert_eq!(gate.scope_count(), before);
}

#[test]
fn idle_scopes_are_forgotten_and_busy_ones_kept() {
    let clock = ManualClock::new(0);
    let gate = Backoff::builder().clock(clock.clone()).build().unwrap();
    gate.pause("short", Some(secs(1)));
    gate.pause("long", Some(secs(3 * 600 + 100)));
    gate.pause("ended", Some(secs(1)));
    // Three idle times later, other scopes are paused (each pause may turn the generations).
    for step in 1..=3 {
        clock.advance(SCOPE_IDLE);
        gate.pause(&format!("new-{step}"), Some(secs(1)));
    }
    assert!(gate.check("long").is_err(), "its pause is still in force");
    assert_eq!(gate.incidents("long"), 1, "remembered");
    assert_eq!(gate.incidents("short"), 0, "forgotten");
    assert_eq!(gate.scope_count(), 3, "long, new-2 and new-3");
    // A forgotten scope pauses afresh, its backoff restarted as after a quiet period.
    let p = gate.pause("ended", None);
    assert!(p.retry_after() <= secs(1), "{:?}", p.retry_after());
}

#[test]
fn a_memory_store_holds_at_most_its_bound_and_keeps_live_stamps() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryPauseStore::with_clock(clock.clone());
    futures::executor::block_on(async {
        store.publish("live", 1_000_000 + 3_600_000).await.unwrap();
        for i in 0..1_000_000 {
            store
                .publish(&format!("caller-{i}"), 1_000_000 + 1)
                .await
                .unwrap();
            assert!(store.len() <= MAX_SCOPES);
            if i % 10_000 == 0 {
                clock.advance(Duration::from_millis(2));
            }
        }
        assert_eq!(
            store.load("live").await.unwrap(),
            Some(1_000_000 + 3_600_000),
            "a live stamp survives a flood of passed ones"
        );
    });
}

/// A gate on tokio's (paused) clock with the default settings.
fn tokio_gate() -> Backoff {
    Backoff::builder()
        .clock(TokioClock::new(0))
        .build()
        .unwrap()
}

/// Reports a pause of `length` on scope "api" after `after`, from another task.
fn pause_later(gate: &Backoff, after: Duration, length: Duration) -> tokio::task::JoinHandle<()> {
    let g = gate.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        g.pause("api", Some(length));
    })
}

/// Spawns `n` callers that wait on the gate and returns their release times (virtual, from
/// the start of the test).
async fn released_at(gate: &Backoff, n: usize) -> Vec<Duration> {
    let start = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (g, t) = (gate.clone(), Arc::clone(&times));
        tasks.push(tokio::spawn(async move {
            g.wait("api").await;
            t.lock().unwrap().push(start.elapsed());
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut v = times.lock().unwrap().clone();
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn every_caller_waits_for_the_deadline_then_resumes_through_a_slow_start() {
    let gate = Backoff::builder()
        .clock(TokioClock::new(0))
        .slow_start(1, secs(1), 7)
        .max_jitter(Duration::ZERO)
        .build()
        .unwrap();
    gate.pause("api", Some(secs(15)));
    let times = released_at(&gate, 64).await;
    // 1 at 15 s, 2 at 16 s, 4 at 17 s, …, 32 at 20 s, the last one at 21 s.
    let mut per_second = std::collections::BTreeMap::new();
    for t in &times {
        *per_second.entry(t.as_secs()).or_insert(0) += 1;
    }
    let expected: std::collections::BTreeMap<u64, i32> = [
        (15, 1),
        (16, 2),
        (17, 4),
        (18, 8),
        (19, 16),
        (20, 32),
        (21, 1),
    ]
    .into();
    assert_eq!(per_second, expected);
    // After the ramp the gate is wide open.
    let t0 = Instant::now();
    gate.wait("api").await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn resumption_is_jittered_within_a_tenth_of_the_pause() {
    let gate = Backoff::builder()
        .clock(TokioClock::new(0))
        .slow_start(64, secs(1), 1)
        .max_jitter(secs(1))
        .seed(11)
        .build()
        .unwrap();
    gate.pause("api", Some(secs(5)));
    let times = released_at(&gate, 64).await;
    assert!(
        times
            .iter()
            .all(|t| *t >= secs(5) && *t <= Duration::from_millis(5_500))
    );
    let distinct: std::collections::BTreeSet<_> = times.iter().collect();
    assert!(
        distinct.len() > 32,
        "callers are spread, {} distinct",
        distinct.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_reported_while_callers_wait_extends_their_wait() {
    let gate = Backoff::builder()
        .clock(TokioClock::new(0))
        .slow_start(1, secs(1), 0)
        .build()
        .unwrap();
    gate.pause("api", Some(secs(2)));
    let extender = pause_later(&gate, secs(1), secs(9));
    let times = released_at(&gate, 3).await;
    extender.await.unwrap();
    assert!(times.iter().all(|t| *t >= secs(10)), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn wait_timeout_fails_fast_when_the_pause_outlasts_the_budget() {
    let gate = tokio_gate();
    gate.pause("api", Some(secs(30)));
    let t0 = Instant::now();
    let p = gate.wait_timeout("api", secs(5)).await.unwrap_err();
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(p.retry_after(), Some(secs(30)));
    gate.wait_timeout("api", secs(31)).await.unwrap();
    assert!(t0.elapsed() >= secs(30));
}

#[tokio::test(start_paused = true)]
async fn wait_timeout_gives_up_when_the_pause_is_extended_past_the_budget() {
    let gate = tokio_gate();
    gate.pause("api", Some(secs(2)));
    let extender = pause_later(&gate, secs(1), secs(60));
    let t0 = Instant::now();
    let p = gate.wait_timeout("api", secs(5)).await.unwrap_err();
    assert_eq!(t0.elapsed(), secs(5));
    assert_eq!(p.retry_after(), Some(secs(56)));
    extender.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_pause_reported_in_one_gate_holds_another_sharing_the_store() {
    let store = MemoryPauseStore::new();
    // Two "processes": separate gates, clocks started at the same wall time.
    let a = Backoff::builder()
        .clock(TokioClock::new(1_700_000_000_000))
        .store(store.clone())
        .build()
        .unwrap();
    let b_clock = TokioClock::new(1_700_000_000_000);
    let b = Backoff::builder()
        .clock(b_clock)
        .store(store.clone())
        .slow_start(1, secs(1), 0)
        .build()
        .unwrap();
    let reported = a.report("acme#ads", Some(secs(15))).await.unwrap();
    assert_eq!(reported.until_epoch_ms(), 1_700_000_015_000);
    // A shorter report elsewhere does not shorten the shared stamp.
    let merged = b.report("acme#ads", Some(secs(3))).await.unwrap();
    assert_eq!(merged.until_epoch_ms(), 1_700_000_015_000);
    assert_eq!(
        store.load("acme#ads").await.unwrap(),
        Some(1_700_000_015_000)
    );

    let fresh = Backoff::builder()
        .clock(TokioClock::new(1_700_000_000_000))
        .store(store.clone())
        .build()
        .unwrap();
    assert!(fresh.check("acme#ads").is_ok(), "not seen before a refresh");
    let p = fresh.refresh("acme#ads").await.unwrap().unwrap();
    assert_eq!(p.retry_after(), secs(15));
    let t0 = Instant::now();
    fresh.wait("acme#ads").await;
    assert!(t0.elapsed() >= secs(15));
    assert_eq!(fresh.refresh("acme#ads").await.unwrap(), None);
    assert!(b_clock.epoch_millis() >= 1_700_000_015_000);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_pause_is_never_shortened(steps in proptest::collection::vec((0u64..5_000, proptest::option::of(0u64..20_000)), 1..100)) {
            let clock = ManualClock::new(0);
            let gate = Backoff::builder()
                .clock(clock.clone())
                .max_pause(secs(10))
                .seed(9)
                .build()
                .unwrap();
            // The deadline in force, in wall milliseconds, if any.
            let mut deadline: Option<i64> = None;
            for (advance, retry_ms) in steps {
                clock.advance(Duration::from_millis(advance));
                let now = clock.epoch_millis();
                let p = gate.pause("s", retry_ms.map(Duration::from_millis));
                let live = deadline.filter(|d| *d > now);
                if let Some(d) = live {
                    prop_assert!(p.until_epoch_ms() >= d, "shortened: {} < {d}", p.until_epoch_ms());
                }
                prop_assert!(p.retry_after() <= secs(10));
                if let Some(r) = retry_ms {
                    let asked = now + i64::try_from(r.min(10_000)).unwrap();
                    prop_assert!(p.until_epoch_ms() >= asked);
                }
                deadline = Some(p.until_epoch_ms());
                prop_assert_eq!(gate.check("s").is_err(), p.retry_after() > Duration::ZERO);
            }
        }
    }
}
