//! The paths: a service's (open, acquire, adjust, commit, rollback, a dropped lease, a
//! cascade), the CLI's read commands, and a namespace purge; each against dynalimit's template
//! and, when `DYNALIMIT_PYTHON` names the zae-limiter 0.17 install, against the template of
//! that package.

use std::collections::BTreeSet;

use dynalimit::{Concurrency, Limit, RateLimiter};
use dynalimit_format::audit::{SYSTEM_AUDIT_ID, resource_audit_id};
use dynalimit_repository::{NewEntity, Repository, UsageQuery};
use dynalimit_tests::TestTable;
use dynalimit_tests::fault::{FaultProxy, Recorded};
use serde_json::Value;

use dynalimit_tests::policy::{Access, Policy, accesses};

const NS: &str = "svc";

struct Rig {
    table: TestTable,
    template: Value,
    /// zae-limiter 0.17's template, read from the installed package (`None` when
    /// `DYNALIMIT_PYTHON` is unset).
    zae: Option<Value>,
    proxy: FaultProxy,
    admin: Repository,
}

/// A table with namespace `svc`, resource defaults for `gpt-4`, a project `proj` with a
/// cascading child `key-1` (which also has limits of its own), and a proxy in front of it.
async fn rig() -> Rig {
    let table = dynalimit_tests::table().await;
    let admin = table.repository(NS).await;
    admin
        .set_resource_defaults(
            "gpt-4",
            &[
                Limit::per_minute("rpm", 100),
                Limit::per_minute("tpm", 10_000),
            ],
        )
        .await
        .expect("resource defaults");
    admin
        .create_entity(NewEntity::new("proj"))
        .await
        .expect("project");
    admin
        .create_entity(NewEntity::new("key-1").parent("proj").cascade(true))
        .await
        .expect("key");
    admin
        .set_limits(
            "key-1",
            "gpt-4",
            &[
                Limit::per_minute("rpm", 50),
                Limit::per_minute("tpm", 5_000),
            ],
        )
        .await
        .expect("key limits");
    let proxy = FaultProxy::start().await;
    // As zae-limiter's acquire-only and namespace policies do, the proxy refuses every
    // `DescribeTable`: no path below may depend on one.
    proxy.fail_next("DescribeTable", "AccessDeniedException", 1_000_000);
    Rig {
        table,
        template: dynalimit_tests::template::template(),
        zae: dynalimit_tests::zae::template(),
        proxy,
        admin,
    }
}

impl Rig {
    /// A repository on namespace `svc` whose every request, the fast path's included, passes
    /// the proxy; opened as a service opens it.
    async fn open(&self) -> Repository {
        Repository::builder()
            .endpoint_url(self.proxy.url())
            .stack(self.table.name())
            .namespace(NS)
            .open()
            .await
            .expect("open an existing namespace")
    }

    /// The authorisations of every request recorded since the last call.
    fn take(&self) -> (Vec<Recorded>, Vec<Access>) {
        let requests = self.proxy.requests();
        self.proxy.clear_requests();
        let all = requests
            .iter()
            .flat_map(|r| accesses(&self.template, r))
            .collect();
        (requests, all)
    }

    fn policy(&self, name: &str) -> Policy {
        Policy::of(&self.template, name)
    }

    /// Policy `name` of zae-limiter's template, when it was read.
    fn zae_policy(&self, name: &str) -> Option<Policy> {
        self.zae
            .as_ref()
            .map(|t| Policy::of(t, name).named_as_zae())
    }

    /// [`Rig::assert_needed_and_granted`] for each of `names` in zae-limiter's template (nothing
    /// when it was not read).
    fn assert_zae_grants(&self, names: &[&str], all: &[Access], namespace_id: &str) {
        for name in names {
            if let Some(policy) = self.zae_policy(name) {
                self.assert_needed_and_granted(&policy, all, namespace_id);
            }
        }
    }

