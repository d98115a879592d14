//! `deploy` updates only a stack it proved is dynalimit's: a zae-limiter stack of the same
//! name is refused and left as it is (template, tags, table); a stack an older dynalimit
//! template made, marked by the stack tag alone, is updated. On moto.

use aws_sdk_cloudformation::types::{Capability, Parameter, Tag};
use dynalimit_tests::moto::MotoServer;

use crate::delete::{cloudformation, stack_status, zae_stack};
use crate::run_json_on;

/// What CloudFormation holds for a stack: its template, tags and outputs.
pub(crate) async fn stack_as_held(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
) -> (String, Vec<(String, String)>, Vec<(String, String)>) {
    let template = cfn
        .get_template()
        .stack_name(name)
        .send()
        .await
        .expect("GetTemplate")
        .template_body
        .unwrap_or_default();
    let described = cfn
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .expect("DescribeStacks");
    let stack = described.stacks().first().expect("the stack");
    let mut tags: Vec<(String, String)> = stack
        .tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_owned(),
                t.value().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    tags.sort();
    let mut outputs: Vec<(String, String)> = stack
        .outputs()
        .iter()
        .map(|o| {
            (
                o.output_key().unwrap_or_default().to_owned(),
                o.output_value().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    outputs.sort();
    (template, tags, outputs)
}

#[tokio::test]
async fn deploy_refuses_a_zae_limiter_stack_of_the_same_name_and_changes_nothing() {
    let stack = "zae-deploy-target";
    let Some((moto, cfn)) = zae_stack(stack).await else {
        return;
    };
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    run(&["entity", "create", "key-1"]).json();
    let held = stack_as_held(&cfn, stack).await;
    assert!(
        !held.2.iter().any(|(k, _)| k == "Application"),
        "zae-limiter's template has no mark: {:?}",
        held.2
    );
    let status = run(&["status"]).json();

    let refused = run(&["deploy", "--no-aggregator", "--poll-ms", "100"]);
    refused.fails(1, "not a dynalimit stack");
    assert!(
        refused.stderr.contains("ManagedBy=zae-limiter"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "nothing reported as deployed");

    // The stack, its table and the table's items are as they were.
    assert_eq!(stack_as_held(&cfn, stack).await, held);
    assert_eq!(
        stack_status(&cfn, stack).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
    assert_eq!(run(&["status"]).json(), status, "no version record written");
    assert_eq!(moto.table_protection(stack).await, Some(false));
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");
}

/// dynalimit's template as an older release shipped it: without the `Application` output.
fn template_without_the_output() -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in dynalimit_stack::TEMPLATE.lines() {
        if line == "  Application:" {
            skipping = true;
            continue;
        }
        if skipping && line.starts_with("    ") {
            continue;
        }
        skipping = false;
        out.push_str(line);
        out.push('\n');
    }
    let cut = dynalimit_stack::TEMPLATE.len() - out.len();
    assert!(
        (1..300).contains(&cut),
        "only the output is cut: {cut} bytes"
    );
    out
}

#[tokio::test]
async fn deploy_updates_a_stack_of_an_older_template_marked_by_its_tag() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "older-dynalimit";
    let cfn = cloudformation(&moto).await;
    // As `deploy --no-aggregator` made it then (moto does not describe a stack whose update
    // removed the code bucket of a stack made with the defaults).
    let mut options = dynalimit_stack::StackOptions::default();
    options.aggregator = false;
    let parameters = options
        .parameters()
        .into_iter()
        .chain([("AggregatorCodeKey", String::new())])
        .map(|(k, v)| {
            Parameter::builder()
                .parameter_key(k)
                .parameter_value(v)
                .build()
        });
    cfn.create_stack()
        .stack_name(stack)
        .template_body(template_without_the_output())
        .set_parameters(Some(parameters.collect()))
        .capabilities(Capability::CapabilityNamedIam)
        .tags(
            Tag::builder()
                .key(dynalimit_stack::MARK_KEY)
                .value(dynalimit_stack::MARK_VALUE)
                .build(),
        )
        .send()
        .await
        .expect("the older stack");
    let (_, _, outputs) = stack_as_held(&cfn, stack).await;
    assert!(!outputs.iter().any(|(k, _)| k == "Application"));

    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    let deployed = run(&["deploy", "--no-aggregator", "--poll-ms", "100"]).json();
    assert_eq!(deployed["status"], "UPDATE_COMPLETE");
    let (_, _, outputs) = stack_as_held(&cfn, stack).await;
    assert!(
        outputs.contains(&("Application".to_owned(), "dynalimit".to_owned())),
        "the update brought the output: {outputs:?}"
    );
    run(&["delete", "--yes", "--poll-ms", "100"]).json();
    moto.drop_retained_table(stack).await;
}

#[tokio::test]
async fn upgrade_refuses_a_zae_limiter_stack_of_the_same_name_and_changes_nothing() {
    let stack = "zae-upgrade-target";
    let Some((moto, cfn)) = zae_stack(stack).await else {
        return;
    };
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    run(&["entity", "create", "key-1"]).json();
    let held = stack_as_held(&cfn, stack).await;
    let status = run(&["status"]).json();

    let binary = crate::temp_file("upgrade-bin", "#!/bin/sh\n");
    for extra in [
        &[][..],
        &["--aggregator-binary", binary.to_str().unwrap()][..],
    ] {
        let refused = run(&[&["upgrade", "--poll-ms", "100"][..], extra].concat());
        refused.fails(1, "not a dynalimit stack");
        assert!(
            refused.stderr.contains("ManagedBy=zae-limiter"),
            "{}",
            refused.stderr
        );
        assert!(refused.stdout.is_empty(), "nothing reported as upgraded");
    }

    // The stack, its table, its items and its version record are as they were.
    assert_eq!(stack_as_held(&cfn, stack).await, held);
    assert_eq!(
        stack_status(&cfn, stack).await.as_deref(),
        Some("CREATE_COMPLETE")
    );
    assert_eq!(run(&["status"]).json(), status, "no version record written");
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");
    // check reads it without changing anything: the record the entity's write created.
    assert_eq!(run(&["check"]).json()["result"], "compatible");
    assert_eq!(run(&["status"]).json(), status);
}
