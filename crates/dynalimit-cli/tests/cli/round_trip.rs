//! `limits get` → `limits set` → `limits get` is the identity, through the text form, the YAML
//! form and the JSON document, at the entity (one resource or `_default_`), resource and
//! system levels, for generated limits of every kind (rates with bursts, schedules, calendar
//! and session quotas, each soft or not) and every attribute (`disabled` with bypass, the
//! cascade policy, `on_unavailable`). Each level is first written with the dedicated commands
//! (`resource disable`, `entity set-cascade`, `--on-unavailable`, …), and before each form is
//! set the level is changed in every attribute, so a form that drops one is seen. Against the
//! test kit's DynamoDB.

use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

use crate::{Fixture, temp_file};

/// Cases per run when `PROPTEST_CASES` does not say (each runs the binary about twenty
/// times).
const DEFAULT_CASES: u32 = 12;

/// Which level a case addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An entity's level on one resource.
    Entity,
    /// An entity's level on every resource (`_default_`).
    EntityDefault,
    /// A resource's defaults.
    Resource,
    /// The namespace-wide defaults.
    System,
}

/// One generated level: the limits as a user writes them (none: a level of attributes
/// alone), and its attributes as the dedicated commands set them.
#[derive(Debug, Clone)]
struct Case {
    kind: Kind,
    limits: Vec<String>,
    /// `disable`, `enable` or `bypass` (entity and resource levels).
    disabled: Option<&'static str>,
    /// `on` or `off` (entity and resource levels).
    cascade: Option<&'static str>,
    /// `allow` or `block` (system level).
    on_unavailable: Option<&'static str>,
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
    let kind = prop::sample::select(vec![
        Kind::Entity,
        Kind::EntityDefault,
        Kind::Resource,
        Kind::System,
    ]);
    let zone = prop::sample::select(vec![None, Some("Europe/Berlin"), Some("Asia/Kolkata")]);
    let attributes = (
        prop::sample::select(vec![None, Some("disable"), Some("enable"), Some("bypass")]),
        prop::sample::select(vec![None, Some("on"), Some("off")]),
        prop::sample::select(vec![None, Some("allow"), Some("block")]),
    );
    (kind, zone, attributes).prop_flat_map(|(kind, zone, (disabled, cascade, unavailable))| {
        // The system level holds limits; the others may hold attributes alone.
        let fewest = usize::from(kind == Kind::System);
        prop::collection::vec(limit(zone), fewest..5).prop_map(move |texts| {
            let system = kind == Kind::System;
            let mut disabled = disabled.filter(|_| !system);
            if texts.is_empty() && disabled.is_none() && cascade.is_none() {
                disabled = Some("enable");
            }
            Case {
                kind,
                limits: texts
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| format!("l{i}={t}"))
                    .collect(),
                disabled,
                cascade: cascade.filter(|_| !system),
                on_unavailable: unavailable.filter(|_| system),
            }
        })
    })
}

/// The names one case works on.
struct Names {
    kind: Kind,
    entity: String,
    resource: String,
}

impl Names {
    /// The level options of `limits set|get|delete`.
    fn level(&self) -> Vec<String> {
        let v = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        match self.kind {
            Kind::Entity => v(&["--entity", &self.entity, "--resource", &self.resource]),
            Kind::EntityDefault => v(&["--entity", &self.entity]),
            Kind::Resource => v(&["--resource", &self.resource]),
            Kind::System => v(&["--system"]),
        }
    }

    /// `resource WORD R` or `entity WORD E [--resource R]`, followed by `extra` (a policy).
    fn dedicated(&self, word: &str, extra: Option<&str>) -> Vec<String> {
        let (group, id) = match self.kind {
            Kind::Resource => ("resource", &self.resource),
            _ => ("entity", &self.entity),
        };
        let mut args = vec![group.to_owned(), word.to_owned(), id.clone()];
        args.extend(extra.map(str::to_owned));
        if self.kind == Kind::Entity {
            args.extend(["--resource".to_owned(), self.resource.clone()]);
        }
        args
    }
}

fn run(f: &Fixture, args: &[String]) -> Result<Value, TestCaseError> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = f.run(&args);
    prop_assert_eq!(run.code, 0, "{:?}: {}", args, run.stderr);
    Ok(run.json())
}

fn limits_set(f: &Fixture, names: &Names, rest: &[&str]) -> Result<Value, TestCaseError> {
    let mut args = vec!["limits".to_owned(), "set".to_owned()];
    args.extend(names.level());
    args.extend(rest.iter().map(|s| (*s).to_owned()));
    run(f, &args)
}

/// The level as `limits get` prints it.
fn shown(f: &Fixture, names: &Names) -> Result<Value, TestCaseError> {
    let mut args = vec!["limits".to_owned(), "get".to_owned()];
    args.extend(names.level());
    run(f, &args)
}

