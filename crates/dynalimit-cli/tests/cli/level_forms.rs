//! `limits set` writes a level's attributes (`disabled`, `cascade`, `on_unavailable`) beside
//! its limits in the text and YAML forms, and takes the JSON document `limits get` prints;
//! what does not fit the level is refused before anything is written; a set cut short by a
//! lost answer is finished by running it again. Against the test kit's DynamoDB.

use serde_json::json;

use crate::{Fixture, Run, execute, temp_file};

#[tokio::test]
async fn the_text_and_yaml_forms_write_attributes_and_keep_what_they_do_not_name() {
    let f = Fixture::new().await;
    let set = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "gpt-4",
            "rpm=100/min,disabled=bypass,cascade=false",
        ])
        .json();
    assert_eq!(set["limits"], json!(["rpm=100/min"]));
    assert_eq!(
        (&set["disabled"], &set["cascade"]),
        (&json!("bypass"), &json!(false))
    );

    // Attributes alone keep the limits; what is not named is kept; null clears.
    let set = f
        .run(&["limits", "set", "--resource", "gpt-4", "disabled=null"])
        .json();
    assert_eq!(set["limits"], json!(["rpm=100/min"]));
    assert_eq!(
        (&set["disabled"], &set["cascade"]),
        (&json!(null), &json!(false))
    );
    // Limits alone keep the attributes, as before.
    let set = f
        .run(&["limits", "set", "--resource", "gpt-4", "tpm=5/sec"])
        .json();
    assert_eq!(
        (&set["limits"], &set["cascade"]),
        (&json!(["tpm=5/sec"]), &json!(false))
    );

    let file = temp_file(
        "entity.yaml",
        "rpm: 500/min\ndisabled: true\ncascade: true\n",
    );
    let entity = f
        .run(&[
            "limits",
            "set",
            "--entity",
            "key-1",
            "--file",
            file.to_str().unwrap(),
        ])
        .json();
    assert_eq!(entity["level"], "entity key-1 on _default_");
    assert_eq!(
        (&entity["limits"], &entity["disabled"], &entity["cascade"]),
        (&json!(["rpm=500/min"]), &json!(true), &json!(true))
    );
    // The dedicated commands see the same level.
    f.run(&["entity", "clear-disabled", "key-1"]).json();
    let got = f.run(&["limits", "get", "--entity", "key-1"]).json();
    assert_eq!(
        (&got["disabled"], &got["cascade"]),
        (&json!(null), &json!(true))
    );

    let system = f
        .run(&[
            "limits",
            "set",
            "--system",
            "rpm=1000/min,on_unavailable=block",
        ])
        .json();
    assert_eq!(system["on_unavailable"], "block");
    let system = f
        .run(&["limits", "set", "--system", "on_unavailable=allow"])
        .json();
    assert_eq!(
        (&system["limits"], &system["on_unavailable"]),
        (&json!(["rpm=1000/min"]), &json!("allow"))
    );
    let system = f
        .run(&["limits", "set", "--system", "on_unavailable=null"])
        .json();
    assert_eq!(
        (&system["limits"], &system["on_unavailable"]),
        (&json!(["rpm=1000/min"]), &json!(null))
    );
}

#[tokio::test]
async fn a_json_document_sets_the_whole_level() {
    let f = Fixture::new().await;
    f.run(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "rpm=100/min,tpm=9/sec:soft,disabled=true,cascade=true",
    ])
    .json();
    let printed = f.run(&["limits", "get", "--resource", "gpt-4"]);
    let document = temp_file("gpt-4.json", &printed.stdout);
    // Another level of the same shape takes it once its `level` is left out.
    f.run(&[
        "limits",
        "set",
        "--resource",
        "claude",
        "--file",
        document.to_str().unwrap(),
    ])
    .fails(2, "the document is for level \"resource gpt-4\"");
    let mut copied = printed.json();
    copied.as_object_mut().unwrap().remove("level");
    let copy = temp_file("copy.json", &copied.to_string());
    let claude = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "claude",
            "--file",
            copy.to_str().unwrap(),
        ])
        .json();
    assert_eq!(claude["limits"], printed.json()["limits"]);
    assert_eq!(
        (&claude["disabled"], &claude["cascade"]),
        (&json!(true), &json!(true))
    );

    // What the document leaves out or sets to null is cleared; an empty list removes the
    // limits and keeps the level for its attributes.
    let flags_only = temp_file("flags.json", r#"{"limits": [], "disabled": "bypass"}"#);
    let set = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "claude",
            "--file",
            flags_only.to_str().unwrap(),
        ])
        .json();
    assert_eq!(
        (&set["limits"], &set["disabled"], &set["cascade"]),
        (&json!([]), &json!("bypass"), &json!(null))
    );
}

/// Runs `limits set ARGS`: it fails with `code` and `needle`, and the resource level `gpt-4`
/// reads back as before.
fn refused_and_unchanged(f: &Fixture, args: &[&str], code: i32, needle: &str) {
    let before = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    f.run(&[&["limits", "set"][..], args].concat())
        .fails(code, needle);
    let after = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(after, before, "{args:?} wrote something");
}

