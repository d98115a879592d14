//! The output of `usage` and `usage summary`.

use std::collections::BTreeMap;

use dynalimit_repository::{UsageSnapshot, UsageSummary};
use serde::Serialize;

/// One usage snapshot: `usage` prints an array of them, newest first (one page; the next
/// page's cursor goes to standard error).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Snapshot {
    /// The entity.
    pub(crate) entity: String,
    /// The resource.
    pub(crate) resource: String,
    /// `hourly`, `daily` or `monthly`: the window that wrote the item (a day's hour-00 item
    /// is also the day's item, and on the 1st the month's).
    pub(crate) window: String,
    /// The window's start, `YYYY-MM-DDTHH:MM:SSZ` (UTC).
    pub(crate) window_start: String,
    /// Whole tokens consumed per limit in the window (net of returns), and `{limit}#od`
    /// counts of overdrawn acquires.
    pub(crate) counters: BTreeMap<String, i64>,
    /// Consumption events counted (one per stream record and limit).
    pub(crate) events: i64,
}

impl From<&UsageSnapshot> for Snapshot {
    fn from(s: &UsageSnapshot) -> Snapshot {
        Snapshot {
            entity: s.entity_id.clone(),
            resource: s.resource.clone(),
            window: s.window.clone(),
            window_start: s.window_start.clone(),
            counters: s.counters.clone(),
            events: s.total_events,
        }
    }
}

/// `usage summary`: totals and averages over the matching snapshots.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Summary {
    /// Snapshots read.
    pub(crate) snapshots: usize,
    /// Whole tokens per counter, summed over the snapshots.
    pub(crate) total: BTreeMap<String, i64>,
    /// Whole tokens per counter, averaged over the snapshots that carry it.
    pub(crate) average: BTreeMap<String, f64>,
    /// Consumption events, summed.
    pub(crate) events: i64,
    /// The earliest window start, `YYYY-MM-DDTHH:MM:SSZ`; null when no snapshot matched.
    pub(crate) first_window: Option<String>,
    /// The latest window start; null when no snapshot matched.
    pub(crate) last_window: Option<String>,
    /// Whether the summary stopped at its limit of 10 000 snapshots.
    pub(crate) truncated: bool,
}

impl From<&UsageSummary> for Summary {
    fn from(s: &UsageSummary) -> Summary {
        Summary {
            snapshots: s.snapshot_count,
            total: s.total.clone(),
            average: s.average.clone(),
            events: s.total_events,
            first_window: s.min_window_start.clone(),
            last_window: s.max_window_start.clone(),
            truncated: s.truncated,
        }
    }
}
