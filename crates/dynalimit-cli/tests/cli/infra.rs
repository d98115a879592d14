//! deploy, status, delete and template; the stack commands run against a private moto server.

use dynalimit_repository::stack::{TEMPLATE, code_key};
use dynalimit_tests::moto::MotoServer;

use crate::{command, run_env, run_json_on, run_on, temp_file};

#[test]
fn deploy_status_delete_cycle_on_moto() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "dynalimit-cli";
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);

    run(&["status"]).fails(4, "does not exist");
    let deployed = run(&[
        "deploy",
        "--poll-ms",
        "100",
        "--no-aggregator",
        "--tag",
        "team=core",
    ])
    .json();
    assert_eq!(deployed["status"], "CREATE_COMPLETE");
    assert_eq!(deployed["TableName"], stack);
    assert!(
        deployed.get("CodeBucketName").is_none(),
        "no aggregator, no code bucket"
    );

    // Update with the aggregator packaged from a binary.
    let binary = temp_file("bootstrap-bin", "#!/bin/sh\necho aggregator\n");
    let updated = run(&[
        "deploy",
        "--poll-ms",
        "100",
        "--aggregator-binary",
        binary.to_str().unwrap(),
        "--lambda-memory",
        "512",
    ]);
    assert!(
        updated.stderr.contains("UPDATE_COMPLETE"),
        "progress shown: {}",
        updated.stderr
    );
    let updated = updated.json();
    assert_eq!(updated["status"], "UPDATE_COMPLETE");
    assert!(updated["AggregatorFunctionArn"].is_string(), "{updated}");

    let status = run(&["status"]).json();
    assert_eq!(status["status"], "UPDATE_COMPLETE");
    assert_eq!(status["table_status"], "ACTIVE");
    assert_eq!(status["lambda_version"], env!("CARGO_PKG_VERSION"));
    let zip = std::fs::read(&binary).map(|b| code_key(&b)).unwrap();
    assert!(zip.starts_with("aggregator/"));

    // The deployed table serves the data plane.
    run(&["entity", "create", "key-1"]).json();
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");

    run(&["delete"]).fails(1, "--yes");
    let deleted = run(&["delete", "--yes", "--poll-ms", "100"]).json();
    assert_eq!(deleted["status"], "DELETE_COMPLETE");
    run(&["status"]).fails(4, "does not exist");
    run(&["delete", "--yes"]).fails(4, "does not exist");
}

#[test]
fn deploy_refuses_bad_options_before_any_request() {
    // Nothing listens on port 9: the options must be refused first.
    let run = run_on(
        "http://127.0.0.1:9",
        "x",
        &["deploy", "--lambda-timeout", "0"],
    );
    run.fails(2, "lambda timeout");
    let run = run_on(
        "http://127.0.0.1:9",
        "x",
        &["deploy", "--log-retention-days", "2"],
    );
    run.fails(2, "log retention");
    let zip = temp_file("not.zip", "plain text");
    let run = run_on(
        "http://127.0.0.1:9",
        "x",
        &["deploy", "--aggregator-zip", zip.to_str().unwrap()],
    );
    run.fails(1, "not a zip");
}

#[test]
fn template_prints_or_writes_the_embedded_template() {
    let run = run_env(&[], &["template"]);
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, TEMPLATE);
    let out = temp_file("t.yaml", "");
    let status = command()
        .args(["template", "-o", out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), TEMPLATE);
}

#[test]
fn deploy_packages_a_cargo_lambda_build_when_present() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let target = temp_file("placeholder", "").parent().unwrap().to_path_buf();
    let built = target.join("lambda").join("dynalimit-aggregator");
    std::fs::create_dir_all(&built).unwrap();
    std::fs::write(built.join("bootstrap"), "#!/bin/sh\n").unwrap();
    let target_s = target.to_str().unwrap();
    let deploy = run_env(
        &[("CARGO_TARGET_DIR", target_s)],
        &[
            "--endpoint-url",
            moto.url(),
            "--stack",
            "dynalimit-built",
            "--output",
            "json",
            "deploy",
            "--poll-ms",
            "100",
        ],
    );
    assert!(
        deploy.stderr.contains("packaging the aggregator from"),
        "{}",
        deploy.stderr
    );
    assert_eq!(
        deploy.json()["status"],
        "UPDATE_COMPLETE",
        "created, then switched to the code"
    );
    let status = run_json_on(moto.url(), "dynalimit-built", &["status"]).json();
    assert_eq!(status["lambda_version"], env!("CARGO_PKG_VERSION"));
}
