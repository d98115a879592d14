//! The text form of limits: `rpm=100/min,tpm=10000/min:burst=20000`, and the YAML file form.
//!
//! One limit is `NAME=RATE[/PERIOD][:burst=N][:soft][@ZONE][[CRON=CHANGE]]...`. `PERIOD` is
//! `sec`, `min` (the default), `hour`, `day`, or a number of seconds such as `10s`. Without a
//! burst the capacity equals the rate. `:soft` marks a soft limit, of any kind: debited like
//! the others, into debt when short, but never the reason an acquire is refused
//! (`tpm=10000/min:soft`, `tokens=500/quota:soft[0 0 * * *]`). Names follow the library's rule: a name that is an attribute of
//! the table's items (`ttl`, `window`, `total_events`, `PK`, …, see
//! `dynalimit_format::attr::ALL`) is refused before anything is sent.
//!
//! A schedule follows in brackets, one entry each, tried in order: a five-field cron pattern,
//! `=`, and what changes while it matches: `scale X`, or any of `burst N` (capacity), `rate N`
//! (refill amount) and `per PERIOD` (refill period). `@ZONE` names the IANA time zone of the
//! patterns (UTC without it). Half rate during office hours in Berlin, and a capacity of 2000
//! at night:
//!
//! ```text
//! tpm=10000/min@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5][* 0-6 * * *=burst 2000]
//! ```
//!
//! A calendar quota is `NAME=AMOUNT/quota` with its reset patterns in brackets: the allowance
//! comes back whole at each one's first matching minute and never drips. Ten million tokens a
//! month from the 1st, in New York:
//!
//! ```text
//! tokens=10000000/quota@America/New_York[0 0 1 * *]
//! ```
//!
//! A session quota is `NAME=AMOUNT/session:PERIOD`: the allowance for a window of `PERIOD`
//! that opens at the first request after the previous window ended (so an idle key starts
//! afresh when it comes back), never dripping. A hundred requests per 24 hours from first use:
//!
//! ```text
//! requests=100/session:day
//! ```
//!
//! The YAML file maps names to the same text, or to `{rate, per, burst, tz, schedule}`, a
//! quota to `{quota, reset, tz}` or `{quota, session}`, each with `soft: true` for a soft
//! limit:
//!
//! ```yaml
//! rpm: 100/min
//! tpm:
//!   rate: 10000
//!   per: min
//!   burst: 20000
//!   tz: Europe/Berlin
//!   schedule:
//!     - {cron: "* 9-17 * * MON-FRI", scale: 0.5}
//!     - {cron: "* 0-6 * * *", burst: 2000}
//! tokens:
//!   quota: 10000000
//!   reset: "0 0 1 * *"
//!   tz: America/New_York
//! requests:
//!   quota: 100
//!   session: day
//! watched:
//!   rate: 500
//!   soft: true
//! ```

use crate::error::{Context, Result, bail, invalid};
use dynalimit_core::schedule::{Cron, Entry, Modifier, ResetSchedule, Schedule, Zone};
use dynalimit_core::{Concurrency, Limit};
use dynalimit_format::attr;
use dynalimit_format::schedule::named_cron;
use dynalimit_repository::{DisabledFlag, OnUnavailable};

/// Seconds of a period name.
fn period_seconds(period: &str) -> Result<i64> {
    let p = period.trim();
    let seconds = match p {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        other => other
            .strip_suffix('s')
            .and_then(|n| n.parse::<i64>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                invalid!("unknown period {other:?}: use sec, min, hour, day or a number of seconds like 10s")
            })?,
    };
    Ok(seconds)
}

fn number(what: &str, text: &str) -> Result<i64> {
    text.trim()
        .parse::<i64>()
        .map_err(|_| invalid!("{what} {text:?} is not a whole number"))
}

fn build(name: &str, rate: i64, period: i64, burst: Option<i64>) -> Result<Limit> {
    let limit = Limit::custom(name, burst.unwrap_or(rate), rate, period);
    attr::validate_limit(&limit).with_context(|| format!("limit {name:?}"))?;
    Ok(limit)
}

