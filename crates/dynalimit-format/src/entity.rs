//! Entity metadata (reference §1.4.4): `{ns}/ENTITY#{id}` / `#META`.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::{CoreError, ids};

use crate::FormatError;
use crate::attr;
use crate::item::{self, Item};
use crate::keys;

/// The move of entity `entity_id` to `parent` (or to no parent) on its META item (reference
/// §12.5): `parent_id` (NULL for none), the parent index keys (removed for none) and the
/// parent generation raised by one; `cascade` is left as it is. Conditioned on the entity
/// existing. Sent twice (a lost answer retried), it raises the generation twice: generations
/// only order owner stamps, and the stamps that follow are read from META.
pub fn parent_move(ns: &str, entity_id: &str, parent: Option<&str>) -> crate::expr::Expr {
    let mut e = crate::expr::Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    match parent {
        Some(p) => {
            e.set(attr::PARENT_ID, item::s(p));
            e.set(attr::GSI1PK, item::s(keys::parent_gsi1pk(ns, p)));
            e.set(attr::GSI1SK, item::s(keys::child_gsi1sk(entity_id)));
        }
        None => {
            e.set(attr::PARENT_ID, AttributeValue::Null(true));
            e.remove(attr::GSI1PK);
            e.remove(attr::GSI1SK);
        }
    }
    e.set_incremented(attr::PGEN, 1);
    e
}

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

impl Entity {
    /// Decodes a META item.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`] when it has no `entity_id`.
    pub fn from_item(found: &Item) -> Result<Entity, FormatError> {
        let id = item::require_s(found, attr::ENTITY_ID)?;
        Ok(Entity {
            name: item::get_s(found, attr::NAME).unwrap_or(&id).to_string(),
            parent_id: item::get_s(found, attr::PARENT_ID).map(str::to_string),
            cascade: item::get_bool(found, attr::CASCADE).unwrap_or(false),
            metadata: match found.get(attr::METADATA) {
                Some(AttributeValue::M(m)) => m
                    .iter()
                    .filter_map(|(k, v)| v.as_s().ok().map(|v| (k.clone(), v.clone())))
                    .collect(),
                _ => BTreeMap::new(),
            },
            created_at: item::get_s(found, attr::CREATED_AT)
                .unwrap_or("")
                .to_string(),
            parent_generation: item::get_i64(found, attr::PGEN).unwrap_or(0),
            incarnation: item::get_s(found, attr::PINC).map(str::to_string),
            id,
        })
    }
}

/// What to create.
///
/// ```
/// use dynalimit_format::entity::NewEntity;
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

    /// Checks the id and the parent's (not the entity itself).
    ///
    /// # Errors
    /// [`CoreError::InvalidIdentifier`] for a bad id or an entity that is its own parent.
    pub fn validate(&self) -> Result<(), CoreError> {
        ids::validate_entity_id(&self.id)?;
        if let Some(p) = &self.parent_id {
            ids::validate_entity_id(p)?;
            if p == &self.id {
                return Err(CoreError::invalid_identifier(
                    "parent_id",
                    p,
                    "an entity cannot be its own parent",
                ));
            }
        }
        Ok(())
    }

    /// The META item of the new entity, created at `now` (epoch ms) with `incarnation`:
    /// `pgen` is the creation instant, `parent_id` NULL without a parent, GSI1 keys only
    /// with one.
    pub fn meta_item(&self, ns: &str, now: i64, incarnation: &str) -> Item {
        let mut it = meta_key(ns, &self.id);
        let name = self.name.clone().unwrap_or_else(|| self.id.clone());
        let metadata = self
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), item::s(v)))
            .collect();
        for (attr, value) in [
            (attr::ENTITY_ID, item::s(&self.id)),
            (attr::NAME, item::s(name)),
            (attr::PARENT_ID, item::s_or_null(self.parent_id.as_deref())),
            (attr::CASCADE, AttributeValue::Bool(self.cascade)),
            (attr::PGEN, item::n(now)),
            (attr::PINC, item::s(incarnation)),
            (attr::METADATA, AttributeValue::M(metadata)),
            (
                attr::CREATED_AT,
                item::s(dynalimit_core::time::iso_seconds(now)),
            ),
            (attr::GSI4PK, item::s(ns)),
            (attr::GSI4SK, item::s(keys::entity_pk(ns, &self.id))),
        ] {
            it.insert(attr.to_owned(), value);
        }
        if let Some(parent) = &self.parent_id {
            it.insert(
                attr::GSI1PK.into(),
                item::s(keys::parent_gsi1pk(ns, parent)),
            );
            it.insert(attr::GSI1SK.into(), item::s(keys::child_gsi1sk(&self.id)));
        }
        it
    }
}

/// The key of an entity's META item.
pub fn meta_key(ns: &str, entity_id: &str) -> Item {
    item::key(keys::entity_pk(ns, entity_id), keys::META_SK)
}

/// The audit details of a created entity: its name, parent, cascade flag and metadata as
/// written on `meta`.
pub fn created_details(meta: &Item) -> HashMap<String, AttributeValue> {
    [attr::NAME, attr::PARENT_ID, attr::CASCADE, attr::METADATA]
        .into_iter()
        .filter_map(|a| Some((a.to_owned(), meta.get(a)?.clone())))
        .collect()
}

/// Whether a key of the entity partition is its META item.
pub fn is_meta(key: &Item) -> bool {
    item::get_s(key, attr::SK) == Some(keys::META_SK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_entity_round_trips() {
        let new = NewEntity::new("k1")
            .parent("p1")
            .cascade(true)
            .metadata("owner", "a");
        let meta = new.meta_item("ns", 1_700_000_000_000, "00ff");
        let e = Entity::from_item(&meta).unwrap();
        assert_eq!(e.id, "k1");
        assert_eq!(e.name, "k1");
        assert_eq!(e.parent_id.as_deref(), Some("p1"));
        assert!(e.cascade);
        assert_eq!(e.metadata["owner"], "a");
        assert_eq!(e.created_at, "2023-11-14T22:13:20Z");
        assert_eq!(e.parent_generation, 1_700_000_000_000);
        assert_eq!(e.incarnation.as_deref(), Some("00ff"));
        assert_eq!(item::get_s(&meta, "GSI1PK"), Some("ns/PARENT#p1"));
        assert_eq!(item::get_s(&meta, "GSI1SK"), Some("CHILD#k1"));
        assert!(is_meta(&meta));
        let details = created_details(&meta);
        assert_eq!(details.len(), 4);
        let orphan = NewEntity::new("k2").meta_item("ns", 0, "x");
        assert!(item::is_null(orphan.get("parent_id")));
        assert!(!orphan.contains_key("GSI1PK"));
    }
}
