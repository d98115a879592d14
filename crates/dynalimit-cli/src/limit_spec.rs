//! The text form of limits: `rpm=100/min,tpm=10000/min:burst=20000`, and the YAML file form.
//!
//! One limit is `NAME=RATE[/PERIOD][:burst=N]`. `PERIOD` is `sec`, `min` (the default), `hour`,
//! `day`, or a number of seconds such as `10s`. Without a burst the capacity equals the rate.
//! Names follow the library's rule: a name that is an attribute of the table's items (`ttl`,
//! `window`, `total_events`, `PK`, …, see `dynalimit_format::attr::ALL`) is
//! refused before anything is sent.
//!
//! The YAML file maps names to the same text, or to `{rate, per, burst}`:
//!
//! ```yaml
//! rpm: 100/min
//! tpm:
//!   rate: 10000
//!   per: min
//!   burst: 20000
//! ```

use anyhow::{Context, Result, anyhow, bail};
use dynalimit_core::Limit;
use dynalimit_format::attr;

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
                anyhow!("unknown period {other:?}: use sec, min, hour, day or a number of seconds like 10s")
            })?,
    };
    Ok(seconds)
}

fn number(what: &str, text: &str) -> Result<i64> {
    text.trim()
        .parse::<i64>()
        .map_err(|_| anyhow!("{what} {text:?} is not a whole number"))
}

fn build(name: &str, rate: i64, period: i64, burst: Option<i64>) -> Result<Limit> {
    let limit = Limit::custom(name, burst.unwrap_or(rate), rate, period);
    attr::validate_limit(&limit).with_context(|| format!("limit {name:?}"))?;
    Ok(limit)
}

/// Parses one limit, `NAME=RATE[/PERIOD][:burst=N]`.
///
/// # Errors
/// A message naming what is wrong.
pub(crate) fn parse_limit(text: &str) -> Result<Limit> {
    let (name, spec) = text.split_once('=').ok_or_else(|| {
        anyhow!("limit {text:?} must look like NAME=RATE[/PERIOD][:burst=N], e.g. rpm=100/min")
    })?;
    let name = name.trim();
    let (rate_part, burst) = match spec.split_once(':') {
        Some((rate, extra)) => {
            let value = extra.trim().strip_prefix("burst=").ok_or_else(|| {
                anyhow!("limit {name:?}: expected :burst=N after the rate, got {extra:?}")
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

/// Parses a comma-separated list of limits.
///
/// # Errors
/// A message naming the first bad limit, or a repeated name.
pub(crate) fn parse_limits(text: &str) -> Result<Vec<Limit>> {
    let limits = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(parse_limit)
        .collect::<Result<Vec<_>>>()?;
    check(limits)
}

fn check(limits: Vec<Limit>) -> Result<Vec<Limit>> {
    if limits.is_empty() {
        bail!("no limits given");
    }
    for (i, l) in limits.iter().enumerate() {
        if limits[..i].iter().any(|o| o.name() == l.name()) {
            bail!("limit {:?} is given twice", l.name());
        }
    }
    Ok(limits)
}

/// Parses the YAML file form.
///
/// # Errors
/// A message naming what is wrong.
pub(crate) fn parse_limits_yaml(text: &str) -> Result<Vec<Limit>> {
    use serde_yaml_ng::Value;
    let doc: Value = serde_yaml_ng::from_str(text).context("not valid YAML")?;
    let map = doc.as_mapping().ok_or_else(|| {
        anyhow!("the limits file must map limit names to limits (e.g. `rpm: 100/min`)")
    })?;
    let mut limits = Vec::new();
    for (k, v) in map {
        let name = k
            .as_str()
            .ok_or_else(|| anyhow!("limit names must be strings"))?;
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
                            .ok_or_else(|| anyhow!("limit {name:?}: {f} must be a whole number")),
                    }
                };
                let rate =
                    int("rate")?.ok_or_else(|| anyhow!("limit {name:?}: rate is missing"))?;
                let period = match field("per") {
                    None => 60,
                    Some(Value::String(p)) => period_seconds(p)?,
                    Some(Value::Number(n)) => n
                        .as_i64()
                        .ok_or_else(|| anyhow!("limit {name:?}: per must be a period"))?,
                    Some(_) => bail!("limit {name:?}: per must be a period such as min"),
                };
                for key in m.keys() {
                    let known = ["rate", "per", "burst"];
                    if !key.as_str().is_some_and(|k| known.contains(&k)) {
                        bail!("limit {name:?}: unknown field {key:?} (use rate, per, burst)");
                    }
                }
                build(name, rate, period, int("burst")?)?
            }
            _ => bail!(
                "limit {name:?}: expected text like 100/min or a mapping with rate, per, burst"
            ),
        };
        limits.push(limit);
    }
    check(limits)
}

/// The text form of a limit (inverse of [`parse_limit`]).
pub(crate) fn format_limit(limit: &Limit) -> String {
    let period = match limit.refill_period_seconds() {
        1 => "sec".to_string(),
        60 => "min".to_string(),
        3600 => "hour".to_string(),
        86_400 => "day".to_string(),
        n => format!("{n}s"),
    };
    let mut out = format!("{}={}/{period}", limit.name(), limit.refill_amount());
    if limit.capacity() != limit.refill_amount() {
        out.push_str(&format!(":burst={}", limit.capacity()));
    }
    out
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
    fn text_form_round_trips() {
        for text in [
            "rpm=100/min",
            "tpm=10000/min:burst=20000",
            "a=1/sec",
            "b=2/10s",
            "c=3/day",
        ] {
            assert_eq!(format_limit(&parse_limit(text).unwrap()), text);
        }
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
