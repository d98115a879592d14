//! The `dynalimit` command. This file holds only the command tree and the dispatch; each
//! command group lives in its own module.

mod bench;
mod demo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// dynalimit: distributed rate limits on one DynamoDB table.
#[derive(Debug, Parser)]
#[command(name = "dynalimit", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate an LLM gateway on a private DynamoDB Local (or --endpoint-url) and show the
    /// buckets.
    #[command(after_help = "Example:\n  dynalimit demo\n  dynalimit demo --seconds 20 --tasks 64")]
    Demo(demo::DemoArgs),
    /// Measure acquire latency, throughput, requests and client CPU against a fresh DynamoDB
    /// Local.
    #[command(after_help = "Example:\n  dynalimit bench\n  dynalimit bench --json > bench.json")]
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Bench(args) => bench::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
