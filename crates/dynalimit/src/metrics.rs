//! The metrics dynalimit records, through the [`metrics`](https://docs.rs/metrics) facade:
//! install any recorder (a Prometheus exporter, StatsD, …) and they appear; without one they
//! cost a few nanoseconds each.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `dynalimit_acquires_total` | counter | `outcome` | every `RateLimiter` acquire: `admitted`, `degraded` (admitted without the limiter under `on_unavailable = allow`), `rejected`, `disabled`, `unavailable`, `denied` (AWS refused the credentials), `corrupt` (an item holds a value out of bounds), `invalid` (bad input, unknown limit, no limits, a request DynamoDB refuses as invalid) |
//! | `dynalimit_rejected_limits_total` | counter | `limit`, `reason` | per limit that refused a rejected acquire (`reason`: `limits`, `contended`, `paused`; `limit` is empty for the last two) |
//! | `dynalimit_acquire_seconds` | histogram | `outcome` | the time an acquire took, as seen by its caller |
//! | `dynalimit_lease_writes_total` | counter | `kind`, `outcome` | lease commits and rollbacks (`kind`: `commit`, `rollback`; `outcome`: `ok`, `error`) |
//! | `dynalimit_config_cache_total` | counter | `result` | configuration cache look-ups (`hit`, `miss`) |
//! | `dynalimit_acquire_requests` | histogram | `outcome` | DynamoDB requests one acquire sent (every attempt; 1 for a warm acquire) |
//! | `dynalimit_dynamodb_requests_total` | counter | `operation` | every DynamoDB request a repository sends, on the fast path and through the SDK (`UpdateItem`, `BatchGetItem`, …) |
//! | `dynalimit_contention_retries_total` | counter | `operation` | writes sent again after losing to a transaction on the same item |
//! | `dynalimit_unknown_outcomes_total` | counter | `operation` | writes whose answer was lost and that were not sent again: applied once or not at all |
//! | `dynalimit_foreign_index_items_total` | counter | `index`, `reason` | items a secondary-index query returned that were skipped: `namespace` (the item's base-table key lies in another namespace, whose writer gave it an index key naming this one), `keys` (its index keys are not the ones its base key implies) |
//! | `dynalimit_fast_path` | gauge | | 1 once a repository's bucket writes take the fast path, 0 when they stay on the SDK |
//!
//! Each acquire also runs in a `tracing` span `dynalimit.acquire` (fields `entity_id`,
//! `resource`, `outcome`), commits and rollbacks in `dynalimit.lease` (`kind`), every
//! DynamoDB request on a bucket in `dynalimit.dynamodb` (`operation`, `entity_id`,
//! `resource`, `shard`, `attempts`, `outcome`: `done`, `condition_failed`, `conflict`,
//! `error`) and every configuration resolution in `dynalimit.config` (`entity_id`,
//! `resource`, `source`: the level that answered). All are at `DEBUG`. Every other request
//! (entities, configuration writes, audit, usage, namespaces) goes through the AWS SDK, whose
//! own `DEBUG` span `DynamoDB.{Operation}` (fields `rpc.service`, `rpc.method`) wraps it with
//! its attempts.

#[cfg(feature = "dynamodb")]
use std::time::Duration;

#[cfg(feature = "dynamodb")]
use crate::{Error, Reason};

/// Counter: acquires by `outcome`.
pub const ACQUIRES: &str = "dynalimit_acquires_total";
/// Counter: limits that refused an acquire, by `limit` and `reason`.
pub const REJECTED_LIMITS: &str = "dynalimit_rejected_limits_total";
/// Histogram: acquire latency in seconds, by `outcome`.
pub const ACQUIRE_SECONDS: &str = "dynalimit_acquire_seconds";
/// Counter: lease writes by `kind` and `outcome`.
pub const LEASE_WRITES: &str = "dynalimit_lease_writes_total";
/// Histogram: DynamoDB requests per acquire, by `outcome`.
pub const ACQUIRE_REQUESTS: &str = "dynalimit_acquire_requests";
#[cfg(feature = "dynamodb")]
pub use dynalimit_repository::{
    CONFIG_CACHE, CONTENTION_RETRIES, DYNAMODB_REQUESTS, FAST_PATH, FOREIGN_INDEX_ITEMS,
    UNKNOWN_OUTCOMES,
};

/// The `outcome` label of an acquire's result (`Ok(degraded)` for an admission).
#[cfg(feature = "dynamodb")]
fn outcome(result: Result<bool, &Error>) -> &'static str {
    match result {
        Ok(true) => "degraded",
        Ok(false) => "admitted",
        Err(Error::Rejected(_)) => "rejected",
        Err(Error::ResourceDisabled { .. }) => "disabled",
        Err(Error::PermissionDenied(_)) => "denied",
        Err(Error::Corrupt(_)) => "corrupt",
        Err(
            Error::Invalid(_)
            | Error::InvalidRequest(_)
            | Error::UnknownLimit { .. }
            | Error::NoLimits { .. },
        ) => "invalid",
        Err(_) => "unavailable",
    }
}

/// Records one acquire: its outcome (returned, for the acquire's span), its latency, and the
/// limits of a rejection.
#[cfg(feature = "dynamodb")]
pub(crate) fn record_acquire(result: Result<bool, &Error>, took: Duration) -> &'static str {
    let outcome = outcome(result);
    metrics::counter!(ACQUIRES, "outcome" => outcome).increment(1);
    metrics::histogram!(ACQUIRE_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
    if let Err(Error::Rejected(rejection)) = result {
        let reason = match rejection.reason() {
            Reason::Limits => "limits",
            Reason::Contended => "contended",
            Reason::Paused { .. } => "paused",
            _ => "other",
        };
        let mut any = false;
        for status in rejection.violations() {
            any = true;
            metrics::counter!(
                REJECTED_LIMITS,
                "limit" => status.limit.name().to_owned(),
                "reason" => reason
            )
            .increment(1);
        }
        if !any {
            metrics::counter!(REJECTED_LIMITS, "limit" => "", "reason" => reason).increment(1);
        }
    }
    outcome
}

/// Records the DynamoDB requests one acquire sent.
#[cfg(feature = "dynamodb")]
pub(crate) fn record_requests(outcome: &'static str, requests: u32) {
    metrics::histogram!(ACQUIRE_REQUESTS, "outcome" => outcome).record(f64::from(requests));
}

/// Records one lease write.
#[cfg(feature = "dynamodb")]
pub(crate) fn record_lease_write(kind: &'static str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(LEASE_WRITES, "kind" => kind, "outcome" => outcome).increment(1);
}
