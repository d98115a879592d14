//! local up, status and down with DynamoDB Local in the background; the LocalStack mode's
//! errors.

use crate::{Run, run_env};

#[test]
fn local_up_status_down_runs_dynamodb_local_in_the_background() {
    // The kit installs DynamoDB Local if needed; `local up` reuses the same cache.
    let _ = dynalimit_tests::endpoint();
    let state = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("local-{}", std::process::id()));
    let state_s = state.to_str().unwrap().to_string();
    let env = [("DYNALIMIT_LOCAL_DIR", state_s.as_str())];
    let run = |args: &[&str]| -> Run { run_env(&env, &[args, &["--output", "json"]].concat()) };

    assert_eq!(run(&["local", "status"]).json()["status"], "stopped");
    let up = run(&["local", "up", "--port", "0", "--stack", "local-table"]).json();
    let endpoint = up["endpoint"].as_str().unwrap().to_string();
    let pid = up["pid"].as_u64().unwrap();
    assert_eq!(up["table"], "local-table");
    assert!(state.join("dynamodb-local.pid").is_file());

    // The new user's sequence on it.
    let on = |args: &[&str]| -> Run {
        run_env(
            &[
                ("DYNALIMIT_ENDPOINT_URL", endpoint.as_str()),
                ("DYNALIMIT_STACK", "local-table"),
            ],
            &[args, &["--output", "json"]].concat(),
        )
    };
    on(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "rpm=100/min,tpm=10000/min:burst=20000",
    ])
    .json();
    on(&["entity", "create", "key-1"]).json();
    let resolved = on(&[
        "limits",
        "get",
        "--entity",
        "key-1",
        "--resource",
        "gpt-4",
        "--resolved",
    ])
    .json();
    assert_eq!(resolved["source"], "resource");
    let usage = on(&["usage", "--entity", "key-1"]).json();
    assert_eq!(
        usage,
        serde_json::json!([]),
        "no aggregator ran: no snapshots yet"
    );

    let status = run(&["local", "status"]).json();
    assert_eq!(
        (status["status"].as_str(), status["pid"].as_u64()),
        (Some("running"), Some(pid))
    );
    assert_eq!(status["answering"], true);
    let again = run(&["local", "up"]).json();
    assert_eq!(
        again["pid"].as_u64(),
        Some(pid),
        "a second up reuses the running instance"
    );

    let down = run(&["local", "down"]).json();
    assert_eq!(down["status"], "stopped");
    assert_eq!(run(&["local", "status"]).json()["status"], "stopped");
    assert!(!state.join("dynamodb-local.pid").exists());
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("DynamoDBLocal.jar"),
        "the JVM is gone (at most a zombie awaiting its reaper)"
    );
    // Down again is harmless.
    assert_eq!(run(&["local", "down"]).json()["status"], "stopped");
}

#[test]
fn localstack_mode_explains_what_is_missing() {
    let state = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("localstack-missing");
    let state_s = state.to_str().unwrap();
    let run = run_env(
        &[("PATH", "/nonexistent"), ("DYNALIMIT_LOCAL_DIR", state_s)],
        &["local", "up", "--localstack"],
    );
    run.fails(1, "Docker");
}
