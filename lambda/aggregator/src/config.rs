//! Settings of the aggregator, from the Lambda environment or the command line.
//!
//! # The environment contract
//! The Lambda function reads exactly the variables of [`ENVIRONMENT`]; the CloudFormation
//! template (`infra/template.yaml`) sets them on the function, and a test reads both sides.
//! An empty value counts as unset.
//!
//! | Variable | Required | Default |
//! |---|---|---|
//! | `DYNALIMIT_TABLE` | yes | — |
//! | `DYNALIMIT_SNAPSHOT_WINDOWS` | no | `hourly,daily` |
//! | `DYNALIMIT_SNAPSHOT_RETENTION_DAYS` | no | `90` |
//! | `DYNALIMIT_PROACTIVE_REFILL` | no | `true` |
//! | `DYNALIMIT_PROACTIVE_SHARDING` | no | `true` |
//! | `DYNALIMIT_ARCHIVE_BUCKET` | no | empty: expired audit events are not archived |
//! | `DYNALIMIT_TENANT_METRICS` | no | `false` |
//! | `DYNALIMIT_ALERT_EVENT_BUS` | no | empty: quota thresholds are not evaluated |
//!
//! Logging is not part of it: the `bootstrap` binary sets up `tracing` through
//! `lambda_runtime`, which follows Lambda's own `AWS_LAMBDA_LOG_LEVEL` and
//! `AWS_LAMBDA_LOG_FORMAT` (falling back to `RUST_LOG`).

use crate::error::AggregatorError;
use dynalimit_format::usage::SnapshotWindow;

/// The table (stack) name. Required.
pub const ENV_TABLE: &str = "DYNALIMIT_TABLE";
/// Snapshot windows, comma-separated (`hourly`, `daily`, `monthly`).
pub const ENV_SNAPSHOT_WINDOWS: &str = "DYNALIMIT_SNAPSHOT_WINDOWS";
/// Days usage snapshots are kept (their `ttl`), a positive integer.
pub const ENV_SNAPSHOT_RETENTION_DAYS: &str = "DYNALIMIT_SNAPSHOT_RETENTION_DAYS";
/// Proactive refill of active buckets, `true` or `false`.
pub const ENV_PROACTIVE_REFILL: &str = "DYNALIMIT_PROACTIVE_REFILL";
/// Proactive shard doubling and propagation, `true` or `false`.
pub const ENV_PROACTIVE_SHARDING: &str = "DYNALIMIT_PROACTIVE_SHARDING";

/// The S3 bucket expired audit events are archived to (see [`crate::archive`]); empty or
/// unset archives nothing.
pub const ENV_ARCHIVE_BUCKET: &str = "DYNALIMIT_ARCHIVE_BUCKET";

/// Per-tenant usage metrics in the embedded metric format (see [`crate::emf`]), `true` or
/// `false`.
pub const ENV_TENANT_METRICS: &str = "DYNALIMIT_TENANT_METRICS";

/// The EventBridge bus (name or ARN) quota threshold crossings and refusal alerts are
/// published to (see [`crate::alerts`]); empty or unset publishes nothing and reads no threshold.
pub const ENV_ALERT_EVENT_BUS: &str = "DYNALIMIT_ALERT_EVENT_BUS";

/// Default snapshot retention in days.
pub const DEFAULT_SNAPSHOT_TTL_DAYS: i64 = 90;
/// Default snapshot windows, as the environment spells them.
pub const DEFAULT_SNAPSHOT_WINDOWS: &str = "hourly,daily";

/// One variable of the environment contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// Whether the function refuses to start without it.
    pub required: bool,
    /// The value assumed when it is unset or empty (`None` for required variables).
    pub default: Option<&'static str>,
}

