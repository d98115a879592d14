//! `loadtest`: load a deployed table's own limits from where the command runs.
//!
//! Tasks acquire the given amounts for the given entities on one resource, hold each lease for
//! `--hold-ms`, commit, and go again (at once, or paced to `--rate` acquires a second across
//! every task); a refused task waits the refusal's retry-after. It sends only a service's
//! requests (the namespace's records, limit resolution, acquire, commit), so it runs under the
//! stack's acquire-only policies (`AcquireOnlyPolicy`, `NamespaceAcquirePolicy`, the `app`
//! role).
//!
//! What it measures: acquire latency as the client sees it (run it where the services run:
//! same region, same kind of host), acquires and admissions a second, DynamoDB requests (per
//! acquire, its commit included, and by operation), refusals, errors by kind, and per limit the tokens admitted against
//! the allowance of the entities' own limits over the run (capacity plus refill; an upper
//! bound, as buckets may not start full, and parents' limits are not in it). A share above 1
//! would be over-admission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::Args;
use dynalimit::RateLimiter;
use dynalimit_core::{Clock as _, Limit, SystemClock, ids};
use dynalimit_repository::aws;
use tokio::sync::Mutex;

use crate::bench::quantile;
use crate::context::{Global, bad_input};
use crate::output::loadtest::{LimitLoad, LoadReport};

/// Options of `loadtest`.
#[derive(Debug, Args)]
pub(crate) struct LoadtestArgs {
    /// Entity to acquire for (repeatable; tasks take them in turn). Its limits (or those it
    /// inherits) must exist.
    #[arg(long = "entity", short = 'e', value_name = "ID", required = true)]
    pub(crate) entities: Vec<String>,
    /// The resource.
    #[arg(long, short = 'r')]
    pub(crate) resource: String,
    /// Amount of one limit per acquire, NAME=N (repeatable). Default: 1 of each limit the
    /// first entity resolves.
    #[arg(long = "cost", value_name = "NAME=N", value_parser = parse_cost)]
    pub(crate) costs: Vec<(String, i64)>,
    /// Concurrent acquiring tasks (1-4096).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) concurrency: u64,
    /// Seconds of load (1-3600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) duration: u64,
    /// Acquires a second across every task (1-1000000). Default: each task acquires again as
    /// soon as it has its answer.
    #[arg(long, value_name = "PER_SECOND", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) rate: Option<u64>,
    /// Milliseconds each lease is held before its commit, the caller's work (0-600000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub(crate) hold_ms: u64,
    /// Consume tokens through an endpoint that is not a local emulator: the buckets loaded
    /// are the table's own, and callers of those entities share them.
    #[arg(long)]
    pub(crate) yes: bool,
}

/// `NAME=N` with N a positive whole number.
fn parse_cost(text: &str) -> Result<(String, i64), String> {
    let (name, amount) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} must look like NAME=N"))?;
    let amount: i64 = amount
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?}: the amount must be a positive whole number"))?;
    Ok((name.trim().to_owned(), amount))
}

/// What the tasks count together.
#[derive(Default)]
struct Tally {
    attempts: AtomicU64,
    admitted: AtomicU64,
    rejected: AtomicU64,
    latencies_us: Mutex<Vec<u64>>,
    errors: Mutex<BTreeMap<String, (u64, String)>>,
}

/// The kind of a failed acquire or commit, as the report counts it.
fn error_kind(error: &dynalimit::Error) -> &'static str {
    match error {
        dynalimit::Error::PermissionDenied(_) => "permission_denied",
        dynalimit::Error::Unavailable { .. } => "unavailable",
        dynalimit::Error::InvalidRequest(_) => "invalid_request",
        dynalimit::Error::Corrupt(_) => "corrupt",
        dynalimit::Error::LeaseWrite(_) => "lease_write",
        dynalimit::Error::NoLimits { .. } => "no_limits",
        dynalimit::Error::ResourceDisabled { .. } => "resource_disabled",
        _ => "other",
    }
}

