//! `limits plan|diff|apply --file F [--full]` against the test kit's DynamoDB.

use serde_json::{Value, json};

use crate::{Fixture, Run, execute, temp_file};

/// The document a run printed (any exit code), checked against docs/cli-output.md.
fn report(run: &Run) -> Value {
    let value: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", run.stdout, run.stderr));
    crate::documented::check(&run.args, &value);
    value
}

/// The (action, level) of each change.
fn levels(report: &Value) -> Vec<(String, String)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["action"].as_str().unwrap().to_owned(),
                c["level"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, l)| ((*a).to_owned(), (*l).to_owned()))
        .collect()
}

const MANIFEST: &str = "\
system:
  on_unavailable: block
  limits:
    rpm: 1000/min
resources:
  gpt-4:
    cascade: true
    limits:
      rpm: 100/min
      tpm: {rate: 10000, per: min, burst: 20000, soft: true}
  gpt-3:
    disabled: true
entities:
  proj-1:
    parent: null
    resources:
      _default_:
        limits:
          rpm: 5000/min
  key-1:
    parent: proj-1
    resources:
      gpt-4:
        disabled: bypass
        limits:
          requests: {quota: 100, session: day}
";

fn events(f: &Fixture, args: &[&str]) -> usize {
    f.run(&[&["audit"], args].concat())
        .json()
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test]
async fn plan_diff_apply_converge_and_full_removes_what_the_manifest_does_not_name() {
    let f = Fixture::new().await;
    // What the table held before: a level the manifest changes, one it does not name.
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=50/min"])
        .json();
    f.run(&["limits", "set", "--resource", "old", "rpm=1/min"])
        .json();
    let file = temp_file("limits.yaml", MANIFEST);
    let file = file.to_str().unwrap();

    let plan = f.run(&["limits", "plan", "--file", file]).json();
    let expected = pairs(&[
        ("create", "entity proj-1"),
        ("create", "entity key-1"),
        ("create", "system"),
        ("create", "resource gpt-3"),
        ("update", "resource gpt-4"),
        ("create", "entity key-1 on gpt-4"),
        ("create", "entity proj-1 on _default_"),
    ]);
    assert_eq!(levels(&plan), expected, "{plan}");
    assert_eq!(plan["applied"], json!(false));
    let gpt4 = &plan["changes"][4]["attributes"];
    assert_eq!(
        gpt4,
        &json!([
            { "attribute": "limit rpm", "before": "rpm=50/min", "after": "rpm=100/min" },
            { "attribute": "limit tpm", "before": null, "after": "tpm=10000/min:burst=20000:soft" },
            { "attribute": "cascade", "before": null, "after": "true" },
        ])
    );
    // plan and diff write nothing.
    assert_eq!(events(&f, &["--resource", "gpt-4"]), 1);

    let diff = f.run(&["limits", "diff", "--file", file]);
    assert_eq!(diff.code, 2, "drift: {}", diff.stderr);
    assert_eq!(levels(&report(&diff)), expected);

    let applied = f.run(&["limits", "apply", "--file", file]).json();
    assert_eq!(levels(&applied), expected);
    assert_eq!(applied["applied"], json!(true));

    // What the table holds now, read with the other commands.
    let gpt4 = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(
        gpt4["limits"],
        json!(["rpm=100/min", "tpm=10000/min:burst=20000:soft"])
    );
    assert_eq!(gpt4["cascade"], json!(true));
    let gpt3 = f.run(&["limits", "get", "--resource", "gpt-3"]).json();
    assert_eq!(
        (&gpt3["disabled"], &gpt3["limits"]),
        (&json!(true), &json!([]))
    );
    let key = f
        .run(&["limits", "get", "--entity", "key-1", "--resource", "gpt-4"])
        .json();
    assert_eq!(key["limits"], json!(["requests=100/session:day"]));
    assert_eq!(key["disabled"], json!("bypass"));
    assert_eq!(
        f.run(&["entity", "get", "key-1"]).json()["parent_id"],
        json!("proj-1")
    );
    assert_eq!(
        f.run(&["limits", "get", "--system"]).json()["on_unavailable"],
        json!("block")
    );
    // Each write is audited as `limits set` audits it.
    let gpt4_events = events(&f, &["--resource", "gpt-4"]);
    assert!(
        gpt4_events >= 3,
        "limits and the cascade policy: {gpt4_events}"
    );
    let system_events = events(&f, &["--system"]);
    let key_events = events(&f, &["--entity", "key-1"]);
    assert!(key_events >= 3, "created, limits, bypass: {key_events}");

    // A second apply changes nothing and says so; diff finds no drift.
    let again = f.run(&["limits", "apply", "--file", file]).json();
    assert_eq!(again["changes"], json!([]));
    assert_eq!(again["applied"], json!(false));
    assert_eq!(again["unchanged"], json!(7));
    assert_eq!(events(&f, &["--resource", "gpt-4"]), gpt4_events);
    assert_eq!(events(&f, &["--system"]), system_events);
    assert_eq!(events(&f, &["--entity", "key-1"]), key_events);
    let diff = f.run(&["limits", "diff", "--file", file]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    let text = crate::run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &["limits", "apply", "--file", file],
    );
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("No changes"), "{}", text.stdout);

    // The level the manifest does not name is still there; only --full removes it.
    f.run(&["limits", "get", "--resource", "old"]).json();
    let diff = f.run(&["limits", "diff", "--file", file, "--full"]);
    assert_eq!(diff.code, 2);
    assert_eq!(levels(&report(&diff)), pairs(&[("delete", "resource old")]));
    let full = f.run(&["limits", "apply", "--file", file, "--full"]).json();
    assert_eq!(levels(&full), pairs(&[("delete", "resource old")]));
    assert!(f.run(&["limits", "get", "--resource", "old"]).code != 0);
    let diff = f.run(&["limits", "diff", "--file", file, "--full"]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
}

