//! The compact storage encoding of schedules (reference §12.2).
//!
//! Cron patterns are what users write; a bucket item stores the shorter form below, because
//! every byte of a bucket item is paid on every write. The string opens with the encoding
//! version (`1`), then the entries joined by `;`. An entry is its restricted cron fields,
//! each tagged (`m` minute, `h` hour, `D` day of month, `M` month, `w` day of week; a field
//! that is `*` is left out; names become numbers, Sunday `7` standalone and `0` inside a
//! range or step), then its modifier: `s` the scale in thousandths, or any of `c` capacity,
//! `a` refill amount, `p` refill period in seconds. The zone is stored once per item
//! (`sched_tz`). A reset schedule has the same grammar without modifiers.
//!
//! ```
//! use dynalimit_core::schedule::{Entry, Schedule, Zone};
//! use dynalimit_format::schedule;
//!
//! let s = Schedule::new(
//!     Zone::utc(),
//!     vec![
//!         Entry::scaled("* 9-17 * * MON-FRI", 0.5)?,
//!         Entry::absolute("* 0-6 * * *", Some(2000), None, None)?,
//!     ],
//! )?;
//! assert_eq!(schedule::encode(&s), "1h9-17w1-5s500;h0-6c2000");
//! assert_eq!(schedule::decode("1h9-17w1-5s500;h0-6c2000", &Zone::utc())?, s);
//! // A string without the version marker, or from a newer encoder, is refused.
//! assert!(schedule::decode("h9-17s500", &Zone::utc()).is_err());
//! assert!(schedule::decode("2h9-17s500", &Zone::utc()).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use dynalimit_core::schedule::{Cron, Entry, Modifier, ResetSchedule, Schedule, Zone};

use crate::FormatError;

/// The encoding version written, and the highest read.
pub(crate) const ENCODING_VERSION: u32 = 1;

/// The per-limit value that marks a limit unscheduled on an item whose default is a
/// schedule (`b_{name}_sched = "-"`).
pub const UNSCHEDULED: &str = "-";

const FIELD_TAGS: [char; 5] = ['m', 'h', 'D', 'M', 'w'];
const MODIFIER_TAGS: [char; 4] = ['s', 'c', 'a', 'p'];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];

fn is_tag(c: char) -> bool {
    FIELD_TAGS.contains(&c) || MODIFIER_TAGS.contains(&c)
}

fn error(encoded: &str, message: impl Into<String>) -> FormatError {
    FormatError::Schedule {
        encoded: encoded.chars().take(200).collect(),
        message: message.into(),
    }
}

/// Replaces every run of letters by its number in `names` (`base` added to positions).
fn names_to_numbers(spec: &str, names: &[&str], base: usize) -> String {
    let mut out = String::with_capacity(spec.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.is_empty() {
            return;
        }
        let upper = word.to_ascii_uppercase();
        match names.iter().position(|n| *n == upper) {
            Some(i) => out.push_str(&(i + base).to_string()),
            // Unreachable after parsing: a pattern with another word is refused.
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in spec.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// One weekday item: a standalone Sunday is `7`, inside a range or step `0`.
fn weekday_item(item: &str) -> String {
    let upper = item.to_ascii_uppercase();
    if let Some(i) = DAY_NAMES.iter().position(|n| *n == upper) {
        return if i == 0 { "7".into() } else { i.to_string() };
    }
    if item == "0" {
        return "7".into();
    }
    names_to_numbers(item, &DAY_NAMES, 0)
}

fn encode_field(tag: char, spec: &str) -> String {
    match tag {
        'w' => spec
            .split(',')
            .map(weekday_item)
            .collect::<Vec<_>>()
            .join(","),
        'M' => names_to_numbers(spec, &MONTH_NAMES, 1),
        _ => spec.to_string(),
    }
}

fn encode_cron(cron: &Cron, out: &mut String) {
    for (tag, field) in FIELD_TAGS.iter().zip(cron.fields()) {
        let encoded = encode_field(*tag, field);
        if encoded != "*" {
            out.push(*tag);
            out.push_str(&encoded);
        }
    }
}

fn encode_entry(entry: &Entry, out: &mut String) {
    encode_cron(entry.cron(), out);
    match entry.modifier() {
        Modifier::Scale { per_mille } => {
            out.push('s');
            out.push_str(&per_mille.to_string());
        }
        Modifier::Absolute {
            capacity,
            refill_amount,
            refill_period_seconds,
        } => {
            for (tag, value) in [
                ('c', capacity),
                ('a', refill_amount),
                ('p', refill_period_seconds),
            ] {
                if let Some(v) = value {
                    out.push(tag);
                    out.push_str(&v.to_string());
                }
            }
        }
    }
}

/// The stored form of a parameter schedule (its zone is stored apart, in `sched_tz`).
pub fn encode(schedule: &Schedule) -> String {
    let mut out = ENCODING_VERSION.to_string();
    for (i, entry) in schedule.entries().iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        encode_entry(entry, &mut out);
    }
    out
}

/// The stored form of a reset schedule.
///
/// A reset at every minute (`* * * * *` alone) has no stored form that reads back (it would
/// be the version marker alone), so it is refused.
pub fn encode_reset(reset: &ResetSchedule) -> Result<String, FormatError> {
    let mut out = ENCODING_VERSION.to_string();
    for (i, cron) in reset.crons().iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        encode_cron(cron, &mut out);
    }
    if out.len() == ENCODING_VERSION.to_string().len() {
        return Err(error(
            &out,
            "a reset schedule that fires every minute has no stored form; reset with a \
             pattern that restricts at least one field",
        ));
    }
    Ok(out)
}

/// How a bucket item stores the parameter schedules of its limits (reference §12.2): one zone
/// (`sched_tz`), a default (`sched`, the first scheduled limit's), and the limits that differ
/// from it (`b_{name}_sched`, `"-"` for an unscheduled limit beside a default).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ItemSchedules {
    /// `sched_tz`, when a limit is scheduled.
    pub zone: Option<String>,
    /// `sched`, when a limit is scheduled.
    pub default: Option<String>,
    /// `(name, b_{name}_sched)` of every limit whose schedule is not the default.
    pub overrides: Vec<(String, String)>,
}

