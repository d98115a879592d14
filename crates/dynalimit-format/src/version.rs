//! The version record (reference §1.4.3, §10) and version comparison.

use std::cmp::Ordering;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::attr;
use crate::expr::Expr;
use crate::item::{self, Item};
use crate::keys;

/// The schema version of the key layout this crate reads and writes.
pub const SCHEMA_VERSION: &str = "0.10.0";

/// The zae-limiter version whose feature set dynalimit reads and honours: every feature a
/// 0.17 writer stores (reference §12.8, profile B). A table whose `client_min_version` is
/// above this refuses dynalimit. It is also what dynalimit records as the stack's
/// `lambda_version` when it deploys its aggregator, or creates a table that has none: the
/// version of the reader that the other library's writers check before storing a feature.
pub const COMPATIBILITY_VERSION: &str = "0.17.0";

/// The minimum reader of a session quota (`reset_after`) in a configuration.
pub const SESSION_QUOTAS: &str = "0.15.0";
/// The minimum reader of a cascade policy stored on a configuration level.
pub const CASCADE_POLICIES: &str = "0.16.0";
/// The minimum reader of a soft limit, a bypass, a parent move or a quota top-up.
pub const STAMPS_AND_MOVES: &str = "0.17.0";

/// Whether the aggregator the version record names (`lambda_version`) reads a feature whose
/// minimum reader is `minimum`: its release (a pre-release tag dropped) is at least
/// `minimum`. A record that names none proves nothing.
///
/// ```
/// use dynalimit_format::version::reads;
/// assert!(reads(Some("0.17.0"), "0.15.0"));
/// assert!(reads(Some("0.15.0rc2"), "0.15.0"));
/// assert!(!reads(Some("0.14.2"), "0.15.0"));
/// assert!(!reads(None, "0.15.0"));
/// ```
pub fn reads(lambda_version: Option<&str>, minimum: &str) -> bool {
    let (Some(deployed), Some(minimum)) = (
        lambda_version.and_then(Version::parse),
        Version::parse(minimum),
    ) else {
        return false;
    };
    let release = Version {
        release: deployed.release,
        pre: None,
    };
    release >= minimum
}

/// The `client_min_version` a writer of a feature whose minimum reader is `minimum` leaves
/// behind, when it must raise the stored one (`None`: the stored minimum is already as
/// high; it is never lowered).
///
/// ```
/// use dynalimit_format::version::ratcheted;
/// assert_eq!(ratcheted(Some("0.0.0"), "0.15.0").as_deref(), Some("0.15.0"));
/// assert_eq!(ratcheted(None, "0.17.0").as_deref(), Some("0.17.0"));
/// assert_eq!(ratcheted(Some("0.17.0"), "0.15.0"), None);
/// ```
pub fn ratcheted(stored: Option<&str>, minimum: &str) -> Option<String> {
    let current = stored.and_then(Version::parse).unwrap_or(Version {
        release: vec![0, 0, 0],
        pre: None,
    });
    (Version::parse(minimum)? > current).then(|| minimum.to_owned())
}

/// The conditional raise of `client_min_version` to `new` where it still reads `stored`
/// (or is absent when `stored` is `None`), on an existing record.
pub fn ratchet(stored: Option<&str>, new: &str) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    let c = match stored {
        Some(v) => e.eq(attr::CLIENT_MIN_VERSION, item::s(v)),
        None => e.not_exists(attr::CLIENT_MIN_VERSION),
    };
    e.when(c);
    e.set(attr::CLIENT_MIN_VERSION, item::s(new));
    e
}

/// The features whose writers ratchet `client_min_version` (reference §10): the minimum
/// reader each one sets, and what it is called.
pub(crate) const RATCHETING_FEATURES: [(&str, &str); 6] = [
    ("0.15.0", "session quotas (a limit with reset_after)"),
    ("0.16.0", "cascade policies"),
    ("0.17.0", "soft limits"),
    ("0.17.0", "bypass (disabled = \"bypass\")"),
    ("0.17.0", "parent moves (set_parent)"),
    ("0.17.0", "quota top-ups"),
];

