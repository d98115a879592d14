//! namespace, entity, limits, audit, status and version against the test kit's DynamoDB.

use serde_json::{Value, json};

use crate::{Fixture, run_on, temp_file};

#[tokio::test]
async fn namespace_register_list_get_delete_orphans_recover_purge() {
    let f = Fixture::new().await;
    let registered = f
        .run(&["namespace", "register", "tenant-a", "tenant-b"])
        .json();
    let ids: Vec<&str> = registered
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    let again = f.run(&["namespace", "register", "tenant-a"]).json();
    assert_eq!(again[0]["id"], ids[0], "registering is idempotent");

    let names: Vec<String> = f
        .run(&["namespace", "list"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    for n in ["default", "tenant-a", "tenant-b"] {
        assert!(names.contains(&n.to_string()), "{names:?}");
    }
    let a = f.run(&["namespace", "get", "tenant-a"]).json();
    assert_eq!(
        (a["id"].as_str(), a["status"].as_str()),
        (Some(ids[0]), Some("active"))
    );

    f.run(&["namespace", "delete", "tenant-a"])
        .fails(1, "--yes");
    let deleted = f.run(&["namespace", "delete", "tenant-a", "--yes"]).json();
    assert_eq!(deleted["id"], ids[0]);
    f.run(&["namespace", "get", "tenant-a"])
        .fails(1, "tenant-a");
    let orphans = f.run(&["namespace", "orphans"]).json();
    assert!(
        orphans
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == ids[0])
    );

    let recovered = f.run(&["namespace", "recover", ids[0]]).json();
    assert_eq!(recovered["status"], "active");
    assert_eq!(
        f.run(&["namespace", "get", "tenant-a"]).json()["status"],
        "active"
    );

    // Purge: give tenant-b data, delete it, purge it.
    let run_b = |args: &[&str]| f.run(&[&["-N", "tenant-b"], args].concat());
    run_b(&["entity", "create", "k1"]).json();
    f.run(&["namespace", "delete", "tenant-b", "--yes"]).json();
    f.run(&["namespace", "purge", ids[1]]).fails(1, "--yes");
    let purged = f.run(&["namespace", "purge", ids[1], "--yes"]).json();
    assert!(purged["items_deleted"].as_u64().unwrap() >= 1, "{purged}");
    let orphans = f.run(&["namespace", "orphans"]).json();
    assert!(
        !orphans
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == ids[1])
    );
}

#[tokio::test]
async fn entity_create_get_children_delete() {
    let f = Fixture::new().await;
    let parent = f
        .run(&[
            "entity",
            "create",
            "proj-1",
            "--name",
            "Project one",
            "--meta",
            "tier=gold",
        ])
        .json();
    assert_eq!(parent["name"], "Project one");
    assert_eq!(parent["metadata"], json!({ "tier": "gold" }));
    let child = f
        .run(&[
            "entity",
            "create",
            "key-1",
            "--parent",
            "proj-1",
            "--cascade",
        ])
        .json();
    assert_eq!(
        (child["parent_id"].as_str(), child["cascade"].as_bool()),
        (Some("proj-1"), Some(true))
    );
    f.run(&["entity", "create", "key-1"])
        .fails(1, "already exists");

    let got = f.run(&["entity", "get", "key-1"]).json();
    assert_eq!(got["id"], "key-1");
    let children = f.run(&["entity", "children", "proj-1"]).json();
    assert_eq!(children.as_array().unwrap().len(), 1);
    assert_eq!(children[0]["id"], "key-1");

    f.run(&["entity", "delete", "key-1"]).fails(1, "--yes");
    let deleted = f.run(&["entity", "delete", "key-1", "--yes"]).json();
    assert!(deleted["items_deleted"].as_u64().unwrap() >= 1);
    f.run(&["entity", "get", "key-1"]).fails(1, "not found");
    assert_eq!(f.run(&["entity", "children", "proj-1"]).json(), json!([]));
    f.run(&["entity", "create", "bad id!"]).fails(2, "entity");
}

