//! The output of `limits plan|diff|apply --file F`.

use serde::Serialize;

/// `limits plan`, `limits diff` and `limits apply`: what differs between the manifest and
/// the table (for `apply`, what it changed), level by level.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ManifestReport {
    /// The namespace the levels belong to.
    pub(crate) namespace: String,
    /// Whether `--full` was given: levels the manifest does not name are removed.
    pub(crate) full: bool,
    /// `apply` only: true once the changes are written; false for `plan` and `diff`, and
    /// when there was nothing to change.
    pub(crate) applied: bool,
    /// The levels that differ, in the order `apply` writes them.
    pub(crate) changes: Vec<LevelChange>,
    /// Declared levels (and entity parents) that already match the table.
    pub(crate) unchanged: usize,
}

/// One level (or an entity's parent) that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LevelChange {
    /// Whether the level is created, changed or removed.
    pub(crate) action: Action,
    /// The level: `system`, `resource R`, `entity E on R`, or `entity E` for a parent.
    pub(crate) level: String,
    /// The attributes that differ, limits first (by name), then `disabled`, `cascade`,
    /// `on_unavailable`; `parent` for an entity.
    pub(crate) attributes: Vec<AttributeChange>,
}

/// What happens to a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    /// The table has no item for it (for a parent: the entity is created).
    Create,
    /// The table's item differs.
    Update,
    /// The item is removed (a level declared empty, or with `--full` one the manifest does
    /// not name).
    Delete,
}

/// One attribute of a level that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct AttributeChange {
    /// `limit NAME`, `disabled`, `cascade`, `on_unavailable` or `parent`.
    pub(crate) attribute: String,
    /// What the table holds (a limit in the command line's syntax); null when absent.
    pub(crate) before: Option<String>,
    /// What the manifest declares; null when absent.
    pub(crate) after: Option<String>,
}

impl ManifestReport {
    /// The text form: one line per level (`+` create, `~` update, `-` delete), one per
    /// attribute under it, and a summary.
    pub(crate) fn text(&self, verb: &str) -> String {
        let mut out = Vec::new();
        for c in &self.changes {
            let sign = match c.action {
                Action::Create => '+',
                Action::Update => '~',
                Action::Delete => '-',
            };
            out.push(format!("{sign} {}", super::escape(&c.level)));
            for a in &c.attributes {
                let side = |v: &Option<String>| {
                    v.as_deref()
                        .map_or_else(|| "(none)".to_owned(), |s| super::escape(s).into_owned())
                };
                out.push(format!(
                    "    {}: {} -> {}",
                    super::escape(&a.attribute),
                    side(&a.before),
                    side(&a.after)
                ));
            }
        }
        let count = |action| self.changes.iter().filter(|c| c.action == action).count();
        let (created, updated, deleted) = (
            count(Action::Create),
            count(Action::Update),
            count(Action::Delete),
        );
        let unchanged = self.unchanged;
        let summary = if self.changes.is_empty() {
            format!("No changes: the table matches the manifest ({unchanged} unchanged).")
        } else if self.applied {
            format!(
                "Applied: {created} created, {updated} updated, {deleted} deleted, \
                 {unchanged} unchanged."
            )
        } else {
            format!(
                "{verb}: {created} to create, {updated} to update, {deleted} to delete, \
                 {unchanged} unchanged."
            )
        };
        if !out.is_empty() {
            out.push(String::new());
        }
        out.push(summary);
        out.join("\n")
    }
}
