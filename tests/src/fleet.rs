//! The fleet test of concurrency limits: tasks in several processes hold slots of one limit
//! through fault proxies that lose answers at random, while the orchestrator kills processes
//! with SIGKILL; every holder's belief is logged and checked.
//!
//! A worker ([`worker`], the `dynalimit-soak` binary with `--fleet-worker`) runs
//! [`FleetOptions::tasks`] tasks until its standard input closes. Each task holds a slot,
//! works for a random time (a tenth of the time longer than the hold time, with
//! [`Slot::keep_alive`](dynalimit::Slot::keep_alive) extending it), and releases it. It prints
//! one JSON line when a take is answered (`held`: the slot, when, until when) and one before
//! it sends the release (`ended`: the end of its belief, the earlier of now and the hold's
//! expiry as it last knew it), flushed at once, so a killed process leaves every line it
//! wrote. A holder that keeps its slot alive also prints each new expiry its heartbeats
//! bring (`extended`), within 10 ms of it.
//!
//! [`check`] reads the lines of every worker: the beliefs of one slot never overlap, and at
//! no instant do more than `max` holders believe they hold one. A holder in a killed process
//! believes until the kill or until the last expiry it knew, whichever is first (a holder
//! whose heartbeats fail stops believing at that expiry: past it the slot may be another's).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dynalimit::{Concurrency, RateLimiter, Repository};
use dynalimit_core::{Clock, SystemClock};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::fault::FaultProxy;

/// What the workers of one run share.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetOptions {
    /// The table.
    pub table: String,
    /// The namespace.
    pub namespace: String,
    /// Slots of the limit.
    pub max: u32,
    /// Hold time, ms.
    pub hold_ms: u64,
    /// Tasks per worker.
    pub tasks: u32,
    /// Share of requests the proxy faults (lost answers among them).
    pub fault_rate: f64,
    /// Seed of the faults and the work times.
    pub seed: u64,
}

/// The entity, resource and limit every task holds.
pub const ENTITY: &str = "acme";
/// See [`ENTITY`].
pub const RESOURCE: &str = "gpt-4";
/// See [`ENTITY`].
pub const LIMIT: &str = "streams";

/// One line of a worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// A take was answered: `slot` is held from `at` until `until` unless extended.
    Held {
        /// The hold's id (worker, task, count).
        id: String,
        /// The slot.
        slot: u32,
        /// When the answer came, epoch ms.
        at: i64,
        /// The expiry it gave.
        until: i64,
        /// Whether the holder works longer than the hold time (and keeps the slot alive).
        long: bool,
    },
    /// A heartbeat moved the hold's expiry to `until`.
    Extended {
        /// The hold's id.
        id: String,
        /// The new expiry, epoch ms.
        until: i64,
    },
    /// The holder stops believing at `at` and releases.
    Ended {
        /// The hold's id.
        id: String,
        /// The end of its belief, epoch ms.
        at: i64,
        /// Whether a heartbeat found the slot lost.
        lost: bool,
    },
    /// At the end of a worker that was not killed: the faults its proxy served, by kind.
    Faults {
        /// Count per kind.
        served: BTreeMap<String, usize>,
    },
}

fn print(line: &Line) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string(line).unwrap_or_default());
    let _ = out.flush();
}

/// Where a worker writes its lines.
pub type Sink = Arc<dyn Fn(&Line) + Send + Sync>;

/// One worker process (see the module documentation): its lines to standard output, until
/// standard input closes.
///
/// # Errors
/// The failure of opening the repository, or bad options.
pub async fn worker(options: &FleetOptions, index: u32) -> Result<(), String> {
    let proxy = FaultProxy::start().await;
    let stop = crate::soak::stop_when_stdin_closes();
    run(options, index, &proxy, stop, Arc::new(print)).await
}