#[tokio::test]
async fn limits_set_get_resolve_list_delete_at_every_level() {
    let f = Fixture::new().await;
    let system = f
        .run(&[
            "limits",
            "set",
            "--system",
            "rpm=1000/min",
            "--on-unavailable",
            "allow",
        ])
        .json();
    assert_eq!(system["limits"], json!(["rpm=1000/min"]));
    assert_eq!(system["on_unavailable"], "allow");
    let resource = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "gpt-4",
            "rpm=100/min,tpm=10000/min:burst=20000",
        ])
        .json();
    assert_eq!(
        resource["limits"],
        json!(["rpm=100/min", "tpm=10000/min:burst=20000"])
    );
    f.run(&["entity", "create", "key-1"]).json();
    let file = temp_file(
        "limits.yaml",
        "rpm: 500/min\ntpm:\n  rate: 50000\n  per: min\n  burst: 90000\n",
    );
    let entity = f
        .run(&[
            "limits",
            "set",
            "--entity",
            "key-1",
            "--resource",
            "gpt-4",
            "--file",
            file.to_str().unwrap(),
        ])
        .json();
    assert_eq!(
        entity["limits"],
        json!(["rpm=500/min", "tpm=50000/min:burst=90000"])
    );
    let default = f
        .run(&["limits", "set", "--entity", "key-1", "rps=5/sec"])
        .json();
    assert_eq!(default["level"], "entity key-1 on _default_");

    let got = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(got["limits"], resource["limits"]);
    let resolved = f
        .run(&[
            "limits",
            "get",
            "--entity",
            "key-1",
            "--resource",
            "gpt-4",
            "--resolved",
        ])
        .json();
    assert_eq!(
        (resolved["source"].as_str(), resolved["limits"][0].as_str()),
        (Some("entity"), Some("rpm=500/min"))
    );
    let other = f
        .run(&[
            "limits",
            "get",
            "--entity",
            "key-1",
            "--resource",
            "claude",
            "--resolved",
        ])
        .json();
    assert_eq!(other["source"], "entity_default");

    let levels = f.run(&["limits", "list"]).json();
    let pairs: Vec<(String, String)> = levels
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap().into(),
                l["resource"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    for want in [("system", ""), ("resource", "gpt-4"), ("entity", "gpt-4")] {
        assert!(pairs.contains(&(want.0.into(), want.1.into())), "{pairs:?}");
    }
    let entities = f.run(&["limits", "list", "--resource", "gpt-4"]).json();
    assert_eq!(
        entities,
        json!([{ "entity": "key-1", "resource": "gpt-4" }])
    );

    let deleted = f
        .run(&[
            "limits",
            "delete",
            "--entity",
            "key-1",
            "--resource",
            "gpt-4",
        ])
        .json();
    assert_eq!(deleted["deleted"], true);
    f.run(&["limits", "get", "--entity", "key-1", "--resource", "gpt-4"])
        .fails(1, "no limits");
    f.run(&["limits", "delete", "--resource", "gpt-4"]).json();
    f.run(&["limits", "delete", "--system"]).json();
    f.run(&["limits", "delete", "--system"])
        .fails(1, "no limits");

    // Bad input: nothing written, one line, exit 2.
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=fast"])
        .fails(2, "whole number");
    f.run(&["limits", "set", "rpm=1/min"])
        .fails(1, "choose a level");
    assert!(f.run(&["limits", "get", "--resource", "gpt-4"]).code != 0);
}

#[tokio::test]
async fn scheduled_limits_are_set_and_shown_in_the_text_form() {
    let f = Fixture::new().await;
    let spec = "tpm=10000/min@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5][* 0-6 * * *=burst 2000]";
    let quota = "day=5000/quota@Europe/Berlin[0 0 * * *]";
    let set = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "gpt-4",
            &format!("{spec},{quota},rpm=100/min"),
        ])
        .json();
    assert_eq!(set["limits"], json!([quota, "rpm=100/min", spec]));
    let got = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(got["limits"], json!([quota, "rpm=100/min", spec]));
    // Two zones on one level are refused before anything is written.
    f.run(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "a=1/min@Europe/Paris[* 0 * * *=scale 2],b=1/min@Asia/Tokyo[* 0 * * *=scale 2]",
    ])
    .fails(2, "one time zone");
    let got = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(
        got["limits"],
        json!([quota, "rpm=100/min", spec]),
        "unchanged"
    );
}

