//! The namespace registry (reference §5, §1.4.1–1.4.2).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use base64::Engine;
use dynalimit_core::ids;
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::{self, Item};
use dynalimit_format::namespace::{
    self as format, ACTIVE, DELETED, NamespaceInfo, PURGING, forward_key, reverse_key,
};
use dynalimit_format::schema::GSI4;
use dynalimit_format::{attr, keys};

use crate::batch::{batch_delete, get_item};
use crate::error::classify;
use crate::page;
use crate::{Repository, RepositoryError};

/// A new opaque namespace id: 8 random bytes in URL-safe base64 (11 characters), never
/// starting with `-`.
fn new_namespace_id() -> String {
    loop {
        let bytes: [u8; 8] = rand::random();
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// `attribute_not_exists(PK)`: the condition of a put that must not replace an item.
pub(crate) fn absent() -> Expr {
    let mut e = Expr::default();
    let c = e.not_exists(attr::PK);
    e.when(c);
    e
}

impl Repository {
    fn remember_namespace(&self, name: &str, id: &str) {
        let now = self.shared.clock.monotonic();
        if let Ok(mut ids) = self.shared.namespace_ids.lock() {
            ids.insert(name.to_string(), id.to_string(), now);
        }
    }

    fn forget_namespace(&self, name: &str) {
        if let Ok(mut ids) = self.shared.namespace_ids.lock() {
            ids.remove(name);
        }
    }

    /// The id of namespace `name`, registered only when it is missing. An existing namespace
    /// costs one strongly consistent `GetItem` of its registry record and nothing is written,
    /// so a principal that may only read the registry (the stack's acquire-only and read-only
    /// policies) can open it; a missing one is registered as [`Repository::register_namespace`]
    /// does.
    ///
    /// # Errors
    /// As [`Repository::register_namespace`].
    pub async fn ensure_namespace(&self, name: &str) -> Result<String, RepositoryError> {
        ids::validate_namespace_name(name)?;
        if let Some(id) = self.cached_namespace_id(name) {
            return Ok(id);
        }
        match self.read_active_id(name, true).await? {
            Some(id) => Ok(id),
            None => self.register_namespace(name).await,
        }
    }

    /// The id of `name` from its forward record when it is active (remembered for later).
    async fn read_active_id(
        &self,
        name: &str,
        consistent: bool,
    ) -> Result<Option<String>, RepositoryError> {
        let found = self
            .get_registry_record(forward_key(name), consistent)
            .await?;
        Ok(found.filter(|info| info.status == ACTIVE).map(|info| {
            self.remember_namespace(name, &info.id);
            info.id
        }))
    }

    /// Registers namespace `name` and returns its id; idempotent (an existing registration
    /// returns its id unchanged).
    ///
    /// The forward and reverse records are written in one transaction, each on condition that
    /// it does not exist. When that transaction is refused because the name is taken (by a
    /// concurrent registration, or by this one: the SDK resends a transaction whose answer was
    /// lost after it was applied, and the resend finds its own records), the forward record is
    /// read back with a strongly consistent read and its id returned, so every registrant of a
    /// name gets the same id and no second reverse record is left behind.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for `_` or a malformed name (no request is sent), or the
    /// classified failure.
    pub async fn register_namespace(&self, name: &str) -> Result<String, RepositoryError> {
        ids::validate_namespace_name(name)?;
        if let Some(id) = self.cached_namespace_id(name) {
            return Ok(id);
        }
        let id = new_namespace_id();
        let now = dynalimit_core::time::iso_seconds(self.shared.clock.epoch_millis());
        let condition = absent();
        let put = |it: Item| {
            Put::builder()
                .table_name(&self.shared.table)
                .set_item(Some(it))
                .with_expr(&condition)
                .build()
                .map(|p| TransactWriteItem::builder().put(p).build())
        };
        let forward = put(format::record(forward_key(name), name, &id, &now));
        let reverse = put(format::record(reverse_key(&id), name, &id, &now));
        let (forward, reverse) = match (forward, reverse) {
            (Ok(f), Ok(r)) => (f, r),
            (Err(e), _) | (_, Err(e)) => {
                return Err(RepositoryError::InvalidRequest {
                    operation: "TransactWriteItems",
                    code: "Build".into(),
                    message: e.to_string(),
                });
            }
        };
        let result = self
            .shared
            .client
            .transact_write_items()
            .transact_items(forward)
            .transact_items(reverse)
            .send()
            .await;
        match result {
            Ok(_) => {
                self.remember_namespace(name, &id);
                Ok(id)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_transaction_canceled_exception()) =>
            {
                // Already registered (by us earlier or by someone else): read its id.
                self.read_active_id(name, true)
                    .await?
                    .ok_or(RepositoryError::TransactionConflict {
                        operation: "TransactWriteItems",
                    })
            }
            Err(e) => Err(classify("TransactWriteItems", e)),
        }
    }

    /// Registers several namespaces; returns name → id.
    ///
    /// # Errors
    /// As [`Repository::register_namespace`]; every name is validated before any request.
    pub async fn register_namespaces(
        &self,
        names: &[&str],
    ) -> Result<HashMap<String, String>, RepositoryError> {
        for name in names {
            ids::validate_namespace_name(name)?;
        }
        let mut out = HashMap::new();
        for name in names {
            out.insert(name.to_string(), self.register_namespace(name).await?);
        }
        Ok(out)
    }

    fn cached_namespace_id(&self, name: &str) -> Option<String> {
        let now = self.shared.clock.monotonic();
        self.shared
            .namespace_ids
            .lock()
            .ok()
            .and_then(|mut ids| ids.get_mut(name, now, |id| id.clone()))
    }

    /// The id of an active namespace.
    ///
    /// # Errors
    /// [`RepositoryError::NamespaceNotFound`] when it is not registered or deleted.
    pub async fn namespace_id_of(&self, name: &str) -> Result<String, RepositoryError> {
        ids::validate_namespace_name(name)?;
        if let Some(id) = self.cached_namespace_id(name) {
            return Ok(id);
        }
        self.read_active_id(name, false)
            .await?
            .ok_or_else(|| RepositoryError::NamespaceNotFound {
                name: name.to_string(),
            })
    }

    /// Reads the forward record of namespace `name`.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn get_namespace(
        &self,
        name: &str,
    ) -> Result<Option<NamespaceInfo>, RepositoryError> {
        ids::validate_namespace_name(name)?;
        self.get_registry_record(forward_key(name), false).await
    }

    /// Reads the reverse record of namespace id `id` (present also while deleted).
    ///
    /// # Errors
    /// The classified failure.
    pub async fn get_namespace_by_id(
        &self,
        id: &str,
    ) -> Result<Option<NamespaceInfo>, RepositoryError> {
        self.get_registry_record(reverse_key(id), true).await
    }

    /// Reads one record of the namespace registry.
    async fn get_registry_record(
        &self,
        key: Item,
        consistent: bool,
    ) -> Result<Option<NamespaceInfo>, RepositoryError> {
        let found = get_item(&self.shared.client, &self.shared.table, key, consistent).await?;
        Ok(found.as_ref().map(NamespaceInfo::from_item).transpose()?)
    }

    /// Sets the `status` of the reverse record of namespace `id`, with `deleted_at` set to
    /// `deleted_at` or removed.
    async fn update_reverse_record(
        &self,
        id: &str,
        status: &str,
        deleted_at: Option<Option<String>>,
    ) -> Result<(), RepositoryError> {
        let mut e = Expr::default();
        e.set(attr::STATUS, item::s(status));
        match deleted_at {
            Some(Some(at)) => e.set(attr::DELETED_AT, item::s(at)),
            Some(None) => e.remove(attr::DELETED_AT),
            None => {}
        }
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(reverse_key(id)))
            .with_expr(&e)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", e))?;
        Ok(())
    }

    async fn query_registry(&self, prefix: &str) -> Result<Vec<NamespaceInfo>, RepositoryError> {
        let mut e = Expr::default();
        let pk = e.eq(attr::PK, item::s(keys::SYSTEM_RESERVED_PK));
        e.when(pk);
        let sk = e.begins_with(attr::SK, prefix);
        e.when(sk);
        let items = page::all_items(page::query(
            &self.shared.client,
            &self.shared.table,
            None,
            &e,
        ))
        .await?;
        Ok(items
            .iter()
            .map(NamespaceInfo::from_item)
            .collect::<Result<_, _>>()?)
    }

    /// The reverse record of `id`, or [`RepositoryError::NotFound`].
    async fn existing_namespace_by_id(&self, id: &str) -> Result<NamespaceInfo, RepositoryError> {
        self.get_namespace_by_id(id)
            .await?
            .ok_or_else(|| RepositoryError::NotFound {
                what: format!("namespace id {id:?}"),
            })
    }

    /// Every active namespace, sorted by name.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceInfo>, RepositoryError> {
        let mut all = self.query_registry(keys::NAMESPACE_SK_PREFIX).await?;
        all.retain(|n| n.status == ACTIVE);
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Soft-deletes namespace `name`: its forward record goes, the reverse record is marked
    /// `deleted`, data stays (recoverable with [`Repository::recover_namespace`]). Returns the
    /// id, or `None` when there was nothing to delete.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn delete_namespace(&self, name: &str) -> Result<Option<String>, RepositoryError> {
        let Some(info) = self.get_namespace(name).await? else {
            return Ok(None);
        };
        self.shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .set_key(Some(forward_key(name)))
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        let now = dynalimit_core::time::iso_seconds(self.shared.clock.epoch_millis());
        self.update_reverse_record(&info.id, DELETED, Some(Some(now)))
            .await?;
        self.forget_namespace(name);
        Ok(Some(info.id))
    }

    /// Restores a soft-deleted namespace by id, under its old name.
    ///
    /// # Errors
    /// [`RepositoryError::NotFound`] for an unknown id, [`RepositoryError::NamespaceState`]
    /// when it is active or being purged, or its name was registered again meanwhile.
    pub async fn recover_namespace(&self, id: &str) -> Result<NamespaceInfo, RepositoryError> {
        if id == keys::RESERVED_NS {
            return Err(dynalimit_core::CoreError::invalid_identifier(
                "namespace id",
                id,
                "the reserved namespace cannot be recovered",
            )
            .into());
        }
        let info = self.existing_namespace_by_id(id).await?;
        if info.status != DELETED {
            return Err(RepositoryError::NamespaceState {
                name: info.name,
                state: info.status,
                message: "only a deleted namespace can be recovered".into(),
            });
        }
        let forward = format::record(forward_key(&info.name), &info.name, id, &info.created_at);
        let condition = absent();
        let put = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(forward))
            .with_expr(&condition)
            .send()
            .await;
        if let Err(e) = put {
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
            {
                return Err(RepositoryError::NamespaceState {
                    name: info.name,
                    state: DELETED.into(),
                    message: "its name has been registered again with another id".into(),
                });
            }
            return Err(classify("PutItem", e));
        }
        self.update_reverse_record(id, ACTIVE, Some(None)).await?;
        self.remember_namespace(&info.name, id);
        Ok(NamespaceInfo {
            status: ACTIVE.into(),
            deleted_at: None,
            ..info
        })
    }

    /// Soft-deleted namespaces whose data is still in the table.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_orphan_namespaces(&self) -> Result<Vec<NamespaceInfo>, RepositoryError> {
        let mut all = self.query_registry(keys::NSID_SK_PREFIX).await?;
        all.retain(|n| n.status == DELETED);
        Ok(all)
    }

    /// Deletes every item of a soft-deleted namespace (all GSI4 pages, batched deletes with
    /// retries of unprocessed items), then its reverse record. Returns the number of items
    /// deleted. Rerunning after an interruption finishes the job.
    ///
    /// # Errors
    /// [`RepositoryError::NamespaceState`] for an active namespace; [`RepositoryError::NotFound`]
    /// for an unknown id; [`RepositoryError::Unavailable`] when unprocessed items remain.
    pub async fn purge_namespace(&self, id: &str) -> Result<usize, RepositoryError> {
        if id == keys::RESERVED_NS || id.is_empty() || id.contains(['/', '#']) {
            return Err(dynalimit_core::CoreError::invalid_identifier(
                "namespace id",
                id,
                "not a namespace id",
            )
            .into());
        }
        let info = self.existing_namespace_by_id(id).await?;
        if info.status == ACTIVE {
            return Err(RepositoryError::NamespaceState {
                name: info.name,
                state: info.status,
                message: "delete the namespace before purging it".into(),
            });
        }
        self.update_reverse_record(id, PURGING, None).await?;
        let mut deleted = 0;
        let mut e = Expr::default();
        let c = e.eq(attr::GSI4PK, item::s(id));
        e.when(c);
        let mut pages = page::query(&self.shared.client, &self.shared.table, Some(GSI4), &e)
            .into_paginator()
            .send();
        while let Some(found) = pages.next().await {
            let found = found.map_err(|e| classify("Query", e))?;
            // Only this namespace's items: another namespace's writer may give its own items
            // this namespace's GSI4 key, and they are not the purge's to delete.
            let keys: Vec<Item> = page::own_items(id, GSI4, found.items.unwrap_or_default())
                .iter()
                .filter_map(item::key_map_of)
                .collect();
            deleted += batch_delete(&self.shared.client, &self.shared.table, keys).await?;
        }
        self.shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .set_key(Some(reverse_key(id)))
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        Ok(deleted)
    }
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use crate::repository::MAX_NAMESPACE_IDS;

    #[tokio::test]
    async fn a_million_namespace_names_keep_the_remembered_ids_at_their_bound() {
        let repo = crate::Repository::builder()
            .in_memory()
            .open()
            .await
            .unwrap();
        let mut most = 0;
        for i in 0..1_000_000 {
            repo.remember_namespace(&format!("tenant-{i}"), "id");
            most = most.max(repo.shared.namespace_ids.lock().unwrap().len());
        }
        assert!(most <= MAX_NAMESPACE_IDS, "{most} ids");
        assert_eq!(
            repo.cached_namespace_id("tenant-999999").as_deref(),
            Some("id")
        );
        assert_eq!(repo.cached_namespace_id("tenant-0"), None);
    }
}
