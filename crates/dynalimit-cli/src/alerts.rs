//! `alerts`: thresholds on quotas, published by the aggregator when a bucket crosses them, and
//! refusal alerts, published when a limit has refused acquires for some minutes in a row.

use anyhow::Result;
use clap::Subcommand;

use crate::context::{Global, bad_input};
use crate::output::alerts::{Cleared, Threshold};

/// `alerts` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum AlertsCommand {
    /// Set the alerts of one limit of an entity on a resource: percentages of a quota's
    /// period grant, each published once per period when crossed, and/or a refusal alert,
    /// published once per run of minutes in which the limit refused acquires (each replaces
    /// what that limit had there).
    #[command(
        after_help = "Examples:\n  dynalimit alerts set acme gpt-4 tpd 80,100\n  dynalimit alerts set acme gpt-4 rpm --refusing-for 5m"
    )]
    Set {
        /// The entity.
        entity: String,
        /// The resource.
        resource: String,
        /// The limit's name.
        limit: String,
        /// Percentages, comma-separated (1-100, at most 10).
        #[arg(value_delimiter = ',', required_unless_present = "refusing_for")]
        percent: Vec<u8>,
        /// Alert when the limit has refused acquires in each of this many minutes in a row
        /// (1m to 60m, or 1h).
        #[arg(long, value_name = "MINUTES", value_parser = parse_minutes)]
        refusing_for: Option<u32>,
    },
    /// List an entity's alerts: quota thresholds and refusal alerts.
    #[command(after_help = "Example:\n  dynalimit alerts list acme")]
    List {
        /// The entity.
        entity: String,
    },
    /// Clear the alerts (quota thresholds and refusal alerts) of one limit (with --limit) or
    /// of every limit of an entity on a resource.
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
            refusing_for,
        } => {
            // Refused before the table is opened.
            dynalimit_core::ids::validate_entity_id(entity).map_err(bad_input)?;
            dynalimit_core::ids::validate_resource(resource).map_err(bad_input)?;
            dynalimit_core::ids::validate_limit_name(limit).map_err(bad_input)?;
            if !percent.is_empty() {
                dynalimit_format::alert::validate_levels(percent).map_err(bad_input)?;
            }
            if let Some(minutes) = refusing_for {
                dynalimit_format::alert::validate_refusing(*minutes).map_err(bad_input)?;
            }
            let repo = global.writer().await?;
            let mut out = Threshold {
                entity: entity.clone(),
                resource: resource.clone(),
                limit: limit.clone(),
                percent: Vec::new(),
                refusing_for_minutes: None,
            };
            if !percent.is_empty() {
                out.percent = repo
                    .set_alert_thresholds(entity, resource, limit, percent)
                    .await?;
            }
            if let Some(minutes) = refusing_for {
                out.refusing_for_minutes = Some(
                    repo.set_refusal_alert(entity, resource, limit, *minutes)
                        .await?,
                );
            }
            global.print(&out);
        }
        AlertsCommand::List { entity } => {
            dynalimit_core::ids::validate_entity_id(entity).map_err(bad_input)?;
            let repo = global.reader().await?;
            let mut rows = Vec::new();
            for t in repo.alert_thresholds(entity).await? {
                for bad in &t.unreadable {
                    eprintln!("not used: {}", crate::output::escape(bad));
                }
                let limits: std::collections::BTreeSet<&String> =
                    t.levels.keys().chain(t.refusing.keys()).collect();
                rows.extend(limits.into_iter().map(|limit| Threshold {
                    entity: t.entity_id.clone(),
                    resource: t.resource.clone(),
                    limit: limit.clone(),
                    percent: t.levels.get(limit).cloned().unwrap_or_default(),
                    refusing_for_minutes: t.refusing.get(limit).copied(),
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

/// Reads a number of minutes: `5m`, or `1h` for 60 (the bounds are checked after parsing,
/// with the format's rule).
fn parse_minutes(text: &str) -> Result<u32, String> {
    let bad = || format!("{text:?} is not a number of minutes: write it like 5m (or 1h)");
    let (digits, per) = if let Some(d) = text.strip_suffix('m') {
        (d, 1)
    } else if let Some(d) = text.strip_suffix('h') {
        (d, 60)
    } else {
        return Err(bad());
    };
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits.parse::<u32>().map(|n| n * per).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::parse_minutes;

    #[test]
    fn minutes_are_written_with_a_unit() {
        assert_eq!(parse_minutes("5m"), Ok(5));
        assert_eq!(parse_minutes("1h"), Ok(60));
        assert_eq!(parse_minutes("0m"), Ok(0), "bounds are checked later");
        for bad in ["5", "m", "5s", "-5m", "5 m", "1.5h", "99999m"] {
            assert!(parse_minutes(bad).is_err(), "{bad}");
        }
    }
}