#[tokio::test]
async fn available_shows_each_limit_s_balance_capacity_and_refill_or_reset() {
    let f = Fixture::new().await;
    f.run(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "day=50/quota[0 0 * * *],rpm=100/min",
    ])
    .json();
    f.run(&["entity", "create", "key-1"]).json();
    let shown = f.run(&["entity", "available", "key-1", "gpt-4"]).json();
    assert_eq!(shown["entity_id"], "key-1");
    let limits = shown["limits"].as_array().unwrap();
    let day = limits.iter().find(|l| l["name"] == "day").unwrap();
    assert_eq!(day["kind"], "quota");
    assert_eq!(day["available"], 50, "no bucket yet: the whole allowance");
    assert_eq!(day["capacity"], 50);
    assert!(
        day["resets_at"].as_str().unwrap().ends_with("T00:00:00Z"),
        "{day}"
    );
    let rpm = limits.iter().find(|l| l["name"] == "rpm").unwrap();
    assert_eq!(rpm["kind"], "rate");
    assert_eq!(rpm["refill"], "100/60s");
}

#[tokio::test]
async fn audit_lists_entity_resource_and_system_events() {
    let f = Fixture::new().await;
    f.run(&["entity", "create", "key-1"]).json();
    f.run(&["limits", "set", "--entity", "key-1", "rpm=10/min"])
        .json();
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=10/min"])
        .json();
    f.run(&["limits", "set", "--system", "rpm=10/min"]).json();
    let events = f.run(&["audit", "--entity", "key-1"]).json();
    let actions: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["limits_set", "entity_created"], "newest first");
    assert_eq!(events[0]["principal"], "dynalimit-cli");
    let one = f
        .run(&["audit", "--entity", "key-1", "--limit", "1"])
        .json();
    assert_eq!(one.as_array().unwrap().len(), 1);
    let rest = f
        .run(&[
            "audit",
            "--entity",
            "key-1",
            "--after",
            one[0]["event_id"].as_str().unwrap(),
        ])
        .json();
    assert_eq!(rest[0]["action"], "entity_created");
    assert_eq!(
        f.run(&["audit", "--resource", "gpt-4"]).json()[0]["action"],
        "limits_set"
    );
    assert_eq!(
        f.run(&["audit", "--system"]).json()[0]["action"],
        "limits_set"
    );
    f.run(&["audit", "--entity", "key-1", "--limit", "0"])
        .fails(2, "limit");
}

#[tokio::test]
async fn status_and_version_read_the_table() {
    let f = Fixture::new().await;
    // The kit's table has no version record until a repository opens it.
    f.run(&["namespace", "register", "default"]).json();
    let status = f.run(&["status"]).json();
    assert_eq!(status["table_status"], "ACTIVE");
    assert_eq!(
        status["schema_version"],
        dynalimit_format::version::SCHEMA_VERSION
    );
    let version = f.run(&["version", "--table"]).json();
    assert_eq!(version["dynalimit"], env!("CARGO_PKG_VERSION"));
    assert_eq!(version["compatible"], true);
    assert_eq!(
        version["table_updated_by"],
        dynalimit_format::version::writer_tag()
    );
    let plain = f.run(&["version"]).json();
    assert!(plain.get("table_schema_version").is_none());

    let missing = run_on(
        dynalimit_tests::endpoint().url(),
        "no-such-table",
        &["status"],
    );
    missing.fails(4, "does not exist");
    let missing = run_on(
        dynalimit_tests::endpoint().url(),
        "no-such-table",
        &["entity", "get", "x"],
    );
    missing.fails(4, "does not exist");
}

