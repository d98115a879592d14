//! The output of `limits set|get|delete|list`.

use dynalimit_format::config::{ConfigLevel, OnUnavailable};
use serde::Serialize;

use super::access::Disabled;

/// The configuration stored at one level: `limits set` prints what it stored (read back),
/// `limits get` what is there. `limits set --file` takes this JSON back as the whole level
/// (`level` must then be the level it sets).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LevelConfig {
    /// The level: `system`, `resource R`, or `entity E on R` (`_default_` for the entity's
    /// limits on every resource).
    pub(crate) level: String,
    /// The limits in the command line's syntax (`NAME=RATE/PERIOD[:burst=N][:soft]`, quotas
    /// and schedules in theirs), sorted by name.
    pub(crate) limits: Vec<String>,
    /// The level's `disabled` value; null when it has none (inherit).
    pub(crate) disabled: Option<Disabled>,
    /// The level's cascade policy: `true`, `false`, or null when it has none.
    pub(crate) cascade: Option<bool>,
    /// System level only: what acquires do when DynamoDB is unavailable; null when unset.
    pub(crate) on_unavailable: Option<Unavailable>,
}

/// `limits get --entity E --resource R --resolved`: the limits that apply to an entity, found
/// as an acquire finds them.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Resolved {
    /// The entity.
    pub(crate) entity: String,
    /// The resource (`_default_` without `--resource`).
    pub(crate) resource: String,
    /// The level the limits come from; null when no level has any.
    pub(crate) source: Option<Source>,
    /// The limits in the command line's syntax; empty when no level has any.
    pub(crate) limits: Vec<String>,
    /// The system level's `on_unavailable`; null when unset.
    pub(crate) on_unavailable: Option<Unavailable>,
}

/// The configuration level limits were resolved from.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    /// The entity's own limits on the resource.
    Entity,
    /// The entity's limits on every resource (`_default_`).
    EntityDefault,
    /// The resource's defaults.
    Resource,
    /// The namespace-wide defaults.
    System,
}

impl From<ConfigLevel> for Source {
    fn from(level: ConfigLevel) -> Source {
        match level {
            ConfigLevel::Entity => Source::Entity,
            ConfigLevel::EntityDefault => Source::EntityDefault,
            ConfigLevel::Resource => Source::Resource,
            ConfigLevel::System => Source::System,
        }
    }
}

/// What acquires do when DynamoDB is unavailable.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum Unavailable {
    /// Admit them.
    Allow,
    /// Refuse them.
    Block,
}

impl From<OnUnavailable> for Unavailable {
    fn from(o: OnUnavailable) -> Unavailable {
        match o {
            OnUnavailable::Allow => Unavailable::Allow,
            OnUnavailable::Block => Unavailable::Block,
        }
    }
}

/// `limits delete`: the level whose limits were deleted.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LevelDeleted {
    /// The level, as `limits get` names it.
    pub(crate) level: String,
    /// Always `true` (a level without limits is an error).
    pub(crate) deleted: bool,
}

/// One row of `limits list` (an array): a level where limits are configured.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Configured {
    /// `system`, `resource` (a resource's defaults) or `entity` (some entity's own limits on
    /// the resource).
    pub(crate) level: LevelKind,
    /// The resource; null for `system`.
    pub(crate) resource: Option<String>,
}

/// The kind of a configured level.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum LevelKind {
    /// The namespace-wide defaults.
    System,
    /// A resource's defaults.
    Resource,
    /// Entities' own limits on a resource.
    Entity,
}

/// One row of `limits list --resource R` (an array, one page; the next page's cursor goes to
/// standard error): an entity with limits of its own on the resource.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct CustomLimits {
    /// The entity.
    pub(crate) entity: String,
    /// The resource given.
    pub(crate) resource: String,
}