    /// The accesses `policy` refuses for a principal tagged with `namespace_id`.
    fn denied<'a>(
        &self,
        policy: &Policy,
        all: &'a [Access],
        namespace_id: &str,
    ) -> Vec<&'a Access> {
        all.iter()
            .filter(|a| !policy.allows(a, self.table.name(), namespace_id))
            .collect()
    }

    /// Asserts `policy` allows every access, and that without any one of the actions used it
    /// refuses at least one.
    fn assert_needed_and_granted(&self, policy: &Policy, all: &[Access], namespace_id: &str) {
        let denied = self.denied(policy, all, namespace_id);
        assert!(
            denied.is_empty(),
            "{} refuses:\n{}",
            policy.name,
            lines(&denied)
        );
        let actions: BTreeSet<&str> = all.iter().map(|a| a.action.as_str()).collect();
        for action in actions {
            let less = policy.without_action(action);
            assert!(
                !self.denied(&less, all, namespace_id).is_empty(),
                "{} without {action} would still allow the path",
                policy.name
            );
        }
    }
}

fn lines(accesses: &[&Access]) -> String {
    accesses
        .iter()
        .map(|a| format!("  {a}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One committed acquire of one request of `gpt-4` by `entity`, with limits given inline.
async fn spend_one(limiter: &RateLimiter, entity: &str) {
    limiter
        .acquire(entity, "gpt-4", [("rpm", 1)])
        .limits([Limit::per_minute("rpm", 10)])
        .await
        .expect("admitted")
        .commit()
        .await
        .expect("commit");
}

fn operations(requests: &[Recorded]) -> BTreeSet<&str> {
    requests.iter().map(|r| r.operation.as_str()).collect()
}

#[tokio::test]
async fn a_service_runs_under_the_acquire_only_policies() {
    let rig = rig().await;
    let repo = rig.open().await;
    repo.ping().await.expect("ping reads an item");
    let (opened, open_accesses) = rig.take();
    assert_eq!(
        operations(&opened),
        BTreeSet::from(["GetItem"]),
        "opening an existing namespace and a ping only read items: no DescribeTable"
    );
    assert!(
        repo.fast_path().is_some(),
        "the acquire takes the fast path, which the proxy records too"
    );
    let ns = repo.namespace_id().to_string();
    let limiter = RateLimiter::new(repo.clone());

    // Acquire (cascading to the project), adjust, commit.
    let lease = limiter
        .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 500)])
        .await
        .expect("admitted");
    assert_eq!(lease.entities(), ["key-1", "proj"]);
    lease.adjust("tpm", 200).expect("adjust");
    lease.commit().await.expect("commit");
    // Warm acquires: rollback, and a dropped lease rolled back in the background.
    let lease = limiter
        .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 100)])
        .await
        .expect("admitted");
    lease.rollback().await.expect("rollback");
    drop(
        limiter
            .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 100)])
            .await
            .expect("admitted"),
    );
    limiter.settle().await;
    // Limits given inline, for an entity that has no metadata.
    spend_one(&limiter, "solo").await;
    // A refused acquire, in a namespace with a refusal alert: its refusal is reported in the
    // background, a write to the bucket's shard-0 partition.
    rig.admin
        .set_refusal_alert("solo", "gpt-4", "rpm", 5)
        .await
        .expect("a refusal alert");
    // As the cache's time-to-live passing would.
    repo.invalidate_config_cache().await;
    let refused = limiter
        .acquire("solo", "gpt-4", [("rpm", 10)])
        .limits([Limit::per_minute("rpm", 10)])
        .await;
    assert!(
        matches!(refused, Err(dynalimit::Error::Rejected(_))),
        "{:?}",
        refused.as_ref().err()
    );
    limiter.settle().await;
    let minute = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock) / 60_000;
    assert!(
        !rig.admin
            .refusal_minutes("solo", "gpt-4", "rpm", minute - 1, minute + 1)
            .await
            .expect("refusal minutes")
            .is_empty(),
        "the refusal was reported"
    );
    // A concurrency slot: taken, extended, released; then one taken with the debits.
    let streams = Concurrency::new("streams", 2).expect("a limit");
    let mut slot = limiter
        .hold("key-1", "gpt-4", &streams)
        .await
        .expect("a slot");
    slot.extend().await.expect("extended");
    assert!(slot.release().await.expect("released"));
    limiter
        .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 100)])
        .in_flight(streams)
        .await
        .expect("admitted with a slot")
        .commit()
        .await
        .expect("commit");

    // Concurrency limits stored by an operator for the key and its project: the acquire
    // resolves both and takes a slot of each in its bucket partitions.
    for entity in ["key-1", "proj"] {
        rig.admin
            .set_concurrency_limits(
                Some(entity),
                Some("gpt-4"),
                &[Concurrency::new("jobs", 3).expect("a limit")],
            )
            .await
            .expect("stored");
    }
    // As the cache's time-to-live passing would.
    repo.invalidate_config_cache().await;
    let lease = limiter
        .acquire("key-1", "gpt-4", [("rpm", 1), ("tpm", 100)])
        .await
        .expect("admitted with the stored slots");
    assert_eq!(lease.slots().len(), 2, "the key's slot and the project's");
    lease.commit().await.expect("commit");

    let (requests, mut all) = rig.take();
    let ops = operations(&requests);
    for op in ["BatchGetItem", "TransactWriteItems", "UpdateItem"] {
        assert!(ops.contains(op), "the path sends {op}: {ops:?}");
    }
    all.extend(open_accesses);
    // The list, for the record (`--nocapture`).
    for a in &all {
        eprintln!("{a}");
    }
    rig.assert_needed_and_granted(&rig.policy("AcquireOnlyPolicy"), &all, &ns);
    let scoped = rig.policy("NamespaceAcquirePolicy");
    rig.assert_needed_and_granted(&scoped, &all, &ns);
    // A stack zae-limiter 0.17 deployed: its app role's and its tenants' policies.
    rig.assert_zae_grants(&["AcquireOnlyPolicy", "NamespaceAcquirePolicy"], &all, &ns);
    if let Some(zae) = rig.zae_policy("NamespaceAcquirePolicy") {
        assert!(
            !rig.denied(&zae, &all, "someoneelse").is_empty(),
            "under another namespace's tag zae-limiter's policy refuses too"
        );
    }
    // Under another namespace's tag the scoped policy refuses the bucket writes.
    let foreign = rig.denied(&scoped, &all, "someoneelse");
    assert!(
        foreign
            .iter()
            .any(|a| a.action == "dynamodb:UpdateItem" && a.leading_keys[0].contains("/BUCKET#")),
        "{}",
        lines(&foreign)
    );
    // Nothing the path sends writes outside bucket items.
    for a in &all {
        if matches!(
            a.action.as_str(),
            "dynamodb:PutItem" | "dynamodb:UpdateItem"
        ) {
            assert!(
                a.leading_keys
                    .iter()
                    .all(|k| k.starts_with(&format!("{ns}/BUCKET#")))
            );
        }
    }
}

