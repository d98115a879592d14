//! bench: its JSON report, and its progress with standard output piped, on a table of the test
//! kit's DynamoDB.

use serde_json::Value;

use crate::{Fixture, run_on};

const SMALL: [&str; 9] = [
    "bench",
    "--only",
    "raw-update,warm-acquire",
    "--ops",
    "10",
    "--entities",
    "2",
    "--concurrency",
    "1",
];

#[tokio::test]
async fn bench_json_reports_each_case_and_target() {
    let f = Fixture::new().await;
    let endpoint = dynalimit_tests::endpoint().url();
    let report = run_on(
        endpoint,
        f.table.name(),
        &[&SMALL[..], &["--json"]].concat(),
    )
    .json();
    assert_eq!(
        (report["ops_per_case"].as_u64(), report["entities"].as_u64()),
        (Some(10), Some(2))
    );
    assert!(
        report["machine"]["cpus"].as_u64().is_some_and(|n| n >= 1),
        "{report}"
    );
    assert!(
        report["aggregator"].is_null(),
        "--only without --aggregator: not measured"
    );
    let results = report["results"].as_array().expect("results");
    let cases: Vec<(&str, &str)> = results
        .iter()
        .map(|r| (r["op"].as_str().unwrap(), r["shape"].as_str().unwrap()))
        .collect();
    assert_eq!(
        cases,
        [
            ("raw-update", "hot"),
            ("raw-update", "many"),
            ("warm-acquire", "hot"),
            ("warm-acquire", "many")
        ]
    );
    for r in results {
        assert_eq!(
            (r["concurrency"].as_u64(), r["ops"].as_u64()),
            (Some(1), Some(10))
        );
        let p50 = r["p50_us"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= r["p99_us"].as_f64().unwrap(), "{r}");
        assert!(r["requests_per_op"].as_f64().unwrap() >= 1.0, "{r}");
        assert!(
            r["requests_by_operation"]["UpdateItem"].as_f64().unwrap() >= 1.0,
            "{r}"
        );
        assert!(r["cpu_us_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    let targets = report["targets"].as_array().expect("targets");
    let hot = targets
        .iter()
        .find(|t| t["target"] == "warm acquire p50 <= 1.15 x raw UpdateItem p50 (c=1, hot)")
        .unwrap_or_else(|| panic!("{targets:?}"));
    assert!(
        hot["met"].is_boolean() && hot["value"].as_f64().unwrap() > 0.0,
        "{hot}"
    );
    assert!(
        targets
            .iter()
            .all(|t| t["met"].is_boolean() || t["met"] == Value::Null),
        "{targets:?}"
    );
}

#[tokio::test]
async fn bench_progress_into_a_pipe_is_lines_without_frames() {
    let f = Fixture::new().await;
    let run = run_on(dynalimit_tests::endpoint().url(), f.table.name(), &SMALL);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        !run.stdout.contains('\r') && !run.stderr.contains('\r'),
        "{run:?}"
    );
    assert!(
        run.stderr.contains("warm-acquire"),
        "a line per case: {}",
        run.stderr
    );
    assert!(run.stdout.contains("Targets:"), "{}", run.stdout);
}
