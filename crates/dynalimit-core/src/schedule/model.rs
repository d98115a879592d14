//! Parameter and reset schedules, and the parameters an entry puts in force.

use super::cron::Cron;
use super::scan;
use super::zone::Zone;
use crate::CoreError;
use crate::bounds::MAX_STORED_MILLI;
use crate::units::{MAX_PERIOD_SECONDS, MAX_TOKENS, MILLI};

/// Largest scale a schedule entry may apply.
pub const MAX_SCALE: f64 = 1_000_000.0;

/// A limit's parameters, undivided by shards: capacity and refill amount in millitokens,
/// refill period in milliseconds (the units of a bucket item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Capacity, millitokens.
    pub capacity: i64,
    /// Refill amount, millitokens (0 for a quota).
    pub refill_amount: i64,
    /// Refill period, milliseconds.
    pub refill_period: i64,
}

impl Params {
    /// Parameters from millitokens and milliseconds.
    pub const fn new(capacity: i64, refill_amount: i64, refill_period: i64) -> Params {
        Params {
            capacity,
            refill_amount,
            refill_period,
        }
    }
}

/// What an entry puts in force while its pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Modifier {
    /// Capacity and refill amount scaled together (time to fill unchanged), in thousandths.
    Scale {
        /// The scale × 1000 (500 halves the limit), at least 1.
        per_mille: u32,
    },
    /// Absolute values replacing the base's, in whole tokens and seconds; at least one set.
    Absolute {
        /// Capacity, tokens.
        capacity: Option<i64>,
        /// Refill amount, tokens.
        refill_amount: Option<i64>,
        /// Refill period, seconds.
        refill_period_seconds: Option<i64>,
    },
}

/// One entry of a parameter schedule: a pattern and the parameters in force while it
/// matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    cron: Cron,
    modifier: Modifier,
}

impl Entry {
    /// An entry that scales the base by `scale` (0.5 halves it), kept to thousandths as
    /// the table stores it (rounded half to even, at least 0.001).
    pub fn scaled(cron: &str, scale: f64) -> Result<Entry, CoreError> {
        if !scale.is_finite() || scale <= 0.0 {
            return Err(CoreError::invalid_value(
                "scale",
                scale,
                "must be a positive number",
            ));
        }
        if scale > MAX_SCALE {
            return Err(CoreError::invalid_value(
                "scale",
                scale,
                format!("must be at most {MAX_SCALE}"),
            ));
        }
        let per_mille = (scale * 1000.0).round_ties_even().max(1.0) as u32;
        Ok(Entry {
            cron: Cron::parse(cron)?,
            modifier: Modifier::Scale { per_mille },
        })
    }

    /// An entry that scales the base by `per_mille` thousandths (500 halves it).
    pub fn scaled_per_mille(cron: &str, per_mille: u32) -> Result<Entry, CoreError> {
        Entry::with_cron(Cron::parse(cron)?, Modifier::Scale { per_mille })
    }

    /// An entry with absolute values (tokens, seconds); those left `None` keep the base's.
    pub fn absolute(
        cron: &str,
        capacity: Option<i64>,
        refill_amount: Option<i64>,
        refill_period_seconds: Option<i64>,
    ) -> Result<Entry, CoreError> {
        Entry::with_cron(
            Cron::parse(cron)?,
            Modifier::Absolute {
                capacity,
                refill_amount,
                refill_period_seconds,
            },
        )
    }

