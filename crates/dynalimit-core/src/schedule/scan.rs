//! Where a schedule changes: bounded scans over local calendar units.
//!
//! A parameter schedule changes when its first matching entry changes; a reset schedule
//! fires on a rising edge, the first minute of a run of matching minutes. No cron library
//! answers either (a window's *closing* is not a firing time), so both are scans.
//!
//! The step is the coarsest local unit across which no entry's match can change: a minute
//! when any entry restricts minutes, else an hour when any restricts hours, else a day.
//! Probes are the starts of those local units, so a short unit (a day of 23 hours, an hour
//! cut by a 30-minute jump) still contributes its own start and is never stepped over.
//! Each scan is capped: 7 days at minute steps, 31 at hour steps, 366 at day steps; a reset
//! scan reaches at least the pattern's own cycle (a year for a pattern that restricts
//! months).

use super::cron::Cron;
use super::zone::{Local, MINUTE_MS, Unit, Zone, ceil_minute, floor_minute};

const DAY_MS: i64 = 86_400_000;

/// The instants a scan starts from: within this many milliseconds of the epoch (years
/// −5952 to 9892). The calendar reaches years −9999 to 9999, and a scan steps at most a year
/// (or one cycle of its pattern) past its start, so inside this range every probe is a
/// calendar time and every step moves forward. A scan asked to start outside it finds
/// nothing, so no time read from an item can make one run without end.
pub(crate) const SCAN_LIMIT_MS: i64 = 250_000_000_000_000;

/// Whether a scan may start at `ms` ([`SCAN_LIMIT_MS`]).
pub(crate) fn scannable(ms: i64) -> bool {
    (-SCAN_LIMIT_MS..=SCAN_LIMIT_MS).contains(&ms)
}

/// Whether the local time matches the pattern.
pub(crate) fn matches_local(cron: &Cron, local: &Local) -> bool {
    let dt = local.dt;
    cron.matches_fields(
        dt.minute() as u8,
        dt.hour() as u8,
        dt.day() as u8,
        dt.month() as u8,
        dt.weekday().to_monday_one_offset() as u8,
    )
}

/// Whether the instant matches the pattern in the zone.
pub(crate) fn matches(cron: &Cron, zone: &Zone, ms: i64) -> bool {
    matches_local(cron, &zone.local(ms))
}

/// The step unit and cap of a scan over these patterns.
pub(crate) fn granularity<'a>(crons: impl Iterator<Item = &'a Cron> + Clone) -> (Unit, i64) {
    if crons.clone().any(|c| !c.all_minutes()) {
        (Unit::Minute, 7 * DAY_MS)
    } else if crons.clone().any(|c| !c.all_hours()) {
        (Unit::Hour, 31 * DAY_MS)
    } else {
        (Unit::Day, 366 * DAY_MS)
    }
}

/// Step and horizon of one reset pattern: the step from its finest restricted field, the
/// horizon at least its cycle.
pub(crate) fn reset_scan(cron: &Cron) -> (Unit, i64) {
    let (unit, cap) = granularity(std::iter::once(cron));
    (unit, cap.max(cron.cycle_seconds() * 1000))
}

/// The earliest local unit start strictly after `ms`, on the minute grid.
pub(crate) fn next_probe(zone: &Zone, ms: i64, unit: Unit) -> i64 {
    let t0 = floor_minute(ms);
    if unit == Unit::Minute {
        // Every offset in use is a whole number of minutes: the local minute grid is UTC's.
        return t0 + MINUTE_MS;
    }
    floor_minute(zone.unit_after(ms, unit)).max(t0 + MINUTE_MS)
}

/// The latest local unit start strictly before `ms`, on the minute grid.
fn prev_probe(zone: &Zone, ms: i64, unit: Unit) -> i64 {
    let t0 = floor_minute(ms);
    if unit == Unit::Minute {
        return t0 - MINUTE_MS;
    }
    let mut start = zone.unit_start(t0, unit);
    if start >= t0 {
        start = zone.unit_start(t0 - MINUTE_MS, unit);
    }
    floor_minute(start).min(t0 - MINUTE_MS)
}

/// The largest local block around `ms` in which the pattern cannot match: the whole day
/// when the date fields refuse it, the hour when only the hour does.
fn unreachable_block(cron: &Cron, local: &Local) -> Option<Unit> {
    let dt = local.dt;
    if !cron.date_matches(
        dt.day() as u8,
        dt.month() as u8,
        dt.weekday().to_monday_one_offset() as u8,
    ) {
        Some(Unit::Day)
    } else if !cron.hour_matches(dt.hour() as u8) {
        Some(Unit::Hour)
    } else {
        None
    }
}

