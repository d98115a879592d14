//! Failures explained by open work, named so that the list can only shrink: each entry pairs
//! what the stored items hold with what the failure says, and a failure matching no entry
//! fails the case. Remove an entry when its work lands; the suite then shows whether the
//! failures it explained are gone.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;

/// One known failure.
struct Entry {
    /// The work that fixes it, and what it is.
    what: &'static str,
    /// Whether the stored items (namespace id `ns`) hold what causes it.
    holds: fn(&[Item], &str) -> bool,
    /// Whether a failure's text is the one it causes.
    says: fn(&str) -> bool,
}

/// The list, the more particular entries first.
const KNOWN: &[Entry] = &[Entry {
    what: "issue 30, index reads: index results naming this namespace from another \
               one's partition are used",
    holds: |items, ns| items.iter().any(|item| foreign_in_our_index(item, ns)),
    says: |f| f.contains(", the namespace holds"),
}];

/// Which entry explains `failure` given the stored `items`, if one does.
pub(crate) fn explain(items: &[Item], ns: &str, failure: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|e| (e.says)(failure) && (e.holds)(items, ns))
        .map(|e| e.what)
}

/// Whether an item of another namespace's partition has an index key naming `ns`.
fn foreign_in_our_index(item: &Item, ns: &str) -> bool {
    let ours = |v: &str| v == ns || v.starts_with(&format!("{ns}/"));
    text(item, "PK").is_some_and(|pk| !ours(pk))
        && ["GSI1PK", "GSI2PK", "GSI3PK", "GSI4PK"]
            .iter()
            .any(|index| text(item, index).is_some_and(ours))
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}
