//! What the commands print: the typed output of each command group (one submodule each,
//! every field documented) and its rendering as aligned text tables or JSON.
//!
//! `--output json` prints a command's output type serialized by serde, keys sorted; the table
//! form is rendered from the same value. `docs/cli-output.md` is generated from these types
//! (their doc comments and examples) and a test keeps it current.

pub(crate) mod access;
pub(crate) mod audit;
pub(crate) mod bench;
pub(crate) mod entity;
pub(crate) mod infra;
pub(crate) mod limits;
pub(crate) mod local;
pub(crate) mod namespace;
pub(crate) mod usage;

#[cfg(test)]
mod catalog;

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

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Renders `value` in `format` as text (without a trailing newline).
pub(crate) fn render(format: Format, value: &Value) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(value).unwrap_or_default(),
        Format::Table => match value {
            Value::Array(rows) if rows.is_empty() => "(none)".into(),
            Value::Array(rows) if rows.iter().all(Value::is_object) => table(rows),
            Value::Array(rows) => rows.iter().map(cell).collect::<Vec<_>>().join("\n"),
            Value::Object(map) => {
                let width = map.keys().map(String::len).max().unwrap_or(0);
                map.iter()
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
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| cell(&r[*c])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain([c.len()])
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
    let mut out = vec![line(columns.iter().map(|c| c.to_uppercase()).collect())];
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

    #[test]
    fn records_become_key_value_lines_and_json_stays_json() {
        let v = json!({ "table": "t", "limits": ["a", "b"] });
        assert_eq!(render(Format::Table, &v), "limits  a, b\ntable   t");
        let back: Value = serde_json::from_str(&render(Format::Json, &v)).unwrap();
        assert_eq!(back, v);
    }
}
