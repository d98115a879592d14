//! Alert thresholds and crossing markers: dynalimit's items for budget alerts, which
//! zae-limiter 0.17 neither writes nor reads.
//!
//! * **Thresholds** of one (entity, resource): `PK = {ns}/ENTITY#{entity}`,
//!   `SK = #ALERTS#{resource}`, with `entity_id`, `resource`, GSI4 keys (so namespace purges
//!   remove the item) and one attribute `t_{limit}` (S) per limit: the percentages of the
//!   limit's period grant at which an alert is published, ascending, comma-separated
//!   (`"80,100"`); and one attribute `r_{limit}` (N) per limit with a refusal alert: the
//!   minutes, 1 to [`MAX_REFUSING_MINUTES`], that the limit must refuse in a row before an
//!   alert is published ([`crate::refusal`] has the minutes).
//! * **Crossing markers**: `PK = {ns}/ENTITY#{entity}`,
//!   `SK = #ALERTED#{resource}#{limit}#{level}#{period_start_ms}`, put with
//!   `attribute_not_exists(PK)` before an alert is published, so each threshold is published at
//!   most once per period. They carry `entity_id`, `resource`, `limit`, `level`, the crossing
//!   time `at` (epoch ms), a `token` naming the write that created them, GSI4 keys and a `ttl`.
//!   A refusal alert's marker has `refusing` where a quota's has the percentage, and the
//!   first minute of the run of refusals it published
//!   ([`crate::refusal::Episode::marker_key`]), with `minutes` instead of `level`.
//!
//! zae-limiter's readers of an entity partition query by sort-key prefix (`#META`,
//! `#CONFIG#`, `#USAGE#`); neither prefix here matches theirs. Its `delete_entity` removes
//! every item of the partition, these included, and a namespace purge removes them through
//! GSI4.
//!
//! Every value read back is bounded: a threshold attribute that is not a list of at most
//! [`MAX_LEVELS`] distinct percentages in `1..=100`, or a refusal attribute that is not an
//! integer in `1..=`[`MAX_REFUSING_MINUTES`], is reported, not used.

use std::collections::BTreeMap;

use dynalimit_core::CoreError;

use crate::expr::Expr;
use crate::item::{self, Item};
use crate::{attr, keys};

/// The prefix of a threshold attribute: `t_{limit}`.
pub const LEVELS_PREFIX: &str = "t_";
/// The prefix of a refusal threshold attribute: `r_{limit}`.
pub const REFUSING_PREFIX: &str = "r_";
/// The longest run of refusal minutes an alert may wait for.
pub const MAX_REFUSING_MINUTES: u8 = 60;
/// The attribute holding a refusal alert marker's threshold, minutes.
pub const MINUTES: &str = "minutes";
/// Most thresholds on one limit.
pub const MAX_LEVELS: usize = 10;
/// The attribute naming a crossing marker's limit.
pub const LIMIT: &str = "limit";
/// The attribute holding a crossing marker's percentage.
pub const LEVEL: &str = "level";
/// The attribute holding a crossing marker's crossing time, epoch ms.
pub const AT: &str = "at";
/// The attribute naming the write that created a crossing marker.
pub const TOKEN: &str = "token";

/// Checks `levels` before anything is written and returns them ascending: one to
/// [`MAX_LEVELS`] distinct percentages, each in `1..=100`.
///
/// ```
/// use dynalimit_format::alert::validate_levels;
/// assert_eq!(validate_levels(&[100, 80]).unwrap(), vec![80, 100]);
/// assert!(validate_levels(&[]).is_err());
/// assert!(validate_levels(&[0]).is_err());
/// assert!(validate_levels(&[101]).is_err());
/// assert!(validate_levels(&[80, 80]).is_err());
/// ```
///
/// # Errors
/// [`CoreError::InvalidValue`] naming the rule broken.
pub fn validate_levels(levels: &[u8]) -> Result<Vec<u8>, CoreError> {
    let render = || format!("{levels:?}");
    if levels.is_empty() {
        return Err(CoreError::invalid_value(
            "alert thresholds",
            render(),
            "give at least one percentage",
        ));
    }
    if levels.len() > MAX_LEVELS {
        return Err(CoreError::invalid_value(
            "alert thresholds",
            render(),
            format!("at most {MAX_LEVELS} on one limit"),
        ));
    }
    if let Some(bad) = levels.iter().find(|l| !(1..=100).contains(*l)) {
        return Err(CoreError::invalid_value(
            "alert threshold",
            bad,
            "a percentage of the period's grant, 1 to 100",
        ));
    }
    let mut sorted = levels.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(CoreError::invalid_value(
            "alert thresholds",
            render(),
            "each percentage once",
        ));
    }
    Ok(sorted)
}

