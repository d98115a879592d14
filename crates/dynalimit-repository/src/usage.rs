//! Usage snapshots written by the aggregator (reference §1.4.10): queries per entity or per
//! resource, and summaries over them.
//!
//! A snapshot item can be shared by several windows (a day's hour 00 is also that day's item);
//! its counters are the sum of those windows, and a window filter keeps an item whose stored
//! `window` is that window or a finer one when its start is also a start of the filtered
//! window (see [`dynalimit_format::usage`]).

use std::collections::BTreeMap;

use dynalimit_core::CoreError;
use dynalimit_core::ids;
use dynalimit_format::expr::Expr;
use dynalimit_format::item;
use dynalimit_format::schema::GSI2;
use dynalimit_format::usage::{SnapshotWindow, UsageSnapshot, window_holds};
use dynalimit_format::{attr, keys};

use crate::entity::partition;
use crate::error::classify;
use crate::page::{self, decode_cursor, encode_cursor};
use crate::{Repository, RepositoryError};

/// Largest page a snapshot query asks for.
pub(crate) const MAX_USAGE_PAGE: usize = 1000;
/// Most snapshots a summary reads.
pub(crate) const MAX_SUMMARY_SNAPSHOTS: usize = 10_000;

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
            && w.parse::<SnapshotWindow>().is_err()
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
    /// True when the summary stopped at its limit of 10 000 snapshots.
    pub truncated: bool,
}

impl UsageSummary {
    /// Summarises snapshots.
    pub fn of<'a>(snapshots: impl IntoIterator<Item = &'a UsageSnapshot>) -> Self {
        let mut out = UsageSummary::default();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for s in snapshots {
            out.snapshot_count += 1;
            // Counters are what the table holds: their sums saturate rather than wrap.
            out.total_events = out.total_events.saturating_add(s.total_events);
            for (name, v) in &s.counters {
                let total = out.total.entry(name.clone()).or_default();
                *total = total.saturating_add(*v);
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

impl Repository {
    /// One page of usage snapshots of this namespace, newest first: by entity (the entity's
    /// partition, narrowed to a resource when one is given) or by resource across entities
    /// (GSI2). `limit` (1–1000) is the number of items read; window and time filters apply to
    /// what was read. Pass the returned cursor to read the next page. A GSI2 result that is not
    /// a snapshot of this namespace (another namespace's item carrying this one's index key)
    /// is skipped and counted ([`crate::FOREIGN_INDEX_ITEMS`]).
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
        let size = page::page_size(limit, MAX_USAGE_PAGE)?;
        let start = cursor.map(decode_cursor).transpose()?;
        let ns = self.namespace_id();
        let request = match (&query.entity_id, &query.resource) {
            (Some(entity), resource) => {
                let prefix = match resource {
                    Some(r) => keys::usage_sk_prefix(r),
                    None => keys::USAGE_SK_PREFIX.to_owned(),
                };
                self.query(
                    None,
                    &partition(&keys::entity_pk(ns, entity), Some(&prefix)),
                )
            }
            (None, Some(resource)) => {
                let mut e = Expr::default();
                let c = e.eq(attr::GSI2PK, item::s(keys::resource_pk(ns, resource)));
                e.when(c);
                let c = e.begins_with(attr::GSI2SK, keys::USAGE_INDEX_SK_PREFIX);
                e.when(c);
                self.query(Some(GSI2), &e)
            }
            (None, None) => unreachable!("validated above"),
        };
        let mut out = request
            .scan_index_forward(false)
            .limit(size)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", e))?;
        let mut items = out.items.take().unwrap_or_default();
        if query.entity_id.is_none() {
            // Read off GSI2, whose keys any writer may set: only this namespace's snapshots.
            items = page::own_items(ns, GSI2, items);
        }
        let snapshots = items
            .iter()
            .filter_map(UsageSnapshot::from_item)
            .filter(|s| query.keeps(s))
            .collect();
        let next = out
            .last_evaluated_key
            .filter(|k| !k.is_empty())
            .map(|k| encode_cursor(&k));
        Ok(UsagePage { snapshots, next })
    }

    /// Totals and averages per counter over every snapshot matching `query`, reading all
    /// pages (up to 10 000 snapshots).
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
