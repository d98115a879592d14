//! The per-level writers: a full replace of the level's item (the stored `disabled` and
//! `cascade` flags carried over), the registries, an audit event, cache eviction, and for the
//! entity level the new parameters stamped on the entity's buckets.
//!
//! Every writer is safe to run again after a lost answer: a level put replaces the item with
//! the same content, a registry count is only moved by the transaction that creates or deletes
//! the level's item (a second run finds the item there, or gone, and leaves the count alone),
//! and the bucket stamps set absolute values.

use std::collections::HashMap;

use crate::bucket::decide::stamp_deadline;
use aws_sdk_dynamodb::types::{Delete, Put, ReturnValue, TransactWriteItem, Update};
use dynalimit_core::Limit;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_format::audit::{
    self, AuditAction, LIMITS_DETAIL, ON_UNAVAILABLE_DETAIL, SYSTEM_AUDIT_ID,
};
use dynalimit_format::config::{
    self, ConfigLevel, LimitConfig, OnUnavailable, Slot, entity_config_registry_key,
};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::{self, Item};
use dynalimit_format::{attr, keys};

use super::validate_limits;
use crate::batch::get_item;
use crate::error::classify;
use crate::namespace::absent;
use crate::{Repository, RepositoryError};

pub(super) fn build_err(e: impl std::fmt::Display) -> RepositoryError {
    RepositoryError::InvalidRequest {
        operation: "TransactWriteItems",
        code: "Build".into(),
        message: e.to_string(),
    }
}

impl Repository {
    async fn read_level(&self, slot: &Slot) -> Result<Option<Item>, RepositoryError> {
        let key = slot.key(&self.scope.id);
        get_item(&self.shared.client, &self.shared.table, key, true).await
    }

    async fn get_level(&self, slot: &Slot) -> Result<Option<LimitConfig>, RepositoryError> {
        Ok(self
            .read_level(slot)
            .await?
            .as_ref()
            .map(config::decode)
            .transpose()?)
    }

