//! The provisioner's requests against its role: a plan, a full apply that creates, changes
//! and removes every kind of level (limits, flags, `on_unavailable`, concurrency limits,
//! entities and parents),
//! and a custom resource's delete, recorded on the wire and evaluated against the
//! `ApplyLimits` statement of `ProvisionerRole`. The statement grants exactly the actions
//! these requests use.

use std::collections::BTreeSet;

use dynalimit::Limit;
use dynalimit_manifest::provisioner::{CustomResource, Provisioner, physical_id};
use dynalimit_repository::{NewEntity, Repository};
use dynalimit_tests::fault::FaultProxy;
use serde_json::json;

use dynalimit_tests::policy::{Access, Policy, accesses};

const NS: &str = "svc";

const MANIFEST: &str = "\
namespace: svc
system:
  on_unavailable: block
  limits: {rpm: 1000/min}
resources:
  gpt-4:
    cascade: true
    disabled: false
    limits: {rpm: 100/min, tpm: {rate: 10000, per: min, soft: true}}
    concurrency: {streams: 5}
entities:
  proj: {parent: null}
  key-1:
    parent: proj
    resources:
      gpt-4: {disabled: bypass, cascade: false, limits: {rpm: 50/min}, concurrency: {streams: 2/1m}}
  key-2:
    parent: proj
";

#[tokio::test]
async fn the_provisioner_runs_under_exactly_its_role_s_policy() {
    let table = dynalimit_tests::table().await;
    let admin = table.repository(NS).await;
    admin
        .set_resource_defaults("old", &[Limit::per_minute("rpm", 1)])
        .await
        .expect("a level the full apply removes");
    admin
        .create_entity(NewEntity::new("key-2"))
        .await
        .expect("an entity the apply moves under a parent");
    let proxy = FaultProxy::start().await;
    let through_proxy = Repository::builder()
        .endpoint_url(proxy.url())
        .stack(table.name())
        .namespace(NS)
        .connect()
        .await
        .expect("connect");
    let provisioner = Provisioner::new(table.name(), through_proxy.client().clone());

    let planned = provisioner
        .handle(json!({"action": "plan", "manifest": MANIFEST, "full": true}))
        .await
        .expect("plan");
    assert!(!planned["changes"].as_array().unwrap().is_empty());
    let applied = provisioner
        .handle(json!({"action": "apply", "manifest": MANIFEST, "full": "true"}))
        .await
        .expect("apply");
    assert_eq!(applied["applied"], true);
    let streams = admin
        .concurrency_limits(None, Some("gpt-4"))
        .await
        .expect("read");
    assert_eq!(streams.iter().map(|c| c.max()).collect::<Vec<_>>(), [5]);
    let props = json!({
        "ServiceToken": "arn", "TableName": table.name(), "Namespace": NS,
        "Resources": {"gpt-4": {"Cascade": "true", "Disabled": "false",
            "Limits": {"rpm": {"Capacity": "100"}}}},
        "Entities": {"key-1": {"Resources": {"gpt-4": {"Disabled": "bypass"}}}},
    });
    let delete: CustomResource = serde_json::from_value(json!({
        "RequestType": "Delete", "ResponseURL": "http://127.0.0.1:9/unused",
        "StackId": "stack", "RequestId": "r1", "LogicalResourceId": "Limits",
        "PhysicalResourceId": physical_id(table.name(), admin.namespace_id()),
        "ResourceProperties": props,
    }))
    .expect("event");
    let answer = provisioner.custom_resource(&delete).await;
    assert_eq!(answer.status, "SUCCESS", "{answer:?}");
    assert_eq!(answer.data["Deleted"], 2, "{answer:?}");

    let template = dynalimit_tests::template::template();
    let requests = proxy.requests();
    let all: Vec<Access> = requests
        .iter()
        .flat_map(|r| accesses(&template, r))
        .collect();
    let policy = Policy::inline(&template, "ProvisionerRole", "ApplyLimits");
    let denied: Vec<&Access> = all
        .iter()
        .filter(|a| !policy.allows(a, table.name(), admin.namespace_id()))
        .collect();
    assert!(denied.is_empty(), "the role refuses {denied:?}");
    let used: BTreeSet<String> = all.iter().map(|a| a.action.clone()).collect();
    assert_eq!(
        policy.actions(),
        used,
        "the role grants exactly the actions the provisioner uses"
    );
    for action in &used {
        let less = policy.without_action(action);
        assert!(
            all.iter()
                .any(|a| !less.allows(a, table.name(), admin.namespace_id())),
            "without {action} the role would still allow every request"
        );
    }
}