/// The features a table whose `client_min_version` is `required` may carry and that a
/// client declaring [`COMPATIBILITY_VERSION`] does not implement: those whose minimum reader
/// is above the declared version and at most `required`, newest first (the ratchet keeps
/// only the highest minimum, so the newest group is the one that certainly set it).
pub(crate) fn unimplemented_features(required: &str) -> Vec<&'static str> {
    let (Some(required), Some(declared)) = (
        Version::parse(required),
        Version::parse(COMPATIBILITY_VERSION),
    ) else {
        return Vec::new();
    };
    let mut found: Vec<(Version, &'static str)> = RATCHETING_FEATURES
        .iter()
        .filter_map(|(min, name)| {
            let min = Version::parse(min)?;
            (min > declared && min <= required).then_some((min, *name))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0));
    found.into_iter().map(|(_, name)| name).collect()
}

/// Says which features ratcheted a table to `required`, for the refusal of a client that
/// declares [`COMPATIBILITY_VERSION`].
pub fn ratchet_explanation(required: &str) -> String {
    let features = unimplemented_features(required);
    let Some(min) = Version::parse(required) else {
        return format!("the table's client_min_version {required:?} cannot be parsed");
    };
    let newest: Vec<&str> = RATCHETING_FEATURES
        .iter()
        .filter(|(m, _)| Version::parse(m).is_some_and(|m| m == min))
        .map(|(_, name)| *name)
        .collect();
    if features.is_empty() {
        return format!(
            "a client newer than zae-limiter {COMPATIBILITY_VERSION} (or a hand edit) raised the \
             table's minimum client version to {required}; dynalimit implements the zae-limiter \
             {COMPATIBILITY_VERSION} feature set"
        );
    }
    let mut text = String::new();
    if !newest.is_empty() {
        text.push_str(&format!(
            "a zae-limiter {required} writer stored one of: {}",
            newest.join(", ")
        ));
    } else {
        text.push_str(&format!(
            "the table's minimum client version {required} was raised by hand or by a newer writer"
        ));
    }
    let older: Vec<&str> = features
        .iter()
        .copied()
        .filter(|f| !newest.contains(f))
        .collect();
    if !older.is_empty() {
        text.push_str(&format!("; the table may also carry {}", older.join(", ")));
    }
    text.push_str(&format!(
        "; dynalimit implements the zae-limiter {COMPATIBILITY_VERSION} feature set"
    ));
    text
}

/// What `updated_by` says when dynalimit writes the version record.
pub fn writer_tag() -> String {
    format!("dynalimit:{}", env!("CARGO_PKG_VERSION"))
}

/// The version record of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRecord {
    /// The key-layout version (`0.10.0`).
    pub schema_version: String,
    /// The aggregator code deployed, when known.
    pub lambda_version: Option<String>,
    /// The oldest client allowed to use the table.
    pub client_min_version: String,
    /// When the record was last written (`YYYY-MM-DDTHH:MM:SSZ`).
    pub updated_at: String,
    /// Who wrote it last.
    pub updated_by: Option<String>,
}

impl VersionRecord {
    /// Decodes the version record; missing fields read as the reader defaults (the current
    /// schema, `client_min_version` `0.0.0`).
    pub fn from_item(found: &Item) -> VersionRecord {
        let text =
            |name: &str, default: &str| item::get_s(found, name).unwrap_or(default).to_string();
        VersionRecord {
            schema_version: text(attr::SCHEMA_VERSION, SCHEMA_VERSION),
            lambda_version: item::get_s(found, attr::LAMBDA_VERSION).map(str::to_string),
            client_min_version: text(attr::CLIENT_MIN_VERSION, "0.0.0"),
            updated_at: text(attr::UPDATED_AT, ""),
            updated_by: item::get_s(found, attr::UPDATED_BY).map(str::to_string),
        }
    }
}

/// The key of the version record.
pub fn record_key() -> Item {
    item::key(keys::SYSTEM_RESERVED_PK, keys::VERSION_SK)
}

/// The version record as first written (put under `attribute_not_exists(PK)`):
/// `client_min_version = 0.0.0`, `lambda_version` NULL unless given.
pub fn new_record(now_iso: &str, lambda_version: Option<&str>) -> Item {
    let mut record = record_key();
    for (name, value) in [
        (attr::SCHEMA_VERSION, item::s(SCHEMA_VERSION)),
        (attr::LAMBDA_VERSION, item::s_or_null(lambda_version)),
        (attr::CLIENT_MIN_VERSION, item::s("0.0.0")),
        (attr::UPDATED_AT, item::s(now_iso)),
        (attr::UPDATED_BY, item::s(writer_tag())),
        (attr::GSI4PK, item::s(keys::RESERVED_NS)),
        (attr::GSI4SK, item::s(keys::SYSTEM_RESERVED_PK)),
    ] {
        record.insert(name.to_owned(), value);
    }
    record
}