/// The stored parameter schedules of a bucket item's limits, in order (the first scheduled
/// limit gives the default). The limits' zones must agree (checked before any write by
/// [`dynalimit_core::schedule::one_zone`]); the first scheduled limit's zone is used.
pub(crate) fn item_schedules<'a>(
    limits: impl IntoIterator<Item = (&'a str, Option<&'a Schedule>)>,
) -> ItemSchedules {
    stored(
        limits
            .into_iter()
            .map(|(name, s)| (name, s.map(|s| (encode(s), s.zone())))),
    )
}

/// The stored reset schedules of a bucket item's quotas, by the same rule as
/// [`item_schedules`] (`rsched`, `b_{name}_rsched`).
pub(crate) fn item_resets<'a>(
    limits: impl IntoIterator<Item = (&'a str, Option<&'a ResetSchedule>)>,
) -> ItemSchedules {
    stored(limits.into_iter().map(|(name, r)| {
        (
            name,
            r.map(|r| (encode_reset(r).unwrap_or_default(), r.zone())),
        )
    }))
}

fn stored<'a>(
    limits: impl Iterator<Item = (&'a str, Option<(String, &'a Zone)>)>,
) -> ItemSchedules {
    let limits: Vec<(&str, Option<(String, &Zone)>)> = limits.collect();
    let Some((_, Some((default, zone)))) = limits.iter().find(|(_, e)| e.is_some()) else {
        return ItemSchedules::default();
    };
    let overrides = limits
        .iter()
        .filter_map(|(name, e)| {
            let own = e.as_ref().map_or(UNSCHEDULED, |(text, _)| text.as_str());
            (own != default).then(|| ((*name).to_owned(), own.to_owned()))
        })
        .collect();
    ItemSchedules {
        zone: Some(zone.name().to_owned()),
        default: Some(default.clone()),
        overrides,
    }
}

/// Every schedule attribute of a bucket item holding `limits`, in order (reference §12.2,
/// §12.3): `sched_tz`, `sched`, each limit's `b_{name}_sched`, `rsched`, each limit's
/// `b_{name}_rsched`, with the value to store, or `None` where the item must have none.
pub fn item_attributes(limits: &[&dynalimit_core::Limit]) -> Vec<(String, Option<String>)> {
    let params = item_schedules(limits.iter().map(|l| (l.name(), l.schedule())));
    let resets = item_resets(limits.iter().map(|l| (l.name(), l.reset())));
    let zone = params.zone.clone().or_else(|| resets.zone.clone());
    let mut out = vec![(crate::attr::SCHED_TZ.to_owned(), zone)];
    for (stored, default_attr, own_attr) in [
        (
            params,
            crate::attr::SCHED,
            crate::attr::bucket_sched as fn(&str) -> String,
        ),
        (resets, crate::attr::RSCHED, crate::attr::bucket_rsched),
    ] {
        out.push((default_attr.to_owned(), stored.default));
        for l in limits {
            let own = stored.overrides.iter().find(|(n, _)| n == l.name());
            out.push((own_attr(l.name()), own.map(|(_, v)| v.clone())));
        }
    }
    out
}