#[tokio::test]
async fn table_output_is_aligned_text() {
    let f = Fixture::new().await;
    let run = run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &["limits", "set", "--resource", "gpt-4", "rpm=100/min"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("limits") && l.ends_with("rpm=100/min")),
        "{}",
        run.stdout
    );
    let run = run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &["namespace", "list"],
    );
    assert!(run.stdout.starts_with("CREATED_AT"), "{}", run.stdout);
}

#[tokio::test]
async fn resource_and_entity_disable_enable_clear() {
    let f = Fixture::new().await;
    let disabled = f.run(&["resource", "disable", "gpt-4"]).json();
    assert_eq!(
        disabled,
        json!({ "resource": "gpt-4", "disabled": true, "buckets_stamped": 0 })
    );
    let enabled = f
        .run(&["entity", "enable", "key-1", "--resource", "gpt-4"])
        .json();
    assert_eq!(
        enabled,
        json!({ "id": "key-1", "resource": "gpt-4", "disabled": false, "buckets_stamped": 0 })
    );
    let everywhere = f.run(&["entity", "disable", "key-2"]).json();
    assert_eq!(
        (
            everywhere["resource"].clone(),
            everywhere["disabled"].clone()
        ),
        (json!(null), json!(true))
    );
    let cleared = f.run(&["resource", "clear-disabled", "gpt-4"]).json();
    assert_eq!(cleared["disabled"], json!(null));
    f.run(&["entity", "clear-disabled", "key-2"]).json();
    let events = f.run(&["audit", "--resource", "gpt-4"]).json();
    let flags: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["details"]["disabled"])
        .collect();
    assert_eq!(
        flags,
        [&json!(null), &json!(true)],
        "newest first: {events}"
    );
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=10/min"])
        .json();
    f.run(&["resource", "disable", "gpt-4"]).json();
    let level = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(
        (&level["disabled"], &level["cascade"]),
        (&json!(true), &json!(null)),
        "limits get shows the flag as the access commands print it"
    );
    f.run(&["resource", "disable", "bad#name"])
        .fails(2, "resource");
    f.run(&["entity", "disable", "bad id!"]).fails(2, "entity");
}

