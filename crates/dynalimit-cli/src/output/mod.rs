//! What the commands print: the typed output of each command group (one submodule each,
//! every field documented) and its rendering as aligned text tables or JSON.
//!
//! `--output json` prints a command's output type serialized by serde, keys sorted; the table
//! form is rendered from the same value. `docs/cli-output.md` is generated from these types
//! (their doc comments and examples) and a test keeps it current.
//!
//! Strings come from a table other writers share, so neither form prints a character a
//! terminal would act on instead of showing ([`is_unsafe`]: C0 and C1 controls, DEL, and the
//! bidirectional embeddings, overrides, isolates and marks). The table form writes each as an
//! escape ([`escape`]: `\n`, `\r`, `\t`, else `\u{…}`), in every cell and heading; the JSON
//! form writes each as a JSON `\uXXXX` escape, so a parser reads the string as stored.

pub(crate) mod access;
pub(crate) mod alerts;
pub(crate) mod audit;
pub(crate) mod bench;
pub(crate) mod concurrency;
pub(crate) mod entity;
pub(crate) mod infra;
pub(crate) mod limits;
pub(crate) mod loadtest;
pub(crate) mod local;
pub(crate) mod manifest;
pub(crate) mod namespace;
pub(crate) mod usage;

#[cfg(test)]
mod catalog;

use std::borrow::Cow;
use std::fmt::Write as _;

use clap::ValueEnum;
use serde::Serialize;
use serde_json::Value;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns (lists) or `key: value` lines (single records).
    Table,
    /// Pretty-printed JSON.
    Json,
}