/// Parses one concurrency limit, `NAME=MAX` or `NAME=MAX/HOLD` with `HOLD` a whole number of
/// `ms`, `s`, `m` or `h` (30 s when not given): at most `MAX` requests in flight, each slot
/// held `HOLD` after its last heartbeat.
///
/// ```
/// use dynalimit_manifest::spec::{format_concurrency, parse_concurrency};
/// let streams = parse_concurrency("streams=200/2m").unwrap();
/// assert_eq!((streams.max(), streams.hold_ms()), (200, 120_000));
/// assert_eq!(format_concurrency(&streams), "streams=200/2m");
/// assert!(parse_concurrency("streams=0").is_err());
/// ```
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_concurrency(text: &str) -> Result<Concurrency> {
    let Some((name, rest)) = text.split_once('=') else {
        bail!("{text:?}: expected name=max or name=max/hold");
    };
    let (max, hold) = match rest.split_once('/') {
        Some((max, hold)) => (max, Some(hold)),
        None => (rest, None),
    };
    let Ok(max) = max.trim().parse::<u32>() else {
        bail!("{text:?}: the most requests in flight is a whole number");
    };
    let limit = Concurrency::new(name.trim(), max).with_context(|| format!("{text:?}"))?;
    match hold {
        Some(h) => limit
            .hold_time(parse_duration(h.trim())?)
            .with_context(|| format!("{text:?}")),
        None => Ok(limit),
    }
}

/// `1500ms`, `30s`, `2m` or `1h`.
fn parse_duration(text: &str) -> Result<std::time::Duration> {
    let Some(split) = text.find(|c: char| !c.is_ascii_digit()) else {
        bail!("{text:?}: a duration needs a unit (ms, s, m or h)");
    };
    let (digits, unit) = text.split_at(split);
    let Ok(n) = digits.parse::<u64>() else {
        bail!("{text:?}: a duration is a whole number and a unit");
    };
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => bail!("{text:?}: the unit is ms, s, m or h"),
    };
    match n.checked_mul(ms_per_unit) {
        Some(ms) => Ok(std::time::Duration::from_millis(ms)),
        None => bail!("{text:?}: too long"),
    }
}

/// A concurrency limit in [`parse_concurrency`]'s form, its hold in the largest whole unit.
pub fn format_concurrency(limit: &Concurrency) -> String {
    let ms = limit.hold_ms();
    let hold = [(3_600_000, "h"), (60_000, "m"), (1_000, "s")]
        .iter()
        .find(|(unit, _)| ms % unit == 0)
        .map_or_else(
            || format!("{ms}ms"),
            |(unit, name)| format!("{}{name}", ms / unit),
        );
    format!("{}={}/{hold}", limit.name(), limit.max())
}

/// The soft marker of the text form, after the amounts and before the zone.
const SOFT: &str = ":soft";

/// Parses one limit, `NAME=RATE[/PERIOD][:burst=N][:soft][@ZONE][[CRON=CHANGE]]...`.
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_limit(text: &str) -> Result<Limit> {
    let (head, entries) = match text.find('[') {
        Some(at) => (&text[..at], Some(&text[at..])),
        None => (text, None),
    };
    let (head, zone) = match head.split_once('@') {
        Some((head, zone)) => (head, Some(zone.trim())),
        None => (head, None),
    };
    let (head, soft) = match head.trim_end().strip_suffix(SOFT) {
        Some(head) => (head, true),
        None => (head, false),
    };
    let quota = head.trim_end().strip_suffix("/quota");
    let session = match head.trim_end().rsplit_once("/session:") {
        Some((head, period)) => Some((head, period_seconds(period)?)),
        None => None,
    };
    let limit = match (quota, session) {
        (_, Some((head, window))) => {
            let (name, amount) = head.split_once('=').ok_or_else(|| {
                invalid!("session quota {text:?} must look like NAME=AMOUNT/session:PERIOD, e.g. q=100/session:day")
            })?;
            Limit::session_quota(name.trim(), number("amount", amount)?, window)
        }
        (Some(head), None) => {
            let (name, amount) = head.split_once('=').ok_or_else(|| {
                invalid!("quota {text:?} must look like NAME=AMOUNT/quota[CRON], e.g. q=1000/quota[0 0 * * *]")
            })?;
            Limit::custom(name.trim(), number("amount", amount)?, 0, 1)
        }
        (None, None) => parse_plain(head)?,
    };
    let name = limit.name().to_owned();
    let (entries, resets) = match entries {
        Some(entries) => parse_entries(&name, entries)?,
        None => (Vec::new(), Vec::new()),
    };
    if entries.is_empty() && resets.is_empty() && zone.is_some() {
        bail!(
            "limit {name:?}: a time zone (@ZONE) needs a schedule, e.g. \
             @Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5]"
        );
    }
    if quota.is_some() == resets.is_empty() {
        bail!(
            "limit {name:?}: a quota (NAME=AMOUNT/quota) has reset patterns in brackets and \
             only a quota has them, e.g. q=1000/quota[0 0 * * *]"
        );
    }
    let zone = Zone::get(zone.unwrap_or("UTC")).with_context(|| format!("limit {name:?}"))?;
    let mut limit = limit.with_soft(soft);
    if !entries.is_empty() {
        let schedule =
            Schedule::new(zone.clone(), entries).with_context(|| format!("limit {name:?}"))?;
        limit = limit.with_schedule(schedule);
    }
    if !resets.is_empty() {
        let reset = ResetSchedule::new(zone, resets).with_context(|| format!("limit {name:?}"))?;
        limit = limit.with_reset(reset);
    }
    attr::validate_limit(&limit).with_context(|| format!("limit {name:?}"))?;
    Ok(limit)
}