#[tokio::test]
async fn entity_reset_and_top_up() {
    let f = Fixture::new().await;
    // Ten tokens refilled one per 100 000 s: nothing drips back while the test runs.
    f.run(&["limits", "set", "--resource", "gpt-4", "tpd=10/1000000s"])
        .json();
    f.run(&["entity", "create", "key-1"]).json();
    let repo = f.table.repository("default").await;
    let limiter = dynalimit::RateLimiter::new(repo.clone());
    let spend = |n: i64| {
        let limiter = limiter.clone();
        async move {
            limiter
                .acquire("key-1", "gpt-4", [("tpd", n)])
                .await
                .unwrap()
                .commit()
                .await
                .unwrap();
        }
    };
    spend(6).await;

    let topped = f
        .run(&[
            "entity",
            "top-up",
            "key-1",
            "gpt-4",
            "tpd=4",
            "--idempotency-key",
            "refund-1",
        ])
        .json();
    assert_eq!(
        topped,
        json!({
            "entity_id": "key-1",
            "resource": "gpt-4",
            "operation": "top_up",
            "operation_id": "refund-1",
            "shards": 1,
            "amounts": { "tpd": 4 },
            "replayed": false,
        })
    );
    let again = f
        .run(&[
            "entity",
            "top-up",
            "key-1",
            "gpt-4",
            "tpd=4",
            "--idempotency-key",
            "refund-1",
        ])
        .json();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["amounts"], json!({ "tpd": 4 }));
    assert_eq!(
        limiter.available("key-1", "gpt-4", &[]).await.unwrap()["tpd"],
        8,
        "applied once"
    );
    // Only two tokens of room are left: that is what a top-up of 3 grants, with a note.
    let short = f.run(&["entity", "top-up", "key-1", "gpt-4", "tpd=3"]);
    assert_eq!(short.json()["amounts"], json!({ "tpd": 2 }));
    assert!(
        short.stderr.contains("granted less than asked"),
        "{}",
        short.stderr
    );

    spend(7).await;
    let reset = f.run(&["entity", "reset", "key-1", "gpt-4"]).json();
    assert_eq!(
        (
            reset["operation"].as_str(),
            reset["shards"].as_u64(),
            &reset["amounts"]
        ),
        (Some("reset"), Some(1), &json!({ "tpd": 7 }))
    );
    assert_eq!(reset["operation_id"].as_str().map(str::len), Some(26));
    assert_eq!(
        limiter.available("key-1", "gpt-4", &[]).await.unwrap()["tpd"],
        10
    );
    let audit = f.run(&["audit", "--entity", "key-1"]).json();
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions[..3],
        ["bucket_reset", "bucket_topped_up", "bucket_topped_up"]
    );

    // Human output: one `key  value` line per field.
    let run = run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &["entity", "reset", "key-1", "gpt-4"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("operation") && l.ends_with("reset")),
        "{}",
        run.stdout
    );
    // No bucket yet: nothing to reset, said on stderr.
    f.run(&["entity", "create", "key-2"]).json();
    let none = f.run(&["entity", "reset", "key-2", "gpt-4"]);
    assert_eq!(none.json()["shards"], 0);
    assert!(none.stderr.contains("no bucket"), "{}", none.stderr);

    f.run(&["entity", "top-up", "key-1", "gpt-4", "tpd"])
        .fails(2, "NAME=AMOUNT");
    f.run(&["entity", "top-up", "key-1", "gpt-4", "tpd=0"])
        .fails(2, "amounts");
    f.run(&["entity", "top-up", "key-1", "gpt-4", "tpd=1", "tpd=2"])
        .fails(2, "twice");
    f.run(&[
        "entity",
        "reset",
        "key-1",
        "gpt-4",
        "--idempotency-key",
        "a#b",
    ])
    .fails(2, "idempotency_key");
    f.run(&["entity", "top-up", "key-1", "gpt-4", "tpm=1"])
        .fails(2, "tpm");
    f.run(&[
        "entity",
        "top-up",
        "key-1",
        "gpt-4",
        "tpd=1",
        "--idempotency-key",
        "refund-1-reset",
    ])
    .json();
    f.run(&[
        "entity",
        "reset",
        "key-1",
        "gpt-4",
        "--idempotency-key",
        "refund-1-reset",
    ])
    .fails(1, "already used for a top_up");
    f.run(&["entity", "reset", "key-1", "claude"])
        .fails(1, "limits");
}

