//! The table's keys and indexes (reference §1.2), defined once.
//!
//! [`TABLE_SCHEMA`] is the single source of truth: the repository builds its `CreateTable`
//! request from it, and the CloudFormation template in `infra/` is checked against it by a
//! test.

use crate::attr;

/// GSI1: a parent's children.
pub const GSI1: &str = "GSI1";
/// GSI2: per resource (buckets, usage snapshots).
pub const GSI2: &str = "GSI2";
/// GSI3: entity-config listing and bucket discovery per entity.
pub const GSI3: &str = "GSI3";
/// GSI4: every item of a namespace.
pub const GSI4: &str = "GSI4";

/// How much of an item an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexProjection {
    /// Every attribute.
    All,
    /// The table and index keys only.
    KeysOnly,
}

impl IndexProjection {
    /// The name DynamoDB and CloudFormation use (`ALL`, `KEYS_ONLY`).
    pub fn as_str(self) -> &'static str {
        match self {
            IndexProjection::All => "ALL",
            IndexProjection::KeysOnly => "KEYS_ONLY",
        }
    }
}

/// One secondary index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSchema {
    /// The index name.
    pub name: &'static str,
    /// Its partition key attribute (string).
    pub hash_key: &'static str,
    /// Its sort key attribute (string).
    pub range_key: &'static str,
    /// What it projects.
    pub projection: IndexProjection,
}

/// The whole table layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSchema {
    /// Partition key attribute of the table.
    pub hash_key: &'static str,
    /// Sort key attribute of the table.
    pub range_key: &'static str,
    /// Global secondary indexes.
    pub global_indexes: &'static [IndexSchema],
    /// Local secondary indexes (their hash key is the table's).
    pub local_indexes: &'static [IndexSchema],
    /// The time-to-live attribute (epoch seconds).
    pub ttl_attribute: &'static str,
    /// The stream view type.
    pub stream_view: &'static str,
    /// The billing mode.
    pub billing_mode: &'static str,
}

const fn index(
    name: &'static str,
    hash_key: &'static str,
    range_key: &'static str,
    projection: IndexProjection,
) -> IndexSchema {
    IndexSchema {
        name,
        hash_key,
        range_key,
        projection,
    }
}

/// The dynalimit / zae-limiter table: `PK`/`SK`, GSI1–GSI4, LSI1–LSI5 (reserved, never
/// written), TTL on `ttl`, a `NEW_AND_OLD_IMAGES` stream, on-demand billing.
pub const TABLE_SCHEMA: TableSchema = TableSchema {
    hash_key: attr::PK,
    range_key: attr::SK,
    global_indexes: &[
        index(GSI1, attr::GSI1PK, attr::GSI1SK, IndexProjection::All),
        index(GSI2, attr::GSI2PK, attr::GSI2SK, IndexProjection::All),
        index(GSI3, attr::GSI3PK, attr::GSI3SK, IndexProjection::KeysOnly),
        index(GSI4, attr::GSI4PK, attr::GSI4SK, IndexProjection::KeysOnly),
    ],
    local_indexes: &[
        index("LSI1", attr::PK, attr::LSI1SK, IndexProjection::All),
        index("LSI2", attr::PK, attr::LSI2SK, IndexProjection::KeysOnly),
        index("LSI3", attr::PK, attr::LSI3SK, IndexProjection::All),
        index("LSI4", attr::PK, attr::LSI4SK, IndexProjection::KeysOnly),
        index("LSI5", attr::PK, attr::LSI5SK, IndexProjection::All),
    ],
    ttl_attribute: attr::TTL,
    stream_view: "NEW_AND_OLD_IMAGES",
    billing_mode: "PAY_PER_REQUEST",
};

impl TableSchema {
    /// Every key attribute (table and indexes), each declared once, in a stable order.
    pub fn key_attributes(&self) -> Vec<&'static str> {
        let mut out = vec![self.hash_key, self.range_key];
        for i in self.global_indexes.iter().chain(self.local_indexes) {
            for a in [i.hash_key, i.range_key] {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifteen_key_attributes_are_declared_once() {
        let attrs = TABLE_SCHEMA.key_attributes();
        assert_eq!(attrs.len(), 15);
        let mut dedup = attrs.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), 15);
    }

    #[test]
    fn projections_match_the_reference() {
        let p: Vec<_> = TABLE_SCHEMA
            .global_indexes
            .iter()
            .map(|g| g.projection.as_str())
            .collect();
        assert_eq!(p, ["ALL", "ALL", "KEYS_ONLY", "KEYS_ONLY"]);
        let l: Vec<_> = TABLE_SCHEMA
            .local_indexes
            .iter()
            .map(|g| g.projection.as_str())
            .collect();
        assert_eq!(l, ["ALL", "KEYS_ONLY", "ALL", "KEYS_ONLY", "ALL"]);
    }
}
