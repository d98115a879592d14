//! Usage snapshots (reference §1.4.10), written by the aggregator, and the aggregator's
//! per-bucket watermarks.
//!
//! A snapshot is `{ns}/ENTITY#{entity}` / `#USAGE#{resource}#{window_key}` with one number
//! counter per limit named exactly after the limit (whole tokens), `total_events`, optional
//! `{limit}#od` overdraw counts, identity attributes and GSI2/GSI4 keys.
//!
//! # Items shared by several windows
//! A snapshot item is keyed by its window's start alone, so the item of a day's hour 00 is
//! also that day's item (`YYYY-MM-DDT00:00:00Z`), and on the first of a month the month's
//! too. The aggregators (dynalimit's and zae-limiter's alike) add every configured window's
//! counts to that one item and write its `window` once, from the first window in the
//! configured order: with the default order, finest first (`hourly,daily[,monthly]`), it
//! names the finest window that had usage there. Its counters are the sum of those windows.
//! [`window_holds`] says which queries such an item answers.
//!
//! The watermark of a bucket item is `{ns}/ENTITY#{entity}` / `#AGGREGATOR#{resource}#{shard}`
//! with `seq` (S), owner attributes, GSI4 keys and a `ttl`: the sequence number of the last
//! stream record of that bucket item whose usage is in the snapshots.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::attr;
use crate::expr::Expr;
use crate::item::{self, Item};
use crate::keys;

/// A snapshot window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SnapshotWindow {
    /// One UTC hour.
    Hourly,
    /// One UTC day.
    Daily,
    /// One UTC calendar month.
    Monthly,
}

impl SnapshotWindow {
    /// Every window, finest first.
    pub const ALL: [SnapshotWindow; 3] = [
        SnapshotWindow::Hourly,
        SnapshotWindow::Daily,
        SnapshotWindow::Monthly,
    ];

    /// The stored name: `hourly`, `daily` or `monthly`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotWindow::Hourly => "hourly",
            SnapshotWindow::Daily => "daily",
            SnapshotWindow::Monthly => "monthly",
        }
    }

    /// The window key of the window holding `epoch_ms`: `YYYY-MM-DDTHH:00:00Z` (hourly),
    /// `YYYY-MM-DDT00:00:00Z` (daily) or `YYYY-MM-01T00:00:00Z` (monthly), UTC.
    ///
    /// ```
    /// use dynalimit_format::usage::SnapshotWindow;
    /// let t = 1_700_000_000_000; // 2023-11-14T22:13:20Z
    /// assert_eq!(SnapshotWindow::Hourly.key(t), "2023-11-14T22:00:00Z");
    /// assert_eq!(SnapshotWindow::Daily.key(t), "2023-11-14T00:00:00Z");
    /// assert_eq!(SnapshotWindow::Monthly.key(t), "2023-11-01T00:00:00Z");
    /// ```
    pub fn key(self, epoch_ms: i64) -> String {
        let t = dynalimit_core::time::utc_datetime(epoch_ms);
        let (y, m, d) = (t.year(), t.month(), t.day());
        match self {
            SnapshotWindow::Hourly => format!("{y:04}-{m:02}-{d:02}T{:02}:00:00Z", t.hour()),
            SnapshotWindow::Daily => format!("{y:04}-{m:02}-{d:02}T00:00:00Z"),
            SnapshotWindow::Monthly => format!("{y:04}-{m:02}-01T00:00:00Z"),
        }
    }

    /// Whether `key` (`YYYY-MM-DDTHH:MM:SSZ`) is the start of a window of this kind.
    pub(crate) fn starts_at(self, key: &str) -> bool {
        if key.len() != 20 || !key.ends_with(":00:00Z") {
            return false;
        }
        match self {
            SnapshotWindow::Hourly => true,
            SnapshotWindow::Daily => key.ends_with("T00:00:00Z"),
            SnapshotWindow::Monthly => key.ends_with("T00:00:00Z") && key.get(8..10) == Some("01"),
        }
    }

    /// Parses a comma-separated list such as `hourly,daily` (spaces and empty entries are
    /// ignored, duplicates removed, order kept).
    ///
    /// # Errors
    /// The first unknown name.
    pub fn parse_list(text: &str) -> Result<Vec<SnapshotWindow>, UnknownWindow> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let w: SnapshotWindow = part.parse()?;
            if !out.contains(&w) {
                out.push(w);
            }
        }
        Ok(out)
    }
}

/// A window name other than `hourly`, `daily` or `monthly`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown snapshot window {0:?} (expected hourly, daily or monthly)")]
pub struct UnknownWindow(pub String);

impl FromStr for SnapshotWindow {
    type Err = UnknownWindow;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SnapshotWindow::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| UnknownWindow(s.to_owned()))
    }
}