#[tokio::test]
async fn the_cli_read_commands_run_under_the_read_only_policies() {
    let rig = rig().await;
    // Something to read: usage of a bucket, audit events of the changes above.
    spend_one(&RateLimiter::new(rig.admin.clone()), "key-1").await;
    // As the CLI's `reader()`: the table and namespace must exist.
    let repo = Repository::builder()
        .endpoint_url(rig.proxy.url())
        .stack(rig.table.name())
        .namespace(NS)
        .connect()
        .await
        .expect("connect");
    let ns = repo.namespace_id().to_string();
    // `version --table`, `status`
    repo.version_record()
        .await
        .expect("version")
        .expect("record");
    repo.ping().await.expect("ping");
    // `limits get` (also `--resolved`, resource and system levels), `limits list`
    assert!(repo.get_limits("key-1", "gpt-4").await.unwrap().is_some());
    assert!(repo.get_resource_defaults("gpt-4").await.unwrap().is_some());
    repo.get_system_defaults().await.unwrap();
    repo.resolve_limits("key-1", "gpt-4").await.unwrap();
    assert_eq!(
        repo.list_resources_with_defaults().await.unwrap(),
        ["gpt-4"]
    );
    repo.list_resources_with_entity_configs().await.unwrap();
    let (listed, _) = repo
        .list_entities_with_custom_limits("gpt-4", 10, None)
        .await
        .unwrap();
    assert_eq!(listed, ["key-1"]);
    // `entity get`, `entity children`
    assert!(repo.get_entity("key-1").await.unwrap().is_some());
    assert_eq!(repo.children("proj").await.unwrap().len(), 1);
    // `usage` (by entity, by resource, summary)
    repo.usage_snapshots(&UsageQuery::entity("key-1"), 10, None)
        .await
        .unwrap();
    repo.usage_snapshots(&UsageQuery::resource("gpt-4"), 10, None)
        .await
        .unwrap();
    repo.usage_summary(&UsageQuery::entity("key-1"))
        .await
        .unwrap();
    // `audit` (entity, resource, system)
    assert!(
        !repo
            .audit_events("key-1", 10, None)
            .await
            .unwrap()
            .events
            .is_empty()
    );
    repo.audit_events(&resource_audit_id("gpt-4"), 10, None)
        .await
        .unwrap();
    repo.audit_events(SYSTEM_AUDIT_ID, 10, None).await.unwrap();
    // `namespace list`, `namespace show`, `namespace orphans`
    assert!(!repo.list_namespaces().await.unwrap().is_empty());
    assert!(repo.get_namespace(NS).await.unwrap().is_some());
    repo.list_orphan_namespaces().await.unwrap();

    let (requests, all) = rig.take();
    let ops = operations(&requests);
    assert!(
        ops.iter()
            .all(|op| matches!(*op, "GetItem" | "BatchGetItem" | "Query")),
        "read commands only read items: {ops:?}"
    );
    assert!(
        all.iter().any(|a| a.resource.ends_with("/index/GSI1"))
            && all.iter().any(|a| a.resource.ends_with("/index/GSI2"))
            && all.iter().any(|a| a.resource.ends_with("/index/GSI3")),
        "the reads query the indexes"
    );
    rig.assert_needed_and_granted(&rig.policy("ReadOnlyPolicy"), &all, &ns);
    rig.assert_needed_and_granted(&rig.policy("NamespaceReadOnlyPolicy"), &all, &ns);
    // The acquire-only principals may read as much.
    rig.assert_needed_and_granted(&rig.policy("NamespaceAcquirePolicy"), &all, &ns);
    rig.assert_zae_grants(
        &[
            "ReadOnlyPolicy",
            "NamespaceReadOnlyPolicy",
            "AcquireOnlyPolicy",
            "NamespaceAcquirePolicy",
        ],
        &all,
        &ns,
    );
}

