//! `concurrency set|get|clear`: the concurrency limits of one configuration level (requests
//! in flight, across every process sharing the table).

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use dynalimit_core::Concurrency;
use dynalimit_core::concurrency::validate_set;

use crate::context::{Global, bad_input};
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

/// `name=max` or `name=max/hold`.
pub(crate) fn parse_concurrency(text: &str) -> Result<Concurrency> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| anyhow!("{text:?}: expected name=max or name=max/hold"))?;
    let (max, hold) = match rest.split_once('/') {
        Some((max, hold)) => (max, Some(hold)),
        None => (rest, None),
    };
    let max: u32 = max
        .trim()
        .parse()
        .map_err(|_| anyhow!("{text:?}: the most requests in flight is a whole number"))?;
    let limit = Concurrency::new(name.trim(), max)?;
    Ok(match hold {
        Some(h) => limit.hold_time(parse_duration(h.trim())?)?,
        None => limit,
    })
}

/// `1500ms`, `30s`, `2m` or `1h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| anyhow!("{text:?}: a duration needs a unit (ms, s, m or h)"))?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| anyhow!("{text:?}: a duration is a whole number and a unit"))?;
    let ms_per_unit = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => bail!("{text:?}: the unit is ms, s, m or h"),
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| anyhow!("{text:?}: too long"))
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
                .collect::<Result<Vec<_>>>()
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
