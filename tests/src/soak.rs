//! The fault soak: many tasks in several processes acquire from cascading buckets while each
//! process's fault proxy loses answers at random, the parent bucket doubles its shards, and the
//! emulator is killed and restarted; a ledger of what every caller was told is then checked
//! against the table.
//!
//! [`run`] is the orchestrator: it starts its own DynamoDB Local keeping its data on disk (so
//! a restart finds the table), creates a parent `org` and children `k0..k7` cascading to it,
//! starts the worker processes (the `dynalimit-soak` binary with `--worker`), doubles the
//! parent's shards and kills the emulator on a schedule, and returns a [`Report`]. Each worker
//! runs tasks that acquire `rpm = 1` and a random `tpm`, then commit, roll back, or adjust up
//! or down and commit, and keep a [`Ledger`] per bucket owner:
//!
//! * `debited`: amounts known to be applied (admitted acquires, adjustments up that were
//!   committed); `credited`: known to be applied (rollbacks, releases);
//! * `maybe_debited` / `maybe_credited`: amounts whose outcome the caller cannot know (an
//!   acquire refused as unavailable, whose debits or whose compensation may stand; the debits
//!   a rejection names as unsettled; a commit or rollback that failed).
//!
//! The schedule counts the emulator's up time: the time a restart takes (longer on a loaded
//! machine) moves the later events and the end, so every run has the same time to admit,
//! refuse and fault. The workers run until the orchestrator closes their standard input.
//!
//! The checks, per bucket owner and limit: the table's `Σ tc` over the shards lies within
//! `[debited − credited − maybe_credited, debited − credited + maybe_debited]` (every unknown
//! outcome accounted for); the net handed out, `debited − credited − maybe_credited`, is at
//! most the capacity plus what refill added over the run (never over-admitted); no task is
//! stuck (every acquire, commit and rollback returns within its bound); every shard of a
//! bucket holds the same shard count.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit, OnUnavailable, RateLimiter};
use dynalimit_core::Clock as _;
use dynalimit_format::item::get_i64;
use dynalimit_format::keys;
use dynalimit_local::{self as local, DynamoDbLocal};
use dynalimit_repository::NewEntity;
use dynalimit_repository::aws::local_credentials;
use dynalimit_repository::bucket::BucketKey;
use dynalimit_repository::{Repository, RepositoryError};

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::fault::FaultProxy;

/// The table of a soak.
const TABLE: &str = "soak";
/// The namespace of a soak.
const NS: &str = "soak";
const RESOURCE: &str = "gpt-4";
const PARENT: &str = "org";
const CHILDREN: u32 = 8;
/// The parent's limits: the binding ones. Faults and the emulator's restarts leave the tasks
/// waiting much of a short soak (on two cores about 10 admissions a second): the parent's
/// requests a minute are set so that they bind all the same.
const PARENT_RPM: i64 = 120;
const PARENT_TPM: i64 = 12_000;
const CHILD_RPM: i64 = 300;
const CHILD_TPM: i64 = 30_000;
/// Longest an acquire, commit or rollback may take before its task counts as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(30);

/// What a soak does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    /// Worker processes.
    pub workers: u32,
    /// Tasks per worker.
    pub tasks: u32,
    /// Length of the acquiring phase, in seconds of the emulator's up time.
    pub seconds: u64,
    /// Probability that a data-plane request is faulted.
    pub fault_rate: f64,
    /// Times the emulator is killed and restarted.
    pub restarts: u32,
    /// Seed of the fault draws and the tasks' choices.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            workers: 4,
            tasks: 16,
            seconds: 30,
            fault_rate: 0.03,
            restarts: 2,
            seed: 1,
        }
    }
}

/// Amounts of one bucket owner and limit, in whole tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    /// Known applied debits.
    pub debited: i64,
    /// Known applied credits.
    pub credited: i64,
    /// Debits that may or may not stand.
    pub maybe_debited: i64,
    /// Credits that may or may not have been applied.
    pub maybe_credited: i64,
}

/// What one worker's callers were told.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Per `owner/limit`.
    pub amounts: BTreeMap<String, Amounts>,
    /// Acquires admitted.
    pub admitted: u64,
    /// Acquires refused as rate limited.
    pub rejected: u64,
    /// Of those, refused with a give-back that did not land for certain
    /// ([`dynalimit::Rejection::unsettled`]).
    pub unsettled: u64,
    /// Acquires refused as unavailable.
    pub unavailable: u64,
    /// Of those, refused because an outcome was unknown.
    pub unknown: u64,
    /// Commits and rollbacks that failed.
    pub failed_settlements: u64,
    /// Calls that did not return within [`STUCK_AFTER`].
    pub stuck: u64,
    /// Errors of any other kind, with their text.
    pub other_errors: Vec<String>,
    /// Faults the worker's proxy served, by kind.
    pub faults: BTreeMap<String, usize>,
}

