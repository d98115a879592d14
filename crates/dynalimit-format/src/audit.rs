//! Audit events (reference §1.4.9): `{ns}/AUDIT#{entity}` / `#AUDIT#{event_id}`, newest
//! first by their ULID.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;

use crate::FormatError;
use crate::attr;
use crate::item::{self, Item};
use crate::keys;

/// Default retention of audit events, in days.
pub const DEFAULT_RETENTION_DAYS: i64 = 90;
/// The audit entity id of system-level configuration changes.
pub const SYSTEM_AUDIT_ID: &str = "$SYSTEM";
/// The prefix of the audit entity ids of resource-level configuration changes.
const RESOURCE_AUDIT_PREFIX: &str = "$RESOURCE:";

/// The audit entity id of resource-level configuration changes: `$RESOURCE:{resource}`.
pub fn resource_audit_id(resource: &str) -> String {
    format!("{RESOURCE_AUDIT_PREFIX}{resource}")
}

/// Whether `id` is the audit id of a configuration level (`$SYSTEM`, `$RESOURCE:{r}`), which
/// no entity id can be.
pub fn is_config_level_id(id: &str) -> bool {
    id == SYSTEM_AUDIT_ID || id.starts_with(RESOURCE_AUDIT_PREFIX)
}

/// What an audit event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditAction {
    /// An entity was created.
    EntityCreated,
    /// An entity and its items were deleted.
    EntityDeleted,
    /// Limits were set at some level.
    LimitsSet,
    /// Limits were deleted at some level.
    LimitsDeleted,
    /// An operator reset a bucket to its ceiling.
    BucketReset,
    /// An operator added tokens to a bucket.
    BucketToppedUp,
    /// An entity moved to another parent (or to none).
    EntityParentChanged,
}

impl AuditAction {
    /// The stored action name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::EntityCreated => "entity_created",
            AuditAction::EntityDeleted => "entity_deleted",
            AuditAction::LimitsSet => "limits_set",
            AuditAction::LimitsDeleted => "limits_deleted",
            AuditAction::BucketReset => "bucket_reset",
            AuditAction::BucketToppedUp => "bucket_topped_up",
            AuditAction::EntityParentChanged => "entity_parent_changed",
        }
    }
}

/// One audit event as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// ULID, time-ordered.
    pub event_id: String,
    /// The entity (or `$SYSTEM`, `$RESOURCE:{r}`).
    pub entity_id: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub timestamp: String,
    /// The action name (`entity_created`, `limits_set`, …; other writers may add more).
    pub action: String,
    /// Who made the change, when known.
    pub principal: Option<String>,
    /// The resource concerned, when any.
    pub resource: Option<String>,
    /// Action-specific details.
    pub details: HashMap<String, AttributeValue>,
}

impl AuditEvent {
    /// Decodes an audit item.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`] when its id, entity or action is missing.
    pub fn from_item(found: &Item) -> Result<AuditEvent, FormatError> {
        Ok(AuditEvent {
            event_id: item::require_s(found, attr::EVENT_ID)?,
            entity_id: item::require_s(found, attr::ENTITY_ID)?,
            timestamp: item::get_s(found, attr::TIMESTAMP)
                .unwrap_or("")
                .to_string(),
            action: item::require_s(found, attr::ACTION)?,
            principal: item::get_s(found, attr::PRINCIPAL).map(str::to_string),
            resource: item::get_s(found, attr::RESOURCE).map(str::to_string),
            details: match found.get(attr::DETAILS) {
                Some(AttributeValue::M(m)) => m.clone(),
                _ => HashMap::new(),
            },
        })
    }
}

/// What one audit item records, before it is written.
#[derive(Debug, Clone)]
pub struct NewAuditEvent<'a> {
    /// The entity id or config-level id.
    pub entity_id: &'a str,
    /// The event id (a ULID).
    pub event_id: &'a str,
    /// When, epoch ms.
    pub at: i64,
    /// What happened.
    pub action: AuditAction,
    /// Who did it, when known.
    pub principal: Option<&'a str>,
    /// The resource concerned, when any.
    pub resource: Option<&'a str>,
    /// Action-specific details.
    pub details: HashMap<String, AttributeValue>,
    /// Days the event is kept.
    pub retention_days: i64,
}

impl NewAuditEvent<'_> {
    /// The audit item.
    pub fn into_item(self, ns: &str) -> Item {
        let mut it = item::key(
            keys::audit_pk(ns, self.entity_id),
            keys::audit_sk(self.event_id),
        );
        for (attr, value) in [
            (attr::ENTITY_ID, item::s(self.entity_id)),
            (attr::EVENT_ID, item::s(self.event_id)),
            (
                attr::TIMESTAMP,
                item::s(dynalimit_core::time::iso_seconds(self.at)),
            ),
            (attr::ACTION, item::s(self.action.as_str())),
            (attr::PRINCIPAL, item::s_or_null(self.principal)),
            (attr::RESOURCE, item::s_or_null(self.resource)),
            (attr::DETAILS, AttributeValue::M(self.details)),
            (
                attr::TTL,
                item::n(
                    self.at
                        .div_euclid(1000)
                        .saturating_add(self.retention_days.saturating_mul(86_400)),
                ),
            ),
            (attr::GSI4PK, item::s(ns)),
            (attr::GSI4SK, item::s(keys::audit_pk(ns, self.entity_id))),
        ] {
            it.insert(attr.to_owned(), value);
        }
        it
    }
}