/// Writes a level with the commands other than the forms under test: `limits set` with
/// limits alone (and `--on-unavailable`), `resource|entity disable|enable|bypass|
/// clear-disabled` and `set-cascade`.
fn write_dedicated(
    f: &Fixture,
    names: &Names,
    limits: &[String],
    disabled: Option<&str>,
    cascade: Option<&str>,
    unavailable: Option<&str>,
) -> Result<(), TestCaseError> {
    if names.kind == Kind::System {
        // `--on-unavailable` keeps a stored value it is not given: start afresh.
        let mut delete = vec!["limits".to_owned(), "delete".to_owned()];
        delete.extend(names.level());
        let args: Vec<&str> = delete.iter().map(String::as_str).collect();
        let _ = f.run(&args);
        let text = limits.join(",");
        let mut rest = vec![text.as_str()];
        rest.extend(unavailable.iter().flat_map(|o| ["--on-unavailable", *o]));
        limits_set(f, names, &rest)?;
        return Ok(());
    }
    if !limits.is_empty() {
        limits_set(f, names, &[&limits.join(",")])?;
    }
    run(
        f,
        &names.dedicated(disabled.unwrap_or("clear-disabled"), None),
    )?;
    run(
        f,
        &names.dedicated("set-cascade", Some(cascade.unwrap_or("inherit"))),
    )?;
    Ok(())
}

/// Changes every part of the level: other limits, and each attribute to another value.
fn scramble(f: &Fixture, names: &Names, case: &Case) -> Result<(), TestCaseError> {
    let disabled = match case.disabled {
        None => Some("disable"),
        Some("disable") => Some("enable"),
        Some("enable") => Some("bypass"),
        Some(_) => None,
    };
    let cascade = match case.cascade {
        None => Some("on"),
        Some("on") => Some("off"),
        Some(_) => None,
    };
    let unavailable = match case.on_unavailable {
        None => Some("allow"),
        Some("allow") => Some("block"),
        Some(_) => None,
    };
    let other = ["zz=7/sec".to_owned()];
    write_dedicated(f, names, &other, disabled, cascade, unavailable)
}

/// An attribute's JSON value as the text form writes it.
fn text_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

const ATTRIBUTES: [&str; 3] = ["disabled", "cascade", "on_unavailable"];

fn one(f: &Fixture, n: u32, case: &Case) -> Result<(), TestCaseError> {
    let names = Names {
        kind: case.kind,
        entity: format!("e{n}"),
        resource: format!("r{n}"),
    };
    write_dedicated(
        f,
        &names,
        &case.limits,
        case.disabled,
        case.cascade,
        case.on_unavailable,
    )?;
    let first = shown(f, &names)?;
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
    for attribute in ATTRIBUTES {
        let given = match attribute {
            "disabled" => case.disabled,
            "cascade" => case.cascade,
            _ => case.on_unavailable,
        };
        prop_assert_eq!(given.is_some(), !first[attribute].is_null(), "{}", first);
    }

    // The JSON document, as `limits get --output json` printed it.
    let document = temp_file("level.json", &first.to_string());
    scramble(f, &names, case)?;
    prop_assert_ne!(&shown(f, &names)?, &first, "scrambled");
    limits_set(f, &names, &["--file", document.to_str().unwrap()])?;
    prop_assert_eq!(&shown(f, &names)?, &first, "JSON document: {}", first);

    if texts.is_empty() {
        // Attributes alone keep the limits in the text and YAML forms: only the document
        // removes them.
        return Ok(());
    }

    // The text form: the limits as printed, then each attribute.
    let text: Vec<String> = texts
        .iter()
        .cloned()
        .chain(
            ATTRIBUTES
                .iter()
                .map(|a| format!("{a}={}", text_value(&first[*a]))),
        )
        .collect();
    scramble(f, &names, case)?;
    limits_set(f, &names, &[&text.join(",")])?;
    prop_assert_eq!(&shown(f, &names)?, &first, "text form: {:?}", text);

    // The YAML form: each name mapped to the rest of its text, and each attribute.
    let yaml: String = texts
        .iter()
        .map(|t| {
            let (name, rest) = t.split_once('=').expect("NAME=...");
            format!("{name}: {}\n", serde_json::to_string(rest).unwrap())
        })
        .chain(ATTRIBUTES.iter().map(|a| format!("{a}: {}\n", first[*a])))
        .collect();
    let file = temp_file("limits.yaml", &yaml);
    scramble(f, &names, case)?;
    limits_set(f, &names, &["--file", file.to_str().unwrap()])?;
    prop_assert_eq!(&shown(f, &names)?, &first, "YAML form: {}", yaml);
    Ok(())
}

#[test]
fn get_set_get_is_the_identity_in_every_form_at_every_level() {
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
