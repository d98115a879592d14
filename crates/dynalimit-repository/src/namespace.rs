//! The namespace registry (reference §5, §1.4.1–1.4.2).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, Put, TransactWriteItem, WriteRequest,
};
use base64::Engine;
use dynalimit_core::ids;

use crate::error::classify;
use crate::item::{self, Item};
use crate::{Repository, RepositoryError, keys};

/// A registered namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The name users choose.
    pub name: String,
    /// The opaque id that prefixes the namespace's keys.
    pub id: String,
    /// `active`, `deleted` or `purging`.
    pub status: String,
    /// When it was registered (`YYYY-MM-DDTHH:MM:SSZ`).
    pub created_at: String,
    /// When it was soft-deleted.
    pub deleted_at: Option<String>,
}

impl NamespaceInfo {
    fn from_item(found: &Item) -> Result<NamespaceInfo, RepositoryError> {
        Ok(NamespaceInfo {
            name: item::require_s(found, "namespace_name")?,
            id: item::require_s(found, "namespace_id")?,
            status: item::get_s(found, "status").unwrap_or("active").to_string(),
            created_at: item::get_s(found, "created_at").unwrap_or("").to_string(),
            deleted_at: item::get_s(found, "deleted_at").map(str::to_string),
        })
    }
}

/// A new opaque namespace id: 8 random bytes in URL-safe base64 (11 characters), never
/// starting with `-`.
pub fn new_namespace_id() -> String {
    loop {
        let bytes: [u8; 8] = rand::random();
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        if !id.starts_with('-') {
            return id;
        }
    }
}

fn record(name: &str, id: &str, sk: String, created_at: &str) -> Item {
    let mut it = item::key(keys::SYSTEM_RESERVED_PK, sk);
    it.insert("namespace_id".into(), item::s(id));
    it.insert("namespace_name".into(), item::s(name));
    it.insert("status".into(), item::s("active"));
    it.insert("created_at".into(), item::s(created_at));
    it.insert("GSI4PK".into(), item::s(keys::RESERVED_NS));
    it.insert("GSI4SK".into(), item::s(keys::SYSTEM_RESERVED_PK));
    it
}

const BATCH_RETRIES: u32 = 5;

