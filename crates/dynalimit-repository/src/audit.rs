//! The audit log (reference §1.4.9, §6.3): one item per change, newest first.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::ids;
use dynalimit_format::audit::{
    AuditAction, AuditEvent, DEFAULT_RETENTION_DAYS, NewAuditEvent, event_id_of_key,
    is_config_level_id,
};
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item::{self, Item};
use dynalimit_format::keys;

use crate::entity::partition;
use crate::error::classify;
use crate::page;
use crate::{Repository, RepositoryError};

/// A page of audit events and the cursor for the next page.
#[derive(Debug, Clone)]
pub struct AuditPage {
    /// Events, newest first.
    pub events: Vec<AuditEvent>,
    /// Pass as `start_after` to read the next page; `None` at the end.
    pub next: Option<String>,
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
        let principal = self.shared.principal.as_deref();
        let (event_id, it) = self
            .audit_item(entity_id, action, principal, resource, details)
            .await;
        self.put_item(it).await?;
        Ok(event_id)
    }

    /// The id and item of one audit event, stamped now and kept for the namespace's retention,
    /// for a caller that writes it (alone, or inside its own transaction).
    pub(crate) async fn audit_item(
        &self,
        entity_id: &str,
        action: AuditAction,
        principal: Option<&str>,
        resource: Option<&str>,
        details: HashMap<String, AttributeValue>,
    ) -> (String, Item) {
        let now = self.shared.clock.epoch_millis();
        let random: u128 = rand::random();
        let event_id = ulid::Ulid::from_parts(now.max(0) as u64, random).to_string();
        let it = NewAuditEvent {
            entity_id,
            event_id: &event_id,
            at: now,
            action,
            principal,
            resource,
            details,
            retention_days: self.audit_retention_days().await,
        }
        .into_item(&self.scope.id);
        (event_id, it)
    }

    /// Sets how many days this namespace's audit events stay in the table: the
    /// `audit_retention_days` of its system configuration, which later events' `ttl` follows
    /// (events already written keep theirs). Only that attribute changes: the system
    /// defaults beside it stay, as zae-limiter writes it. The write sets an absolute value, so
    /// one applied whose answer was lost is harmless: the SDK's retry, or the caller's, sets
    /// the same value again.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for days outside 1–36500, before any request; the
    /// classified failure.
    pub async fn set_audit_retention_days(&self, days: i64) -> Result<(), RepositoryError> {
        if !(1..=36_500).contains(&days) {
            return Err(dynalimit_core::CoreError::invalid_value(
                "audit retention days",
                days,
                "must be between 1 and 36500",
            )
            .into());
        }
        let (key, update) = dynalimit_format::config::set_audit_retention(&self.scope.id, days);
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(key))
            .with_expr(&update)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", e))?;
        self.scope
            .config
            .evict(&dynalimit_format::config::Slot::System)
            .await;
        Ok(())
    }

    async fn audit_retention_days(&self) -> i64 {
        self.system_audit_retention_days()
            .await
            .ok()
            .flatten()
            .filter(|d| *d > 0)
            .unwrap_or(DEFAULT_RETENTION_DAYS)
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
        if !is_config_level_id(entity_id) {
            ids::validate_entity_id(entity_id)?;
        }
        let size = page::page_size(limit, 1000)?;
        let pk = keys::audit_pk(&self.scope.id, entity_id);
        let start = start_after.map(|id| item::key(pk.clone(), keys::audit_sk(id)));
        let out = self
            .query(None, &partition(&pk, Some(keys::AUDIT_SK_PREFIX)))
            .scan_index_forward(false)
            .limit(size)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", e))?;
        let events = out
            .items()
            .iter()
            .map(AuditEvent::from_item)
            .collect::<Result<Vec<_>, _>>()?;
        let next = out
            .last_evaluated_key
            .as_ref()
            .and_then(event_id_of_key)
            .map(str::to_string);
        Ok(AuditPage { events, next })
    }
}
