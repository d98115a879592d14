//! The `dynalimit` command: deploy and operate the table, manage namespaces, entities and
//! limits, read the audit log, and run a local DynamoDB.
//!
//! This file holds only the command tree and the dispatch; each command group lives in its own
//! module.

mod access;
mod aggregator;
mod alerts;
mod audit;
mod bench;
mod chart;
mod compare;
mod concurrency;
mod context;
mod delete;
mod entity;
mod fleet;
mod hot_key;
mod infra;
mod level_spec;
mod limits;
mod loadtest;
mod local;
mod manifest;
mod mixed;
mod namespace;
mod output;
mod package;
mod usage;

/// The text and YAML forms of limits, shared with the provisioner.
use dynalimit_manifest::spec as limit_spec;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use dynalimit_repository::RepositoryError;
use dynalimit_stack::StackError;

use crate::context::Global;

/// dynalimit: distributed rate limits on one DynamoDB table.
#[derive(Debug, Parser)]
#[command(
    name = "dynalimit",
    version,
    after_help = "Example, a first session on a local DynamoDB:\n  dynalimit local up\n  export DYNALIMIT_ENDPOINT_URL=http://127.0.0.1:8000\n  dynalimit limits set --resource gpt-4 'rpm=100/min,tpm=10000/min:burst=20000'\n  dynalimit entity create key-1\n  dynalimit limits get --entity key-1 --resource gpt-4 --resolved\n  dynalimit local down"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create or update the CloudFormation stack (table, aggregator, alarms, IAM) and wait;
    /// an existing stack is updated only when it is a dynalimit stack.
    #[command(
        after_help = "Examples:\n  dynalimit deploy --stack limits-prod --aggregator-zip aggregator.zip\n  dynalimit deploy --no-aggregator --pitr-days 7 --tag team=payments"
    )]
    Deploy(Box<infra::DeployArgs>),
    /// List every dynalimit and zae-limiter stack of the region, with its versions.
    #[command(after_help = "Example:\n  dynalimit list --region eu-west-1")]
    List,
    /// Check whether this client may use the table (its version record), changing nothing;
    /// exits 0 when it may, 1 when not.
    #[command(after_help = "Example:\n  dynalimit check --stack limits-prod && echo compatible")]
    Check,
    /// Bring a dynalimit stack and its aggregator to this release: the current template with
    /// the stack's own parameters, the aggregator code, and the version record (whose
    /// client_min_version is never lowered); refuse any other stack.
    #[command(
        after_help = "Examples:\n  dynalimit upgrade --stack limits-prod --aggregator-zip aggregator.zip\n  scripts/build-lambda --arch arm64 && dynalimit upgrade --stack limits-prod"
    )]
    Upgrade(fleet::UpgradeArgs),
    /// Show the stack, its outputs, the table and its version record.
    #[command(after_help = "Example:\n  dynalimit status --stack limits-prod")]
    Status,
    /// Delete a dynalimit stack, keeping its table (on a loopback emulator without a stack,
    /// delete the table); refuse any other stack.
    #[command(after_help = "Example:\n  dynalimit delete --stack limits-dev --yes")]
    Delete(delete::DeleteArgs),
    /// Print the CloudFormation template, for a team's own pipeline.
    #[command(
        visible_alias = "cfn-template",
        after_help = "Example:\n  dynalimit template -o template.yaml\n  dynalimit cfn-template > template.yaml"
    )]
    Template(infra::TemplateArgs),
    /// Write the aggregator's Lambda zip, as `deploy` uploads it, for a team's own pipeline.
    #[command(
        after_help = "Examples:\n  dynalimit lambda-export --aggregator-binary target/aarch64-unknown-linux-gnu/release/dynalimit-aggregator -o aggregator.zip\n  scripts/build-lambda --arch arm64 && dynalimit lambda-export --info"
    )]
    LambdaExport(infra::LambdaExportArgs),
    /// Print the client's versions and, with --table, the table's version record.
    #[command(after_help = "Example:\n  dynalimit version --table --stack limits-prod")]
    Version(infra::VersionArgs),
    /// Register, list, inspect, delete, recover and purge namespaces.
    #[command(subcommand, after_help = "Example:\n  dynalimit namespace list")]
    Namespace(namespace::NamespaceCommand),
    /// Create, inspect, delete entities, list their children, reset or top up their buckets.
    #[command(
        subcommand,
        after_help = "Example:\n  dynalimit entity create key-1 --parent proj-1"
    )]
    Entity(entity::EntityCommand),
    /// Disable, enable or clear the disabled value of a resource for every entity.
    #[command(
        subcommand,
        after_help = "Example:\n  dynalimit resource disable gpt-4"
    )]
    Resource(access::ResourceCommand),
    /// Set, get, delete and list limits at the entity, resource and system levels.
    #[command(
        subcommand,
        after_help = "Example:\n  dynalimit limits set --entity key-1 --resource gpt-4 rpm=500/min"
    )]
    Limits(limits::LimitsCommand),
    /// Show usage snapshots written by the aggregator, or a summary of them.
    #[command(
        after_help = "Examples:\n  dynalimit usage --entity key-1 --resource gpt-4 --window hourly\n  dynalimit usage --entity key-1 --window hourly --plot --chart usage.html\n  dynalimit usage summary --resource gpt-4 --start 2026-11-01T00:00:00Z"
    )]
    Usage(usage::UsageArgs),
    /// Set, list and clear alerts: thresholds on quotas (percentages of the period's grant),
    /// published once per period, and limits refusing for some minutes in a row, published
    /// once per run; the stack's aggregator publishes them to EventBridge.
    #[command(
        subcommand,
        after_help = "Examples:\n  dynalimit alerts set acme gpt-4 tpd 80,100\n  dynalimit alerts set acme gpt-4 rpm --refusing-for 5m\n  dynalimit alerts list acme"
    )]
    Alerts(alerts::AlertsCommand),
    /// Set, get and clear the concurrency limits of a level: requests in flight at once,
    /// across every process sharing the table.
    #[command(
        subcommand,
        after_help = "Examples:\n  dynalimit concurrency set --resource gpt-4 streams=5\n  dynalimit concurrency get --resource gpt-4"
    )]
    Concurrency(concurrency::ConcurrencyCommand),
    /// Maintain usage snapshots from the table's stream without Lambda.
    #[command(
        subcommand,
        after_help = "Example:\n  dynalimit aggregator run --until-idle"
    )]
    Aggregator(aggregator::AggregatorCommand),
    /// Show the audit log of an entity, a resource or the namespace.
    #[command(
        after_help = "Examples:\n  dynalimit audit --entity key-1\n  dynalimit audit --system --limit 10\n  dynalimit audit --entity key-1 --archive --since 2026-01-01"
    )]
    Audit(audit::AuditArgs),
    /// Run a local DynamoDB (DynamoDB Local, or LocalStack with --localstack).
    #[command(subcommand, after_help = "Example:\n  dynalimit local up --port 8000")]
    Local(local::LocalCommand),
    /// Simulate an LLM gateway on a private DynamoDB Local (or the configured endpoint) and
    /// show the buckets.
    #[command(after_help = "Example:\n  dynalimit demo\n  dynalimit demo --seconds 20 --tasks 64")]
    Demo(dynalimit_demo::Options),
    /// Measure latency, throughput, requests and client CPU against a fresh DynamoDB Local.
    #[command(
        after_help = "Example:\n  dynalimit bench\n  dynalimit bench --json > bench.json\n  dynalimit bench --compare zae --python .cache/venv-zae/bin/python"
    )]
    Bench(bench::BenchArgs),
    /// Load a table's own limits from where it runs, with a service's requests only (the
    /// acquire-only role suffices): latency, admissions, refusals, requests per acquire, and
    /// the tokens admitted against what the limits allow.
    #[command(
        after_help = "Examples:\n  dynalimit loadtest --entity lt-key --resource gpt-4 --duration 60 --concurrency 32\n  dynalimit loadtest --stack limits-prod --namespace loadtest -e lt-1 -e lt-2 -r gpt-4 --cost rpm=1 --cost tpm=800 --rate 200 --yes --output json"
    )]
    Loadtest(loadtest::LoadtestArgs),
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    match &cli.command {
        Command::Deploy(args) => infra::deploy(g, args).await,
        Command::Status => infra::status(g).await,
        Command::List => fleet::list(g).await,
        Command::Check => fleet::check(g).await,
        Command::Upgrade(args) => fleet::upgrade(g, args).await,
        Command::Delete(args) => delete::run(g, args).await,
        Command::Template(args) => infra::template(args),
        Command::LambdaExport(args) => infra::lambda_export(g, args),
        Command::Version(args) => infra::version(g, args).await,
        Command::Namespace(c) => namespace::run(g, c).await,
        Command::Entity(c) => entity::run(g, c).await,
        Command::Limits(c) => limits::run(g, c).await,
        Command::Resource(c) => access::run_resource(g, c).await,
        Command::Usage(args) => usage::run(g, args).await,
        Command::Alerts(c) => alerts::run(g, c).await,
        Command::Concurrency(c) => concurrency::run(g, c).await,
        Command::Aggregator(c) => aggregator::run(&g.aws_settings(), &g.stack, c).await,
        Command::Audit(args) => audit::run(g, args).await,
        Command::Local(c) => local::run(g, c).await,
        Command::Demo(options) => {
            dynalimit_demo::run(options, &g.aws_settings(), &g.stack, &g.namespace)
                .await
                .map_err(demo_error)
        }
        Command::Bench(args) if args.compare.is_some() => {
            compare::run(args, &g.aws_settings(), &g.stack).await
        }
        Command::Bench(args) if args.mixed.mixed => {
            mixed::run(args, &g.aws_settings(), &g.stack).await
        }
        Command::Bench(args) => bench::run(args, &g.aws_settings(), &g.stack).await,
        Command::Loadtest(args) => loadtest::run(g, args).await,
    }
}

