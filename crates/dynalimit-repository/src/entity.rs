//! Entities (reference §1.4.4, §6.2): metadata, parent/child links, deletion.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::ids;
use dynalimit_format::audit::{AuditAction, COMPLETE_DETAIL, RECORDS_DELETED_DETAIL};
use dynalimit_format::entity::{self as format, Entity, NewEntity, meta_key};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::{self, Item};
use dynalimit_format::schema::{GSI1, GSI3};
use dynalimit_format::{attr, keys};

use crate::batch::{batch_delete, get_item};
use crate::error::classify;
use crate::namespace::absent;
use crate::page;
use crate::{Repository, RepositoryError};

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
        let incarnation = format!("{:016x}", rand::random::<u64>());
        let it = new.meta_item(ns, now, &incarnation);
        let condition = absent();
        let put = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(it.clone()))
            .with_expr(&condition)
            .send()
            .await;
        if let Err(e) = put {
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
            {
                return Err(RepositoryError::AlreadyExists {
                    what: format!("entity {:?}", new.id()),
                });
            }
            return Err(classify("PutItem", e));
        }
        let details = format::created_details(&it);
        self.audit(new.id(), AuditAction::EntityCreated, None, details)
            .await?;
        Ok(Entity::from_item(&it)?)
    }

    /// Reads an entity.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id; the classified failure.
    pub async fn get_entity(&self, entity_id: &str) -> Result<Option<Entity>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        self.read_entity(entity_id, false).await
    }

    /// An entity's META item, strongly consistent when `consistent`.
    pub(crate) async fn read_entity(
        &self,
        entity_id: &str,
        consistent: bool,
    ) -> Result<Option<Entity>, RepositoryError> {
        let key = meta_key(&self.scope.id, entity_id);
        let found = get_item(&self.shared.client, &self.shared.table, key, consistent).await?;
        Ok(found.as_ref().map(Entity::from_item).transpose()?)
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
        let mut e = Expr::default();
        let c = e.eq(
            attr::GSI1PK,
            item::s(keys::parent_gsi1pk(&self.scope.id, parent_id)),
        );
        e.when(c);
        let found = page::all_items(self.query(Some(GSI1), &e)).await?;
        let mut out = page::own_items(&self.scope.id, GSI1, found)
            .iter()
            .map(Entity::from_item)
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// A query of this repository's table, on `index` when given, with `e`'s key condition.
    pub(crate) fn query(
        &self,
        index: Option<&str>,
        e: &Expr,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        page::query(&self.shared.client, &self.shared.table, index, e)
    }

    /// Deletes an entity and every item that belongs to it — operation records,
    /// concurrency slots and refusal minutes, then bucket shards, then its configs and usage snapshots, its
    /// metadata last — each phase landed
    /// before the next. Audit events are kept (they are the record of the deletion). Returns
    /// the number of items deleted; 0 when nothing was there.
    ///
    /// # Errors
    /// [`RepositoryError::Unavailable`] when items remain unprocessed (run again to finish);
    /// the classified failure.
    pub async fn delete_entity(&self, entity_id: &str) -> Result<usize, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        self.scope.config.changed();
        let ns = &self.scope.id;
        let entity_pk = keys::entity_pk(ns, entity_id);
        let own = page::all_keys(self.query(None, &partition(&entity_pk, None))).await?;
        let mut discover = Expr::default();
        let c = discover.eq(attr::GSI3PK, item::s(&entity_pk));
        discover.when(c);
        let c = discover.begins_with(attr::GSI3SK, keys::BUCKET_INDEX_SK_PREFIX);
        discover.when(c);
        let found = page::all_items(self.query(Some(GSI3), &discover)).await?;
        let buckets: Vec<Item> = page::own_items(ns, GSI3, found)
            .iter()
            .filter_map(item::key_map_of)
            .collect();
        let mut ops = Vec::new();
        let mut partitions: Vec<String> = buckets
            .iter()
            .filter_map(|k| item::key_of(k).map(|(pk, _)| pk.to_owned()))
            .collect();
        partitions.sort();
        partitions.dedup();
        for pk in &partitions {
            let e = partition(pk, Some(keys::OP_SK_PREFIX));
            ops.extend(page::all_keys(self.query(None, &e)).await?);
        }
        // Concurrency slots and refusal minutes live in shard-0 bucket partitions, listed
        // under the entity too.
        for prefix in [
            dynalimit_format::slot::SLOTS_INDEX_SK_PREFIX,
            dynalimit_format::refusal::REFUSED_INDEX_SK_PREFIX,
        ] {
            let mut listed = Expr::default();
            let c = listed.eq(attr::GSI3PK, item::s(&entity_pk));
            listed.when(c);
            let c = listed.begins_with(attr::GSI3SK, prefix);
            listed.when(c);
            let found = page::all_items(self.query(Some(GSI3), &listed)).await?;
            ops.extend(
                page::own_items(ns, GSI3, found)
                    .iter()
                    .filter_map(item::key_map_of),
            );
        }
        let (meta, rest): (Vec<Item>, Vec<Item>) = own.into_iter().partition(format::is_meta);
        let mut deleted = 0;
        for phase in [ops, buckets, rest, meta] {
            deleted += batch_delete(&self.shared.client, &self.shared.table, phase).await?;
        }
        if deleted > 0 {
            let details = HashMap::from([
                (RECORDS_DELETED_DETAIL.to_string(), item::n(deleted)),
                (COMPLETE_DETAIL.to_string(), AttributeValue::Bool(true)),
            ]);
            self.audit(entity_id, AuditAction::EntityDeleted, None, details)
                .await?;
        }
        Ok(deleted)
    }
}

/// The key condition of partition `pk`, narrowed to sort keys starting with `prefix`.
pub(crate) fn partition(pk: &str, prefix: Option<&str>) -> Expr {
    let mut e = Expr::default();
    let c = e.eq(attr::PK, item::s(pk));
    e.when(c);
    if let Some(prefix) = prefix {
        let c = e.begins_with(attr::SK, prefix);
        e.when(c);
    }
    e
}
