//! `limits get` → `limits set` → `limits get` is the identity, through the text form and the
//! YAML form, for generated limits of every kind (rates with bursts, schedules, calendar and
//! session quotas, each soft or not) and levels with a `disabled` value and a cascade policy.
//! Against the test kit's DynamoDB.

use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

use crate::{Fixture, temp_file};

/// Cases per run when `PROPTEST_CASES` does not say (each runs the binary about ten times).
const DEFAULT_CASES: u32 = 12;

/// One generated level: the limits as a user writes them, and the level's flags.
#[derive(Debug, Clone)]
struct Case {
    limits: Vec<String>,
    disabled: Option<&'static str>,
    cascade: Option<&'static str>,
}

fn period() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["sec", "min", "hour", "day", "10s", "90s"])
}

/// One limit's text without its name: `zone` is the case's one zone (all limits of a bucket
/// share it).
fn limit(zone: Option<&'static str>) -> impl Strategy<Value = String> {
    let at = zone.map(|z| format!("@{z}")).unwrap_or_default();
    let soft = any::<bool>().prop_map(|s| if s { ":soft" } else { "" });
    let plain =
        (1..5000i64, period(), prop::option::of(1..20_000i64)).prop_map(|(rate, per, burst)| {
            match burst {
                Some(b) if b != rate => format!("{rate}/{per}:burst={b}"),
                _ => format!("{rate}/{per}"),
            }
        });
    let entry = prop::sample::select(vec![
        "[* 9-17 * * MON-FRI=scale 0.5]",
        "[* 0-6 * * *=burst 2000]",
        "[0,30 * * * *=rate 50 per hour]",
    ]);
    let at2 = at.clone();
    let scheduled = (1..5000i64, period(), entry)
        .prop_map(move |(rate, per, e)| format!("{rate}/{per}{}{e}", at2.clone()));
    let reset = prop::sample::select(vec!["[0 0 1 * *]", "[0 0 * * *][0 12 * * *]"]);
    let quota =
        (1..1_000_000i64, reset).prop_map(move |(n, r)| format!("{n}/quota{}{r}", at.clone()));
    let session = (1..1000i64, period()).prop_map(|(n, p)| format!("{n}/session:{p}"));
    (prop_oneof![plain, scheduled, quota, session], soft).prop_map(|(text, soft)| {
        // The marker goes before the zone and the brackets.
        let cut = text.find(['@', '[']).unwrap_or(text.len());
        format!("{}{soft}{}", &text[..cut], &text[cut..])
    })
}

fn case() -> impl Strategy<Value = Case> {
    let zone = prop::sample::select(vec![None, Some("Europe/Berlin"), Some("Asia/Kolkata")]);
    let flags = (
        prop::sample::select(vec![None, Some("disable"), Some("enable"), Some("bypass")]),
        prop::sample::select(vec![None, Some("on"), Some("off")]),
    );
    (zone, flags).prop_flat_map(|(zone, (disabled, cascade))| {
        prop::collection::vec(limit(zone), 1..5).prop_map(move |texts| Case {
            limits: texts
                .into_iter()
                .enumerate()
                .map(|(i, t)| format!("l{i}={t}"))
                .collect(),
            disabled,
            cascade,
        })
    })
}

/// The level as `limits get` prints it, less its name.
fn shown(f: &Fixture, resource: &str) -> Result<Value, TestCaseError> {
    let got = f.run(&["limits", "get", "--resource", resource]);
    prop_assert_eq!(got.code, 0, "{}", got.stderr);
    Ok(got.json())
}

fn set(f: &Fixture, args: &[&str]) -> Result<(), TestCaseError> {
    let run = f.run(args);
    prop_assert_eq!(run.code, 0, "{:?}: {}", args, run.stderr);
    Ok(())
}

fn one(f: &Fixture, n: u32, case: &Case) -> Result<(), TestCaseError> {
    let resource = format!("r{n}");
    let r = resource.as_str();
    set(
        f,
        &["limits", "set", "--resource", r, &case.limits.join(",")],
    )?;
    if let Some(d) = case.disabled {
        set(f, &["resource", d, r])?;
    }
    if let Some(c) = case.cascade {
        set(f, &["resource", "set-cascade", r, c])?;
    }
    let first = shown(f, r)?;
    let texts: Vec<String> = first["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .map(|t| t.as_str().expect("text").to_owned())
        .collect();
    let soft = |list: &[String]| list.iter().filter(|t| t.contains(":soft")).count();
    prop_assert_eq!(
        soft(&texts),
        soft(&case.limits),
        "soft limits shown: {:?}",
        texts
    );

    // The text form, as `limits get` printed it.
    set(f, &["limits", "set", "--resource", r, &texts.join(",")])?;
    prop_assert_eq!(&shown(f, r)?, &first, "text form");

    // The YAML form: each name mapped to the rest of its text.
    let yaml: String = texts
        .iter()
        .map(|t| {
            let (name, rest) = t.split_once('=').expect("NAME=...");
            format!("{name}: {}\n", serde_json::to_string(rest).unwrap())
        })
        .collect();
    let file = temp_file("limits.yaml", &yaml);
    set(
        f,
        &[
            "limits",
            "set",
            "--resource",
            r,
            "--file",
            file.to_str().unwrap(),
        ],
    )?;
    prop_assert_eq!(&shown(f, r)?, &first, "YAML form: {}", yaml);
    Ok(())
}

#[test]
fn get_set_get_is_the_identity_in_the_text_and_yaml_forms() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let f = runtime.block_on(Fixture::new());
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let n = AtomicU32::new(0);
    let result = runner.run(&case(), |case| {
        one(&f, n.fetch_add(1, Ordering::Relaxed), &case)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(n.load(Ordering::Relaxed), cases);
}
