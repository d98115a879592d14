//! `dynalimit aggregator run`: the stream runner, for DynamoDB Local and LocalStack users (and
//! anyone who prefers a long-running process to the Lambda function).

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use dynalimit_aggregator::runner::{Runner, RunnerOptions, StartPosition};
use dynalimit_aggregator::{Settings, SnapshotWindow};
use dynalimit_repository::aws::{self, AwsSettings};

/// Aggregator commands.
#[derive(Debug, Subcommand)]
pub(crate) enum AggregatorCommand {
    /// Poll the table's stream and maintain usage snapshots (runs until Ctrl-C).
    #[command(
        after_help = "Examples:\n  dynalimit --endpoint-url http://127.0.0.1:8000 aggregator run\n  dynalimit aggregator run --windows hourly,daily,monthly --no-refill\n  dynalimit aggregator run --until-idle"
    )]
    Run(RunArgs),
}

/// Where a runner without a checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum From {
    /// The oldest record the stream holds (records already counted are skipped).
    TrimHorizon,
    /// Only records written from now on.
    Latest,
}

/// Options of `aggregator run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Snapshot windows, comma-separated: hourly, daily, monthly.
    #[arg(long, default_value = dynalimit_aggregator::config::DEFAULT_SNAPSHOT_WINDOWS, value_name = "LIST")]
    windows: String,
    /// Snapshot retention in days.
    #[arg(long, default_value_t = dynalimit_aggregator::config::DEFAULT_SNAPSHOT_TTL_DAYS)]
    snapshot_ttl_days: i64,
    /// Do not top up active buckets.
    #[arg(long)]
    no_refill: bool,
    /// Do not double the shard count of hot buckets.
    #[arg(long)]
    no_sharding: bool,
    /// Where to start reading shards the runner has no checkpoint for.
    #[arg(long, value_enum, default_value_t = From::TrimHorizon)]
    from: From,
    /// Pause between polls that found nothing, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    idle_wait_ms: u64,
    /// Publish quota threshold crossings and refusal alerts (`dynalimit alerts set`) to this
    /// EventBridge bus, as the stack's aggregator does with `deploy --alert-event-bus`.
    #[arg(long, value_name = "BUS")]
    alert_event_bus: Option<String>,
    /// Stop once a poll finds nothing new (for scripts), instead of running until Ctrl-C.
    #[arg(long)]
    until_idle: bool,
}

/// Runs an aggregator command against table `stack`.
///
/// # Errors
/// Bad options, or (with `--until-idle`) a failed poll.
pub(crate) async fn run(
    aws_settings: &AwsSettings,
    stack: &str,
    command: &AggregatorCommand,
) -> Result<()> {
    let AggregatorCommand::Run(args) = command;
    let mut settings = Settings::new(stack);
    settings.windows = SnapshotWindow::parse_list(&args.windows)?;
    anyhow::ensure!(
        !settings.windows.is_empty(),
        "--windows names no window (hourly, daily, monthly)"
    );
    anyhow::ensure!(
        args.snapshot_ttl_days > 0,
        "--snapshot-ttl-days must be positive"
    );
    settings.snapshot_ttl_days = args.snapshot_ttl_days;
    settings.proactive_refill = !args.no_refill;
    settings.proactive_sharding = !args.no_sharding;
    settings.alert_event_bus = args.alert_event_bus.clone().filter(|b| !b.is_empty());
    let options = RunnerOptions {
        start: match args.from {
            From::TrimHorizon => StartPosition::TrimHorizon,
            From::Latest => StartPosition::Latest,
        },
        idle_wait: std::time::Duration::from_millis(args.idle_wait_ms),
        ..RunnerOptions::default()
    };

    let sdk = aws::load(aws_settings).await?;
    let mut runner = Runner::from_sdk_config(&sdk, settings, options);

    if args.until_idle {
        let mut total = 0usize;
        loop {
            let report = runner.poll_once().await.context("polling the stream")?;
            total += report.counted;
            if report.records == 0 && report.failed == 0 {
                break;
            }
        }
        println!("counted {total} records");
        return Ok(());
    }
    eprintln!("aggregating the stream of table {stack}; Ctrl-C stops");
    runner
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    Ok(())
}
