//! The output of `concurrency`.

use dynalimit_core::Concurrency;
use serde::Serialize;

/// The concurrency limits stored at one level, after `set`, `get` or `clear`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ConcurrencyLevel {
    /// The level: `entity E on R`, `resource R` or `system`.
    pub(crate) level: String,
    /// Each limit as `name=max/hold`, the hold in the largest whole unit (`ms`, `s`, `m`,
    /// `h`), as `concurrency set` takes it.
    pub(crate) limits: Vec<String>,
}

impl ConcurrencyLevel {
    pub(crate) fn new(level: String, limits: &[Concurrency]) -> Self {
        ConcurrencyLevel {
            level,
            limits: limits
                .iter()
                .map(dynalimit_manifest::spec::format_concurrency)
                .collect(),
        }
    }
}
