//! `dynalimit demo`: an LLM gateway in miniature.
//!
//! A project with two API keys (cascading to the project) shares per-key and per-project
//! request and token limits on one resource. Many concurrent tasks play clients: each
//! estimates its tokens before the call, acquires `rpm = 1, tpm = estimate`, "calls the model",
//! then corrects the estimate with the real count (`adjust`) and commits. Rejected tasks wait
//! the retry-after they were given. A progress line shows admitted and rejected counts while it
//! runs; the final bucket states are printed as a table.
//!
//! Without an endpoint (`--endpoint-url`, `AWS_ENDPOINT_URL`, …) it starts a private DynamoDB Local (installed on first use, the
//! same as the test kit) and stops it at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use aws_sdk_dynamodb::Client;
use clap::Args;
use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_local::DynamoDbLocal;
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_repository::{NewEntity, Repository, RepositoryError, RequestCounter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::Rng as _;

/// Options of `dynalimit demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// How long the simulated traffic runs, in seconds.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    seconds: u64,
    /// Concurrent client tasks.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(1..=1024))]
    tasks: u64,
}

/// Where the commands talk to: a given endpoint, or a private DynamoDB Local they started.
#[derive(Debug)]
pub(crate) struct Target {
    /// The endpoint URL.
    pub(crate) url: String,
    local: Option<DynamoDbLocal>,
}

impl Target {
    /// `url` when given, otherwise a fresh private DynamoDB Local (installed on first use).
    pub(crate) async fn resolve(url: Option<String>) -> anyhow::Result<Target> {
        if let Some(url) = url.filter(|u| !u.is_empty()) {
            return Ok(Target { url, local: None });
        }
        let local = tokio::task::spawn_blocking(DynamoDbLocal::start)
            .await
            .context("starting DynamoDB Local")?
            .context("starting DynamoDB Local")?;
        Ok(Target {
            url: local.endpoint().to_string(),
            local: Some(local),
        })
    }

    /// An endpoint this process did not start.
    pub(crate) fn external(url: String) -> Target {
        Target { url, local: None }
    }

    /// Whether the endpoint is a DynamoDB Local this process started.
    pub(crate) fn is_private(&self) -> bool {
        self.local.is_some()
    }

    /// Stops the private emulator, if any.
    pub(crate) async fn stop(self) {
        if let Some(local) = self.local {
            let _ = tokio::task::spawn_blocking(move || local.stop()).await;
        }
    }

    /// A DynamoDB client for the endpoint, counting requests in `counter` when given, with the
    /// AWS settings of `dynalimit_repository::aws` (on loopback: static credentials and
    /// us-east-1 unless configured).
    pub(crate) async fn client(
        &self,
        counter: Option<RequestCounter>,
    ) -> Result<Client, RepositoryError> {
        let sdk = aws::load(&AwsSettings::new().endpoint_url(Some(&self.url))).await?;
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk).endpoint_url(&self.url);
        if let Some(counter) = counter {
            config = config.interceptor(counter);
        }
        Ok(Client::from_conf(config.build()))
    }
}

const RESOURCE: &str = "gpt-4o";
const PROJECT: &str = "acme";
const KEYS: [&str; 2] = ["acme-key-1", "acme-key-2"];

/// Counters shared by the simulated clients.
#[derive(Debug, Default)]
struct Tally {
    admitted: AtomicU64,
    rejected: AtomicU64,
    rejected_by_project: AtomicU64,
    estimated: AtomicI64,
    actual: AtomicI64,
}

/// Runs the demo.
///
/// `endpoint_url` (the configured endpoint) points it at an existing endpoint; without it a
/// private DynamoDB Local is started. `stack` is the table.
pub(crate) async fn run(
    args: &DemoArgs,
    endpoint_url: Option<String>,
    stack: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    let started = SystemClock.epoch_millis();
    if endpoint_url.is_none() {
        println!("Starting a private DynamoDB Local (installed on first use)...");
    }
    let target = Target::resolve(endpoint_url).await?;
    let outcome = simulate(args, &target, stack, namespace).await;
    let private = target.is_private();
    target.stop().await;
    if private {
        println!("DynamoDB Local stopped.");
    }
    outcome?;
    let took = (SystemClock.epoch_millis() - started) as f64 / 1000.0;
    println!("Demo finished in {took:.1} s.");
    Ok(())
}

