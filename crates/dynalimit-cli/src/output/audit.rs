//! The output of `audit`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// One audit event: `audit` prints an array of them, newest first (one page; the next
/// page's `--after` goes to standard error).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Event {
    /// The event's id (a ULID, time-ordered): what `--after` takes.
    pub(crate) event_id: String,
    /// When it happened, `YYYY-MM-DDTHH:MM:SSZ` (UTC).
    pub(crate) timestamp: String,
    /// What happened: `entity_created`, `limits_set`, `bucket_reset`, … (other writers of the
    /// table may add more).
    pub(crate) action: String,
    /// Whose log it is in: the entity, `$RESOURCE:{resource}` or `$SYSTEM`.
    pub(crate) entity: String,
    /// The resource concerned; null for none.
    pub(crate) resource: Option<String>,
    /// Who made the change (`dynalimit-cli` for this command); null when unknown.
    pub(crate) principal: Option<String>,
    /// The action's details as stored: strings, numbers, booleans, lists and maps.
    pub(crate) details: BTreeMap<String, Value>,
}
