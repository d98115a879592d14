//! concurrency: a level's concurrency limits set, read and cleared through the command line,
//! beside its rate limits; bad ones refused before the table is touched.

use serde_json::json;

use crate::Fixture;

#[tokio::test]
async fn concurrency_set_get_and_clear_leave_the_rate_limits_alone() {
    let f = Fixture::new().await;
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=100/min"])
        .json();
    let set = f
        .run(&[
            "concurrency",
            "set",
            "--resource",
            "gpt-4",
            "streams=5,jobs=2/2m",
        ])
        .json();
    assert_eq!(
        set,
        json!({ "level": "resource gpt-4", "limits": ["jobs=2/2m", "streams=5/30s"] })
    );
    let entity = f
        .run(&["concurrency", "set", "--entity", "acme", "streams=1/1500ms"])
        .json();
    assert_eq!(entity["level"], "entity acme on _default_");
    assert_eq!(entity["limits"], json!(["streams=1/1500ms"]));
    // A rate-limit write of the level keeps them; the rate limits are untouched by theirs.
    f.run(&["limits", "set", "--resource", "gpt-4", "rpm=50/min"])
        .json();
    let got = f.run(&["concurrency", "get", "--resource", "gpt-4"]).json();
    assert_eq!(got["limits"].as_array().unwrap().len(), 2);
    let limits = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(limits["limits"], json!(["rpm=50/min"]), "{limits}");
    let cleared = f
        .run(&["concurrency", "clear", "--resource", "gpt-4"])
        .json();
    assert_eq!(cleared["limits"], json!([]));
    let got = f.run(&["concurrency", "get", "--resource", "gpt-4"]).json();
    assert_eq!(got["limits"], json!([]));
    let limits = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(limits["limits"], json!(["rpm=50/min"]), "{limits}");
}

#[tokio::test]
async fn bad_concurrency_limits_exit_2_and_write_nothing() {
    let f = Fixture::new().await;
    for (args, needle) in [
        (
            vec!["concurrency", "set", "--resource", "gpt-4", "streams=0"],
            "1 to 1000",
        ),
        (
            vec![
                "concurrency",
                "set",
                "--resource",
                "gpt-4",
                "streams=5/500ms",
            ],
            "1 s to 1 hour",
        ),
        (
            vec!["concurrency", "set", "--resource", "gpt-4", "streams=5/30"],
            "unit",
        ),
        (
            vec!["concurrency", "set", "--resource", "gpt-4", "streams"],
            "name=max",
        ),
        (
            vec!["concurrency", "set", "--resource", "gpt-4", "a=1,a=2"],
            "once",
        ),
        (
            vec![
                "concurrency",
                "set",
                "--resource",
                "gpt-4",
                "a=1,b=1,c=1,d=1,e=1",
            ],
            "at most 4",
        ),
        (
            vec!["concurrency", "set", "--entity", "ac#me", "streams=1"],
            "entity",
        ),
        (vec!["concurrency", "set", "streams=1"], "choose a level"),
        (
            vec!["concurrency", "get", "--resource", "gpt 4"],
            "resource",
        ),
    ] {
        f.run(&args).fails(2, needle);
    }
    assert!(f.table.scan_all().await.is_empty(), "nothing written");
}