/// The event id of an audit item's key (the cursor of the next page).
pub fn event_id_of_key(key: &Item) -> Option<&str> {
    item::get_s(key, attr::SK).and_then(|sk| sk.strip_prefix(keys::AUDIT_SK_PREFIX))
}

/// The details key of a configuration change: the limits set.
pub const LIMITS_DETAIL: &str = "limits";
/// The details key of a system configuration change: `on_unavailable`.
pub const ON_UNAVAILABLE_DETAIL: &str = "on_unavailable";
/// Detail of a `limits_set` event that changed a level's `disabled` flag: the value written
/// (`true`, `false`, `"bypass"`, or NULL for a clear).
pub const DISABLED_DETAIL: &str = "disabled";
/// Detail of a `limits_set` event that changed a flag: how many buckets were stamped.
pub const BUCKETS_STAMPED_DETAIL: &str = "buckets_stamped";
/// Detail key of a cascade-policy change: the policy (`true`, `false`, or null for a clear).
pub const CASCADE_DETAIL: &str = "cascade";
/// Detail key of a parent move: the parent before it (or null).
pub const OLD_PARENT_DETAIL: &str = "old_parent_id";
/// Detail key of a parent move: the parent after it (or null).
pub const PARENT_DETAIL: &str = "parent_id";
/// Detail key of a parent move: the entity's parent generation after it.
pub const PGEN_DETAIL: &str = "pgen";
/// The details key of a deletion: how many items were deleted.
pub const RECORDS_DELETED_DETAIL: &str = "records_deleted";
/// The details key of a deletion: whether it finished.
pub const COMPLETE_DETAIL: &str = "complete";

/// The details key of a reset or top-up: whole tokens per limit (M of N).
pub(crate) const AMOUNTS_DETAIL: &str = "amounts";
/// The details key of a reset or top-up: the shards written.
pub(crate) const SHARDS_DETAIL: &str = "shards";

/// The details of a reset or top-up: `{amounts: {name: tokens}, shards}`.
pub fn operation_details(
    amounts: &std::collections::BTreeMap<String, i64>,
    shards: u32,
) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            AMOUNTS_DETAIL.to_string(),
            crate::operation::amounts_value(amounts),
        ),
        (SHARDS_DETAIL.to_string(), item::n(shards)),
    ])
}

/// The limit dict of audit details: `{name, capacity, refill_amount, refill_period_seconds}`.
pub(crate) fn limit_details(limit: &Limit) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        ("name".to_string(), item::s(limit.name())),
        ("capacity".to_string(), item::n(limit.capacity())),
        ("refill_amount".to_string(), item::n(limit.refill_amount())),
        (
            "refill_period_seconds".to_string(),
            item::n(limit.refill_period_seconds()),
        ),
    ]))
}

/// A list attribute of limit dicts.
pub fn limits_details(limits: &[Limit]) -> AttributeValue {
    AttributeValue::L(limits.iter().map(limit_details).collect())
}

/// The details key of a change of a level's concurrency limits: the limits written.
pub const CONCURRENCY_DETAIL: &str = "concurrency";

/// A list attribute of concurrency limit dicts: `{name, max, hold_ms}`.
pub fn concurrency_details(limits: &[dynalimit_core::Concurrency]) -> AttributeValue {
    AttributeValue::L(
        limits
            .iter()
            .map(|l| {
                AttributeValue::M(HashMap::from([
                    ("name".to_string(), item::s(l.name())),
                    ("max".to_string(), item::n(l.max())),
                    ("hold_ms".to_string(), item::n(l.hold_ms())),
                ]))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_round_trips() {
        let it = NewAuditEvent {
            entity_id: "k1",
            event_id: "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            at: 1_700_000_000_000,
            action: AuditAction::LimitsSet,
            principal: None,
            resource: Some("gpt-4"),
            details: HashMap::from([(
                LIMITS_DETAIL.to_owned(),
                limits_details(&[Limit::per_minute("rpm", 5)]),
            )]),
            retention_days: 2,
        }
        .into_item("ns");
        assert_eq!(item::get_i64(&it, "ttl"), Some(1_700_000_000 + 2 * 86_400));
        let e = AuditEvent::from_item(&it).unwrap();
        assert_eq!(e.action, "limits_set");
        assert_eq!(e.timestamp, "2023-11-14T22:13:20Z");
        assert_eq!(e.principal, None);
        assert_eq!(e.resource.as_deref(), Some("gpt-4"));
        assert_eq!(event_id_of_key(&it), Some("01ARZ3NDEKTSV4RRFFQ69G5FAV"));
        assert!(is_config_level_id(&resource_audit_id("gpt-4")));
        assert!(is_config_level_id(SYSTEM_AUDIT_ID));
        assert!(!is_config_level_id("k1"));
    }
}