/// Every variable the aggregator reads, in the order it reads them.
pub const ENVIRONMENT: &[EnvVar] = &[
    EnvVar {
        name: ENV_TABLE,
        required: true,
        default: None,
    },
    EnvVar {
        name: ENV_SNAPSHOT_WINDOWS,
        required: false,
        default: Some(DEFAULT_SNAPSHOT_WINDOWS),
    },
    EnvVar {
        name: ENV_SNAPSHOT_RETENTION_DAYS,
        required: false,
        default: Some("90"),
    },
    EnvVar {
        name: ENV_PROACTIVE_REFILL,
        required: false,
        default: Some("true"),
    },
    EnvVar {
        name: ENV_PROACTIVE_SHARDING,
        required: false,
        default: Some("true"),
    },
    EnvVar {
        name: ENV_ARCHIVE_BUCKET,
        required: false,
        default: Some(""),
    },
    EnvVar {
        name: ENV_TENANT_METRICS,
        required: false,
        default: Some("false"),
    },
    EnvVar {
        name: ENV_ALERT_EVENT_BUS,
        required: false,
        default: Some(""),
    },
];

/// What the aggregator does and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The table (stack) name.
    pub table_name: String,
    /// Snapshot windows to maintain (default hourly and daily).
    pub windows: Vec<SnapshotWindow>,
    /// Snapshot retention: a snapshot's `ttl` is its creation time plus this many days.
    pub snapshot_ttl_days: i64,
    /// Top up active buckets under the `rf` lock (reference §7.3).
    pub proactive_refill: bool,
    /// Double the shard count of hot buckets whose `wcu` runs low, and propagate counts raised
    /// by clients to the older shards (reference §7.3).
    pub proactive_sharding: bool,
    /// The bucket expired audit events are archived to; `None` archives nothing.
    pub archive_bucket: Option<String>,
    /// Write each batch's usage per tenant as embedded-metric log lines ([`crate::emf`]).
    pub tenant_metrics: bool,
    /// The event bus quota threshold crossings and refusal alerts are published to
    /// ([`crate::alerts`], [`crate::refusing`]); `None` evaluates no threshold.
    pub alert_event_bus: Option<String>,
}

impl Settings {
    /// Defaults for `table_name`: hourly and daily snapshots kept 90 days, refill and
    /// sharding on.
    pub fn new(table_name: impl Into<String>) -> Self {
        Settings {
            table_name: table_name.into(),
            windows: vec![SnapshotWindow::Hourly, SnapshotWindow::Daily],
            snapshot_ttl_days: DEFAULT_SNAPSHOT_TTL_DAYS,
            proactive_refill: true,
            proactive_sharding: true,
            archive_bucket: None,
            tenant_metrics: false,
            alert_event_bus: None,
        }
    }

    /// Reads the settings from the process environment (the variables of [`ENVIRONMENT`]).
    ///
    /// # Errors
    /// [`AggregatorError::Config`] naming the variable that is missing or malformed.
    pub fn from_env() -> Result<Self, AggregatorError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// As [`Settings::from_env`], reading variables through `get`. Unset or empty variables
    /// take their [`EnvVar::default`].
    ///
    /// # Errors
    /// [`AggregatorError::Config`] naming the variable that is missing or malformed.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, AggregatorError> {
        let value = |var: &str| -> Result<String, AggregatorError> {
            let spec = ENVIRONMENT
                .iter()
                .find(|v| v.name == var)
                .expect("a variable of the contract");
            get(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .or_else(|| spec.default.map(str::to_owned))
                .ok_or_else(|| config(format!("{var} is not set")))
        };
        let table = value(ENV_TABLE)?;
        let windows = value(ENV_SNAPSHOT_WINDOWS)?;
        let windows = match SnapshotWindow::parse_list(&windows) {
            Ok(list) if !list.is_empty() => list,
            Ok(_) => return Err(config(format!("{ENV_SNAPSHOT_WINDOWS} lists no window"))),
            Err(e) => return Err(config(format!("{ENV_SNAPSHOT_WINDOWS}: {e}"))),
        };
        let days = value(ENV_SNAPSHOT_RETENTION_DAYS)?;
        let snapshot_ttl_days = days.parse().ok().filter(|d: &i64| *d > 0).ok_or_else(|| {
            config(format!(
                "{ENV_SNAPSHOT_RETENTION_DAYS} must be a positive integer, got {days:?}"
            ))
        })?;
        let switch = |var: &str| -> Result<bool, AggregatorError> {
            let v = value(var)?;
            parse_switch(&v)
                .ok_or_else(|| config(format!("{var} must be true or false, got {v:?}")))
        };
        Ok(Settings {
            table_name: table,
            windows,
            snapshot_ttl_days,
            proactive_refill: switch(ENV_PROACTIVE_REFILL)?,
            proactive_sharding: switch(ENV_PROACTIVE_SHARDING)?,
            archive_bucket: Some(value(ENV_ARCHIVE_BUCKET)?).filter(|b| !b.is_empty()),
            tenant_metrics: switch(ENV_TENANT_METRICS)?,
            alert_event_bus: Some(value(ENV_ALERT_EVENT_BUS)?).filter(|b| !b.is_empty()),
        })
    }

