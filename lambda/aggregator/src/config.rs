//! Settings of the aggregator, from the Lambda environment or the command line.

use crate::error::AggregatorError;
use crate::window::Window;

/// Default snapshot retention in days.
pub const DEFAULT_SNAPSHOT_TTL_DAYS: i64 = 90;

/// What the aggregator does and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The table (stack) name.
    pub table_name: String,
    /// Snapshot windows to maintain (default hourly and daily).
    pub windows: Vec<Window>,
    /// Snapshot retention: a snapshot's `ttl` is its creation time plus this many days.
    pub snapshot_ttl_days: i64,
    /// Top up active buckets under the `rf` lock (reference §7.3).
    pub proactive_refill: bool,
    /// Double the shard count of hot buckets whose `wcu` runs low, and propagate counts raised
    /// by clients to the older shards (reference §7.3).
    pub proactive_sharding: bool,
}

impl Settings {
    /// Defaults for `table_name`: hourly and daily snapshots kept 90 days, refill and
    /// sharding on.
    pub fn new(table_name: impl Into<String>) -> Self {
        Settings {
            table_name: table_name.into(),
            windows: vec![Window::Hourly, Window::Daily],
            snapshot_ttl_days: DEFAULT_SNAPSHOT_TTL_DAYS,
            proactive_refill: true,
            proactive_sharding: true,
        }
    }

    /// Reads the settings from the process environment: `TABLE_NAME` (required),
    /// `SNAPSHOT_WINDOWS` (`hourly,daily`), `SNAPSHOT_TTL_DAYS` (90), `PROACTIVE_REFILL` and
    /// `PROACTIVE_SHARDING` (`true`/`false`, default `true`).
    ///
    /// # Errors
    /// [`AggregatorError::Config`] naming the variable that is missing or malformed.
    pub fn from_env() -> Result<Self, AggregatorError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Settings::from_env`], reading variables through `get`.
    ///
    /// # Errors
    /// [`AggregatorError::Config`] naming the variable that is missing or malformed.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, AggregatorError> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let table = get("TABLE_NAME").ok_or_else(|| AggregatorError::Config {
            message: "TABLE_NAME is not set".into(),
        })?;
        let mut settings = Settings::new(table.trim());
        if let Some(w) = get("SNAPSHOT_WINDOWS") {
            settings.windows = Window::parse_list(&w).map_err(|e| AggregatorError::Config {
                message: format!("SNAPSHOT_WINDOWS: {e}"),
            })?;
        }
        if let Some(d) = get("SNAPSHOT_TTL_DAYS") {
            settings.snapshot_ttl_days = d
                .trim()
                .parse()
                .ok()
                .filter(|d: &i64| *d > 0)
                .ok_or_else(|| AggregatorError::Config {
                    message: format!("SNAPSHOT_TTL_DAYS must be a positive integer, got {d:?}"),
                })?;
        }
        for (var, slot) in [
            ("PROACTIVE_REFILL", &mut settings.proactive_refill),
            ("PROACTIVE_SHARDING", &mut settings.proactive_sharding),
        ] {
            if let Some(v) = get(var) {
                *slot = parse_switch(&v).ok_or_else(|| AggregatorError::Config {
                    message: format!("{var} must be true or false, got {v:?}"),
                })?;
            }
        }
        Ok(settings)
    }

    /// The `ttl` (epoch seconds) of a snapshot created at `now_ms`.
    pub fn snapshot_ttl(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(1000) + self.snapshot_ttl_days.saturating_mul(86_400)
    }
}

fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_and_overrides_from_the_environment() {
        let s = Settings::from_lookup(env(&[("TABLE_NAME", "stack")])).unwrap();
        assert_eq!(s, Settings::new("stack"));
        let s = Settings::from_lookup(env(&[
            ("TABLE_NAME", "stack"),
            ("SNAPSHOT_WINDOWS", "daily,monthly"),
            ("SNAPSHOT_TTL_DAYS", "7"),
            ("PROACTIVE_REFILL", "off"),
            ("PROACTIVE_SHARDING", "false"),
        ]))
        .unwrap();
        assert_eq!(s.windows, vec![Window::Daily, Window::Monthly]);
        assert_eq!(s.snapshot_ttl(86_400_000), 86_400 + 7 * 86_400);
        assert!(!s.proactive_refill && !s.proactive_sharding);
    }

    #[test]
    fn bad_settings_are_named() {
        for (pairs, needle) in [
            (vec![], "TABLE_NAME"),
            (
                vec![("TABLE_NAME", "t"), ("SNAPSHOT_WINDOWS", "weekly")],
                "SNAPSHOT_WINDOWS",
            ),
            (
                vec![("TABLE_NAME", "t"), ("SNAPSHOT_TTL_DAYS", "0")],
                "SNAPSHOT_TTL_DAYS",
            ),
            (
                vec![("TABLE_NAME", "t"), ("PROACTIVE_REFILL", "maybe")],
                "PROACTIVE_REFILL",
            ),
        ] {
            let err = Settings::from_lookup(env(&pairs)).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}
