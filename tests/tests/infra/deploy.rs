//! The stack on moto: create, update with aggregator code, delete (the table survives it); and
//! `Repository::open` provisioning a missing table through CloudFormation.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use dynalimit_repository::Repository;
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_stack::{self as stack, StackError, StackEvent, StackManager, StackOptions};
use dynalimit_tests::moto::MotoServer;
use dynalimit_tests::schema_mismatches;

/// The AWS settings of `endpoint` in us-east-1, as the CLI loads them.
async fn settings(endpoint: &str) -> SdkConfig {
    aws::load(
        &AwsSettings::new()
            .endpoint_url(Some(endpoint))
            .region(Some("us-east-1")),
    )
    .await
    .expect("settings")
}

async fn manager(moto: &MotoServer, name: &str) -> StackManager {
    StackManager::from_sdk_config(name, &settings(moto.url()).await)
        .poll_interval(Duration::from_millis(100))
}

async fn dynamodb(moto: &MotoServer) -> Client {
    Client::new(&settings(moto.url()).await)
}

async fn describe(
    client: &Client,
    table: &str,
) -> Option<aws_sdk_dynamodb::types::TableDescription> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => out.table,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            None
        }
        Err(e) => panic!("DescribeTable: {e:?}"),
    }
}

#[tokio::test]
async fn deploy_update_with_code_and_delete_cycle() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let name = "dynalimit-cycle";
    let m = manager(&moto, name).await;
    assert_eq!(m.status().await.unwrap(), None);

    // Create.
    let mut events: Vec<StackEvent> = Vec::new();
    let info = m
        .deploy(&StackOptions::default(), None, &mut |e| {
            events.push(e.clone())
        })
        .await
        .expect("create");
    assert_eq!(info.status, "CREATE_COMPLETE");
    assert_eq!(
        info.outputs.get("TableName").map(String::as_str),
        Some(name)
    );
    for output in [
        "TableArn",
        "StreamArn",
        "CodeBucketName",
        "AcquireOnlyPolicyArn",
    ] {
        assert!(info.outputs.contains_key(output), "{output}");
    }
    assert_eq!(info.parameters["AggregatorCodeKey"], "");
    // Both marks `delete` accepts: the template's output and the stack tag deploy sets.
    assert_eq!(info.outputs["Application"], "dynalimit");
    assert_eq!(info.tags["Application"], "dynalimit");
    // zae-limiter's key for the managing tool, with dynalimit's name.
    assert_eq!(info.tags["ManagedBy"], "dynalimit");
    assert!(info.is_dynalimit());
    assert!(
        info.id.as_deref().is_some_and(|id| id.contains(name)),
        "{info:?}"
    );
    // No code, no function: only the bucket the code goes to.
    for output in [
        "AggregatorFunctionArn",
        "AggregatorFunctionName",
        "AggregatorDLQArn",
    ] {
        assert!(!info.outputs.contains_key(output), "{output}");
    }
    // moto reports stack-level events only; AWS adds one per resource.
    assert!(
        events
            .iter()
            .any(|e| e.logical_id == name && e.status == "CREATE_COMPLETE"),
        "{events:?}"
    );
    let client = dynamodb(&moto).await;
    let table = describe(&client, name).await.expect("table exists");
    assert_eq!(schema_mismatches(&table), Vec::<String>::new());
    assert_eq!(moto.table_protection(name).await, Some(true));

    // Update: new options, the limits provisioner, and the aggregator code (which the
    // provisioner runs from), uploaded after the stack exists.
    // (Not the log retention: moto loses a log group whose properties change in an update.)
    let mut options = StackOptions::default();
    options.snapshot_retention_days = 30;
    options.lambda_memory_mb = 512;
    options.provisioner = true;
    let zip = b"PK\x05\x06 not really a zip, moto does not run it";
    let mut events = Vec::new();
    let info = m
        .deploy(&options, Some(zip), &mut |e| events.push(e.clone()))
        .await
        .expect("update");
    assert_eq!(info.status, "UPDATE_COMPLETE");
    assert_eq!(info.parameters["AggregatorCodeKey"], stack::code_key(zip));
    assert_eq!(info.parameters["SnapshotRetentionDays"], "30");
    assert_eq!(info.parameters["LambdaMemorySize"], "512");
    assert_eq!(info.parameters["EnableProvisioner"], "true");
    for output in [
        "AggregatorFunctionArn",
        "AggregatorDLQArn",
        "ProvisionerFunctionArn",
        "ProvisionerServiceToken",
        "ProvisionerFunctionName",
    ] {
        assert!(info.outputs.contains_key(output), "{output}");
    }
    // Named by CloudFormation, never the name zae-limiter's auto-update writes to.
    let provisioner = &info.outputs["ProvisionerFunctionName"];
    assert!(provisioner.starts_with(name), "{provisioner}");
    assert_ne!(provisioner, &format!("{name}-limits-provisioner"));
    assert!(
        info.outputs["ProvisionerServiceToken"].ends_with(&format!(":function:{provisioner}")),
        "{:?}",
        info.outputs
    );
    assert!(!events.is_empty());

    // A repository works on the deployed table.
    let repo = Repository::builder()
        .endpoint_url(moto.url())
        .region("us-east-1")
        .stack(name)
        .open()
        .await
        .expect("open on the deployed table");
    repo.ping().await.unwrap();
    assert!(repo.version_record().await.unwrap().is_some());

    // Delete: the stack goes, the table and its records stay, still protected.
    assert!(m.delete(&mut |_| {}).await.expect("delete"));
    assert_eq!(m.status().await.unwrap(), None);
    assert_eq!(moto.table_protection(name).await, Some(true));
    assert!(repo.version_record().await.unwrap().is_some());
    let refused = client.delete_table().table_name(name).send().await;
    assert!(refused.is_err(), "deletion protection refuses DeleteTable");
    assert!(
        !m.delete(&mut |_| {}).await.unwrap(),
        "second delete finds nothing"
    );
    // Dropped explicitly.
    moto.drop_retained_table(name).await;
    assert!(describe(&client, name).await.is_none());
}

