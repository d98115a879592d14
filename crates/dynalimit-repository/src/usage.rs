//! Usage snapshots written by the aggregator (reference §1.4.10): queries per entity or per
//! resource, and summaries over them.
//!
//! # Items shared by several windows
//! A snapshot item is keyed by its window's start alone, so the item of a day's hour 00 is
//! also that day's item (`YYYY-MM-DDT00:00:00Z`), and on the first of a month the month's
//! too. The aggregators (dynalimit's and zae-limiter's alike) add every configured window's
//! counts to that one item and write its `window` once, from the first window in the
//! configured order: with the default order, finest first (`hourly,daily[,monthly]`), it
//! names the finest window that had usage there. Its counters are the sum of those windows.
//!
//! Consequently the counts of a shared item are not one window's: with `hourly,daily` the
//! day's first item holds hour 00's usage plus the whole day's, so a summary of either window
//! that includes it counts hour 00 twice (three times on the first of a month when `monthly`
//! is configured too). The format keeps no separate share, so readers (this one and
//! zae-limiter's) report the item as stored (pinned by the aggregator test
//! `shared_windows::a_year_end_batch_with_every_window_writes_each_shared_item_once`).
//!
//! A window filter therefore keeps an item whose stored `window` is that window **or a finer
//! one** when the item's start is a start of the filtered window: a daily query finds the
//! day's item even when it says `hourly`, a monthly one finds the month's item whatever it
//! says; an hourly query keeps only items that say `hourly` (an item a daily write created
//! holds no usage of hour 00). With windows configured coarsest first the stored `window`
//! is the coarsest sharer and finer queries miss shared items.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::CoreError;
use dynalimit_core::ids;

use crate::config::{decode_cursor, encode_cursor};
use crate::error::classify;
use crate::item::{self, Item};
use crate::{Repository, RepositoryError, keys};

/// Largest page a snapshot query asks for.
pub const MAX_USAGE_PAGE: usize = 1000;
/// Most snapshots a summary reads.
pub const MAX_SUMMARY_SNAPSHOTS: usize = 10_000;

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

/// Which snapshots to read. Set an entity, a resource, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageQuery {
    /// Snapshots of this entity (newest first; narrowed to `resource` when both are set).
    pub entity_id: Option<String>,
    /// Snapshots of this resource across entities (GSI2, newest first) when no entity is set.
    pub resource: Option<String>,
    /// Only this window (`hourly`, `daily`, `monthly`). Shared items count as the coarser
    /// windows they also start (see the module documentation).
    pub window: Option<String>,
    /// Only windows starting at or after this instant (`YYYY-MM-DDTHH:MM:SSZ`).
    pub start: Option<String>,
    /// Only windows starting at or before this instant.
    pub end: Option<String>,
}

impl UsageQuery {
    /// Snapshots of one entity.
    pub fn entity(entity_id: impl Into<String>) -> Self {
        UsageQuery {
            entity_id: Some(entity_id.into()),
            ..UsageQuery::default()
        }
    }

    /// Snapshots of one resource across entities.
    pub fn resource(resource: impl Into<String>) -> Self {
        UsageQuery {
            resource: Some(resource.into()),
            ..UsageQuery::default()
        }
    }

    /// Narrows to one resource.
    #[must_use]
    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Narrows to one window type.
    #[must_use]
    pub fn with_window(mut self, window: impl Into<String>) -> Self {
        self.window = Some(window.into());
        self
    }

    /// Narrows to windows starting within `[start, end]` (either bound optional).
    #[must_use]
    pub fn between(mut self, start: Option<String>, end: Option<String>) -> Self {
        self.start = start;
        self.end = end;
        self
    }

    fn validate(&self) -> Result<(), CoreError> {
        if self.entity_id.is_none() && self.resource.is_none() {
            return Err(CoreError::invalid_value(
                "usage query",
                "no entity, no resource",
                "give an entity, a resource, or both",
            ));
        }
        if let Some(e) = &self.entity_id {
            ids::validate_entity_id(e)?;
        }
        if let Some(r) = &self.resource {
            ids::validate_resource(r)?;
        }
        if let Some(w) = &self.window
            && !matches!(w.as_str(), "hourly" | "daily" | "monthly")
        {
            return Err(CoreError::invalid_value(
                "window",
                w,
                "must be hourly, daily or monthly",
            ));
        }
        Ok(())
    }

