//! Five-field cron patterns with the reference's semantics (§12.2), parsed by `croner`.
//!
//! `croner` expands each field into the set of values it matches. The reference reads cron
//! the way the Debian cron daemon does, and `croner` differs from that in places; each
//! difference is settled here, before or after `croner` runs, and each has a case in the
//! table computed by zae-limiter itself (`crates/dynalimit-format/tests/data`):
//!
//! | Pattern | Reference | `croner` alone | Here |
//! |---|---|---|---|
//! | `L`, `W`, `#`, `?`, `@daily`, a seconds field | refused | accepted | refused before `croner` |
//! | a name outside the month and weekday fields, `MONDAY` | refused | some replaced | refused |
//! | `5/15` (a start with a step) | 5, 20, 35, 50 | only in sloppy mode | sloppy mode |
//! | `/15` (no start) | refused | `*/15` in sloppy mode | refused before `croner` |
//! | `5-5/2` (a one-value range with a step) | 5, 7, 9, … to the end of the field | 5 | rewritten `5/2` |
//! | a step above 65535 | the start alone | refused | clamped to the field's width |
//! | Sunday `0` and `7` | one day | both stored as 0 | folded to 7, as ISO weekdays |
//! | both day fields restricted | OR, unless either starts with `*` | OR unless a field is exactly `*` | `day_and` read from the text |
//! | day 30 or 31 with only months that lack it, AND-ed | refused | accepted | refused |

use std::fmt;

use croner::parser::{CronParser, Seconds, Year};

use crate::CoreError;

/// The five fields, in order.
pub(crate) const FIELD_NAMES: [&str; 5] =
    ["minute", "hour", "day-of-month", "month", "day-of-week"];
/// Inclusive bounds of each field (the weekday field takes Sunday as 0 and as 7).
const BOUNDS: [(u16, u16); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
/// Weekday names, Sunday first (their numbers are their positions).
pub(crate) const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// Month names, January first (their numbers are their positions plus one).
pub(crate) const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
/// Longest length of each month, February counted as in a leap year.
const DAYS_IN_MONTH: [u16; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

const DOM: usize = 2;
const MONTH: usize = 3;
const DOW: usize = 4;

/// A parsed five-field cron pattern: minute, hour, day of month, month, day of week.
///
/// It is a *match pattern*: a parameter schedule's entry is in force for every minute it
/// matches, a reset schedule fires on the minute it starts matching. Matching takes the
/// local time of a zone (see [`super::Zone`]).
///
/// ```
/// use dynalimit_core::schedule::Cron;
///
/// let office = Cron::parse("* 9-17 * * MON-FRI")?;
/// assert!(office.matches_fields(30, 9, 14, 7, 3)); // 09:30 on a Wednesday
/// assert!(!office.matches_fields(30, 9, 14, 7, 6)); // a Saturday
/// assert!(Cron::parse("0 0 L * *").is_err()); // extended tokens are refused
/// # Ok::<(), dynalimit_core::CoreError>(())
/// ```
///
/// Two patterns are equal when they match the same minutes (`MON-FRI` equals `1-5`).
#[derive(Clone)]
pub struct Cron {
    fields: [Box<str>; 5],
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    /// ISO weekdays, Monday 1 to Sunday 7.
    weekdays: u8,
    day_and: bool,
}

impl Cron {
    fn sets(&self) -> (u64, u32, u32, u16, u8, bool) {
        (
            self.minutes,
            self.hours,
            self.days,
            self.months,
            self.weekdays,
            self.day_and,
        )
    }
}

impl PartialEq for Cron {
    fn eq(&self, other: &Self) -> bool {
        self.sets() == other.sets()
    }
}

impl Eq for Cron {}

impl std::hash::Hash for Cron {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sets().hash(state);
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cron({:?})", self.to_string())
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(field)?;
        }
        Ok(())
    }
}

fn invalid(text: &str, reason: impl Into<String>) -> CoreError {
    CoreError::invalid_value("cron expression", format!("{text:?}"), reason)
}

/// One value of a field: digits within the field's bounds, or a name where the field has
/// names.
fn value(field: usize, text: &str, whole: &str) -> Result<u16, CoreError> {
    let names: &[&str] = match field {
        MONTH => &MONTH_NAMES,
        DOW => &DAY_NAMES,
        _ => &[],
    };
    if let Some(i) = names.iter().position(|n| *n == text) {
        return Ok(if field == MONTH {
            i as u16 + 1
        } else {
            i as u16
        });
    }
    let (lo, hi) = BOUNDS[field];
    let n = digits(text).ok_or_else(|| {
        invalid(
            whole,
            format!(
                "bad {} field: {text:?} is not a number{}",
                FIELD_NAMES[field],
                named(field)
            ),
        )
    })?;
    if n < u64::from(lo) || n > u64::from(hi) {
        return Err(invalid(
            whole,
            format!("bad {} field: {n} is outside {lo}-{hi}", FIELD_NAMES[field]),
        ));
    }
    Ok(n as u16)
}