/// A worker's tasks through `proxy`, each line to `out`, until `stop` is set: the body of
/// [`worker`], which an in-process fleet also runs (its "kill": `proxy` holding every write,
/// then the task aborted).
///
/// # Errors
/// The failure of opening the repository, or bad options.
pub async fn run(
    options: &FleetOptions,
    index: u32,
    proxy: &FaultProxy,
    stop: Arc<std::sync::atomic::AtomicBool>,
    out: Sink,
) -> Result<(), String> {
    let client = proxy.client(3, Some(Duration::from_secs(2))).await;
    let repo = Repository::builder()
        .client(client)
        .stack(options.table.clone())
        .namespace(options.namespace.clone())
        .open()
        .await
        .map_err(|e| e.to_string())?;
    let limiter = RateLimiter::new(repo);
    proxy.chaos(options.fault_rate, options.seed * 1000 + u64::from(index));
    let limit = Concurrency::new(LIMIT, options.max)
        .and_then(|c| c.hold_time(Duration::from_millis(options.hold_ms)))
        .map_err(|e| e.to_string())?;
    // Dropped (the worker aborted), the set aborts every task: their slots are dropped.
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..options.tasks {
        let limiter = limiter.clone();
        let limit = limit.clone();
        let stop = Arc::clone(&stop);
        let print = Arc::clone(&out);
        let seed = options.seed * 1_000_000 + u64::from(index) * 1000 + u64::from(t);
        let hold_ms = options.hold_ms;
        tasks.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = match limiter.hold(ENTITY, RESOURCE, &limit).await {
                    Ok(slot) => slot,
                    Err(e) => {
                        let wait = e
                            .rejection()
                            .and_then(dynalimit::Rejection::retry_after)
                            .unwrap_or(Duration::from_millis(50))
                            .min(Duration::from_millis(50));
                        tokio::time::sleep(wait + Duration::from_millis(rng.random_range(0..20)))
                            .await;
                        continue;
                    }
                };
                n += 1;
                let id = format!("{index}-{t}-{n}");
                let at = SystemClock.epoch_millis();
                let long = rng.random_range(0..20) == 0;
                print(&Line::Held {
                    id: id.clone(),
                    slot: slot.index(),
                    at,
                    until: slot.expires_at_ms(),
                    long,
                });
                let mut slot = slot;
                if long {
                    slot.keep_alive();
                    let work = rng.random_range(hold_ms..hold_ms * 2);
                    let until = SystemClock.epoch_millis() + i64::try_from(work).unwrap_or(0);
                    let mut known = slot.expires_at_ms();
                    while SystemClock.epoch_millis() < until {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        let now = slot.expires_at_ms();
                        if now != known {
                            known = now;
                            print(&Line::Extended {
                                id: id.clone(),
                                until: now,
                            });
                        }
                    }
                } else {
                    // Between a tenth and a third of the hold time: long enough that the
                    // slots are all in use at times.
                    let work = rng.random_range(hold_ms / 10..hold_ms / 3);
                    tokio::time::sleep(Duration::from_millis(work)).await;
                }
                let end = SystemClock.epoch_millis().min(slot.expires_at_ms());
                print(&Line::Ended {
                    id,
                    at: end,
                    lost: slot.is_lost(),
                });
                let _ = slot.release().await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    out(&Line::Faults {
        served: proxy.chaos_served(),
    });
    Ok(())
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct FleetReport {
    /// Holds seen.
    pub holds: usize,
    /// Holds that ended by a kill (no `ended` line).
    pub killed: usize,
    /// Holds whose heartbeat found the slot lost.
    pub lost: usize,
    /// Beliefs that lasted longer than one hold time (heartbeats extended them).
    pub extended: usize,
    /// Faults the proxies of the workers that ended served.
    pub faults: usize,
    /// The most holders believing at once.
    pub most_at_once: usize,
    /// Two beliefs of one slot overlapping: (slot, the first, the second).
    pub overlaps: Vec<(u32, Belief, Belief)>,
}

/// What one holder believed: that it held `slot` from `from` to `to` (epoch ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Belief {
    /// The hold's id.
    pub id: String,
    /// The slot.
    pub slot: u32,
    /// From, epoch ms.
    pub from: i64,
    /// To, epoch ms.
    pub to: i64,
    /// Whether it ended by a kill (no `ended` line).
    pub killed: bool,
}

/// Whether a worker's `lines` show a hold longer than the hold time, taken before
/// `taken_before` (epoch ms), still open.
pub fn holds_long(lines: &[Line], taken_before: i64) -> bool {
    let mut open = std::collections::BTreeSet::new();
    for line in lines {
        match line {
            Line::Held {
                id, long: true, at, ..
            } if *at < taken_before => {
                open.insert(id.as_str());
            }
            Line::Ended { id, .. } => {
                open.remove(id.as_str());
            }
            _ => {}
        }
    }
    !open.is_empty()
}

/// Reads the lines of every worker; `killed_at` gives, per worker index killed, when.
pub fn check(
    lines: &BTreeMap<u32, Vec<Line>>,
    killed_at: &BTreeMap<u32, i64>,
    hold_ms: i64,
) -> FleetReport {
    let mut report = FleetReport::default();
    let mut beliefs: Vec<Belief> = Vec::new();
    for (worker, lines) in lines {
        // id → (slot, from, the last expiry the holder knew)
        let mut open: BTreeMap<&str, (u32, i64, i64)> = BTreeMap::new();
        for line in lines {
            match line {
                Line::Held {
                    id,
                    slot,
                    at,
                    until,
                    ..
                } => {
                    open.insert(id, (*slot, *at, *until));
                }
                Line::Extended { id, until } => {
                    if let Some(hold) = open.get_mut(id.as_str()) {
                        hold.2 = *until;
                    }
                }
                Line::Ended { id, at, lost } => {
                    if let Some((slot, from, _)) = open.remove(id.as_str()) {
                        beliefs.push(Belief {
                            id: id.clone(),
                            slot,
                            from,
                            to: *at,
                            killed: false,
                        });
                        report.lost += usize::from(*lost);
                    }
                }
                Line::Faults { served } => report.faults += served.values().sum::<usize>(),
            }
        }
        for (id, (slot, from, until)) in open {
            // A killed holder believed until its death or the last expiry it knew.
            let died = killed_at.get(worker).copied().unwrap_or(i64::MAX);
            report.killed += usize::from(killed_at.contains_key(worker));
            beliefs.push(Belief {
                id: id.to_owned(),
                slot,
                from,
                to: died.min(until),
                killed: true,
            });
        }
    }
    // A belief that ends before it starts (a hold that lapsed before its answer) holds
    // nothing.
    beliefs.retain(|b| b.to > b.from);
    report.holds = beliefs.len();
    report.extended = beliefs.iter().filter(|b| b.to - b.from > hold_ms).count();
    let mut by_slot: BTreeMap<u32, Vec<&Belief>> = BTreeMap::new();
    for b in &beliefs {
        by_slot.entry(b.slot).or_default().push(b);
    }
    for (slot, mut list) in by_slot {
        list.sort_by_key(|b| b.from);
        for pair in list.windows(2) {
            if pair[1].from < pair[0].to {
                report
                    .overlaps
                    .push((slot, pair[0].clone(), pair[1].clone()));
            }
        }
    }
    let mut events: Vec<(i64, i32)> = beliefs
        .iter()
        .flat_map(|b| [(b.from, 1), (b.to, -1)])
        .collect();
    // An end and a start at the same instant do not overlap.
    events.sort();
    let mut now = 0i64;
    for (_, d) in events {
        now += i64::from(d);
        report.most_at_once = report.most_at_once.max(usize::try_from(now).unwrap_or(0));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, slot: u32, at: i64, until: i64) -> Line {
        Line::Held {
            id: id.into(),
            slot,
            at,
            until,
            long: true,
        }
    }

    #[test]
    fn a_killed_holder_believes_until_the_last_expiry_it_knew() {
        // Worker 0's hold was extended once to 2500, then its heartbeats failed; it was
        // killed at 4000. Worker 1 took the slot at 3000.
        let lines = BTreeMap::from([
            (
                0,
                vec![
                    held("0-0-1", 2, 0, 1500),
                    Line::Extended {
                        id: "0-0-1".into(),
                        until: 2500,
                    },
                ],
            ),
            (
                1,
                vec![
                    held("1-0-1", 2, 3000, 4500),
                    Line::Ended {
                        id: "1-0-1".into(),
                        at: 3200,
                        lost: false,
                    },
                ],
            ),
        ]);
        let report = check(&lines, &BTreeMap::from([(0, 4000)]), 1500);
        assert!(report.overlaps.is_empty(), "{:?}", report.overlaps);
        assert_eq!(
            (report.holds, report.killed, report.most_at_once),
            (2, 1, 1)
        );
        assert_eq!(report.extended, 1);
        // Extended past 3000, the same lines overlap.
        let mut lines = lines;
        lines.get_mut(&0).unwrap().push(Line::Extended {
            id: "0-0-1".into(),
            until: 3600,
        });
        let report = check(&lines, &BTreeMap::from([(0, 4000)]), 1500);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(
            (report.overlaps[0].1.to, report.overlaps[0].1.killed),
            (3600, true)
        );
        assert_eq!(report.most_at_once, 2);
    }

    #[test]
    fn beliefs_that_touch_do_not_overlap() {
        let lines = BTreeMap::from([(
            0,
            vec![
                held("0-0-1", 1, 0, 1500),
                Line::Ended {
                    id: "0-0-1".into(),
                    at: 100,
                    lost: false,
                },
                held("0-1-1", 1, 100, 1600),
                Line::Ended {
                    id: "0-1-1".into(),
                    at: 200,
                    lost: false,
                },
            ],
        )]);
        let report = check(&lines, &BTreeMap::new(), 1500);
        assert!(report.overlaps.is_empty());
        assert_eq!(report.most_at_once, 1);
    }
}
