//! The audit log (reference §1.4.9, §6.3): one item per change, newest first.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::{Limit, ids};

use crate::error::classify;
use crate::item::{self, Item};
use crate::{Repository, RepositoryError, keys};

/// Default retention of audit events, in days.
pub const DEFAULT_AUDIT_RETENTION_DAYS: i64 = 90;
/// The audit entity id of system-level configuration changes.
pub const SYSTEM_AUDIT_ID: &str = "$SYSTEM";

/// The audit entity id of resource-level configuration changes: `$RESOURCE:{resource}`.
pub fn resource_audit_id(resource: &str) -> String {
    format!("$RESOURCE:{resource}")
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
}

impl AuditAction {
    /// The stored action name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::EntityCreated => "entity_created",
            AuditAction::EntityDeleted => "entity_deleted",
            AuditAction::LimitsSet => "limits_set",
            AuditAction::LimitsDeleted => "limits_deleted",
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

/// A page of audit events and the cursor for the next page.
#[derive(Debug, Clone)]
pub struct AuditPage {
    /// Events, newest first.
    pub events: Vec<AuditEvent>,
    /// Pass as `start_after` to read the next page; `None` at the end.
    pub next: Option<String>,
}

/// The limit dict of audit details: `{name, capacity, refill_amount, refill_period_seconds}`.
pub fn limit_details(limit: &Limit) -> AttributeValue {
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

impl Repository {
    /// Writes one audit event. `entity_id` may be a real id or a config-level id
    /// (`$SYSTEM`, `$RESOURCE:{r}`).
    pub(crate) async fn audit(
        &self,
        entity_id: &str,
        action: AuditAction,
        resource: Option<&str>,
        details: HashMap<String, AttributeValue>,
    ) -> Result<String, RepositoryError> {
        let now = self.shared.clock.epoch_millis();
        let random: u128 = rand::random();
        let event_id = ulid::Ulid::from_parts(now.max(0) as u64, random).to_string();
        let retention = self.audit_retention_days().await;
        let ns = &self.scope.id;
        let mut it = item::key(keys::audit_pk(ns, entity_id), keys::audit_sk(&event_id));
        it.insert("entity_id".into(), item::s(entity_id));
        it.insert("event_id".into(), item::s(&event_id));
        it.insert("timestamp".into(), item::s(item::iso_seconds(now)));
        it.insert("action".into(), item::s(action.as_str()));
        it.insert(
            "principal".into(),
            self.shared
                .principal
                .as_deref()
                .map_or(AttributeValue::Null(true), item::s),
        );
        it.insert(
            "resource".into(),
            resource.map_or(AttributeValue::Null(true), item::s),
        );
        it.insert("details".into(), AttributeValue::M(details));
        it.insert(
            "ttl".into(),
            item::n(now.div_euclid(1000) + retention * 86_400),
        );
        it.insert("GSI4PK".into(), item::s(ns));
        it.insert("GSI4SK".into(), item::s(keys::audit_pk(ns, entity_id)));
        self.shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(it))
            .send()
            .await
            .map_err(|e| classify("PutItem", e))?;
        Ok(event_id)
    }

    async fn audit_retention_days(&self) -> i64 {
        self.system_audit_retention_days()
            .await
            .ok()
            .flatten()
            .filter(|d| *d > 0)
            .unwrap_or(DEFAULT_AUDIT_RETENTION_DAYS)
    }

    /// Audit events of `entity_id` (or `$SYSTEM` / `$RESOURCE:{r}`), newest first, at most
    /// `limit` (1–1000), starting after event `start_after`.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id or limit; the classified failure.
    pub async fn audit_events(
        &self,
        entity_id: &str,
        limit: usize,
        start_after: Option<&str>,
    ) -> Result<AuditPage, RepositoryError> {
        let config_level = entity_id == SYSTEM_AUDIT_ID || entity_id.starts_with("$RESOURCE:");
        if !config_level {
            ids::validate_entity_id(entity_id)?;
        }
        if limit == 0 || limit > 1000 {
            return Err(dynalimit_core::CoreError::invalid_value(
                "limit",
                limit,
                "must be between 1 and 1000",
            )
            .into());
        }
        let pk = keys::audit_pk(&self.scope.id, entity_id);
        let start = start_after.map(|id| item::key(pk.clone(), keys::audit_sk(id)));
        let out = self
            .shared
            .client
            .query()
            .table_name(&self.shared.table)
            .key_condition_expression("PK = :pk AND begins_with(SK, :p)")
            .expression_attribute_values(":pk", item::s(&pk))
            .expression_attribute_values(":p", item::s(keys::AUDIT_SK_PREFIX))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(1000))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", e))?;
        let events = out
            .items()
            .iter()
            .map(audit_from_item)
            .collect::<Result<Vec<_>, _>>()?;
        let next = out
            .last_evaluated_key
            .as_ref()
            .and_then(|k| item::get_s(k, "SK"))
            .and_then(|sk| sk.strip_prefix(keys::AUDIT_SK_PREFIX))
            .map(str::to_string);
        Ok(AuditPage { events, next })
    }
}

fn audit_from_item(found: &Item) -> Result<AuditEvent, RepositoryError> {
    Ok(AuditEvent {
        event_id: item::require_s(found, "event_id")?,
        entity_id: item::require_s(found, "entity_id")?,
        timestamp: item::get_s(found, "timestamp").unwrap_or("").to_string(),
        action: item::require_s(found, "action")?,
        principal: item::get_s(found, "principal").map(str::to_string),
        resource: item::get_s(found, "resource").map(str::to_string),
        details: match found.get("details") {
            Some(AttributeValue::M(m)) => m.clone(),
            _ => HashMap::new(),
        },
    })
}