impl Ledger {
    fn amounts(&mut self, owner: &str, limit: &str) -> &mut Amounts {
        self.amounts.entry(format!("{owner}/{limit}")).or_default()
    }

    fn merge(&mut self, other: Ledger) {
        for (k, a) in other.amounts {
            let m = self.amounts.entry(k).or_default();
            m.debited += a.debited;
            m.credited += a.credited;
            m.maybe_debited += a.maybe_debited;
            m.maybe_credited += a.maybe_credited;
        }
        self.admitted += other.admitted;
        self.rejected += other.rejected;
        self.unsettled += other.unsettled;
        self.unavailable += other.unavailable;
        self.unknown += other.unknown;
        self.failed_settlements += other.failed_settlements;
        self.stuck += other.stuck;
        self.other_errors.extend(other.other_errors);
        for (k, n) in other.faults {
            *self.faults.entry(k).or_default() += n;
        }
    }
}

/// One owner and limit as the table holds it after the soak, against the ledger.
#[derive(Debug, Clone, Serialize)]
pub struct Balance {
    /// `owner/limit`.
    pub key: String,
    /// The ledger's amounts.
    pub ledger: Amounts,
    /// `Σ tc` over the bucket's shards, whole tokens (floor).
    pub table_tc: i64,
    /// Capacity plus refill over the run.
    pub allowance: i64,
    /// Shard count of each shard.
    pub shard_counts: Vec<i64>,
}

impl Balance {
    /// `Σ tc` lies within what the ledger allows.
    pub fn accounted(&self) -> bool {
        let l = &self.ledger;
        let low = l.debited - l.credited - l.maybe_credited;
        let high = l.debited - l.credited + l.maybe_debited;
        // tc is kept in millitokens and floored here; one token of slack on the low side.
        self.table_tc >= low - 1 && self.table_tc <= high
    }

    /// The net handed out stays within capacity plus refill.
    pub fn within_allowance(&self) -> bool {
        let l = &self.ledger;
        l.debited - l.credited - l.maybe_credited <= self.allowance
    }

    /// Every shard holds the same count.
    pub fn shards_agree(&self) -> bool {
        self.shard_counts.windows(2).all(|w| w[0] == w[1])
    }
}

/// The outcome of a soak.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The options it ran with.
    pub options: Options,
    /// The merged ledger of every worker.
    pub ledger: Ledger,
    /// Per owner and limit.
    pub balances: Vec<Balance>,
    /// Seconds from the workers' start to the last one's end.
    pub elapsed_s: f64,
    /// Emulator restarts done.
    pub restarts: u32,
    /// Seconds the emulator was down (from each kill until it answered again).
    pub down_s: f64,
    /// Doublings of the parent's shards done (its final count).
    pub parent_shards: i64,
    /// Workers that did not end on time or failed.
    pub failed_workers: Vec<String>,
}

impl Report {
    /// Every check holds.
    pub fn passed(&self) -> bool {
        self.failed_workers.is_empty()
            && self.ledger.stuck == 0
            && self.ledger.other_errors.is_empty()
            && self
                .balances
                .iter()
                .all(|b| b.accounted() && b.within_allowance() && b.shards_agree())
    }
}