    fn keeps(&self, s: &UsageSnapshot) -> bool {
        self.window
            .as_ref()
            .is_none_or(|w| window_holds(w, &s.window, &s.window_start))
            && self.start.as_ref().is_none_or(|t| s.window_start >= *t)
            && self.end.as_ref().is_none_or(|t| s.window_start <= *t)
    }
}

/// Rank of a window, finest first; `None` for a name the format does not define.
fn window_rank(window: &str) -> Option<u8> {
    match window {
        "hourly" => Some(0),
        "daily" => Some(1),
        "monthly" => Some(2),
        _ => None,
    }
}

/// True when `start` (`YYYY-MM-DDTHH:MM:SSZ`) is the start of a `window`.
fn starts(window: &str, start: &str) -> bool {
    let b = start.as_bytes();
    if b.len() != 20 || !start.ends_with(":00:00Z") {
        return false;
    }
    match window {
        "hourly" => true,
        "daily" => start.ends_with("T00:00:00Z"),
        "monthly" => start.ends_with("T00:00:00Z") && &start[8..10] == "01",
        _ => false,
    }
}

/// Whether an item stored with `stored` window starting at `start` holds `wanted`'s counts
/// (see the module documentation on shared items).
fn window_holds(wanted: &str, stored: &str, start: &str) -> bool {
    if wanted == stored {
        return true;
    }
    match (window_rank(wanted), window_rank(stored)) {
        (Some(w), Some(s)) => w > s && starts(wanted, start),
        _ => false,
    }
}

/// One page of snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsagePage {
    /// Matching snapshots of this page (filters apply after reading, so a page may hold fewer
    /// than asked, even none, while more follow).
    pub snapshots: Vec<UsageSnapshot>,
    /// Cursor of the next page, `None` at the end.
    pub next: Option<String>,
}

/// Totals over a set of snapshots.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageSummary {
    /// Snapshots read.
    pub snapshot_count: usize,
    /// Sum per counter.
    pub total: BTreeMap<String, i64>,
    /// Mean per counter over the snapshots that carry it.
    pub average: BTreeMap<String, f64>,
    /// Total consumption events.
    pub total_events: i64,
    /// Earliest window start.
    pub min_window_start: Option<String>,
    /// Latest window start.
    pub max_window_start: Option<String>,
    /// True when the summary stopped at [`MAX_SUMMARY_SNAPSHOTS`].
    pub truncated: bool,
}

impl UsageSummary {
    /// Summarises snapshots.
    pub fn of<'a>(snapshots: impl IntoIterator<Item = &'a UsageSnapshot>) -> Self {
        let mut out = UsageSummary::default();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for s in snapshots {
            out.snapshot_count += 1;
            out.total_events += s.total_events;
            for (name, v) in &s.counters {
                *out.total.entry(name.clone()).or_default() += v;
                *counts.entry(name.clone()).or_default() += 1;
            }
            if out
                .min_window_start
                .as_ref()
                .is_none_or(|m| s.window_start < *m)
            {
                out.min_window_start = Some(s.window_start.clone());
            }
            if out
                .max_window_start
                .as_ref()
                .is_none_or(|m| s.window_start > *m)
            {
                out.max_window_start = Some(s.window_start.clone());
            }
        }
        #[allow(clippy::cast_precision_loss)]
        for (name, total) in &out.total {
            let n = counts.get(name).copied().unwrap_or(1).max(1);
            out.average.insert(name.clone(), *total as f64 / n as f64);
        }
        out
    }
}