/// The bracketed entries after a limit: `[CRON=CHANGE]` entries of its schedule, and, for a
/// quota, `[CRON]` reset patterns (a pattern that matches every minute is refused).
fn parse_entries(name: &str, mut text: &str) -> Result<(Vec<Entry>, Vec<Cron>)> {
    let (mut entries, mut resets) = (Vec::new(), Vec::new());
    loop {
        text = text.trim();
        if text.is_empty() {
            return Ok((entries, resets));
        }
        let (entry, rest) = text
            .strip_prefix('[')
            .and_then(|t| t.split_once(']'))
            .ok_or_else(|| {
                invalid!(
                    "limit {name:?}: each schedule entry is [CRON=CHANGE] or [CRON], got {text:?}"
                )
            })?;
        match entry.split_once('=') {
            Some((cron, change)) => entries.push(entry_of(name, cron, &words(change)?)?),
            None => {
                let cron = Cron::parse(entry).with_context(|| format!("limit {name:?}"))?;
                if cron.matches_always() {
                    bail!(
                        "limit {name:?}: the reset pattern {entry:?} matches every minute, so it never resets"
                    );
                }
                resets.push(cron);
            }
        }
        text = rest;
    }
}

/// `key value` pairs of a schedule entry's change.
fn words(change: &str) -> Result<Vec<(String, String)>> {
    let parts: Vec<&str> = change.split_whitespace().collect();
    if parts.is_empty() || !parts.len().is_multiple_of(2) {
        bail!("a change is `scale X` or any of `burst N`, `rate N`, `per PERIOD`, got {change:?}");
    }
    Ok(parts
        .chunks(2)
        .map(|p| (p[0].to_owned(), p[1].to_owned()))
        .collect())
}

/// One schedule entry from its pattern and its change, as `(key, value)` pairs.
fn entry_of(name: &str, cron: &str, change: &[(String, String)]) -> Result<Entry> {
    let mut scale = None;
    let (mut capacity, mut rate, mut per) = (None, None, None);
    for (key, value) in change {
        match key.as_str() {
            "scale" => {
                scale =
                    Some(value.parse::<f64>().map_err(|_| {
                        invalid!("limit {name:?}: scale {value:?} is not a number")
                    })?);
            }
            "burst" => capacity = Some(number("burst", value)?),
            "rate" => rate = Some(number("rate", value)?),
            "per" => per = Some(period_seconds(value)?),
            other => {
                bail!("limit {name:?}: unknown change {other:?} (use scale, or burst, rate, per)")
            }
        }
    }
    let entry = match scale {
        Some(_) if capacity.is_some() || rate.is_some() || per.is_some() => bail!(
            "limit {name:?}: an entry changes the scale or the values (burst, rate, per), not both"
        ),
        Some(scale) => Entry::scaled(cron, scale),
        None => Entry::absolute(cron, capacity, rate, per),
    };
    entry.with_context(|| format!("limit {name:?}"))
}

