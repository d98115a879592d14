//! Entities (reference §1.4.4, §6.2): metadata, parent/child links, deletion.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::ids;

use crate::audit::AuditAction;
use crate::error::classify;
use crate::item::{self, Item};
use crate::{Repository, RepositoryError, keys};

/// An entity: an API key, a project, a tenant — whatever owns buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// Its id.
    pub id: String,
    /// Display name (defaults to the id).
    pub name: String,
    /// The parent whose buckets a cascading acquire also debits.
    pub parent_id: Option<String>,
    /// Whether acquires cascade to the parent by default.
    pub cascade: bool,
    /// Free-form string metadata.
    pub metadata: BTreeMap<String, String>,
    /// Creation time, `YYYY-MM-DDTHH:MM:SSZ`.
    pub created_at: String,
    /// Parent generation (`pgen`), 0 for entities written before it existed.
    pub parent_generation: i64,
    /// Incarnation (`pinc`), random per create.
    pub incarnation: Option<String>,
}

/// What to create; see [`Repository::create_entity`].
///
/// ```
/// use dynalimit_repository::entity::NewEntity;
///
/// let key = NewEntity::new("api-key-1")
///     .name("Production key")
///     .parent("project-7")
///     .cascade(true)
///     .metadata("owner", "team-a");
/// assert_eq!(key.id(), "api-key-1");
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct NewEntity {
    id: String,
    name: Option<String>,
    parent_id: Option<String>,
    cascade: bool,
    metadata: BTreeMap<String, String>,
}

impl NewEntity {
    /// An entity with id `id`, no parent, no cascade.
    pub fn new(id: impl Into<String>) -> Self {
        NewEntity {
            id: id.into(),
            ..Default::default()
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Sets the display name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the parent.
    pub fn parent(mut self, parent_id: impl Into<String>) -> Self {
        self.parent_id = Some(parent_id.into());
        self
    }

    /// Sets whether acquires cascade to the parent.
    pub fn cascade(mut self, cascade: bool) -> Self {
        self.cascade = cascade;
        self
    }

    /// Adds one metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    fn validate(&self) -> Result<(), RepositoryError> {
        ids::validate_entity_id(&self.id)?;
        if let Some(p) = &self.parent_id {
            ids::validate_entity_id(p)?;
            if p == &self.id {
                return Err(dynalimit_core::CoreError::invalid_identifier(
                    "parent_id",
                    p,
                    "an entity cannot be its own parent",
                )
                .into());
            }
        }
        Ok(())
    }
}

pub(crate) fn entity_from_item(found: &Item) -> Result<Entity, RepositoryError> {
    let id = item::require_s(found, "entity_id")?;
    Ok(Entity {
        name: item::get_s(found, "name").unwrap_or(&id).to_string(),
        parent_id: item::get_s(found, "parent_id").map(str::to_string),
        cascade: item::get_bool(found, "cascade").unwrap_or(false),
        metadata: match found.get("metadata") {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(k, v)| v.as_s().ok().map(|v| (k.clone(), v.clone())))
                .collect(),
            _ => BTreeMap::new(),
        },
        created_at: item::get_s(found, "created_at").unwrap_or("").to_string(),
        parent_generation: item::get_i64(found, "pgen").unwrap_or(0),
        incarnation: item::get_s(found, "pinc").map(str::to_string),
        id,
    })
}