/// Decodes a snapshot item; `None` when it lacks its identity attributes.
pub fn snapshot_from_item(found: &Item) -> Option<UsageSnapshot> {
    let entity_id = item::get_s(found, "entity_id").filter(|s| !s.is_empty())?;
    let resource = item::get_s(found, "resource").filter(|s| !s.is_empty())?;
    let window_start = item::get_s(found, "window_start").filter(|s| !s.is_empty())?;
    let counters = found
        .iter()
        // Every attribute the format gives an item is reserved as a limit name; the rest
        // are counters.
        .filter(|(k, _)| ids::reserved_limit_name(k).is_none())
        .filter_map(|(k, v)| match v {
            AttributeValue::N(n) => item::parse_number(n).map(|n| (k.clone(), n)),
            _ => None,
        })
        .collect();
    Some(UsageSnapshot {
        entity_id: entity_id.to_owned(),
        resource: resource.to_owned(),
        window: item::get_s(found, "window").unwrap_or_default().to_owned(),
        window_start: window_start.to_owned(),
        counters,
        total_events: item::get_i64(found, "total_events").unwrap_or(0),
    })
}

impl Repository {
    /// One page of usage snapshots of this namespace, newest first: by entity (the entity's
    /// partition, narrowed to a resource when one is given) or by resource across entities
    /// (GSI2). `limit` (1–1000) is the number of items read; window and time filters apply to
    /// what was read. Pass the returned cursor to read the next page.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a query without entity and resource, a bad id,
    /// window, limit or cursor (nothing is sent); the classified failure otherwise.
    pub async fn usage_snapshots(
        &self,
        query: &UsageQuery,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<UsagePage, RepositoryError> {
        query.validate()?;
        if limit == 0 || limit > MAX_USAGE_PAGE {
            return Err(
                CoreError::invalid_value("limit", limit, "must be between 1 and 1000").into(),
            );
        }
        let start = cursor.map(decode_cursor).transpose()?;
        let ns = self.namespace_id();
        let request = self
            .client()
            .query()
            .table_name(self.table_name())
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(1000))
            .set_exclusive_start_key(start);
        let request = match (&query.entity_id, &query.resource) {
            (Some(entity), resource) => {
                let prefix = match resource {
                    Some(r) => format!("{}{r}#", keys::USAGE_SK_PREFIX),
                    None => keys::USAGE_SK_PREFIX.to_owned(),
                };
                request
                    .key_condition_expression("PK = :pk AND begins_with(SK, :p)")
                    .expression_attribute_values(":pk", item::s(keys::entity_pk(ns, entity)))
                    .expression_attribute_values(":p", item::s(prefix))
            }
            (None, Some(resource)) => request
                .index_name("GSI2")
                .key_condition_expression("GSI2PK = :pk AND begins_with(GSI2SK, :p)")
                .expression_attribute_values(":pk", item::s(keys::resource_pk(ns, resource)))
                .expression_attribute_values(":p", item::s("USAGE#")),
            (None, None) => unreachable!("validated above"),
        };
        let out = request.send().await.map_err(|e| classify("Query", e))?;
        let snapshots = out
            .items()
            .iter()
            .filter_map(snapshot_from_item)
            .filter(|s| query.keeps(s))
            .collect();
        let next = out
            .last_evaluated_key
            .filter(|k| !k.is_empty())
            .map(|k| encode_cursor(&k));
        Ok(UsagePage { snapshots, next })
    }

    /// Totals and averages per counter over every snapshot matching `query`, reading all
    /// pages (up to [`MAX_SUMMARY_SNAPSHOTS`] snapshots).
    ///
    /// # Errors
    /// As [`Repository::usage_snapshots`].
    pub async fn usage_summary(&self, query: &UsageQuery) -> Result<UsageSummary, RepositoryError> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        let mut truncated = false;
        loop {
            let page = self
                .usage_snapshots(query, MAX_USAGE_PAGE, cursor.as_deref())
                .await?;
            all.extend(page.snapshots);
            match page.next {
                Some(next) if all.len() < MAX_SUMMARY_SNAPSHOTS => cursor = Some(next),
                Some(_) => {
                    truncated = true;
                    break;
                }
                None => break,
            }
        }
        all.truncate(MAX_SUMMARY_SNAPSHOTS);
        let mut summary = UsageSummary::of(&all);
        summary.truncated = truncated;
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(window_start: &str, rpm: i64, events: i64) -> UsageSnapshot {
        UsageSnapshot {
            entity_id: "u1".into(),
            resource: "gpt-4".into(),
            window: "hourly".into(),
            window_start: window_start.into(),
            counters: BTreeMap::from([("rpm".to_owned(), rpm)]),
            total_events: events,
        }
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
        let s = snapshot_from_item(&it).unwrap();
        assert_eq!(
            s.counters,
            BTreeMap::from([("rpm".to_owned(), 5), ("tpm.v2".to_owned(), -2)])
        );
        assert_eq!(s.total_events, 3);
        it.remove("entity_id");
        assert!(snapshot_from_item(&it).is_none());
    }