/// Checks and removes the version marker.
fn strip_version(encoded: &str) -> Result<&str, FormatError> {
    let digits = encoded.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(error(
            encoded,
            format!(
                "no version marker: a stored schedule begins with its encoding version (this \
                 build writes {ENCODING_VERSION})"
            ),
        ));
    }
    let (marker, body) = encoded.split_at(digits);
    if body.is_empty() {
        return Err(error(encoded, "a version marker with no entries after it"));
    }
    let version = marker.parse::<u64>().unwrap_or(u64::MAX);
    if version < 1 {
        return Err(error(encoded, format!("invalid version marker {marker:?}")));
    }
    if version > u64::from(ENCODING_VERSION) {
        return Err(error(
            encoded,
            format!(
                "encoding version {marker}, written by a newer client; this build reads up to \
                 version {ENCODING_VERSION}"
            ),
        ));
    }
    Ok(body)
}

/// Splits one entry into its tagged values, in the order they appear.
fn tokens<'a>(encoded: &str, entry: &'a str) -> Result<Vec<(char, &'a str)>, FormatError> {
    let mut out: Vec<(char, &str)> = Vec::new();
    let mut rest = entry;
    while let Some(tag) = rest.chars().next() {
        if !is_tag(tag) {
            return Err(error(
                encoded,
                format!(
                    "malformed entry {entry:?}: cannot parse from offset {}",
                    entry.len() - rest.len()
                ),
            ));
        }
        let after = &rest[tag.len_utf8()..];
        let len = after.find(is_tag).unwrap_or(after.len());
        if len == 0 {
            return Err(error(
                encoded,
                format!(
                    "malformed entry {entry:?}: cannot parse from offset {}",
                    entry.len() - rest.len()
                ),
            ));
        }
        if out.iter().any(|(t, _)| *t == tag) {
            return Err(error(
                encoded,
                format!("duplicate {tag:?} tag in entry {entry:?}"),
            ));
        }
        out.push((tag, &after[..len]));
        rest = &after[len..];
    }
    Ok(out)
}

fn value<'a>(tokens: &[(char, &'a str)], tag: char) -> Option<&'a str> {
    tokens.iter().find(|(t, _)| *t == tag).map(|(_, v)| *v)
}

fn cron_of(encoded: &str, tokens: &[(char, &str)]) -> Result<Cron, FormatError> {
    let text = FIELD_TAGS
        .iter()
        .map(|t| value(tokens, *t).unwrap_or("*"))
        .collect::<Vec<_>>()
        .join(" ");
    Cron::parse(&text).map_err(|e| error(encoded, e.to_string()))
}

/// An integer as Python's `int()` reads a string: surrounding whitespace, a sign, digits
/// with single underscores between them.
fn int(encoded: &str, tag: char, text: &str) -> Result<i64, FormatError> {
    let bad = || {
        error(
            encoded,
            format!("the {tag:?} value {text:?} is not an integer"),
        )
    };
    let t = text.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return Err(bad());
    }
    let n = digits
        .bytes()
        .filter(u8::is_ascii_digit)
        .try_fold(0i64, |n, b| {
            n.checked_mul(10)?.checked_add(i64::from(b - b'0'))
        })
        // Beyond i64 it is beyond every bound a value is checked against.
        .unwrap_or(i64::MAX);
    Ok(if negative { -n } else { n })
}

