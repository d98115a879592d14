//! alerts: thresholds set, listed and cleared through the command line; bad ones refused
//! before the table is touched.

use serde_json::json;

use crate::{Fixture, run_on};

#[tokio::test]
async fn alerts_set_list_and_clear() {
    let f = Fixture::new().await;
    let set = f
        .run(&["alerts", "set", "acme", "gpt-4", "tpd", "100,80"])
        .json();
    assert_eq!(
        set,
        json!({ "entity": "acme", "resource": "gpt-4", "limit": "tpd", "percent": [80, 100] })
    );
    f.run(&["alerts", "set", "acme", "claude", "tpd", "90"])
        .json();
    let listed = f.run(&["alerts", "list", "acme"]).json();
    assert_eq!(
        listed,
        json!([
            { "entity": "acme", "resource": "claude", "limit": "tpd", "percent": [90] },
            { "entity": "acme", "resource": "gpt-4", "limit": "tpd", "percent": [80, 100] },
        ])
    );
    let cleared = f
        .run(&["alerts", "clear", "acme", "gpt-4", "--limit", "tpd"])
        .json();
    assert_eq!(cleared["cleared"], true);
    let again = f
        .run(&["alerts", "clear", "acme", "gpt-4", "--limit", "tpd"])
        .json();
    assert_eq!(again["cleared"], false);
    assert_eq!(
        f.run(&["alerts", "list", "acme"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The table as a person reads it.
    let text = run_on(
        dynalimit_tests::endpoint().url(),
        f.table.name(),
        &["alerts", "list", "acme"],
    );
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains("claude"), "{}", text.stdout);
}

#[tokio::test]
async fn bad_thresholds_exit_2_and_write_nothing() {
    let f = Fixture::new().await;
    for (args, needle) in [
        (
            vec!["alerts", "set", "acme", "gpt-4", "tpd", "0"],
            "1 to 100",
        ),
        (
            vec!["alerts", "set", "acme", "gpt-4", "tpd", "80,80"],
            "once",
        ),
        (
            vec!["alerts", "set", "acme", "gpt-4", "wcu", "80"],
            "reserved",
        ),
        (
            vec!["alerts", "set", "ac#me", "gpt-4", "tpd", "80"],
            "entity",
        ),
        (
            vec![
                "alerts",
                "set",
                "acme",
                "gpt-4",
                "tpd",
                "1,2,3,4,5,6,7,8,9,10,11",
            ],
            "at most 10",
        ),
        (
            vec!["alerts", "clear", "acme", "gpt-4", "--limit", "t d"],
            "limit name",
        ),
    ] {
        f.run(&args).fails(2, needle);
    }
    // 300 does not fit a percentage: refused by the argument parser.
    assert_eq!(
        f.run(&["alerts", "set", "acme", "gpt-4", "tpd", "300"])
            .code,
        2
    );
    assert!(f.table.scan_all().await.is_empty(), "nothing written");
}

#[tokio::test]
async fn refusal_alerts_are_set_listed_and_cleared_beside_the_percentages() {
    let f = Fixture::new().await;
    let set = f
        .run(&[
            "alerts",
            "set",
            "acme",
            "gpt-4",
            "rpm",
            "--refusing-for",
            "5m",
        ])
        .json();
    assert_eq!(
        set,
        json!({ "entity": "acme", "resource": "gpt-4", "limit": "rpm", "percent": [], "refusing_for_minutes": 5 })
    );
    // Both on one limit, in one command; an hour is 60 minutes.
    let both = f
        .run(&[
            "alerts",
            "set",
            "acme",
            "gpt-4",
            "tpd",
            "80",
            "--refusing-for",
            "1h",
        ])
        .json();
    assert_eq!(both["percent"], json!([80]));
    assert_eq!(both["refusing_for_minutes"], 60);
    let listed = f.run(&["alerts", "list", "acme"]).json();
    assert_eq!(
        listed,
        json!([
            { "entity": "acme", "resource": "gpt-4", "limit": "rpm", "percent": [], "refusing_for_minutes": 5 },
            { "entity": "acme", "resource": "gpt-4", "limit": "tpd", "percent": [80], "refusing_for_minutes": 60 },
        ])
    );
    // Clearing a limit clears its refusal alert too.
    let cleared = f
        .run(&["alerts", "clear", "acme", "gpt-4", "--limit", "rpm"])
        .json();
    assert_eq!(cleared["cleared"], true);
    let listed = f.run(&["alerts", "list", "acme"]).json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["limit"], "tpd");
    let cleared = f.run(&["alerts", "clear", "acme", "gpt-4"]).json();
    assert_eq!(cleared["cleared"], true);
    assert_eq!(f.run(&["alerts", "list", "acme"]).json(), json!([]));
}

#[tokio::test]
async fn bad_refusal_alerts_exit_2_and_write_nothing() {
    let f = Fixture::new().await;
    for (entity, minutes, needle) in [
        ("acme", "0m", "1 to 60 minutes"),
        ("acme", "61m", "1 to 60 minutes"),
        ("acme", "2h", "1 to 60 minutes"),
        ("acme", "5", "5m"),
        ("acme", "5s", "5m"),
        ("ac#me", "5m", "entity"),
    ] {
        let args = [
            "alerts",
            "set",
            entity,
            "gpt-4",
            "rpm",
            "--refusing-for",
            minutes,
        ];
        f.run(&args).fails(2, needle);
    }
    // Neither percentages nor --refusing-for: refused by the argument parser.
    assert_eq!(f.run(&["alerts", "set", "acme", "gpt-4", "rpm"]).code, 2);
    assert!(f.table.scan_all().await.is_empty(), "nothing written");
}