    #[test]
    fn summaries_total_and_average_per_counter() {
        let s = [
            snap("2026-01-01T01:00:00Z", 4, 2),
            snap("2026-01-01T00:00:00Z", 1, 1),
        ];
        let sum = UsageSummary::of(&s);
        assert_eq!(sum.snapshot_count, 2);
        assert_eq!(sum.total["rpm"], 5);
        assert!((sum.average["rpm"] - 2.5).abs() < f64::EPSILON);
        assert_eq!(sum.total_events, 3);
        assert_eq!(
            sum.min_window_start.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            sum.max_window_start.as_deref(),
            Some("2026-01-01T01:00:00Z")
        );
    }

    fn snap_of(window: &str, start: &str) -> UsageSnapshot {
        UsageSnapshot {
            window: window.into(),
            ..snap(start, 1, 1)
        }
    }

    #[test]
    fn window_filters_find_items_shared_with_a_finer_window() {
        let day = UsageQuery::entity("u1").with_window("daily");
        let month = UsageQuery::entity("u1").with_window("monthly");
        let hour = UsageQuery::entity("u1").with_window("hourly");
        // The day's item, written first by the hour-00 write.
        let h00 = snap_of("hourly", "2026-03-10T00:00:00Z");
        assert!(day.keeps(&h00) && hour.keeps(&h00) && !month.keeps(&h00));
        // Hour 01 is no day's item.
        let h01 = snap_of("hourly", "2026-03-10T01:00:00Z");
        assert!(hour.keeps(&h01) && !day.keeps(&h01));
        // The first of a month: the month's item whether hour 00 or the day wrote it first.
        for first in ["hourly", "daily", "monthly"] {
            assert!(
                month.keeps(&snap_of(first, "2026-04-01T00:00:00Z")),
                "{first}"
            );
        }
        assert!(day.keeps(&snap_of("daily", "2026-04-01T00:00:00Z")));
        // A daily write created it: hour 00 had no usage, an hourly query skips it.
        assert!(!hour.keeps(&snap_of("daily", "2026-03-10T00:00:00Z")));
        // Written first as a coarser window: finer queries do not claim it.
        assert!(!day.keeps(&snap_of("monthly", "2026-04-01T00:00:00Z")));
        // Unknown or malformed values only match exactly.
        assert!(!day.keeps(&snap_of("weekly", "2026-03-10T00:00:00Z")));
        assert!(!day.keeps(&snap_of("hourly", "2026-03-10T00:00:00")));
    }

    #[test]
    fn queries_are_validated_before_any_request() {
        assert!(UsageQuery::default().validate().is_err());
        assert!(
            UsageQuery::entity("u1")
                .with_window("weekly")
                .validate()
                .is_err()
        );
        assert!(UsageQuery::entity("bad#id").validate().is_err());
        assert!(
            UsageQuery::resource("gpt-4")
                .with_window("daily")
                .validate()
                .is_ok()
        );
        let q = UsageQuery::entity("u1").between(Some("2026-01-01T01:00:00Z".into()), None);
        assert!(q.keeps(&snap("2026-01-01T01:00:00Z", 1, 1)));
        assert!(!q.keeps(&snap("2026-01-01T00:00:00Z", 1, 1)));
    }
}