/// Whether a terminal would act on `c` instead of showing it: a C0 or C1 control or DEL
/// (Unicode's `Cc`), or a bidirectional embedding, override, isolate or mark (U+061C, U+200E,
/// U+200F, U+202A–U+202E, U+2066–U+2069), which reorders the text around it.
pub(crate) fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` as the table form prints it: every [`is_unsafe`] character written as an escape,
/// `\n`, `\r` and `\t` by name and the others as `\u{…}` (hexadecimal code point); the
/// rest unchanged.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text with every [`is_unsafe`] character past the C0 controls written as a `\uXXXX`
/// escape. serde_json escapes the C0 controls in strings itself (a raw one is the layout's
/// own line break); DEL, the C1 controls and the bidirectional characters (all in the Basic
/// Multilingual Plane, and never part of JSON's syntax) it writes as they are.
fn escape_json(json: String) -> String {
    let unsafe_in_json = |c: char| c >= '\u{7f}' && is_unsafe(c);
    if !json.chars().any(unsafe_in_json) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_in_json(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => escape(s).into_owned(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(", "),
        other => escape(&other.to_string()).into_owned(),
    }
}

/// Renders `value` in `format` as text (without a trailing newline).
pub(crate) fn render(format: Format, value: &Value) -> String {
    match format {
        Format::Json => escape_json(serde_json::to_string_pretty(value).unwrap_or_default()),
        Format::Table => match value {
            Value::Array(rows) if rows.is_empty() => "(none)".into(),
            Value::Array(rows) if rows.iter().all(Value::is_object) => table(rows),
            Value::Array(rows) => rows.iter().map(cell).collect::<Vec<_>>().join("\n"),
            Value::Object(map) => {
                let keys: Vec<Cow<'_, str>> = map.keys().map(|k| escape(k)).collect();
                let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
                keys.iter()
                    .zip(map.values())
                    .map(|(k, v)| format!("{k:<width$}  {}", cell(v)))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            other => cell(other),
        },
    }
}

fn table(rows: &[Value]) -> String {
    let mut columns: Vec<&str> = Vec::new();
    for row in rows {
        for key in row.as_object().into_iter().flat_map(|m| m.keys()) {
            if !columns.contains(&key.as_str()) {
                columns.push(key);
            }
        }
    }
    let headers: Vec<String> = columns
        .iter()
        .map(|c| escape(&c.to_uppercase()).into_owned())
        .collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| cell(&r[*c])).collect())
        .collect();
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |items: Vec<String>| {
        items
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = vec![line(headers)];
    out.extend(cells.into_iter().map(line));
    out.join("\n")
}

/// Prints `value` in `format` to standard output.
pub(crate) fn print<T: Serialize>(format: Format, value: &T) {
    // The output types hold strings, numbers, booleans and string-keyed maps only, which
    // always serialize; a failure would print `null`.
    let value = serde_json::to_value(value).unwrap_or(Value::Null);
    println!("{}", render(format, &value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_become_aligned_columns() {
        let v = json!([{ "name": "a", "id": "1" }, { "name": "bbb", "id": null }]);
        assert_eq!(render(Format::Table, &v), "ID  NAME\n1   a\n-   bbb");
        assert_eq!(render(Format::Table, &json!([])), "(none)");
    }

    /// What another writer of the table may store: a colour escape, a right-to-left override
    /// and a line break (plus DEL, a C1 control and an isolate).
    const HOSTILE: &str = "\u{1b}[31mred\u{202e}txt\nnext\u{7f}\u{9b}\u{2066}";
    const ESCAPED: &str = "\\u{1b}[31mred\\u{202e}txt\\nnext\\u{7f}\\u{9b}\\u{2066}";

    fn hostile_event() -> audit::Event {
        audit::Event {
            event_id: "01J".into(),
            timestamp: "2026-01-01T00:00:00Z".into(),
            action: HOSTILE.into(),
            entity: HOSTILE.into(),
            resource: Some(HOSTILE.into()),
            principal: Some(HOSTILE.into()),
            details: [(HOSTILE.to_owned(), json!({ "k": HOSTILE }))].into(),
        }
    }

    fn hostile_entity() -> entity::Entity {
        entity::Entity {
            id: HOSTILE.into(),
            name: HOSTILE.into(),
            parent_id: Some(HOSTILE.into()),
            cascade: false,
            metadata: [(HOSTILE.to_owned(), HOSTILE.to_owned())].into(),
            created_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// No character a terminal acts on, one line per row.
    fn assert_inert(text: &str, lines: usize) {
        assert!(!text.chars().any(is_unsafe_or_newline), "{text:?}");
        assert_eq!(text.split('\n').count(), lines, "{text}");
    }

    fn is_unsafe_or_newline(c: char) -> bool {
        c != '\n' && is_unsafe(c)
    }

    #[test]
    fn the_table_form_escapes_what_a_terminal_would_act_on_in_every_form() {
        // A list of records: aligned columns.
        let list = serde_json::to_value([hostile_event()]).unwrap();
        let text = render(Format::Table, &list);
        assert_inert(&text, 2);
        assert!(text.contains(ESCAPED), "{text}");
        // A single record: key-value lines.
        let record = serde_json::to_value(hostile_entity()).unwrap();
        let text = render(Format::Table, &record);
        assert_inert(&text, 6);
        assert!(text.contains(&format!("id          {ESCAPED}")), "{text}");
        // A list of plain values, and a plain value.
        let text = render(Format::Table, &json!([HOSTILE, HOSTILE]));
        assert_inert(&text, 2);
        assert_eq!(text, format!("{ESCAPED}\n{ESCAPED}"));
        assert_eq!(render(Format::Table, &json!(HOSTILE)), ESCAPED);
        // An operation's entity and resource.
        let done = entity::Operation {
            entity_id: HOSTILE.into(),
            resource: HOSTILE.into(),
            operation: entity::OperationName::Reset,
            operation_id: "01J".into(),
            shards: 1,
            amounts: [(HOSTILE.to_owned(), 1)].into(),
            replayed: false,
        };
        let text = render(Format::Table, &serde_json::to_value(done).unwrap());
        assert_inert(&text, 7);
        // Plain text is left alone.
        assert_eq!(escape("openai/gpt-4 ü 東京"), "openai/gpt-4 ü 東京");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_json_form_escapes_them_too_and_reads_back_as_stored() {
        for value in [
            serde_json::to_value([hostile_event()]).unwrap(),
            serde_json::to_value(hostile_entity()).unwrap(),
        ] {
            let text = render(Format::Json, &value);
            assert!(!text.chars().any(is_unsafe_or_newline), "{text:?}");
            assert!(text.contains(r"\u001b[31mred\u202etxt\nnext\u007f\u009b\u2066"));
            let back: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, value, "the strings as stored");
        }
    }

    #[test]
    fn records_become_key_value_lines_and_json_stays_json() {
        let v = json!({ "table": "t", "limits": ["a", "b"] });
        assert_eq!(render(Format::Table, &v), "limits  a, b\ntable   t");
        let back: Value = serde_json::from_str(&render(Format::Json, &v)).unwrap();
        assert_eq!(back, v);
    }
}
