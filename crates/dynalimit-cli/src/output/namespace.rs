//! The output of `namespace register|list|get|delete|recover|orphans|purge`.

use dynalimit_repository::NamespaceInfo;
use serde::Serialize;

/// A namespace: `namespace get` and `namespace recover` print one; `namespace list` (the
/// registered ones) and `namespace orphans` (soft-deleted ones whose data is not purged yet)
/// print an array of them.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Namespace {
    /// The name users choose (what `-N` takes).
    pub(crate) name: String,
    /// The opaque id that prefixes the namespace's keys (what `recover` and `purge` take).
    pub(crate) id: String,
    /// `active`, `deleted` (soft-deleted: its data stays until purged) or `purging`.
    pub(crate) status: String,
    /// When it was registered, `YYYY-MM-DDTHH:MM:SSZ` (UTC).
    pub(crate) created_at: String,
    /// When it was soft-deleted, `YYYY-MM-DDTHH:MM:SSZ` (UTC); null when it was not.
    pub(crate) deleted_at: Option<String>,
}

impl From<&NamespaceInfo> for Namespace {
    fn from(n: &NamespaceInfo) -> Namespace {
        Namespace {
            name: n.name.clone(),
            id: n.id.clone(),
            status: n.status.clone(),
            created_at: n.created_at.clone(),
            deleted_at: n.deleted_at.clone(),
        }
    }
}

/// One namespace of `namespace register`, which prints an array of them in the order the
/// names were given (registering is idempotent: a registered name keeps its id).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Registered {
    /// The name given.
    pub(crate) name: String,
    /// Its id.
    pub(crate) id: String,
}

/// `namespace delete`: the namespace soft-deleted.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct NamespaceDeleted {
    /// The name given.
    pub(crate) name: String,
    /// Its id (what `namespace recover` and `namespace purge` take).
    pub(crate) id: String,
    /// Always `deleted`.
    pub(crate) status: String,
}

/// What was deleted for good: `namespace purge` (every item of a soft-deleted namespace) and
/// `entity delete` (an entity with its limits and buckets).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ItemsDeleted {
    /// The namespace id (`namespace purge`) or the entity id (`entity delete`).
    pub(crate) id: String,
    /// Table items deleted.
    pub(crate) items_deleted: usize,
}
