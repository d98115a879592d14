//! deploy, status, delete and template; the stack commands run against a private moto server.

use std::path::{Path, PathBuf};

use dynalimit_stack::{TEMPLATE, code_key};
use dynalimit_tests::moto::MotoServer;

use crate::{Run, command, execute, run_env, run_json_on, run_on, temp_file};

#[tokio::test]
async fn deploy_status_delete_cycle_on_moto() {
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
    assert!(
        !updated.stdout.contains('\r') && !updated.stderr.contains('\r'),
        "progress into a pipe is lines, not frames: {updated:?}"
    );
    let updated = updated.json();
    assert_eq!(updated["status"], "UPDATE_COMPLETE");
    assert!(updated["AggregatorFunctionArn"].is_string(), "{updated}");

    let status = run(&["status"]).json();
    assert_eq!(status["status"], "UPDATE_COMPLETE");
    assert_eq!(status["table_status"], "ACTIVE");
    assert_eq!(
        status["lambda_version"],
        dynalimit_format::version::COMPATIBILITY_VERSION
    );
    let zip = std::fs::read(&binary).map(|b| code_key(&b)).unwrap();
    assert!(zip.starts_with("aggregator/"));

    // The deployed table serves the data plane.
    run(&["entity", "create", "key-1"]).json();
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");

    run(&["delete"]).fails(1, "--yes");
    let deleted = run(&["delete", "--yes", "--poll-ms", "100"]);
    assert!(
        deleted
            .stderr
            .contains(&format!("aws dynamodb delete-table --table-name {stack}")),
        "says how to drop the table: {}",
        deleted.stderr
    );
    let deleted = deleted.json();
    assert_eq!(deleted["status"], "DELETE_COMPLETE");
    // Read back: the retained table, still protected.
    assert_eq!(deleted["table_status"], "ACTIVE");
    assert_eq!(deleted["deletion_protection"], true);

    // The stack is gone; the table and its data stay, protected against deletion.
    let status = run(&["status"]).json();
    assert!(status["status"].as_str().unwrap().starts_with("NO_STACK"));
    assert_eq!(status["table_status"], "ACTIVE");
    assert_eq!(run(&["entity", "get", "key-1"]).json()["id"], "key-1");
    run(&["delete", "--yes"]).fails(3, "DeleteTable");
    assert_eq!(moto.table_protection(stack).await, Some(true));

    moto.drop_retained_table(stack).await;
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
    let run = run_on(
        "http://127.0.0.1:9",
        "x",
        &["deploy", "--kms-key", "alias/dynalimit"],
    );
    run.fails(2, "kms key");
    for (args, needle) in [
        (
            &["--policy-name-format", "team/{}"][..],
            "policy name format",
        ),
        (
            &["--aggregator-role-arn", "my-role"][..],
            "aggregator role ARN",
        ),
        (
            &["--duration-alarm-percent", "0"][..],
            "duration alarm percent",
        ),
        (
            &["--lambda-duration-threshold-pct", "101"][..],
            "duration alarm percent",
        ),
    ] {
        run_on("http://127.0.0.1:9", "x", &[&["deploy"][..], args].concat()).fails(2, needle);
    }
    let zip = temp_file("not.zip", "plain text");
    let run = run_on(
        "http://127.0.0.1:9",
        "x",
        &["deploy", "--aggregator-zip", zip.to_str().unwrap()],
    );
    run.fails(1, "not a zip");
    // --no-iam creates no role: code for an aggregator without one, or a provisioner
    // without one, is refused.
    let binary = temp_file("no-iam-bin", "#!/bin/sh\n");
    let binary = binary.to_str().unwrap();
    for (args, needle) in [
        (
            &["--no-iam", "--aggregator-binary", binary][..],
            "no role for the aggregator",
        ),
        (
            &["--no-iam", "--provisioner"][..],
            "no role for the provisioner",
        ),
    ] {
        run_on("http://127.0.0.1:9", "x", &[&["deploy"][..], args].concat()).fails(2, needle);
    }
}