#[tokio::test]
async fn a_kms_key_is_passed_through_and_a_versioned_code_bucket_is_emptied_on_delete() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let name = "dynalimit-kms";
    let key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let m = manager(&moto, name).await;
    let mut options = StackOptions::default();
    options.kms_key_arn = Some(key.to_owned());
    let zip = b"PK\x05\x06 moto does not run it";
    let info = m
        .deploy(&options, Some(zip), &mut |_| {})
        .await
        .expect("create with a key and the code");
    assert_eq!(info.parameters["KmsKeyArn"], key);
    assert!(info.outputs.contains_key("AggregatorFunctionArn"));
    let table = describe(&dynamodb(&moto).await, name).await.unwrap();
    assert_eq!(schema_mismatches(&table), Vec::<String>::new());

    assert!(info.outputs.contains_key("TableKeyPolicyArn"));
    // (moto cannot update a table's encryption in place, so the key is not taken away here.)

    // On AWS the template turns versioning on (moto ignores that property, so it is set
    // here): a replaced and a deleted object leave old versions and a delete marker, which
    // the stack's deletion removes too, or the bucket would outlive the stack.
    let bucket = info.outputs["CodeBucketName"].clone();
    let config = settings(moto.url()).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .force_path_style(true)
            .build(),
    );
    s3.put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("versioning on");
    for body in [&b"first"[..], &b"second"[..]] {
        s3.put_object()
            .bucket(&bucket)
            .key("aggregator/replaced.zip")
            .body(body.to_vec().into())
            .send()
            .await
            .expect("put");
    }
    s3.delete_object()
        .bucket(&bucket)
        .key("aggregator/replaced.zip")
        .send()
        .await
        .expect("delete marker");
    let versions = s3
        .list_object_versions()
        .bucket(&bucket)
        .send()
        .await
        .expect("versions");
    assert!(versions.versions().len() >= 2 && !versions.delete_markers().is_empty());

    assert!(m.delete(&mut |_| {}).await.expect("delete"));
    assert_eq!(m.status().await.unwrap(), None);
    let gone = s3.head_bucket().bucket(&bucket).send().await;
    assert!(gone.is_err(), "the code bucket was deleted with the stack");
    moto.drop_retained_table(name).await;
}

