//! zae-limiter's Lambda auto-update on a stack dynalimit deployed: its own check and push code
//! (`tests/python/zae_auto_update.py`) run against the stack on moto, and the aggregator's code
//! stays dynalimit's.

use std::process::Command;
use std::time::Duration;

use dynalimit_repository::Repository;
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_stack::{StackManager, StackOptions};
use dynalimit_tests::moto::MotoServer;
use serde_json::Value;

/// Runs zae-limiter's `Repository.open(auto_update=True)` as release `client_version` on
/// `stack`, with `function` the aggregator dynalimit deployed; the script's report.
fn auto_update(
    python: &std::path::Path,
    moto: &MotoServer,
    stack: &str,
    function: &str,
    client_version: &str,
) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/zae_auto_update.py");
    let out = Command::new(python)
        .args([script, moto.url(), stack, function, client_version])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the script failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the script did not answer ({e}); stderr:\n{stderr}"))
}

#[tokio::test]
async fn a_zae_limiter_auto_update_never_replaces_dynalimits_aggregator() {
    let Some(python) = dynalimit_tests::zae::interpreter() else {
        return;
    };
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "dynalimit-shared";
    let settings = aws::load(
        &AwsSettings::new()
            .endpoint_url(Some(moto.url()))
            .region(Some("us-east-1")),
    )
    .await
    .expect("settings");
    let info = StackManager::from_sdk_config(stack, &settings)
        .poll_interval(Duration::from_millis(100))
        .deploy(
            &StackOptions::default(),
            Some(b"PK\x05\x06 dynalimit's aggregator; moto does not run it"),
            &mut |_| {},
        )
        .await
        .expect("deploy with the aggregator");
    let function = info.outputs["AggregatorFunctionName"].clone();
    // The first open records the version record, `lambda_version = 0.17.0`, as deploy does.
    let repo = Repository::builder()
        .endpoint_url(moto.url())
        .region("us-east-1")
        .stack(stack)
        .open()
        .await
        .expect("open");
    let record = repo.version_record().await.unwrap().expect("record");
    assert_eq!(record.lambda_version.as_deref(), Some("0.17.0"));

    // zae-limiter 0.17.0 itself: the record is as new as it is; nothing is pushed.
    let same = auto_update(&python, &moto, stack, &function, "0.17.0");
    assert_eq!(same["error"], Value::Null, "{same}");
    assert_eq!(same["decision"]["requires_lambda_update"], false, "{same}");
    assert_eq!(same["pushes"], serde_json::json!([]), "{same}");

    // A newer zae-limiter: its check asks for an update and it pushes to the functions of its
    // own names, which a dynalimit stack does not have.
    let newer = auto_update(&python, &moto, stack, &function, "0.18.0");
    assert_eq!(newer["error"], Value::Null, "{newer}");
    assert_eq!(newer["decision"]["lambda_version"], "0.17.0", "{newer}");
    assert_eq!(newer["decision"]["requires_lambda_update"], true, "{newer}");
    assert_eq!(
        newer["pushes"],
        serde_json::json!([
            {"push": "deploy_lambda_code", "status": "absent"},
            {"push": "deploy_provisioner_code", "status": "absent"},
        ]),
        "{newer}"
    );
    assert_eq!(newer["after"]["sha"], newer["before"]["sha"], "{newer}");
    assert_eq!(
        newer["after"]["functions"], newer["before"]["functions"],
        "{newer}"
    );
    let functions: Vec<&str> = newer["after"]["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(functions.contains(&function.as_str()), "{functions:?}");
    for theirs in [
        format!("{stack}-aggregator"),
        format!("{stack}-limits-provisioner"),
    ] {
        assert!(!functions.contains(&theirs.as_str()), "{functions:?}");
    }
    // Having found no function of its own, it records its own release as the stack's
    // `lambda_version` (docs/zae-limiter.md says what that means for the reader gate).
    assert_eq!(newer["record"]["lambda_version"], "0.18.0", "{newer}");
}