#[tokio::test]
async fn a_purge_queries_gsi4_by_the_bare_namespace_id() {
    let rig = rig().await;
    let doomed = rig.admin.namespace("doomed").await.expect("register");
    let id = doomed.namespace_id().to_string();
    doomed
        .create_entity(NewEntity::new("x"))
        .await
        .expect("entity");
    spend_one(&RateLimiter::new(doomed), "x").await;
    rig.admin.delete_namespace("doomed").await.expect("delete");
    let repo = rig.open().await;
    rig.take();
    assert!(repo.purge_namespace(&id).await.expect("purge") >= 2);
    let (_, all) = rig.take();
    let gsi4 = all
        .iter()
        .find(|a| a.resource.ends_with("/index/GSI4"))
        .expect("the purge lists the namespace's items on GSI4");
    assert_eq!(
        gsi4.leading_keys,
        [id.as_str()],
        "GSI4's key is the bare id"
    );

    rig.assert_needed_and_granted(&rig.policy("FullAccessPolicy"), &all, &id);
    // zae-limiter's namespace policy also grants the writes of the shared `_` partition, so
    // there both of its full-access policies purge.
    rig.assert_zae_grants(
        &["FullAccessPolicy", "NamespaceFullAccessPolicy"],
        &all,
        &id,
    );
    // The namespace's own principal may find and delete every item of its namespace (the
    // bare id is among its LeadingKeys); the registry records of the shared `_` partition
    // stay writable by FullAccessPolicy only, so deleting, recovering and purging a namespace
    // need it.
    let scoped = rig.policy("NamespaceFullAccessPolicy");
    let denied = rig.denied(&scoped, &all, &id);
    assert!(!denied.is_empty());
    assert!(
        denied.iter().all(|a| a.leading_keys == ["_/SYSTEM#"]
            && matches!(
                a.action.as_str(),
                "dynamodb:UpdateItem" | "dynamodb:DeleteItem"
            )),
        "only the registry writes are refused:\n{}",
        lines(&denied)
    );
    assert!(scoped.allows(gsi4, rig.table.name(), &id));
    assert!(!scoped.allows(gsi4, rig.table.name(), "someoneelse"));
    let without_bare = scoped.without_leading_key("${aws:PrincipalTag/zael_namespace_id}");
    assert!(
        !without_bare.allows(gsi4, rig.table.name(), &id),
        "`${{tag}}/*` alone does not match GSI4's bare id"
    );
}