async fn simulate(
    args: &DemoArgs,
    target: &Target,
    stack: &str,
    namespace: &str,
) -> anyhow::Result<()> {
    println!(
        "Endpoint {}  table {stack}  namespace {namespace}",
        target.url
    );
    let repo = Repository::builder()
        .client(target.client(None).await?)
        .stack(stack)
        .namespace(namespace)
        .open()
        .await
        .context("opening the table")?;

    ignore_existing(
        repo.create_entity(NewEntity::new(PROJECT).name("Acme Corp"))
            .await,
    )?;
    for key in KEYS {
        ignore_existing(
            repo.create_entity(NewEntity::new(key).parent(PROJECT).cascade(true))
                .await,
        )?;
    }
    // Each key: 60 requests and 20 000 tokens a minute. The project: 100 requests and 30 000
    // tokens a minute across both keys.
    let key_limits = [
        Limit::per_minute("rpm", 60),
        Limit::per_minute("tpm", 20_000),
    ];
    let project_limits = [
        Limit::per_minute("rpm", 100),
        Limit::per_minute("tpm", 30_000),
    ];
    repo.set_resource_defaults(RESOURCE, &key_limits).await?;
    repo.set_limits(PROJECT, RESOURCE, &project_limits).await?;
    println!(
        "Project {PROJECT} with keys {} (cascade on). Limits on {RESOURCE}: each key {}, the \
         project {}.",
        KEYS.join(", "),
        describe(&key_limits),
        describe(&project_limits)
    );
    println!(
        "Running {} client tasks for {} s: acquire rpm=1 and an estimated tpm, call, adjust to \
         the real count, commit.\n",
        args.tasks, args.seconds
    );

    let limiter = RateLimiter::new(repo.clone());
    let tally = Arc::new(Tally::default());
    let deadline = SystemClock.epoch_millis() + i64::try_from(args.seconds * 1000)?;
    let mut tasks = Vec::new();
    for n in 0..args.tasks {
        let limiter = limiter.clone();
        let tally = Arc::clone(&tally);
        let key = KEYS[usize::try_from(n % 2)?];
        tasks.push(tokio::spawn(client_task(limiter, tally, key, deadline)));
    }
    let progress = tokio::spawn(show_progress(Arc::clone(&tally), deadline, args.seconds));
    for t in tasks {
        t.await.context("client task")??;
    }
    progress.await.context("progress display")?;
    limiter.settle().await;

    println!(
        "\nadmitted {}  rejected {} ({} of them by the project's shared budget)",
        tally.admitted.load(Ordering::Relaxed),
        tally.rejected.load(Ordering::Relaxed),
        tally.rejected_by_project.load(Ordering::Relaxed),
    );
    println!(
        "tokens estimated {}  actually used {} (the difference was adjusted after each call)\n",
        tally.estimated.load(Ordering::Relaxed),
        tally.actual.load(Ordering::Relaxed)
    );
    print_buckets(&repo, &limiter).await
}