    /// An entry of a parsed pattern, its modifier checked.
    pub fn with_cron(cron: Cron, modifier: Modifier) -> Result<Entry, CoreError> {
        match modifier {
            Modifier::Scale { per_mille } => {
                let max = (MAX_SCALE * 1000.0) as u32;
                if per_mille == 0 || per_mille > max {
                    return Err(CoreError::invalid_value(
                        "scale",
                        f64::from(per_mille) / 1000.0,
                        format!("must be positive and at most {MAX_SCALE}"),
                    ));
                }
            }
            Modifier::Absolute {
                capacity,
                refill_amount,
                refill_period_seconds,
            } => {
                if capacity.is_none() && refill_amount.is_none() && refill_period_seconds.is_none()
                {
                    return Err(CoreError::invalid_value(
                        "schedule entry",
                        cron.to_string(),
                        "sets exactly one of a scale or absolute values (capacity, refill \
                         amount, refill period)",
                    ));
                }
                for (field, value, max) in [
                    ("capacity", capacity, MAX_TOKENS),
                    ("refill_amount", refill_amount, MAX_TOKENS),
                    (
                        "refill_period_seconds",
                        refill_period_seconds,
                        MAX_PERIOD_SECONDS,
                    ),
                ] {
                    if let Some(v) = value
                        && (v <= 0 || v > max)
                    {
                        return Err(CoreError::invalid_value(
                            field,
                            v,
                            format!("must be positive and at most {max}"),
                        ));
                    }
                }
            }
        }
        Ok(Entry { cron, modifier })
    }

    /// The pattern.
    pub fn cron(&self) -> &Cron {
        &self.cron
    }

    /// What the entry puts in force.
    pub fn modifier(&self) -> Modifier {
        self.modifier
    }

    /// The parameters this entry puts in force over `base`.
    ///
    /// A scale multiplies in floating point and truncates, floored at one millitoken (a
    /// refill amount of 0 stays 0) and capped at
    /// [`MAX_STORED_MILLI`](crate::bounds::MAX_STORED_MILLI); absolute values replace the
    /// base's.
    pub fn params(&self, base: Params) -> Params {
        match self.modifier {
            Modifier::Scale { per_mille } => {
                let scale = f64::from(per_mille) / 1000.0;
                let scaled = |v: i64| {
                    ((v as f64 * scale) as i128).clamp(1, i128::from(MAX_STORED_MILLI)) as i64
                };
                Params {
                    capacity: scaled(base.capacity),
                    refill_amount: if base.refill_amount == 0 {
                        0
                    } else {
                        scaled(base.refill_amount)
                    },
                    refill_period: base.refill_period,
                }
            }
            Modifier::Absolute {
                capacity,
                refill_amount,
                refill_period_seconds,
            } => Params {
                capacity: capacity.map_or(base.capacity, |c| c * MILLI),
                refill_amount: refill_amount.map_or(base.refill_amount, |a| a * MILLI),
                refill_period: refill_period_seconds.map_or(base.refill_period, |p| p * 1000),
            },
        }
    }
}

/// A parameter schedule: entries tried in order, the first matching one in force.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schedule {
    zone: Zone,
    entries: Vec<Entry>,
}

fn at_least_one(what: &'static str) -> CoreError {
    CoreError::invalid_value(what, "[]", "needs at least one entry")
}

impl Schedule {
    /// A schedule of these entries in this zone (at least one entry).
    pub fn new(zone: Zone, entries: Vec<Entry>) -> Result<Schedule, CoreError> {
        if entries.is_empty() {
            return Err(at_least_one("schedule"));
        }
        Ok(Schedule { zone, entries })
    }

    /// The zone.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn crons(&self) -> impl Iterator<Item = &Cron> + Clone {
        self.entries.iter().map(|e| &e.cron)
    }

    /// The index of the entry in force at `now_ms`, if any.
    pub fn active(&self, now_ms: i64) -> Option<usize> {
        scan::active(self.crons(), &self.zone, now_ms)
    }

    /// The parameters in force at `now_ms` over `base`.
    pub fn params(&self, base: Params, now_ms: i64) -> Params {
        match self.active(now_ms) {
            Some(i) => self.entries[i].params(base),
            None => base,
        }
    }

    /// The earliest instant after `now_ms` at which the entry in force changes; when none is
    /// found within the scan's cap (7, 31 or 366 days by the finest restricted field),
    /// `now_ms` plus that cap.
    pub fn next_change(&self, now_ms: i64) -> i64 {
        scan::next_param_change(self.crons(), &self.zone, now_ms)
    }
}

/// A reset schedule: patterns whose rising edges reset a quota.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResetSchedule {
    zone: Zone,
    crons: Vec<Cron>,
}

