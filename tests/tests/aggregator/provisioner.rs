//! The limits provisioner as Lambda runs it: the package's `bootstrap` (the aggregator's),
//! started with exactly the environment `infra/template.yaml` gives `ProvisionerFunction`
//! (its handler `provisioner` included), polling cargo-lambda's Runtime API emulator, and
//! applying manifests to DynamoDB Local: direct plans and applies, then a custom resource's
//! create, update and delete answered at a loopback stand-in for CloudFormation's response
//! URL, an answer that cannot be delivered, and a redelivered event.
//!
//! Skipped with a printed reason when cargo-lambda is not installed, unless
//! `DYNALIMIT_REQUIRE_CARGO_LAMBDA=1` (set by `scripts/test`) or `CI` is set.

use std::collections::BTreeMap;

use dynalimit::Limit;
use dynalimit_manifest::provisioner::{FAILED_ID, physical_id};
use dynalimit_repository::{DisabledFlag, Repository};
use dynalimit_tests::lambda::{
    CargoLambda, Caught, Function, ResponseCatcher, RuntimeApi, endpoint_environment,
};
use dynalimit_tests::template::{function_environment, template};
use serde_json::{Value, json};

const MANIFEST: &str = "\
resources:
  gpt-4:
    cascade: true
    limits:
      rpm: 100/min
      tpm: {capacity: 20000, refill_amount: 10000, soft: true}
entities:
  key-1:
    resources:
      gpt-4: {disabled: false, limits: {rpm: 50/min}}
";

/// Custom resource properties as CloudFormation delivers them: every scalar a string.
fn properties(table: &str, rpm: &str, with_gpt3: bool) -> Value {
    let mut resources = json!({
        "gpt-4": {
            "Cascade": "false",
            "Disabled": "false",
            "Limits": {
                "rpm": {"Capacity": rpm, "RefillAmount": rpm, "RefillPeriod": "60"},
                "tpm": {"Capacity": "1000", "Soft": "false"},
            }
        }
    });
    if with_gpt3 {
        resources["gpt-3"] = json!({"Disabled": "bypass"});
    }
    json!({
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits-provisioner",
        "TableName": table,
        "Namespace": "default",
        "FullApply": "false",
        "Resources": resources,
        "Entities": {"key-2": {"Resources": {"gpt-4": {"Limits": {"rpm": {"Capacity": "5"}}}}}},
    })
}

fn request(
    kind: &str,
    url: &str,
    request_id: &str,
    physical: Option<&str>,
    props: Value,
    old: Option<Value>,
) -> Value {
    let mut event = json!({
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/app/1",
        "RequestId": request_id,
        "LogicalResourceId": "Limits",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ServiceToken": props["ServiceToken"],
        "ResourceProperties": props,
    });
    if let Some(p) = physical {
        event["PhysicalResourceId"] = json!(p);
    }
    if let Some(old) = old {
        event["OldResourceProperties"] = old;
    }
    event
}

/// The answer PUT for `request_id` (the last one received).
fn answer(caught: &[Caught], request_id: &str) -> Caught {
    caught
        .iter()
        .rev()
        .find(|c| c.body["RequestId"] == request_id)
        .cloned()
        .unwrap_or_else(|| panic!("no answer to {request_id}: {caught:?}"))
}

async fn resource_limits(repo: &Repository, resource: &str) -> Option<Vec<Limit>> {
    repo.get_resource_defaults(resource)
        .await
        .expect("read")
        .map(|c| c.limits)
}