/// The IAM resources of `stack`, by type.
async fn iam_resources(moto: &MotoServer, stack: &str) -> Vec<String> {
    let cfn = crate::delete::cloudformation(moto).await;
    let listed = cfn
        .list_stack_resources()
        .stack_name(stack)
        .send()
        .await
        .expect("ListStackResources");
    listed
        .stack_resource_summaries()
        .iter()
        .filter_map(|r| r.resource_type())
        .filter(|t| t.starts_with("AWS::IAM::"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn no_iam_creates_no_iam_resource_and_leaves_the_aggregator_out_without_a_role() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "dynalimit-no-iam";
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    // As zae-limiter does: no role, no aggregator, and a note saying so.
    let deployed = run(&["deploy", "--poll-ms", "100", "--no-iam"]);
    assert!(
        deployed
            .stderr
            .contains("--no-iam leaves the usage aggregator out"),
        "{}",
        deployed.stderr
    );
    let deployed = deployed.json();
    assert!(
        deployed.get("AggregatorFunctionArn").is_none(),
        "{deployed}"
    );
    assert_eq!(iam_resources(&moto, stack).await, Vec::<String>::new());
    // With a role of its own (made here by another stack, as a team's IAM pipeline would),
    // the aggregator is deployed, and still no IAM resource.
    let cfn = crate::delete::cloudformation(&moto).await;
    cfn.create_stack()
        .stack_name("team-roles")
        .template_body(
            "Resources:\n  Role:\n    Type: AWS::IAM::Role\n    Properties:\n      \
             RoleName: limits-aggregator\n      AssumeRolePolicyDocument:\n        \
             Version: '2012-10-17'\n        Statement:\n          - Effect: Allow\n            \
             Principal: {Service: lambda.amazonaws.com}\n            Action: sts:AssumeRole\n",
        )
        .capabilities(aws_sdk_cloudformation::types::Capability::CapabilityNamedIam)
        .send()
        .await
        .expect("the team's role");
    let binary = temp_file("no-iam-agg", "#!/bin/sh\necho aggregator\n");
    let with_role = run(&[
        "deploy",
        "--poll-ms",
        "100",
        "--no-iam",
        "--aggregator-role-arn",
        "arn:aws:iam::123456789012:role/limits-aggregator",
        "--aggregator-binary",
        binary.to_str().unwrap(),
    ]);
    assert!(!with_role.stderr.contains("leaves the usage aggregator out"));
    let with_role = with_role.json();
    assert!(
        with_role["AggregatorFunctionArn"].is_string(),
        "{with_role}"
    );
    assert_eq!(iam_resources(&moto, stack).await, Vec::<String>::new());
    run(&["delete", "--yes", "--poll-ms", "100"]).json();
    moto.drop_retained_table(stack).await;
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
    // zae-limiter's name for it.
    let run = run_env(&[], &["cfn-template"]);
    assert_eq!((run.code, run.stdout.as_str()), (0, TEMPLATE));
}

#[test]
fn lambda_export_writes_the_package_deploy_uploads() {
    let binary = temp_file("export-bin", "#!/bin/sh\necho aggregator\n");
    let out = temp_file("export.zip", "");
    std::fs::remove_file(&out).unwrap();
    let out_s = out.to_str().unwrap();
    let bin_s = binary.to_str().unwrap();
    let export = |extra: &[&str]| {
        run_env(
            &[],
            &[
                &["lambda-export", "--aggregator-binary", bin_s, "-o", out_s][..],
                extra,
                &["--output", "json"],
            ]
            .concat(),
        )
    };
    let info = export(&["--info"]).json();
    assert_eq!(info["written"], false);
    assert!(!out.exists(), "--info writes nothing");
    let written = export(&[]).json();
    assert_eq!(written["written"], true);
    let zip = std::fs::read(&out).unwrap();
    assert_eq!(written["bytes"], zip.len());
    assert_eq!(written["code_key"], code_key(&zip));
    assert_eq!(info["code_key"], written["code_key"], "the same package");
    assert_eq!(written["source"], bin_s);
    // The archive holds the binary as its bootstrap.
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    let mut entry = archive.by_name("bootstrap").unwrap();
    let mut content = String::new();
    std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
    assert_eq!(content, "#!/bin/sh\necho aggregator\n");
    drop(entry);

    // An existing file is kept unless --force.
    std::fs::write(&out, b"keep me").unwrap();
    export(&[]).fails(2, "--force");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    assert_eq!(export(&["--force"]).json()["written"], true);

    // Nothing given and nothing built: says what to run.
    let dir = out.parent().unwrap().join("nothing-built");
    std::fs::create_dir_all(&dir).unwrap();
    let missing =
        execute(
            command()
                .current_dir(&dir)
                .args(["lambda-export", "--architecture", "x86_64"]),
        );
    missing.fails(1, "scripts/build-lambda --arch x86_64");
    assert!(!dir.join("aggregator.zip").exists());
}

/// Runs `dynalimit ARGS --output json` in directory `dir` against moto.
fn run_in(dir: &Path, moto: &MotoServer, stack: &str, args: &[&str]) -> Run {
    execute(
        command()
            .current_dir(dir)
            .args([
                "--endpoint-url",
                moto.url(),
                "--stack",
                stack,
                "--output",
                "json",
            ])
            .args(args),
    )
}

/// Where `scripts/build-lambda --print-path` says the zip goes.
fn build_lambda_zip_path() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-lambda");
    let out = std::process::Command::new(script)
        .arg("--print-path")
        .output()
        .expect("scripts/build-lambda runs");
    assert!(out.status.success());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[tokio::test]
async fn deploy_finds_the_zip_of_build_lambda_or_says_what_to_run() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let dir = temp_file("placeholder", "").parent().unwrap().to_path_buf();
    let stack = "dynalimit-built";

    // Nothing built: the stack has no function (and no placeholder), and the note says what
    // to run.
    let first = run_in(&dir, &moto, stack, &["deploy", "--poll-ms", "100"]);
    assert!(
        first.stderr.contains("scripts/build-lambda --arch arm64"),
        "{}",
        first.stderr
    );
    let zip = build_lambda_zip_path();
    assert!(
        first.stderr.contains(&zip.display().to_string()),
        "{}",
        first.stderr
    );
    let first = first.json();
    assert_eq!(first["status"], "CREATE_COMPLETE");
    assert!(first["CodeBucketName"].is_string(), "{first}");
    assert!(first.get("AggregatorFunctionArn").is_none(), "{first}");

    // Built where scripts/build-lambda writes it: packaged and deployed.
    std::fs::create_dir_all(dir.join(&zip).parent().unwrap()).unwrap();
    std::fs::write(dir.join(&zip), b"PK\x05\x06 moto does not run it").unwrap();
    let second = run_in(&dir, &moto, stack, &["deploy", "--poll-ms", "100"]);
    assert!(
        second
            .stderr
            .contains(&format!("packaging the aggregator from {}", zip.display())),
        "{}",
        second.stderr
    );
    assert!(!second.stderr.contains("build-lambda"), "{}", second.stderr);
    let second = second.json();
    assert_eq!(second["status"], "UPDATE_COMPLETE", "switched to the code");
    assert!(second["AggregatorFunctionArn"].is_string(), "{second}");
    let status = run_json_on(moto.url(), stack, &["status"]).json();
    assert_eq!(
        status["lambda_version"],
        dynalimit_format::version::COMPATIBILITY_VERSION
    );

    // Nothing protected is left behind.
    run_json_on(moto.url(), stack, &["delete", "--yes", "--poll-ms", "100"]).json();
    moto.drop_retained_table(stack).await;
    assert_eq!(moto.table_protection(stack).await, None);
}

/// Whether `stderr` holds a stack event line of a wait (`  2026-…Z STATUS …`).
fn shows_events(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.starts_with("  20") && l.contains("AWS::CloudFormation::Stack"))
}