/// Parses a limit without a schedule, `NAME=RATE[/PERIOD][:burst=N]`.
fn parse_plain(text: &str) -> Result<Limit> {
    let (name, spec) = text.split_once('=').ok_or_else(|| {
        invalid!("limit {text:?} must look like NAME=RATE[/PERIOD][:burst=N], e.g. rpm=100/min")
    })?;
    let name = name.trim();
    let (rate_part, burst) = match spec.split_once(':') {
        Some((rate, extra)) => {
            let value = extra.trim().strip_prefix("burst=").ok_or_else(|| {
                invalid!("limit {name:?}: expected :burst=N after the rate, got {extra:?}")
            })?;
            (rate, Some(number("burst", value)?))
        }
        None => (spec, None),
    };
    let (rate, period) = match rate_part.split_once('/') {
        Some((rate, period)) => (rate, period_seconds(period)?),
        None => (rate_part, 60),
    };
    build(name, number("rate", rate)?, period, burst)
}

/// Parses a comma-separated list of limits, without a level's attributes (the command line
/// reads both with `level_spec::parse_text`).
///
/// # Errors
/// A message naming the first bad limit, or a repeated name.
pub fn parse_limits(text: &str) -> Result<Vec<Limit>> {
    let limits = split_top_level(text)
        .into_iter()
        .filter(|s| !s.trim().is_empty())
        .map(parse_limit)
        .collect::<Result<Vec<_>>>()?;
    check(limits)
}

/// Splits on the commas outside brackets (a schedule's cron fields have commas of their own).
pub fn split_top_level(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// At least one limit, and what one bucket's limits must be
/// ([`attr::validate_limits`]: at most [`attr::MAX_LIMITS_PER_BUCKET`], no name twice, one
/// zone), checked before the table is opened.
fn check(limits: Vec<Limit>) -> Result<Vec<Limit>> {
    if limits.is_empty() {
        bail!("no limits given");
    }
    attr::validate_limits(&limits)?;
    Ok(limits)
}

/// Parses the YAML file form.
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_limits_yaml(text: &str) -> Result<Vec<Limit>> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).context("not valid YAML")?;
    let map = doc.as_mapping().ok_or_else(|| {
        invalid!("the limits file must map limit names to limits (e.g. `rpm: 100/min`)")
    })?;
    check(limits_of_mapping(map.iter())?)
}

/// The limits of the YAML form's mapping entries (names to limits), in their order; none when
/// there are no entries (the caller says whether that is allowed).
///
/// # Errors
/// A message naming the first bad limit.
pub fn limits_of_mapping<'a>(
    entries: impl IntoIterator<Item = (&'a serde_yaml_ng::Value, &'a serde_yaml_ng::Value)>,
) -> Result<Vec<Limit>> {
    use serde_yaml_ng::Value;
    let mut limits = Vec::new();
    for (k, v) in entries {
        let name = k
            .as_str()
            .ok_or_else(|| invalid!("limit names must be strings"))?;
        let limit = match v {
            Value::String(s) => parse_limit(&format!("{name}={s}"))?,
            Value::Number(n) => parse_limit(&format!("{name}={n}"))?,
            Value::Mapping(m) => {
                let field = |f: &str| m.get(f);
                let int = |f: &str| -> Result<Option<i64>> {
                    match field(f) {
                        None => Ok(None),
                        Some(v) => v
                            .as_i64()
                            .map(Some)
                            .ok_or_else(|| invalid!("limit {name:?}: {f} must be a whole number")),
                    }
                };
                for key in m.keys() {
                    let known = [
                        "rate", "per", "burst", "tz", "schedule", "quota", "reset", "session",
                        "soft",
                    ];
                    if !key.as_str().is_some_and(|k| known.contains(&k)) {
                        bail!(
                            "limit {name:?}: unknown field {key:?} \
                             (use rate, per, burst, tz, schedule; quota, reset or session; soft)"
                        );
                    }
                }
                let soft = match field("soft") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => bail!("limit {name:?}: soft must be true or false"),
                };
                if let Some(amount) = int("quota")? {
                    limits.push(yaml_quota(name, amount, m)?.with_soft(soft));
                    continue;
                }
                let rate =
                    int("rate")?.ok_or_else(|| invalid!("limit {name:?}: rate is missing"))?;
                let period = match field("per") {
                    None => 60,
                    Some(Value::String(p)) => period_seconds(p)?,
                    Some(Value::Number(n)) => n
                        .as_i64()
                        .ok_or_else(|| invalid!("limit {name:?}: per must be a period"))?,
                    Some(_) => bail!("limit {name:?}: per must be a period such as min"),
                };
                let limit = build(name, rate, period, int("burst")?)?.with_soft(soft);
                match yaml_schedule(name, field("tz"), field("schedule"))? {
                    Some(schedule) => limit.with_schedule(schedule),
                    None => limit,
                }
            }
            _ => bail!(
                "limit {name:?}: expected text like 100/min or a mapping with rate, per, burst"
            ),
        };
        limits.push(limit);
    }
    Ok(limits)
}