impl fmt::Display for SnapshotWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an item whose stored `window` is `stored`, starting at `start`, holds the counts
/// of window `wanted`: the same window, or a finer one sharing the item when `start` is also
/// a start of `wanted` (see the module documentation). Unknown names only match exactly.
pub fn window_holds(wanted: &str, stored: &str, start: &str) -> bool {
    if wanted == stored {
        return true;
    }
    match (
        wanted.parse::<SnapshotWindow>(),
        stored.parse::<SnapshotWindow>(),
    ) {
        (Ok(w), Ok(s)) => w > s && w.starts_at(start),
        _ => false,
    }
}

/// One usage snapshot: what an entity consumed of a resource in one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// `hourly`, `daily` or `monthly`.
    pub window: String,
    /// Window start, `YYYY-MM-DDTHH:MM:SSZ`.
    pub window_start: String,
    /// Whole tokens consumed per limit (net of returns), plus `{limit}#od` overdraw counts.
    pub counters: BTreeMap<String, i64>,
    /// Consumption events counted (one per record and limit).
    pub total_events: i64,
}

impl UsageSnapshot {
    /// Decodes a snapshot item; `None` when it lacks its identity attributes. Every number
    /// attribute that is not an attribute of the format is a counter.
    pub fn from_item(found: &Item) -> Option<UsageSnapshot> {
        let text = |name| item::get_s(found, name).filter(|s| !s.is_empty());
        let entity_id = text(attr::ENTITY_ID)?;
        let resource = text(attr::RESOURCE)?;
        let window_start = text(attr::WINDOW_START)?;
        let counters = found
            .iter()
            .filter(|(k, _)| attr::reserved(k).is_none())
            .filter_map(|(k, v)| match v {
                AttributeValue::N(n) => item::parse_number(n).map(|n| (k.clone(), n)),
                _ => None,
            })
            .collect();
        Some(UsageSnapshot {
            entity_id: entity_id.to_owned(),
            resource: resource.to_owned(),
            window: item::get_s(found, attr::WINDOW)
                .unwrap_or_default()
                .to_owned(),
            window_start: window_start.to_owned(),
            counters,
            total_events: item::get_i64(found, attr::TOTAL_EVENTS).unwrap_or(0),
        })
    }
}

/// Attributes of a snapshot item that its update sets or keys on, besides the limit counters
/// and `{limit}#od`. A limit of that name cannot be counted on the item (DynamoDB refuses an
/// update naming one attribute twice, or a key attribute); [`attr::validate_limit_name`]
/// refuses such names, but a bucket another client wrote may carry one.
pub const SNAPSHOT_ATTRIBUTES: &[&str] = &[
    attr::PK,
    attr::SK,
    attr::ENTITY_ID,
    attr::RESOURCE,
    attr::WINDOW,
    attr::WINDOW_START,
    attr::GSI2PK,
    attr::GSI2SK,
    attr::GSI4PK,
    attr::GSI4SK,
    attr::TTL,
    attr::TOTAL_EVENTS,
];

/// What one write adds to one snapshot item.
#[derive(Debug, Clone)]
pub struct SnapshotDelta<'a> {
    /// Namespace id.
    pub namespace_id: &'a str,
    /// The entity.
    pub entity_id: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The window written as `window` when the item is new.
    pub window: SnapshotWindow,
    /// The item's window key.
    pub window_key: &'a str,
    /// Whole tokens per limit.
    pub counters: &'a BTreeMap<String, i64>,
    /// Overdraw counts per limit (stored as `{limit}#od`).
    pub overdrawn: &'a BTreeMap<String, i64>,
    /// Consumption events.
    pub total_events: i64,
    /// `ttl` of a new item (epoch seconds).
    pub ttl_epoch_s: i64,
}

impl SnapshotDelta<'_> {
    /// The key of the snapshot item.
    pub fn key(&self) -> Item {
        item::key(
            keys::entity_pk(self.namespace_id, self.entity_id),
            keys::usage_sk(self.resource, self.window_key),
        )
    }

    /// The update: identity attributes and keys set (`resource`, `window`, `window_start`,
    /// GSI4 keys and `ttl` only when the item has none), counters, overdraws and
    /// `total_events` added.
    pub fn update(&self) -> Expr {
        let (ns, entity, resource) = (self.namespace_id, self.entity_id, self.resource);
        let mut e = Expr::default();
        e.set(attr::ENTITY_ID, item::s(entity));
        e.set_if_absent(attr::RESOURCE, item::s(resource));
        e.set_if_absent(attr::WINDOW, item::s(self.window.as_str()));
        e.set_if_absent(attr::WINDOW_START, item::s(self.window_key));
        e.set(attr::GSI2PK, item::s(keys::resource_pk(ns, resource)));
        e.set(
            attr::GSI2SK,
            item::s(keys::usage_gsi2sk(self.window_key, entity)),
        );
        e.set_if_absent(attr::GSI4PK, item::s(ns));
        e.set_if_absent(attr::GSI4SK, item::s(keys::entity_pk(ns, entity)));
        e.set_if_absent(attr::TTL, item::n(self.ttl_epoch_s));
        for (limit, amount) in self.counters {
            e.add(limit, *amount);
        }
        for (limit, amount) in self.overdrawn {
            e.add(&attr::overdraw(limit), *amount);
        }
        e.add(attr::TOTAL_EVENTS, self.total_events);
        e
    }
}

