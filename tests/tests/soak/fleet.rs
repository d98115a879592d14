//! Concurrency limits across processes: 64 tasks in 4 processes hold slots of one limit
//! (5 slots, 1.5 s hold time) through fault proxies that lose and refuse 5 % of the
//! requests; two processes are killed with SIGKILL while one of their tasks holds a slot
//! past its first hold time. Checked from every holder's log: no two beliefs of one slot
//! overlap and never more than 5 hold at once; and every slot is back within the hold time
//! plus one heartbeat after the last holder died or ended. The same fleet also runs in one
//! process, on either backend, a kill there being a proxy that holds every write from then
//! on and the worker aborted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit::{Concurrency, RateLimiter};
use dynalimit_core::{Clock, SystemClock};
use dynalimit_tests::fault::FaultProxy;
use dynalimit_tests::fleet::{self, FleetOptions, Line};

const MAX: u32 = 5;
const HOLD_MS: u64 = 1500;

#[tokio::test(flavor = "multi_thread")]
async fn never_more_holders_than_slots_across_killed_processes_and_lost_answers() {
    if dynalimit_tests::skipped_on_the_memory_backend("the workers are other processes") {
        return;
    }
    let table = dynalimit_tests::table().await;
    let repo = table.repository("fleet").await;
    let options = options(table.name(), 11);
    let lines: Arc<Mutex<BTreeMap<u32, Vec<Line>>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dynalimit-soak"))
            .arg("--fleet-worker")
            .arg(serde_json::to_string(&options).unwrap())
            .arg(w.to_string())
            .env("DYNALIMIT_TEST_ENDPOINT", dynalimit_tests::endpoint().url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a fleet worker");
        let out = child.stdout.take().unwrap();
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let parsed: Line = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("worker {w} wrote {line:?}: {e}"));
                lines.lock().unwrap().entry(w).or_default().push(parsed);
            }
        });
        workers.push(child);
    }

    // Two processes killed while one of their tasks holds a slot past its first hold time
    // (kept by heartbeats), each as soon as one is seen, after at least 2 s of running.
    let killed_at = kill_two(&lines, |w| {
        let child = &mut workers[w as usize];
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    })
    .await;
    survivors_extend_two_holds(&lines, &killed_at).await;
    let alive: Vec<usize> = (0..4usize)
        .filter(|w| !killed_at.contains_key(&(*w as u32)))
        .collect();
    for &w in &alive {
        drop(workers[w].stdin.take());
    }
    for &w in &alive {
        let status = workers[w].wait().expect("a worker ends");
        assert!(status.success(), "{status}");
    }
    let ended = SystemClock.epoch_millis();
    let lines = lines.lock().unwrap().clone();
    every_slot_back_and_never_held_twice(repo, &lines, &killed_at, ended).await;
}

/// The options of a fleet on `table`.
fn options(table: &str, seed: u64) -> FleetOptions {
    FleetOptions {
        table: table.to_owned(),
        namespace: "fleet".into(),
        max: MAX,
        hold_ms: HOLD_MS,
        tasks: 16,
        fault_rate: 0.05,
        seed,
    }
}

