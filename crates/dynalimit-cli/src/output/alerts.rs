//! The output of `alerts`.

use serde::Serialize;

/// The alerts of one limit: `alerts set` prints what it stored, `alerts list` an array.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Threshold {
    /// The entity.
    pub(crate) entity: String,
    /// The resource.
    pub(crate) resource: String,
    /// The limit's name.
    pub(crate) limit: String,
    /// Percentages of a quota's period grant, ascending (empty: none).
    pub(crate) percent: Vec<u8>,
    /// Minutes in a row the limit must refuse acquires before an alert; absent: no refusal
    /// alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) refusing_for_minutes: Option<u8>,
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
