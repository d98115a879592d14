//! Reads by key, and batch reads and deletes with the retries of unprocessed keys and items
//! that DynamoDB asks of every batch caller.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{DeleteRequest, KeysAndAttributes, WriteRequest};
use dynalimit_format::item::{self, Item};

use crate::RepositoryError;
use crate::error::classify;
use crate::retry::RetryBackoff;

/// Retries of the unprocessed keys or items of one batch request.
const UNPROCESSED_RETRIES: u32 = 5;

/// Reads the item at `key` of `table` (`GetItem`), strongly consistent when `consistent`.
///
/// # Errors
/// The classified failure.
pub(crate) async fn get_item(
    client: &Client,
    table: &str,
    key: Item,
    consistent: bool,
) -> Result<Option<Item>, RepositoryError> {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(key))
        .set_consistent_read(consistent.then_some(true))
        .send()
        .await
        .map(|out| out.item)
        .map_err(|e| classify("GetItem", e))
}

/// Reads `keys` (at most 100) of `table` with `BatchGetItem`, strongly consistent when
/// `consistent`, retrying unprocessed keys with [`RetryBackoff::UNPROCESSED`]. Returns the items
/// found, in no particular order.
///
/// # Errors
/// The classified failure of a request, or [`RepositoryError::Throttled`] when keys are
/// still unprocessed after the retries.
pub async fn batch_get_items(
    client: &Client,
    table: &str,
    keys: Vec<Item>,
    consistent: bool,
) -> Result<Vec<Item>, RepositoryError> {
    let mut found = Vec::new();
    let mut pending = keys;
    let mut retry = 0;
    while !pending.is_empty() {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(std::mem::take(&mut pending)))
            .set_consistent_read(consistent.then_some(true))
            .build()
            .map_err(|e| RepositoryError::InvalidRequest {
                operation: "BatchGetItem",
                code: "ConstructionFailure".into(),
                message: e.to_string(),
            })?;
        let out = client
            .batch_get_item()
            .request_items(table, request)
            .send()
            .await
            .map_err(|e| classify("BatchGetItem", e))?;
        if let Some(mut responses) = out.responses {
            found.extend(responses.remove(table).unwrap_or_default());
        }
        pending = out
            .unprocessed_keys
            .and_then(|mut u| u.remove(table))
            .map(|k| k.keys)
            .unwrap_or_default();
        if pending.is_empty() {
            break;
        }
        retry += 1;
        if retry > UNPROCESSED_RETRIES {
            return Err(RepositoryError::Throttled {
                operation: "BatchGetItem",
                message: format!("{} keys unprocessed after retries", pending.len()),
            });
        }
        RetryBackoff::UNPROCESSED.pause(retry).await;
    }
    Ok(found)
}

/// Deletes `keys` of `table` with `BatchWriteItem` in groups of 25, retrying unprocessed
/// items with [`RetryBackoff::UNPROCESSED`]. Returns how many were deleted. Deleting is
/// idempotent, so a lost answer is harmless: running the call again finishes the job.
///
/// # Errors
/// The classified failure of a request, or [`RepositoryError::Unavailable`] when items are
/// still unprocessed after the retries.
pub(crate) async fn batch_delete(
    client: &Client,
    table: &str,
    keys: Vec<Item>,
) -> Result<usize, RepositoryError> {
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
        let mut retry = 0;
        while !pending.is_empty() {
            let sent = pending.len();
            let out = client
                .batch_write_item()
                .request_items(table, std::mem::take(&mut pending))
                .send()
                .await
                .map_err(|e| classify("BatchWriteItem", e))?;
            pending = out
                .unprocessed_items
                .and_then(|mut m| m.remove(table))
                .unwrap_or_default();
            deleted += sent - pending.len();
            if pending.is_empty() {
                break;
            }
            retry += 1;
            if retry > UNPROCESSED_RETRIES {
                return Err(RepositoryError::Unavailable {
                    operation: "BatchWriteItem",
                    message: format!(
                        "{} items still unprocessed after {UNPROCESSED_RETRIES} retries; run \
                         again to finish",
                        pending.len()
                    ),
                });
            }
            RetryBackoff::UNPROCESSED.pause(retry).await;
        }
    }
    Ok(deleted)
}