impl Tally {
    async fn error(&self, error: &dynalimit::Error) {
        let mut errors = self.errors.lock().await;
        let entry = errors
            .entry(error_kind(error).to_owned())
            .or_insert_with(|| (0, error.to_string()));
        entry.0 += 1;
    }
}

/// The tokens `limit` lets one bucket admit over `elapsed_ms`: its capacity and what refills
/// meanwhile (floor).
fn allowance(limit: &Limit, elapsed_ms: i64) -> i64 {
    let period_ms = limit.refill_period_seconds().saturating_mul(1000).max(1);
    limit
        .capacity()
        .saturating_add(limit.refill_amount().saturating_mul(elapsed_ms) / period_ms)
}

/// Runs `loadtest`.
pub(crate) async fn run(global: &Global, args: &LoadtestArgs) -> Result<()> {
    for entity in &args.entities {
        ids::validate_entity_id(entity).map_err(bad_input)?;
    }
    ids::validate_resource(&args.resource).map_err(bad_input)?;
    let config = global.sdk_config().await?;
    let local = global
        .endpoint(&config)
        .is_some_and(|url| aws::is_loopback(&url));
    if !local && !args.yes {
        return Err(bad_input(anyhow!(
            "loadtest consumes tokens of the buckets of {} on {}, which callers of those \
             entities share: use entities made for the test, and pass --yes",
            args.entities.join(", "),
            args.resource
        )));
    }
    let counter = dynalimit_repository::RequestCounter::default();
    let repo = global.counted_reader(counter.clone()).await?;
    let mut limits: BTreeMap<&str, Vec<Limit>> = BTreeMap::new();
    for entity in &args.entities {
        let resolved = repo.resolve_limits(entity, &args.resource).await?;
        if resolved.limits.is_empty() {
            return Err(bad_input(anyhow!(
                "{entity} has no limits on {} at any level: set them first",
                args.resource
            )));
        }
        limits.insert(entity, resolved.limits);
    }
    let costs: Vec<(String, i64)> = if args.costs.is_empty() {
        limits[args.entities[0].as_str()]
            .iter()
            .map(|l| (l.name().to_owned(), 1))
            .collect()
    } else {
        args.costs.clone()
    };

    let limiter = RateLimiter::new(repo.clone());
    counter.reset();
    let tally = Arc::new(Tally::default());
    let issued = Arc::new(AtomicU64::new(0));
    let started = SystemClock.monotonic();
    let deadline = started + Duration::from_secs(args.duration);
    let hold = Duration::from_millis(args.hold_ms);
    let mut tasks = Vec::new();
    for task in 0..args.concurrency {
        let (limiter, tally, issued) = (limiter.clone(), tally.clone(), issued.clone());
        let (entities, resource, costs) =
            (args.entities.clone(), args.resource.clone(), costs.clone());
        let rate = args.rate;
        tasks.push(tokio::spawn(async move {
            let mut turn = task as usize;
            loop {
                if let Some(rate) = rate {
                    // Open loop: the k-th acquire of the run starts at k / rate seconds.
                    let k = issued.fetch_add(1, Ordering::Relaxed);
                    let at = started + Duration::from_secs_f64(k as f64 / rate as f64);
                    if at >= deadline {
                        break;
                    }
                    tokio::time::sleep(at.saturating_sub(SystemClock.monotonic())).await;
                } else if SystemClock.monotonic() >= deadline {
                    break;
                }
                let entity = &entities[turn % entities.len()];
                turn += 1;
                let amounts: Vec<(&str, i64)> =
                    costs.iter().map(|(n, a)| (n.as_str(), *a)).collect();
                let asked = SystemClock.monotonic();
                let answer = limiter.acquire(entity, &resource, amounts).await;
                let took = SystemClock.monotonic() - asked;
                tally.attempts.fetch_add(1, Ordering::Relaxed);
                tally
                    .latencies_us
                    .lock()
                    .await
                    .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
                match answer {
                    Ok(lease) => {
                        tally.admitted.fetch_add(1, Ordering::Relaxed);
                        if !hold.is_zero() {
                            tokio::time::sleep(hold).await;
                        }
                        if let Err(e) = lease.commit().await {
                            tally.error(&e).await;
                        }
                    }
                    Err(e) if e.is_rejected() => {
                        tally.rejected.fetch_add(1, Ordering::Relaxed);
                        if rate.is_none() {
                            let wait = e
                                .rejection()
                                .and_then(|r| r.retry_after())
                                .unwrap_or(Duration::from_millis(10))
                                .min(deadline.saturating_sub(SystemClock.monotonic()));
                            tokio::time::sleep(wait).await;
                        }
                    }
                    Err(e) => tally.error(&e).await,
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    limiter.settle().await;
    let elapsed = SystemClock.monotonic() - started;
    let elapsed_ms = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);

    let mut latencies = std::mem::take(&mut *tally.latencies_us.lock().await);
    latencies.sort_unstable();
    let attempts = tally.attempts.load(Ordering::Relaxed);
    let admitted = tally.admitted.load(Ordering::Relaxed);
    let seconds = elapsed.as_secs_f64();
    let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
    let ms = |us: u64| us as f64 / 1000.0;
    let limit_loads = costs
        .iter()
        .map(|(name, cost)| {
            let allowed: i64 = limits
                .values()
                .filter_map(|ls| ls.iter().find(|l| l.name() == name))
                .map(|l| allowance(l, elapsed_ms))
                .sum();
            let tokens = i64::try_from(admitted)
                .unwrap_or(i64::MAX)
                .saturating_mul(*cost);
            LimitLoad {
                limit: name.clone(),
                cost: *cost,
                admitted_tokens: tokens,
                allowance: allowed,
                share: if allowed > 0 {
                    Some(tokens as f64 / allowed as f64)
                } else {
                    None
                },
            }
        })
        .collect();
    let errors = std::mem::take(&mut *tally.errors.lock().await);
    let report = LoadReport {
        entities: args.entities.clone(),
        resource: args.resource.clone(),
        concurrency: args.concurrency,
        rate: args.rate,
        seconds,
        attempts,
        admitted,
        rejected: tally.rejected.load(Ordering::Relaxed),
        errors: errors.iter().map(|(k, (n, _))| (k.clone(), *n)).collect(),
        first_errors: errors.into_iter().map(|(k, (_, m))| (k, m)).collect(),
        acquires_per_second: attempts as f64 / seconds,
        admitted_per_second: admitted as f64 / seconds,
        p50_ms: ms(quantile(&latencies, 0.50)),
        p90_ms: ms(quantile(&latencies, 0.90)),
        p99_ms: ms(quantile(&latencies, 0.99)),
        max_ms: ms(latencies.last().copied().unwrap_or(0)),
        requests: counter.total(),
        requests_per_acquire: per(counter.total(), attempts),
        requests_by_operation: counter.snapshot(),
        limits: limit_loads,
    };
    global.print(&report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_are_positive_whole_numbers_of_a_named_limit() {
        assert_eq!(parse_cost("tpm=500"), Ok(("tpm".to_owned(), 500)));
        for bad in ["tpm", "tpm=0", "tpm=-1", "tpm=1.5", "=x"] {
            assert!(parse_cost(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_allowance_is_capacity_and_floor_of_the_refill() {
        let rpm = Limit::per_minute("rpm", 60);
        assert_eq!(allowance(&rpm, 0), 60);
        assert_eq!(allowance(&rpm, 1_999), 61);
        assert_eq!(allowance(&rpm, 60_000), 120);
        assert_eq!(quantile::<u64>(&[], 0.5), 0);
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 0.5), 3);
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 0.99), 5);
    }
}