#[tokio::test]
async fn apply_finishes_a_partial_apply() {
    // An apply that stopped half-way (an error, a lost answer) left some levels written:
    // the next apply plans only what is still different.
    let f = Fixture::new().await;
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=100/min"])
        .json();
    let manifest =
        "resources:\n  gpt-4:\n    limits: {rpm: 100/min}\n  gpt-5:\n    limits: {rpm: 7/sec}\n";
    let file = temp_file("partial.yaml", manifest);
    let applied = f
        .run(&["limits", "apply", "--file", file.to_str().unwrap()])
        .json();
    assert_eq!(levels(&applied), pairs(&[("create", "resource gpt-5")]));
    assert_eq!(applied["unchanged"], json!(1));
    let diff = f.run(&["limits", "diff", "--file", file.to_str().unwrap()]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
}

#[tokio::test]
async fn a_level_declared_empty_or_without_a_flag_loses_it() {
    let f = Fixture::new().await;
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=100/min"])
        .json();
    f.run(&["resource", "disable", "gpt-4"]).json();
    f.run(&["limits", "set", "--resource", "gpt-5", "rpm=1/min"])
        .json();
    let manifest = "resources:\n  gpt-4:\n    limits: {rpm: 100/min}\n  gpt-5: {}\n";
    let file = temp_file("flags.yaml", manifest);
    let applied = f
        .run(&["limits", "apply", "--file", file.to_str().unwrap()])
        .json();
    assert_eq!(
        levels(&applied),
        pairs(&[("update", "resource gpt-4"), ("delete", "resource gpt-5")])
    );
    assert_eq!(
        applied["changes"][0]["attributes"],
        json!([{ "attribute": "disabled", "before": "true", "after": null }])
    );
    let gpt4 = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(gpt4["disabled"], Value::Null);
    assert!(f.run(&["limits", "get", "--resource", "gpt-5"]).code != 0);
}

#[tokio::test]
async fn concurrency_limits_are_planned_applied_and_removed_like_the_rest_of_a_level() {
    let f = Fixture::new().await;
    let apply = |manifest: &str| {
        let file = temp_file("concurrency.yaml", manifest);
        f.run(&["limits", "apply", "--file", file.to_str().unwrap()])
            .json()
    };
    let stored =
        |args: &[&str]| f.run(&[&["concurrency", "get"], args].concat()).json()["limits"].clone();
    let applied = apply(
        "resources:\n  gpt-4:\n    limits: {rpm: 100/min}\n    concurrency: {streams: 5}\nentities:\n  proj-1:\n    resources:\n      gpt-4:\n        concurrency: {streams: 200/2m}\n",
    );
    assert_eq!(
        levels(&applied),
        pairs(&[
            ("create", "resource gpt-4"),
            ("create", "entity proj-1 on gpt-4")
        ])
    );
    assert_eq!(stored(&["--resource", "gpt-4"]), json!(["streams=5/30s"]));
    assert_eq!(
        stored(&["--entity", "proj-1", "--resource", "gpt-4"]),
        json!(["streams=200/2m"])
    );
    // Applied again: nothing to change.
    let again = apply(
        "resources:\n  gpt-4:\n    limits: {rpm: 100/min}\n    concurrency: {streams: 5}\nentities:\n  proj-1:\n    resources:\n      gpt-4:\n        concurrency: {streams: 200/2m}\n",
    );
    assert_eq!(levels(&again), pairs(&[]));
    // A level declared without them loses them, and keeps its rate limits.
    let changed = apply(
        "resources:\n  gpt-4:\n    limits: {rpm: 100/min}\nentities:\n  proj-1:\n    resources:\n      gpt-4:\n        concurrency: {streams: 150/2m}\n",
    );
    assert_eq!(
        changed["changes"][0]["attributes"],
        json!([{ "attribute": "concurrency streams", "before": "streams=5/30s", "after": null }])
    );
    assert_eq!(stored(&["--resource", "gpt-4"]), json!([]));
    let gpt4 = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(gpt4["limits"], json!(["rpm=100/min"]));
    assert_eq!(
        stored(&["--entity", "proj-1", "--resource", "gpt-4"]),
        json!(["streams=150/2m"])
    );
}

/// A manifest in zae-limiter 0.17's own form, as its documentation writes one.
const ZAE_MANIFEST: &str = r#"namespace: default
system:
  on_unavailable: allow
  limits:
    rpm: {capacity: 1000, refill_amount: 1000, refill_period: 60}
resources:
  gpt-4:
    cascade: false
    limits:
      tpm:
        capacity: 20000
        refill_amount: 10000
        schedule:
          - {cron: "* 9-17 * * MON-FRI", tz: Europe/Berlin, scale: 0.5}
      tokens:
        capacity: 1000000
        reset_schedule:
          - {cron: "0 0 1 * *", tz: Europe/Berlin}
entities:
  key-1:
    resources:
      gpt-4:
        disabled: false
        limits:
          requests: {capacity: 100, reset_after_seconds: 86400}
          watched: {capacity: 10, soft: true}
"#;

#[tokio::test]
async fn a_zae_limiter_manifest_is_applied_as_it_is() {
    let f = Fixture::new().await;
    let file = temp_file("zae.yaml", ZAE_MANIFEST);
    let file = file.to_str().unwrap();
    let applied = f.run(&["limits", "apply", "--file", file]).json();
    assert_eq!(
        levels(&applied),
        pairs(&[
            ("create", "system"),
            ("create", "resource gpt-4"),
            ("create", "entity key-1 on gpt-4"),
        ])
    );
    let gpt4 = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(
        gpt4["limits"],
        json!([
            "tokens=1000000/quota@Europe/Berlin[0 0 1 * *]",
            "tpm=10000/min:burst=20000@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5]"
        ])
    );
    assert_eq!(gpt4["cascade"], json!(false));
    let key = f
        .run(&["limits", "get", "--entity", "key-1", "--resource", "gpt-4"])
        .json();
    assert_eq!(
        key["limits"],
        json!(["requests=100/session:day", "watched=10/min:soft"])
    );
    assert_eq!(key["disabled"], json!(false));
    let diff = f.run(&["limits", "diff", "--file", file]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    // A manifest for another namespace is refused before anything is read.
    f.run(&["-N", "tenant-b", "limits", "plan", "--file", file])
        .fails(2, "run with -N default");
}

#[tokio::test]
async fn bad_manifests_are_refused_with_their_line_before_anything_is_written() {
    let f = Fixture::new().await;
    f.run(&["limits", "set", "--resource", "base", "rpm=1/min"])
        .json();
    let before = f.run(&["limits", "list"]).json();
    let many: String = (0..17).map(|i| format!("      l{i}: 1/min\n")).collect();
    let cases = [
        (
            "resources:\n  gpt-4:\n    limits: {rpm: 1/min}\n  gpt-5:\n    limts: {}\n".to_owned(),
            "line 5 (resources.gpt-5.limts): unknown key",
        ),
        (
            "resources:\n  gpt-4:\n    limits:\n      ttl: 5/min\n".to_owned(),
            "line 4 (resources.gpt-4.limits.ttl)",
        ),
        (
            "resources:\n  gpt-4:\n    limits:\n      tpm: {capacity: 5, schedule: [{cron: \"61 * * * *\", scale: 2}]}\n".to_owned(),
            "line 4",
        ),
        (
            "resources:\n  gpt-4:\n    limits: {rpm: 1/min}\nentities:\n  a: {parent: b}\n  b: {parent: a}\n"
                .to_owned(),
            "line 5 (entities.a.parent): the parents form a cycle: a -> b -> a",
        ),
        (
            format!("resources:\n  r:\n    limits:\n{many}"),
            "line 3 (resources.r.limits): 17 limits",
        ),
    ];
    for (text, needle) in &cases {
        let file = temp_file("bad.yaml", text);
        for command in ["plan", "diff", "apply"] {
            let run = f.run(&["limits", command, "--file", file.to_str().unwrap()]);
            let code = if command == "diff" { 1 } else { 2 };
            run.fails(code, needle);
        }
    }
    assert_eq!(f.run(&["limits", "list"]).json(), before, "nothing written");
    assert_eq!(events(&f, &["--resource", "gpt-4"]), 0);
    assert!(f.run(&["entity", "get", "a"]).code != 0);
}

/// Runs `tests/cli/zae_provisioner.py` with the interpreter of `DYNALIMIT_PYTHON`.
fn provisioner(python: &str, table: &str, namespace_id: &str, file: &str, mode: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/zae_provisioner.py");
    let out = std::process::Command::new(python)
        .args([
            script,
            dynalimit_tests::endpoint().url(),
            table,
            namespace_id,
            file,
            mode,
        ])
        .output()
        .expect("run the Python interpreter");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script's JSON")
}

/// A manifest applied by zae-limiter 0.17's provisioner code and by dynalimit: each
/// tool's plan reads the other's levels. The limits, flags and settings are the same
/// attributes; dynalimit's writers add what zae-limiter's own client writes too
/// (`config_version`, and an entity level's `GSI3` keys), which the provisioner's plan,
/// comparing whole items, counts as a difference.
#[tokio::test]
async fn a_manifest_applied_by_zae_limiter_s_provisioner_and_by_dynalimit_agree() {
    let Some(python) = std::env::var("DYNALIMIT_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        eprintln!("skipped: DYNALIMIT_PYTHON is not set");
        return;
    };
    let f = Fixture::new().await;
    let ours = temp_file("ours.yaml", ZAE_MANIFEST);
    let ours = ours.to_str().unwrap();
    f.run(&["limits", "apply", "--file", ours]).json();
    let default_id = f.run(&["namespace", "get", "default"]).json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let registered = f.run(&["namespace", "register", "tenant-z"]).json();
    let tenant_id = registered[0]["id"].as_str().unwrap().to_owned();
    let theirs = temp_file(
        "theirs.yaml",
        &ZAE_MANIFEST.replace("namespace: default", "namespace: tenant-z"),
    );
    let theirs = theirs.to_str().unwrap();

    let table = f.table.name();
    let applied = provisioner(&python, table, &tenant_id, theirs, "apply");
    assert_eq!(applied, json!({ "created": 3, "errors": [] }));
    // dynalimit reads what the provisioner wrote as the manifest, with or without --full.
    for extra in [&[][..], &["--full"][..]] {
        let diff = f.run(
            &[
                &["-N", "tenant-z", "limits", "diff", "--file", theirs],
                extra,
            ]
            .concat(),
        );
        assert_eq!(diff.code, 0, "{} {}", diff.stdout, diff.stderr);
    }
    // The provisioner reads dynalimit's levels as its own but for the attributes
    // dynalimit's writers add.
    let drift = provisioner(&python, table, &default_id, ours, "plan");
    assert_eq!(
        drift,
        json!([
            { "level": "system", "target": null, "only_table": ["config_version"],
              "only_provisioner": [], "differ": [] },
            { "level": "resource", "target": "gpt-4", "only_table": ["config_version"],
              "only_provisioner": [], "differ": [] },
            { "level": "entity", "target": "key-1/gpt-4",
              "only_table": ["GSI3PK", "GSI3SK", "config_version"],
              "only_provisioner": [], "differ": [] },
        ])
    );
}

/// cfn-lint from `$DYNALIMIT_PYTHON_VENV` or the repository's `.cache/venv`, or `None` (printing
/// why) when it is missing and neither `DYNALIMIT_REQUIRE_MOTO=1` nor `CI` asks for it.
fn cfn_lint() -> Option<std::path::PathBuf> {
    let mut candidates = Vec::new();
    if let Some(venv) = std::env::var_os("DYNALIMIT_PYTHON_VENV").filter(|v| !v.is_empty()) {
        candidates.push(std::path::PathBuf::from(venv).join("bin/cfn-lint"));
    }
    candidates.push(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/venv/bin/cfn-lint"),
    );
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(found);
    }
    let message = "cfn-lint not found: run ./scripts/test (it installs it into .cache/venv)";
    if std::env::var("DYNALIMIT_REQUIRE_MOTO").is_ok_and(|v| v == "1")
        || std::env::var_os("CI").is_some_and(|v| !v.is_empty())
    {
        panic!("{message}");
    }
    eprintln!("skipped: {message}");
    None
}

#[test]
fn cfn_template_writes_a_lint_clean_custom_resource_that_reads_back_as_the_manifest() {
    let manifest = "\
namespace: team
system: {on_unavailable: allow, limits: {rpm: 1000/min}}
resources:
  gpt-4:
    cascade: true
    limits:
      tpm: \"10000/min:burst=20000:soft@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5]\"
      tokens: {capacity: 1000000, reset_schedule: [{cron: \"0 0 1 * *\", tz: Europe/Berlin}]}
entities:
  key-1: {parent: proj, resources: {gpt-4: {disabled: bypass, limits: {rpm: 50/min}}}}
";
    let file = temp_file("cfn-manifest.yaml", manifest);
    let file = file.to_str().unwrap();
    let run = execute(crate::command().args([
        "--stack",
        "app",
        "-N",
        "team",
        "limits",
        "cfn-template",
        "--file",
        file,
        "--full",
    ]));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let template: Value = serde_yaml_ng::from_str(&run.stdout).expect("YAML");
    let resource = &template["Resources"]["Limits"];
    assert_eq!(resource["Type"], "Custom::DynalimitLimits");
    let props = &resource["Properties"];
    assert_eq!(
        props["ServiceToken"],
        json!({"Fn::ImportValue": "app-ProvisionerArn"})
    );
    assert_eq!(
        (
            &props["TableName"],
            &props["Namespace"],
            &props["FullApply"]
        ),
        (&json!("app"), &json!("team"), &json!(true))
    );
    // What the provisioner reads from these properties is the manifest.
    let read = dynalimit_manifest::cfn::manifest_of(props).expect("properties");
    let parsed = dynalimit_manifest::parse(manifest).unwrap();
    assert_eq!(
        read,
        dynalimit_manifest::Manifest {
            namespace: None,
            ..parsed
        }
    );
    // A manifest for another namespace is refused before anything is printed.
    let other = execute(crate::command().args(["limits", "cfn-template", "--file", file]));
    other.fails(2, "namespace");
    assert!(other.stdout.is_empty());

    let Some(lint) = cfn_lint() else {
        return;
    };
    let out_file = temp_file("cfn-limits.yaml", &run.stdout);
    let out = std::process::Command::new(lint)
        .arg(&out_file)
        .output()
        .expect("cfn-lint runs");
    assert!(
        out.status.success(),
        "cfn-lint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