fn named(field: usize) -> &'static str {
    match field {
        MONTH => " or a month name (JAN-DEC)",
        DOW => " or a weekday name (SUN-SAT)",
        _ => "",
    }
}

/// A run of ASCII digits, saturated far above any field's bound.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Checks one comma-separated item against the reference grammar and rewrites it in the
/// numeric form `croner` is given.
fn item(field: usize, text: &str, whole: &str) -> Result<String, CoreError> {
    if text == "*" {
        return Ok("*".into());
    }
    if let Some((term, step)) = text.split_once('/') {
        let step = digits(step).ok_or_else(|| {
            invalid(
                whole,
                format!(
                    "bad {} field: step {step:?} is not a number",
                    FIELD_NAMES[field]
                ),
            )
        })?;
        if step == 0 {
            return Err(invalid(
                whole,
                format!("bad {} field: a step of 0", FIELD_NAMES[field]),
            ));
        }
        // A step wider than the field keeps only the first value; croner reads u16 steps.
        let (lo, hi) = BOUNDS[field];
        let step = step.min(u64::from(hi - lo + 1));
        let start = if term == "*" {
            "*".to_string()
        } else if let Some((a, b)) = term.split_once('-') {
            let (a, b) = (value(field, a, whole)?, value(field, b, whole)?);
            if b < a {
                return Err(backwards(field, term, whole));
            }
            if a == b {
                // One value with a step runs to the end of the field, as a bare start does.
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        } else {
            value(field, term, whole)?.to_string()
        };
        return Ok(format!("{start}/{step}"));
    }
    if let Some((a, b)) = text.split_once('-') {
        let (a, b) = (value(field, a, whole)?, value(field, b, whole)?);
        if b < a {
            return Err(backwards(field, text, whole));
        }
        return Ok(format!("{a}-{b}"));
    }
    Ok(value(field, text, whole)?.to_string())
}

/// The first character of an extended token (`L`, `W`, `#`, `?`, `@`) in a field, letters
/// of month and weekday names aside.
fn extended_token(field: usize, part: &str) -> Option<char> {
    if let Some(c) = part.chars().find(|c| matches!(c, '#' | '?' | '@')) {
        return Some(c);
    }
    let names: &[&str] = match field {
        MONTH => &MONTH_NAMES,
        DOW => &DAY_NAMES,
        _ => &[],
    };
    part.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|word| !names.contains(word))
        .find_map(|word| word.chars().find(|c| matches!(c, 'L' | 'W')))
}

fn backwards(field: usize, text: &str, whole: &str) -> CoreError {
    invalid(
        whole,
        format!(
            "bad {} field: the range {text:?} runs backwards",
            FIELD_NAMES[field]
        ),
    )
}

impl Cron {
    /// Parses a standard five-field pattern (minute hour day-of-month month day-of-week).
    ///
    /// Fields take `*`, numbers, ranges `a-b`, steps `*/n`, `a/n`, `a-b/n`, and lists
    /// `x,y`; months and weekdays take three-letter names (any case). Sunday is `0` or `7`.
    /// When both day fields are restricted (neither starts with `*`), a day matches when
    /// either does. Refused: any other number of fields, `L`, `W`, `#`, `?`, `@` nicknames,
    /// values out of range, ranges that run backwards, and a day 30 or 31 that none of the
    /// listed months has.
    pub fn parse(text: &str) -> Result<Cron, CoreError> {
        let upper = text.to_uppercase();
        let parts: Vec<&str> = upper.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(invalid(
                text,
                format!(
                    "exactly 5 fields are required (minute hour day-of-month month \
                     day-of-week), found {}",
                    parts.len()
                ),
            ));
        }
        let mut rewritten = Vec::with_capacity(5);
        for (field, part) in parts.iter().enumerate() {
            if let Some(c) = extended_token(field, part) {
                return Err(invalid(
                    text,
                    format!(
                        "the {} field uses {c:?}: L, W, #, ? and @ nicknames are not supported",
                        FIELD_NAMES[field]
                    ),
                ));
            }
            let items = part
                .split(',')
                .map(|i| item(field, i, text))
                .collect::<Result<Vec<_>, _>>()?;
            rewritten.push(items.join(","));
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .sloppy_ranges(true)
            .build();
        let parsed = parser
            .parse(&rewritten.join(" "))
            .map_err(|e| invalid(text, e.to_string()))?;
        let p = &parsed.pattern;
        let mask = |values: Vec<u16>| values.into_iter().fold(0u64, |m, v| m | (1u64 << v));
        let mut weekdays = mask(p.days_of_week.values()) as u8;
        if weekdays & 1 != 0 {
            weekdays = (weekdays & !1) | (1 << 7);
        }
        let cron = Cron {
            fields: parts
                .iter()
                .map(|p| Box::from(*p))
                .collect::<Vec<_>>()
                .try_into()
                .map_err(|_| invalid(text, "exactly 5 fields are required"))?,
            minutes: mask(p.minutes.values()),
            hours: mask(p.hours.values()) as u32,
            days: mask(p.days.values()) as u32,
            months: mask(p.months.values()) as u16,
            weekdays,
            day_and: parts[DOM].starts_with('*') || parts[DOW].starts_with('*'),
        };
        if cron.day_and {
            let first_day = cron.days.trailing_zeros() as u16;
            let longest = (1..=12u16)
                .filter(|m| cron.months & (1 << m) != 0)
                .map(|m| DAYS_IN_MONTH[m as usize])
                .max()
                .unwrap_or(31);
            if first_day > longest {
                return Err(invalid(
                    text,
                    format!("day {first_day} never occurs in the months the pattern names"),
                ));
            }
        }
        Ok(cron)
    }

