//! `dynalimit bench --mixed`: dynalimit and zae-limiter 0.17 acquiring together on one bucket
//! that splits during the run, and what they admit against what the limit allows.
//!
//! A fresh DynamoDB Local (or the configured endpoint) gets one entity whose limit is stored
//! for one resource: [`mixed_limit`], 1200 a minute with a capacity of 240. Both fleets
//! acquire 1 of it, each task trying again at once when refused, through a
//! [`ThrottleProxy`] that lets each partition key
//! take `--partition-rate` writes per second: `--mixed-tasks` tokio tasks with dynalimit's
//! `RateLimiter`, and `--zae-tasks` asyncio tasks in one Python process (the bench script
//! `python/zae_bench.py`, embedded in the binary) with zae-limiter's own `RateLimiter`.
//! Nothing prepares the bucket: the first acquire creates it as one shard, and every split is
//! a library's own (dynalimit's after a second of throttling of shard 0).
//!
//! The span runs from the bucket's creation (shard 0 watched straight on the emulator, see
//! [`creation`]) to after both fleets have ended, so the allowance, capacity + floor(elapsed
//! ms x refill amount / refill period) in millitokens, is at least what the limit allowed
//! from the creation to the last decision. Every shard is then read back straight from the emulator:
//! the consumption recorded (`tc`) must equal what the fleets counted as admitted, and the
//! tokens the shards hold at the end (refilled to the end) are what was allowed but not
//! handed out. The run fails when the fleets admitted more than the allowance.
//!
//! The target (0.95) is held against the span in which both fleets ask: the acquires that
//! returned admitted by the deadline, against the allowance from the creation to the
//! deadline. After the deadline only the acquires in flight finish, some of them in a
//! client's retries on throttling for seconds; the bucket refills meanwhile with nobody
//! asking, so the share of the allowance to the end is reported but not held to the target.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use dynalimit::{Limit, RateLimiter};
use dynalimit_core::bucket::refill;
use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_demo::Target;
use dynalimit_format::bucket::BucketKey;
use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};
use dynalimit_repository::Repository;
use dynalimit_repository::aws::AwsSettings;
use serde::Deserialize;
use serde_json::json;

use crate::bench::{BenchArgs, MixedArgs};
use crate::compare::{PEER, PEER_LINE, Script, interpreter};
use crate::output::bench::{Machine, MixedReport, MixedSide};

const NAMESPACE: &str = "mixed";
const ENTITY: &str = "shared";
const RESOURCE: &str = "model";

/// The most shards a bucket has (reference §1.4.7).
const MAX_SHARDS: u32 = 32;

/// The share of the allowance the fleets must admit together.
const TARGET: f64 = 0.95;

/// The shared limit: 1200 a minute (20 a second), capacity 240, so that the fleets, which
/// drive some 60 admitted a second through two throttled shards on a 2-core machine, spend
/// the burst within seconds and the refill binds from there. Both divide by every shard
/// count, so no share is lost to floor division.
pub(crate) fn mixed_limit() -> Limit {
    Limit::per_minute("rpm", 1200).with_burst(240)
}

/// The tokens `limit` allows from `start_ms` to `end_ms`, in millitokens: the capacity plus
/// floor(elapsed ms x refill amount / refill period), as the table format's refill counts.
fn allowance_milli(limit: &Limit, start_ms: i64, end_ms: i64) -> i64 {
    let elapsed = i128::from(end_ms.saturating_sub(start_ms).max(0));
    let added = (elapsed * i128::from(limit.refill_amount_milli()))
        .div_euclid(i128::from(limit.refill_period_millis().max(1)));
    i64::try_from(i128::from(limit.capacity_milli()) + added).unwrap_or(i64::MAX)
}

/// What one fleet counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
struct Tally {
    admitted: u64,
    /// Admitted acquires that returned by the deadline.
    #[serde(default)]
    admitted_in_time: u64,
    rejected: u64,
    /// Acquires that failed otherwise.
    errors: u64,
    first_error: Option<String>,
}