#[tokio::test]
async fn the_provisioner_applies_manifests_directly_and_as_a_custom_resource() {
    let Some(cargo_lambda) = CargoLambda::find() else {
        return;
    };
    if dynalimit_tests::skipped_on_the_memory_backend("the function talks to DynamoDB Local") {
        return;
    }
    let bootstrap = cargo_lambda.build_aggregator();
    let table = dynalimit_tests::table().await;
    let repo = table.repository("default").await;
    let t = template();
    let api = RuntimeApi::start(&cargo_lambda);
    let resources = BTreeMap::from([("RateLimitsTable", table.name().to_owned())]);
    let mut env: Vec<(String, String)> =
        function_environment(&t, "ProvisionerFunction", &resources)
            .into_iter()
            .collect();
    assert!(env.contains(&("_HANDLER".into(), "provisioner".into())));
    env.extend(api.runtime_environment("256"));
    env.extend(endpoint_environment());
    let function = Function::spawn(&bootstrap, &env);
    let invoke = |payload: Value| {
        let api = &api;
        async move { api.invoke(&payload).await }
    };

    // Direct: a plan writes nothing; an apply writes; a second apply changes nothing.
    let (status, plan) = invoke(json!({"action": "plan", "manifest": MANIFEST})).await;
    assert_eq!(status, 200, "{plan}\n{}", function.output());
    assert_eq!(plan["applied"], false);
    assert_eq!(plan["changes"].as_array().map(Vec::len), Some(2), "{plan}");
    assert_eq!(resource_limits(&repo, "gpt-4").await, None);
    let (_, applied) =
        invoke(json!({"action": "apply", "manifest": MANIFEST, "full": "false"})).await;
    assert_eq!(applied["applied"], true, "{applied}\n{}", function.output());
    let gpt4 = resource_limits(&repo, "gpt-4").await.expect("applied");
    assert!(gpt4.iter().any(|l| l.name() == "tpm" && l.is_soft()));
    let (_, again) = invoke(json!({"action": "apply", "manifest": MANIFEST})).await;
    assert_eq!(again["changes"], json!([]), "{again}");
    assert_eq!(again["unchanged"], 2);
    let (_, refused) = invoke(
        json!({"action": "apply", "manifest": {"resources": {"r": {"limits": {"ttl": "1/min"}}}}}),
    )
    .await;
    assert!(
        refused.to_string().contains("ttl"),
        "a reserved name is refused: {refused}"
    );

    // Custom resource: create, with every scalar a string ("false" is false).
    let catcher = ResponseCatcher::start().await;
    let id = physical_id(table.name(), repo.namespace_id());
    let create_props = properties(table.name(), "200", true);
    let (_, created) = invoke(request(
        "Create",
        &catcher.url("/create?X-Amz-Signature=s"),
        "create-1",
        None,
        create_props.clone(),
        None,
    ))
    .await;
    let put = answer(&catcher.caught(), "create-1");
    assert_eq!(put.method, "PUT");
    assert_eq!(put.path, "/create?X-Amz-Signature=s");
    assert_eq!(
        put.content_type.as_deref(),
        Some(""),
        "signed without a type"
    );
    assert_eq!(
        put.body["Status"],
        "SUCCESS",
        "{created}\n{}",
        function.output()
    );
    assert_eq!(put.body["PhysicalResourceId"], id);
    assert_eq!(put.body["LogicalResourceId"], "Limits");
    let config = repo.get_resource_defaults("gpt-4").await.unwrap().unwrap();
    assert_eq!(config.cascade, Some(false), "'false' is false");
    assert_eq!(
        config.disabled,
        Some(DisabledFlag::Enabled),
        "'false' is not disabled"
    );
    assert!(
        config.limits.iter().all(|l| !l.is_soft()),
        "'false' is not soft: {:?}",
        config.limits
    );
    assert_eq!(
        repo.get_resource_defaults("gpt-3")
            .await
            .unwrap()
            .unwrap()
            .disabled,
        Some(DisabledFlag::Bypass)
    );

    // Update: gpt-3 leaves the properties (removed), rpm changes. Its first answer is not
    // delivered: the invocation fails, though the table was applied.
    let update_props = properties(table.name(), "300", false);
    let update = request(
        "Update",
        &catcher.url("/update"),
        "update-1",
        Some(&id),
        update_props.clone(),
        Some(create_props.clone()),
    );
    catcher.refuse_next(1);
    let (status, lost) = invoke(update.clone()).await;
    assert!(
        status != 200 || lost.get("errorMessage").is_some(),
        "an undelivered answer fails the invocation: {status} {lost}"
    );
    assert_eq!(answer(&catcher.caught(), "update-1").status, 500);
    assert_eq!(resource_limits(&repo, "gpt-3").await, None);
    let rpm = |limits: Vec<Limit>| limits.into_iter().find(|l| l.name() == "rpm").unwrap();
    assert_eq!(
        rpm(resource_limits(&repo, "gpt-4").await.unwrap()).capacity(),
        300
    );
    // Redelivered: nothing left to change, answered with the same physical id.
    let (status, _) = invoke(update).await;
    assert_eq!(status, 200, "{}", function.output());
    let put = answer(&catcher.caught(), "update-1");
    assert_eq!((put.status, &put.body["Status"]), (200, &json!("SUCCESS")));
    assert_eq!(put.body["PhysicalResourceId"], id);
    assert_eq!(
        (
            &put.body["Data"]["Created"],
            &put.body["Data"]["Updated"],
            &put.body["Data"]["Deleted"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{put:?}"
    );

    // Delete: the levels the properties declare go; the others stay.
    let (_, _) = invoke(request(
        "Delete",
        &catcher.url("/delete"),
        "delete-1",
        Some(&id),
        update_props,
        None,
    ))
    .await;
    let put = answer(&catcher.caught(), "delete-1");
    assert_eq!(put.body["Status"], "SUCCESS", "{put:?}");
    assert_eq!(put.body["PhysicalResourceId"], id);
    assert_eq!(resource_limits(&repo, "gpt-4").await, None);
    assert_eq!(repo.get_limits("key-2", "gpt-4").await.unwrap(), None);
    assert!(
        repo.get_limits("key-1", "gpt-4").await.unwrap().is_some(),
        "a level the resource never declared stays"
    );

    // A refused create fails under the id "failed"; its rollback's delete removes nothing.
    let mut bad = properties(table.name(), "10", false);
    bad["Resources"]["gpt-4"]["Disabled"] = json!("yes");
    invoke(request(
        "Create",
        &catcher.url("/bad"),
        "bad-1",
        None,
        bad.clone(),
        None,
    ))
    .await;
    let put = answer(&catcher.caught(), "bad-1");
    assert_eq!(put.body["Status"], "FAILED");
    assert_eq!(put.body["PhysicalResourceId"], FAILED_ID);
    assert!(
        put.body["Reason"]
            .as_str()
            .unwrap()
            .contains("Resources.gpt-4.Disabled"),
        "{put:?}"
    );
    assert_eq!(
        resource_limits(&repo, "gpt-4").await,
        None,
        "nothing written"
    );
    invoke(request(
        "Delete",
        &catcher.url("/bad-delete"),
        "bad-2",
        Some(FAILED_ID),
        bad,
        None,
    ))
    .await;
    assert_eq!(answer(&catcher.caught(), "bad-2").body["Status"], "SUCCESS");
    assert!(repo.get_limits("key-1", "gpt-4").await.unwrap().is_some());
}
