//! The change set as reported: by `limits plan|diff|apply --file F` and by the provisioner.

use serde::{Deserialize, Serialize};

/// `limits plan`, `limits diff` and `limits apply`: what differs between the manifest and
/// the table (for `apply`, what it changed), level by level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ManifestReport {
    /// The namespace the levels belong to.
    pub namespace: String,
    /// Whether `--full` was given: levels the manifest does not name are removed.
    pub full: bool,
    /// `apply` only: true once the changes are written; false for `plan` and `diff`, and
    /// when there was nothing to change.
    pub applied: bool,
    /// The levels that differ, in the order `apply` writes them.
    pub changes: Vec<LevelChange>,
    /// Declared levels (and entity parents) that already match the table.
    pub unchanged: usize,
}

/// One level (or an entity's parent) that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LevelChange {
    /// Whether the level is created, changed or removed.
    pub action: Action,
    /// The level: `system`, `resource R`, `entity E on R`, or `entity E` for a parent.
    pub level: String,
    /// The attributes that differ, limits first (by name), then `disabled`, `cascade`,
    /// `on_unavailable`; `parent` for an entity.
    pub attributes: Vec<AttributeChange>,
}

/// What happens to a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The table has no item for it (for a parent: the entity is created).
    Create,
    /// The table's item differs.
    Update,
    /// The item is removed (a level declared empty, or with `--full` one the manifest does
    /// not name).
    Delete,
}

/// One attribute of a level that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AttributeChange {
    /// `limit NAME`, `disabled`, `cascade`, `on_unavailable` or `parent`.
    pub attribute: String,
    /// What the table holds (a limit in the command line's syntax); null when absent.
    pub before: Option<String>,
    /// What the manifest declares; null when absent.
    pub after: Option<String>,
}