/// Why a soak could not run (its findings are in the [`Report`], not here).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SoakError {
    /// Setting up failed: a worker could not be started or read, or an item is unreadable.
    #[error("{0}")]
    Setup(String),
    /// DynamoDB Local could not be installed or started.
    #[error(transparent)]
    Local(#[from] dynalimit_local::LocalError),
    /// A request of the set-up or of the final reads failed.
    #[error(transparent)]
    Repository(#[from] RepositoryError),
}

fn setup(message: impl std::fmt::Display) -> SoakError {
    SoakError::Setup(message.to_string())
}

async fn client_for(endpoint: &str) -> Client {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(local_credentials())
        .endpoint_url(endpoint)
        .load()
        .await;
    Client::new(&sdk)
}

async fn open(client: Client) -> Result<Repository, RepositoryError> {
    Repository::builder()
        .client(client)
        .stack(TABLE)
        .namespace(NS)
        .open()
        .await
}

fn child(i: u32) -> String {
    format!("k{i}")
}

/// Runs a soak with workers started from `worker_exe` (the `dynalimit-soak` binary).
///
/// # Errors
/// [`SoakError::Local`] when the emulator cannot be installed or started,
/// [`SoakError::Setup`] when a worker cannot be started or read; the classified failure of
/// the set-up requests.
pub async fn run(options: &Options, worker_exe: &Path) -> Result<Report, SoakError> {
    let dir = local::install()?;
    let port = local::free_port()?;
    let db = std::env::temp_dir().join(format!("dynalimit-soak-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&db);
    let mut emulator = Some(DynamoDbLocal::start_persistent_in(&dir, port, &db)?);
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = client_for(&endpoint).await;
    dynalimit_repository::create_table(&client, TABLE).await?;
    let repo = open(client.clone()).await?;
    repo.create_entity(NewEntity::new(PARENT)).await?;
    repo.set_limits(
        PARENT,
        RESOURCE,
        &[
            Limit::per_minute("rpm", PARENT_RPM),
            Limit::per_minute("tpm", PARENT_TPM),
        ],
    )
    .await?;
    for i in 0..CHILDREN {
        repo.create_entity(NewEntity::new(child(i)).parent(PARENT).cascade(true))
            .await?;
        repo.set_limits(
            &child(i),
            RESOURCE,
            &[
                Limit::per_minute("rpm", CHILD_RPM),
                Limit::per_minute("tpm", CHILD_TPM),
            ],
        )
        .await?;
    }

    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..options.workers {
        let child = Command::new(worker_exe)
            .arg("--worker")
            .arg(serde_json::to_string(options).map_err(setup)?)
            .arg(w.to_string())
            .env("DYNALIMIT_TEST_ENDPOINT", &endpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| setup(format!("cannot start worker {w}: {e}")))?;
        workers.push(child);
    }

    // The schedule: doublings of the parent at a quarter and three quarters of the run,
    // restarts spread evenly.
    let total = Duration::from_secs(options.seconds);
    let mut events: Vec<(Duration, bool)> = vec![(total / 4, false), (total * 3 / 4, false)];
    for i in 1..=options.restarts {
        events.push((total * i / (options.restarts + 1), true));
    }
    events.sort();
    let mut restarts = 0;
    // The time the emulator was down: the schedule runs on up time.
    let mut down = Duration::ZERO;
    for (at, restart) in events {
        tokio::time::sleep((at + down).saturating_sub(started.elapsed())).await;
        if restart {
            let killed = Instant::now();
            if let Some(running) = emulator.take() {
                // SIGKILL the JVM, the watchdog shell's child, then reap the shell.
                let _ = Command::new("pkill")
                    .args(["-KILL", "-P", &running.pid().to_string()])
                    .status();
                running.stop();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            emulator = Some(DynamoDbLocal::start_persistent_in(&dir, port, &db)?);
            down += killed.elapsed();
            restarts += 1;
        } else {
            double_parent(&repo).await;
        }
    }

    tokio::time::sleep((total + down).saturating_sub(started.elapsed())).await;
    // The end: each worker's standard input closes.
    for child in &mut workers {
        drop(child.stdin.take());
    }
    let deadline = Instant::now() + STUCK_AFTER * 3;
    let mut ledger = Ledger::default();
    let mut failed_workers = Vec::new();
    for (w, mut child) in workers.into_iter().enumerate() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => {
                    let _ = child.kill();
                    failed_workers.push(format!("worker {w} did not end on time"));
                    break;
                }
            }
        }
        let output = child
            .wait_with_output()
            .map_err(|e| setup(format!("worker {w}: {e}")))?;
        match serde_json::from_slice::<Ledger>(&output.stdout) {
            Ok(l) if output.status.success() => ledger.merge(l),
            _ => failed_workers.push(format!(
                "worker {w} ended {} without a ledger",
                output.status
            )),
        }
    }
    let elapsed = started.elapsed();

    // Propagations the doublings reported failed are healed as a later pass would.
    let parent_shards = heal(&repo, PARENT).await;
    let mut balances = Vec::new();
    for owner in std::iter::once(PARENT.to_string()).chain((0..CHILDREN).map(child)) {
        let (rpm, tpm) = if owner == PARENT {
            (PARENT_RPM, PARENT_TPM)
        } else {
            (CHILD_RPM, CHILD_TPM)
        };
        let shards = read_shards(&client, repo.namespace_id(), &owner).await?;
        for (limit, per_minute) in [("rpm", rpm), ("tpm", tpm)] {
            let key = format!("{owner}/{limit}");
            let table_tc = shards
                .iter()
                .map(|(_, tc)| tc.get(limit).copied().unwrap_or(0))
                .sum::<i64>()
                .div_euclid(1000);
            // Refill over the run, rounded up to whole seconds, plus the capacity.
            let secs = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX) + 1;
            balances.push(Balance {
                ledger: ledger.amounts.get(&key).cloned().unwrap_or_default(),
                key,
                table_tc,
                allowance: per_minute + per_minute * secs / 60,
                shard_counts: shards.iter().map(|(count, _)| *count).collect(),
            });
        }
    }
    drop(emulator);
    let _ = std::fs::remove_dir_all(&db);
    Ok(Report {
        options: options.clone(),
        ledger,
        balances,
        elapsed_s: elapsed.as_secs_f64(),
        restarts,
        down_s: down.as_secs_f64(),
        parent_shards,
        failed_workers,
    })
}