    /// The `ttl` (epoch seconds) of a snapshot created at `now_ms`.
    pub fn snapshot_ttl(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(1000) + self.snapshot_ttl_days.saturating_mul(86_400)
    }
}

fn config(message: String) -> AggregatorError {
    AggregatorError::Config { message }
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
        let s = Settings::from_lookup(env(&[(ENV_TABLE, "stack")])).unwrap();
        assert_eq!(s, Settings::new("stack"));
        // Empty values are unset.
        let s = Settings::from_lookup(env(&[
            (ENV_TABLE, " stack "),
            (ENV_SNAPSHOT_WINDOWS, ""),
            (ENV_SNAPSHOT_RETENTION_DAYS, " "),
        ]))
        .unwrap();
        assert_eq!(s, Settings::new("stack"));
        let s = Settings::from_lookup(env(&[
            (ENV_TABLE, "stack"),
            (ENV_SNAPSHOT_WINDOWS, "daily,monthly"),
            (ENV_SNAPSHOT_RETENTION_DAYS, "7"),
            (ENV_PROACTIVE_REFILL, "off"),
            (ENV_PROACTIVE_SHARDING, "false"),
        ]))
        .unwrap();
        assert_eq!(
            s.windows,
            vec![SnapshotWindow::Daily, SnapshotWindow::Monthly]
        );
        assert_eq!(s.snapshot_ttl(86_400_000), 86_400 + 7 * 86_400);
        assert!(!s.proactive_refill && !s.proactive_sharding);
    }

    #[test]
    fn the_contract_defaults_are_the_defaults_of_settings() {
        // Every default of the table, spelled out, gives `Settings::new`.
        let mut pairs: Vec<(&str, &str)> = ENVIRONMENT
            .iter()
            .filter_map(|v| Some((v.name, v.default?)))
            .collect();
        pairs.push((ENV_TABLE, "t"));
        assert_eq!(
            Settings::from_lookup(env(&pairs)).unwrap(),
            Settings::new("t")
        );
        assert_eq!(
            Settings::new("t").snapshot_ttl_days.to_string(),
            ENVIRONMENT
                .iter()
                .find(|v| v.name == ENV_SNAPSHOT_RETENTION_DAYS)
                .and_then(|v| v.default)
                .unwrap()
        );
        for v in ENVIRONMENT {
            assert_eq!(v.required, v.default.is_none(), "{}", v.name);
            assert!(v.name.starts_with("DYNALIMIT_"), "{}", v.name);
        }
    }

    #[test]
    fn bad_settings_are_named() {
        for (pairs, needle) in [
            (vec![], ENV_TABLE),
            (
                vec![(ENV_TABLE, "t"), (ENV_SNAPSHOT_WINDOWS, "weekly")],
                ENV_SNAPSHOT_WINDOWS,
            ),
            (
                vec![(ENV_TABLE, "t"), (ENV_SNAPSHOT_WINDOWS, ",,")],
                ENV_SNAPSHOT_WINDOWS,
            ),
            (
                vec![(ENV_TABLE, "t"), (ENV_SNAPSHOT_RETENTION_DAYS, "0")],
                ENV_SNAPSHOT_RETENTION_DAYS,
            ),
            (
                vec![(ENV_TABLE, "t"), (ENV_PROACTIVE_REFILL, "maybe")],
                ENV_PROACTIVE_REFILL,
            ),
        ] {
            let err = Settings::from_lookup(env(&pairs)).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}
