//! The namespace registry (reference §1.4.1–§1.4.2, §5): a forward record per name and a
//! reverse record per id, both under `_/SYSTEM#`.

use crate::FormatError;
use crate::attr;
use crate::item::{self, Item};
use crate::keys;

/// The status of a namespace in use.
pub const ACTIVE: &str = "active";
/// The status of a soft-deleted namespace (its data stays until purged).
pub const DELETED: &str = "deleted";
/// The status of a namespace whose items are being deleted.
pub const PURGING: &str = "purging";

/// A registered namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The name users choose.
    pub name: String,
    /// The opaque id that prefixes the namespace's keys.
    pub id: String,
    /// [`ACTIVE`], [`DELETED`] or [`PURGING`].
    pub status: String,
    /// When it was registered (`YYYY-MM-DDTHH:MM:SSZ`).
    pub created_at: String,
    /// When it was soft-deleted.
    pub deleted_at: Option<String>,
}

impl NamespaceInfo {
    /// Decodes a forward or reverse record.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`] when its name or id is missing.
    pub fn from_item(found: &Item) -> Result<NamespaceInfo, FormatError> {
        Ok(NamespaceInfo {
            name: item::require_s(found, attr::NAMESPACE_NAME)?,
            id: item::require_s(found, attr::NAMESPACE_ID)?,
            status: item::get_s(found, attr::STATUS)
                .unwrap_or(ACTIVE)
                .to_string(),
            created_at: item::get_s(found, attr::CREATED_AT)
                .unwrap_or("")
                .to_string(),
            deleted_at: item::get_s(found, attr::DELETED_AT).map(str::to_string),
        })
    }
}

/// The key of the forward record of `name`.
pub fn forward_key(name: &str) -> Item {
    item::key(keys::SYSTEM_RESERVED_PK, keys::namespace_sk(name))
}

/// The key of the reverse record of `id`.
pub fn reverse_key(id: &str) -> Item {
    item::key(keys::SYSTEM_RESERVED_PK, keys::nsid_sk(id))
}

/// An active record of namespace `name` with id `id` under `key` (a forward or reverse key).
pub fn record(key: Item, name: &str, id: &str, created_at: &str) -> Item {
    let mut it = key;
    for (attr, value) in [
        (attr::NAMESPACE_ID, id),
        (attr::NAMESPACE_NAME, name),
        (attr::STATUS, ACTIVE),
        (attr::CREATED_AT, created_at),
        (attr::GSI4PK, keys::RESERVED_NS),
        (attr::GSI4SK, keys::SYSTEM_RESERVED_PK),
    ] {
        it.insert(attr.to_owned(), item::s(value));
    }
    it
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let forward = record(
            forward_key("tenant a"),
            "tenant a",
            "abc",
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(item::get_s(&forward, "SK"), Some("#NAMESPACE#tenant a"));
        let info = NamespaceInfo::from_item(&forward).unwrap();
        assert_eq!(info.name, "tenant a");
        assert_eq!(info.id, "abc");
        assert_eq!(info.status, ACTIVE);
        assert_eq!(info.deleted_at, None);
        let reverse = record(reverse_key("abc"), "tenant a", "abc", "x");
        assert_eq!(item::get_s(&reverse, "SK"), Some("#NSID#abc"));
        assert!(NamespaceInfo::from_item(&item::key("a", "b")).is_err());
    }
}
