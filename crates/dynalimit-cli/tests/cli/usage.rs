//! usage: snapshots and summary, on snapshot items in the aggregator's format.

use dynalimit_format::item::{n, s};
use dynalimit_format::keys;
use serde_json::json;

use crate::Fixture;

/// Creates `key-1` and returns the default namespace's id.
fn key_1_namespace(f: &Fixture) -> String {
    f.run(&["entity", "create", "key-1"]).json();
    f.run(&["namespace", "get", "default"]).json()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Puts a snapshot of `key-1` on `gpt-4` as the aggregator writes it, with `counters`.
async fn put_snapshot(f: &Fixture, ns: &str, window: &str, start: &str, counters: &[(&str, i64)]) {
    let table = &f.table;
    let mut put = table
        .client()
        .put_item()
        .table_name(table.name())
        .item("PK", s(keys::entity_pk(ns, "key-1")))
        .item("SK", s(format!("{}gpt-4#{start}", keys::USAGE_SK_PREFIX)))
        .item("entity_id", s("key-1"))
        .item("resource", s("gpt-4"))
        .item("window", s(window))
        .item("window_start", s(start))
        .item("GSI2PK", s(keys::resource_pk(ns, "gpt-4")))
        .item("GSI2SK", s(format!("USAGE#{start}#key-1")));
    for (name, value) in counters {
        put = put.item(*name, n(*value));
    }
    put.send().await.expect("put snapshot");
}

#[tokio::test]
async fn usage_lists_snapshots_and_summarises_them() {
    let f = Fixture::new().await;
    let table = &f.table;
    let ns = key_1_namespace(&f);
    for (window, start, rpm, tpm) in [
        ("hourly", "2026-11-22T01:00:00Z", 3, 300),
        ("hourly", "2026-11-22T02:00:00Z", 5, 700),
        ("daily", "2026-11-22T00:00:00Z", 8, 1000),
    ] {
        let counters = [("rpm", rpm), ("tpm", tpm), ("total_events", rpm)];
        put_snapshot(&f, &ns, window, start, &counters).await;
    }
    let hourly = f
        .run(&[
            "usage",
            "--entity",
            "key-1",
            "--resource",
            "gpt-4",
            "--window",
            "hourly",
        ])
        .json();
    let starts: Vec<&str> = hourly
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["window_start"].as_str().unwrap())
        .collect();
    assert_eq!(
        starts,
        ["2026-11-22T02:00:00Z", "2026-11-22T01:00:00Z"],
        "newest first"
    );
    assert_eq!(hourly[0]["counters"], json!({ "rpm": 5, "tpm": 700 }));
    let by_resource = f.run(&["usage", "--resource", "gpt-4"]).json();
    assert_eq!(by_resource.as_array().unwrap().len(), 3);
    let summary = f
        .run(&[
            "usage", "summary", "--entity", "key-1", "--window", "hourly",
        ])
        .json();
    assert_eq!(summary["snapshots"], 2);
    assert_eq!(summary["total"], json!({ "rpm": 8, "tpm": 1000 }));
    assert_eq!(summary["average"]["tpm"], 500.0);
    assert_eq!(summary["first_window"], "2026-11-22T01:00:00Z");

    // The next day's hour-00 item, written first by the hourly window: it is also that day's
    // item, so a daily query lists it; an hourly one too.
    table
        .client()
        .put_item()
        .table_name(table.name())
        .item("PK", s(keys::entity_pk(&ns, "key-1")))
        .item(
            "SK",
            s(format!(
                "{}gpt-4#2026-11-23T00:00:00Z",
                keys::USAGE_SK_PREFIX
            )),
        )
        .item("entity_id", s("key-1"))
        .item("resource", s("gpt-4"))
        .item("window", s("hourly"))
        .item("window_start", s("2026-11-23T00:00:00Z"))
        .item("rpm", n(4))
        .item("total_events", n(2))
        .send()
        .await
        .expect("put shared snapshot");
    let starts = |window: &str| -> Vec<String> {
        f.run(&["usage", "--entity", "key-1", "--window", window])
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["window_start"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        starts("daily"),
        ["2026-11-23T00:00:00Z", "2026-11-22T00:00:00Z"]
    );
    assert_eq!(starts("hourly").len(), 3);
    assert!(starts("monthly").is_empty());

    f.run(&["usage"]).fails(2, "");
    f.run(&["usage", "--entity", "key-1", "--limit", "0"])
        .fails(2, "limit");
}

/// `--plot` and `--chart` on snapshots in the aggregator's format: a chart in place of the
/// rows when asked for always (the test's standard output is a pipe, where `--plot` alone
/// prints the rows), an SVG and an HTML file, and every wrong combination refused before any
/// request.
#[tokio::test]
async fn usage_charts_snapshots_on_a_terminal_and_into_a_file() {
    let f = Fixture::new().await;
    let table = &f.table;
    let ns = key_1_namespace(&f);
    for (hour, rpm) in [(1, 3), (2, 12), (3, 6), (4, 9)] {
        let start = format!("2026-11-22T0{hour}:00:00Z");
        let counters = [("rpm", rpm), ("rpm#od", 1), ("total_events", rpm)];
        put_snapshot(&f, &ns, "hourly", &start, &counters).await;
    }
    let endpoint = dynalimit_tests::endpoint().url().to_owned();
    let text = |args: &[&str]| crate::run_on(&endpoint, table.name(), args);
    let base = ["usage", "--entity", "key-1", "--window", "hourly"];

    let plotted = text(&[&base[..], &["--plot=always"]].concat());
    assert_eq!(plotted.code, 0, "{}", plotted.stderr);
    assert!(
        plotted
            .stdout
            .starts_with("rpm: key-1 on gpt-4, hourly (4 windows, total 30, peak 12)\n"),
        "{}",
        plotted.stdout
    );
    assert!(
        plotted
            .stdout
            .contains("2026-11-22T01:00Z to 2026-11-22T04:00Z")
    );
    assert!(
        !plotted.stdout.contains("rpm#od"),
        "overdraw counts are not charted"
    );
    assert!(
        !plotted.stdout.contains("WINDOW_START"),
        "the chart replaces the rows"
    );
    // Into a pipe, --plot alone prints the rows.
    let piped = text(&[&base[..], &["--plot"]].concat());
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    assert!(piped.stdout.contains("2026-11-22T04:00:00Z") && !piped.stdout.contains("peak"));

    let svg_path = crate::temp_file("usage.svg", "");
    let html_path = svg_path.with_extension("html");
    for path in [&svg_path, &html_path] {
        let path = path.to_str().unwrap();
        let written = f.run(&[&base[..], &["--chart", path]].concat());
        let rows = written.json();
        assert_eq!(
            rows.as_array().unwrap().len(),
            4,
            "JSON rows as without --chart"
        );
        assert!(written.stderr.contains("(1 limits)"), "{}", written.stderr);
    }
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("key-1 on gpt-4, hourly"));
    assert!(svg.contains("rpm: whole tokens per window"));
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains(&svg));

    // Refused before any request: a table that does not exist would fail otherwise.
    let nowhere = |args: &[&str]| crate::run_on(&endpoint, "no-such-table", args);
    nowhere(&[&base[..], &["--chart", "usage.png"]].concat()).fails(2, ".svg or .html");
    nowhere(&[&base[..], &["--plot", "--output", "json"]].concat()).fails(2, "--plot");
    nowhere(&["usage", "summary", "--entity", "key-1", "--plot"]).fails(2, "summary");
}