#[tokio::test]
async fn repository_open_provisions_a_missing_table_through_the_stack() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let name = "dynalimit-provisioned";
    // Settings that point at moto without an endpoint override: `open` then behaves as on AWS.
    let config = settings(moto.url()).await;
    let repo = Repository::builder()
        .sdk_config(config)
        .stack(name)
        .namespace("tenant-a")
        .open()
        .await
        .expect("open provisions");
    repo.ping().await.unwrap();
    let info = manager(&moto, name)
        .await
        .status()
        .await
        .unwrap()
        .expect("the stack was created");
    assert_eq!(info.status, "CREATE_COMPLETE");
    assert_eq!(info.parameters["EnableAggregator"], "false");
    // The safe defaults apply to a provisioned table too.
    assert_eq!(info.parameters["EnableDeletionProtection"], "true");
    assert_eq!(info.parameters["EnablePointInTimeRecovery"], "true");
    let table = describe(&dynamodb(&moto).await, name).await.unwrap();
    assert_eq!(schema_mismatches(&table), Vec::<String>::new());
    assert_eq!(moto.table_protection(name).await, Some(true));

    // Deleting its stack keeps the table; it is dropped explicitly.
    assert!(
        manager(&moto, name)
            .await
            .delete(&mut |_| {})
            .await
            .unwrap()
    );
    repo.ping().await.unwrap();
    moto.drop_retained_table(name).await;
    assert_eq!(moto.table_protection(name).await, None);
}

#[tokio::test]
async fn bad_options_are_refused_before_any_request() {
    // No server at all: validation must fail first.
    let m = StackManager::from_sdk_config("dynalimit-bad", &settings("http://127.0.0.1:9").await);
    let mut options = StackOptions::default();
    options.lambda_timeout_seconds = 0;
    let err = m.deploy(&options, None, &mut |_| {}).await.unwrap_err();
    assert!(matches!(err, StackError::Validation(_)), "{err}");
    let mut options = StackOptions::default();
    options.aggregator = false;
    let err = m
        .deploy(&options, Some(b"zip"), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, StackError::Validation(_)), "{err}");
}

#[tokio::test]
async fn locked_down_account_options_reach_the_deployed_resources() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let name = "dynalimit-locked";
    let m = manager(&moto, name).await;
    let mut options = StackOptions::default();
    options.policy_name_format = Some(format!("{name}-{{}}"));
    options.tracing = true;
    options.lambda_timeout_seconds = 120;
    options.duration_alarm_percent = 50;
    let zip = b"PK\x05\x06 not really a zip, moto does not run it";
    let info = m
        .deploy(&options, Some(zip), &mut |_| {})
        .await
        .expect("deploy");
    assert_eq!(info.parameters["PolicyNameFormat"], format!("{name}-{{}}"));
    assert_eq!(info.parameters["EnableTracing"], "true");
    assert_eq!(info.parameters["LambdaDurationThresholdMs"], "60000");
    assert_eq!(info.parameters["AggregatorRoleArn"], "");

    // What CloudFormation created: the policies under the format's names.
    let cfn = aws_sdk_cloudformation::Client::new(&settings(moto.url()).await);
    let resources = cfn
        .describe_stack_resources()
        .stack_name(name)
        .send()
        .await
        .expect("DescribeStackResources");
    let physical = |logical: &str| {
        resources
            .stack_resources()
            .iter()
            .find(|r| r.logical_resource_id() == Some(logical))
            .and_then(|r| r.physical_resource_id())
            .unwrap_or_else(|| {
                let ids: Vec<_> = resources
                    .stack_resources()
                    .iter()
                    .map(|r| (r.logical_resource_id(), r.physical_resource_id()))
                    .collect();
                panic!("no {logical} in {ids:?}")
            })
            .to_owned()
    };
    for (logical, own) in [
        ("AcquireOnlyPolicy", "acquire-only"),
        ("FullAccessPolicy", "full-access"),
        ("NamespaceReadOnlyPolicy", "namespace-read-only"),
    ] {
        assert!(
            physical(logical).ends_with(&format!(":policy/{name}-{own}")),
            "{logical}: {}",
            physical(logical)
        );
        assert_eq!(
            info.outputs[&format!("{logical}Arn")],
            physical(logical),
            "{logical}"
        );
    }
    // moto names no alarm or function setting in its resources: the template tests show the
    // duration alarm and the tracing mode; here the parameters that set them.
    assert!(info.outputs.contains_key("AggregatorFunctionArn"));
    assert!(physical("AggregatorRole").starts_with(name));

    assert!(m.delete(&mut |_| {}).await.expect("delete"));
    moto.drop_retained_table(name).await;
}
