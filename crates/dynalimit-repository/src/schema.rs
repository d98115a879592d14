//! The table schema (reference §1.2), defined once.
//!
//! [`TABLE_SCHEMA`] is the single source of truth: [`create_table`] builds the `CreateTable`
//! request from it, and the CloudFormation template in `infra/` is checked against it by a test.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    LocalSecondaryIndex, Projection, ProjectionType, ScalarAttributeType, StreamSpecification,
    StreamViewType, TableStatus, TimeToLiveSpecification,
};

use crate::RepositoryError;
use crate::error::classify;

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
    hash_key: "PK",
    range_key: "SK",
    global_indexes: &[
        index("GSI1", "GSI1PK", "GSI1SK", IndexProjection::All),
        index("GSI2", "GSI2PK", "GSI2SK", IndexProjection::All),
        index("GSI3", "GSI3PK", "GSI3SK", IndexProjection::KeysOnly),
        index("GSI4", "GSI4PK", "GSI4SK", IndexProjection::KeysOnly),
    ],
    local_indexes: &[
        index("LSI1", "PK", "LSI1SK", IndexProjection::All),
        index("LSI2", "PK", "LSI2SK", IndexProjection::KeysOnly),
        index("LSI3", "PK", "LSI3SK", IndexProjection::All),
        index("LSI4", "PK", "LSI4SK", IndexProjection::KeysOnly),
        index("LSI5", "PK", "LSI5SK", IndexProjection::All),
    ],
    ttl_attribute: "ttl",
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

fn key(name: &str, key_type: KeyType) -> Result<KeySchemaElement, RepositoryError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(|e| build_error(e.to_string()))
}

fn build_error(message: String) -> RepositoryError {
    RepositoryError::Rejected {
        operation: "CreateTable",
        code: "Build".into(),
        message,
    }
}

fn projection(p: IndexProjection) -> Projection {
    let t = match p {
        IndexProjection::All => ProjectionType::All,
        IndexProjection::KeysOnly => ProjectionType::KeysOnly,
    };
    Projection::builder().projection_type(t).build()
}

/// Creates `table` with [`TABLE_SCHEMA`], waits until it is `ACTIVE`, and enables TTL.
/// Succeeds without change when the table already exists.
///
/// # Errors
/// [`RepositoryError`] classified from the SDK failure.
pub async fn create_table(client: &Client, table: &str) -> Result<(), RepositoryError> {
    let s = TABLE_SCHEMA;
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(s.hash_key, KeyType::Hash)?)
        .key_schema(key(s.range_key, KeyType::Range)?)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(|e| build_error(e.to_string()))?,
        );
    for a in s.key_attributes() {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(a)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| build_error(e.to_string()))?,
        );
    }
    for g in s.global_indexes {
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(g.name)
                .key_schema(key(g.hash_key, KeyType::Hash)?)
                .key_schema(key(g.range_key, KeyType::Range)?)
                .projection(projection(g.projection))
                .build()
                .map_err(|e| build_error(e.to_string()))?,
        );
    }
    for l in s.local_indexes {
        request = request.local_secondary_indexes(
            LocalSecondaryIndex::builder()
                .index_name(l.name)
                .key_schema(key(l.hash_key, KeyType::Hash)?)
                .key_schema(key(l.range_key, KeyType::Range)?)
                .projection(projection(l.projection))
                .build()
                .map_err(|e| build_error(e.to_string()))?,
        );
    }
    match request.send().await {
        Ok(_) => {}
        Err(e) => {
            let in_use = e
                .as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception());
            if !in_use {
                return Err(classify("CreateTable", e));
            }
        }
    }
    wait_active(client, table).await?;
    let ttl = client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(s.ttl_attribute)
                .enabled(true)
                .build()
                .map_err(|e| build_error(e.to_string()))?,
        )
        .send()
        .await;
    if let Err(e) = ttl {
        // Enabling TTL twice is refused with a ValidationException; that is success here.
        let already = e
            .as_service_error()
            .and_then(|s| aws_sdk_dynamodb::error::ProvideErrorMetadata::message(s))
            .is_some_and(|m| m.contains("already enabled"));
        if !already {
            return Err(classify("UpdateTimeToLive", e));
        }
    }
    Ok(())
}

/// Waits until `table` is `ACTIVE` (polling `DescribeTable`, up to five minutes).
///
/// # Errors
/// [`RepositoryError::TableNotFound`] if it disappears, [`RepositoryError::Unavailable`] on
/// time-out.
pub async fn wait_active(client: &Client, table: &str) -> Result<(), RepositoryError> {
    for _ in 0..600 {
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| classify("DescribeTable", e))?;
        let status = out.table().and_then(|t| t.table_status().cloned());
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    Err(RepositoryError::Unavailable {
        operation: "DescribeTable",
        message: format!("table {table} did not become ACTIVE within five minutes"),
    })
}

/// True when `table` exists.
///
/// # Errors
/// Any failure other than "not found".
pub async fn table_exists(client: &Client, table: &str) -> Result<bool, RepositoryError> {
    match client.describe_table().table_name(table).send().await {
        Ok(_) => Ok(true),
        Err(e) => {
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception())
            {
                Ok(false)
            } else {
                Err(classify("DescribeTable", e))
            }
        }
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
