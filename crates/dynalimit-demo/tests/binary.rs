//! The `dynalimit-demo` binary, run as a user runs it: against the test kit's DynamoDB (a
//! fresh table per test), named by `--endpoint-url` or by the standard AWS setting, and with
//! bad arguments that must fail before anything is started.

/// One invocation's result.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `dynalimit-demo ARGS` with `env` on a blocking thread (the test kit's emulator keeps
/// running meanwhile); no dynalimit or AWS settings are inherited.
async fn demo(env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = dynalimit_tests::binary::without_aws(env!("CARGO_BIN_EXE_dynalimit-demo"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args);
    let out = tokio::task::spawn_blocking(move || c.output())
        .await
        .expect("the command ran")
        .expect("dynalimit-demo starts");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The number after `word ` on the summary line (`admitted N  rejected M ...`).
fn count(stdout: &str, word: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("admitted "))
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    line.split_whitespace()
        .skip_while(|w| *w != word)
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count after {word:?}: {line}"))
}

/// Asserts a successful short run on the kit's endpoint: clients admitted, the bucket table
/// with the project's and both keys' limits, no private emulator, the table there.
async fn assert_ran_on_the_kit(out: &Run, stack: &str) {
    assert_eq!(out.code, 0, "stdout: {} stderr: {}", out.stdout, out.stderr);
    assert!(
        !out.stdout.contains("private DynamoDB Local"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("table {stack}")),
        "{}",
        out.stdout
    );
    assert!(count(&out.stdout, "admitted") > 0, "{}", out.stdout);
    // Standard output is a pipe here: the progress bar draws nothing into it.
    assert!(!out.stdout.contains('\r'), "{:?}", out.stdout);

    let table: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| *l != "Bucket states:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    let header: Vec<&str> = table
        .first()
        .map_or(vec![], |h| h.split_whitespace().collect());
    assert_eq!(
        header,
        [
            "entity",
            "resource",
            "limit",
            "capacity",
            "available",
            "consumed",
            "shards"
        ],
        "{}",
        out.stdout
    );
    for entity in ["acme", "acme-key-1", "acme-key-2"] {
        for limit in ["rpm", "tpm"] {
            assert!(
                table.iter().any(|row| {
                    let cells: Vec<&str> = row.split_whitespace().collect();
                    cells.len() == 7 && cells[0] == entity && cells[2] == limit
                }),
                "no row for {entity} {limit}: {}",
                out.stdout
            );
        }
    }
    assert!(out.stdout.contains("Demo finished in"), "{}", out.stdout);

    assert!(
        dynalimit_tests::table_exists(stack).await,
        "the demo's table {stack} is on the kit's endpoint"
    );
}

#[tokio::test]
async fn the_demo_runs_on_the_endpoint_url_it_is_given() {
    let stack = dynalimit_tests::unique_table_name();
    let endpoint = dynalimit_tests::endpoint().url();
    let out = demo(
        &[],
        &[
            "--endpoint-url",
            endpoint,
            "--stack",
            &stack,
            "--seconds",
            "1",
            "--tasks",
            "2",
        ],
    )
    .await;
    assert_ran_on_the_kit(&out, &stack).await;
}

#[tokio::test]
async fn the_demo_finds_the_endpoint_in_the_standard_aws_settings() {
    let stack = dynalimit_tests::unique_table_name();
    let env = [
        (
            "AWS_ENDPOINT_URL_DYNAMODB",
            dynalimit_tests::endpoint().url(),
        ),
        // Nothing listens there: only the DynamoDB-specific endpoint may be used.
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
        ("DYNALIMIT_STACK", stack.as_str()),
        ("DYNALIMIT_NAMESPACE", "demo-ns"),
    ];
    let out = demo(&env, &["--seconds", "1", "--tasks", "2"]).await;
    assert!(out.stdout.contains("namespace demo-ns"), "{}", out.stdout);
    assert_ran_on_the_kit(&out, &stack).await;
}

#[tokio::test]
async fn bad_arguments_fail_with_a_clear_message_before_anything_starts() {
    // With no endpoint a private DynamoDB Local would be started: nothing on standard output
    // says that any was.
    let out = demo(&[], &["--tasks", "0"]).await;
    assert_eq!(out.code, 2, "stdout: {} stderr: {}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains("--tasks") && out.stderr.contains("0 is not in 1..=1024"),
        "{}",
        out.stderr
    );

    let out = demo(&[], &["--stack", "not_a_stack", "--seconds", "1"]).await;
    assert_eq!(out.code, 2, "stdout: {} stderr: {}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", out.stderr);
    assert!(errors[0].contains("stack name"), "{}", out.stderr);
}

#[tokio::test]
async fn help_documents_the_load_the_endpoint_and_the_table() {
    let out = demo(&[], &["--help"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for needle in [
        "--seconds",
        "--tasks",
        "--endpoint-url",
        "DYNALIMIT_ENDPOINT_URL",
        "AWS_ENDPOINT_URL",
        "--stack",
        "DYNALIMIT_STACK",
        "--namespace",
        "DYNALIMIT_NAMESPACE",
        "Example",
    ] {
        assert!(
            out.stdout.contains(needle),
            "help lacks {needle}: {}",
            out.stdout
        );
    }
}
