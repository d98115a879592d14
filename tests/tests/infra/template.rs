//! The CloudFormation template agrees with `schema::TABLE_SCHEMA` and carries the TTL, PITR,
//! retention, alarm, stream-processing and IAM settings no emulator checks.

use std::collections::BTreeMap;

use dynalimit_format::keys;
use dynalimit_format::keys::WATERMARK_SK_PREFIX as MARKER_SK_PREFIX;
use dynalimit_format::schema::TABLE_SCHEMA;
use dynalimit_stack::StackOptions;
use dynalimit_tests::template::{
    condition_holds, created_resources, filter_matches, function_environment_with,
    policy_statements, resolve_conditions, resources_of_type, stream_filters, template,
};
use serde_json::{Value, json};

fn key_schema(hash: &str, range: &str) -> Value {
    json!([
        { "AttributeName": hash, "KeyType": "HASH" },
        { "AttributeName": range, "KeyType": "RANGE" },
    ])
}

#[test]
fn table_keys_indexes_stream_and_billing_match_the_schema() {
    let t = template();
    let table = &t["Resources"]["RateLimitsTable"];
    assert_eq!(table["Type"], "AWS::DynamoDB::Table");
    let p = &table["Properties"];
    assert_eq!(p["TableName"], json!({ "Ref": "AWS::StackName" }));
    assert_eq!(
        p["KeySchema"],
        key_schema(TABLE_SCHEMA.hash_key, TABLE_SCHEMA.range_key)
    );
    assert_eq!(p["BillingMode"], TABLE_SCHEMA.billing_mode);
    assert_eq!(
        p["StreamSpecification"]["StreamViewType"],
        TABLE_SCHEMA.stream_view
    );

    let mut declared: Vec<(String, String)> = p["AttributeDefinitions"]
        .as_array()
        .expect("attributes")
        .iter()
        .map(|a| {
            (
                a["AttributeName"].as_str().unwrap().to_string(),
                a["AttributeType"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    declared.sort();
    let mut expected: Vec<(String, String)> = TABLE_SCHEMA
        .key_attributes()
        .iter()
        .map(|a| (a.to_string(), "S".to_string()))
        .collect();
    expected.sort();
    assert_eq!(declared, expected);

    for (section, indexes) in [
        ("GlobalSecondaryIndexes", TABLE_SCHEMA.global_indexes),
        ("LocalSecondaryIndexes", TABLE_SCHEMA.local_indexes),
    ] {
        let listed = p[section].as_array().expect(section);
        assert_eq!(listed.len(), indexes.len(), "{section}");
        for (got, want) in listed.iter().zip(indexes) {
            assert_eq!(got["IndexName"], want.name, "{section}");
            assert_eq!(
                got["KeySchema"],
                key_schema(want.hash_key, want.range_key),
                "{}",
                want.name
            );
            assert_eq!(
                got["Projection"]["ProjectionType"],
                want.projection.as_str(),
                "{}",
                want.name
            );
        }
    }
}

#[test]
fn the_table_is_retained_protected_and_recoverable_by_default() {
    let t = template();
    let table = &t["Resources"]["RateLimitsTable"];
    // Deleting the stack, or a change that would replace the table, never drops the data.
    assert_eq!(table["DeletionPolicy"], "Retain");
    assert_eq!(table["UpdateReplacePolicy"], "Retain");
    let p = &table["Properties"];
    assert_eq!(
        p["TimeToLiveSpecification"],
        json!({ "AttributeName": TABLE_SCHEMA.ttl_attribute, "Enabled": true })
    );
    assert_eq!(
        p["PointInTimeRecoverySpecification"],
        json!({ "Fn::If": [
            "PITREnabled",
            { "PointInTimeRecoveryEnabled": true,
              "RecoveryPeriodInDays": { "Ref": "PITRRecoveryPeriodDays" } },
            { "PointInTimeRecoveryEnabled": false },
        ]})
    );
    assert_eq!(
        p["DeletionProtectionEnabled"],
        json!({ "Fn::If": ["DeletionProtected", true, false] })
    );
    // On by default; a parameter turns each off.
    let defaults = BTreeMap::new();
    assert!(condition_holds(&t, "PITREnabled", &defaults));
    assert!(condition_holds(&t, "DeletionProtected", &defaults));
    let off = BTreeMap::from([
        ("EnablePointInTimeRecovery", "false"),
        ("EnableDeletionProtection", "false"),
    ]);
    assert!(!condition_holds(&t, "PITREnabled", &off));
    assert!(!condition_holds(&t, "DeletionProtected", &off));
    let period = &t["Parameters"]["PITRRecoveryPeriodDays"];
    assert_eq!(
        (&period["Default"], &period["MinValue"], &period["MaxValue"]),
        (&json!(35), &json!(1), &json!(35))
    );
}

#[test]
fn without_aggregator_code_there_is_no_function_mapping_queue_or_alarm_on_them() {
    let t = template();
    let aggregator_parts = [
        "AggregatorFunction",
        "AggregatorEventSourceMapping",
        "AggregatorDLQ",
        "AggregatorLogGroup",
        "AggregatorRole",
        "AggregatorErrorsAlarm",
        "StreamIteratorAgeAlarm",
        "AggregatorDLQAlarm",
        "AggregatorDurationAlarm",
    ];
    let created = |params: &[(&str, &str)]| {
        created_resources(&t, &params.iter().copied().collect::<BTreeMap<_, _>>())
    };
    // Defaults (the first step of a deploy): the code bucket only.
    let before_upload = created(&[]);
    assert!(before_upload.contains(&"CodeBucket".to_owned()));
    for part in aggregator_parts {
        assert!(!before_upload.contains(&part.to_owned()), "{part}");
    }
    // With the code key (the second step): all of it.
    let with_code = created(&[("AggregatorCodeKey", "aggregator/x.zip")]);
    for part in aggregator_parts.iter().chain(&["CodeBucket"]) {
        assert!(with_code.contains(&(*part).to_owned()), "{part}");
    }
    // An existing role instead of a created one.
    let own_role = created(&[
        ("AggregatorCodeKey", "aggregator/x.zip"),
        ("AggregatorRoleName", "team/aggregator"),
    ]);
    assert!(own_role.contains(&"AggregatorFunction".to_owned()));
    assert!(!own_role.contains(&"AggregatorRole".to_owned()));
    // Aggregator disabled: none of it, code key or not.
    let disabled = created(&[
        ("EnableAggregator", "false"),
        ("AggregatorCodeKey", "aggregator/x.zip"),
    ]);
    for part in aggregator_parts.iter().chain(&["CodeBucket"]) {
        assert!(!disabled.contains(&(*part).to_owned()), "{part}");
    }
    // Alarms off: no alarm at all.
    let quiet = created(&[
        ("AggregatorCodeKey", "aggregator/x.zip"),
        ("EnableAlarms", "false"),
    ]);
    assert!(
        resources_of_type(&t, "AWS::CloudWatch::Alarm")
            .iter()
            .all(|(id, _)| !quiet.contains(id))
    );
    // Outputs exist exactly when their resources do.
    for (output, resource) in [
        ("AggregatorFunctionArn", "AggregatorFunction"),
        ("AggregatorFunctionName", "AggregatorFunction"),
        ("AggregatorDLQUrl", "AggregatorDLQ"),
        ("AggregatorDLQArn", "AggregatorDLQ"),
        ("CodeBucketName", "CodeBucket"),
        ("AggregatorRoleArn", "AggregatorRole"),
    ] {
        assert_eq!(
            t["Outputs"][output]["Condition"], t["Resources"][resource]["Condition"],
            "{output}"
        );
    }
}

fn stream_record(event: &str, sk: &str, with_new: bool, with_old: bool) -> Value {
    let image = json!({ "PK": { "S": "ns1/BUCKET#u1#gpt-4#0" }, "SK": { "S": sk } });
    let mut change = json!({ "Keys": image.clone(), "SequenceNumber": "1" });
    if with_new {
        change["NewImage"] = image.clone();
    }
    if with_old {
        change["OldImage"] = image;
    }
    json!({ "eventName": event, "eventSource": "aws:dynamodb", "dynamodb": change })
}

#[test]
fn the_stream_filter_passes_bucket_writes_and_drops_the_aggregators_own_writes() {
    let t = template();
    let patterns = stream_filters(&t, &BTreeMap::new());
    let passes = |r: &Value| patterns.iter().any(|p| filter_matches(p, r));
    // What the aggregator counts and acts on: bucket items created and changed.
    assert!(passes(&stream_record(
        "INSERT",
        keys::STATE_SK,
        true,
        false
    )));
    assert!(passes(&stream_record("MODIFY", keys::STATE_SK, true, true)));
    // Its own snapshot and watermark writes, deletions and expiries, other items: never.
    for (event, sk, new, old) in [
        (
            "INSERT",
            format!("{}gpt-4#2026-01-01T00:00:00Z", keys::USAGE_SK_PREFIX),
            true,
            false,
        ),
        (
            "MODIFY",
            format!("{}gpt-4#2026-01-01T00:00:00Z", keys::USAGE_SK_PREFIX),
            true,
            true,
        ),
        ("INSERT", format!("{MARKER_SK_PREFIX}gpt-4#0"), true, false),
        ("MODIFY", format!("{MARKER_SK_PREFIX}gpt-4#0"), true, true),
        ("REMOVE", keys::STATE_SK.to_owned(), false, true),
        ("MODIFY", keys::META_SK.to_owned(), true, true),
        ("INSERT", format!("{}x", keys::AUDIT_SK_PREFIX), true, false),
    ] {
        assert!(
            !passes(&stream_record(event, &sk, new, old)),
            "{event} {sk}"
        );
    }
}

#[test]
fn with_an_alert_bus_the_stream_filter_passes_what_the_aggregator_reads_of_refusal_minutes() {
    let t = template();
    let code = ("AggregatorCodeKey", "aggregator/abc.zip");
    let bus = ("AlertEventBusName", "ops-alerts");
    let archive = ("EnableAuditArchival", "true");
    let with_bus = [
        BTreeMap::from([code, bus]),
        BTreeMap::from([code, bus, archive]),
    ];
    let without = [BTreeMap::from([code]), BTreeMap::from([code, archive])];
    let refused_sk = dynalimit_format::refusal::refused_sk("rpm", 29_000_000);
    let of = dynalimit_format::refusal::Of {
        ns: "ns1",
        entity: "u1",
        resource: "gpt-4",
        limit: "rpm",
    };
    // As the aggregator reads the same record.
    let reads = |event: &str, new: bool, old: bool| -> bool {
        let image = of.refused_key(29_000_000);
        let record = dynalimit_aggregator::record::StreamRecord::assemble(
            "e".into(),
            event,
            Some("1"),
            old.then(|| image.clone()),
            new.then(|| image.clone()),
        )
        .unwrap();
        !dynalimit_aggregator::refusing::minutes_of(&[record]).is_empty()
    };
    for (event, new, old) in [
        ("INSERT", true, false),
        ("MODIFY", true, true),
        ("REMOVE", false, true),
    ] {
        let record = stream_record(event, &refused_sk, new, old);
        for params in &with_bus {
            let passes = stream_filters(&t, params)
                .iter()
                .any(|p| filter_matches(p, &record));
            assert_eq!(passes, reads(event, new, old), "{event} {params:?}");
            // Bucket writes pass as before.
            assert!(
                stream_filters(&t, params).iter().any(|p| filter_matches(
                    p,
                    &stream_record("MODIFY", keys::STATE_SK, true, true)
                ))
            );
        }
        for params in &without {
            assert!(
                !stream_filters(&t, params)
                    .iter()
                    .any(|p| filter_matches(p, &record)),
                "{event} {params:?}"
            );
        }
    }
    assert!(
        reads("INSERT", true, false),
        "the first report of a minute is read"
    );
    // With the archive and a bus, audit expiries still pass.
    let audit_sk = format!("{}01KB0000000000000000000000", keys::AUDIT_SK_PREFIX);
    assert!(
        stream_filters(&t, &with_bus[1])
            .iter()
            .any(|p| filter_matches(p, &audit_removal(&audit_sk, true)))
    );
}

/// An audit item's removal: by DynamoDB's TTL (the service's user identity) or by a writer.
fn audit_removal(sk: &str, by_ttl: bool) -> Value {
    let image = json!({ "PK": { "S": "ns1/AUDIT#u1" }, "SK": { "S": sk } });
    let mut record = json!({
        "eventName": "REMOVE",
        "eventSource": "aws:dynamodb",
        "dynamodb": { "Keys": image.clone(), "OldImage": image, "SequenceNumber": "7" },
    });
    if by_ttl {
        record["userIdentity"] =
            json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
    }
    record
}

#[test]
fn the_audit_archive_is_a_kept_private_bucket_fed_by_expiries_alone() {
    let t = template();
    let on = BTreeMap::from([
        ("EnableAuditArchival", "true"),
        ("AggregatorCodeKey", "aggregator/abc.zip"),
    ]);
    let off = BTreeMap::from([("AggregatorCodeKey", "aggregator/abc.zip")]);
    let no_code = BTreeMap::from([("EnableAuditArchival", "true")]);
    assert_eq!(t["Parameters"]["EnableAuditArchival"]["Default"], "false");
    assert!(created_resources(&t, &on).contains(&"AuditArchiveBucket".to_owned()));
    for without in [&off, &no_code] {
        assert!(!created_resources(&t, without).contains(&"AuditArchiveBucket".to_owned()));
    }

    // Kept when the stack goes, encrypted, private, to Glacier IR after the parameter's days.
    let bucket = &t["Resources"]["AuditArchiveBucket"];
    assert_eq!(bucket["DeletionPolicy"], "Retain");
    assert_eq!(bucket["UpdateReplacePolicy"], "Retain");
    let p = &bucket["Properties"];
    assert_eq!(
        p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
            ["SSEAlgorithm"],
        "AES256"
    );
    for field in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(p["PublicAccessBlockConfiguration"][field], true, "{field}");
    }
    let rule = &p["LifecycleConfiguration"]["Rules"][0];
    assert_eq!(
        rule["Transitions"][0],
        json!({ "TransitionInDays": { "Ref": "AuditArchiveGlacierTransitionDays" }, "StorageClass": "GLACIER_IR" })
    );
    let days = &t["Parameters"]["AuditArchiveGlacierTransitionDays"];
    assert_eq!(
        (&days["MinValue"], &days["MaxValue"]),
        (&json!(1), &json!(3650))
    );

    // The aggregator may put archive objects, and nothing else in the bucket; only with it.
    let put = |params: &BTreeMap<&str, &str>| -> Vec<Value> {
        policy_statements(&t, "AggregatorRole", params)
            .into_iter()
            .filter(|s| s.to_string().contains("s3:"))
            .collect()
    };
    assert_eq!(
        put(&on),
        vec![json!({
            "Sid": "ArchiveAudit",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": { "Fn::Sub": format!("${{AuditArchiveBucket.Arn}}/{}*", dynalimit_aggregator::archive::PREFIX) },
        })]
    );
    assert!(put(&off).is_empty());

    // The function is told the bucket exactly when there is one.
    let resources = BTreeMap::from([
        ("RateLimitsTable", "limits".to_owned()),
        ("AuditArchiveBucket", "limits-archive".to_owned()),
    ]);
    let env = |params| function_environment_with(&t, "AggregatorFunction", &resources, params);
    let bucket_var = dynalimit_aggregator::config::ENV_ARCHIVE_BUCKET;
    assert_eq!(env(&on)[bucket_var], "limits-archive");
    assert_eq!(env(&off)[bucket_var], "");

    // With the archive, expiries of audit items reach the function; a writer's delete of an
    // audit item, and the expiry of anything else, do not. Without it, none of them.
    let audit_sk = format!("{}01KB0000000000000000000000", keys::AUDIT_SK_PREFIX);
    let passes = |params, r: &Value| {
        stream_filters(&t, params)
            .iter()
            .any(|p| filter_matches(p, r))
    };
    assert!(passes(&on, &audit_removal(&audit_sk, true)));
    assert!(!passes(&on, &audit_removal(&audit_sk, false)));
    assert!(!passes(&on, &audit_removal(keys::STATE_SK, true)));
    assert!(passes(
        &on,
        &stream_record("MODIFY", keys::STATE_SK, true, true)
    ));
    assert!(!passes(&off, &audit_removal(&audit_sk, true)));

    // The output names the bucket for `dynalimit audit --archive`.
    assert_eq!(
        t["Outputs"]["AuditArchiveBucketName"]["Value"],
        json!({ "Ref": "AuditArchiveBucket" })
    );
}

#[test]
fn alarms_cover_lambda_errors_iterator_age_dlq_depth_and_throttles() {
    let t = template();
    let alarms = resources_of_type(&t, "AWS::CloudWatch::Alarm");
    let metrics: Vec<(String, String)> = alarms
        .iter()
        .map(|(_, a)| {
            (
                a["Properties"]["Namespace"].as_str().unwrap().to_string(),
                a["Properties"]["MetricName"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("AWS/Lambda", "Errors"),
        ("AWS/Lambda", "IteratorAge"),
        ("AWS/Lambda", "Duration"),
        ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
        ("AWS/DynamoDB", "ReadThrottleEvents"),
        ("AWS/DynamoDB", "WriteThrottleEvents"),
    ] {
        assert!(
            metrics.contains(&(want.0.to_string(), want.1.to_string())),
            "no alarm on {want:?}"
        );
    }
    for (name, alarm) in alarms {
        assert_eq!(
            alarm["Properties"]["AlarmActions"],
            json!({ "Fn::If": ["HasAlarmTopic", [{ "Ref": "AlarmSNSTopicArn" }], { "Ref": "AWS::NoValue" }] }),
            "{name}"
        );
        let condition = alarm["Condition"].as_str().unwrap();
        assert!(t["Conditions"][condition].is_object(), "{name}");
    }
}

#[test]
fn aggregator_reads_the_stream_with_bisect_partial_batches_and_a_dead_letter_queue() {
    let t = template();
    let f = &t["Resources"]["AggregatorFunction"]["Properties"];
    assert_eq!(f["Runtime"], "provided.al2023");
    assert_eq!(f["Handler"], "bootstrap");
    assert_eq!(
        f["Code"],
        json!({ "S3Bucket": { "Ref": "CodeBucket" }, "S3Key": { "Ref": "AggregatorCodeKey" } })
    );
    assert_eq!(
        f["Architectures"],
        json!([{ "Ref": "AggregatorArchitecture" }])
    );
    assert_eq!(
        t["Parameters"]["AggregatorArchitecture"]["Default"],
        "arm64"
    );
    assert_eq!(f["MemorySize"], json!({ "Ref": "LambdaMemorySize" }));
    assert_eq!(f["Timeout"], json!({ "Ref": "LambdaTimeout" }));
    let m = &t["Resources"]["AggregatorEventSourceMapping"]["Properties"];
    assert_eq!(
        m["EventSourceArn"],
        json!({ "Fn::GetAtt": ["RateLimitsTable", "StreamArn"] })
    );
    assert_eq!(m["BatchSize"], json!({ "Ref": "StreamBatchSize" }));
    assert_eq!(
        m["MaximumBatchingWindowInSeconds"],
        json!({ "Ref": "StreamBatchingWindowSeconds" })
    );
    assert_eq!(m["BisectBatchOnFunctionError"], true);
    assert_eq!(
        m["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(
        m["MaximumRetryAttempts"],
        json!({ "Ref": "StreamMaximumRetryAttempts" })
    );
    assert_eq!(
        m["DestinationConfig"]["OnFailure"]["Destination"],
        json!({ "Fn::GetAtt": ["AggregatorDLQ", "Arn"] })
    );
    assert_eq!(m["Enabled"], true);
    let logs = &t["Resources"]["AggregatorLogGroup"]["Properties"];
    assert_eq!(
        logs["RetentionInDays"],
        json!({ "Ref": "LogRetentionDays" })
    );
}

#[test]
fn iam_policies_separate_acquire_full_and_read_access_and_scope_namespaces() {
    let t = template();
    let statements = |name: &str| policy_statements(&t, name, &BTreeMap::new());
    let actions = |s: &Value| -> Vec<String> {
        match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
            other => panic!("action {other}"),
        }
    };
    let writes = [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
    ];
    // Read-only never writes.
    for policy in ["ReadOnlyPolicy", "NamespaceReadOnlyPolicy"] {
        for s in statements(policy) {
            assert!(
                actions(&s).iter().all(|a| !writes.contains(&a.as_str())),
                "{policy}"
            );
        }
    }
    // Acquire-only writes only bucket items, and never deletes.
    for (policy, prefix) in [
        ("AcquireOnlyPolicy", "*/BUCKET#*"),
        (
            "NamespaceAcquirePolicy",
            "${aws:PrincipalTag/zael_namespace_id}/BUCKET#*",
        ),
    ] {
        for s in statements(policy) {
            let acts = actions(&s);
            assert!(!acts.iter().any(|a| a == "dynamodb:DeleteItem"), "{policy}");
            if acts.iter().any(|a| writes.contains(&a.as_str())) {
                assert_eq!(
                    s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"],
                    json!([prefix]),
                    "{policy}"
                );
            }
        }
    }
    // Namespace variants: every data statement is limited by LeadingKeys.
    for policy in [
        "NamespaceAcquirePolicy",
        "NamespaceFullAccessPolicy",
        "NamespaceReadOnlyPolicy",
    ] {
        for s in statements(policy) {
            if actions(&s) == ["dynamodb:DescribeTable"] {
                continue;
            }
            assert!(
                s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"].is_array(),
                "{policy} {s}"
            );
        }
    }
    // Full access can delete.
    assert!(
        statements("FullAccessPolicy")
            .iter()
            .any(|s| actions(s).iter().any(|a| a == "dynamodb:DeleteItem"))
    );
    // Roles honour the permission boundary.
    for role in ["AggregatorRole", "AppRole", "AdminRole", "ReadOnlyRole"] {
        assert_eq!(
            t["Resources"][role]["Properties"]["PermissionsBoundary"],
            json!({ "Fn::If": ["HasPermissionBoundary", { "Ref": "PermissionBoundary" }, { "Ref": "AWS::NoValue" }] }),
            "{role}"
        );
    }
}

#[test]
fn outputs_name_table_stream_roles_and_policies() {
    let t = template();
    for output in [
        "TableName",
        "TableArn",
        "StreamArn",
        "AggregatorRoleArn",
        "AcquireOnlyPolicyArn",
        "FullAccessPolicyArn",
        "ReadOnlyPolicyArn",
        "NamespaceAcquirePolicyArn",
        "NamespaceFullAccessPolicyArn",
        "NamespaceReadOnlyPolicyArn",
        "AppRoleArn",
        "AdminRoleArn",
        "ReadOnlyRoleArn",
    ] {
        assert!(t["Outputs"][output]["Value"].is_object(), "{output}");
    }
}

#[test]
fn stack_options_set_exactly_the_template_parameters() {
    let t = template();
    let mut declared: Vec<&String> = t["Parameters"].as_object().unwrap().keys().collect();
    declared.sort();
    let options = StackOptions::default();
    let mut set: Vec<String> = options
        .parameters()
        .iter()
        .map(|(k, _)| k.to_string())
        .chain(["AggregatorCodeKey".to_string()])
        .collect();
    set.sort();
    assert_eq!(declared, set.iter().collect::<Vec<_>>());
    // The defaults of the options are the template's defaults.
    for (name, value) in options.parameters() {
        if name == "SchemaVersion" {
            continue;
        }
        let default = &t["Parameters"][name]["Default"];
        let default = match default {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(default, value, "{name}");
    }
}

/// A key ARN of the shape the template accepts.
const KEY: &str = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

#[test]
fn the_code_bucket_keeps_versions_and_refuses_requests_without_tls() {
    let t = template();
    let bucket = &t["Resources"]["CodeBucket"]["Properties"];
    assert_eq!(
        bucket["VersioningConfiguration"],
        json!({ "Status": "Enabled" })
    );
    // Replaced code stays recoverable for a while, not forever.
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_array()
        .expect("lifecycle rules");
    assert!(
        rules.iter().any(|r| r["Status"] == "Enabled"
            && r["NoncurrentVersionExpiration"]["NoncurrentDays"].is_u64())
    );

    let policy = &t["Resources"]["CodeBucketPolicy"];
    assert_eq!(policy["Type"], "AWS::S3::BucketPolicy");
    assert_eq!(
        policy["Condition"],
        t["Resources"]["CodeBucket"]["Condition"]
    );
    let p = &policy["Properties"];
    assert_eq!(p["Bucket"], json!({ "Ref": "CodeBucket" }));
    let statements = p["PolicyDocument"]["Statement"]
        .as_array()
        .expect("statements");
    // Every request on the bucket and on each object, by anyone, without TLS.
    assert!(
        statements.iter().any(|s| *s
            == json!({
                "Sid": "DenyWithoutTLS",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [
                    { "Fn::GetAtt": ["CodeBucket", "Arn"] },
                    { "Fn::Sub": "${CodeBucket.Arn}/*" },
                ],
                "Condition": { "Bool": { "aws:SecureTransport": "false" } },
            })),
        "{statements:?}"
    );
    // Nothing else is allowed or denied by it: access stays with IAM.
    assert_eq!(statements.len(), 1);
    // The policy exists exactly when the bucket does.
    for parameters in [
        BTreeMap::new(),
        BTreeMap::from([("AggregatorCodeKey", "aggregator/x.zip")]),
        BTreeMap::from([("EnableAggregator", "false")]),
    ] {
        let created = created_resources(&t, &parameters);
        assert_eq!(
            created.contains(&"CodeBucket".to_owned()),
            created.contains(&"CodeBucketPolicy".to_owned()),
            "{parameters:?}"
        );
    }
}

#[test]
fn an_alert_bus_lets_the_aggregator_publish_to_that_bus_and_undo_its_markers() {
    let t = template();
    let on = BTreeMap::from([
        ("AlertEventBusName", "ops-alerts"),
        ("AggregatorCodeKey", "aggregator/abc.zip"),
    ]);
    let off = BTreeMap::from([("AggregatorCodeKey", "aggregator/abc.zip")]);
    assert_eq!(t["Parameters"]["AlertEventBusName"]["Default"], "");
    let grants = |params: &BTreeMap<&str, &str>, action: &str| -> Vec<Value> {
        policy_statements(&t, "AggregatorRole", params)
            .into_iter()
            .filter(|s| match &s["Action"] {
                Value::String(a) => a == action,
                Value::Array(a) => a.iter().any(|a| a == action),
                _ => false,
            })
            .map(|s| s["Resource"].clone())
            .collect()
    };
    for action in dynalimit_aggregator::alerts::IAM_ACTIONS {
        assert!(!grants(&on, action).is_empty(), "{action}");
    }
    assert_eq!(
        grants(&on, "events:PutEvents"),
        vec![
            json!({ "Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/${AlertEventBusName}" })
        ]
    );
    assert_eq!(
        grants(&on, "dynamodb:DeleteItem"),
        vec![json!({ "Fn::GetAtt": ["RateLimitsTable", "Arn"] })]
    );
    for action in ["events:PutEvents", "dynamodb:DeleteItem"] {
        assert!(grants(&off, action).is_empty(), "{action}");
    }
    let resources = BTreeMap::from([("RateLimitsTable", "limits".to_owned())]);
    let env = |params| function_environment_with(&t, "AggregatorFunction", &resources, params);
    let bus_var = dynalimit_aggregator::config::ENV_ALERT_EVENT_BUS;
    assert_eq!(env(&on)[bus_var], "ops-alerts");
    assert_eq!(env(&off)[bus_var], "");
}

/// Every statement of the managed policies and of the aggregator's role the template creates
/// for `parameters`, by resource.
fn every_statement(t: &Value, parameters: &BTreeMap<&str, &str>) -> Vec<(String, Value)> {
    let created = created_resources(t, parameters);
    resources_of_type(t, "AWS::IAM::ManagedPolicy")
        .into_iter()
        .map(|(id, _)| id.clone())
        .chain(["AggregatorRole".to_owned()])
        .filter(|id| created.contains(id))
        .flat_map(|id| {
            policy_statements(t, &id, parameters)
                .into_iter()
                .map(move |s| (id.clone(), s))
        })
        .collect()
}

fn names_kms(value: &Value) -> bool {
    value.to_string().contains("kms:")
}

/// The managed policies each role the stack creates carries, for `parameters`.
fn role_policies(t: &Value, parameters: &BTreeMap<&str, &str>) -> BTreeMap<String, Value> {
    ["AggregatorRole", "AppRole", "AdminRole", "ReadOnlyRole"]
        .into_iter()
        .map(|role| {
            let p =
                resolve_conditions(t, &t["Resources"][role]["Properties"], parameters).expect(role);
            (role.to_owned(), p["ManagedPolicyArns"].clone())
        })
        .collect()
}

#[test]
fn without_a_kms_key_the_template_is_as_before() {
    let t = template();
    assert_eq!(t["Parameters"]["KmsKeyArn"]["Default"], "");
    let defaults = BTreeMap::from([("AggregatorCodeKey", "aggregator/x.zip")]);
    assert!(!condition_holds(&t, "HasKmsKey", &defaults));
    let resolved =
        |id: &str| resolve_conditions(&t, &t["Resources"][id]["Properties"], &defaults).expect(id);
    // DynamoDB's and CloudWatch Logs' own keys: the properties are absent.
    assert!(
        resolved("RateLimitsTable")
            .get("SSESpecification")
            .is_none()
    );
    assert!(resolved("AggregatorLogGroup").get("KmsKeyId").is_none());
    // No key policy; the roles carry what they carried; no statement names KMS.
    assert!(!created_resources(&t, &defaults).contains(&"TableKeyPolicy".to_owned()));
    assert_eq!(
        Value::from_iter(role_policies(&t, &defaults)),
        json!({
            "AggregatorRole": null,
            "AppRole": [{ "Ref": "AcquireOnlyPolicy" }],
            "AdminRole": [{ "Ref": "FullAccessPolicy" }],
            "ReadOnlyRole": [{ "Ref": "ReadOnlyPolicy" }],
        })
    );
    for (id, statement) in every_statement(&t, &defaults) {
        assert!(!names_kms(&statement), "{id}: {statement}");
    }
}

#[test]
fn a_kms_key_encrypts_the_table_and_the_logs_and_is_granted_for_this_table_only() {
    let t = template();
    let param = &t["Parameters"]["KmsKeyArn"];
    // A key ARN (CloudWatch Logs takes no alias), or empty.
    assert_eq!(
        param["AllowedPattern"],
        "^(arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[a-zA-Z0-9-]+)?$"
    );
    let without_key = BTreeMap::from([("AggregatorCodeKey", "aggregator/x.zip")]);
    let with_key = BTreeMap::from([
        ("AggregatorCodeKey", "aggregator/x.zip"),
        ("KmsKeyArn", KEY),
    ]);
    assert!(condition_holds(&t, "HasKmsKey", &with_key));
    let resolved = |id: &str, parameters: &BTreeMap<&str, &str>| {
        resolve_conditions(&t, &t["Resources"][id]["Properties"], parameters).expect(id)
    };
    let key = json!({ "Ref": "KmsKeyArn" });
    assert_eq!(
        resolved("RateLimitsTable", &with_key)["SSESpecification"],
        json!({ "SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": key })
    );
    assert_eq!(resolved("AggregatorLogGroup", &with_key)["KmsKeyId"], key);
    // The code bucket and the dead-letter queue hold no table data: unchanged by the key.
    for id in ["CodeBucket", "AggregatorDLQ"] {
        assert_eq!(resolved(id, &with_key), resolved(id, &without_key), "{id}");
        assert!(!names_kms(&t["Resources"][id]), "{id}");
    }

    // DynamoDB decrypts the table key on behalf of each principal that reads or writes items
    // (the aggregator also the stream): one policy grants kms:Decrypt on this key, for this
    // table's encryption context, and nothing else of KMS.
    assert!(created_resources(&t, &with_key).contains(&"TableKeyPolicy".to_owned()));
    assert_eq!(
        policy_statements(&t, "TableKeyPolicy", &with_key),
        [json!({
            "Sid": "TableKey",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": key,
            "Condition": { "StringEquals": {
                "kms:EncryptionContext:aws:dynamodb:tableName": { "Ref": "AWS::StackName" },
            } },
        })]
    );
    assert_eq!(
        t["Outputs"]["TableKeyPolicyArn"]["Condition"],
        t["Resources"]["TableKeyPolicy"]["Condition"]
    );
    // Every role the stack creates carries it beside its own policy.
    let table_key = json!({ "Ref": "TableKeyPolicy" });
    let without = role_policies(&t, &without_key);
    for (role, policies) in role_policies(&t, &with_key) {
        let mut expected: Vec<Value> = without[&role].as_array().cloned().unwrap_or_default();
        expected.push(table_key.clone());
        assert_eq!(policies, Value::Array(expected), "{role}");
    }
    // The other statements are those without the key.
    let others: Vec<(String, Value)> = every_statement(&t, &with_key)
        .into_iter()
        .filter(|(id, _)| id != "TableKeyPolicy")
        .collect();
    assert_eq!(others, every_statement(&t, &without_key));
}

#[test]
fn every_stack_of_the_template_carries_the_mark_delete_looks_for() {
    let t = template();
    let output = &t["Outputs"][dynalimit_stack::MARK_KEY];
    assert_eq!(output["Value"], dynalimit_stack::MARK_VALUE);
    assert!(
        output.get("Condition").is_none(),
        "the mark is there whatever the parameters: {output}"
    );
}

#[test]
fn the_provisioner_is_opt_in_runs_from_the_aggregator_package_and_is_exported() {
    let t = template();
    let parts = [
        "ProvisionerFunction",
        "ProvisionerRole",
        "ProvisionerLogGroup",
    ];
    let created = |params: &[(&str, &str)]| {
        created_resources(&t, &params.iter().copied().collect::<BTreeMap<_, _>>())
    };
    let code = ("AggregatorCodeKey", "aggregator/x.zip");
    for (params, expected) in [
        (vec![code], false),
        (vec![("EnableProvisioner", "true")], false),
        (vec![code, ("EnableProvisioner", "true")], true),
        (
            vec![
                code,
                ("EnableProvisioner", "true"),
                ("EnableAggregator", "false"),
            ],
            false,
        ),
    ] {
        let made = created(&params);
        for part in parts {
            assert_eq!(
                made.contains(&part.to_owned()),
                expected,
                "{part} {params:?}"
            );
        }
    }
    let f = &t["Resources"]["ProvisionerFunction"]["Properties"];
    assert_eq!(f["Handler"], dynalimit_manifest::provisioner::HANDLER);
    assert_eq!(
        f["Code"], t["Resources"]["AggregatorFunction"]["Properties"]["Code"],
        "the aggregator's package"
    );
    assert!(
        f.get("FunctionName").is_none(),
        "CloudFormation names the provisioner, never `{{stack}}-limits-provisioner`"
    );
    // Its environment is exactly what it reads.
    let vars: Vec<&String> = f["Environment"]["Variables"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(vars, [dynalimit_manifest::provisioner::ENV_TABLE]);
    assert_eq!(
        f["Environment"]["Variables"][dynalimit_manifest::provisioner::ENV_TABLE],
        json!({"Ref": "RateLimitsTable"})
    );
    // The custom resource finds it by the export `limits cfn-template` imports.
    let out = &t["Outputs"]["ProvisionerServiceToken"];
    assert_eq!(
        out["Condition"],
        t["Resources"]["ProvisionerFunction"]["Condition"]
    );
    assert_eq!(
        out["Value"],
        json!({"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${ProvisionerFunction}"})
    );
    assert_eq!(
        out["Export"]["Name"],
        json!({"Fn::Sub": "${AWS::StackName}-ProvisionerArn"})
    );
    assert_eq!(
        dynalimit_manifest::cfn::provisioner_export("app"),
        "app-ProvisionerArn"
    );
}

/// The parameters of a stack with aggregator code and `extra`.
fn with_code<'a>(extra: &[(&'a str, &'a str)]) -> BTreeMap<&'a str, &'a str> {
    [("AggregatorCodeKey", "aggregator/x.zip")]
        .into_iter()
        .chain(extra.iter().copied())
        .collect()
}

#[test]
fn a_policy_name_format_names_every_managed_policy_after_its_own_name() {
    let t = template();
    let policies = resources_of_type(&t, "AWS::IAM::ManagedPolicy");
    assert_eq!(policies.len(), dynalimit_stack::POLICY_NAMES.len());
    let kms = [("KmsKeyArn", KEY)];
    let unnamed: BTreeMap<&str, &str> = kms.into_iter().collect();
    let named: BTreeMap<&str, &str> = kms
        .into_iter()
        .chain([("PolicyNameFormat", "limits-prod-{}")])
        .collect();
    let mut own_names = Vec::new();
    for (id, policy) in &policies {
        let properties = |p| resolve_conditions(&t, &policy["Properties"], p).unwrap();
        assert!(
            properties(&unnamed).get("ManagedPolicyName").is_none(),
            "{id}: CloudFormation names it without a format"
        );
        let name = &properties(&named)["ManagedPolicyName"];
        // `{}` replaced by the policy's own name: Join(own, Split("{}", format)).
        let own = name["Fn::Join"][0].as_str().expect(id).to_owned();
        assert_eq!(
            name["Fn::Join"][1],
            json!({ "Fn::Split": ["{}", { "Ref": "PolicyNameFormat" }] }),
            "{id}"
        );
        own_names.push(own);
    }
    own_names.sort();
    let mut expected: Vec<String> = dynalimit_stack::POLICY_NAMES
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    expected.sort();
    assert_eq!(own_names, expected);
    let mut o = StackOptions::default();
    o.policy_name_format = Some("limits-prod-{}".into());
    assert!(
        o.parameters()
            .contains(&("PolicyNameFormat", "limits-prod-{}".to_owned()))
    );
}

#[test]
fn an_existing_role_arn_replaces_the_created_aggregator_role() {
    let t = template();
    let arn = "arn:aws:iam::123456789012:role/team/aggregator";
    let function = &t["Resources"]["AggregatorFunction"]["Properties"];
    let role = |p: &BTreeMap<&str, &str>| resolve_conditions(&t, &function["Role"], p).unwrap();
    let created = created_resources(&t, &with_code(&[]));
    assert!(created.contains(&"AggregatorRole".to_owned()));
    assert_eq!(
        role(&with_code(&[])),
        json!({ "Fn::GetAtt": ["AggregatorRole", "Arn"] })
    );
    let own = with_code(&[("AggregatorRoleArn", arn)]);
    assert!(!created_resources(&t, &own).contains(&"AggregatorRole".to_owned()));
    assert!(created_resources(&t, &own).contains(&"AggregatorFunction".to_owned()));
    assert_eq!(role(&own), json!({ "Ref": "AggregatorRoleArn" }));
    // The output of the created role's ARN goes with it.
    assert_eq!(
        t["Outputs"]["AggregatorRoleArn"]["Condition"],
        "CreateAggregatorRole"
    );
    // By name, as before.
    let by_name = with_code(&[("AggregatorRoleName", "team/aggregator")]);
    assert!(
        role(&by_name)["Fn::Sub"]
            .as_str()
            .is_some_and(|s| s.ends_with(":role/${AggregatorRoleName}"))
    );
    let pattern = t["Parameters"]["AggregatorRoleArn"]["AllowedPattern"]
        .as_str()
        .unwrap();
    assert!(pattern.contains(":iam::[0-9]{12}:role/"), "{pattern}");
    let mut o = StackOptions::default();
    o.aggregator_role_arn = Some(arn.into());
    o.validate().unwrap();
    assert!(
        o.parameters()
            .contains(&("AggregatorRoleArn", arn.to_owned()))
    );
}

#[test]
fn tracing_turns_on_active_x_ray_and_lets_the_created_role_write_segments() {
    let t = template();
    let function = &t["Resources"]["AggregatorFunction"]["Properties"];
    let mode = |p: &BTreeMap<&str, &str>| {
        resolve_conditions(&t, &function["TracingConfig"], p).unwrap()["Mode"].clone()
    };
    let tracing_statements = |p: &BTreeMap<&str, &str>| -> Vec<Value> {
        policy_statements(&t, "AggregatorRole", p)
            .into_iter()
            .filter(|s| s["Sid"] == "Tracing")
            .collect()
    };
    assert_eq!(t["Parameters"]["EnableTracing"]["Default"], "false");
    assert_eq!(mode(&with_code(&[])), "PassThrough");
    assert!(tracing_statements(&with_code(&[])).is_empty());
    let on = with_code(&[("EnableTracing", "true")]);
    assert_eq!(mode(&on), "Active");
    assert_eq!(
        tracing_statements(&on),
        [json!({
            "Sid": "Tracing",
            "Effect": "Allow",
            "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
            "Resource": "*",
        })]
    );
    let mut o = StackOptions::default();
    o.tracing = true;
    assert!(
        o.parameters()
            .contains(&("EnableTracing", "true".to_owned()))
    );
}

#[test]
fn the_duration_alarm_watches_the_aggregators_longest_run_against_the_threshold() {
    let t = template();
    let alarm = &t["Resources"]["AggregatorDurationAlarm"];
    assert_eq!(alarm["Condition"], "AggregatorAlarmsEnabled");
    let p = &alarm["Properties"];
    assert_eq!(p["Namespace"], "AWS/Lambda");
    assert_eq!(p["MetricName"], "Duration");
    assert_eq!(p["Statistic"], "Maximum");
    assert_eq!(p["ComparisonOperator"], "GreaterThanThreshold");
    assert_eq!(
        p["Threshold"],
        json!({ "Ref": "LambdaDurationThresholdMs" })
    );
    assert_eq!(
        p["Dimensions"],
        json!([{ "Name": "FunctionName", "Value": { "Ref": "AggregatorFunction" } }])
    );
    assert!(
        !created_resources(&t, &with_code(&[("EnableAlarms", "false")]))
            .contains(&"AggregatorDurationAlarm".to_owned())
    );
    // The default is 80 % of the default timeout; the CLI passes the share of the timeout.
    assert_eq!(
        t["Parameters"]["LambdaDurationThresholdMs"]["Default"],
        48000
    );
    let mut o = StackOptions::default();
    o.lambda_timeout_seconds = 300;
    o.duration_alarm_percent = 50;
    assert!(
        o.parameters()
            .contains(&("LambdaDurationThresholdMs", "150000".to_owned()))
    );
}