impl Repository {
    fn remember_namespace(&self, name: &str, id: &str) {
        if let Ok(mut ids) = self.shared.namespace_ids.lock() {
            ids.insert(name.to_string(), id.to_string());
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
            .get_registry_record(keys::namespace_sk(name), consistent)
            .await?;
        Ok(found.filter(|info| info.status == "active").map(|info| {
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
        let now = item::iso_seconds(self.shared.clock.epoch_millis());
        let put = |it: Item| {
            Put::builder()
                .table_name(&self.shared.table)
                .set_item(Some(it))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map(|p| TransactWriteItem::builder().put(p).build())
        };
        let forward = put(record(name, &id, keys::namespace_sk(name), &now));
        let reverse = put(record(name, &id, keys::nsid_sk(&id), &now));
        let (forward, reverse) = match (forward, reverse) {
            (Ok(f), Ok(r)) => (f, r),
            (Err(e), _) | (_, Err(e)) => {
                return Err(RepositoryError::Rejected {
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
        self.shared
            .namespace_ids
            .lock()
            .ok()
            .and_then(|ids| ids.get(name).cloned())
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
        self.get_registry_record(keys::namespace_sk(name), false)
            .await
    }

    /// Reads the reverse record of namespace id `id` (present also while deleted).
    ///
    /// # Errors
    /// The classified failure.
    pub async fn get_namespace_by_id(
        &self,
        id: &str,
    ) -> Result<Option<NamespaceInfo>, RepositoryError> {
        self.get_registry_record(keys::nsid_sk(id), true).await
    }

    /// Reads one record of the namespace registry by its sort key.
    async fn get_registry_record(
        &self,
        sk: String,
        consistent: bool,
    ) -> Result<Option<NamespaceInfo>, RepositoryError> {
        let out = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(keys::SYSTEM_RESERVED_PK, sk)))
            .set_consistent_read(consistent.then_some(true))
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        out.item.as_ref().map(NamespaceInfo::from_item).transpose()
    }

    /// Updates the `status` (as `#st`) and companions of the reverse record of namespace `id`.
    async fn update_reverse_record<const N: usize>(
        &self,
        id: &str,
        expression: &str,
        values: [(&str, AttributeValue); N],
    ) -> Result<(), RepositoryError> {
        let mut update = self
            .shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(keys::SYSTEM_RESERVED_PK, keys::nsid_sk(id))))
            .update_expression(expression)
            .expression_attribute_names("#st", "status");
        for (name, value) in values {
            update = update.expression_attribute_values(name, value);
        }
        update.send().await.map_err(|e| classify("UpdateItem", e))?;
        Ok(())
    }

    async fn query_registry(&self, prefix: &str) -> Result<Vec<NamespaceInfo>, RepositoryError> {
        self.query_items(
            None,
            "PK = :pk AND begins_with(SK, :p)",
            &[
                (":pk", keys::SYSTEM_RESERVED_PK.to_string()),
                (":p", prefix.to_string()),
            ],
        )
        .await?
        .iter()
        .map(NamespaceInfo::from_item)
        .collect()
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
        all.retain(|n| n.status == "active");
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
            .set_key(Some(item::key(
                keys::SYSTEM_RESERVED_PK,
                keys::namespace_sk(name),
            )))
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        let now = item::iso_seconds(self.shared.clock.epoch_millis());
        self.update_reverse_record(
            &info.id,
            "SET #st = :d, deleted_at = :t",
            [(":d", item::s("deleted")), (":t", item::s(now))],
        )
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
        if info.status != "deleted" {
            return Err(RepositoryError::NamespaceState {
                name: info.name,
                state: info.status,
                message: "only a deleted namespace can be recovered".into(),
            });
        }
        let forward = record(
            &info.name,
            id,
            keys::namespace_sk(&info.name),
            &info.created_at,
        );
        let put = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(forward))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        if let Err(e) = put {
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
            {
                return Err(RepositoryError::NamespaceState {
                    name: info.name,
                    state: "deleted".into(),
                    message: "its name has been registered again with another id".into(),
                });
            }
            return Err(classify("PutItem", e));
        }
        self.update_reverse_record(
            id,
            "SET #st = :a REMOVE deleted_at",
            [(":a", item::s("active"))],
        )
        .await?;
        self.remember_namespace(&info.name, id);
        Ok(NamespaceInfo {
            status: "active".into(),
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
        all.retain(|n| n.status == "deleted");
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
        if info.status == "active" {
            return Err(RepositoryError::NamespaceState {
                name: info.name,
                state: info.status,
                message: "delete the namespace before purging it".into(),
            });
        }
        self.update_reverse_record(id, "SET #st = :p", [(":p", item::s("purging"))])
            .await?;
        let mut deleted = 0;
        let mut start = None;
        loop {
            let page = self
                .shared
                .client
                .query()
                .table_name(&self.shared.table)
                .index_name("GSI4")
                .key_condition_expression("GSI4PK = :ns")
                .expression_attribute_values(":ns", item::s(id))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| classify("Query", e))?;
            let keys: Vec<Item> = page
                .items()
                .iter()
                .filter_map(|it| Some(item::key(item::get_s(it, "PK")?, item::get_s(it, "SK")?)))
                .collect();
            deleted += self.batch_delete(keys).await?;
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        self.shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(keys::SYSTEM_RESERVED_PK, keys::nsid_sk(id))))
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        Ok(deleted)
    }

    /// Deletes `keys` with `BatchWriteItem` in groups of 25, retrying unprocessed items with
    /// jittered exponential back-off. Returns how many were deleted.
    pub(crate) async fn batch_delete(&self, keys: Vec<Item>) -> Result<usize, RepositoryError> {
        let mut deleted = 0;
        let mut unique = keys;
        unique.sort_by_key(item::describe_key);
        unique.dedup_by_key(|k| item::describe_key(k));
        for chunk in unique.chunks(25) {
            let mut pending: Vec<WriteRequest> = chunk
                .iter()
                .filter_map(|k| {
                    DeleteRequest::builder()
                        .set_key(Some(k.clone()))
                        .build()
                        .ok()
                        .map(|d| WriteRequest::builder().delete_request(d).build())
                })
                .collect();
            let mut attempt = 0;
            while !pending.is_empty() {
                let sent = pending.len();
                let out = self
                    .shared
                    .client
                    .batch_write_item()
                    .request_items(self.shared.table.clone(), std::mem::take(&mut pending))
                    .send()
                    .await
                    .map_err(|e| classify("BatchWriteItem", e))?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(&self.shared.table))
                    .unwrap_or_default();
                deleted += sent - pending.len();
                if pending.is_empty() {
                    break;
                }
                attempt += 1;
                if attempt > BATCH_RETRIES {
                    return Err(RepositoryError::Unavailable {
                        operation: "BatchWriteItem",
                        message: format!(
                            "{} items still unprocessed after {BATCH_RETRIES} retries; run again \
                             to finish",
                            pending.len()
                        ),
                    });
                }
                let base = 50u64 << attempt.min(6);
                let jitter = rand::random::<u64>() % base;
                tokio::time::sleep(std::time::Duration::from_millis(base / 2 + jitter)).await;
            }
        }
        Ok(deleted)
    }
}

/// A convenience for attribute values in tests and tools.
pub fn is_null(value: Option<&AttributeValue>) -> bool {
    matches!(value, Some(AttributeValue::Null(true)) | None)
}