/// Reads a stored parameter schedule in the item's zone.
///
/// Refused (the limiter then treats the bucket as unavailable): no version marker, a newer
/// version, a malformed or duplicate tag, a bad cron field, an entry with no modifier or
/// with both a scale and absolute values, and values out of bounds.
pub fn decode(encoded: &str, zone: &Zone) -> Result<Schedule, FormatError> {
    let body = strip_version(encoded)?;
    let mut entries = Vec::new();
    for part in body.split(';') {
        let tokens = tokens(encoded, part)?;
        let cron = cron_of(encoded, &tokens)?;
        let opt = |tag| {
            value(&tokens, tag)
                .map(|v| int(encoded, tag, v))
                .transpose()
        };
        let scale = opt('s')?;
        let (capacity, refill_amount, period) = (opt('c')?, opt('a')?, opt('p')?);
        let absolute = capacity.is_some() || refill_amount.is_some() || period.is_some();
        let modifier = match (scale, absolute) {
            (Some(s), false) => Modifier::Scale {
                per_mille: u32::try_from(s).unwrap_or(0),
            },
            (None, true) => Modifier::Absolute {
                capacity,
                refill_amount,
                refill_period_seconds: period,
            },
            _ => {
                return Err(error(
                    encoded,
                    format!("entry {part:?} must set exactly one of a scale or absolute values"),
                ));
            }
        };
        if let Some(s) = scale
            && s <= 0
        {
            return Err(error(
                encoded,
                format!("entry {part:?}: the scale must be positive"),
            ));
        }
        entries.push(Entry::with_cron(cron, modifier).map_err(|e| error(encoded, e.to_string()))?);
    }
    Schedule::new(zone.clone(), entries).map_err(|e| error(encoded, e.to_string()))
}

/// Reads a stored reset schedule in the item's zone; a modifier in it is refused (it
/// would mean a parameter schedule stored under the reset attribute).
pub fn decode_reset(encoded: &str, zone: &Zone) -> Result<ResetSchedule, FormatError> {
    let body = strip_version(encoded)?;
    let mut crons = Vec::new();
    for part in body.split(';') {
        let tokens = tokens(encoded, part)?;
        if let Some((tag, _)) = tokens.iter().find(|(t, _)| MODIFIER_TAGS.contains(t)) {
            return Err(error(
                encoded,
                format!(
                    "reset entry {part:?} carries the modifier {tag:?}; a reset sets no parameters"
                ),
            ));
        }
        crons.push(cron_of(encoded, &tokens)?);
    }
    ResetSchedule::new(zone.clone(), crons).map_err(|e| error(encoded, e.to_string()))
}

/// Renders one stored entry (version marker included) as a cron pattern for display, months
/// and weekdays named: `1h9-17w1-5s500` gives `* 9-17 * * MON-FRI`.
pub fn to_cron(encoded_entry: &str) -> Result<String, FormatError> {
    let tokens = tokens(encoded_entry, strip_version(encoded_entry)?)?;
    let fields: Vec<String> = FIELD_TAGS
        .iter()
        .map(|tag| {
            let spec = value(&tokens, *tag).unwrap_or("*");
            match tag {
                'w' => render_named(spec, |n| (n <= 7).then(|| DAY_NAMES[n % 7])),
                'M' => render_named(spec, |n| {
                    n.checked_sub(1).and_then(|i| MONTH_NAMES.get(i).copied())
                }),
                _ => spec.to_string(),
            }
        })
        .collect();
    Ok(fields.join(" "))
}

/// A pattern as its stored form reads back, months and weekdays named, for display: what
/// was written `* 9-17 * * 1-5` or `* 9-17 * * mon-fri` shows as `* 9-17 * * MON-FRI`.
pub fn named_cron(cron: &Cron) -> String {
    let mut body = ENCODING_VERSION.to_string();
    encode_cron(cron, &mut body);
    to_cron(&body).unwrap_or_else(|_| cron.to_string())
}

/// Names the numbers of each item's base (not of its step), keeping numbers with no name.
fn render_named(spec: &str, name: impl Fn(usize) -> Option<&'static str>) -> String {
    spec.split(',')
        .map(|item| {
            let (base, step) = match item.split_once('/') {
                Some((b, s)) => (b, Some(s)),
                None => (item, None),
            };
            let mut out = String::new();
            let mut number = String::new();
            let flush = |number: &mut String, out: &mut String| {
                if number.is_empty() {
                    return;
                }
                match number.parse::<usize>().ok().and_then(&name) {
                    Some(n) => out.push_str(n),
                    None => out.push_str(number),
                }
                number.clear();
            };
            for c in base.chars() {
                if c.is_ascii_digit() {
                    number.push(c);
                } else {
                    flush(&mut number, &mut out);
                    out.push(c);
                }
            }
            flush(&mut number, &mut out);
            if let Some(step) = step {
                out.push('/');
                out.push_str(step);
            }
            out
        })
        .collect::<Vec<_>>()
        .join(",")
}
