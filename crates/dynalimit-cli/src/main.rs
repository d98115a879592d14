//! The `dynalimit` command.

mod aggregator;

use clap::{Parser, Subcommand};

/// dynalimit: distributed rate limits on one DynamoDB table.
#[derive(Debug, Parser)]
#[command(name = "dynalimit", version)]
struct Cli {
    /// Endpoint of DynamoDB, e.g. DynamoDB Local or LocalStack.
    #[arg(
        long,
        global = true,
        env = "DYNALIMIT_ENDPOINT_URL",
        value_name = "URL"
    )]
    endpoint_url: Option<String>,
    /// AWS region (default: the AWS configuration's, else us-east-1).
    #[arg(long, global = true, env = "AWS_REGION")]
    region: Option<String>,
    /// Stack name, which is also the table name.
    #[arg(long, global = true, env = "DYNALIMIT_STACK", default_value = dynalimit_repository::DEFAULT_STACK)]
    stack: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Maintain usage snapshots from the table's stream without Lambda.
    #[command(subcommand)]
    Aggregator(aggregator::AggregatorCommand),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DYNALIMIT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match &cli.command {
        Command::Aggregator(c) => {
            let (url, region) = (cli.endpoint_url.as_deref(), cli.region.as_deref());
            aggregator::run(url, region, &cli.stack, c).await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
            std::process::ExitCode::FAILURE
        }
    }
}
