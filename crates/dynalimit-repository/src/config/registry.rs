//! The registries of resources with defaults and with entity configs, and the listing of
//! entities with their own limits.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::ids;
use dynalimit_format::config::{
    counted_resources, entity_config_registry_key, registered_resources, resources_registry_key,
};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::{self, Item};
use dynalimit_format::schema::GSI3;
use dynalimit_format::{attr, keys};

use crate::batch::get_item;
use crate::error::classify;
use crate::page::{self, decode_cursor, encode_cursor};
use crate::{Repository, RepositoryError};

impl Repository {
    /// Adds `resource` to the registry of resources with defaults (`ADD resources`, setting
    /// the GSI4 keys when the registry is new), or removes it (`DELETE resources`). Both are
    /// set operations, so running one again after a lost answer changes nothing.
    pub(super) async fn register_resource(
        &self,
        resource: &str,
        add: bool,
    ) -> Result<(), RepositoryError> {
        let ns = &self.scope.id;
        let value = AttributeValue::Ss(vec![resource.to_string()]);
        let mut e = Expr::default();
        if add {
            e.add_value(attr::RESOURCES, value);
            e.set_if_absent(attr::GSI4PK, item::s(ns));
            e.set_if_absent(attr::GSI4SK, item::s(keys::system_pk(ns)));
        } else {
            e.delete(attr::RESOURCES, value);
        }
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(resources_registry_key(ns)))
            .with_expr(&e)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("UpdateItem", e))
    }

    async fn read_registry(&self, key: Item) -> Result<Option<Item>, RepositoryError> {
        get_item(&self.shared.client, &self.shared.table, key, false).await
    }

    /// Resources that have default limits, sorted.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_resources_with_defaults(&self) -> Result<Vec<String>, RepositoryError> {
        let mut found = self
            .read_registry(resources_registry_key(&self.scope.id))
            .await?
            .as_ref()
            .map(registered_resources)
            .unwrap_or_default();
        found.sort();
        Ok(found)
    }

    /// Resources for which some entity has its own limits, sorted.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_resources_with_entity_configs(&self) -> Result<Vec<String>, RepositoryError> {
        let mut out = self
            .read_registry(entity_config_registry_key(&self.scope.id))
            .await?
            .as_ref()
            .map(counted_resources)
            .unwrap_or_default();
        out.sort();
        Ok(out)
    }

    /// Entities with their own limits on `resource` (`_default_` included), in pages of at
    /// most `limit`; pass the returned cursor to continue.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad resource, limit or cursor; the classified
    /// failure.
    pub async fn list_entities_with_custom_limits(
        &self,
        resource: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), RepositoryError> {
        ids::validate_config_resource(resource)?;
        let size = page::page_size(limit, 1000)?;
        let start = cursor.map(decode_cursor).transpose()?;
        let mut e = Expr::default();
        let c = e.eq(
            attr::GSI3PK,
            item::s(keys::entity_config_gsi3pk(&self.scope.id, resource)),
        );
        e.when(c);
        let mut out = self
            .query(Some(GSI3), &e)
            .limit(size)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", e))?;
        let found = out.items.take().unwrap_or_default();
        let ids = page::own_items(&self.scope.id, GSI3, found)
            .iter()
            .filter_map(|it| item::get_s(it, attr::GSI3SK).map(str::to_string))
            .collect();
        let next = out
            .last_evaluated_key
            .filter(|k| !k.is_empty())
            .map(|k| encode_cursor(&k));
        Ok((ids, next))
    }
}