/// The earliest minute at or after `start` whose match is `want`, up to `horizon`.
fn earliest_where(
    cron: &Cron,
    zone: &Zone,
    want: bool,
    start: i64,
    horizon: i64,
    unit: Unit,
) -> Option<i64> {
    let t = ceil_minute(start);
    if t <= horizon && matches(cron, zone, t) == want {
        return Some(t);
    }
    let mut probe = next_probe(zone, t, unit);
    while probe <= horizon {
        let local = zone.local(probe);
        if matches_local(cron, &local) == want {
            return Some(probe);
        }
        // Looking for a match, a block that cannot match is crossed in one step.
        probe = match want.then(|| unreachable_block(cron, &local)).flatten() {
            None => next_probe(zone, probe, unit),
            Some(block) => floor_minute(zone.unit_after(probe, block)).max(probe + MINUTE_MS),
        };
    }
    None
}

/// The latest minute at or before `start` whose match is `want`, down to `floor`.
fn latest_where(
    cron: &Cron,
    zone: &Zone,
    want: bool,
    start: i64,
    floor: i64,
    unit: Unit,
) -> Option<i64> {
    let t = floor_minute(start);
    if t < floor {
        return None;
    }
    if matches(cron, zone, t) == want {
        return Some(t);
    }
    // Every minute in [probe, hi) shares the probe's match.
    let mut hi = t;
    let mut probe = prev_probe(zone, t, unit);
    while probe >= floor {
        let local = zone.local(probe);
        if matches_local(cron, &local) == want {
            return Some(hi - MINUTE_MS);
        }
        hi = match want.then(|| unreachable_block(cron, &local)).flatten() {
            None => probe,
            Some(block) => hi.min(floor_minute(zone.unit_start(probe, block))),
        };
        probe = prev_probe(zone, hi, unit);
    }
    None
}

/// The first rising edge strictly after `now`, within `cap` (none from a `now` a scan does
/// not start from, [`scannable`]).
pub(crate) fn next_rising_edge(
    cron: &Cron,
    zone: &Zone,
    now: i64,
    unit: Unit,
    cap: i64,
) -> Option<i64> {
    if !scannable(now) {
        return None;
    }
    let horizon = now.saturating_add(cap);
    let mut start = (now.div_euclid(MINUTE_MS) + 1) * MINUTE_MS;
    if matches(cron, zone, now) {
        // Inside a window: the next edge comes after the window closes.
        start = earliest_where(cron, zone, false, start, horizon, unit)?;
    }
    earliest_where(cron, zone, true, start, horizon, unit)
}

/// The latest rising edge at or before `now`, within `cap` (none from a `now` a scan does
/// not start from, [`scannable`]).
pub(crate) fn prev_rising_edge(
    cron: &Cron,
    zone: &Zone,
    now: i64,
    unit: Unit,
    cap: i64,
) -> Option<i64> {
    if !scannable(now) {
        return None;
    }
    let floor = now.saturating_sub(cap);
    let on = latest_where(cron, zone, true, now, floor, unit)?;
    let off = latest_where(cron, zone, false, on - MINUTE_MS, floor, unit)?;
    Some(off + MINUTE_MS)
}

/// The index of the first entry matching the local time.
pub(crate) fn active<'a>(
    crons: impl Iterator<Item = &'a Cron>,
    zone: &Zone,
    ms: i64,
) -> Option<usize> {
    let local = zone.local(ms);
    crons
        .enumerate()
        .find(|(_, c)| matches_local(c, &local))
        .map(|(i, _)| i)
}

/// The earliest instant after `now` where the first matching entry changes, or `now + cap`
/// when none is in reach (one re-materialisation per cap; also from a `now` a scan does not
/// start from, [`scannable`]).
pub(crate) fn next_param_change<'a>(
    crons: impl Iterator<Item = &'a Cron> + Clone,
    zone: &Zone,
    now: i64,
) -> i64 {
    let (unit, cap) = granularity(crons.clone());
    let horizon = now.saturating_add(cap);
    if !scannable(now) {
        return horizon;
    }
    let current = active(crons.clone(), zone, now);
    let mut lo = floor_minute(now);
    let mut probe = next_probe(zone, now, unit);
    while probe <= horizon {
        if active(crons.clone(), zone, probe) != current {
            // The change lies in (lo, probe]: walk it by the minute, so an imprecise unit
            // start can only make the answer exact, never late.
            let mut fine = lo + MINUTE_MS;
            while fine < probe {
                if active(crons.clone(), zone, fine) != current {
                    return fine;
                }
                fine += MINUTE_MS;
            }
            return probe;
        }
        lo = probe;
        probe = next_probe(zone, probe, unit);
    }
    horizon
}
