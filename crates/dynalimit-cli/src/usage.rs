//! `usage`: usage snapshots written by the aggregator, listed or summarised.

use crate::context::Global;
use crate::output::usage::{Snapshot, Summary};
use anyhow::Result;
use clap::{Args, ValueEnum};
use dynalimit_repository::UsageQuery;

/// What `usage` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum UsageView {
    /// One row per snapshot, newest first.
    Snapshots,
    /// Totals and averages per counter.
    Summary,
}

/// Options of `usage`.
#[derive(Debug, Args)]
pub(crate) struct UsageArgs {
    /// Snapshots or a summary.
    #[arg(value_enum, default_value_t = UsageView::Snapshots)]
    pub(crate) view: UsageView,
    /// Entity whose usage to read.
    #[arg(long, short = 'e', required_unless_present = "resource")]
    pub(crate) entity: Option<String>,
    /// Resource whose usage to read (across entities without --entity).
    #[arg(long, short = 'r')]
    pub(crate) resource: Option<String>,
    /// Only this window. A day's hour-00 item is also the day's item (and on the 1st the
    /// month's): it counts every window it starts, and a daily or monthly query lists it even
    /// when its window says hourly.
    #[arg(long, short = 'w', value_parser = ["hourly", "daily", "monthly"])]
    pub(crate) window: Option<String>,
    /// Only windows starting at or after this instant (YYYY-MM-DDTHH:MM:SSZ).
    #[arg(long)]
    pub(crate) start: Option<String>,
    /// Only windows starting at or before this instant.
    #[arg(long)]
    pub(crate) end: Option<String>,
    /// Snapshots per page (1-1000).
    #[arg(long, short = 'l', default_value_t = 100)]
    pub(crate) limit: usize,
    /// Continue after this cursor (printed by the previous page).
    #[arg(long)]
    pub(crate) cursor: Option<String>,
}

impl UsageArgs {
    fn query(&self) -> UsageQuery {
        let mut q = match (&self.entity, &self.resource) {
            (Some(e), Some(r)) => UsageQuery::entity(e.clone()).with_resource(r.clone()),
            (Some(e), None) => UsageQuery::entity(e.clone()),
            (None, r) => UsageQuery::resource(r.clone().unwrap_or_default()),
        };
        if let Some(w) = &self.window {
            q = q.with_window(w.clone());
        }
        q.between(self.start.clone(), self.end.clone())
    }
}

/// Runs `usage`.
pub(crate) async fn run(global: &Global, args: &UsageArgs) -> Result<()> {
    let repo = global.reader().await?;
    let query = args.query();
    match args.view {
        UsageView::Snapshots => {
            let page = repo
                .usage_snapshots(&query, args.limit, args.cursor.as_deref())
                .await?;
            let rows: Vec<Snapshot> = page.snapshots.iter().map(Snapshot::from).collect();
            global.print(&rows);
            if let Some(next) = page.next {
                eprintln!("more: --cursor {}", crate::output::escape(&next));
            }
        }
        UsageView::Summary => {
            let s = repo.usage_summary(&query).await?;
            global.print(&Summary::from(&s));
        }
    }
    Ok(())
}
