//! The output of `resource disable|enable|bypass|clear-disabled|set-cascade` and `entity
//! disable|enable|bypass|clear-disabled|set-cascade`, and the `disabled` value they share with
//! `limits get`.

use dynalimit_repository::DisabledFlag;
use serde::{Serialize, Serializer};

/// A level's `disabled` value, printed as the table stores it: `true` (every acquire
/// refused), `false` (limits enforced explicitly) or `"bypass"` (every acquire admitted and
/// counted, no balance debited). A level without one prints null: it inherits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Disabled(pub(crate) DisabledFlag);

impl Serialize for Disabled {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            DisabledFlag::Disabled => serializer.serialize_bool(true),
            DisabledFlag::Enabled => serializer.serialize_bool(false),
            DisabledFlag::Bypass => serializer.serialize_str(DisabledFlag::Bypass.name()),
        }
    }
}

#[cfg(test)]
impl schemars::JsonSchema for Disabled {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Disabled".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A level's `disabled` value, as the table stores it.",
            "oneOf": [
                { "const": true, "description": "Disabled: every acquire refused." },
                { "const": false, "description": "Enabled: limits enforced." },
                {
                    "const": DisabledFlag::Bypass.name(),
                    "description": "Bypass: every acquire admitted and counted, no balance debited."
                }
            ]
        })
    }
}

/// `resource disable|enable|bypass|clear-disabled`: the resource level's new `disabled`
/// value for every entity without a value of its own.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ResourceAccess {
    /// The resource.
    pub(crate) resource: String,
    /// The value set; null after `clear-disabled` (inherit).
    pub(crate) disabled: Option<Disabled>,
    /// Existing buckets stamped with the access the change decides.
    pub(crate) buckets_stamped: usize,
}

/// `entity disable|enable|bypass|clear-disabled`: an entity's new `disabled` value.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct EntityAccess {
    /// The entity.
    pub(crate) id: String,
    /// The resource it applies to; null for every resource (the entity's `_default_` level).
    pub(crate) resource: Option<String>,
    /// The value set; null after `clear-disabled` (inherit).
    pub(crate) disabled: Option<Disabled>,
    /// Existing buckets stamped with the access the change decides.
    pub(crate) buckets_stamped: usize,
}

/// `resource set-cascade`: whether acquires on a resource also debit the acquiring entity's
/// parent, for every entity without a policy of its own.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ResourceCascade {
    /// The resource.
    pub(crate) resource: String,
    /// `true` (on), `false` (off), or null (`inherit`: the policy cleared).
    pub(crate) cascade: Option<bool>,
    /// Existing buckets stamped with the cascade the change decides.
    pub(crate) buckets_stamped: usize,
}

/// `entity set-cascade`: whether an entity's acquires also debit its parent.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct EntityCascade {
    /// The entity.
    pub(crate) id: String,
    /// The resource it applies to; null for every resource without a policy of its own.
    pub(crate) resource: Option<String>,
    /// `true` (on), `false` (off), or null (`inherit`: the policy cleared).
    pub(crate) cascade: Option<bool>,
    /// Existing buckets stamped with the cascade the change decides.
    pub(crate) buckets_stamped: usize,
}
