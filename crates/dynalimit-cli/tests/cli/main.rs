//! The `dynalimit` binary, run as a user runs it: data-plane commands against the test kit's
//! DynamoDB (a fresh table per test), `local` against a DynamoDB Local it starts itself, and
//! `deploy`/`status`/`delete` against a private moto server.

mod alerts;
mod aws;
mod bench;
mod concurrency;
mod data;
mod delete;
mod documented;
mod fleet;
mod foreign;
mod hostile;
mod infra;
mod level_forms;
mod loadtest;
mod local;
mod manifest;
mod reserved;
mod round_trip;
mod usage;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One invocation's result.
#[derive(Debug)]
pub(crate) struct Run {
    /// The arguments it ran with.
    pub(crate) args: Vec<String>,
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts success, parses standard output as JSON and checks that docs/cli-output.md
    /// documents every key it holds for the command.
    pub(crate) fn json(&self) -> Value {
        assert_eq!(self.code, 0, "failed: {}", self.stderr);
        let value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout));
        documented::check(&self.args, &value);
        value
    }

    /// Asserts failure with `code` and a single error line containing `needle`.
    pub(crate) fn fails(&self, code: i32, needle: &str) {
        assert_eq!(
            self.code, code,
            "stdout: {} stderr: {}",
            self.stdout, self.stderr
        );
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(lines.len(), 1, "{}", self.stderr);
        assert!(lines[0].contains(needle), "{:?} lacks {needle:?}", lines[0]);
    }
}

/// Runs `command` and collects what it printed.
pub(crate) fn execute(command: &mut Command) -> Run {
    let args = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let out = command.output().expect("run dynalimit");
    Run {
        args,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A clean command: no inherited dynalimit settings.
pub(crate) fn command() -> Command {
    dynalimit_tests::binary::without_settings(env!("CARGO_BIN_EXE_dynalimit"))
}

/// Runs `dynalimit ARGS` against `endpoint` and `stack`.
pub(crate) fn run_on(endpoint: &str, stack: &str, args: &[&str]) -> Run {
    execute(
        command()
            .args(["--endpoint-url", endpoint, "--stack", stack])
            .args(args),
    )
}

/// A fresh table of the test kit's DynamoDB and the binary pointed at it.
pub(crate) struct Fixture {
    pub(crate) table: dynalimit_tests::TestTable,
}

impl Fixture {
    /// Creates the table.
    pub(crate) async fn new() -> Fixture {
        Fixture {
            table: dynalimit_tests::table().await,
        }
    }

    /// Runs `dynalimit ARGS --output json` against the table.
    pub(crate) fn run(&self, args: &[&str]) -> Run {
        run_json_on(dynalimit_tests::endpoint().url(), self.table.name(), args)
    }
}

/// Runs `dynalimit ARGS --output json` against `endpoint` and `stack`.
pub(crate) fn run_json_on(endpoint: &str, stack: &str, args: &[&str]) -> Run {
    run_on(endpoint, stack, &[args, &["--output", "json"]].concat())
}

/// Runs `dynalimit ARGS` with extra environment.
pub(crate) fn run_env(env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = command();
    for (k, v) in env {
        c.env(k, v);
    }
    execute(c.args(args))
}

/// Writes `text` to a fresh file under the target's temporary directory.
pub(crate) fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "cli-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::thread::current().id())
}

#[test]
fn every_command_has_help_with_an_example() {
    let commands: &[&[&str]] = &[
        &[],
        &["deploy"],
        &["status"],
        &["delete"],
        &["template"],
        &["version"],
        &["namespace"],
        &["namespace", "register"],
        &["namespace", "list"],
        &["namespace", "get"],
        &["namespace", "delete"],
        &["namespace", "recover"],
        &["namespace", "orphans"],
        &["namespace", "purge"],
        &["entity"],
        &["entity", "create"],
        &["entity", "get"],
        &["entity", "delete"],
        &["entity", "children"],
        &["entity", "reset"],
        &["entity", "top-up"],
        &["limits"],
        &["limits", "set"],
        &["limits", "get"],
        &["limits", "delete"],
        &["limits", "list"],
        &["limits", "plan"],
        &["limits", "diff"],
        &["limits", "apply"],
        &["audit"],
        &["usage"],
        &["local"],
        &["local", "up"],
        &["local", "down"],
        &["local", "status"],
    ];
    for args in commands {
        let run = run_env(&[], &[*args, &["--help"][..]].concat());
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(
            run.stdout.contains("Example"),
            "{args:?} help has no example"
        );
        assert!(
            run.stdout
                .lines()
                .next()
                .is_some_and(|l| !l.trim().is_empty())
        );
    }
}

#[test]
fn bad_arguments_exit_with_usage_errors() {
    let run = run_env(&[], &["limits", "set"]);
    assert_eq!(run.code, 2);
    let run = run_env(&[], &["--output", "yaml", "status"]);
    assert_eq!(run.code, 2);
}
