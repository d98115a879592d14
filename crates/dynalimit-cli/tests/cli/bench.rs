//! bench: its JSON report, and its progress with standard output piped, on a table of the test
//! kit's DynamoDB; `bench --compare zae` against zae-limiter 0.17 on the same table.

use std::path::PathBuf;

use serde_json::Value;

use crate::{Fixture, run_env, run_on};

/// Ten operations per case, two entities, one concurrency.
const TINY: [&str; 6] = ["--ops", "10", "--entities", "2", "--concurrency", "1"];

/// Two cases, tiny.
fn small() -> Vec<&'static str> {
    [&["bench", "--only", "raw-update,warm-acquire"][..], &TINY].concat()
}

#[tokio::test]
async fn bench_json_reports_each_case_and_target() {
    let f = Fixture::new().await;
    let endpoint = dynalimit_tests::endpoint().url();
    let report = run_on(
        endpoint,
        f.table.name(),
        &[&small()[..], &["--json"]].concat(),
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
    assert_eq!(
        report["admission"],
        Value::Array(vec![]),
        "--only without admission: not measured"
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
    let run = run_on(dynalimit_tests::endpoint().url(), f.table.name(), &small());
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

/// The Python with zae-limiter 0.17 named by `DYNALIMIT_PYTHON`, as the interop suite finds it
/// ([`dynalimit_tests::zae::interpreter`]).
fn zae_python() -> Option<PathBuf> {
    dynalimit_tests::zae::interpreter()
}

/// `(op, shape)` of each case of a side.
fn cases(side: &Value) -> Vec<(String, String)> {
    side.as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            (
                c["op"].as_str().unwrap().into(),
                c["shape"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn figure(side: &Value, op: &str, shape: &str, key: &str) -> f64 {
    side.as_array()
        .unwrap()
        .iter()
        .find(|c| c["op"] == op && c["shape"] == shape)
        .unwrap_or_else(|| panic!("no {op} {shape}: {side}"))[key]
        .as_f64()
        .unwrap()
}

#[tokio::test]
async fn bench_compare_zae_reports_both_sides_on_one_table() {
    let Some(python) = zae_python() else {
        return;
    };
    let f = Fixture::new().await;
    let report = run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &[
            &[
                "bench",
                "--compare",
                "zae",
                "--python",
                python.to_str().unwrap(),
            ][..],
            &TINY,
            &["--admission-seconds", "1", "--json"],
        ]
        .concat(),
    )
    .json();
    let peer = &report["peer"];
    assert_eq!(peer["library"], "zae-limiter");
    assert!(
        peer["version"].as_str().unwrap().starts_with("0.17."),
        "{peer}"
    );
    assert_eq!(
        (
            peer["check_requests_sent"].as_u64(),
            peer["check_requests_counted"].as_u64()
        ),
        (Some(5), Some(5)),
        "the peer's counter counts each request once: {peer}"
    );
    let expected: Vec<(String, String)> = ["warm-acquire", "warm-cascade", "adjust", "first-touch"]
        .iter()
        .flat_map(|op| ["hot", "many"].map(|shape| (op.to_string(), shape.to_string())))
        .collect();
    let (ours, zae) = (&report["dynalimit"], &report["zae"]);
    assert_eq!(cases(ours), expected);
    assert_eq!(cases(zae), expected);
    for case in ours
        .as_array()
        .unwrap()
        .iter()
        .chain(zae.as_array().unwrap())
    {
        assert_eq!(
            (case["concurrency"].as_u64(), case["ops"].as_u64()),
            (Some(1), Some(10)),
            "{case}"
        );
        let p50 = case["p50_us"].as_f64().unwrap();
        assert!(
            p50 > 0.0 && p50 <= case["p99_us"].as_f64().unwrap(),
            "{case}"
        );
        assert!(case["cpu_us_per_op"].as_f64().unwrap() > 0.0, "{case}");
    }
    for shape in ["hot", "many"] {
        // dynalimit's warm acquire is its one UpdateItem; zae-limiter's fast path is one too.
        assert_eq!(figure(ours, "warm-acquire", shape, "requests_per_op"), 1.0);
        let zae_warm = figure(zae, "warm-acquire", shape, "requests_per_op");
        assert!((1.0..=2.0).contains(&zae_warm), "{zae}");
        for side in [ours, zae] {
            // A cascade writes the child and the parent; an adjust commits a second write; a
            // first touch reads before it creates.
            assert!(
                figure(side, "warm-cascade", shape, "requests_per_op") >= 2.0,
                "{side}"
            );
            assert!(
                figure(side, "adjust", shape, "requests_per_op") >= 2.0,
                "{side}"
            );
            assert!(
                figure(side, "first-touch", shape, "requests_per_op") >= 2.0,
                "{side}"
            );
        }
    }
    let ratios = report["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), expected.len());
    for r in ratios {
        let (op, shape) = (r["op"].as_str().unwrap(), r["shape"].as_str().unwrap());
        let want = figure(zae, op, shape, "p50_us") / figure(ours, op, shape, "p50_us");
        assert!((r["p50"].as_f64().unwrap() - want).abs() <= 0.01, "{r}");
        assert_eq!(
            r["dynalimit_requests_per_op"].as_f64(),
            Some(figure(ours, op, shape, "requests_per_op"))
        );
        assert_eq!(
            r["zae_requests_per_op"].as_f64(),
            Some(figure(zae, op, shape, "requests_per_op"))
        );
    }
    let admission = report["admission"].as_array().expect("admission");
    let libraries: Vec<&str> = admission
        .iter()
        .map(|a| a["library"].as_str().unwrap())
        .collect();
    assert_eq!(libraries, ["dynalimit", "zae-limiter"]);
    for a in admission {
        assert_eq!(a["errors"], 0, "{a}");
        let efficiency = a["efficiency"].as_f64().unwrap();
        // Never more than the limit allows; a fair share of it even on a loaded machine.
        assert!(efficiency > 0.3 && efficiency <= 1.0, "{a}");
        assert!(a["requests"].as_u64().unwrap() >= 1, "{a}");
    }
}

#[test]
fn bench_compare_without_a_python_says_how_to_get_one() {
    let run = run_env(
        &[("DYNALIMIT_PYTHON", "")],
        &["bench", "--compare", "zae", "--python", "/nowhere/python"],
    );
    run.fails(2, "./scripts/python-env");
    assert!(run.stderr.contains("/nowhere/python"), "{}", run.stderr);
}
