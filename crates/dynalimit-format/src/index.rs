//! Whether an item a secondary index returned belongs to the namespace that queried it.
//!
//! IAM isolates namespaces by the base table's partition key alone (`dynamodb:LeadingKeys`
//! on `{ns}/…`): a principal of namespace A may write any attribute of its own items, index
//! keys included, so an item of A can carry `GSI2PK = B/RESOURCE#gpt-4` and show up in B's
//! queries of GSI2. An index result is therefore used only when its base-table `PK` lies in
//! the namespace that asked, and its index keys are the ones the format derives from its base
//! key (§1.4): a bucket's from its `PK`, a snapshot's and an entity configuration's from
//! `PK` and `SK`, a child's from its `PK`. Every reader of GSI1–GSI4 calls [`check`].
//!
//! ```
//! use dynalimit_format::index::{Foreign, check};
//! use dynalimit_format::item::{Item, s};
//! use dynalimit_format::schema::GSI2;
//!
//! let bucket = |pk: &str, gsi2pk: &str| -> Item {
//!     [
//!         ("PK".to_string(), s(pk)),
//!         ("SK".to_string(), s("#STATE")),
//!         ("GSI2PK".to_string(), s(gsi2pk)),
//!         ("GSI2SK".to_string(), s("BUCKET#u1#0")),
//!     ]
//!     .into()
//! };
//! let own = bucket("b/BUCKET#u1#gpt-4#0", "b/RESOURCE#gpt-4");
//! assert_eq!(check("b", GSI2, &own), Ok(()));
//! // Written by namespace `a` with an index key naming `b`.
//! let planted = bucket("a/BUCKET#u1#gpt-4#0", "b/RESOURCE#gpt-4");
//! assert_eq!(check("b", GSI2, &planted), Err(Foreign::Namespace));
//! ```

use crate::item::{Item, get_s};
use crate::schema::{GSI1, GSI2, GSI3, GSI4};
use crate::{attr, keys};

/// Why an index result is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Its base-table `PK` is missing or lies in another namespace.
    Namespace,
    /// It lies in the namespace, but its index keys are not the ones its base key implies
    /// (or the index does not hold items of its kind).
    Keys,
}

impl Foreign {
    /// The label of the reason, for metrics: `namespace` or `keys`.
    pub fn as_str(self) -> &'static str {
        match self {
            Foreign::Namespace => "namespace",
            Foreign::Keys => "keys",
        }
    }
}

/// Checks that `found`, returned by a query of `index` (`GSI1` … `GSI4`) made for namespace
/// `ns`, is an item of `ns` whose `index` keys follow from its base key.
///
/// # Errors
/// [`Foreign::Namespace`] for an item of another namespace, [`Foreign::Keys`] for index keys
/// its base key does not imply.
pub fn check(ns: &str, index: &str, found: &Item) -> Result<(), Foreign> {
    let pk = get_s(found, attr::PK).ok_or(Foreign::Namespace)?;
    let in_namespace = pk
        .strip_prefix(ns)
        .is_some_and(|rest| rest.starts_with('/'));
    if ns.is_empty() || !in_namespace {
        return Err(Foreign::Namespace);
    }
    let sk = get_s(found, attr::SK).ok_or(Foreign::Keys)?;
    let (pk_attr, sk_attr) = match index {
        GSI1 => (attr::GSI1PK, attr::GSI1SK),
        GSI2 => (attr::GSI2PK, attr::GSI2SK),
        GSI3 => (attr::GSI3PK, attr::GSI3SK),
        GSI4 => (attr::GSI4PK, attr::GSI4SK),
        _ => return Err(Foreign::Keys),
    };
    let stored = (get_s(found, pk_attr), get_s(found, sk_attr));
    let consistent = match derived(ns, index, pk, sk, found) {
        Derived::Both(p, s) => stored == (Some(p.as_str()), Some(s.as_str())),
        Derived::Partition(p) => stored.0 == Some(p.as_str()),
        Derived::None => false,
    };
    if consistent {
        Ok(())
    } else {
        Err(Foreign::Keys)
    }
}