#[tokio::test]
async fn deploy_and_delete_without_waiting_return_once_accepted() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "dynalimit-no-wait";
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    let binary = temp_file("no-wait-bin", "#!/bin/sh\necho aggregator\n");
    let binary = binary.to_str().unwrap();
    // Accepted, not waited for: no events, no code, no version record yet.
    let accepted = run(&[
        "deploy",
        "--poll-ms",
        "100",
        "--no-wait",
        "--aggregator-binary",
        binary,
    ]);
    assert!(
        accepted.stderr.contains("not waited for"),
        "{}",
        accepted.stderr
    );
    assert!(!shows_events(&accepted.stderr), "{}", accepted.stderr);
    let accepted = accepted.json();
    assert!(accepted["status"].is_string(), "{accepted}");
    let cfn = crate::delete::cloudformation(&moto).await;
    let key = |cfn: aws_sdk_cloudformation::Client| async move {
        let described = cfn
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .unwrap();
        described.stacks()[0]
            .parameters()
            .iter()
            .find(|p| p.parameter_key() == Some("AggregatorCodeKey"))
            .and_then(|p| p.parameter_value().map(str::to_owned))
    };
    assert_eq!(
        key(cfn.clone()).await.as_deref(),
        Some(""),
        "no code uploaded"
    );
    let unrecorded = run(&["check"]);
    assert_eq!(unrecorded.code, 1, "{}", unrecorded.stderr);
    assert!(
        unrecorded.stdout.contains("not_initialized"),
        "{}",
        unrecorded.stdout
    );
    // A deploy that waits brings the code and the version record.
    let done = run(&["deploy", "--poll-ms", "100", "--aggregator-binary", binary]);
    assert!(shows_events(&done.stderr), "it waits: {}", done.stderr);
    let done = done.json();
    assert!(done["AggregatorFunctionArn"].is_string(), "{done}");
    assert_ne!(key(cfn.clone()).await.as_deref(), Some(""));
    assert_eq!(run(&["check"]).json()["result"], "compatible");
    // Deletion accepted, not waited for.
    let deleted = run(&["delete", "--yes", "--no-wait", "--poll-ms", "100"]);
    assert!(
        deleted.stderr.contains("not waited for"),
        "{}",
        deleted.stderr
    );
    assert!(!shows_events(&deleted.stderr), "{}", deleted.stderr);
    assert!(
        deleted.json()["status"]
            .as_str()
            .unwrap()
            .starts_with("DELETE_")
    );
    moto.drop_retained_table(stack).await;
}

