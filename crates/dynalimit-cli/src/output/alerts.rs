//! The output of `alerts`.

use serde::Serialize;

/// The thresholds of one quota: `alerts set` prints the stored ones, `alerts list` an array.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Threshold {
    /// The entity.
    pub(crate) entity: String,
    /// The resource.
    pub(crate) resource: String,
    /// The quota's limit name.
    pub(crate) limit: String,
    /// Percentages of the period's grant, ascending.
    pub(crate) percent: Vec<u8>,
}

/// What `alerts clear` removed.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Cleared {
    /// The entity.
    pub(crate) entity: String,
    /// The resource.
    pub(crate) resource: String,
    /// The limit whose thresholds were cleared; absent: every limit's.
    pub(crate) limit: Option<String>,
    /// Whether there were any.
    pub(crate) cleared: bool,
}