/// The demo's error, with the repository's and the limiter's own errors at the top, where
/// [`exit_code`] looks for them.
fn demo_error(error: dynalimit_demo::Error) -> anyhow::Error {
    match error {
        dynalimit_demo::Error::Repository(e) => e.into(),
        dynalimit_demo::Error::Limiter(e) => e.into(),
        dynalimit_demo::Error::Invalid(e) => e.into(),
        dynalimit_demo::Error::InvalidOption { .. } => context::bad_input(error),
        other => other.into(),
    }
}

/// Exit codes: 1 error, 2 bad input, 3 AWS failure, 4 stack or table not found; `limits
/// diff` exits 2 for drift and 1 for every error.
fn exit_code(error: &anyhow::Error) -> u8 {
    if error.is::<manifest::Drift>() {
        return 2;
    }
    if error.is::<manifest::DiffFailed>() {
        return 1;
    }
    if error.chain().any(|e| {
        e.is::<dynalimit_core::CoreError>()
            || e.is::<context::BadInput>()
            || e.is::<level_spec::LevelError>()
            || e.downcast_ref::<manifest::ManifestError>()
                .is_some_and(manifest::ManifestError::is_refusal)
    }) {
        return 2;
    }
    if let Some(e) = error.downcast_ref::<StackError>() {
        return match e {
            StackError::Validation(_) => 2,
            StackError::NotFound { .. } => 4,
            StackError::Foreign { .. } => 1,
            _ => 3,
        };
    }
    match error.downcast_ref::<RepositoryError>() {
        Some(RepositoryError::Validation(_) | RepositoryError::MissingRegion { .. }) => 2,
        Some(RepositoryError::TableNotFound { .. }) => 4,
        Some(
            RepositoryError::PermissionDenied { .. }
            | RepositoryError::Throttled { .. }
            | RepositoryError::Unavailable { .. }
            | RepositoryError::InvalidRequest { .. },
        ) => 3,
        _ => 1,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DYNALIMIT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,aws_config=error")),
        )
        .with_writer(std::io::stderr)
        // Colours only for a terminal: a log piped to a file or another program carries no
        // escape sequences (the table's own values are escaped where they are printed).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut builder = match &cli.command {
        Command::Bench(args) if args.current_thread() => {
            tokio::runtime::Builder::new_current_thread()
        }
        _ => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, whatever the message quotes from the table.
            let line = format!("{e:#}").replace('\n', " ");
            let prefix = if e.is::<manifest::Drift>() {
                ""
            } else {
                "error: "
            };
            eprintln!("{prefix}{}", output::escape(&line));
            ExitCode::from(exit_code(&e))
        }
    }
}
