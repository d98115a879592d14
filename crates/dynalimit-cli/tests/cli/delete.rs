//! `delete` acts only on what it proved is dynalimit's: a zae-limiter stack of the same name,
//! a refused `DescribeStacks` and an endpoint that is not loopback leave every table where it
//! is; a dynalimit stack goes, and the report says what was read back. On moto.

use aws_sdk_cloudformation::types::{Capability, Tag};
use dynalimit_tests::moto::MotoServer;

use crate::{run_env, run_json_on};

/// zae-limiter 0.17's own template, read from the package `DYNALIMIT_PYTHON` imports; `None`
/// (after printing why) when no interpreter is configured outside CI.
fn zae_template() -> Option<String> {
    let Some(python) = std::env::var_os("DYNALIMIT_PYTHON").filter(|p| !p.is_empty()) else {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "DYNALIMIT_PYTHON is not set: this test reads zae-limiter's template"
        );
        eprintln!("skipped: DYNALIMIT_PYTHON is not set");
        return None;
    };
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import pathlib, zae_limiter.infra as i; \
             print(pathlib.Path(i.__file__).parent / 'cfn_template.yaml')",
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8(out.stdout).unwrap();
    Some(std::fs::read_to_string(path.trim()).expect("zae-limiter's template"))
}

/// The blocks of a YAML section whose keys are indented by two spaces, by key.
fn blocks(section: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in section.lines() {
        let key = line
            .strip_prefix("  ")
            .filter(|l| !l.starts_with([' ', '#']))
            .and_then(|l| l.strip_suffix(':'));
        match key {
            Some(key) => out.push((key.to_owned(), format!("{line}\n"))),
            None => {
                if let Some((_, block)) = out.last_mut() {
                    block.push_str(line);
                    block.push('\n');
                }
            }
        }
    }
    out
}

