//! `alerts`: thresholds on quotas, published by the aggregator when a bucket crosses them.

use anyhow::Result;
use clap::Subcommand;

use crate::context::{Global, bad_input};
use crate::output::alerts::{Cleared, Threshold};

/// `alerts` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum AlertsCommand {
    /// Set the thresholds of one quota of an entity on a resource: percentages of the
    /// period's grant, each published once per period when crossed (replaces that quota's
    /// thresholds there).
    #[command(after_help = "Example:\n  dynalimit alerts set acme gpt-4 tpd 80,100")]
    Set {
        /// The entity.
        entity: String,
        /// The resource.
        resource: String,
        /// The quota's limit name.
        limit: String,
        /// Percentages, comma-separated (1-100, at most 10).
        #[arg(value_delimiter = ',', required = true)]
        percent: Vec<u8>,
    },
    /// List an entity's thresholds.
    #[command(after_help = "Example:\n  dynalimit alerts list acme")]
    List {
        /// The entity.
        entity: String,
    },
    /// Clear the thresholds of one quota (with --limit) or of every limit of an entity on a
    /// resource.
    #[command(after_help = "Example:\n  dynalimit alerts clear acme gpt-4 --limit tpd")]
    Clear {
        /// The entity.
        entity: String,
        /// The resource.
        resource: String,
        /// Only this limit's thresholds.
        #[arg(long)]
        limit: Option<String>,
    },
}

/// Runs `alerts`.
pub(crate) async fn run(global: &Global, command: &AlertsCommand) -> Result<()> {
    match command {
        AlertsCommand::Set {
            entity,
            resource,
            limit,
            percent,
        } => {
            // Refused before the table is opened.
            dynalimit_core::ids::validate_entity_id(entity).map_err(bad_input)?;
            dynalimit_core::ids::validate_resource(resource).map_err(bad_input)?;
            dynalimit_core::ids::validate_limit_name(limit).map_err(bad_input)?;
            dynalimit_format::alert::validate_levels(percent).map_err(bad_input)?;
            let repo = global.writer().await?;
            let stored = repo
                .set_alert_thresholds(entity, resource, limit, percent)
                .await?;
            global.print(&Threshold {
                entity: entity.clone(),
                resource: resource.clone(),
                limit: limit.clone(),
                percent: stored,
            });
        }
        AlertsCommand::List { entity } => {
            dynalimit_core::ids::validate_entity_id(entity).map_err(bad_input)?;
            let repo = global.reader().await?;
            let mut rows = Vec::new();
            for t in repo.alert_thresholds(entity).await? {
                for bad in &t.unreadable {
                    eprintln!("not used: {}", crate::output::escape(bad));
                }
                rows.extend(t.levels.iter().map(|(limit, levels)| Threshold {
                    entity: t.entity_id.clone(),
                    resource: t.resource.clone(),
                    limit: limit.clone(),
                    percent: levels.clone(),
                }));
            }
            global.print(&rows);
        }
        AlertsCommand::Clear {
            entity,
            resource,
            limit,
        } => {
            dynalimit_core::ids::validate_entity_id(entity).map_err(bad_input)?;
            dynalimit_core::ids::validate_resource(resource).map_err(bad_input)?;
            if let Some(limit) = limit {
                dynalimit_core::ids::validate_limit_name(limit).map_err(bad_input)?;
            }
            let repo = global.writer().await?;
            let cleared = repo
                .clear_alert_thresholds(entity, resource, limit.as_deref())
                .await?;
            global.print(&Cleared {
                entity: entity.clone(),
                resource: resource.clone(),
                limit: limit.clone(),
                cleared,
            });
        }
    }
    Ok(())
}