#[tokio::test]
async fn what_does_not_fit_the_level_is_refused_and_nothing_is_written() {
    let f = Fixture::new().await;
    f.run(&[
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "rpm=100/min,cascade=false",
    ])
    .json();
    let file = |name: &str, text: &str| temp_file(name, text).to_str().unwrap().to_owned();
    let level = |extra: &str| {
        format!(
            r#"{{"level": "resource gpt-4", "limits": ["rpm=1/sec"], "disabled": true{extra}}}"#
        )
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["rpm=1/sec,on_unavailable=block".into()],
            "on_unavailable cannot be set on level resource gpt-4",
        ),
        (
            vec!["rpm=1/sec,disabled=off".into()],
            "disabled is true, false, bypass or null, got \"off\"",
        ),
        (
            vec!["rpm=1/sec,cascade=true,cascade=false".into()],
            "cascade is given twice",
        ),
        (
            vec!["disabled=true,rpm=1/fortnight".into()],
            "unknown period",
        ),
        (
            vec![
                "--file".into(),
                file("a.json", &level(r#", "on_unavailable": "allow""#)),
            ],
            "on_unavailable cannot be set",
        ),
        (
            vec![
                "--file".into(),
                file("b.json", &level(r#", "cascde": true"#)),
            ],
            "unknown key \"cascde\"",
        ),
        (
            vec![
                "--file".into(),
                file("c.json", r#"{"level": "system", "limits": ["rpm=1/sec"]}"#),
            ],
            "the document is for level \"system\"",
        ),
        (
            vec![
                "--file".into(),
                file("d.json", r#"{"limits": ["rpm=1/sec", "ttl=1/sec"]}"#),
            ],
            "reserved",
        ),
        (
            vec![
                "--file".into(),
                file("e.yaml", "rpm: 1/sec\ndisabled: maybe\n"),
            ],
            "disabled is true, false, bypass or null",
        ),
    ];
    for (args, needle) in &cases {
        let mut all = vec!["--resource", "gpt-4"];
        all.extend(args.iter().map(String::as_str));
        refused_and_unchanged(&f, &all, 2, needle);
    }
    // The system level has no disabled value or cascade policy.
    f.run(&["limits", "set", "--system", "rpm=1/sec,cascade=true"])
        .fails(2, "cascade cannot be set on level system");
    f.run(&[
        "limits",
        "set",
        "--system",
        "rpm=1/sec,on_unavailable=allow",
        "--on-unavailable",
        "block",
    ])
    .fails(2, "on_unavailable is given twice");
    f.run(&["limits", "get", "--system"]).fails(1, "no limits");
    // on_unavailable is stored with the system level's limits.
    f.run(&["limits", "set", "--system", "on_unavailable=block"])
        .fails(2, "give it at least one limit");
    f.run(&["limits", "get", "--system"]).fails(1, "no limits");

    // Refused before the table is opened: nothing listens on port 9.
    let run = execute(crate::command().args([
        "--endpoint-url",
        "http://127.0.0.1:9",
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "rpm=1/sec,on_unavailable=block",
    ]));
    run.fails(2, "on_unavailable cannot be set");
}

/// Runs `dynalimit ARGS --output json` on a blocking thread against `endpoint`, so that the
/// test's runtime keeps serving a proxy meanwhile.
async fn through(endpoint: &str, stack: &str, args: &[&str]) -> Run {
    let mut c = crate::command();
    c.args(["--endpoint-url", endpoint, "--stack", stack])
        .args(args)
        .args(["--output", "json"]);
    tokio::task::spawn_blocking(move || execute(&mut c))
        .await
        .expect("the command ran")
}

#[tokio::test]
async fn limits_set_run_again_finishes_an_interrupted_set() {
    let f = Fixture::new().await;
    let proxy = dynalimit_tests::fault::FaultProxy::start().await;
    let url = proxy.url();
    let stack = f.table.name();
    let set = [
        "limits",
        "set",
        "--resource",
        "gpt-4",
        "rpm=100/min,disabled=true,cascade=true",
    ];
    // What the set makes of a level, run without faults on another resource.
    let mut clean = f
        .run(&[
            "limits",
            "set",
            "--resource",
            "other",
            "rpm=100/min,disabled=true,cascade=true",
        ])
        .json();
    clean["level"] = json!("resource gpt-4");

    // The `disabled` write lands, and every answer to it is lost: the command fails after
    // the limits and the flag were written, before the cascade policy.
    proxy.lose_after_applying(
        "UpdateItem",
        Some("disabled"),
        dynalimit_tests::fault::Lost::Answer500,
        20,
    );
    let cut = through(&url, stack, &set).await;
    assert_ne!(cut.code, 0, "{cut:?}");
    proxy.clear();
    let half = f.run(&["limits", "get", "--resource", "gpt-4"]).json();
    assert_eq!(half["limits"], json!(["rpm=100/min"]));
    assert_eq!(half["disabled"], json!(true), "the lost write landed");
    assert_eq!(half["cascade"], json!(null), "the set stopped there");

    // The same command again finishes it, and once more changes nothing.
    for _ in 0..2 {
        let again = through(&url, stack, &set).await.json();
        assert_eq!(again, clean);
        assert_eq!(
            f.run(&["limits", "get", "--resource", "gpt-4"]).json(),
            clean
        );
    }
}
