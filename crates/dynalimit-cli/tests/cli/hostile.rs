//! The table output under hostile items: the worlds and mutations of the "hostile items"
//! suite (`dynalimit_tests::hostile`), stored in an in-memory table served over HTTP, read by
//! every command that prints items of the table. Each run ends within a bound with the
//! table printed (exit 0) or one error line (exit 1), never a panic; the printed text holds
//! no control or bidirectional-override character from the table.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dynalimit_memory::Store;
use dynalimit_repository::Repository;
use dynalimit_tests::hostile::{self, CHILD, NAMESPACE, PARENT, RESOURCE, strategy};
use proptest::test_runner::{TestCaseError, TestRunner};

/// Cases per run when `PROPTEST_CASES` does not say (each runs the binary a dozen times).
const DEFAULT_CASES: u32 = 12;

/// How long one run of the binary may take, in real time (a liveness bound).
const RUN_BOUND: Duration = Duration::from_secs(30);

/// The commands that print what the table holds.
const COMMANDS: &[&[&str]] = &[
    &["entity", "get", CHILD],
    &["entity", "children", PARENT],
    &["entity", "available", CHILD, RESOURCE],
    &[
        "limits",
        "get",
        "--entity",
        CHILD,
        "--resource",
        RESOURCE,
        "--resolved",
    ],
    &["limits", "get", "--resource", RESOURCE],
    &["limits", "get", "--system"],
    &["limits", "list"],
    &["limits", "list", "--resource", RESOURCE],
    &["usage", "--entity", CHILD],
    &["usage", "summary", "--resource", RESOURCE],
    &["audit", "--entity", CHILD],
    &["namespace", "list"],
    &["version", "--table"],
];

#[test]
fn table_output_of_hostile_items() {
    let config = hostile::config(DEFAULT_CASES, "tests/cli/hostile-regressions.txt", 64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let ran = Arc::new(AtomicU32::new(0));
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy::case(), |case| {
        ran.fetch_add(1, Ordering::Relaxed);
        runtime.block_on(one(&case)).map_err(TestCaseError::fail)
    });
    let n = ran.load(Ordering::Relaxed);
    eprintln!("hostile items, table output: {n} cases");
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(n > 0, "no case ran");
}

async fn one(case: &strategy::Case) -> Result<(), String> {
    let store = Store::new();
    let table = dynalimit_tests::unique_table_name();
    let repo = Repository::builder()
        .in_memory_store(&store)
        .stack(table.clone())
        .namespace(NAMESPACE)
        .open()
        .await
        .expect("the case's table opens");
    let client = store.client();
    hostile::store_case(&client, &table, repo.namespace_id(), case).await;
    let endpoint = dynalimit_tests::serve_store(&store).await;
    let mut failures = Vec::new();
    for args in COMMANDS {
        let mut command = tokio::process::Command::from(crate::command());
        command
            .args([
                "--endpoint-url",
                &endpoint,
                "--stack",
                &table,
                "-N",
                NAMESPACE,
            ])
            .args(*args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().expect("run dynalimit");
        let Ok(out) = tokio::time::timeout(RUN_BOUND, child.wait_with_output()).await else {
            failures.push(format!("{args:?}: no answer within {RUN_BOUND:?}"));
            continue;
        };
        let out = out.expect("the binary's output");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        match out.status.code() {
            Some(0) => {}
            Some(1) if stderr.lines().filter(|l| l.starts_with("error:")).count() == 1 => {}
            code => failures.push(format!(
                "{args:?}: exit {code:?}\nstdout: {stdout}\nstderr: {stderr}"
            )),
        }
        for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            if let Some(c) = text.chars().find(|c| unsafe_for_a_terminal(*c)) {
                failures.push(format!(
                    "{args:?}: {stream} holds {:?}: {text:?}",
                    c.escape_unicode().to_string()
                ));
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// A character a terminal interprets instead of showing: controls other than the line feed,
/// and the bidirectional overrides and isolates.
fn unsafe_for_a_terminal(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}
