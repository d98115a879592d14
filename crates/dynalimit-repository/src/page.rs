//! Queries over many pages: every page through the SDK's paginator, and opaque cursors for the
//! calls that hand one page at a time to their caller.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use base64::Engine;
use dynalimit_core::CoreError;
use dynalimit_format::expr::Expr;
use dynalimit_format::item::{self, Item};
use dynalimit_format::{attr, index};

use crate::RepositoryError;
use crate::error::classify;

/// A query of `table` (on `index` when given) whose key condition and names come from `e`.
pub(crate) fn query(
    client: &Client,
    table: &str,
    index: Option<&str>,
    e: &Expr,
) -> QueryFluentBuilder {
    client
        .query()
        .table_name(table)
        .set_index_name(index.map(str::to_owned))
        .set_key_condition_expression(e.key_condition())
        .set_expression_attribute_names(e.names())
        .set_expression_attribute_values(e.values())
}

/// Every item of a query, all pages, through the SDK's paginator.
pub(crate) async fn all_items(request: QueryFluentBuilder) -> Result<Vec<Item>, RepositoryError> {
    request
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| classify("Query", e))
}

/// The items of `found`, returned by a query of `index` for namespace `ns`, that belong to
/// it ([`index::check`]); every other one is skipped, counted in
/// [`crate::metrics::FOREIGN_INDEX_ITEMS`] and logged at `warn`.
pub(crate) fn own_items(ns: &str, index: &'static str, found: Vec<Item>) -> Vec<Item> {
    found
        .into_iter()
        .filter(|it| match index::check(ns, index, it) {
            Ok(()) => true,
            Err(why) => {
                crate::metrics::foreign_index_item(index, why.as_str());
                tracing::warn!(
                    index,
                    namespace = ns,
                    pk = ?item::get_s(it, attr::PK),
                    sk = ?item::get_s(it, attr::SK),
                    reason = why.as_str(),
                    "index result skipped: not an item of this namespace as its keys say"
                );
                false
            }
        })
        .collect()
}

/// Every key (`PK`, `SK`) of a query, all pages.
pub(crate) async fn all_keys(request: QueryFluentBuilder) -> Result<Vec<Item>, RepositoryError> {
    Ok(all_items(request)
        .await?
        .iter()
        .filter_map(item::key_map_of)
        .collect())
}

/// Checks the size of a page a caller asks for (1–`max`).
pub(crate) fn page_size(limit: usize, max: usize) -> Result<i32, CoreError> {
    if limit == 0 || limit > max {
        return Err(CoreError::invalid_value(
            "limit",
            limit,
            format!("must be between 1 and {max}"),
        ));
    }
    Ok(i32::try_from(limit).unwrap_or(i32::MAX))
}

/// The cursor of the page after `key` (a query's `LastEvaluatedKey`).
pub(crate) fn encode_cursor(key: &Item) -> String {
    let map: serde_json::Map<String, serde_json::Value> = key
        .iter()
        .filter_map(|(k, v)| {
            v.as_s()
                .ok()
                .map(|s| (k.clone(), serde_json::Value::from(s.clone())))
        })
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::Value::Object(map).to_string())
}

/// The start key of the page a cursor of [`encode_cursor`] names.
pub(crate) fn decode_cursor(cursor: &str) -> Result<Item, RepositoryError> {
    let bad = || CoreError::invalid_value("cursor", cursor, "not a cursor returned by this call");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let object = value.as_object().ok_or_else(bad)?;
    object
        .iter()
        .map(|(k, v)| Ok((k.clone(), item::s(v.as_str().ok_or_else(bad)?))))
        .collect::<Result<Item, CoreError>>()
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let key = item::key("a", "b");
        assert_eq!(decode_cursor(&encode_cursor(&key)).unwrap(), key);
        assert!(decode_cursor("!!").is_err());
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(10, 1000).unwrap(), 10);
        assert!(page_size(0, 1000).is_err());
        assert!(page_size(1001, 1000).is_err());
    }
}