/// What a mixed run measured.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    /// Epoch ms before either fleet started.
    start_ms: i64,
    /// Epoch ms the bucket was created at, or a little earlier (see [`creation`]).
    created_ms: i64,
    /// Epoch ms the fleets stopped starting acquires at.
    until_ms: i64,
    /// Epoch ms after both ended.
    end_ms: i64,
    dynalimit: Tally,
    zae: Tally,
    zae_version: String,
    /// Requests zae-limiter's client sent, retries included.
    zae_requests: u64,
    /// The bucket's shard count at the end (shard 0's).
    shards: u32,
    /// Consumption recorded across the shards, millitokens.
    recorded_milli: i64,
    /// Tokens the shards hold at the end, refilled to `end_ms`, millitokens.
    held_milli: i64,
    /// Requests the proxy refused and forwarded.
    throttled: u64,
    forwarded: u64,
}

/// Millitokens as tokens.
fn tokens(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

impl Outcome {
    fn admitted(&self) -> u64 {
        self.dynalimit.admitted + self.zae.admitted
    }

    fn admitted_in_time(&self) -> u64 {
        self.dynalimit.admitted_in_time + self.zae.admitted_in_time
    }

    fn admitted_milli(&self) -> i128 {
        i128::from(self.admitted()) * 1000
    }

    fn report(&self, limit: &Limit, args: &MixedArgs, partition_rate: u32) -> MixedReport {
        let allowance = allowance_milli(limit, self.created_ms, self.end_ms);
        let at_deadline = allowance_milli(limit, self.created_ms, self.until_ms);
        let admitted = self.admitted_milli();
        let in_time = i128::from(self.admitted_in_time()) * 1000;
        let ratio = if allowance > 0 {
            admitted as f64 / allowance as f64
        } else {
            0.0
        };
        let side = |library: &str, version: &str, tasks: u64, t: &Tally, requests| MixedSide {
            library: library.to_owned(),
            version: version.to_owned(),
            tasks,
            admitted: t.admitted,
            rejected: t.rejected,
            errors: t.errors,
            first_error: t.first_error.clone(),
            requests,
        };
        MixedReport {
            machine: Machine::this_host(),
            partition_writes_per_s: partition_rate,
            seconds: tokens(self.end_ms - self.created_ms),
            created_after_s: tokens(self.created_ms - self.start_ms),
            capacity: limit.capacity(),
            refill_amount: limit.refill_amount(),
            refill_period_seconds: limit.refill_period_seconds(),
            allowance: tokens(allowance),
            dynalimit: side(
                crate::bench::LIBRARY,
                env!("CARGO_PKG_VERSION"),
                args.mixed_tasks,
                &self.dynalimit,
                None,
            ),
            zae: side(
                PEER,
                &self.zae_version,
                args.zae_tasks,
                &self.zae,
                Some(self.zae_requests),
            ),
            admitted: self.admitted(),
            ratio: (ratio * 1000.0).floor() / 1000.0,
            allowance_at_deadline: tokens(at_deadline),
            admitted_at_deadline: self.admitted_in_time(),
            ratio_at_deadline: if at_deadline > 0 {
                (in_time as f64 / at_deadline as f64 * 1000.0).floor() / 1000.0
            } else {
                0.0
            },
            target: TARGET,
            met: in_time * 100 >= i128::from(at_deadline) * 95,
            over_admitted: admitted > i128::from(allowance),
            shards: self.shards,
            splits: self.shards.max(1).ilog2(),
            recorded: tokens(self.recorded_milli),
            conserved: i128::from(self.recorded_milli) == admitted,
            held: tokens(self.held_milli),
            throttled_requests: self.throttled,
            forwarded_requests: self.forwarded,
        }
    }
}

/// Runs the mixed fleets against the endpoint `settings` configure, or a fresh private
/// DynamoDB Local; `stack` is the table.
pub(crate) async fn run(
    args: &BenchArgs,
    settings: &AwsSettings,
    stack: &str,
) -> anyhow::Result<()> {
    let python = interpreter(
        args.python.as_deref(),
        std::env::var_os("DYNALIMIT_PYTHON").map(std::path::PathBuf::from),
    )?;
    let partition_rate = args.hot.partition_rate;
    if !args.json {
        eprintln!("Starting the endpoint...");
    }
    let target = Target::from_settings(settings).await?;
    let outcome = both(args, &python, &target, stack).await;
    target.stop().await;
    let outcome = outcome?;
    let report = outcome.report(&mixed_limit(), &args.mixed, partition_rate);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    anyhow::ensure!(
        !report.over_admitted,
        "over-admission: {} admitted where the limit allowed {}",
        report.admitted,
        report.allowance
    );
    Ok(())
}

fn print_report(r: &MixedReport) {
    println!(
        "\nmixed fleets: one bucket ({} a {} s, capacity {}), each shard {} writes/s, {:.1} s \
         from its creation ({:.2} s after the start)\n",
        r.refill_amount,
        r.refill_period_seconds,
        r.capacity,
        r.partition_writes_per_s,
        r.seconds,
        r.created_after_s
    );
    println!("| library | tasks | admitted | rejected | errors | requests |");
    println!("|---|---:|---:|---:|---:|---:|");
    for s in [&r.dynalimit, &r.zae] {
        println!(
            "| {} {} | {} | {} | {} | {} | {} |",
            s.library,
            s.version,
            s.tasks,
            s.admitted,
            s.rejected,
            s.errors,
            s.requests.map_or("-".to_owned(), |n| n.to_string())
        );
    }
    println!(
        "\nwhile both fleets asked (from the bucket's creation to the deadline): {:.3} allowed, \
         {} admitted and returned by then, ratio {:.3} (target {}: {})\n\
         to the end ({:.1} s, until the last acquire returned): {:.3} allowed, {} admitted, \
         ratio {:.3}\n\
         over-admitted: {}\n\
         shards at the end: {} ({} splits)\nrecorded = admitted: {}\n\
         held by the shards at the end: {:.3}\nrequests refused by the partition limit: {} \
         (forwarded {})",
        r.allowance_at_deadline,
        r.admitted_at_deadline,
        r.ratio_at_deadline,
        r.target,
        if r.met { "met" } else { "NOT met" },
        r.seconds,
        r.allowance,
        r.admitted,
        r.ratio,
        if r.over_admitted { "YES" } else { "no" },
        r.shards,
        r.splits,
        if r.conserved {
            format!("yes ({})", r.admitted)
        } else {
            format!("NO: {} admitted, {} recorded", r.admitted, r.recorded)
        },
        r.held,
        r.throttled_requests,
        r.forwarded_requests,
    );
    for s in [&r.dynalimit, &r.zae] {
        if let Some(e) = &s.first_error {
            println!("{}'s first error: {e}", s.library);
        }
    }
}

async fn open(client: aws_sdk_dynamodb::Client, stack: &str) -> anyhow::Result<Repository> {
    Repository::builder()
        .client(client)
        .stack(stack)
        .namespace(NAMESPACE)
        .open()
        .await
        .context("opening the benchmark table")
}

/// Both fleets on `target`, then the shards read back.
async fn both(
    args: &BenchArgs,
    python: &Path,
    target: &Target,
    stack: &str,
) -> anyhow::Result<Outcome> {
    let mixed = &args.mixed;
    // Opening registers the namespace, which zae-limiter's connect only reads.
    let direct = open(target.client(None).await?, stack).await?;
    let limit = mixed_limit();
    direct
        .set_limits(ENTITY, RESOURCE, std::slice::from_ref(&limit))
        .await?;
    // The emulator's JIT warms on a load nobody measures, on another entity.
    let warm_limit = Limit::per_hour("rpm", 1_000_000_000_000);
    direct
        .set_limits("warm-up", RESOURCE, std::slice::from_ref(&warm_limit))
        .await?;
    let warm_until = SystemClock.epoch_millis() + 2000;
    fleet(
        RateLimiter::new(direct.clone()),
        "warm-up",
        mixed.mixed_tasks,
        warm_until,
    )
    .await?;

    let proxy = ThrottleProxy::start(
        target.url(),
        PartitionLimits::new(dynalimit_format::attr::PK, args.hot.partition_rate),
    )
    .await?;
    let throttled = open(Target::external(proxy.url()).client(None).await?, stack).await?;
    let mut peer = Peer::start(python, &proxy.url(), stack, mixed.zae_tasks).await?;
    if !args.json {
        eprintln!(
            "{PEER} {} ready; both fleets acquire for {} s...",
            peer.version, mixed.mixed_seconds
        );
    }
    let limiter = RateLimiter::new(throttled);
    let start_ms = SystemClock.epoch_millis();
    let until = start_ms + i64::try_from(mixed.mixed_seconds * 1000)?;
    peer.go(until).await?;
    let created = tokio::spawn(creation(direct.clone(), start_ms, until));
    let sampler = (!args.json).then(|| tokio::spawn(timeline(direct.clone(), start_ms, until)));
    let ours = fleet(limiter.clone(), ENTITY, mixed.mixed_tasks, until).await?;
    let our_end = SystemClock.epoch_millis();
    let (zae, zae_requests, zae_end) = peer.finish().await?;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let end_ms = our_end.max(zae_end);
    if !args.json {
        eprintln!(
            "dynalimit's fleet ended {} ms after the deadline, {PEER}'s {} ms after",
            our_end - until,
            zae_end - until
        );
    }
    limiter.settle().await;
    let created_ms = created
        .await?
        .context("no acquire created the bucket before the deadline")?;
    let (throttled, forwarded) = (proxy.throttled(), proxy.forwarded());
    // Read back straight from the emulator: the proxy would charge the reads.
    let (shards, recorded_milli, held_milli) = totals(&read_shards(&direct, &limit, end_ms).await?);
    Ok(Outcome {
        start_ms,
        created_ms,
        until_ms: until,
        end_ms,
        dynalimit: ours,
        zae,
        zae_version: peer.version,
        zae_requests,
        shards,
        recorded_milli,
        held_milli,
        throttled,
        forwarded,
    })
}

/// `tasks` tasks acquiring 1 `rpm` of `entity`'s stored limit and committing until the wall
/// clock passes `until` (epoch ms), each trying again at once when refused.
async fn fleet(
    limiter: RateLimiter,
    entity: &str,
    tasks: u64,
    until: i64,
) -> anyhow::Result<Tally> {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let (limiter, entity, stop) = (limiter.clone(), entity.to_owned(), stop.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                while SystemClock.epoch_millis() < until && !stop.load(Ordering::Relaxed) {
                    let outcome = match limiter.acquire(&entity, RESOURCE, [("rpm", 1)]).await {
                        Ok(lease) => lease.commit().await,
                        Err(e) => Err(e),
                    };
                    match outcome {
                        Ok(()) => {
                            tally.admitted += 1;
                            if SystemClock.epoch_millis() <= until {
                                tally.admitted_in_time += 1;
                            }
                        }
                        Err(dynalimit::Error::Rejected(_)) => tally.rejected += 1,
                        Err(e) => {
                            tally.errors += 1;
                            tally.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                    // A refusal from the rejection cache sends nothing and may not yield.
                    tokio::task::yield_now().await;
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for worker in workers {
        let t = worker.await?;
        total.admitted += t.admitted;
        total.admitted_in_time += t.admitted_in_time;
        total.rejected += t.rejected;
        total.errors += t.errors;
        total.first_error = total.first_error.or(t.first_error);
    }
    Ok(total)
}

/// When the bucket was created, or a little earlier: shard 0 is read straight from the
/// emulator every 5 ms until it exists, and the creation is put at the earlier of the last
/// read that found nothing and the `rf` first seen (the creator's clock as it planned the
/// write), so that the allowance counted from it is never short. None when the bucket does
/// not exist by `until`.
async fn creation(repo: Repository, start_ms: i64, until: i64) -> Option<i64> {
    let store = repo.buckets();
    let key = BucketKey::new(ENTITY, RESOURCE, 0);
    let mut absent_at = start_ms;
    while absent_at < until {
        let now = SystemClock.epoch_millis();
        match store.read(&key).await {
            Ok(Some(image)) => return Some(absent_at.min(image.rf).max(start_ms)),
            Ok(None) => absent_at = now,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// One shard of the bucket as read: its id, the count stamped on it, and the limit's `tk`
/// (refilled to the moment asked for), `tc` and `rf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShardRead {
    id: u32,
    count: u32,
    held: i64,
    tc: i64,
    rf: i64,
}

/// Every shard of the bucket that exists, read straight from the emulator, with its `tk`
/// refilled to `at_ms`.
async fn read_shards(
    repo: &Repository,
    limit: &Limit,
    at_ms: i64,
) -> anyhow::Result<Vec<ShardRead>> {
    let store = repo.buckets();
    let keys: Vec<BucketKey> = (0..MAX_SHARDS)
        .map(|shard| BucketKey::new(ENTITY, RESOURCE, shard))
        .collect();
    let images = futures::future::try_join_all(keys.iter().map(|key| store.read(key))).await?;
    Ok(images
        .iter()
        .zip(0..)
        .filter_map(|(image, id)| {
            let image = image.as_ref()?;
            let state = image.limits.get(limit.name())?;
            let (held, _) = refill(state.tk, image.rf, at_ms, state.params(image.shards()));
            Some(ShardRead {
                id,
                count: image.shards(),
                held,
                tc: state.tc,
                rf: image.rf,
            })
        })
        .collect())
}

/// The shard count (shard 0's, 0 before the bucket exists), the consumption the shards
/// recorded and the tokens they hold, in millitokens.
fn totals(shards: &[ShardRead]) -> (u32, i64, i64) {
    let count = shards.first().filter(|s| s.id == 0).map_or(0, |s| s.count);
    let recorded = shards.iter().map(|s| s.tc).fold(0i64, i64::saturating_add);
    let held = shards
        .iter()
        .map(|s| s.held)
        .fold(0i64, i64::saturating_add);
    (count, recorded, held)
}

/// Prints, every second until `until` and at each split, the bucket's shards, what they
/// recorded as consumed and what they hold, and the allowance not accounted for by either
/// (lost), read straight from the emulator; and each shard before and after a read in
/// which more than 10 tokens were lost.
async fn timeline(repo: Repository, start_ms: i64, until: i64) {
    let limit = mixed_limit();
    let mut last = (0u32, i64::MIN);
    let mut before: Option<(i64, Vec<ShardRead>)> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = SystemClock.epoch_millis();
        if now >= until {
            return;
        }
        let Ok(shards) = read_shards(&repo, &limit, now).await else {
            continue;
        };
        let (count, recorded, held) = totals(&shards);
        let lost = allowance_milli(&limit, start_ms, now) - recorded - held;
        let second = (now - start_ms) / 1000;
        if let Some((earlier, previous)) = &before
            && count > 0
            && lost - earlier > 10_000
        {
            eprintln!(
                "  {:.1} tokens lost in {} ms; the shards before and after (id count held tc rf):\n    {:?}\n    {:?}",
                tokens(lost - earlier),
                now - start_ms,
                previous
                    .iter()
                    .map(|s| (s.id, s.count, s.held, s.tc, s.rf))
                    .collect::<Vec<_>>(),
                shards
                    .iter()
                    .map(|s| (s.id, s.count, s.held, s.tc, s.rf))
                    .collect::<Vec<_>>(),
            );
        }
        if count != last.0 || second != last.1 {
            eprintln!(
                "  {:>5.1} s: {count:>2} shards, consumed {:>7.1}, held {:>6.1}, lost {:>6.1}",
                tokens(now - start_ms),
                tokens(recorded),
                tokens(held),
                tokens(lost)
            );
            last = (count, second);
        }
        if count > 0 {
            before = Some((lost, shards));
        }
    }
}

/// A line the fleet script writes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Ready { version: String },
    Counts(Counts),
    Error(String),
}

/// The script's closing counts.
#[derive(Debug, Deserialize)]
struct Counts {
    #[serde(flatten)]
    tally: Tally,
    requests: u64,
    ended_epoch_ms: i64,
}

/// zae-limiter's fleet: the bench script, connected and waiting for the start.
struct Peer {
    script: Script,
    version: String,
}

impl Peer {
    /// Starts the script against `endpoint` and waits until it has connected.
    async fn start(python: &Path, endpoint: &str, stack: &str, tasks: u64) -> anyhow::Result<Peer> {
        let mut script = Script::spawn(python)?;
        script
            .send(&json!({
                "endpoint": endpoint,
                "table": stack,
                "namespace": NAMESPACE,
                "mixed": {
                    "entity": ENTITY,
                    "resource": RESOURCE,
                    "limit": mixed_limit().name(),
                    "tasks": tasks,
                },
            }))
            .await?;
        let mut peer = Peer {
            script,
            version: String::new(),
        };
        match peer.next().await? {
            Line::Ready { version } => {
                anyhow::ensure!(
                    version.starts_with(PEER_LINE),
                    "--mixed is for {PEER} {PEER_LINE}x; the Python has {version}"
                );
                peer.version = version;
                Ok(peer)
            }
            other => anyhow::bail!("the bench script said {other:?} before it was ready"),
        }
    }

    /// The script's next line; its failure as an error.
    async fn next(&mut self) -> anyhow::Result<Line> {
        match self.script.lines.next_line().await? {
            Some(line) => match serde_json::from_str(&line)
                .with_context(|| format!("an unreadable line from the bench script: {line}"))?
            {
                Line::Error(trace) => anyhow::bail!("the zae-limiter bench script failed: {trace}"),
                line => Ok(line),
            },
            None => {
                let (status, stderr) = self.script.end().await?;
                anyhow::bail!("the zae-limiter bench script ended early ({status}): {stderr}")
            }
        }
    }

    /// Lets the fleet acquire until `until` (epoch ms).
    async fn go(&mut self, until: i64) -> anyhow::Result<()> {
        self.script.send(&json!({ "until_epoch_ms": until })).await
    }

    /// The fleet's counts, its requests and when it ended, once it has.
    async fn finish(&mut self) -> anyhow::Result<(Tally, u64, i64)> {
        let counts = tokio::time::timeout(Duration::from_secs(120), self.next())
            .await
            .context("the zae-limiter fleet did not end")??;
        let _ = self.script.end().await;
        match counts {
            Line::Counts(c) => Ok((c.tally, c.requests, c.ended_epoch_ms)),
            other => anyhow::bail!("the bench script said {other:?} instead of its counts"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> MixedArgs {
        MixedArgs {
            mixed: true,
            mixed_seconds: 20,
            mixed_tasks: 16,
            zae_tasks: 8,
        }
    }

    fn outcome(ours: u64, zae: u64, span_ms: i64) -> Outcome {
        Outcome {
            start_ms: 999_000,
            created_ms: 1_000_000,
            until_ms: 1_000_000 + span_ms - 500,
            end_ms: 1_000_000 + span_ms,
            dynalimit: Tally {
                admitted: ours,
                admitted_in_time: ours,
                ..Tally::default()
            },
            zae: Tally {
                admitted: zae,
                admitted_in_time: zae.saturating_sub(2),
                ..Tally::default()
            },
            zae_version: "0.17.0".into(),
            zae_requests: 0,
            shards: 8,
            recorded_milli: i64::try_from(ours + zae).unwrap() * 1000,
            held_milli: 0,
            throttled: 0,
            forwarded: 0,
        }
    }

    #[test]
    fn the_allowance_is_the_capacity_and_the_refill_floored_in_millitokens() {
        let limit = mixed_limit();
        // 20 tokens a second is 20 millitokens a millisecond.
        assert_eq!(allowance_milli(&limit, 0, 0), 240_000);
        assert_eq!(allowance_milli(&limit, 5, 1005), 260_000);
        // 7 s of 1 token a minute is 116.67 millitokens: floored.
        let slow = Limit::per_minute("rpm", 1);
        assert_eq!(allowance_milli(&slow, 0, 7000), 1000 + 116);
        // A clock that runs backwards allows no refill.
        assert_eq!(allowance_milli(&limit, 10, 5), 240_000);
    }

    #[test]
    fn the_report_adds_both_fleets_and_holds_them_against_the_allowance() {
        let limit = mixed_limit();
        // 20 s: 240 + 400 = 640 allowed.
        let report = outcome(400, 208, 20_000).report(&limit, &args(), 50);
        assert_eq!(report.allowance, 640.0);
        assert_eq!((report.seconds, report.created_after_s), (20.0, 1.0));
        // 19.5 s to the deadline: 630 allowed, and 606 of the 608 returned by then.
        assert_eq!(report.allowance_at_deadline, 630.0);
        assert_eq!(report.admitted_at_deadline, 606);
        assert_eq!(report.ratio_at_deadline, 0.961);
        assert_eq!(report.admitted, 608);
        assert_eq!(report.ratio, 0.95);
        assert!(report.met && !report.over_admitted && report.conserved);
        assert_eq!((report.shards, report.splits), (8, 3));
        assert_eq!(report.dynalimit.admitted, 400);
        assert_eq!(report.zae.admitted, 208);
        assert_eq!(report.zae.version, "0.17.0");

        // 598.5 of 630 is the target: 597 returned in time is short of it, 599 meets it,
        // whatever finished after the deadline.
        let short = outcome(400, 199, 20_000).report(&limit, &args(), 50);
        assert_eq!(short.admitted_at_deadline, 597);
        assert!(!short.met && !short.over_admitted);
        assert_eq!(short.ratio_at_deadline, 0.947);
        let enough = outcome(400, 201, 20_000).report(&limit, &args(), 50);
        assert!(enough.met, "{}", enough.ratio_at_deadline);

        let exact = outcome(400, 240, 20_000).report(&limit, &args(), 50);
        assert!(exact.met && !exact.over_admitted);
        let over = outcome(400, 241, 20_000).report(&limit, &args(), 50);
        assert!(over.over_admitted);
    }

    #[test]
    fn the_totals_take_shard_0s_count_and_add_every_shard() {
        let shard = |id, count, held, tc| ShardRead {
            id,
            count,
            held,
            tc,
            rf: 0,
        };
        let read = [
            shard(0, 4, 2_500, 100_000),
            shard(1, 2, -1_000, 7_000),
            shard(3, 4, 500, 3_000),
        ];
        assert_eq!(totals(&read), (4, 110_000, 2_000));
        // Before the bucket exists, or without shard 0.
        assert_eq!(totals(&[]), (0, 0, 0));
        assert_eq!(totals(&read[1..]), (0, 10_000, -500));
    }

    #[test]
    fn a_consumption_that_differs_from_the_admitted_count_is_not_conserved() {
        let mut run = outcome(10, 10, 1000);
        run.recorded_milli = 19_500;
        let report = run.report(&mixed_limit(), &args(), 50);
        assert!(!report.conserved);
        assert_eq!(report.recorded, 19.5);
    }
}
