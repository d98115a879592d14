//! Creating the table from the format's [`TABLE_SCHEMA`], and waiting for it.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    LocalSecondaryIndex, Projection, ProjectionType, ScalarAttributeType, StreamSpecification,
    StreamViewType, TimeToLiveSpecification,
};
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use dynalimit_format::schema::{IndexProjection, TABLE_SCHEMA};

use crate::RepositoryError;
use crate::error::classify;

fn key(name: &str, key_type: KeyType) -> Result<KeySchemaElement, RepositoryError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(|e| build_error(e.to_string()))
}

fn build_error(message: String) -> RepositoryError {
    RepositoryError::InvalidRequest {
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

/// Waits until `table` is `ACTIVE`, with the SDK's `TableExists` waiter (up to five
/// minutes).
///
/// # Errors
/// [`RepositoryError::Unavailable`] on time-out, or the classified failure.
pub(crate) async fn wait_active(client: &Client, table: &str) -> Result<(), RepositoryError> {
    match client
        .wait_until_table_exists()
        .table_name(table)
        .wait(Duration::from_secs(300))
        .await
    {
        Ok(_) => Ok(()),
        Err(WaiterError::ExceededMaxWait(_)) => Err(RepositoryError::Unavailable {
            operation: "DescribeTable",
            message: format!("table {table} did not become ACTIVE within five minutes"),
        }),
        Err(WaiterError::OperationFailed(failed)) => {
            Err(classify("DescribeTable", failed.into_error()))
        }
        Err(other) => Err(RepositoryError::Unavailable {
            operation: "DescribeTable",
            message: crate::error::error_chain(&other),
        }),
    }
}