/// A quota in the YAML form: `{quota: N, reset: CRON or [CRON, ...], tz: ZONE}`.
fn yaml_quota(name: &str, amount: i64, m: &serde_yaml_ng::Mapping) -> Result<Limit> {
    use serde_yaml_ng::Value;
    for key in ["rate", "per", "burst", "schedule"] {
        if m.contains_key(key) {
            bail!("limit {name:?}: a quota takes quota, reset, tz and soft, not {key}");
        }
    }
    if let Some(window) = m.get("session") {
        if m.contains_key("reset") {
            bail!("limit {name:?}: a quota resets on a calendar (reset) or per session, not both");
        }
        let period = match window {
            Value::String(p) => p.clone(),
            Value::Number(n) => format!("{n}s"),
            _ => bail!("limit {name:?}: session must be a period such as day or 3600s"),
        };
        return parse_limit(&format!("{name}={amount}/session:{period}"));
    }
    let crons: Vec<&str> = match m.get("reset") {
        Some(Value::String(c)) => vec![c.as_str()],
        Some(Value::Sequence(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => bail!("limit {name:?}: a quota needs reset, a cron pattern such as \"0 0 1 * *\""),
    };
    let zone = m.get("tz").and_then(Value::as_str).unwrap_or("UTC");
    let text = crons.iter().map(|c| format!("[{c}]")).collect::<String>();
    parse_limit(&format!("{name}={amount}/quota@{zone}{text}"))
}

/// The `tz` and `schedule` fields of a limit in the YAML form.
fn yaml_schedule(
    name: &str,
    tz: Option<&serde_yaml_ng::Value>,
    schedule: Option<&serde_yaml_ng::Value>,
) -> Result<Option<Schedule>> {
    use serde_yaml_ng::Value;
    let Some(schedule) = schedule else {
        if tz.is_some() {
            bail!("limit {name:?}: tz needs a schedule");
        }
        return Ok(None);
    };
    let list = schedule
        .as_sequence()
        .ok_or_else(|| invalid!("limit {name:?}: schedule must be a list of entries"))?;
    let mut entries = Vec::new();
    for item in list {
        let m = item.as_mapping().ok_or_else(|| {
            invalid!(
                "limit {name:?}: a schedule entry is a mapping such as {{cron: ..., scale: 0.5}}"
            )
        })?;
        let mut cron = None;
        let mut change = Vec::new();
        for (k, v) in m {
            let key = k.as_str().unwrap_or_default();
            let value = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => bail!("limit {name:?}: {key} must be text or a number"),
            };
            if key == "cron" {
                cron = Some(value);
            } else {
                change.push((key.to_owned(), value));
            }
        }
        let cron = cron.ok_or_else(|| invalid!("limit {name:?}: a schedule entry needs cron"))?;
        entries.push(entry_of(name, &cron, &change)?);
    }
    let zone = match tz {
        None => Zone::utc(),
        Some(z) => {
            Zone::get(z.as_str().unwrap_or_default()).with_context(|| format!("limit {name:?}"))?
        }
    };
    Ok(Some(
        Schedule::new(zone, entries).with_context(|| format!("limit {name:?}"))?,
    ))
}

fn period_text(seconds: i64) -> String {
    match seconds {
        1 => "sec".to_string(),
        60 => "min".to_string(),
        3600 => "hour".to_string(),
        86_400 => "day".to_string(),
        n => format!("{n}s"),
    }
}

/// The text form of a limit (inverse of [`parse_limit`]).
pub fn format_limit(limit: &Limit) -> String {
    let mut out = match (limit.reset(), limit.window_seconds()) {
        (Some(_), _) => format!("{}={}/quota", limit.name(), limit.capacity()),
        (None, Some(window)) => format!(
            "{}={}/session:{}",
            limit.name(),
            limit.capacity(),
            period_text(window)
        ),
        (None, None) => {
            let period = period_text(limit.refill_period_seconds());
            let mut out = format!("{}={}/{period}", limit.name(), limit.refill_amount());
            if limit.capacity() != limit.refill_amount() {
                out.push_str(&format!(":burst={}", limit.capacity()));
            }
            out
        }
    };
    if limit.is_soft() {
        out.push_str(SOFT);
    }
    if let Some(z) = limit.zones().next().filter(|z| z.name() != "UTC") {
        out.push('@');
        out.push_str(z.name());
    }
    for c in limit.reset().map(ResetSchedule::crons).unwrap_or_default() {
        out.push_str(&format!("[{}]", named_cron(c)));
    }
    if let Some(s) = limit.schedule() {
        for e in s.entries() {
            let change = match e.modifier() {
                Modifier::Scale { per_mille } => format!("scale {}", f64::from(per_mille) / 1000.0),
                Modifier::Absolute {
                    capacity,
                    refill_amount,
                    refill_period_seconds,
                } => [
                    capacity.map(|c| format!("burst {c}")),
                    refill_amount.map(|a| format!("rate {a}")),
                    refill_period_seconds.map(|p| format!("per {}", period_text(p))),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" "),
            };
            out.push_str(&format!("[{}={change}]", named_cron(e.cron())));
        }
    }
    out
}

/// A level's `disabled` value in the YAML form, the JSON document and (read as a scalar) the
/// text form: `true` (every acquire refused), `false` (limits enforced explicitly), `bypass`
/// (every acquire admitted and counted), or `null` (none: the level inherits). `limits set`
/// and the manifest read it here.
///
/// # Errors
/// What the value may be.
pub fn disabled_value(value: &serde_yaml_ng::Value) -> Result<Option<DisabledFlag>, &'static str> {
    use serde_yaml_ng::Value;
    match value {
        Value::Null => Ok(None),
        Value::Bool(true) => Ok(Some(DisabledFlag::Disabled)),
        Value::Bool(false) => Ok(Some(DisabledFlag::Enabled)),
        Value::String(s) if s == DisabledFlag::Bypass.name() => Ok(Some(DisabledFlag::Bypass)),
        _ => Err("disabled is true, false, bypass or null"),
    }
}

