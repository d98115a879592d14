//! Concurrency limits across processes: 64 tasks in 4 processes hold slots of one limit
//! (5 slots, 1.5 s hold time) through fault proxies that lose and refuse 5 % of the
//! requests; two processes are killed with SIGKILL while one of their tasks holds a slot
//! past its first hold time. Checked from every holder's log: no two beliefs of one slot
//! overlap and never more than 5 hold at once; and every slot is back within the hold time
//! plus one heartbeat after the last holder died or ended.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit::{Concurrency, RateLimiter};
use dynalimit_core::{Clock, SystemClock};
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
    let options = FleetOptions {
        table: table.name().to_owned(),
        namespace: "fleet".into(),
        max: MAX,
        hold_ms: HOLD_MS,
        tasks: 16,
        fault_rate: 0.05,
        seed: 11,
    };
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
    let mut killed_at = BTreeMap::new();
    let started = SystemClock.epoch_millis();
    tokio::time::sleep(Duration::from_secs(2)).await;
    while killed_at.len() < 2 {
        assert!(
            SystemClock.epoch_millis() - started < 60_000,
            "no worker held a long slot to be killed during"
        );
        // A hold that has outlived its first hold time: heartbeats kept it.
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
        let child = &mut workers[w as usize];
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        killed_at.insert(w, SystemClock.epoch_millis());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
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

    let lines = lines.lock().unwrap().clone();
    let report = fleet::check(&lines, &killed_at, i64::try_from(HOLD_MS).unwrap());
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
