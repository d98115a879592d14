//! What the stored limits allow: an upper bound on the acquires of one token a span may admit,
//! read from the items independently of dynalimit's decoders (the table format spelled out
//! here on purpose, so a decoder's mistake is not repeated by the check).
//!
//! The bound is generous: every place a valid definition of the consumed limit could come
//! from counts. A configuration level that defines it validly allows its capacity and its
//! refill over the span (the most generous level counts); every bucket item of the child on
//! the resource whose own limit is valid adds its own capacity, refill and top-ups (a writer
//! may have left a balance of an older configuration). A definition that does not bound
//! admissions at all (a soft limit, bypass, a quota that resets) makes the span unbounded.
//! Stamps are not counted: the span starts an hour after the case's stamps were written,
//! past every stamp's lifetime.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;
use dynalimit_tests::hostile::{CHILD, RESOURCE};

/// Largest capacity or refill a configuration holds, whole tokens (reference §2.1).
const MAX_TOKENS: f64 = 1e15;
/// Largest amount a bucket item may hold and be read, millitokens: twice the largest
/// capacity, the range `dynalimit_core::bounds` documents for `tk`, `cp`, `ra` and `tu`.
const MAX_STORED_MILLI: f64 = 2e18;
/// Longest refill period, seconds.
const MAX_PERIOD_S: f64 = 1e9;

/// What a span may admit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// At most this many acquires of one token.
    Bounded(u64),
    /// No bound: why.
    Unbounded(&'static str),
}

impl Allowance {
    /// The more generous of two.
    pub(crate) fn max(self, other: Allowance) -> Allowance {
        match (self, other) {
            (Allowance::Unbounded(why), _) | (_, Allowance::Unbounded(why)) => {
                Allowance::Unbounded(why)
            }
            (Allowance::Bounded(a), Allowance::Bounded(b)) => Allowance::Bounded(a.max(b)),
        }
    }
}

/// What `items` allow acquires of one token of `limit` on the child's bucket for the resource
/// in `span`, in namespace `ns`.
pub(crate) fn allowance(items: &[Item], ns: &str, limit: &str, span: Duration) -> Allowance {
    let span_s = span.as_secs_f64();
    let levels = [
        (
            format!("{ns}/ENTITY#{CHILD}"),
            format!("#CONFIG#{RESOURCE}"),
        ),
        (
            format!("{ns}/ENTITY#{CHILD}"),
            "#CONFIG#_default_".to_owned(),
        ),
        (format!("{ns}/RESOURCE#{RESOURCE}"), "#CONFIG".to_owned()),
        (format!("{ns}/SYSTEM#"), "#CONFIG".to_owned()),
    ];
    let bucket_prefix = format!("{ns}/BUCKET#{CHILD}#{RESOURCE}#");
    let mut configured = 0.0f64;
    let mut held = 0.0f64;
    for item in items {
        let (Some(pk), Some(sk)) = (text(item, "PK"), text(item, "SK")) else {
            continue;
        };
        if levels.iter().any(|(p, s)| p == pk && s == sk) {
            match configured_allowance(item, limit, span_s) {
                Ok(n) => configured = configured.max(n),
                Err(why) => return Allowance::Unbounded(why),
            }
        } else if pk.starts_with(&bucket_prefix) {
            held += bucket_allowance(item, limit, span_s);
        }
    }
    let total = (configured + held).floor();
    Allowance::Bounded(if total.is_finite() && total < 1e18 {
        total as u64
    } else {
        u64::MAX
    })
}

/// A configuration level's allowance for `limit` in `span_s` seconds: its capacity and what
/// it refills (the shards of a bucket split both); `Err` when the level defines the limit in
/// a way that does not bound admissions.
fn configured_allowance(item: &Item, limit: &str, span_s: f64) -> Result<f64, &'static str> {
    if matches!(item.get("disabled"), Some(AttributeValue::S(s)) if s.trim().eq_ignore_ascii_case("bypass"))
    {
        return Err("the configuration says bypass");
    }
    if item.keys().any(|k| k.starts_with(&format!("w_{limit}_"))) {
        return Err("the configuration holds a session quota of that name");
    }
    if item.contains_key(&format!("l_{limit}_soft")) {
        return Err("the configuration marks the limit soft");
    }
    let field = |f: &str| number(item.get(&format!("l_{limit}_{f}")));
    let (Some(cp), ra, rp) = (field("cp"), field("ra"), field("rp")) else {
        return Ok(0.0);
    };
    if !(cp > 0.0 && cp <= MAX_TOKENS) {
        return Ok(0.0);
    }
    let refill = match (ra, rp) {
        (Some(ra), Some(rp)) if ra > 0.0 && ra <= MAX_TOKENS && rp > 0.0 && rp <= MAX_PERIOD_S => {
            (ra * span_s / rp).floor()
        }
        (Some(ra), _) if ra == 0.0 && item.contains_key(&format!("l_{limit}_rsched")) => {
            return Err("the configuration holds a quota that resets");
        }
        _ => 0.0,
    };
    Ok(cp.floor() + refill)
}

/// A bucket item's own allowance for `limit` (millitokens and milliseconds on the item): the
/// shard's ceiling (`cp // shard_count`, plus top-ups) and what it refills (`ra //
/// shard_count` per `rp`), with amounts up to [`MAX_STORED_MILLI`]. A shard count out of
/// 1..=32 is read as 1, the most generous.
fn bucket_allowance(item: &Item, limit: &str, span_s: f64) -> f64 {
    let field = |f: &str| number(item.get(&format!("b_{limit}_{f}")));
    let (Some(_), Some(cp)) = (field("tk"), field("cp")) else {
        return 0.0;
    };
    if !(cp > 0.0 && cp <= MAX_STORED_MILLI) {
        return 0.0;
    }
    let shards = number(item.get("shard_count"))
        .filter(|s| (1.0..=32.0).contains(s) && s.fract() == 0.0)
        .unwrap_or(1.0);
    let refill = match (field("ra"), field("rp")) {
        (Some(ra), Some(rp))
            if ra > 0.0 && ra <= MAX_STORED_MILLI && rp > 0.0 && rp <= MAX_PERIOD_S * 1000.0 =>
        {
            ((ra / shards).floor() * span_s * 1000.0 / rp).floor()
        }
        _ => 0.0,
    };
    let topped_up = field("tu")
        .filter(|tu| *tu > 0.0 && *tu <= MAX_STORED_MILLI)
        .unwrap_or(0.0);
    ((cp / shards).floor() + refill + topped_up) / 1000.0
}

/// A stored number, read generously: any decimal DynamoDB holds.
fn number(value: Option<&AttributeValue>) -> Option<f64> {
    match value {
        Some(AttributeValue::N(n)) => n.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_configuration_bounds_and_a_bypass_does_not() {
        let ns = "n1";
        let mut config: Item = [
            ("PK", AttributeValue::S(format!("{ns}/RESOURCE#{RESOURCE}"))),
            ("SK", AttributeValue::S("#CONFIG".into())),
            ("l_rpm_cp", AttributeValue::N("5".into())),
            ("l_rpm_ra", AttributeValue::N("5".into())),
            ("l_rpm_rp", AttributeValue::N("60".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let minute = Duration::from_secs(60);
        // 5, and 5 more in the minute.
        let items = vec![config.clone()];
        assert_eq!(allowance(&items, ns, "rpm", minute), Allowance::Bounded(10));
        config.insert("disabled".into(), AttributeValue::S("bypass".into()));
        assert!(matches!(
            allowance(&[config], ns, "rpm", minute),
            Allowance::Unbounded(_)
        ));
    }
}