    /// The five fields as written (upper-cased), for the storage encoding.
    pub fn fields(&self) -> [&str; 5] {
        [0, 1, 2, 3, 4].map(|i| &*self.fields[i])
    }

    /// Minutes (0-59) the pattern matches, ascending.
    pub fn minutes(&self) -> Vec<u8> {
        bits(self.minutes, 0..60)
    }

    /// Hours (0-23) the pattern matches, ascending.
    pub fn hours(&self) -> Vec<u8> {
        bits(u64::from(self.hours), 0..24)
    }

    /// Days of the month (1-31) the pattern matches, ascending.
    pub fn days(&self) -> Vec<u8> {
        bits(u64::from(self.days), 1..32)
    }

    /// Months (1-12) the pattern matches, ascending.
    pub fn months(&self) -> Vec<u8> {
        bits(u64::from(self.months), 1..13)
    }

    /// ISO weekdays (Monday 1 to Sunday 7) the pattern matches, ascending.
    pub fn weekdays(&self) -> Vec<u8> {
        bits(u64::from(self.weekdays), 1..8)
    }

    /// Whether both day fields must match (one of them starts with `*`); otherwise either
    /// suffices.
    pub fn day_and(&self) -> bool {
        self.day_and
    }

    /// Whether the pattern matches every minute (`* * * * *` or an equivalent).
    pub fn matches_always(&self) -> bool {
        self.all_minutes()
            && self.all_hours()
            && self.days.count_ones() == 31
            && self.months.count_ones() == 12
            && self.weekdays.count_ones() == 7
    }

    pub(crate) fn all_minutes(&self) -> bool {
        self.minutes.count_ones() == 60
    }

    pub(crate) fn all_hours(&self) -> bool {
        self.hours.count_ones() == 24
    }

    /// Whether the date fields admit a day (month, day of month, ISO weekday).
    pub(crate) fn date_matches(&self, day: u8, month: u8, weekday: u8) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom = self.days & (1 << day) != 0;
        let dow = self.weekdays & (1 << weekday) != 0;
        if self.day_and { dom && dow } else { dom || dow }
    }

    pub(crate) fn hour_matches(&self, hour: u8) -> bool {
        self.hours & (1 << hour) != 0
    }

    /// Whether a local time with these fields matches (weekday: Monday 1 to Sunday 7).
    pub fn matches_fields(&self, minute: u8, hour: u8, day: u8, month: u8, weekday: u8) -> bool {
        self.minutes & (1 << minute) != 0
            && self.hour_matches(hour)
            && self.date_matches(day, month, weekday)
    }

    /// The longest gap between two firings, read off the coarsest field the pattern
    /// restricts, rounded up (31-day months, 366-day years): a year when months are
    /// restricted, a month for days of the month, a week for weekdays, then a day, an hour,
    /// a minute. Sizes a reset scan's horizon and a quota bucket's time to live.
    pub fn cycle_seconds(&self) -> i64 {
        const DAY: i64 = 86_400;
        if self.months.count_ones() < 12 {
            366 * DAY
        } else if self.days.count_ones() < 31 {
            31 * DAY
        } else if self.weekdays.count_ones() < 7 {
            7 * DAY
        } else if !self.all_hours() {
            DAY
        } else if !self.all_minutes() {
            3_600
        } else {
            60
        }
    }
}

fn bits(mask: u64, range: std::ops::Range<u8>) -> Vec<u8> {
    range.filter(|b| mask & (1u64 << b) != 0).collect()
}