/// A level's cascade policy, in the same forms as [`disabled_value`]: `true` (acquires also
/// debit the entity's parent), `false`, or `null` (none: inherit).
///
/// # Errors
/// What the value may be.
pub fn cascade_value(value: &serde_yaml_ng::Value) -> Result<Option<bool>, &'static str> {
    use serde_yaml_ng::Value;
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b)),
        _ => Err("cascade is true, false or null"),
    }
}

/// The system level's `on_unavailable`, in the same forms as [`disabled_value`]: `allow`,
/// `block`, or `null` (none).
///
/// # Errors
/// What the value may be.
pub fn on_unavailable_value(
    value: &serde_yaml_ng::Value,
) -> Result<Option<OnUnavailable>, &'static str> {
    use serde_yaml_ng::Value;
    const WHAT: &str = "on_unavailable is allow, block or null";
    match value {
        Value::Null => Ok(None),
        Value::String(s) => OnUnavailable::parse(s).map(Some).ok_or(WHAT),
        _ => Err(WHAT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_periods_and_bursts() {
        let limits =
            parse_limits("rpm=100/min,tpm=10000/min:burst=20000, rps=5/sec,x=7/10s,d=3").unwrap();
        let got: Vec<_> = limits
            .iter()
            .map(|l| {
                (
                    l.name().to_string(),
                    l.capacity(),
                    l.refill_amount(),
                    l.refill_period_seconds(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("rpm".into(), 100, 100, 60),
                ("tpm".into(), 20000, 10000, 60),
                ("rps".into(), 5, 5, 1),
                ("x".into(), 7, 7, 10),
                ("d".into(), 3, 3, 60),
            ]
        );
    }

    #[test]
    fn session_quotas_parse_from_text_and_yaml() {
        let l = parse_limit("requests=100/session:day").unwrap();
        assert_eq!(l, Limit::session_quota("requests", 100, 86_400));
        let l = parse_limit("q=5/session:90s").unwrap();
        assert_eq!(l.window_seconds(), Some(90));
        let yaml =
            parse_limits_yaml("requests: {quota: 100, session: hour}\nq: {quota: 5, session: 90}")
                .unwrap();
        assert_eq!(yaml[0].window_seconds(), Some(3600));
        assert_eq!(yaml[1].window_seconds(), Some(90));
        for bad in [
            "q=5/session:",
            "q=5/session:never",
            "q=0/session:day",
            "q=5/session:day[0 0 * * *]",
        ] {
            assert!(parse_limit(bad).is_err(), "{bad}");
        }
        let e = parse_limits_yaml("q: {quota: 5, session: day, reset: \"0 0 * * *\"}").unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }

    #[test]
    fn text_form_round_trips() {
        for text in [
            "rpm=100/min",
            "tpm=10000/min:burst=20000",
            "a=1/sec",
            "b=2/10s",
            "c=3/day",
            "s=100/session:day",
            "t=7/session:90s",
        ] {
            assert_eq!(format_limit(&parse_limit(text).unwrap()), text);
        }
    }

    #[test]
    fn schedules_parse_and_round_trip() {
        for text in [
            "tpm=10000/min@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5][* 0-6 * * *=burst 2000]",
            "rpm=100/min[0,30 * * * *=rate 50 per hour]",
        ] {
            let limits = parse_limits(&format!("{text},other=1/sec")).unwrap();
            assert_eq!(limits.len(), 2, "{text}");
            assert_eq!(format_limit(&limits[0]), text);
        }
        let tpm = parse_limit("tpm=100/min@Asia/Kolkata[* 9-17 * * *=scale 0.25]").unwrap();
        let s = tpm.schedule().unwrap();
        assert_eq!(s.zone().name(), "Asia/Kolkata");
        assert_eq!(
            s.entries()[0].modifier(),
            Modifier::Scale { per_mille: 250 }
        );
        for (text, needle) in [
            ("rpm=1/min[0 * * * *]", "reset patterns"),
            ("rpm=1/min[* * * *=scale 2]", "5 fields"),
            ("rpm=1/min[* * * * *=scale 2 burst 3]", "not both"),
            ("rpm=1/min[* * * * *=cap 3]", "unknown change"),
            ("rpm=1/min[* * * * *=scale]", "a change is"),
            ("rpm=1/min@Nowhere/Town[* * * * *=scale 2]", "time zone"),
            ("rpm=1/min@Europe/Berlin", "needs a schedule"),
            ("rpm=1/min[0 0 L * *=scale 2]", "not supported"),
            ("rpm=1/min[* * * * *=scale 0]", "positive"),
        ] {
            let err = parse_limits(text).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
    }

    #[test]
    fn quotas_parse_and_round_trip() {
        for text in [
            "tokens=10000000/quota@America/New_York[0 0 1 * *]",
            "requests=100/quota[0 0 * * *][0 12 * * *]",
        ] {
            let limit = parse_limit(text).unwrap();
            assert!(limit.is_quota(), "{text}");
            assert_eq!(format_limit(&limit), text);
        }
        let yaml = parse_limits_yaml(
            "tokens:\n  quota: 500\n  reset: \"0 0 1 * *\"\n  tz: Europe/Paris\n",
        )
        .unwrap();
        assert_eq!(
            format_limit(&yaml[0]),
            "tokens=500/quota@Europe/Paris[0 0 1 * *]"
        );
        for (text, needle) in [
            ("q=10/quota", "reset patterns"),
            ("q=10/min[0 0 * * *]", "reset patterns"),
            ("q=10/quota[* * * * *]", "every minute"),
            ("q=ten/quota[0 0 * * *]", "whole number"),
        ] {
            let err = parse_limits(text).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
        assert!(parse_limits_yaml("q:\n  quota: 5\n").is_err());
        assert!(parse_limits_yaml("q:\n  quota: 5\n  reset: \"0 0 * * *\"\n  rate: 3\n").is_err());
    }

    #[test]
    fn yaml_takes_schedules() {
        let limits = parse_limits_yaml(
            "tpm:\n  rate: 10000\n  per: min\n  tz: Europe/Berlin\n  schedule:\n    - {cron: \"* 9-17 * * MON-FRI\", scale: 0.5}\n    - {cron: \"* 0-6 * * *\", burst: 2000, per: 30s}\n",
        )
        .unwrap();
        assert_eq!(
            format_limit(&limits[0]),
            "tpm=10000/min@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5][* 0-6 * * *=burst 2000 per 30s]"
        );
        assert!(parse_limits_yaml("a:\n  rate: 1\n  tz: UTC\n").is_err());
        assert!(parse_limits_yaml("a:\n  rate: 1\n  schedule:\n    - {scale: 2}\n").is_err());
    }

    #[test]
    fn bad_text_is_refused_with_a_reason() {
        for (text, needle) in [
            ("rpm", "NAME=RATE"),
            ("rpm=ten/min", "whole number"),
            ("rpm=10/fortnight", "unknown period"),
            ("rpm=10/min:cap=3", "burst"),
            ("rpm=0/min", "rpm"),
            ("rpm=1,rpm=2", "twice"),
            ("ttl=1/min", "reserved"),
            ("rpm=1,total_events=2", "usage snapshot items"),
            ("GSI2PK=1/sec", "reserved"),
            ("", "no limits"),
        ] {
            let err = parse_limits(text).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
    }

    #[test]
    fn the_soft_marker_round_trips_in_every_kind_and_form() {
        for text in [
            "tpm=10000/min:soft",
            "tpm=10000/min:burst=20000:soft",
            "q=100/session:day:soft",
            "tokens=500/quota:soft@Europe/Paris[0 0 1 * *]",
            "rpm=100/min:soft@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5]",
        ] {
            let limit = parse_limit(text).unwrap();
            assert!(limit.is_soft(), "{text}");
            assert_eq!(format_limit(&limit), text);
            let hard = parse_limit(&text.replace(":soft", "")).unwrap();
            assert!(!hard.is_soft(), "{text}");
            assert_eq!(
                hard.with_soft(true),
                limit,
                "only the marker differs: {text}"
            );
        }
        let yaml = parse_limits_yaml(
            "a: {rate: 5, soft: true}\nb: {quota: 9, session: hour, soft: true}\n\
             c: {quota: 3, reset: \"0 0 * * *\", soft: true}\nd: 7/min:soft\ne: {rate: 5, soft: false}\n",
        )
        .unwrap();
        let text: Vec<_> = yaml.iter().map(format_limit).collect();
        assert_eq!(
            text,
            [
                "a=5/min:soft",
                "b=9/session:hour:soft",
                "c=3/quota:soft[0 0 * * *]",
                "d=7/min:soft",
                "e=5/min",
            ]
        );
        for (bad, needle) in [
            ("a: {rate: 5, soft: yes please}", "true or false"),
            ("a: {rate: 5, soft: 1}", "true or false"),
        ] {
            let err = parse_limits_yaml(bad).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{bad}: {err:#}");
        }
        for bad in ["a=5/min:soft:burst=9", "a=5/min:sof", "a=5/session:soft"] {
            assert!(parse_limit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn more_limits_than_one_bucket_carries_are_refused_before_the_table_is_opened() {
        let text = |n: usize| {
            (0..n)
                .map(|i| format!("l{i}=1/min"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let max = attr::MAX_LIMITS_PER_BUCKET;
        assert_eq!(parse_limits(&text(max)).unwrap().len(), max);
        let err = parse_limits(&text(max + 1)).unwrap_err();
        assert!(format!("{err:#}").contains("at most 16"), "{err:#}");
        let yaml: String = (0..=max).map(|i| format!("l{i}: 1/min\n")).collect();
        assert!(parse_limits_yaml(&yaml).is_err());
    }

    #[test]
    fn yaml_accepts_text_and_mappings() {
        let limits = parse_limits_yaml(
            "rpm: 100/min\ntpm:\n  rate: 10000\n  per: min\n  burst: 20000\nrps: 5\n",
        )
        .unwrap();
        let text: Vec<_> = limits.iter().map(format_limit).collect();
        assert_eq!(
            text,
            ["rpm=100/min", "tpm=10000/min:burst=20000", "rps=5/min"]
        );
        assert!(parse_limits_yaml("- a\n- b\n").is_err());
        assert!(parse_limits_yaml("a:\n  rate: 1\n  cap: 2\n").is_err());
        assert!(parse_limits_yaml("a:\n  per: min\n").is_err());
        for yaml in ["window: 5/min\n", "rpm: 1\nentity_id:\n  rate: 2\n"] {
            let err = parse_limits_yaml(yaml).unwrap_err();
            assert!(format!("{err:#}").contains("reserved"), "{yaml}: {err:#}");
        }
        // Names are compared exactly: a near miss is an ordinary limit.
        assert_eq!(parse_limits("Window=5/min").unwrap()[0].name(), "Window");
    }
}