/// The refresh of an existing record: schema, writer and time, the Lambda version when
/// given, and `client_min_version` only when missing (it is never lowered).
pub fn refresh(now_iso: &str, lambda_version: Option<&str>) -> Expr {
    let mut e = Expr::default();
    e.set(attr::SCHEMA_VERSION, item::s(SCHEMA_VERSION));
    e.set(attr::UPDATED_AT, item::s(now_iso));
    e.set(attr::UPDATED_BY, item::s(writer_tag()));
    e.set_if_absent(attr::CLIENT_MIN_VERSION, item::s("0.0.0"));
    if let Some(lambda) = lambda_version {
        e.set(attr::LAMBDA_VERSION, AttributeValue::S(lambda.to_owned()));
    }
    e
}

/// A parsed version: release numbers and an optional pre-release tag (which sorts before the
/// release). Missing trailing numbers count as zero (`0.10` equals `0.10.0`).
#[derive(Debug, Clone)]
pub struct Version {
    release: Vec<u64>,
    pre: Option<String>,
}

impl Version {
    /// Parses `v1.2.3`, `1.2.3+local`, `1.2.3.dev4`, `1.2.3rc1`, `1.2.3-beta`. Returns `None`
    /// for text without a leading number.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let text = text.split('+').next().unwrap_or(text);
        let mut release = Vec::new();
        let mut rest = text;
        loop {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                break;
            }
            release.push(rest[..digits].parse().ok()?);
            rest = &rest[digits..];
            match rest.strip_prefix('.') {
                Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => rest = r,
                _ => break,
            }
        }
        if release.is_empty() {
            return None;
        }
        let pre = rest.trim_start_matches(['.', '-']);
        Some(Version {
            release,
            pre: (!pre.is_empty()).then(|| pre.to_string()),
        })
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.release.len().max(other.release.len());
        for i in 0..n {
            let a = self.release.get(i).copied().unwrap_or(0);
            let b = other.release.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        match (&self.pre, &other.pre) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => a.cmp(b),
        }
    }
}

/// True when a client declaring `implemented` may use a table whose minimum is `required`.
/// An unparsable minimum is treated as a refusal.
pub fn satisfies(implemented: &str, required: &str) -> bool {
    match (Version::parse(implemented), Version::parse(required)) {
        (Some(i), Some(r)) => i >= r,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_like_the_python_library() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("0.14.0") < v("0.15.0"));
        assert!(v("0.15.0rc1") < v("0.15.0"));
        assert!(v("0.15.0.dev3") < v("0.15.0"));
        assert!(v("v0.10.0+local") == v("0.10.0"));
        assert!(v("0.10") == v("0.10.0"));
        assert!(v("1.0.0") > v("0.17.3"));
        assert!(Version::parse("banana").is_none());
    }

    #[test]
    fn every_ratcheting_feature_is_implemented() {
        for (min, name) in RATCHETING_FEATURES {
            assert!(satisfies(COMPATIBILITY_VERSION, min), "{name}");
        }
        assert!(unimplemented_features("0.17.0").is_empty());
        let text = ratchet_explanation("0.18.0");
        assert!(text.contains("newer than zae-limiter 0.17.0"), "{text}");
        assert!(text.contains("to 0.18.0"), "{text}");
        assert!(
            text.contains("implements the zae-limiter 0.17.0 feature set"),
            "{text}"
        );
        assert!(ratchet_explanation("nonsense").contains("cannot be parsed"));
    }

    #[test]
    fn the_compatibility_gate() {
        assert!(satisfies(COMPATIBILITY_VERSION, "0.0.0"));
        assert!(satisfies(COMPATIBILITY_VERSION, "0.15.0"));
        assert!(satisfies(COMPATIBILITY_VERSION, "0.17.0"));
        assert!(!satisfies(COMPATIBILITY_VERSION, "0.18.0"));
        assert!(!satisfies(COMPATIBILITY_VERSION, "garbage"));
    }
}
