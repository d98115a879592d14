//! local up, status, env, logs and down with DynamoDB Local in the background; the LocalStack
//! mode's errors.

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
    run(&["local", "env"]).fails(1, "not running");
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

    // `local env`: the variables, in JSON and as shell lines a shell reads back.
    let env_json = run(&["local", "env"]).json();
    assert_eq!(env_json["endpoint"], endpoint);
    assert_eq!(env_json["variables"]["DYNALIMIT_ENDPOINT_URL"], endpoint);
    assert_eq!(env_json["variables"]["AWS_ENDPOINT_URL_DYNAMODB"], endpoint);
    let lines = run_env(&env, &["local", "env"]);
    assert_eq!(lines.code, 0, "{}", lines.stderr);
    assert!(
        lines
            .stdout
            .lines()
            .any(|l| l == format!("export DYNALIMIT_ENDPOINT_URL={endpoint}")),
        "{}",
        lines.stdout
    );
    // A service pointed by these variables alone (no --endpoint-url, no DYNALIMIT_*) finds
    // the table through the SDK's own variable.
    let vars: Vec<(String, String)> = env_json["variables"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !k.starts_with("DYNALIMIT_"))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let vars: Vec<(&str, &str)> = vars
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain([("DYNALIMIT_STACK", "local-table")])
        .collect();
    let got = run_env(&vars, &["entity", "get", "key-1", "--output", "json"]).json();
    assert_eq!(got["id"], "key-1");

    // `local logs`: DynamoDB Local's own output.
    let log = run(&["local", "logs", "--tail", "50"]).json();
    let lines = log["lines"].as_array().unwrap();
    assert!(!lines.is_empty() && lines.len() <= 50, "{log}");
    assert!(
        lines
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("DynamoDB"))),
        "{log}"
    );
    assert!(
        log["file"]
            .as_str()
            .unwrap()
            .ends_with("dynamodb-local.log")
    );
    let one = run(&["local", "logs", "--tail", "1"]).json();
    assert_eq!(one["lines"].as_array().unwrap().len(), 1);

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
