//! `list`, `check` and `upgrade` on moto, next to a zae-limiter stack: the region's stacks of
//! both tools with their versions; the verdict on a table's version record and its exit code;
//! an upgrade that keeps the stack's parameters, uploads the code and records it, and is
//! refused, with nothing changed, for a table a newer client ratcheted or a stack not ours.

use std::path::Path;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::version;
use dynalimit_stack::{RELEASE, code_key};
use dynalimit_tests::moto::MotoServer;
use serde_json::Value;

use crate::delete::{stack_status, zae_stack};
use crate::foreign::stack_as_held;
use crate::{Run, command, execute, run_json_on, temp_file};

/// The stack's parameters as CloudFormation holds them.
async fn parameters(
    cfn: &aws_sdk_cloudformation::Client,
    stack: &str,
) -> std::collections::BTreeMap<String, String> {
    let described = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .expect("DescribeStacks");
    described.stacks()[0]
        .parameters()
        .iter()
        .map(|p| {
            (
                p.parameter_key().unwrap_or_default().to_owned(),
                p.parameter_value().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// `dynalimit ARGS --output json` in directory `dir` (where nothing is built).
fn run_in(dir: &Path, moto: &MotoServer, stack: &str, args: &[&str]) -> Run {
    execute(
        command()
            .current_dir(dir)
            .args(["--endpoint-url", moto.url(), "--stack", stack])
            .args(args)
            .args(["--output", "json"]),
    )
}

/// Sets the version record's `client_min_version`, as a newer client's ratchet does.
async fn ratchet_to(moto: &MotoServer, table: &str, minimum: &str) {
    moto.dynamodb()
        .await
        .update_item()
        .table_name(table)
        .set_key(Some(version::record_key()))
        .update_expression("SET client_min_version = :v")
        .expression_attribute_values(":v", AttributeValue::S(minimum.to_owned()))
        .send()
        .await
        .expect("the ratchet");
}

fn listed<'a>(list: &'a Value, stack: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["stack"] == stack)
        .unwrap_or_else(|| panic!("{stack} not listed: {list}"))
}

#[tokio::test]
async fn list_check_and_upgrade_across_both_tools_stacks() {
    let zae = "zae-fleet";
    let Some((moto, cfn)) = zae_stack(zae).await else {
        return;
    };
    let ours = "dynalimit-fleet";
    let dir = temp_file("placeholder", "").parent().unwrap().join("empty");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |stack: &str, args: &[&str]| run_in(&dir, &moto, stack, args);
    let upgrade_with = |binary: &Path| {
        let binary = binary.to_str().unwrap();
        run(
            ours,
            &["upgrade", "--poll-ms", "100", "--aggregator-binary", binary],
        )
    };

    // Nothing of ours yet: check finds no table.
    run(ours, &["check"]).fails(4, "does not exist");
    // The zae-limiter table has no version record until a client opens it.
    let uninitialized = run(zae, &["check"]);
    assert_eq!(uninitialized.code, 1, "{}", uninitialized.stderr);
    let report: Value = serde_json::from_str(&uninitialized.stdout).unwrap();
    assert_eq!(report["result"], "not_initialized");

    // Deployed with locked-down options and code.
    let binary = temp_file("fleet-bin", "#!/bin/sh\necho first\n");
    let deployed = run(
        ours,
        &[
            "deploy",
            "--poll-ms",
            "100",
            "--aggregator-binary",
            binary.to_str().unwrap(),
            "--policy-name-format",
            "dynalimit-fleet-{}",
            "--tracing",
            "--lambda-timeout",
            "120",
            "--duration-alarm-percent",
            "50",
        ],
    )
    .json();
    assert!(
        deployed["AcquireOnlyPolicyArn"]
            .as_str()
            .unwrap()
            .ends_with(":policy/dynalimit-fleet-acquire-only"),
        "{deployed}"
    );
    let before = parameters(&cfn, ours).await;
    assert_eq!(before["EnableTracing"], "true");
    assert_eq!(before["LambdaDurationThresholdMs"], "60000");

    // Stacks of neither tool, and zae-limiter's load generator: none is listed.
    let tag = |k: &str, v: &str| {
        aws_sdk_cloudformation::types::Tag::builder()
            .key(k)
            .value(v)
            .build()
    };
    for (name, tags) in [
        ("someone-elses", vec![tag("ManagedBy", "terraform")]),
        (
            "zae-load",
            vec![
                tag("ManagedBy", "zae-limiter"),
                tag("zae-limiter:type", "load-test"),
            ],
        ),
    ] {
        cfn.create_stack()
            .stack_name(name)
            .template_body("Resources:\n  Queue:\n    Type: AWS::SQS::Queue\n")
            .set_tags(Some(tags))
            .send()
            .await
            .expect("another stack");
    }

    // list: both tools' stacks, with their versions.
    let list = run(ours, &["list"]).json();
    let mine = listed(&list, ours);
    assert_eq!(mine["tool"], "dynalimit");
    assert_eq!(mine["version"], RELEASE);
    assert_eq!(mine["lambda_version"], version::COMPATIBILITY_VERSION);
    assert_eq!(mine["schema_version"], version::SCHEMA_VERSION);
    assert_eq!(mine["client_min_version"], "0.0.0");
    assert_eq!(mine["table"], ours);
    let theirs = listed(&list, zae);
    assert_eq!(theirs["tool"], "zae-limiter");
    assert_eq!(theirs["version"], "0.17.0", "its zae-limiter:version tag");
    assert_eq!(theirs["client_min_version"], Value::Null, "no record yet");
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");

    // check: compatible, exit 0.
    let report = run(ours, &["check"]).json();
    assert_eq!(report["result"], "compatible");
    assert_eq!(report["lambda_version"], version::COMPATIBILITY_VERSION);

    // upgrade with new code: the stack keeps its parameters, the function its new code.
    let binary = temp_file("fleet-bin-2", "#!/bin/sh\necho second\n");
    let upgraded = upgrade_with(&binary).json();
    assert_eq!(upgraded["code_updated"], true);
    assert_eq!(upgraded["dynalimit_version"], RELEASE);
    assert_eq!(upgraded["lambda_version"], version::COMPATIBILITY_VERSION);
    let after = parameters(&cfn, ours).await;
    let zip = dynalimit_tests_zip(&binary);
    assert_eq!(after["AggregatorCodeKey"], code_key(&zip));
    assert_ne!(after["AggregatorCodeKey"], before["AggregatorCodeKey"]);
    for kept in [
        "PolicyNameFormat",
        "EnableTracing",
        "LambdaTimeout",
        "LambdaDurationThresholdMs",
        "EnablePointInTimeRecovery",
    ] {
        assert_eq!(after[kept], before[kept], "{kept}");
    }

    // upgrade with nothing built: the template only, the code as it was. It is also the
    // second run after one whose answer was lost: the update already applied is found done.
    // zae-limiter's `--force` is accepted, and says it changes nothing.
    let template_only = run(ours, &["upgrade", "--poll-ms", "100", "--force"]);
    assert!(
        template_only.stderr.contains("left as it is"),
        "{}",
        template_only.stderr
    );
    assert!(
        template_only.stderr.contains("--force is always in effect"),
        "{}",
        template_only.stderr
    );
    assert_eq!(template_only.json()["code_updated"], false);
    assert_eq!(
        parameters(&cfn, ours).await["AggregatorCodeKey"],
        after["AggregatorCodeKey"]
    );

    // --lambda-only: the code alone; the stack's template, other parameters and tags stay
    // as they are. (That the update keeps the template, `UsePreviousTemplate`, is not shown
    // here: moto answers 500 to an update of this stack to another template.)
    let held = stack_as_held(&cfn, ours).await;
    let before_code = parameters(&cfn, ours).await;
    // Without code there is nothing to do: refused before any change.
    run(ours, &["upgrade", "--poll-ms", "100", "--lambda-only"]).fails(2, "--lambda-only");
    assert_eq!(stack_as_held(&cfn, ours).await, held);
    let third = temp_file("fleet-bin-3", "#!/bin/sh\necho third\n");
    let code_only = run(
        ours,
        &[
            "upgrade",
            "--poll-ms",
            "100",
            "--lambda-only",
            "--aggregator-binary",
            third.to_str().unwrap(),
        ],
    )
    .json();
    assert_eq!(code_only["code_updated"], true);
    assert_eq!(code_only["dynalimit_version"], RELEASE);
    let params = parameters(&cfn, ours).await;
    assert_eq!(
        params["AggregatorCodeKey"],
        code_key(&dynalimit_tests_zip(&third))
    );
    assert_ne!(
        params["AggregatorCodeKey"],
        before_code["AggregatorCodeKey"]
    );
    for (name, value) in &before_code {
        if name != "AggregatorCodeKey" {
            assert_eq!(&params[name], value, "{name}");
        }
    }
    let (template, tags, _) = stack_as_held(&cfn, ours).await;
    assert_eq!((template, tags), (held.0.clone(), held.1.clone()));

    // A newer client ratcheted the table: check says so (exit 1), upgrade refuses with the
    // stack and the record as they were.
    ratchet_to(&moto, ours, "99.0.0").await;
    let refused = run(ours, &["check"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let report: Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(report["result"], "incompatible");
    assert_eq!(report["client_min_version"], "99.0.0");
    let held = stack_as_held(&cfn, ours).await;
    let refused = upgrade_with(&binary);
    refused.fails(1, "99.0.0");
    assert!(refused.stdout.is_empty());
    assert_eq!(stack_as_held(&cfn, ours).await, held);
    assert_eq!(
        run(ours, &["list"]).json()[0]["client_min_version"],
        "99.0.0",
        "never lowered"
    );
    ratchet_to(&moto, ours, "0.0.0").await;

    run_json_on(moto.url(), ours, &["delete", "--yes", "--poll-ms", "100"]).json();
    moto.drop_retained_table(ours).await;
    assert_eq!(
        stack_status(&cfn, zae).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
}

/// The zip `--aggregator-binary FILE` makes of `binary`, read back from `lambda-export`.
fn dynalimit_tests_zip(binary: &Path) -> Vec<u8> {
    let out = temp_file("fleet-export.zip", "");
    std::fs::remove_file(&out).unwrap();
    let run = execute(command().args([
        "lambda-export",
        "--aggregator-binary",
        binary.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    std::fs::read(out).unwrap()
}