/// Lets the workers that were not killed run on for at least 2 s, and until heartbeats have
/// kept at least two holds past one hold time (what the run claims to exercise). A long hold is
/// one in twenty, and a lost heartbeat ends one at its first expiry: on a loaded machine 2 s
/// alone could leave the run with one.
async fn survivors_extend_two_holds(
    lines: &Mutex<BTreeMap<u32, Vec<Line>>>,
    killed_at: &BTreeMap<u32, i64>,
) {
    let started = SystemClock.epoch_millis();
    tokio::time::sleep(Duration::from_secs(2)).await;
    loop {
        let extended = {
            let lines = lines.lock().unwrap();
            fleet::check(&lines, killed_at, i64::try_from(HOLD_MS).unwrap()).extended
        };
        if extended >= 2 {
            return;
        }
        assert!(
            SystemClock.epoch_millis() - started < 60_000,
            "heartbeats extended {extended} holds in a minute"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills two workers, each (with `kill`) as soon as one of its holds has outlived its first
/// hold time (heartbeats kept it), after at least 2 s of running; when each died.
async fn kill_two(
    lines: &Mutex<BTreeMap<u32, Vec<Line>>>,
    mut kill: impl FnMut(u32),
) -> BTreeMap<u32, i64> {
    let mut killed_at = BTreeMap::new();
    let started = SystemClock.epoch_millis();
    tokio::time::sleep(Duration::from_secs(2)).await;
    while killed_at.len() < 2 {
        assert!(
            SystemClock.epoch_millis() - started < 60_000,
            "no worker held a long slot to be killed during"
        );
        let cutoff = SystemClock.epoch_millis() - i64::try_from(HOLD_MS).unwrap() - 100;
        let holding = {
            let lines = lines.lock().unwrap();
            (0..4u32).find(|w| {
                !killed_at.contains_key(w)
                    && lines.get(w).is_some_and(|l| fleet::holds_long(l, cutoff))
            })
        };
        let Some(w) = holding else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        kill(w);
        killed_at.insert(w, SystemClock.epoch_millis());
    }
    killed_at
}

/// The same fleet in one process, on either backend (the memory store cannot be shared
/// between processes): 4 workers of 16 tasks, each through its own fault proxy; a "kill"
/// makes the worker's proxy hold every write from then on (its releases and heartbeats never
/// land, as after a crash) and aborts the worker.
#[tokio::test(flavor = "multi_thread")]
async fn never_more_holders_than_slots_in_one_process_with_crashes_and_lost_answers() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("fleet").await;
    let options = options(table.name(), 12);
    let lines: Arc<Mutex<BTreeMap<u32, Vec<Line>>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..4u32 {
        let proxy = Arc::new(FaultProxy::start().await);
        let stop = Arc::new(AtomicBool::new(false));
        let out: fleet::Sink = {
            let lines = Arc::clone(&lines);
            Arc::new(move |line: &Line| {
                lines
                    .lock()
                    .unwrap()
                    .entry(w)
                    .or_default()
                    .push(line.clone());
            })
        };
        let task = {
            let (options, proxy, stop) = (options.clone(), Arc::clone(&proxy), Arc::clone(&stop));
            tokio::spawn(async move { fleet::run(&options, w, &proxy, stop, out).await })
        };
        workers.push((proxy, stop, task));
    }
    let killed_at = kill_two(&lines, |w| {
        let (proxy, _, task) = &workers[w as usize];
        proxy.hold("UpdateItem", None, usize::MAX);
        task.abort();
    })
    .await;
    survivors_extend_two_holds(&lines, &killed_at).await;
    for (w, (_, stop, _)) in workers.iter().enumerate() {
        if !killed_at.contains_key(&(w as u32)) {
            stop.store(true, Ordering::Relaxed);
        }
    }
    for (w, (_, _, task)) in workers.into_iter().enumerate() {
        match task.await {
            Ok(result) => result.expect("a worker ends"),
            Err(e) => assert!(
                e.is_cancelled() && killed_at.contains_key(&(w as u32)),
                "{e}"
            ),
        }
    }
    let ended = SystemClock.epoch_millis();
    let lines = lines.lock().unwrap().clone();
    every_slot_back_and_never_held_twice(repo, &lines, &killed_at, ended).await;
}

/// Every slot back within the hold time plus one heartbeat of the last death or end, and the
/// logs of every holder checked ([`fleet::check`]).
async fn every_slot_back_and_never_held_twice(
    repo: dynalimit::Repository,
    lines: &BTreeMap<u32, Vec<Line>>,
    killed_at: &BTreeMap<u32, i64>,
    ended: i64,
) {
    // Every slot back within the hold time plus one heartbeat of the last death or end
    // (a lost release frees at the hold's expiry), polled every 50 ms.
    let hold = Duration::from_millis(HOLD_MS);
    let deadline = ended.max(killed_at.values().copied().max().unwrap())
        + i64::try_from((hold + hold / 3).as_millis()).unwrap();
    let limiter = RateLimiter::new(repo);
    let limit = Concurrency::new(fleet::LIMIT, MAX)
        .unwrap()
        .hold_time(hold)
        .unwrap();
    let mut held = Vec::new();
    while held.len() < MAX as usize {
        match limiter.hold(fleet::ENTITY, fleet::RESOURCE, &limit).await {
            Ok(slot) => held.push(slot),
            Err(e) => {
                assert!(e.rejection().is_some(), "{e}");
                assert!(
                    SystemClock.epoch_millis() < deadline + 500,
                    "{} of {MAX} slots back {} ms after the deadline",
                    held.len(),
                    SystemClock.epoch_millis() - deadline
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let all_back = SystemClock.epoch_millis();
    for slot in held {
        slot.release().await.unwrap();
    }

    let report = fleet::check(lines, killed_at, i64::try_from(HOLD_MS).unwrap());
    println!(
        "fleet: {} holds, {} ended by a kill, {} extended past one hold, {} lost, {} faults, \
         most at once {}, every slot back {} ms before the deadline",
        report.holds,
        report.killed,
        report.extended,
        report.lost,
        report.faults,
        report.most_at_once,
        deadline - all_back
    );
    assert!(report.overlaps.is_empty(), "{:?}", report.overlaps);
    assert!(report.most_at_once <= MAX as usize, "{report:?}");
    // The run exercised what it claims: many holds, full use, kills while holding, heartbeats.
    assert!(report.holds >= 30, "{report:?}");
    assert_eq!(report.most_at_once, MAX as usize, "{report:?}");
    assert!(report.killed >= 2, "{report:?}");
    assert!(report.extended >= 2, "{report:?}");
    assert!(report.faults >= 5, "{report:?}");
}