#[tokio::test]
async fn bypass_cascade_policies_parent_moves_and_session_quotas() {
    let f = Fixture::new().await;
    let bypassed = f.run(&["resource", "bypass", "gpt-4"]).json();
    assert_eq!(
        bypassed,
        json!({ "resource": "gpt-4", "disabled": "bypass", "buckets_stamped": 0 })
    );
    let entity = f
        .run(&["entity", "bypass", "key-1", "--resource", "gpt-4"])
        .json();
    assert_eq!(entity["disabled"], json!("bypass"));
    f.run(&["entity", "create", "org-1"]).json();
    f.run(&["entity", "create", "org-2"]).json();
    f.run(&["entity", "create", "key-1", "--parent", "org-1"])
        .json();
    let policy = f
        .run(&[
            "entity",
            "set-cascade",
            "key-1",
            "on",
            "--resource",
            "gpt-4",
        ])
        .json();
    assert_eq!(
        policy,
        json!({ "id": "key-1", "resource": "gpt-4", "cascade": true, "buckets_stamped": 0 })
    );
    let resource = f
        .run(&["resource", "set-cascade", "gpt-4", "inherit"])
        .json();
    assert_eq!(resource["cascade"], json!(null));
    let moved = f.run(&["entity", "set-parent", "key-1", "org-2"]).json();
    assert_eq!(moved["parent_id"], json!("org-2"));
    let shown = f.run(&["entity", "get", "key-1"]).json();
    assert_eq!(shown["parent_id"], json!("org-2"));
    let detached = f.run(&["entity", "set-parent", "key-1", "--none"]).json();
    assert_eq!(detached["parent_id"], json!(null));
    f.run(&["entity", "set-parent", "key-1", "key-1"])
        .fails(2, "own parent");
    f.run(&["entity", "set-cascade", "key-1", "sometimes"])
        .fails(2, "sometimes");
    f.run(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "requests=100/session:day,rpm=10/min",
    ])
    .json();
    let shown = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert!(
        shown.to_string().contains("requests=100/session:day"),
        "{shown}"
    );
    let repo = f.table.repository("default").await;
    let record = repo.version_record().await;
    assert_eq!(record.unwrap().unwrap().client_min_version, "0.17.0");
    dynalimit::RateLimiter::new(repo)
        .acquire("key-2", "gpt-4", [("requests", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    let shown = f.run(&["entity", "available", "key-2", "gpt-4"]).json();
    let session = shown["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "requests")
        .unwrap()
        .clone();
    assert_eq!(session["kind"], "session quota");
    assert_eq!(session["available"], 99);
    assert_eq!(session["window_seconds"], 86_400);
    assert!(session["resets_at"].is_string(), "{session}");
}

/// What another writer of the table may store in an id, a resource or a principal: a colour
/// escape, a right-to-left override and a line break.
const HOSTILE: &str = "\u{1b}[31mevil\u{202e}txt\nnext";

/// No character a terminal would act on (the layout's own line breaks aside).
fn assert_inert(text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| c != '\n' && (c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c))),
        "{text:?}"
    );
}

#[tokio::test]
async fn strings_from_the_table_are_printed_inert_in_both_forms() {
    use dynalimit_format::audit::{AuditAction, NewAuditEvent};
    use dynalimit_format::entity::NewEntity;

    let f = Fixture::new().await;
    f.run(&["entity", "create", "key-1"]).json();
    let repo = f.table.repository("default").await;
    let ns = repo.namespace_id();
    let now = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock);
    let event = NewAuditEvent {
        entity_id: "key-1",
        event_id: "01ZZZZZZZZZZZZZZZZZZZZZZZZ",
        at: now,
        action: AuditAction::LimitsSet,
        principal: Some(HOSTILE),
        resource: Some(HOSTILE),
        details: Default::default(),
        retention_days: 1,
    }
    .into_item(ns);
    let child = NewEntity::new(HOSTILE)
        .parent("key-1")
        .meta_item(ns, now, "incarnation");
    for item in [event, child] {
        f.table
            .client()
            .put_item()
            .table_name(f.table.name())
            .set_item(Some(item))
            .send()
            .await
            .expect("a raw write");
    }
    let escaped = r"\u{1b}[31mevil\u{202e}txt\nnext";
    let url = dynalimit_tests::endpoint().url();
    // The table form: one line per event (a heading, ours, entity_created), escaped.
    let text = run_on(url, f.table.name(), &["audit", "--entity", "key-1"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert_inert(&text.stdout);
    assert_eq!(text.stdout.lines().count(), 3, "{}", text.stdout);
    assert_eq!(text.stdout.matches(escaped).count(), 2, "{}", text.stdout);
    let text = run_on(url, f.table.name(), &["entity", "children", "key-1"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert_inert(&text.stdout);
    assert_eq!(text.stdout.lines().count(), 2, "{}", text.stdout);
    assert!(text.stdout.contains(escaped), "{}", text.stdout);
    // The JSON form: escaped as JSON, read back as stored.
    let json = f.run(&["audit", "--entity", "key-1"]);
    assert_inert(&json.stdout);
    let events = json.json();
    assert_eq!(events[0]["principal"], HOSTILE);
    assert_eq!(events[0]["resource"], HOSTILE);
    let json = f.run(&["entity", "children", "key-1"]);
    assert_inert(&json.stdout);
    assert_eq!(json.json()[0]["id"], HOSTILE);
}