/// What the format derives for one index from an item's base key.
enum Derived {
    /// Both index keys.
    Both(String, String),
    /// The index partition key alone (the sort key is free or unknown for the kind).
    Partition(String),
    /// The index holds no item of this kind.
    None,
}

fn derived(ns: &str, index: &str, pk: &str, sk: &str, found: &Item) -> Derived {
    if sk == keys::STATE_SK {
        let Some(b) = keys::parse_bucket_pk(pk).filter(|b| b.namespace_id == ns) else {
            return Derived::None;
        };
        let (e, r, shard) = (&b.entity_id, &b.resource, b.shard);
        return match index {
            GSI2 => Derived::Both(keys::resource_pk(ns, r), keys::bucket_gsi2sk(e, shard)),
            GSI3 => Derived::Both(keys::entity_pk(ns, e), keys::bucket_gsi3sk(r, shard)),
            GSI4 => Derived::Both(ns.to_owned(), keys::bucket_gsi4sk(e, r, shard)),
            _ => Derived::None,
        };
    }
    if let Some(limit) = sk.strip_prefix(keys::SLOTS_SK_PREFIX) {
        let Some(b) = keys::parse_bucket_pk(pk).filter(|b| b.namespace_id == ns && b.shard == 0)
        else {
            return Derived::None;
        };
        let (e, r) = (&b.entity_id, &b.resource);
        return match index {
            GSI3 => Derived::Both(keys::entity_pk(ns, e), crate::slot::slots_gsi3sk(r, limit)),
            GSI4 => Derived::Both(ns.to_owned(), crate::slot::slots_gsi4sk(e, r, limit)),
            _ => Derived::None,
        };
    }
    if let Some((limit, minute)) = crate::refusal::parse_refused_sk(sk) {
        let Some(b) = keys::parse_bucket_pk(pk).filter(|b| b.namespace_id == ns && b.shard == 0)
        else {
            return Derived::None;
        };
        let (e, r, m) = (&b.entity_id, &b.resource, &crate::refusal::padded(minute));
        return match index {
            GSI3 => Derived::Both(
                keys::entity_pk(ns, e),
                crate::refusal::refused_gsi3sk(r, limit, m),
            ),
            GSI4 => Derived::Both(
                ns.to_owned(),
                crate::refusal::refused_gsi4sk(e, r, limit, m),
            ),
            _ => Derived::None,
        };
    }
    if index == GSI4 {
        // Every item of the namespace is in its GSI4 partition, under sort keys of its kind.
        return Derived::Partition(ns.to_owned());
    }
    let Some(entity) = pk
        .strip_prefix(&keys::entity_pk(ns, ""))
        .filter(|e| !e.is_empty())
    else {
        return Derived::None;
    };
    match index {
        GSI1 if sk == keys::META_SK => match get_s(found, attr::PARENT_ID) {
            Some(parent) => {
                Derived::Both(keys::parent_gsi1pk(ns, parent), keys::child_gsi1sk(entity))
            }
            None => Derived::None,
        },
        GSI2 => match sk
            .strip_prefix(keys::USAGE_SK_PREFIX)
            .and_then(|rest| rest.split_once('#'))
        {
            Some((resource, window_key)) => Derived::Both(
                keys::resource_pk(ns, resource),
                keys::usage_gsi2sk(window_key, entity),
            ),
            None => Derived::None,
        },
        GSI3 => match sk.strip_prefix(keys::CONFIG_SK_PREFIX) {
            Some(resource) => {
                Derived::Both(keys::entity_config_gsi3pk(ns, resource), entity.to_owned())
            }
            // An item of the entity's partition (a pre-0.9 bucket) is discovered under
            // the entity's own key.
            None => Derived::Partition(pk.to_owned()),
        },
        _ => Derived::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::s;

    fn item(pairs: &[(&str, &str)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), s(*v)))
            .collect()
    }

    fn bucket(pk_ns: &str, index_ns: &str) -> Item {
        item(&[
            ("PK", &keys::bucket_pk(pk_ns, "u1", "gpt-4", 2)),
            ("SK", "#STATE"),
            ("GSI2PK", &keys::resource_pk(index_ns, "gpt-4")),
            ("GSI2SK", "BUCKET#u1#2"),
            ("GSI3PK", &keys::entity_pk(index_ns, "u1")),
            ("GSI3SK", "BUCKET#gpt-4#2"),
            ("GSI4PK", index_ns),
            ("GSI4SK", "BUCKET#u1#gpt-4#2"),
        ])
    }

    #[test]
    fn a_bucket_of_the_namespace_passes_every_index_it_is_in() {
        let own = bucket("ns1", "ns1");
        for index in [GSI2, GSI3, GSI4] {
            assert_eq!(check("ns1", index, &own), Ok(()), "{index}");
        }
        assert_eq!(check("ns1", GSI1, &own), Err(Foreign::Keys));
    }

    #[test]
    fn an_item_of_another_namespace_is_foreign_whatever_its_index_keys_say() {
        let planted = bucket("ns2", "ns1");
        for index in [GSI1, GSI2, GSI3, GSI4] {
            assert_eq!(check("ns1", index, &planted), Err(Foreign::Namespace));
        }
        // A namespace whose id is a prefix of another's.
        assert_eq!(
            check("ns", GSI2, &bucket("ns1", "ns")),
            Err(Foreign::Namespace)
        );
        assert_eq!(
            check("", GSI4, &item(&[("PK", "/x"), ("SK", "#META")])),
            Err(Foreign::Namespace)
        );
        assert_eq!(check("ns1", GSI4, &Item::new()), Err(Foreign::Namespace));
    }

    #[test]
    fn index_keys_the_base_key_does_not_imply_are_refused() {
        // Another entity's partition on GSI3, another resource on GSI2, another shard.
        let mut moved = bucket("ns1", "ns1");
        moved.insert("GSI3PK".into(), s(keys::entity_pk("ns1", "u2")));
        moved.insert("GSI2SK".into(), s("BUCKET#u1#3"));
        assert_eq!(check("ns1", GSI3, &moved), Err(Foreign::Keys));
        assert_eq!(check("ns1", GSI2, &moved), Err(Foreign::Keys));
        assert_eq!(check("ns1", GSI4, &moved), Ok(()));
        let mut unkeyed = bucket("ns1", "ns1");
        unkeyed.remove("GSI4SK");
        assert_eq!(check("ns1", GSI4, &unkeyed), Err(Foreign::Keys));
        assert_eq!(
            check("ns1", "LSI1", &bucket("ns1", "ns1")),
            Err(Foreign::Keys)
        );
    }

    #[test]
    fn a_slots_item_is_indexed_under_its_entity_and_namespace() {
        let slots = |gsi3sk: &str| {
            let mut it = item(&[
                ("GSI3PK", &keys::entity_pk("ns1", "u1")),
                ("GSI3SK", gsi3sk),
                ("GSI4PK", "ns1"),
                ("GSI4SK", "SLOTS#u1#gpt-4#streams"),
            ]);
            it.extend(crate::slot::slots_key("ns1", "u1", "gpt-4", "streams"));
            it
        };
        assert_eq!(check("ns1", GSI3, &slots("SLOTS#gpt-4#streams")), Ok(()));
        assert_eq!(check("ns1", GSI4, &slots("SLOTS#gpt-4#streams")), Ok(()));
        assert_eq!(
            check("ns1", GSI3, &slots("SLOTS#gpt-4#other")),
            Err(Foreign::Keys)
        );
        assert_eq!(
            check("ns1", GSI2, &slots("SLOTS#gpt-4#streams")),
            Err(Foreign::Keys)
        );
    }

    #[test]
    fn a_refusal_minute_is_indexed_under_its_entity_and_namespace() {
        let of = crate::refusal::Of {
            ns: "ns1",
            entity: "u1",
            resource: "gpt-4",
            limit: "rpm",
        };
        let refused = |gsi3sk: &str| {
            let mut it = item(&[
                ("GSI3PK", &keys::entity_pk("ns1", "u1")),
                ("GSI3SK", gsi3sk),
                ("GSI4PK", "ns1"),
                ("GSI4SK", "REFUSED#u1#gpt-4#rpm#0029000000"),
            ]);
            it.extend(of.refused_key(29_000_000));
            it
        };
        let own = refused("REFUSED#gpt-4#rpm#0029000000");
        assert_eq!(check("ns1", GSI3, &own), Ok(()));
        assert_eq!(check("ns1", GSI4, &own), Ok(()));
        assert_eq!(check("ns1", GSI2, &own), Err(Foreign::Keys));
        // Another minute, another limit.
        for wrong in [
            "REFUSED#gpt-4#rpm#0029000001",
            "REFUSED#gpt-4#tpm#0029000000",
        ] {
            assert_eq!(check("ns1", GSI3, &refused(wrong)), Err(Foreign::Keys));
        }
        // Only in shard 0.
        let mut moved = own.clone();
        moved.insert("PK".into(), s(keys::bucket_pk("ns1", "u1", "gpt-4", 1)));
        assert_eq!(check("ns1", GSI3, &moved), Err(Foreign::Keys));
    }

    #[test]
    fn snapshots_configs_children_and_namespace_items_are_checked_by_kind() {
        let snapshot = |gsi2sk: &str| {
            item(&[
                ("PK", &keys::entity_pk("ns1", "u1")),
                ("SK", &keys::usage_sk("gpt-4", "2026-03-10T00:00:00Z")),
                ("GSI2PK", &keys::resource_pk("ns1", "gpt-4")),
                ("GSI2SK", gsi2sk),
            ])
        };
        assert_eq!(
            check("ns1", GSI2, &snapshot("USAGE#2026-03-10T00:00:00Z#u1")),
            Ok(())
        );
        assert_eq!(
            check("ns1", GSI2, &snapshot("USAGE#2026-03-10T00:00:00Z#u2")),
            Err(Foreign::Keys)
        );
        let config = |gsi3sk: &str| {
            item(&[
                ("PK", &keys::entity_pk("ns1", "u1")),
                ("SK", &keys::entity_config_sk("gpt-4")),
                ("GSI3PK", &keys::entity_config_gsi3pk("ns1", "gpt-4")),
                ("GSI3SK", gsi3sk),
            ])
        };
        assert_eq!(check("ns1", GSI3, &config("u1")), Ok(()));
        assert_eq!(check("ns1", GSI3, &config("u9")), Err(Foreign::Keys));
        let child = |parent: &str| {
            item(&[
                ("PK", &keys::entity_pk("ns1", "u1")),
                ("SK", "#META"),
                ("parent_id", parent),
                ("GSI1PK", &keys::parent_gsi1pk("ns1", "org")),
                ("GSI1SK", &keys::child_gsi1sk("u1")),
            ])
        };
        assert_eq!(check("ns1", GSI1, &child("org")), Ok(()));
        assert_eq!(check("ns1", GSI1, &child("other")), Err(Foreign::Keys));
        let audit = item(&[
            ("PK", &keys::audit_pk("ns1", "u1")),
            ("SK", "#AUDIT#01J"),
            ("GSI4PK", "ns1"),
            ("GSI4SK", &keys::audit_pk("ns1", "u1")),
        ]);
        assert_eq!(check("ns1", GSI4, &audit), Ok(()));
        assert_eq!(check("ns1", GSI2, &audit), Err(Foreign::Keys));
        // The registry of the reserved namespace.
        let registry = item(&[
            ("PK", keys::SYSTEM_RESERVED_PK),
            ("SK", "#NAMESPACE#alpha"),
            ("GSI4PK", "_"),
        ]);
        assert_eq!(check("_", GSI4, &registry), Ok(()));
    }
}