/// The key of the watermark of one bucket item.
pub fn watermark_key(namespace_id: &str, entity_id: &str, resource: &str, shard: u32) -> Item {
    item::key(
        keys::entity_pk(namespace_id, entity_id),
        keys::watermark_sk(resource, shard),
    )
}

/// The sequence number a watermark item holds.
pub fn watermark_seq(found: &Item) -> Option<&str> {
    item::get_s(found, attr::SEQ)
}

/// The move of a watermark to `applied`, conditioned on the value `expected` the plan was
/// made against (`attribute_not_exists(seq)` for the first one); owner attributes, GSI4 keys
/// and `ttl` are refreshed.
pub fn watermark_update(
    namespace_id: &str,
    entity_id: &str,
    resource: &str,
    shard: u32,
    applied: &str,
    expected: Option<&str>,
    ttl_epoch_s: i64,
) -> Expr {
    let mut e = Expr::default();
    e.set(attr::SEQ, item::s(applied));
    for (name, value) in [
        (attr::ENTITY_ID, item::s(entity_id)),
        (attr::RESOURCE, item::s(resource)),
        (attr::SHARD, item::n(shard)),
        (attr::GSI4PK, item::s(namespace_id)),
        (
            attr::GSI4SK,
            item::s(keys::entity_pk(namespace_id, entity_id)),
        ),
        (attr::TTL, item::n(ttl_epoch_s)),
    ] {
        e.set(name, value);
    }
    let condition = match expected {
        None => e.not_exists(attr::SEQ),
        Some(seq) => e.eq(attr::SEQ, item::s(seq)),
    };
    e.when(condition);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_at_boundaries_and_before_the_epoch() {
        assert_eq!(SnapshotWindow::Hourly.key(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            SnapshotWindow::Hourly.key(3_599_999),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            SnapshotWindow::Hourly.key(3_600_000),
            "1970-01-01T01:00:00Z"
        );
        assert_eq!(SnapshotWindow::Daily.key(-1), "1969-12-31T00:00:00Z");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(
            SnapshotWindow::Daily.key(1_709_251_199_999),
            "2024-02-29T00:00:00Z"
        );
        assert_eq!(
            SnapshotWindow::Monthly.key(1_709_251_200_000),
            "2024-03-01T00:00:00Z"
        );
    }

    #[test]
    fn window_lists_parse_and_reject_unknown_names() {
        assert_eq!(
            SnapshotWindow::parse_list(" hourly, daily,,hourly ").unwrap(),
            vec![SnapshotWindow::Hourly, SnapshotWindow::Daily]
        );
        assert_eq!(
            SnapshotWindow::parse_list("weekly"),
            Err(UnknownWindow("weekly".into()))
        );
    }

    #[test]
    fn items_decode_with_every_unknown_number_as_a_counter() {
        let mut it = item::key("ns/ENTITY#u1", "#USAGE#gpt-4#2026-01-01T00:00:00Z");
        for (k, v) in [
            ("entity_id", item::s("u1")),
            ("resource", item::s("gpt-4")),
            ("window", item::s("hourly")),
            ("window_start", item::s("2026-01-01T00:00:00Z")),
            ("total_events", item::n(3)),
            ("ttl", item::n(99)),
            ("rpm", item::n(5)),
            ("tpm.v2", item::n(-2)),
            ("GSI4PK", item::s("ns")),
        ] {
            it.insert(k.to_owned(), v);
        }
        let s = UsageSnapshot::from_item(&it).unwrap();
        assert_eq!(
            s.counters,
            BTreeMap::from([("rpm".to_owned(), 5), ("tpm.v2".to_owned(), -2)])
        );
        assert_eq!(s.total_events, 3);
        it.remove("entity_id");
        assert!(UsageSnapshot::from_item(&it).is_none());
    }

    #[test]
    fn the_snapshot_update_names_only_listed_attributes_and_counters() {
        let counters = BTreeMap::from([("rpm".to_owned(), 2)]);
        let overdrawn = BTreeMap::from([("rpm".to_owned(), 1)]);
        let delta = SnapshotDelta {
            namespace_id: "ns",
            entity_id: "u1",
            resource: "gpt-4",
            window: SnapshotWindow::Hourly,
            window_key: "2026-03-10T00:00:00Z",
            counters: &counters,
            overdrawn: &overdrawn,
            total_events: 2,
            ttl_epoch_s: 1,
        };
        let update = delta.update();
        let names = update.names().unwrap();
        let key = delta.key();
        let mut named: Vec<&str> = names
            .values()
            .map(String::as_str)
            .filter(|n| !matches!(*n, "rpm" | "rpm#od"))
            .chain(key.keys().map(String::as_str))
            .collect();
        named.sort_unstable();
        let mut listed = SNAPSHOT_ATTRIBUTES.to_vec();
        listed.sort_unstable();
        assert_eq!(named, listed);
        for a in SNAPSHOT_ATTRIBUTES {
            assert!(attr::reserved(a).is_some(), "{a}");
        }
    }
}