    /// Puts `it` as it is (unconditionally).
    pub(crate) async fn put_item(&self, it: Item) -> Result<(), RepositoryError> {
        self.shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(it))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("PutItem", e))
    }

    async fn delete_level(&self, slot: &Slot) -> Result<bool, RepositoryError> {
        let out = self
            .shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .set_key(Some(slot.key(&self.scope.id)))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    /// Sets the limits of `entity_id` on `resource` (`_default_` = every resource): a full
    /// replace of that level (stored `disabled`/`cascade` flags are kept), the registry of
    /// resources with entity configs, an audit event, cache eviction, and the new parameters
    /// stamped on every existing bucket of the entity for that resource.
    ///
    /// One bucket carries at most [`MAX_LIMITS_PER_BUCKET`](attr::MAX_LIMITS_PER_BUCKET) (16)
    /// limits: with more, DynamoDB would refuse some of the bucket's requests (a lease's
    /// credit passes its limit of 300 operators at 19), so more are refused here, at every
    /// level, before anything is sent (`docs/limits-per-bucket.md`).
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad ids or limits (more than
    /// [`MAX_LIMITS_PER_BUCKET`](attr::MAX_LIMITS_PER_BUCKET) among them, as
    /// [`CoreError::TooManyLimits`](dynalimit_core::CoreError::TooManyLimits));
    /// [`RepositoryError::FanoutIncomplete`] when the config was written but some buckets were
    /// not stamped (rerun to finish); the classified failure.
    pub async fn set_limits(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
    ) -> Result<(), RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        validate_limits(limits)?;
        self.require_limit_readers(limits).await?;
        let slot = Slot::Entity(entity_id.into(), resource.into());
        let stored = self.read_level(&slot).await?;
        let it = config::level_item(&self.scope.id, &slot, limits, stored.as_ref(), None);
        if stored.is_some() {
            self.put_item(it).await?;
        } else {
            self.create_entity_level(it, resource).await?;
        }
        self.scope.config.evict(&slot).await;
        self.audit(
            entity_id,
            AuditAction::LimitsSet,
            Some(resource),
            HashMap::from([(LIMITS_DETAIL.to_string(), audit::limits_details(limits))]),
        )
        .await?;
        self.stamp_entity_buckets(entity_id, resource).await
    }

    /// The reader gate of a configuration that stores a feature older readers would
    /// mishandle (reference §10): the stack's aggregator must read it, and
    /// `client_min_version` is raised to its minimum reader so that older clients stop: a
    /// soft limit (0.17.0, older clients would enforce it) or a session quota (0.15.0, older
    /// clients would not see the `w_` limits).
    async fn require_limit_readers(&self, limits: &[Limit]) -> Result<(), RepositoryError> {
        use dynalimit_format::version::{SESSION_QUOTAS, STAMPS_AND_MOVES};
        if limits.iter().any(Limit::is_soft) {
            self.require_readers(STAMPS_AND_MOVES, "soft limits")
                .await?;
        } else if limits.iter().any(|l| l.window_seconds().is_some()) {
            self.require_readers(SESSION_QUOTAS, "session quotas (a limit with reset_after)")
                .await?;
        }
        Ok(())
    }

    /// Creates an entity level's item and counts its resource in the registry of resources
    /// with entity configs, in one transaction; a level created meanwhile by someone else is
    /// replaced without touching the count (it is theirs).
    async fn create_entity_level(&self, it: Item, resource: &str) -> Result<(), RepositoryError> {
        let put = Put::builder()
            .table_name(&self.shared.table)
            .set_item(Some(it.clone()))
            .with_expr(&absent())
            .build()
            .map_err(build_err)?;
        let create = TransactWriteItem::builder().put(put).build();
        if !self.create_counted_level(create, resource).await? {
            self.put_item(it).await?;
        }
        Ok(())
    }

    /// Sends `create` (a write of an entity level conditioned on the item's absence) with
    /// `ADD {resource} 1` on the registry of entity configs, in one transaction. False when
    /// it was cancelled: the level exists and its count is its creator's. A lost answer is
    /// harmless: the SDK sends the transaction again with the same client request token,
    /// which DynamoDB does not apply twice.
    pub(super) async fn create_counted_level(
        &self,
        create: TransactWriteItem,
        resource: &str,
    ) -> Result<bool, RepositoryError> {
        let ns = &self.scope.id;
        let mut e = Expr::default();
        e.add(resource, 1);
        e.set_if_absent(attr::GSI4PK, item::s(ns));
        e.set_if_absent(attr::GSI4SK, item::s(keys::system_pk(ns)));
        let count = Update::builder()
            .table_name(&self.shared.table)
            .set_key(Some(entity_config_registry_key(ns)))
            .with_expr(&e)
            .build()
            .map_err(build_err)?;
        let result = self
            .shared
            .client
            .transact_write_items()
            .transact_items(create)
            .transact_items(TransactWriteItem::builder().update(count).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_transaction_canceled_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(classify("TransactWriteItems", e)),
        }
    }

    /// The limits stored at the entity level for `entity_id` on `resource` (strongly
    /// consistent, not cached).
    ///
    /// # Errors
    /// As [`Repository::resolve_limits`].
    pub async fn get_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<Option<LimitConfig>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        self.get_level(&Slot::Entity(entity_id.into(), resource.into()))
            .await
    }

    /// Deletes the entity-level limits of `entity_id` on `resource`; returns false when there
    /// were none. Existing buckets are stamped with the limits that now apply.
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn delete_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<bool, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        let slot = Slot::Entity(entity_id.into(), resource.into());
        let ns = &self.scope.id;
        let mut present = Expr::default();
        let c = present.exists(attr::PK);
        present.when(c);
        let delete = Delete::builder()
            .table_name(&self.shared.table)
            .set_key(Some(slot.key(ns)))
            .with_expr(&present)
            .build()
            .map_err(build_err)?;
        let registry_key = entity_config_registry_key(ns);
        let mut minus = Expr::default();
        minus.add(resource, -1);
        let count = Update::builder()
            .table_name(&self.shared.table)
            .set_key(Some(registry_key.clone()))
            .with_expr(&minus)
            .build()
            .map_err(build_err)?;
        let result = self
            .shared
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().delete(delete).build())
            .transact_items(TransactWriteItem::builder().update(count).build())
            .send()
            .await;
        if let Err(e) = result {
            if e.as_service_error()
                .is_some_and(|s| s.is_transaction_canceled_exception())
            {
                self.scope.config.evict(&slot).await;
                return Ok(false);
            }
            return Err(classify("TransactWriteItems", e));
        }
        let mut cleanup = Expr::default();
        cleanup.remove(resource);
        let c = cleanup.cmp(resource, "<=", 0);
        cleanup.when(c);
        let removed = self
            .shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(registry_key))
            .with_expr(&cleanup)
            .send()
            .await;
        if let Err(e) = removed
            && !e
                .as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
        {
            return Err(classify("UpdateItem", e));
        }
        self.scope.config.evict(&slot).await;
        self.audit(
            entity_id,
            AuditAction::LimitsDeleted,
            Some(resource),
            HashMap::new(),
        )
        .await?;
        self.stamp_entity_buckets(entity_id, resource).await?;
        Ok(true)
    }

    /// Stamps the limits that now apply on every bucket of `entity_id` for `resource` (every
    /// resource for `_default_`), with [`crate::bucket::BucketStore::sync_parameters`].
    async fn stamp_entity_buckets(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<(), RepositoryError> {
        let scope = (resource != DEFAULT_RESOURCE).then_some(resource);
        let buckets = self.buckets().entity_bucket_keys(entity_id, scope).await?;
        let store = self.buckets();
        let mut stamped = 0;
        for bucket in buckets {
            let resolved = self.resolve_limits(entity_id, &bucket.resource).await?;
            if resolved.limits.is_empty() {
                continue;
            }
            let remove_ttl = matches!(
                resolved.source,
                Some(ConfigLevel::Entity | ConfigLevel::EntityDefault)
            );
            let until = stamp_deadline(self.shared.clock.epoch_millis(), rand::random());
            match store
                .sync_parameters(&bucket, &resolved.limits, remove_ttl, until)
                .await
            {
                Ok(true) => stamped += 1,
                Ok(false) => {}
                Err(e) => {
                    return Err(RepositoryError::FanoutIncomplete {
                        stamped,
                        message: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Sets the default limits of `resource` for every entity (full replace; stored flags kept)
    /// and registers the resource. Existing buckets pick the change up when their TTL renews
    /// them.
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn set_resource_defaults(
        &self,
        resource: &str,
        limits: &[Limit],
    ) -> Result<(), RepositoryError> {
        ids::validate_resource(resource)?;
        validate_limits(limits)?;
        self.require_limit_readers(limits).await?;
        let slot = Slot::Resource(resource.into());
        let stored = self.read_level(&slot).await?;
        let it = config::level_item(&self.scope.id, &slot, limits, stored.as_ref(), None);
        self.put_item(it).await?;
        self.register_resource(resource, true).await?;
        self.scope.config.evict(&slot).await;
        self.audit(
            &audit::resource_audit_id(resource),
            AuditAction::LimitsSet,
            Some(resource),
            HashMap::from([(LIMITS_DETAIL.to_string(), audit::limits_details(limits))]),
        )
        .await?;
        if soft_changed(stored.as_ref(), limits)? {
            self.stamp_soft(Some(resource), ConfigLevel::Resource)
                .await?;
        }
        Ok(())
    }

    /// The default limits stored for `resource`.
    ///
    /// # Errors
    /// As [`Repository::get_limits`].
    pub async fn get_resource_defaults(
        &self,
        resource: &str,
    ) -> Result<Option<LimitConfig>, RepositoryError> {
        ids::validate_resource(resource)?;
        self.get_level(&Slot::Resource(resource.into())).await
    }

    /// Deletes the default limits of `resource`; false when there were none.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn delete_resource_defaults(&self, resource: &str) -> Result<bool, RepositoryError> {
        ids::validate_resource(resource)?;
        let slot = Slot::Resource(resource.into());
        let existed = self.delete_level(&slot).await?;
        self.register_resource(resource, false).await?;
        self.scope.config.evict(&slot).await;
        if existed {
            self.audit(
                &audit::resource_audit_id(resource),
                AuditAction::LimitsDeleted,
                Some(resource),
                HashMap::new(),
            )
            .await?;
        }
        Ok(existed)
    }

    /// Sets the namespace-wide default limits and, when given, `on_unavailable` (otherwise
    /// the stored value is kept).
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn set_system_defaults(
        &self,
        limits: &[Limit],
        on_unavailable: Option<OnUnavailable>,
    ) -> Result<(), RepositoryError> {
        validate_limits(limits)?;
        self.require_limit_readers(limits).await?;
        let stored = self.read_level(&Slot::System).await?;
        let keep = stored.as_ref().and_then(config::stored_on_unavailable);
        let it = config::level_item(
            &self.scope.id,
            &Slot::System,
            limits,
            stored.as_ref(),
            on_unavailable.or(keep),
        );
        self.put_item(it).await?;
        self.scope.config.evict(&Slot::System).await;
        let mut details =
            HashMap::from([(LIMITS_DETAIL.to_string(), audit::limits_details(limits))]);
        if let Some(o) = on_unavailable {
            details.insert(ON_UNAVAILABLE_DETAIL.into(), item::s(o.as_str()));
        }
        self.audit(SYSTEM_AUDIT_ID, AuditAction::LimitsSet, None, details)
            .await?;
        if soft_changed(stored.as_ref(), limits)? {
            self.stamp_soft(None, ConfigLevel::System).await?;
        }
        Ok(())
    }

    /// The change-only fan-out of a resource or system level whose soft limits changed
    /// (reference §12.4): every bucket of `resource` (of the namespace for the system level)
    /// whose pair resolves its limits from `level` gets the stamps of the limits it now
    /// resolves (a soft limit's stamp set, a hard one's removed), so that a fast path and a
    /// rejection from a remembered image see the change at once.
    async fn stamp_soft(
        &self,
        resource: Option<&str>,
        level: ConfigLevel,
    ) -> Result<(), RepositoryError> {
        let store = self.buckets();
        let keys = match resource {
            Some(r) => store.resource_bucket_keys(r).await?,
            None => store.namespace_bucket_keys().await?,
        };
        let mut stamped = 0;
        let mut resolved: HashMap<(String, String), Option<Vec<Limit>>> = HashMap::new();
        let mut levels = HashMap::new();
        for key in keys {
            let pair = (key.entity_id.clone(), key.resource.clone());
            let limits = match resolved.get(&pair) {
                Some(known) => known.clone(),
                None => {
                    let (limits, source) = self
                        .resolve_consistent(&key.entity_id, &key.resource, &mut levels)
                        .await
                        .map_err(|e| RepositoryError::FanoutIncomplete {
                            stamped,
                            message: e.to_string(),
                        })?;
                    let limits = (source == Some(level)).then_some(limits);
                    resolved.insert(pair, limits.clone());
                    limits
                }
            };
            let Some(limits) = limits else {
                continue;
            };
            let until = stamp_deadline(self.shared.clock.epoch_millis(), rand::random());
            match store.stamp_soft(&key, &limits, until).await {
                Ok(true) => stamped += 1,
                Ok(false) => {}
                Err(e) => {
                    return Err(RepositoryError::FanoutIncomplete {
                        stamped,
                        message: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The namespace-wide defaults.
    ///
    /// # Errors
    /// As [`Repository::get_limits`].
    pub async fn get_system_defaults(&self) -> Result<Option<LimitConfig>, RepositoryError> {
        self.get_level(&Slot::System).await
    }

    /// Deletes the namespace-wide defaults (and `on_unavailable`); false when there were none.
    /// The namespace's `audit_retention_days` stays: the item is then replaced by one holding
    /// only it, a `PutItem` of a fixed item, so one applied whose answer was lost is the same
    /// when repeated.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn delete_system_defaults(&self) -> Result<bool, RepositoryError> {
        let stored = self.read_level(&Slot::System).await?;
        let remainder = stored
            .as_ref()
            .and_then(|s| config::retention_remainder(&self.scope.id, s));
        let existed = match (&stored, remainder) {
            (Some(stored), Some(remainder)) => {
                let had = config::decode(stored).is_ok_and(|c| !c.limits.is_empty())
                    || config::stored_on_unavailable(stored).is_some();
                self.put_item(remainder).await?;
                had
            }
            _ => self.delete_level(&Slot::System).await?,
        };
        self.scope.config.evict(&Slot::System).await;
        if existed {
            self.audit(
                SYSTEM_AUDIT_ID,
                AuditAction::LimitsDeleted,
                None,
                HashMap::new(),
            )
            .await?;
        }
        Ok(existed)
    }
}

/// Whether the soft limits of a level change from `stored` to `limits` (names and soft flags).
fn soft_changed(stored: Option<&Item>, limits: &[Limit]) -> Result<bool, RepositoryError> {
    let before = match stored {
        Some(item) => config::decode(item)?.soft,
        None => std::collections::BTreeSet::new(),
    };
    let after: std::collections::BTreeSet<String> = limits
        .iter()
        .filter(|l| l.is_soft())
        .map(|l| l.name().to_owned())
        .collect();
    Ok(before != after)
}
