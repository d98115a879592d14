//! The simulation: the options, the set-up of the project and its keys, the client tasks,
//! the progress line and the final bucket states.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use dynalimit::{Limit, RateLimiter};
use dynalimit_core::ids::{validate_namespace_name, validate_stack_name};
use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_repository::{NewEntity, Repository, RepositoryError};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::Rng as _;

use crate::error::Error;
use crate::table::print_table;
use crate::target::Target;

/// The longest run accepted, in seconds.
const MAX_SECONDS: u64 = 600;
/// The most client tasks accepted.
const MAX_TASKS: u64 = 1024;

/// How much load the demo simulates: how long and how many concurrent clients.
///
/// On a command line (`clap`) these are `--seconds` and `--tasks`; in code, [`Options::new`]
/// checks the same ranges.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Options {
    /// How long the simulated traffic runs, in seconds.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=MAX_SECONDS))]
    seconds: u64,
    /// Concurrent client tasks.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(1..=MAX_TASKS))]
    tasks: u64,
}

impl Default for Options {
    /// 15 seconds, 48 tasks.
    fn default() -> Self {
        Options {
            seconds: 15,
            tasks: 48,
        }
    }
}

impl Options {
    /// `seconds` of traffic (1 to 600) from `tasks` concurrent clients (1 to 1024).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a value out of range.
    pub fn new(seconds: u64, tasks: u64) -> Result<Options, Error> {
        let options = Options { seconds, tasks };
        options.validate()?;
        Ok(options)
    }

    /// How long the simulated traffic runs, in seconds.
    pub fn seconds(&self) -> u64 {
        self.seconds
    }

    /// How many client tasks run concurrently.
    pub fn tasks(&self) -> u64 {
        self.tasks
    }

    fn validate(&self) -> Result<(), Error> {
        for (option, value, max) in [
            ("--seconds", self.seconds, MAX_SECONDS),
            ("--tasks", self.tasks, MAX_TASKS),
        ] {
            if !(1..=max).contains(&value) {
                return Err(Error::InvalidOption {
                    option,
                    reason: format!("{value} is not in 1..={max}"),
                });
            }
        }
        Ok(())
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

/// Runs the demo, printing what it does on standard output.
///
/// `settings` may point it at an existing endpoint (DynamoDB Local, LocalStack, AWS), by
/// `endpoint_url` or the endpoint settings of the environment and profile
/// ([`aws::configured_endpoint`]); without one a private DynamoDB Local is started and stopped
/// at the end. The client has the region and profile of `settings`. `stack` is the table (created
/// on an emulator when missing), `namespace` the namespace the project lives in.
///
/// # Errors
/// Before any I/O: [`Error::InvalidOption`] for options out of range, [`Error::Invalid`] for
/// an invalid stack or namespace name. Then what starting the emulator, the table's requests
/// or the limiter report.
pub async fn run(
    options: &Options,
    settings: &AwsSettings,
    stack: &str,
    namespace: &str,
) -> Result<(), Error> {
    options.validate()?;
    validate_stack_name(stack)?;
    validate_namespace_name(namespace)?;
    let endpoint_url = aws::configured_endpoint(settings).await;
    let started = SystemClock.epoch_millis();
    if endpoint_url.as_deref().is_none_or(str::is_empty) {
        println!("Starting a private DynamoDB Local (installed on first use)...");
    }
    let target = Target::resolve(endpoint_url).await?.with_settings(settings);
    let outcome = simulate(options, &target, stack, namespace).await;
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
    options: &Options,
    target: &Target,
    stack: &str,
    namespace: &str,
) -> Result<(), Error> {
    println!(
        "Endpoint {}  table {stack}  namespace {namespace}",
        target.url()
    );
    let repo = Repository::builder()
        .client(target.client(None).await?)
        .stack(stack)
        .namespace(namespace)
        .open()
        .await?;

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
        options.tasks, options.seconds
    );

    let limiter = RateLimiter::new(repo.clone());
    let tally = Arc::new(Tally::default());
    let deadline = SystemClock.epoch_millis()
        + i64::try_from(options.seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let clients: Vec<_> = KEYS
        .iter()
        .cycle()
        .take(usize::try_from(options.tasks).unwrap_or(usize::MAX))
        .map(|key| {
            tokio::spawn(client_task(
                limiter.clone(),
                Arc::clone(&tally),
                key,
                deadline,
            ))
        })
        .collect();
    let progress = tokio::spawn(show_progress(Arc::clone(&tally), deadline, options.seconds));
    for client in clients {
        client.await.map_err(|source| Error::Task {
            task: "a client task",
            source,
        })??;
    }
    progress.await.map_err(|source| Error::Task {
        task: "the progress display",
        source,
    })?;
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

fn ignore_existing<T>(result: Result<T, RepositoryError>) -> Result<(), Error> {
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
) -> Result<(), Error> {
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
            Err(dynalimit::Error::Rejected(rejection)) => {
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
async fn print_buckets(repo: &Repository, limiter: &RateLimiter) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::{Error, Options};

    #[test]
    fn options_out_of_range_are_refused_by_name() {
        for (seconds, tasks, option) in [
            (0, 4, "--seconds"),
            (601, 4, "--seconds"),
            (5, 0, "--tasks"),
            (5, 1025, "--tasks"),
        ] {
            match Options::new(seconds, tasks) {
                Err(Error::InvalidOption { option: o, .. }) => assert_eq!(o, option),
                other => panic!("({seconds}, {tasks}): {other:?}"),
            }
        }
        let fine = Options::new(600, 1024).expect("the bounds are accepted");
        assert_eq!((fine.seconds(), fine.tasks()), (600, 1024));
        assert_eq!(Options::default(), Options::new(15, 48).unwrap());
    }
}