/// Doubles the parent's shards, trying until the emulator answers.
async fn double_parent(repo: &Repository) {
    let store = repo.buckets();
    let key = BucketKey::new(PARENT, RESOURCE, 0);
    for _ in 0..100 {
        if let Ok(Some(img)) = store.read(&key).await {
            let from = img.shards();
            let to = from * 2;
            let now = repo.clock().epoch_millis();
            if matches!(store.double_shards(&key, from, to, now).await, Ok(d) if d.count > from) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Propagates the count shard 0 of `owner`'s bucket holds to the older shards; the count.
async fn heal(repo: &Repository, owner: &str) -> i64 {
    let store = repo.buckets();
    let key = BucketKey::new(owner, RESOURCE, 0);
    let Ok(Some(img)) = store.read(&key).await else {
        return 0;
    };
    let count = img.shards();
    if count > 1 {
        let _ = store.propagate_shard_count(&key, count / 2, count).await;
    }
    i64::from(count)
}

/// `(shard_count, tc per limit in millitokens)` of every existing shard of `owner`'s bucket
/// (shards are created on their first acquire, so some may not exist).
async fn read_shards(
    client: &Client,
    ns: &str,
    owner: &str,
) -> Result<Vec<(i64, BTreeMap<String, i64>)>, SoakError> {
    let read = |shard: u32| async move {
        client
            .get_item()
            .table_name(TABLE)
            .key(
                "PK",
                AttributeValue::S(keys::bucket_pk(ns, owner, RESOURCE, shard)),
            )
            .key("SK", AttributeValue::S(keys::STATE_SK.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| setup(format!("read {owner} shard {shard}: {e}")))
            .map(|out| out.item)
    };
    let count = match read(0).await? {
        Some(item) => get_i64(&item, "shard_count").unwrap_or(1),
        None => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for shard in 0..u32::try_from(count).unwrap_or(1) {
        if let Some(item) = read(shard).await? {
            let tc = ["rpm", "tpm"]
                .into_iter()
                .filter_map(|l| Some((l.to_string(), get_i64(&item, &format!("b_{l}_tc"))?)))
                .collect();
            out.push((get_i64(&item, "shard_count").unwrap_or(1), tc));
        }
    }
    Ok(out)
}

/// A flag set once standard input closes: a worker runs until its orchestrator closes it (or
/// goes away).
pub(crate) fn stop_when_stdin_closes() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        stopper.store(true, Ordering::Relaxed);
    });
    stop
}

/// One worker process: `options.tasks` tasks through its own fault proxy until the run ends;
/// returns its ledger.
///
/// # Errors
/// The classified failure of opening the repository.
pub async fn worker(options: &Options, index: u32) -> Result<Ledger, RepositoryError> {
    let proxy = FaultProxy::start().await;
    // An attempt without an answer within 2 s is an unknown outcome: on a loaded machine
    // (the emulator, four workers and whatever else shares the cores) some are.
    let client = proxy.client(3, Some(Duration::from_secs(2))).await;
    let repo = open(client).await?;
    let limiter = RateLimiter::with_on_unavailable(repo, OnUnavailable::Block);
    proxy.chaos(options.fault_rate, options.seed * 1000 + u64::from(index));
    let stop = stop_when_stdin_closes();
    let mut tasks = Vec::new();
    for t in 0..options.tasks {
        let limiter = limiter.clone();
        let seed = options.seed * 1_000_000 + u64::from(index) * 1000 + u64::from(t);
        let owner = child((index * options.tasks + t) % CHILDREN);
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            task(&limiter, &owner, seed, &stop).await
        }));
    }
    let mut ledger = Ledger::default();
    for t in tasks {
        match t.await {
            Ok(l) => ledger.merge(l),
            Err(e) => ledger.other_errors.push(format!("task panicked: {e}")),
        }
    }
    if tokio::time::timeout(STUCK_AFTER, limiter.settle())
        .await
        .is_err()
    {
        ledger.stuck += 1;
    }
    ledger.faults = proxy.chaos_served();
    Ok(ledger)
}

