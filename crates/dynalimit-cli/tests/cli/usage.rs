//! usage: snapshots and summary, on snapshot items in the aggregator's format.

use dynalimit_format::item::{n, s};
use dynalimit_format::keys;
use serde_json::json;

use crate::Fixture;

#[tokio::test]
async fn usage_lists_snapshots_and_summarises_them() {
    let f = Fixture::new().await;
    let table = &f.table;
    f.run(&["entity", "create", "key-1"]).json();
    let ns = f.run(&["namespace", "get", "default"]).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (window, start, rpm, tpm) in [
        ("hourly", "2026-11-22T01:00:00Z", 3, 300),
        ("hourly", "2026-11-22T02:00:00Z", 5, 700),
        ("daily", "2026-11-22T00:00:00Z", 8, 1000),
    ] {
        table
            .client()
            .put_item()
            .table_name(table.name())
            .item("PK", s(keys::entity_pk(&ns, "key-1")))
            .item("SK", s(format!("{}gpt-4#{start}", keys::USAGE_SK_PREFIX)))
            .item("entity_id", s("key-1"))
            .item("resource", s("gpt-4"))
            .item("window", s(window))
            .item("window_start", s(start))
            .item("GSI2PK", s(keys::resource_pk(&ns, "gpt-4")))
            .item("GSI2SK", s(format!("USAGE#{start}#key-1")))
            .item("rpm", n(rpm))
            .item("tpm", n(tpm))
            .item("total_events", n(rpm))
            .send()
            .await
            .expect("put snapshot");
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
