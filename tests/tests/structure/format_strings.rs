//! The table format has one home: `dynalimit-format`. Outside it, no code (tests aside) spells
//! a key fragment, an update or condition expression, or an attribute name of the format; it
//! names them through `dynalimit_format::{keys, attr, expr}`.
//!
//! The rules, read against `dynalimit_format`'s own constants:
//! - a string containing a key fragment (`#STATE`, `#CONFIG#`, `/ENTITY#`, …): anywhere;
//! - a string that is an expression (`SET …`, `… = :v`, `attribute_exists(…)`): anywhere;
//! - a string equal to an attribute name: anywhere for names that mean nothing outside the table
//!   (`PK`, `rf`, `shard_count`, `b_rpm_tk`, …); for names that are also ordinary words
//!   (`name`, `status`, `resource`, …) in the library crates' files that handle items
//!   (`AttributeValue`), since elsewhere such a word is an error label or an output key.
//!
//! Test code is exempt: the suites spell the format independently on purpose, so that a
//! mistake in `dynalimit-format` is not repeated by the check.

use dynalimit_format::{attr, keys};
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::source::{self, ModuleFile};

/// Strings that are allowed where the rules would flag them, with the reason.
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Attribute names that are also ordinary words.
const WORDS: &[&str] = &[
    attr::TTL,
    attr::NAMESPACE_ID,
    attr::NAMESPACE_NAME,
    attr::STATUS,
    attr::CREATED_AT,
    attr::DELETED_AT,
    attr::ENTITY_ID,
    attr::NAME,
    attr::PARENT_ID,
    attr::CASCADE,
    attr::METADATA,
    attr::ON_UNAVAILABLE,
    attr::RESOURCE,
    attr::DISABLED,
    attr::RESOURCES,
    attr::OPERATION,
    attr::WRITER,
    attr::SHARDS,
    attr::AMOUNTS,
    attr::EVENT_ID,
    attr::TIMESTAMP,
    attr::ACTION,
    attr::PRINCIPAL,
    attr::DETAILS,
    attr::WINDOW,
    attr::WINDOW_START,
    attr::OWNERS,
    attr::DATA,
    attr::SEQ,
    attr::SHARD,
];

/// Key fragments, from the format's own constants.
fn key_fragments() -> Vec<String> {
    let mut out: Vec<String> = [
        keys::SYSTEM_RESERVED_PK,
        keys::VERSION_SK,
        keys::META_SK,
        keys::STATE_SK,
        keys::CONFIG_SK,
        keys::RESOURCES_SK,
        keys::ENTITY_CONFIG_RESOURCES_SK,
        keys::AUDIT_SK_PREFIX,
        keys::USAGE_SK_PREFIX,
        keys::CONFIG_SK_PREFIX,
        keys::NAMESPACE_SK_PREFIX,
        keys::NSID_SK_PREFIX,
        keys::OP_SK_PREFIX,
        keys::WATERMARK_SK_PREFIX,
        keys::REFUSED_SK_PREFIX,
        keys::BUCKET_INDEX_SK_PREFIX,
        keys::USAGE_INDEX_SK_PREFIX,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    // The partition-key fragments between `{ns}` and the id, taken from the builders.
    for pk in [
        keys::entity_pk("n", "x"),
        keys::resource_pk("n", "x"),
        keys::bucket_pk("n", "x", "y", 0),
        keys::system_pk("n"),
    ] {
        let rest = pk.strip_prefix('n').expect("keys start with the namespace");
        let fragment = rest.split_once('x').map_or(rest, |(f, _)| f);
        out.push(fragment.to_owned());
    }
    out
}

/// Why `s` spells the table format, if it does.
fn violation(s: &str, fragments: &[String], handles_items: bool) -> Option<&'static str> {
    if fragments.iter().any(|f| s.contains(f.as_str())) {
        return Some("a key fragment (use dynalimit_format::keys)");
    }
    let upper = s.trim_start();
    let expression = ["SET ", "ADD ", "REMOVE ", "DELETE "]
        .iter()
        .any(|k| upper.starts_with(k))
        || [
            "attribute_exists(",
            "attribute_not_exists(",
            "if_not_exists(",
            "begins_with(",
            "list_append(",
        ]
        .iter()
        .any(|f| s.contains(f))
        || [" = :", " < :", " > :", " <= :", " >= :", " <> :"]
            .iter()
            .any(|op| s.contains(op));
    if expression {
        return Some("an expression (use dynalimit_format::expr)");
    }
    if attr::parse_bucket_limit(s).is_some() {
        return Some("a bucket attribute (use dynalimit_format::attr::bucket_limit)");
    }
    if attr::ALL.iter().any(|(name, _)| *name == s) && (handles_items || !WORDS.contains(&s)) {
        return Some("an attribute name (use dynalimit_format::attr)");
    }
    None
}