impl Repository {
    /// Creates an entity; fails if it exists. The parent need not exist yet.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent),
    /// [`RepositoryError::AlreadyExists`], or the classified failure.
    pub async fn create_entity(&self, new: NewEntity) -> Result<Entity, RepositoryError> {
        new.validate()?;
        let ns = &self.scope.id;
        let now = self.shared.clock.epoch_millis();
        let created_at = item::iso_seconds(now);
        let incarnation = format!("{:016x}", rand::random::<u64>());
        let mut it = item::key(keys::entity_pk(ns, &new.id), keys::META_SK);
        it.insert("entity_id".into(), item::s(&new.id));
        it.insert(
            "name".into(),
            item::s(new.name.clone().unwrap_or_else(|| new.id.clone())),
        );
        it.insert(
            "parent_id".into(),
            new.parent_id
                .as_deref()
                .map_or(AttributeValue::Null(true), item::s),
        );
        it.insert("cascade".into(), AttributeValue::Bool(new.cascade));
        it.insert("pgen".into(), item::n(now));
        it.insert("pinc".into(), item::s(&incarnation));
        it.insert(
            "metadata".into(),
            AttributeValue::M(
                new.metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), item::s(v)))
                    .collect(),
            ),
        );
        it.insert("created_at".into(), item::s(&created_at));
        it.insert("GSI4PK".into(), item::s(ns));
        it.insert("GSI4SK".into(), item::s(keys::entity_pk(ns, &new.id)));
        if let Some(parent) = &new.parent_id {
            it.insert("GSI1PK".into(), item::s(keys::parent_gsi1pk(ns, parent)));
            it.insert("GSI1SK".into(), item::s(keys::child_gsi1sk(&new.id)));
        }
        let put = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(it.clone()))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        if let Err(e) = put {
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
            {
                return Err(RepositoryError::AlreadyExists {
                    what: format!("entity {:?}", new.id),
                });
            }
            return Err(classify("PutItem", e));
        }
        let details = HashMap::from([
            ("name".to_string(), it["name"].clone()),
            ("parent_id".to_string(), it["parent_id"].clone()),
            ("cascade".to_string(), AttributeValue::Bool(new.cascade)),
            ("metadata".to_string(), it["metadata"].clone()),
        ]);
        self.audit(&new.id, AuditAction::EntityCreated, None, details)
            .await?;
        entity_from_item(&it)
    }

    /// Reads an entity.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id; the classified failure.
    pub async fn get_entity(&self, entity_id: &str) -> Result<Option<Entity>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        let out = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(
                keys::entity_pk(&self.scope.id, entity_id),
                keys::META_SK,
            )))
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        out.item.as_ref().map(entity_from_item).transpose()
    }

    /// The parent of `entity_id`, when it has one and the parent exists.
    ///
    /// # Errors
    /// [`RepositoryError::NotFound`] when `entity_id` does not exist.
    pub async fn parent(&self, entity_id: &str) -> Result<Option<Entity>, RepositoryError> {
        let entity =
            self.get_entity(entity_id)
                .await?
                .ok_or_else(|| RepositoryError::NotFound {
                    what: format!("entity {entity_id:?}"),
                })?;
        match entity.parent_id {
            Some(p) => self.get_entity(&p).await,
            None => Ok(None),
        }
    }

    /// The children of `parent_id` (every page of GSI1), sorted by id.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id; the classified failure.
    pub async fn children(&self, parent_id: &str) -> Result<Vec<Entity>, RepositoryError> {
        ids::validate_entity_id(parent_id)?;
        let mut out = self
            .query_items(
                Some("GSI1"),
                "GSI1PK = :p",
                &[(":p", keys::parent_gsi1pk(&self.scope.id, parent_id))],
            )
            .await?
            .iter()
            .map(entity_from_item)
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Every item of a query (all pages), optionally on an index.
    pub(crate) async fn query_items(
        &self,
        index: Option<&str>,
        condition: &str,
        values: &[(&str, String)],
    ) -> Result<Vec<Item>, RepositoryError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let mut q = self
                .shared
                .client
                .query()
                .table_name(&self.shared.table)
                .set_index_name(index.map(str::to_string))
                .key_condition_expression(condition)
                .set_exclusive_start_key(start);
            for (k, v) in values {
                q = q.expression_attribute_values(*k, item::s(v));
            }
            let page = q.send().await.map_err(|e| classify("Query", e))?;
            out.extend(page.items().iter().cloned());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Every key (`PK`, `SK`) of a query (all pages), optionally on an index.
    pub(crate) async fn query_keys(
        &self,
        index: Option<&str>,
        condition: &str,
        values: &[(&str, String)],
    ) -> Result<Vec<Item>, RepositoryError> {
        Ok(self
            .query_items(index, condition, values)
            .await?
            .iter()
            .filter_map(|found| {
                Some(item::key(
                    item::get_s(found, "PK")?,
                    item::get_s(found, "SK")?,
                ))
            })
            .collect())
    }

    /// Deletes an entity and every item that belongs to it — operation records, then bucket
    /// shards, then its configs and usage snapshots, its metadata last — each phase landed
    /// before the next. Audit events are kept (they are the record of the deletion). Returns
    /// the number of items deleted; 0 when nothing was there.
    ///
    /// # Errors
    /// [`RepositoryError::Unavailable`] when items remain unprocessed (run again to finish);
    /// the classified failure.
    pub async fn delete_entity(&self, entity_id: &str) -> Result<usize, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        let ns = &self.scope.id;
        let entity_pk = keys::entity_pk(ns, entity_id);
        let own = self
            .query_keys(None, "PK = :pk", &[(":pk", entity_pk.clone())])
            .await?;
        let buckets = self
            .query_keys(
                Some("GSI3"),
                "GSI3PK = :pk AND begins_with(GSI3SK, :b)",
                &[(":pk", entity_pk.clone()), (":b", "BUCKET#".into())],
            )
            .await?;
        let mut ops = Vec::new();
        let mut partitions: Vec<String> = buckets
            .iter()
            .filter_map(|k| item::get_s(k, "PK").map(str::to_string))
            .collect();
        partitions.sort();
        partitions.dedup();
        for pk in &partitions {
            ops.extend(
                self.query_keys(
                    None,
                    "PK = :pk AND begins_with(SK, :op)",
                    &[(":pk", pk.clone()), (":op", keys::OP_SK_PREFIX.into())],
                )
                .await?,
            );
        }
        let (meta, rest): (Vec<Item>, Vec<Item>) = own
            .into_iter()
            .partition(|k| item::get_s(k, "SK") == Some(keys::META_SK));
        let mut deleted = 0;
        for phase in [ops, buckets, rest, meta] {
            deleted += self.batch_delete(phase).await?;
        }
        if deleted > 0 {
            let details = HashMap::from([
                ("records_deleted".to_string(), item::n(deleted)),
                ("complete".to_string(), AttributeValue::Bool(true)),
            ]);
            self.audit(entity_id, AuditAction::EntityDeleted, None, details)
                .await?;
        }
        Ok(deleted)
    }
}
