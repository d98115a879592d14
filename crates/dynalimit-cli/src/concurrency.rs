//! `concurrency set|get|clear`: the concurrency limits of one configuration level (requests
//! in flight, across every process sharing the table).

use anyhow::Result;
use clap::Subcommand;
use dynalimit_core::concurrency::validate_set;

use crate::context::{Global, bad_input};
use crate::limit_spec::parse_concurrency;
use crate::limits::Level;
use crate::output::concurrency::ConcurrencyLevel;

/// `concurrency` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ConcurrencyCommand {
    /// Replace the concurrency limits of one level: `name=max` or `name=max/hold` (hold
    /// `1500ms`, `30s`, `2m`, `1h`; 30 s when not given), comma-separated, at most 4.
    #[command(
        after_help = "Examples:\n  dynalimit concurrency set --resource gpt-4 streams=5\n  dynalimit concurrency set --entity project-1 --resource gpt-4 streams=200/2m"
    )]
    Set {
        #[command(flatten)]
        level: Level,
        /// The limits.
        #[arg(value_delimiter = ',', required = true)]
        limits: Vec<String>,
    },
    /// Print the concurrency limits stored at one level.
    #[command(after_help = "Example:\n  dynalimit concurrency get --resource gpt-4")]
    Get {
        #[command(flatten)]
        level: Level,
    },
    /// Remove the concurrency limits of one level (its rate limits stay).
    #[command(after_help = "Example:\n  dynalimit concurrency clear --resource gpt-4")]
    Clear {
        #[command(flatten)]
        level: Level,
    },
}

/// The level a command addresses, its ids checked before the table is opened.
fn address(level: &Level) -> Result<(Option<&str>, Option<&str>, String)> {
    let (entity, resource, name) = level.address().map_err(bad_input)?;
    if let Some(e) = entity {
        dynalimit_core::ids::validate_entity_id(e).map_err(bad_input)?;
    }
    if let Some(r) = resource {
        dynalimit_core::ids::validate_resource(r).map_err(bad_input)?;
    }
    Ok((entity, resource, name))
}

/// Runs `concurrency`.
pub(crate) async fn run(global: &Global, command: &ConcurrencyCommand) -> Result<()> {
    match command {
        ConcurrencyCommand::Set { level, limits } => {
            // Refused before the table is opened.
            let (entity, resource, name) = address(level)?;
            let limits = limits
                .iter()
                .map(|l| parse_concurrency(l))
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad_input)?;
            validate_set(&limits).map_err(bad_input)?;
            let repo = global.writer().await?;
            repo.set_concurrency_limits(entity, resource, &limits)
                .await?;
            let stored = repo.concurrency_limits(entity, resource).await?;
            global.print(&ConcurrencyLevel::new(name, &stored));
        }
        ConcurrencyCommand::Get { level } => {
            let (entity, resource, name) = address(level)?;
            let repo = global.reader().await?;
            let stored = repo.concurrency_limits(entity, resource).await?;
            global.print(&ConcurrencyLevel::new(name, &stored));
        }
        ConcurrencyCommand::Clear { level } => {
            let (entity, resource, name) = address(level)?;
            let repo = global.writer().await?;
            repo.set_concurrency_limits(entity, resource, &[]).await?;
            global.print(&ConcurrencyLevel::new(name, &[]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_with_and_without_a_hold_and_bad_ones_are_refused() {
        let l = parse_concurrency("streams=5").unwrap();
        assert_eq!((l.name(), l.max(), l.hold_ms()), ("streams", 5, 30_000));
        let l = parse_concurrency("streams=200/2m").unwrap();
        assert_eq!((l.max(), l.hold_ms()), (200, 120_000));
        assert_eq!(crate::limit_spec::format_concurrency(&l), "streams=200/2m");
        assert_eq!(parse_concurrency("s=1/1500ms").unwrap().hold_ms(), 1_500);
        for bad in [
            "streams",
            "streams=",
            "streams=0",
            "streams=1001",
            "streams=-1",
            "streams=2.5",
            "streams=5/30",
            "streams=5/30x",
            "streams=5/999ms",
            "streams=5/2h",
            "bad name=5",
            "streams=5/99999999999999999999h",
        ] {
            assert!(parse_concurrency(bad).is_err(), "{bad}");
        }
    }
}
