//! A remote with an escalating penalty, like an ads API: above its rate it answers "wait 15 s",
//! and every call made during a cooldown doubles the penalty (up to 15 min) and restarts the
//! cooldown. 64 concurrent workers call it for an hour of virtual time, once with the backoff
//! gate and once with each worker only honouring the Retry-After it received itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit::backoff::Backoff;
use dynalimit::time::TokioClock;
use tokio::time::Instant;

const WORKERS: usize = 64;
/// Service time of an accepted call; a refused call is answered at once.
const LATENCY: Duration = Duration::from_millis(50);
/// The remote's quota: a bucket of `RATE` calls per second, burst `RATE`.
const RATE: f64 = 100.0;
const FIRST_PENALTY: Duration = Duration::from_secs(15);
const MAX_PENALTY: Duration = Duration::from_secs(15 * 60);
const RUN: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct Remote {
    tokens: f64,
    refilled: Instant,
    cooldown_until: Option<Instant>,
    penalty: Duration,
    /// Escalations of each incident, in order.
    incidents: Vec<u32>,
    accepted: u64,
    calls: u64,
}

impl Remote {
    fn new() -> Self {
        Self {
            tokens: RATE,
            refilled: Instant::now(),
            cooldown_until: None,
            penalty: FIRST_PENALTY,
            incidents: Vec::new(),
            accepted: 0,
            calls: 0,
        }
    }

    /// `Ok` when served, `Err(retry_after)` when refused.
    fn call(&mut self) -> Result<(), Duration> {
        let now = Instant::now();
        self.calls += 1;
        self.tokens = (self.tokens + (now - self.refilled).as_secs_f64() * RATE).min(RATE);
        self.refilled = now;
        if let Some(until) = self.cooldown_until
            && now < until
        {
            self.penalty = (self.penalty * 2).min(MAX_PENALTY);
            self.cooldown_until = Some(now + self.penalty);
            *self
                .incidents
                .last_mut()
                .expect("a cooldown belongs to an incident") += 1;
            return Err(self.penalty);
        }
        if self.tokens < 1.0 {
            self.penalty = FIRST_PENALTY;
            self.cooldown_until = Some(now + self.penalty);
            self.incidents.push(0);
            return Err(self.penalty);
        }
        self.tokens -= 1.0;
        self.accepted += 1;
        Ok(())
    }
}

struct Outcome {
    incidents: Vec<u32>,
    accepted: u64,
    calls: u64,
    penalty: Duration,
}

/// `wire` is the one-way network delay: a request reaches the remote `wire` after it is sent,
/// and the answer comes back `wire` later.
async fn run(gate: Option<Backoff>, wire: Duration) -> Outcome {
    let remote = Arc::new(Mutex::new(Remote::new()));
    let end = Instant::now() + RUN;
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (remote, gate) = (Arc::clone(&remote), gate.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                if let Some(g) = &gate {
                    g.wait("ads-api").await;
                    if Instant::now() >= end {
                        break;
                    }
                }
                if !wire.is_zero() {
                    tokio::time::sleep(wire).await;
                }
                let answer = remote.lock().unwrap().call();
                if !wire.is_zero() {
                    tokio::time::sleep(wire).await;
                }
                match (answer, &gate) {
                    (Ok(()), _) => tokio::time::sleep(LATENCY).await,
                    (Err(retry_after), Some(g)) => {
                        g.pause("ads-api", Some(retry_after));
                    }
                    (Err(retry_after), None) => tokio::time::sleep(retry_after).await,
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let r = remote.lock().unwrap();
    Outcome {
        incidents: r.incidents.clone(),
        accepted: r.accepted,
        calls: r.calls,
        penalty: r.penalty,
    }
}

fn report(name: &str, o: &Outcome) {
    let escalations: u32 = o.incidents.iter().sum();
    let worst = o.incidents.iter().max().copied().unwrap_or(0);
    println!(
        "{name:<28} {:>9} {:>11} {:>15} {:>10} {:>12} {:>11.0?}",
        o.incidents.len(),
        escalations,
        worst,
        o.calls,
        o.accepted,
        o.penalty,
    );
}

#[tokio::test(start_paused = true)]
async fn the_gate_keeps_escalations_to_at_most_one_per_incident() {
    let gate = Backoff::builder()
        .clock(TokioClock::new(0))
        .seed(5)
        .build()
        .unwrap();
    let with_gate = run(Some(gate.clone()), Duration::ZERO).await;
    let without = run(None, Duration::ZERO).await;
    let wire = Duration::from_millis(10);
    let with_gate_wire = run(Some(gate), wire).await;
    let without_wire = run(None, wire).await;

    println!(
        "escalating remote: {WORKERS} workers, {RATE}/s quota, {FIRST_PENALTY:?} doubling to {MAX_PENALTY:?}, {RUN:?} virtual"
    );
    println!(
        "{:<28} {:>9} {:>11} {:>15} {:>10} {:>12} {:>11}",
        "", "incidents", "escalations", "max/incident", "calls", "accepted", "last penalty"
    );
    report("with the backoff gate", &with_gate);
    report("per-worker Retry-After only", &without);
    report("gate, 10 ms wire each way", &with_gate_wire);
    report("no gate, 10 ms wire", &without_wire);

    assert!(
        !with_gate.incidents.is_empty(),
        "the scenario must overload the remote"
    );
    assert!(
        with_gate.incidents.iter().all(|e| *e <= 1),
        "with the gate: {:?}",
        with_gate.incidents
    );
    let escalations_without: u32 = without.incidents.iter().sum();
    assert!(
        escalations_without > 0,
        "without the gate the penalty escalates"
    );
    assert!(with_gate.accepted > without.accepted);
    // With a network delay, calls already on the wire when an incident starts land in the
    // cooldown; the gate cannot recall them, but it stops every call after the first answer.
    let wire_gate: u32 = with_gate_wire.incidents.iter().sum();
    let wire_none: u32 = without_wire.incidents.iter().sum();
    assert!(wire_gate < wire_none, "{wire_gate} vs {wire_none}");
}