#[tokio::test]
async fn the_audit_archive_is_deployed_kept_and_read_by_audit() {
    let Some(moto) = MotoServer::start() else {
        return;
    };
    let stack = "dynalimit-archive";
    let run = |args: &[&str]| run_json_on(moto.url(), stack, args);
    // Refused before any request.
    for (args, needle) in [
        (
            &["--audit-retention-days", "0"][..],
            "--audit-retention-days",
        ),
        (
            &[
                "--enable-audit-archival",
                "--audit-archive-glacier-days",
                "3651",
            ][..],
            "audit archive glacier days",
        ),
    ] {
        run_on("http://127.0.0.1:9", "x", &[&["deploy"][..], args].concat()).fails(2, needle);
    }

    // A stack without the archive: audit --archive says how to get one.
    run(&["deploy", "--poll-ms", "100", "--no-aggregator"]).json();
    run(&["audit", "-e", "key-1", "--archive"]).fails(1, "--enable-audit-archival");

    let binary = temp_file("archive-bin", "#!/bin/sh\necho aggregator\n");
    let deployed = run(&[
        "deploy",
        "--poll-ms",
        "100",
        "--aggregator-binary",
        binary.to_str().unwrap(),
        "--enable-audit-archival",
        "--audit-archive-glacier-days",
        "30",
        "--audit-retention-days",
        "7",
    ])
    .json();
    let bucket = deployed["AuditArchiveBucketName"]
        .as_str()
        .unwrap_or_else(|| panic!("the archive bucket is an output: {deployed}"))
        .to_owned();
    // moto does not apply a bucket's lifecycle rules: the template test reads the rule, this
    // the parameter that feeds it.
    let cfn = crate::delete::cloudformation(&moto).await;
    let described = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .unwrap();
    let parameter = |name: &str| {
        described.stacks()[0]
            .parameters()
            .iter()
            .find(|p| p.parameter_key() == Some(name))
            .and_then(|p| p.parameter_value())
            .map(str::to_owned)
    };
    assert_eq!(
        parameter("AuditArchiveGlacierTransitionDays").as_deref(),
        Some("30")
    );
    assert_eq!(parameter("EnableAuditArchival").as_deref(), Some("true"));
    let s3 = moto.s3().await;

    // Events written from now on expire after the retention set by deploy.
    run(&["entity", "create", "key-1"]).json();
    let table = moto.dynamodb().await;
    let items = table
        .scan()
        .table_name(stack)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let audit: Vec<_> = items
        .into_iter()
        .filter(|it| {
            dynalimit_format::item::get_s(it, "SK")
                .is_some_and(|sk| sk.starts_with(dynalimit_format::keys::AUDIT_SK_PREFIX))
                && dynalimit_format::item::get_s(it, "entity_id") == Some("key-1")
        })
        .collect();
    assert_eq!(audit.len(), 1, "{audit:?}");
    let now = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock) / 1000;
    let ttl = dynalimit_format::item::get_i64(&audit[0], "ttl").expect("ttl");
    assert!((ttl - now - 7 * 86_400).abs() < 300, "ttl {ttl}, now {now}");

    // The aggregator's object for that event when it expires, and one of another namespace.
    let record = |item: dynalimit_format::item::Item| dynalimit_aggregator::StreamRecord {
        event_id: "r1".into(),
        kind: dynalimit_aggregator::EventKind::Remove,
        sequence_number: dynalimit_aggregator::SequenceNumber::parse("1").unwrap(),
        old_image: Some(item),
        new_image: None,
        removed_by_ttl: true,
    };
    let object = dynalimit_aggregator::archive::expired_event(&record(audit[0].clone()))
        .unwrap()
        .unwrap();
    let mut foreign = audit[0].clone();
    let pk = dynalimit_format::item::get_s(&foreign, "PK")
        .unwrap()
        .to_owned();
    let (_, rest) = pk.split_once('/').unwrap();
    foreign.insert(
        "PK".into(),
        aws_sdk_dynamodb::types::AttributeValue::S(format!("otherns/{rest}")),
    );
    let other = dynalimit_aggregator::archive::expired_event(&record(foreign))
        .unwrap()
        .unwrap();
    // And one of another entity of this namespace.
    let mut neighbour = audit[0].clone();
    let (ns, _) = pk.split_once('/').unwrap();
    neighbour.insert(
        "PK".into(),
        aws_sdk_dynamodb::types::AttributeValue::S(format!("{ns}/AUDIT#key-2")),
    );
    neighbour.insert(
        "entity_id".into(),
        aws_sdk_dynamodb::types::AttributeValue::S("key-2".into()),
    );
    let neighbour = dynalimit_aggregator::archive::expired_event(&record(neighbour))
        .unwrap()
        .unwrap();
    let archive =
        dynalimit_aggregator::archive::Archive::new(&moto.sdk_config().await, bucket.clone());
    for o in [&object, &other, &neighbour] {
        archive.put(o).await.unwrap();
    }

    let shown = run(&["audit", "-e", "key-1", "--archive"]).json();
    let shown = shown.as_array().expect("an array");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["event_id"], object.event.event_id.as_str());
    assert_eq!(shown[0]["action"], "entity_created");
    // The same through the bucket's name, and nothing from a later day.
    let by_name = run(&["audit", "-e", "key-1", "--archive-bucket", &bucket]).json();
    assert_eq!(by_name.as_array().map(Vec::len), Some(1));
    let neighbours = run(&["audit", "-e", "key-2", "--archive"]).json();
    assert_eq!(neighbours[0]["entity"], "key-2", "{neighbours}");
    assert_eq!(neighbours.as_array().map(Vec::len), Some(1));
    let later = run(&["audit", "-e", "key-1", "--archive", "--since", "2999-01-01"]).json();
    assert_eq!(later.as_array().map(Vec::len), Some(0));
    run(&["audit", "-e", "key-1", "--since", "2020-01-01"]).fails(2, "--archive");
    run(&["audit", "-e", "key-1", "--archive", "--since", "yesterday"]).fails(2, "YYYY-MM-DD");

    // Deleting the stack keeps the archive and what it holds.
    run(&["delete", "--yes", "--poll-ms", "100"]).json();
    let kept = s3
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .expect("the archive outlives the stack");
    assert_eq!(kept.contents().len(), 3);
    moto.drop_retained_table(stack).await;
}
