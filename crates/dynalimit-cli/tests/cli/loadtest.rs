//! `loadtest`: admissions within what the limits allow, a service's requests only (granted by
//! the acquire-only policies of both tools' templates), and bad input refused before any
//! request.

use dynalimit_tests::fault::FaultProxy;
use dynalimit_tests::policy::{Policy, accesses};

use crate::{Fixture, run_json_on, run_on};

// Two workers: the proxy serves on the runtime while the test waits for the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_test_admits_within_the_limits_with_acquire_only_requests() {
    let f = Fixture::new().await;
    for entity in ["lt-1", "lt-2"] {
        f.run(&[
            "limits",
            "set",
            "--entity",
            entity,
            "--resource",
            "gpt-4",
            "rpm=20/min",
        ])
        .json();
    }
    let ns = f.run(&["namespace", "get", "default"]).json()["id"]
        .as_str()
        .expect("namespace id")
        .to_owned();
    // Every request passes a proxy that records it and, as zae-limiter's acquire-only and
    // namespace policies do, refuses DescribeTable.
    let proxy = FaultProxy::start().await;
    proxy.fail_next("DescribeTable", "AccessDeniedException", 1_000_000);
    let report = run_json_on(
        &proxy.url(),
        f.table.name(),
        &[
            "loadtest",
            "-e",
            "lt-1",
            "-e",
            "lt-2",
            "-r",
            "gpt-4",
            "--duration",
            "3",
            "--concurrency",
            "4",
        ],
    )
    .json();
    let count = |k: &str| {
        report[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {report}"))
    };
    // Two full buckets of 20, and no more than they allow with their refill.
    assert!(count("admitted") >= 40, "{report}");
    assert!(count("rejected") > 0, "{report}");
    assert_eq!(count("attempts"), count("admitted") + count("rejected"));
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    let rpm = &report["limits"][0];
    assert_eq!(rpm["limit"], "rpm");
    assert_eq!(rpm["admitted_tokens"].as_u64(), Some(count("admitted")));
    let allowance = rpm["allowance"].as_u64().unwrap();
    assert!((40..=60).contains(&allowance), "{report}");
    assert!(count("admitted") <= allowance, "over-admitted: {report}");
    // A first acquire of each bucket, and commits, send requests.
    assert!(
        report["requests_per_acquire"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(report["requests"].as_u64().unwrap() > 0, "{report}");
    assert!(report["p50_ms"].as_f64().unwrap() > 0.0);

    // What it sent is a service's: granted by the acquire-only policies, ours and
    // zae-limiter's, for this namespace.
    let requests = proxy.requests();
    assert!(
        requests
            .iter()
            .all(|r| !matches!(r.operation.as_str(), "DescribeTable" | "Scan")),
        "{:?}",
        requests.iter().map(|r| &r.operation).collect::<Vec<_>>()
    );
    let template = dynalimit_tests::template::template();
    let all: Vec<_> = requests
        .iter()
        .flat_map(|r| accesses(&template, r))
        .collect();
    assert!(all.iter().any(|a| a.action == "dynamodb:UpdateItem"));
    let mut policies = vec![
        Policy::of(&template, "AcquireOnlyPolicy"),
        Policy::of(&template, "NamespaceAcquirePolicy"),
    ];
    if let Some(zae) = dynalimit_tests::zae::template() {
        for name in ["AcquireOnlyPolicy", "NamespaceAcquirePolicy"] {
            policies.push(Policy::of(&zae, name).named_as_zae());
        }
    }
    for policy in &policies {
        let denied: Vec<String> = all
            .iter()
            .filter(|a| !policy.allows(a, f.table.name(), &ns))
            .map(ToString::to_string)
            .collect();
        assert!(denied.is_empty(), "{} refuses {denied:#?}", policy.name);
    }
}

#[tokio::test]
async fn a_load_test_refuses_bad_input_before_any_request() {
    // Nothing listens on port 9 of a loopback address; a non-loopback endpoint needs --yes.
    let base = ["loadtest", "-e", "lt-1", "-r", "gpt-4", "--duration", "1"];
    run_on(
        "http://127.0.0.1:9",
        "x",
        &[&base[..], &["--cost", "rpm=0"]].concat(),
    )
    .fails(2, "positive whole number");
    let missing = run_on("http://127.0.0.1:9", "x", &["loadtest", "-r", "gpt-4"]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("--entity"), "{}", missing.stderr);
    run_on(
        "http://127.0.0.1:9",
        "x",
        &["loadtest", "-e", "bad id!", "-r", "gpt-4"],
    )
    .fails(2, "bad id!");
    run_on(
        "http://10.255.255.1:9",
        "x",
        &[&["--region", "us-east-1"][..], &base[..]].concat(),
    )
    .fails(2, "--yes");
    // An entity without limits at any level is named.
    let f = Fixture::new().await;
    f.run(&["limits", "set", "--resource", "other", "rpm=1/min"])
        .json();
    f.run(&base).fails(2, "no limits");
}