fn ignore_existing<T>(result: Result<T, RepositoryError>) -> anyhow::Result<()> {
    match result {
        Ok(_) | Err(RepositoryError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn describe(limits: &[Limit]) -> String {
    limits
        .iter()
        .map(|l| format!("{} {}/min", l.name(), l.refill_amount()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One simulated client: estimate, acquire, call, adjust, commit; wait when refused.
async fn client_task(
    limiter: RateLimiter,
    tally: Arc<Tally>,
    key: &'static str,
    deadline: i64,
) -> anyhow::Result<()> {
    while SystemClock.epoch_millis() < deadline {
        let (estimate, actual, call_ms) = {
            let mut rng = rand::rng();
            let estimate: i64 = rng.random_range(100..=600);
            let actual = estimate * rng.random_range(50..=130) / 100;
            (estimate, actual, rng.random_range(40..=160))
        };
        match limiter
            .acquire(key, RESOURCE, [("rpm", 1), ("tpm", estimate)])
            .await
        {
            Ok(lease) => {
                tally.admitted.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(call_ms)).await;
                lease.adjust("tpm", actual - estimate)?;
                lease.commit().await?;
                tally.estimated.fetch_add(estimate, Ordering::Relaxed);
                tally.actual.fetch_add(actual, Ordering::Relaxed);
            }
            Err(Error::Rejected(rejection)) => {
                tally.rejected.fetch_add(1, Ordering::Relaxed);
                if rejection.entity_id() == Some(PROJECT) {
                    tally.rejected_by_project.fetch_add(1, Ordering::Relaxed);
                }
                let left = u64::try_from(deadline - SystemClock.epoch_millis()).unwrap_or(0);
                let wait = rejection
                    .retry_after()
                    .unwrap_or_default()
                    .min(Duration::from_millis(left));
                tokio::time::sleep(wait.max(Duration::from_millis(20))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A progress bar of the run on the terminal (`indicatif`), updated until the deadline;
/// nothing is drawn when standard output is not a terminal (a log, a pipe).
async fn show_progress(tally: Arc<Tally>, deadline: i64, seconds: u64) {
    let total_ms = seconds.saturating_mul(1000);
    let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stdout());
    if let Ok(style) = ProgressStyle::with_template(
        "[{bar:30}] {elapsed_precise}  admitted {prefix}  rejected {msg}",
    ) {
        bar.set_style(style.progress_chars("#."));
    }
    loop {
        let left = (deadline - SystemClock.epoch_millis()).max(0);
        bar.set_position(total_ms.saturating_sub(u64::try_from(left).unwrap_or(0)));
        bar.set_prefix(tally.admitted.load(Ordering::Relaxed).to_string());
        bar.set_message(tally.rejected.load(Ordering::Relaxed).to_string());
        if left == 0 {
            bar.finish();
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints every bucket of the project and its keys: capacity, what is available now, what
/// was consumed in total.
async fn print_buckets(repo: &Repository, limiter: &RateLimiter) -> anyhow::Result<()> {
    let store = repo.buckets();
    let mut rows = vec![[
        "entity".to_string(),
        "resource".into(),
        "limit".into(),
        "capacity".into(),
        "available".into(),
        "consumed".into(),
        "shards".into(),
    ]];
    for entity in std::iter::once(PROJECT).chain(KEYS) {
        let buckets = store.entity_buckets(entity).await?;
        let mut consumed: BTreeMap<String, i64> = BTreeMap::new();
        let mut shards = 0;
        for (key, image) in &buckets {
            if key.resource == RESOURCE {
                shards = shards.max(image.shards());
                for (name, state) in &image.limits {
                    *consumed.entry(name.clone()).or_default() += state.tc;
                }
            }
        }
        let available = limiter.available(entity, RESOURCE, &[]).await?;
        let limits = repo.resolve_limits(entity, RESOURCE).await?.limits;
        for limit in limits {
            let name = limit.name().to_string();
            rows.push([
                entity.to_string(),
                RESOURCE.to_string(),
                name.clone(),
                limit.capacity().to_string(),
                available.get(&name).map_or("-".into(), i64::to_string),
                consumed
                    .get(&name)
                    .map_or("-".into(), |tc| tc.div_euclid(1000).to_string()),
                shards.to_string(),
            ]);
        }
    }
    println!("Bucket states:");
    print_table(&rows);
    Ok(())
}

/// Prints `rows` (the first is the header) as an aligned text table.
pub(crate) fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 || cell.parse::<f64>().is_err() {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        println!("  {}", line.join("  ").trim_end());
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("  {}", rule.join("  "));
        }
    }
}
