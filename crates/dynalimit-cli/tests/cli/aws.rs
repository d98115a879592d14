//! The standard AWS settings, as the AWS CLI reads them: `AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`, a profile of the shared files chosen by `AWS_PROFILE` or
//! `--profile` (its region, endpoint and credentials), and a clear error without a region.

use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_tests::fault::FaultProxy;

use crate::{Run, execute, temp_file};

/// Runs `dynalimit ARGS` with `env` on a blocking thread, so the test's runtime keeps serving
/// the proxy meanwhile. No credentials or shared files are inherited.
async fn dynalimit(env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = dynalimit_tests::binary::without_aws(env!("CARGO_BIN_EXE_dynalimit"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args);
    tokio::task::spawn_blocking(move || execute(&mut c))
        .await
        .expect("the command ran")
}

/// Sets limits on fresh table `stack` and reads them back, with only `env` saying where
/// DynamoDB is.
async fn set_and_get(env: &[(&str, &str)], stack: &str, extra: &[&str]) {
    let set = [
        &["--stack", stack][..],
        extra,
        &["limits", "set", "--resource", "gpt-4", "rpm=100/min"],
    ]
    .concat();
    let out = dynalimit(env, &set).await;
    assert_eq!(out.code, 0, "limits set: {}", out.stderr);
    let get = [
        &["--stack", stack][..],
        extra,
        &["limits", "get", "--resource", "gpt-4", "--output", "json"],
    ]
    .concat();
    let got = dynalimit(env, &get).await.json();
    assert!(got["limits"].to_string().contains("rpm"), "{got}");
}

#[tokio::test]
async fn aws_endpoint_url_alone_reaches_a_fresh_emulator() {
    let stack = dynalimit_tests::unique_table_name();
    let endpoint = dynalimit_tests::endpoint().url();
    set_and_get(&[("AWS_ENDPOINT_URL", endpoint)], &stack, &[]).await;
    assert!(
        dynalimit_tests::table_exists(&stack).await,
        "the table was created there"
    );
}

#[tokio::test]
async fn aws_endpoint_url_dynamodb_wins_over_aws_endpoint_url() {
    let stack = dynalimit_tests::unique_table_name();
    let endpoint = dynalimit_tests::endpoint().url();
    let env = [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        // Nothing listens there: only the DynamoDB-specific endpoint may be used.
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ];
    set_and_get(&env, &stack, &[]).await;
}

#[tokio::test]
async fn a_profile_brings_region_endpoint_and_credentials() {
    let proxy = FaultProxy::start().await;
    let config = temp_file(
        "config",
        &format!(
            "[default]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:9\n\n\
             [profile limits]\nregion = eu-west-3\nendpoint_url = {}\n",
            proxy.url()
        ),
    );
    let credentials = temp_file(
        "credentials",
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n\n\
         [limits]\naws_access_key_id = AKIDLIMITS\naws_secret_access_key = s\n",
    );
    let files = [
        ("AWS_CONFIG_FILE", config.to_str().expect("path")),
        (
            "AWS_SHARED_CREDENTIALS_FILE",
            credentials.to_str().expect("path"),
        ),
    ];
    // Chosen by AWS_PROFILE, then by --profile.
    let by_env = [files[0], files[1], ("AWS_PROFILE", "limits")];
    let by_flag: &[&str] = &["--profile", "limits"];
    for (env, extra) in [(&by_env[..], &[][..]), (&files[..], by_flag)] {
        proxy.clear_requests();
        let stack = dynalimit_tests::unique_table_name();
        set_and_get(env, &stack, extra).await;
        let requests = proxy.requests();
        assert!(
            requests.iter().any(|r| r.operation == "CreateTable"),
            "the profile's endpoint is an emulator: the table is created there"
        );
        for r in &requests {
            assert_eq!(
                r.signed_by,
                ("AKIDLIMITS".to_string(), "eu-west-3".to_string()),
                "{} signed with the profile's key for its region",
                r.operation
            );
        }
    }
}

#[tokio::test]
async fn a_missing_region_off_loopback_fails_before_any_request() {
    // An endpoint that does not resolve: any attempt to reach it would be another error.
    let env = [("AWS_ENDPOINT_URL", "http://dynamodb.example.invalid:8000")];
    for args in [
        &["limits", "get", "--resource", "gpt-4"][..],
        &["status"][..],
    ] {
        let started = SystemClock.epoch_millis();
        let out = dynalimit(&env, args).await;
        out.fails(2, "no AWS region is configured");
        for hint in ["--region", "AWS_REGION", "profile \"default\""] {
            assert!(out.stderr.contains(hint), "{hint}: {}", out.stderr);
        }
        let took = SystemClock.epoch_millis() - started;
        assert!(took < 20_000, "it did not wait: {took} ms");
    }
    let out = dynalimit(&env, &["--profile", "prod", "limits", "list"]).await;
    out.fails(2, "profile \"prod\"");
}

#[tokio::test]
async fn the_demo_runs_on_the_endpoint_of_aws_endpoint_url() {
    let stack = dynalimit_tests::unique_table_name();
    let env = [("AWS_ENDPOINT_URL", dynalimit_tests::endpoint().url())];
    let out = dynalimit(
        &env,
        &["--stack", &stack, "demo", "--seconds", "1", "--tasks", "2"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !out.stdout.contains("private DynamoDB Local"),
        "{}",
        out.stdout
    );
    // Standard output is a pipe here: the progress bar draws nothing into it.
    assert!(!out.stdout.contains('\r'), "{:?}", out.stdout);
    assert!(
        out.stdout.contains("admitted"),
        "the summary: {}",
        out.stdout
    );
    assert!(
        dynalimit_tests::table_exists(&stack).await,
        "the demo's table is there"
    );
}
