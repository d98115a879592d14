//! `usage`: usage snapshots written by the aggregator, listed or summarised.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::chart::{self, FileKind};
use crate::context::{Global, bad_input};
use crate::output::Format;
use crate::output::usage::{Snapshot, Summary};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use dynalimit_repository::UsageQuery;

/// When `usage --plot` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PlotWhen {
    /// When standard output is a terminal; otherwise the rows, as without --plot.
    Auto,
    /// Always, also into a pipe or a file.
    Always,
}

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
    /// Draw a line chart of each limit's whole tokens per window instead of the rows, one per
    /// entity, resource and window size (`--plot` on a terminal only, `--plot=always`
    /// anywhere). Table output only; overdraw counts are not charted.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "auto")]
    pub(crate) plot: Option<PlotWhen>,
    /// Also write the page's chart to FILE for a report: an SVG (`.svg`) or an HTML page
    /// holding it (`.html`).
    #[arg(long, value_name = "FILE")]
    pub(crate) chart: Option<PathBuf>,
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

/// Refuses chart options that cannot apply, before any request.
fn check_chart_options(global: &Global, args: &UsageArgs) -> Result<Option<FileKind>> {
    if args.view == UsageView::Summary && (args.plot.is_some() || args.chart.is_some()) {
        return Err(bad_input(anyhow::anyhow!(
            "--plot and --chart chart snapshots, not a summary"
        )));
    }
    if args.plot.is_some() && global.output != Format::Table {
        return Err(bad_input(anyhow::anyhow!(
            "--plot draws for a reader; with --output json use --chart FILE for a chart"
        )));
    }
    args.chart
        .as_deref()
        .map(FileKind::of)
        .transpose()
        .map_err(bad_input)
}

/// Runs `usage`.
pub(crate) async fn run(global: &Global, args: &UsageArgs) -> Result<()> {
    let chart_kind = check_chart_options(global, args)?;
    let repo = global.reader().await?;
    let query = args.query();
    match args.view {
        UsageView::Snapshots => {
            let page = repo
                .usage_snapshots(&query, args.limit, args.cursor.as_deref())
                .await?;
            let plot = match args.plot {
                Some(PlotWhen::Always) => true,
                Some(PlotWhen::Auto) => std::io::stdout().is_terminal(),
                None => false,
            };
            let (panels, unreadable) = if plot || chart_kind.is_some() {
                chart::panels(&page.snapshots)
            } else {
                (Vec::new(), 0)
            };
            if unreadable > 0 {
                eprintln!("not charted: {unreadable} snapshots whose window start does not read");
            }
            if let (Some(path), Some(kind)) = (&args.chart, chart_kind) {
                let text = chart::file(&panels, kind)?;
                std::fs::write(path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("chart: {} ({} limits)", path.display(), panels.len());
            }
            if plot {
                if panels.is_empty() {
                    println!("(no usage to chart)");
                } else {
                    print!("{}", chart::terminal(&panels, 72)?);
                }
            } else {
                let rows: Vec<Snapshot> = page.snapshots.iter().map(Snapshot::from).collect();
                global.print(&rows);
            }
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
