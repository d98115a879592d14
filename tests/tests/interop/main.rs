//! The shared-table suite: zae-limiter 0.17 (Python) and dynalimit on one DynamoDB table.
//!
//! Every test creates a fresh table through the test kit, opens it with dynalimit (which
//! creates the version record and registers namespaces), then drives the Python library with
//! `tests/python/zae_driver.py`, which connects with `Repository.connect()` (no CloudFormation,
//! no Lambda, nothing written outside the operations asked for). The driver processes are kept
//! warm between runs (one request a line): importing zae-limiter takes most of a short run's
//! time. Each test checks one direction of one kind of data, field by field.
//!
//! The Python side needs an interpreter with `zae-limiter==0.17.0`, named by
//! `DYNALIMIT_PYTHON`. `./scripts/test` creates it (`./scripts/python-env`, into
//! `.cache/venv-zae`) and exports the variable. When `DYNALIMIT_PYTHON` is unset:
//! * with `CI` set, every test fails with a message saying how to set it up;
//! * otherwise every test prints a skip reason and returns.
//!
//! ```sh
//! DYNALIMIT_PYTHON="$(./scripts/python-env | tail -1)" cargo test -p dynalimit-tests --test interop
//! ```

mod python;

mod access;
mod alerts;
mod buckets;
mod concurrency;
mod config;
mod entities;
mod fixture;
mod moves;
mod namespaces;
mod operations;
mod quotas;
mod schedules;
mod sessions;
mod snapshots;
mod soft;
mod splits;
mod timed;
mod walkthrough;

use dynalimit_core::Limit;
use serde_json::{Value, json};

/// A limit as the driver speaks it.
pub(crate) fn limit_json(limit: &Limit) -> Value {
    json!({
        "name": limit.name(),
        "capacity": limit.capacity(),
        "refill_amount": limit.refill_amount(),
        "refill_period_seconds": limit.refill_period_seconds(),
    })
}

/// Limits as the driver speaks them, sorted by name (the driver sorts what it returns).
pub(crate) fn limits_json(limits: &[Limit]) -> Value {
    let mut out: Vec<Value> = limits.iter().map(limit_json).collect();
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Value::Array(out)
}

/// A limit from the driver's form.
pub(crate) fn limit_from_json(value: &Value) -> Limit {
    let field = |name: &str| {
        value[name]
            .as_i64()
            .unwrap_or_else(|| panic!("limit field {name} missing in {value}"))
    };
    Limit::custom(
        value["name"].as_str().expect("limit name"),
        field("capacity"),
        field("refill_amount"),
        field("refill_period_seconds"),
    )
}