/// zae-limiter's template cut to what moto deploys: its parameters and conditions, its table
/// resource (no `DeletionPolicy`, deletion protection off by default) and the table's outputs,
/// all verbatim. moto cannot deploy the whole template (an output's `GetAtt` of a conditional
/// function).
fn zae_table_template(full: &str) -> String {
    let mut sections: Vec<(&str, String)> = Vec::new();
    for line in full.lines() {
        if !line.starts_with([' ', '#']) && line.ends_with(':') {
            sections.push((line.trim_end_matches(':'), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    let section = |name: &str| {
        sections
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| panic!("zae-limiter's template has no {name}"))
    };
    let pick = |name: &str, keys: &[&str]| -> String {
        let chosen: String = blocks(&section(name))
            .into_iter()
            .filter(|(k, _)| keys.contains(&k.as_str()))
            .map(|(_, b)| b)
            .collect();
        assert!(!chosen.is_empty(), "{name}: {keys:?}");
        format!("{name}:\n{chosen}")
    };
    format!(
        "AWSTemplateFormatVersion: \"2010-09-09\"\nParameters:\n{}Conditions:\n{}{}{}",
        section("Parameters"),
        section("Conditions"),
        pick("Resources", &["RateLimitsTable"]),
        pick("Outputs", &["TableName", "TableArn", "StreamArn"]),
    )
}

pub(crate) async fn cloudformation(moto: &MotoServer) -> aws_sdk_cloudformation::Client {
    aws_sdk_cloudformation::Client::new(&moto.sdk_config().await)
}

pub(crate) async fn stack_status(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
) -> Option<String> {
    match cfn.describe_stacks().stack_name(name).send().await {
        Ok(out) => out
            .stacks()
            .first()
            .and_then(|s| s.stack_status())
            .map(|s| s.as_str().to_owned())
            .filter(|s| s != "DELETE_COMPLETE"),
        Err(e) if format!("{e:?}").contains("does not exist") => None,
        Err(e) => panic!("DescribeStacks: {e:?}"),
    }
}

/// A moto server holding stack `stack` as zae-limiter 0.17 deploys it (its own template, cut
/// by [`zae_table_template`], and its tags), and a CloudFormation client of it; `None` (after
/// saying why) without moto or zae-limiter.
pub(crate) async fn zae_stack(stack: &str) -> Option<(MotoServer, aws_sdk_cloudformation::Client)> {
    let full = zae_template()?;
    let moto = MotoServer::start()?;
    let cfn = cloudformation(&moto).await;
    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
    cfn.create_stack()
        .stack_name(stack)
        .template_body(zae_table_template(&full))
        .capabilities(Capability::CapabilityNamedIam)
        .tags(tag("ManagedBy", "zae-limiter"))
        .tags(tag("zae-limiter:name", stack))
        .tags(tag("zae-limiter:type", "limiter"))
        .tags(tag("zae-limiter:version", "0.17.0"))
        .send()
        .await
        .expect("the zae-limiter stack");
    Some((moto, cfn))
}

#[tokio::test]
async fn a_zae_limiter_stack_of_the_same_name_is_refused_and_keeps_its_table() {
    let stack = "zae-shared-name";
    let Some((moto, cfn)) = zae_stack(stack).await else {
        return;
    };
    assert_eq!(
        stack_status(&cfn, stack).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
    assert_eq!(
        moto.table_protection(stack).await,
        Some(false),
        "unprotected"
    );
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    run(&["entity", "create", "key-1"]).json();

    let refused = run(&["delete", "--yes", "--poll-ms", "100"]);
    refused.fails(1, "not a dynalimit stack");
    assert!(
        refused.stderr.contains("ManagedBy=zae-limiter"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "nothing reported as deleted");

    assert_eq!(
        stack_status(&cfn, stack).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
    assert_eq!(moto.table_protection(stack).await, Some(false));
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");
}

#[tokio::test]
async fn a_stack_made_from_the_template_without_deploy_is_ours_by_its_output() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "template-only";
    let cfn = cloudformation(&moto).await;
    cfn.create_stack()
        .stack_name(stack)
        .template_body(dynalimit_stack::TEMPLATE)
        .capabilities(Capability::CapabilityNamedIam)
        .send()
        .await
        .expect("the stack, with no tags");
    let deleted = run_json_on(moto.url(), stack, &["delete", "--yes", "--poll-ms", "100"]).json();
    assert_eq!(deleted["status"], "DELETE_COMPLETE");
    assert_eq!(stack_status(&cfn, stack).await, None);
    // What the report says is what is there.
    assert_eq!(deleted["table_status"], "ACTIVE");
    let protected = moto.table_protection(stack).await;
    assert_eq!(deleted["deletion_protection"].as_bool(), protected);
    assert_eq!(protected, Some(true));
    moto.drop_retained_table(stack).await;
}

#[tokio::test]
async fn a_refused_describe_stacks_is_an_error_and_the_table_stays() {
    let Some((moto, (id, secret))) = MotoServer::start_denying(&["cloudformation:DescribeStacks"])
    else {
        return;
    };
    let stack = "denied";
    let env = [
        ("AWS_ACCESS_KEY_ID", id.as_str()),
        ("AWS_SECRET_ACCESS_KEY", secret.as_str()),
    ];
    let target = ["--endpoint-url", moto.url(), "--stack", stack];
    let run = |args: &[&str]| run_env(&env, &[&target[..], args, &["--output", "json"]].concat());
    run(&["entity", "create", "key-1"]).json();

    let refused = run(&["delete", "--yes", "--poll-ms", "100"]);
    refused.fails(3, "permission denied during DescribeStacks");
    assert!(refused.stdout.is_empty());
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");
    // `status` does not report a stack it could not read as missing either.
    run(&["status"]).fails(3, "permission denied during DescribeStacks");
}

#[tokio::test]
async fn an_endpoint_that_is_not_loopback_never_loses_a_table() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "elsewhere";
    run_json_on(moto.url(), stack, &["entity", "create", "key-1"]).json();
    // The same server through an IPv4-mapped IPv6 address: it reaches moto, but it is none of
    // localhost, 127.0.0.0/8 or [::1], so delete treats it as a remote endpoint.
    let port = moto.url().rsplit(':').next().unwrap();
    let remote = format!("http://[::ffff:127.0.0.1]:{port}");
    let env = [
        ("AWS_ACCESS_KEY_ID", "remote"),
        ("AWS_SECRET_ACCESS_KEY", "remote"),
        ("AWS_REGION", "us-east-1"),
    ];
    let refused = run_env(
        &env,
        &[
            "--endpoint-url",
            &remote,
            "--stack",
            stack,
            "delete",
            "--yes",
        ],
    );
    refused.fails(1, "was not deleted");
    assert!(
        moto.table_protection(stack).await.is_some(),
        "the table is there"
    );
    let again = run_json_on(moto.url(), stack, &["entity", "get", "key-1"]).json();
    assert_eq!(again["id"], "key-1");

    // Through the loopback address, the table of an emulator without a stack is dropped,
    // and the report says so from what it read back.
    let deleted = run_json_on(moto.url(), stack, &["delete", "--yes"]).json();
    assert_eq!(deleted["status"], "TABLE_DELETED");
    assert_eq!(moto.table_protection(stack).await, None);
    assert!(
        deleted["table_status"] == "MISSING" || deleted["table_status"] == "DELETING",
        "{deleted}"
    );
}