/// The string literals of non-test code, macro arguments included and doc comments excluded.
#[derive(Default)]
struct Strings {
    found: Vec<String>,
    mentions_attribute_value: bool,
}

impl Strings {
    fn tokens(&mut self, tokens: TokenStream) {
        for tree in tokens {
            match tree {
                TokenTree::Literal(lit) => {
                    if let Ok(s) = syn::parse_str::<syn::LitStr>(&lit.to_string()) {
                        self.found.push(s.value());
                    }
                }
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(i) => {
                    self.mentions_attribute_value |= i == "AttributeValue";
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Strings {
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_lit_str(&mut self, s: &'ast syn::LitStr) {
        self.found.push(s.value());
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
    }

    fn visit_ident(&mut self, i: &'ast proc_macro2::Ident) {
        self.mentions_attribute_value |= i == "AttributeValue";
    }
}

fn strings_of(module: &ModuleFile) -> Strings {
    let mut strings = Strings::default();
    strings.visit_file(&module.ast);
    strings
}

#[test]
fn the_table_format_is_spelled_only_in_dynalimit_format() {
    let fragments = key_fragments();
    assert!(fragments.iter().any(|f| f == "/ENTITY#"), "{fragments:?}");
    let mut files = 0;
    let mut found = Vec::new();
    for unit in source::units() {
        if matches!(unit.package, "crates/dynalimit-format" | "tests") {
            continue;
        }
        let library = !matches!(unit.package, "crates/dynalimit-cli");
        for module in source::modules(&unit) {
            files += 1;
            let strings = strings_of(&module);
            let file = source::relative(&module.file);
            let handles_items = library && strings.mentions_attribute_value;
            for s in strings.found {
                let Some(why) = violation(&s, &fragments, handles_items) else {
                    continue;
                };
                if ALLOWED.iter().any(|(f, a, _)| *f == file && *a == s) {
                    continue;
                }
                found.push(format!("{file}: {s:?} is {why}"));
            }
        }
    }
    assert!(files > 50, "only {files} files were read");
    assert!(
        found.is_empty(),
        "the table format is spelled outside dynalimit-format:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_allowed_exception_is_still_needed() {
    let fragments = key_fragments();
    for (file, allowed, why) in ALLOWED {
        let mut strings = Strings::default();
        strings.visit_file(&source::parse(&source::root().join(file)));
        assert!(
            strings
                .found
                .iter()
                .any(|s| s == allowed && violation(s, &fragments, false).is_some()),
            "{file} no longer needs {allowed:?} ({why}) allowed"
        );
    }
}

#[test]
fn the_rules_flag_what_they_describe() {
    let fragments = key_fragments();
    let flagged = |s: &str, items: bool| violation(s, &fragments, items).is_some();
    assert!(flagged("ns/ENTITY#e", false));
    assert!(flagged("#STATE", false));
    assert!(flagged("SET rf = :rf", false));
    assert!(flagged("attribute_not_exists(PK)", false));
    assert!(flagged("shard_count", false));
    assert!(flagged("b_rpm_tk", false));
    assert!(flagged("PK", false));
    // Ordinary words only where items are handled.
    assert!(!flagged("status", false));
    assert!(flagged("status", true));
    assert!(!flagged("rate limited, retry later", true));
}
