//! The fault soak ([`dynalimit_tests::soak`]).
//!
//! ```text
//! dynalimit-soak [--seconds N] [--workers N] [--tasks N] [--rate P] [--restarts N] [--seed N]
//! ```
//!
//! runs one soak (defaults: 30 s, 4 workers of 16 tasks, 3 % of requests faulted, 2 emulator
//! restarts) and prints its report as JSON; the exit status is 0 when every check holds. With
//! `--worker OPTIONS INDEX` it is one worker process of a soak (started by the orchestrator),
//! with `--fleet-worker OPTIONS INDEX` one of the fleet test of concurrency limits
//! ([`dynalimit_tests::fleet`]).

use std::process::ExitCode;

use dynalimit_tests::soak::{self, Options};

fn usage(message: &str) -> ExitCode {
    eprintln!(
        "dynalimit-soak: {message}\nusage: dynalimit-soak [--seconds N] [--workers N] \
         [--tasks N] [--rate P] [--restarts N] [--seed N]"
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--fleet-worker") {
        let (Some(options), Some(index)) = (args.get(1), args.get(2)) else {
            return usage("--fleet-worker needs OPTIONS and INDEX");
        };
        let (Ok(options), Ok(index)) = (
            serde_json::from_str::<dynalimit_tests::fleet::FleetOptions>(options),
            index.parse::<u32>(),
        ) else {
            return usage("--fleet-worker: bad OPTIONS or INDEX");
        };
        return match dynalimit_tests::fleet::worker(&options, index).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dynalimit-soak fleet worker {index}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("--worker") {
        let (Some(options), Some(index)) = (args.get(1), args.get(2)) else {
            return usage("--worker needs OPTIONS and INDEX");
        };
        let (Ok(options), Ok(index)) = (
            serde_json::from_str::<Options>(options),
            index.parse::<u32>(),
        ) else {
            return usage("--worker: bad OPTIONS or INDEX");
        };
        return match soak::worker(&options, index).await {
            Ok(ledger) => {
                println!("{}", serde_json::to_string(&ledger).unwrap_or_default());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dynalimit-soak worker {index}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return usage(&format!("{flag} needs a value"));
        };
        let parsed = match flag.as_str() {
            "--seconds" => value.parse().map(|v| options.seconds = v).is_ok(),
            "--workers" => value.parse().map(|v| options.workers = v).is_ok(),
            "--tasks" => value.parse().map(|v| options.tasks = v).is_ok(),
            "--rate" => value.parse().map(|v| options.fault_rate = v).is_ok(),
            "--restarts" => value.parse().map(|v| options.restarts = v).is_ok(),
            "--seed" => value.parse().map(|v| options.seed = v).is_ok(),
            _ => return usage(&format!("unknown flag {flag}")),
        };
        if !parsed {
            return usage(&format!("{flag}: bad value {value}"));
        }
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return usage(&format!("cannot find this binary: {e}")),
    };
    match soak::run(&options, &exe).await {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                eprintln!("dynalimit-soak: a check failed (see the report)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("dynalimit-soak: {e}");
            ExitCode::FAILURE
        }
    }
}