async fn task(limiter: &RateLimiter, owner: &str, seed: u64, stop: &AtomicBool) -> Ledger {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ledger = Ledger::default();
    let owners = [owner, PARENT];
    let mut unavailable_in_a_row = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let tpm: i64 = rng.random_range(1..=100);
        let amounts = [("rpm", 1), ("tpm", tpm)];
        let acquired =
            tokio::time::timeout(STUCK_AFTER, limiter.acquire(owner, RESOURCE, amounts)).await;
        if !matches!(acquired, Ok(Err(Error::Unavailable { .. }))) {
            unavailable_in_a_row = 0;
        }
        let lease = match acquired {
            Err(_) => {
                ledger.stuck += 1;
                continue;
            }
            Ok(Ok(lease)) => lease,
            Ok(Err(Error::Rejected(rejection))) => {
                ledger.rejected += 1;
                // A debit given back without confirmation may stand.
                if !rejection.unsettled().is_empty() {
                    ledger.unsettled += 1;
                }
                for u in rejection.unsettled() {
                    for (limit, n) in u.amounts() {
                        ledger.amounts(u.entity_id(), limit).maybe_debited += n;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Ok(Err(Error::Unavailable { message, .. })) => {
                ledger.unavailable += 1;
                if message.contains("may or may not have been applied") {
                    ledger.unknown += 1;
                }
                // The debits may stand (unknown, or a compensation that failed).
                for o in owners {
                    for (limit, n) in amounts {
                        ledger.amounts(o, limit).maybe_debited += n;
                    }
                }
                // As a caller would, it waits before trying again, longer while the
                // limiter stays unavailable.
                tokio::time::sleep(Duration::from_millis(20 << unavailable_in_a_row.min(4))).await;
                unavailable_in_a_row += 1;
                continue;
            }
            Ok(Err(e)) => {
                ledger.other_errors.push(format!("acquire: {e}"));
                continue;
            }
        };
        ledger.admitted += 1;
        let debited: Vec<String> = lease.entities().iter().map(|e| (*e).to_string()).collect();
        for o in &debited {
            for (limit, n) in amounts {
                ledger.amounts(o, limit).debited += n;
            }
        }
        let choice: u32 = rng.random_range(0..10);
        let adjust: i64 = rng.random_range(1..=50);
        let (settled, credit, debit) = match choice {
            0..=1 => (
                tokio::time::timeout(STUCK_AFTER, lease.rollback()).await,
                Some(amounts.to_vec()),
                None,
            ),
            2..=3 => {
                let _ = lease.adjust("tpm", adjust);
                (
                    tokio::time::timeout(STUCK_AFTER, lease.commit()).await,
                    None,
                    Some(adjust),
                )
            }
            4..=5 => {
                let back = adjust.min(tpm);
                let _ = lease.give_back("tpm", back);
                (
                    tokio::time::timeout(STUCK_AFTER, lease.commit()).await,
                    Some(vec![("tpm", back)]),
                    None,
                )
            }
            _ => (
                tokio::time::timeout(STUCK_AFTER, lease.commit()).await,
                None,
                None,
            ),
        };
        let ok = match settled {
            Err(_) => {
                ledger.stuck += 1;
                false
            }
            Ok(Ok(())) => true,
            Ok(Err(_)) => {
                ledger.failed_settlements += 1;
                false
            }
        };
        for o in &debited {
            if let Some(credit) = &credit {
                for (limit, n) in credit {
                    let a = ledger.amounts(o, limit);
                    if ok {
                        a.credited += n;
                    } else {
                        a.maybe_credited += n;
                    }
                }
            }
            if let Some(n) = debit {
                let a = ledger.amounts(o, "tpm");
                if ok {
                    a.debited += n;
                } else {
                    a.maybe_debited += n;
                }
            }
        }
    }
    ledger
}
