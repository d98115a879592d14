//! Limit names that are item attributes of the table format: refused before any request.

use crate::{Fixture, temp_file};

#[tokio::test]
async fn reserved_limit_names_are_refused_and_nothing_is_written() {
    let f = Fixture::new().await;
    let before = f.table.scan_all().await;
    for args in [
        &["limits", "set", "--system", "ttl=10/min"][..],
        &[
            "limits",
            "set",
            "--resource",
            "gpt-4",
            "rpm=10/min,total_events=5/min",
        ],
        &[
            "limits",
            "set",
            "--entity",
            "key-1",
            "--resource",
            "gpt-4",
            "PK=1/sec",
        ],
    ] {
        f.run(args).fails(2, "reserved");
    }
    let yaml = temp_file(
        "limits.yaml",
        "rpm: 100/min\nwindow:\n  rate: 5\n  per: min\n",
    );
    let run = f.run(&[
        "limits",
        "set",
        "--entity",
        "key-1",
        "--file",
        yaml.to_str().unwrap(),
    ]);
    run.fails(2, "\"window\"");
    assert!(
        run.stderr.contains("usage snapshot items"),
        "{}",
        run.stderr
    );
    assert_eq!(f.table.scan_all().await, before, "something was written");

    // A near miss is an ordinary name.
    let ok = f.run(&["limits", "set", "--system", "TTL=10/min"]).json();
    assert_eq!(ok["limits"], serde_json::json!(["TTL=10/min"]));
}
