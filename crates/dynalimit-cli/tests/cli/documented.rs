//! Every JSON document a test reads from the binary is checked against docs/cli-output.md
//! (which the output types generate): each key it holds is one the page lists for the
//! command. So a command that prints something other than its documented type fails the test
//! that runs it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::Value;

/// One section of the page.
#[derive(Debug, Default)]
struct Section {
    /// The commands of its heading (words and flags).
    commands: Vec<String>,
    /// The types they print.
    types: Vec<String>,
}

/// What the page says.
struct Page {
    sections: Vec<Section>,
    /// Each type's keys, and whether it takes keys of any other name (a flattened map).
    types: BTreeMap<String, (BTreeSet<String>, bool)>,
}

/// The text between the first pair of backticks of `line`.
fn quoted(line: &str) -> Option<&str> {
    line.split('`').nth(1)
}

fn page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli-output.md");
        let text = std::fs::read_to_string(path).expect("docs/cli-output.md");
        let mut page = Page {
            sections: Vec::new(),
            types: BTreeMap::new(),
        };
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(heading) = line.strip_prefix("### ") {
                let commands: Vec<String> = heading
                    .split(", ")
                    .filter_map(quoted)
                    .map(str::to_owned)
                    .collect();
                page.sections.push(Section {
                    commands,
                    types: Vec::new(),
                });
                current = None;
            } else if let Some(heading) = line.strip_prefix("#### ") {
                let name = quoted(heading).expect("a type heading").to_owned();
                page.types.entry(name.clone()).or_default();
                current = Some(name.clone());
                if let Some(section) = page.sections.last_mut() {
                    section.types.push(name);
                }
            } else if let Some(name) = line.strip_suffix(": as above.") {
                let name = quoted(name).expect("a type name").to_owned();
                if let Some(section) = page.sections.last_mut() {
                    section.types.push(name);
                }
            } else if let (Some(tag), Some(name)) = (line.split_once("` = `"), &current) {
                // A variant's line: `tag` = `"value"`: …
                let key = tag.0.trim_start_matches('`').to_owned();
                page.types
                    .get_mut(name)
                    .expect("entered above")
                    .0
                    .insert(key);
            } else if let (Some(row), Some(name)) = (line.strip_prefix("| "), &current) {
                let entry = page.types.get_mut(name).expect("entered above");
                if row.starts_with("any other key") {
                    entry.1 = true;
                } else if let Some(key) = quoted(row) {
                    entry.0.insert(key.to_owned());
                }
            }
        }
        page
    })
}

/// The section of the command `args` run: the one whose heading's words are the first
/// words of the command and whose flags it was given, the most specific one.
fn section(args: &[String]) -> &'static Section {
    let with_value = [
        "--endpoint-url",
        "--region",
        "--profile",
        "--stack",
        "--output",
        "-N",
        "--namespace",
    ];
    let mut words = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if with_value.contains(&a.as_str()) {
            skip = true;
        } else if !a.starts_with('-') {
            words.push(a.as_str());
        }
    }
    let mut best: Option<(&'static Section, usize)> = None;
    for section in &page().sections {
        for command in &section.commands {
            let tokens: Vec<&str> = command.split(' ').collect();
            let (flags, names): (Vec<&str>, Vec<&str>) =
                tokens.iter().partition(|t| t.starts_with('-'));
            let matches =
                words.starts_with(&names) && flags.iter().all(|f| args.iter().any(|a| a == f));
            if matches && best.is_none_or(|(_, n)| tokens.len() > n) {
                best = Some((section, tokens.len()));
            }
        }
    }
    best.unwrap_or_else(|| panic!("docs/cli-output.md documents no command of {args:?}"))
        .0
}

/// Asserts that every key of `value` (each element's, for an array) is one docs/cli-output.md
/// lists for the command `args` ran.
pub(crate) fn check(args: &[String], value: &Value) {
    let Section { commands, types } = section(args);
    let page = page();
    let mut keys = BTreeSet::new();
    let mut open = false;
    for name in types {
        let (k, o) = &page.types[name];
        keys.extend(k.iter().cloned());
        open |= o;
    }
    let objects: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    for object in objects {
        let map = object
            .as_object()
            .unwrap_or_else(|| panic!("{commands:?} printed {object}, not an object"));
        for key in map.keys() {
            assert!(
                open || keys.contains(key),
                "{commands:?} printed {key:?}, which docs/cli-output.md does not list: {object}"
            );
        }
    }
}

#[test]
fn the_page_names_a_section_for_each_command_and_flag() {
    let args = |s: &str| -> Vec<String> { s.split(' ').map(str::to_owned).collect() };
    let first = |s: &str| section(&args(s)).commands[0].clone();
    assert_eq!(
        first("--stack t limits get --entity e --resolved"),
        "limits get --resolved"
    );
    assert_eq!(first("limits get --resource r --output json"), "limits set");
    assert_eq!(first("-N b local status"), "local status");
    assert_eq!(first("status"), "status");
    check(
        &args("local status"),
        &serde_json::json!({ "status": "stopped" }),
    );
    let deleted = serde_json::json!({ "id": "x", "items_deleted": 1, "extra": 2 });
    let outcome = std::panic::catch_unwind(|| check(&args("entity delete x --yes"), &deleted));
    assert!(outcome.is_err(), "an undocumented key fails the check");
}