/// Checks a refusal threshold before anything is written: 1 to [`MAX_REFUSING_MINUTES`]
/// minutes.
///
/// ```
/// use dynalimit_format::alert::validate_refusing;
/// assert_eq!(validate_refusing(5).unwrap(), 5);
/// assert!(validate_refusing(0).is_err());
/// assert!(validate_refusing(61).is_err());
/// ```
///
/// # Errors
/// [`CoreError::InvalidValue`] naming the rule broken.
pub fn validate_refusing(minutes: u32) -> Result<u8, CoreError> {
    u8::try_from(minutes)
        .ok()
        .filter(|m| (1..=MAX_REFUSING_MINUTES).contains(m))
        .ok_or_else(|| {
            CoreError::invalid_value(
                "refusal alert",
                format!("{minutes} minutes"),
                format!("1 to {MAX_REFUSING_MINUTES} minutes"),
            )
        })
}

/// Reads a stored refusal threshold: `None` unless it is an integer [`validate_refusing`]
/// accepts.
pub fn decode_refusing(stored: &str) -> Option<u8> {
    if stored.is_empty() || stored.len() > 2 || !stored.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    validate_refusing(stored.parse().ok()?).ok()
}

/// `levels` as the table stores them: `"80,100"`.
pub fn encode_levels(levels: &[u8]) -> String {
    levels
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads a stored threshold list; `None` unless it is what [`validate_levels`] accepts
/// (at most 40 characters).
///
/// ```
/// use dynalimit_format::alert::decode_levels;
/// assert_eq!(decode_levels("80,100"), Some(vec![80, 100]));
/// assert_eq!(decode_levels("100,80"), Some(vec![80, 100]));
/// assert_eq!(decode_levels("80,,100"), None);
/// assert_eq!(decode_levels("1e3"), None);
/// ```
pub fn decode_levels(stored: &str) -> Option<Vec<u8>> {
    if stored.len() > 40 {
        return None;
    }
    let levels: Vec<u8> = stored
        .split(',')
        .map(|part| {
            (!part.is_empty() && part.len() <= 3 && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u8>().ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    validate_levels(&levels).ok()
}

/// The key of the threshold item of (`entity`, `resource`).
pub fn thresholds_key(ns: &str, entity: &str, resource: &str) -> Item {
    item::key(keys::entity_pk(ns, entity), keys::alerts_sk(resource))
}

/// The thresholds of one (entity, resource), as read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// Percentages by limit name, ascending.
    pub levels: BTreeMap<String, Vec<u8>>,
    /// Refusal thresholds by limit name: minutes of refusals in a row.
    pub refusing: BTreeMap<String, u8>,
    /// Threshold attributes that could not be read, one line each (another writer's values).
    pub unreadable: Vec<String>,
}

/// Reads a threshold item. `None` when it is not one (its sort key does not start with
/// [`keys::ALERTS_SK_PREFIX`] or its partition is not an entity's).
pub fn thresholds_of(ns: &str, found: &Item) -> Option<Thresholds> {
    let (pk, sk) = item::key_of(found)?;
    let resource = sk.strip_prefix(keys::ALERTS_SK_PREFIX)?;
    let entity = pk.strip_prefix(&keys::entity_pk(ns, ""))?;
    let mut out = Thresholds {
        entity_id: entity.to_owned(),
        resource: resource.to_owned(),
        ..Thresholds::default()
    };
    for (name, value) in found {
        if let Some(limit) = name.strip_prefix(REFUSING_PREFIX) {
            match value.as_n().ok().and_then(|n| decode_refusing(n)) {
                Some(minutes) if dynalimit_core::ids::validate_limit_name(limit).is_ok() => {
                    out.refusing.insert(limit.to_owned(), minutes);
                }
                _ => out.unreadable.push(format!(
                    "{pk}|{sk}: attribute {name} is not a number of minutes 1 to {MAX_REFUSING_MINUTES}"
                )),
            }
            continue;
        }
        let Some(limit) = name.strip_prefix(LEVELS_PREFIX) else {
            continue;
        };
        match value.as_s().ok().and_then(|s| decode_levels(s)) {
            Some(levels) if dynalimit_core::ids::validate_limit_name(limit).is_ok() => {
                out.levels.insert(limit.to_owned(), levels);
            }
            _ => out.unreadable.push(format!(
                "{pk}|{sk}: attribute {name} is not a list of percentages 1 to 100"
            )),
        }
    }
    Some(out)
}

/// One threshold crossed in one period: what a marker records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Crossing {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// The limit.
    pub limit: String,
    /// The percentage crossed.
    pub level: u8,
    /// The start of the period (a calendar quota's reset edge, a session quota's window
    /// start), epoch ms.
    pub period_start_ms: i64,
}

impl Crossing {
    /// The key of this crossing's marker in namespace `ns`.
    pub fn marker_key(&self, ns: &str) -> Item {
        item::key(
            keys::entity_pk(ns, &self.entity_id),
            keys::crossed_sk(
                &self.resource,
                &self.limit,
                self.level,
                self.period_start_ms,
            ),
        )
    }

    /// The marker item: the key, identity, `at`, `token`, GSI4 keys and `ttl` (epoch
    /// seconds).
    pub fn marker_item(&self, ns: &str, at_ms: i64, token: &str, ttl_s: i64) -> Item {
        let mut it = self.marker_key(ns);
        for (name, value) in [
            (attr::ENTITY_ID, item::s(&self.entity_id)),
            (attr::RESOURCE, item::s(&self.resource)),
            (LIMIT, item::s(&self.limit)),
            (LEVEL, item::n(self.level)),
            (AT, item::n(at_ms)),
            (TOKEN, item::s(token)),
            (attr::GSI4PK, item::s(ns)),
            (attr::GSI4SK, item::s(keys::entity_pk(ns, &self.entity_id))),
            (attr::TTL, item::n(ttl_s)),
        ] {
            it.insert(name.to_owned(), value);
        }
        it
    }
}

/// The condition of a marker's put: that the marker is new.
pub fn marker_is_new() -> Expr {
    let mut e = Expr::default();
    let c = e.not_exists(attr::PK);
    e.when(c);
    e
}

/// The condition of a marker's undo: that it is still the one written with `token`.
pub fn marker_written_with(token: &str) -> Expr {
    let mut e = Expr::default();
    let c = e.eq(TOKEN, item::s(token));
    e.when(c);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_and_refuse_what_is_out_of_bounds() {
        for levels in [vec![1], vec![50, 80, 100], (1..=10).collect::<Vec<u8>>()] {
            assert_eq!(decode_levels(&encode_levels(&levels)), Some(levels));
        }
        for stored in [
            "",
            "0",
            "101",
            "255",
            "256",
            "-1",
            "80,80",
            " 80",
            "80 ",
            "+80",
            "0080",
            "1,2,3,4,5,6,7,8,9,10,11",
        ] {
            assert_eq!(decode_levels(stored), None, "{stored:?}");
        }
        assert_eq!(decode_levels(&"1,".repeat(30)), None);
    }

    #[test]
    fn a_threshold_item_reads_back_and_reports_what_it_cannot_use() {
        let mut it = thresholds_key("ns1", "acme", "gpt-4");
        it.insert("t_tpd".into(), item::s("80,100"));
        it.insert("t_bad".into(), item::s("80,x"));
        it.insert("t_num".into(), item::n(80));
        it.insert("t_".into(), item::s("80"));
        it.insert("entity_id".into(), item::s("acme"));
        it.insert("r_rpm".into(), item::n(5));
        it.insert("r_far".into(), item::n(61));
        it.insert("r_str".into(), item::s("5"));
        it.insert("r_big".into(), item::n("1e1"));
        let t = thresholds_of("ns1", &it).unwrap();
        assert_eq!(t.refusing, BTreeMap::from([("rpm".to_owned(), 5)]));
        assert_eq!(t.entity_id, "acme");
        assert_eq!(t.resource, "gpt-4");
        assert_eq!(
            t.levels,
            BTreeMap::from([("tpd".to_owned(), vec![80, 100])])
        );
        assert_eq!(t.unreadable.len(), 6, "{:?}", t.unreadable);
        assert!(thresholds_of("ns2", &it).is_none());
    }

    #[test]
    fn a_marker_is_keyed_by_threshold_and_period() {
        let c = Crossing {
            entity_id: "acme".into(),
            resource: "gpt-4".into(),
            limit: "tpd".into(),
            level: 80,
            period_start_ms: 1_700_000_000_000,
        };
        let it = c.marker_item("ns1", 1_700_000_100_000, "t1", 1_800_000_000);
        assert_eq!(
            item::key_of(&it),
            Some(("ns1/ENTITY#acme", "#ALERTED#gpt-4#tpd#80#1700000000000"))
        );
        assert_eq!(item::get_s(&it, TOKEN), Some("t1"));
        assert_eq!(item::get_i64(&it, LEVEL), Some(80));
    }
}