impl ResetSchedule {
    /// A reset schedule of these patterns in this zone (at least one). A pattern that matches
    /// every minute has no rising edge, so it never resets (it is accepted as the Python
    /// library accepts it when reading; [`ResetSchedule::parse`] refuses it).
    pub fn new(zone: Zone, crons: Vec<Cron>) -> Result<ResetSchedule, CoreError> {
        if crons.is_empty() {
            return Err(at_least_one("reset schedule"));
        }
        Ok(ResetSchedule { zone, crons })
    }

    /// A reset schedule of one pattern; a pattern that matches every minute, which would
    /// never reset, is refused.
    pub fn parse(cron: &str, zone: Zone) -> Result<ResetSchedule, CoreError> {
        let cron = Cron::parse(cron)?;
        if cron.matches_always() {
            return Err(CoreError::invalid_value(
                "reset schedule",
                cron.to_string(),
                "a pattern that matches every minute never starts matching, so it never resets",
            ));
        }
        ResetSchedule::new(zone, vec![cron])
    }

    /// The zone.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The patterns.
    pub fn crons(&self) -> &[Cron] {
        &self.crons
    }

    /// The latest reset edge at or before `now_ms` over every pattern, each scanned back
    /// over its own horizon; `None` when none is in reach.
    pub fn prev_edge(&self, now_ms: i64) -> Option<i64> {
        self.crons
            .iter()
            .filter_map(|c| {
                let (unit, cap) = scan::reset_scan(c);
                scan::prev_rising_edge(c, &self.zone, now_ms, unit, cap)
            })
            .max()
    }

    /// The first reset edge strictly after `now_ms` over every pattern; `None` when none is
    /// in reach.
    pub fn next_edge(&self, now_ms: i64) -> Option<i64> {
        self.forward(now_ms).filter_map(|(edge, _)| edge).min()
    }

    /// As [`ResetSchedule::next_edge`], with `now_ms` plus a pattern's horizon standing in
    /// for an edge out of its reach (a bucket's `vu` must never be left unset).
    pub fn next_edge_or_horizon(&self, now_ms: i64) -> i64 {
        self.forward(now_ms)
            .map(|(edge, cap)| edge.unwrap_or(now_ms.saturating_add(cap)))
            .min()
            .unwrap_or(i64::MAX)
    }

    fn forward(&self, now_ms: i64) -> impl Iterator<Item = (Option<i64>, i64)> + '_ {
        self.crons.iter().map(move |c| {
            let (unit, cap) = scan::reset_scan(c);
            (
                scan::next_rising_edge(c, &self.zone, now_ms, unit, cap),
                cap,
            )
        })
    }

    /// The longest cycle of its patterns, in seconds (see [`Cron::cycle_seconds`]).
    pub fn cycle_seconds(&self) -> i64 {
        self.crons
            .iter()
            .map(Cron::cycle_seconds)
            .max()
            .unwrap_or(0)
    }
}

/// The earliest instant after `now_ms` at which a bucket must be materialised again: the
/// parameter schedule's next change or the reset schedule's next edge, whichever comes
/// first (`vu`, reference §12.2). `None` when the limit has neither.
pub fn next_boundary(
    schedule: Option<&Schedule>,
    reset: Option<&ResetSchedule>,
    now_ms: i64,
) -> Option<i64> {
    let change = schedule.map(|s| s.next_change(now_ms));
    let edge = reset.map(|r| r.next_edge_or_horizon(now_ms));
    match (change, edge) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The one zone of a set of schedules' zones (a bucket or configuration item stores one,
/// reference §12.2), or an error naming the two that differ. `None` when none is scheduled.
pub fn one_zone<'a>(
    zones: impl IntoIterator<Item = &'a Zone>,
) -> Result<Option<&'a Zone>, CoreError> {
    let mut found: Option<&Zone> = None;
    for zone in zones {
        match found {
            None => found = Some(zone),
            Some(z) if z != zone => {
                return Err(CoreError::invalid_value(
                    "schedule zones",
                    format!("{} and {}", z.name(), zone.name()),
                    "every schedule of one configuration level or bucket shares one time zone",
                ));
            }
            Some(_) => {}
        }
    }
    Ok(found)
}
