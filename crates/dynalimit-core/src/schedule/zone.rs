//! IANA time zones and the local calendar arithmetic schedules are evaluated in.
//!
//! A UTC instant always has one local time, so matching a pattern never meets the hour a
//! clock skips or repeats. The scans step over local hours and days; where a truncated or
//! advanced local time falls into a skipped or repeated hour, it is mapped back to an
//! instant the way Python's `zoneinfo` maps it (a time reached by truncation keeps the
//! occurrence its instant had; a time reached by advancing takes the first; a skipped time
//! takes the offset in force before the jump), so that both libraries scan the same grid.

use std::fmt;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};

use crate::CoreError;

/// Milliseconds in a minute.
pub(crate) const MINUTE_MS: i64 = 60_000;

/// An IANA time zone (`Europe/Berlin`), from the database bundled into this crate so every
/// process evaluates schedules alike. Names are exact (case included), as the Python
/// library's `zoneinfo` reads them.
#[derive(Clone)]
pub struct Zone {
    name: Box<str>,
    tz: TimeZone,
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zone({})", self.name)
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl std::hash::Hash for Zone {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl Default for Zone {
    fn default() -> Self {
        Zone::utc()
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A local time and whether it is the second occurrence of a repeated hour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Local {
    pub(crate) dt: DateTime,
    pub(crate) later: bool,
}

/// The local calendar units the scans step over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Minute,
    Hour,
    Day,
}

impl Zone {
    /// Coordinated Universal Time, the zone of a schedule that names none.
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: TimeZone::UTC,
        }
    }

    /// The zone of this IANA name (`America/New_York`, `UTC`).
    pub fn get(name: &str) -> Result<Zone, CoreError> {
        if name == "UTC" {
            return Ok(Zone::utc());
        }
        let unknown = |reason: &str| {
            CoreError::invalid_value("time zone", format!("{name:?}"), reason.to_string())
        };
        let tz = TimeZone::get(name).map_err(|_| unknown("not an IANA time zone name"))?;
        // The lookup ignores case; the Python library's does not, so neither may we.
        if tz.iana_name() != Some(name) {
            return Err(unknown(
                "IANA names are case-sensitive (for example Europe/Berlin)",
            ));
        }
        Ok(Zone {
            name: name.into(),
            tz,
        })
    }

    /// The IANA name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local time of an instant (epoch milliseconds).
    pub(crate) fn local(&self, ms: i64) -> Local {
        let ts = timestamp(ms);
        let offset = self.tz.to_offset(ts);
        let dt = offset.to_datetime(ts);
        let later = match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Fold { before, after } => before != after && offset == after,
            _ => false,
        };
        Local { dt, later }
    }

    /// The instant of a local time; `later` picks the second occurrence of a repeated time
    /// and the offset after the jump for a skipped one.
    pub(crate) fn instant(&self, dt: DateTime, later: bool) -> i64 {
        let offset = match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset,
            AmbiguousOffset::Gap { before, after } | AmbiguousOffset::Fold { before, after } => {
                if later {
                    after
                } else {
                    before
                }
            }
        };
        offset
            .to_timestamp(dt)
            .map(|ts| ts.as_millisecond())
            .unwrap_or(i64::MAX)
    }

    /// Start of the local unit containing `ms`.
    pub(crate) fn unit_start(&self, ms: i64, unit: Unit) -> i64 {
        let local = self.local(ms);
        self.instant(truncate(local.dt, unit), local.later)
    }

    /// Start of the local unit after the one containing `ms` (the local time advanced by
    /// one unit, then truncated).
    pub(crate) fn unit_after(&self, ms: i64, unit: Unit) -> i64 {
        let local = self.local(ms);
        let step = match unit {
            Unit::Day => jiff::Span::new().days(1),
            _ => jiff::Span::new().hours(1),
        };
        match local.dt.checked_add(step) {
            Ok(dt) => self.instant(truncate(dt, unit), false),
            Err(_) => i64::MAX,
        }
    }
}

fn truncate(dt: DateTime, unit: Unit) -> DateTime {
    let (hour, minute) = match unit {
        Unit::Day => (0, 0),
        Unit::Hour => (dt.hour(), 0),
        Unit::Minute => (dt.hour(), dt.minute()),
    };
    DateTime::new(dt.year(), dt.month(), dt.day(), hour, minute, 0, 0).unwrap_or(dt)
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// `ms` rounded down to a whole minute.
pub(crate) fn floor_minute(ms: i64) -> i64 {
    ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// `ms` rounded up to a whole minute.
pub(crate) fn ceil_minute(ms: i64) -> i64 {
    -(-ms).div_euclid(MINUTE_MS) * MINUTE_MS
}
