//! DynamoDB requests of the aggregator, built from the processor's plans with the table
//! format's snapshot and watermark writes (still no I/O).

use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use aws_smithy_types::error::operation::BuildError;
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::Item;
use dynalimit_format::usage::{SnapshotDelta, watermark_update};

use crate::processor::{MarkerWrite, SnapshotWrite, Transaction};

/// An `Update` of a transaction: `e` on the item `key` of `table`.
fn update(table: &str, key: Item, e: &Expr) -> Result<Update, BuildError> {
    Update::builder()
        .table_name(table)
        .set_key(Some(key))
        .with_expr(e)
        .build()
}

/// The update of one snapshot item: identity attributes set once, counters added
/// ([`SnapshotDelta::update`]). `ttl_epoch_s` is written only when the item has none.
pub fn snapshot_update(
    table: &str,
    write: &SnapshotWrite,
    ttl_epoch_s: i64,
) -> Result<Update, BuildError> {
    let g = &write.group;
    let delta = SnapshotDelta {
        namespace_id: &g.namespace_id,
        entity_id: &g.entity_id,
        resource: &g.resource,
        window: write.window,
        window_key: &write.window_key,
        counters: &write.counters,
        overdrawn: &write.overdrawn,
        total_events: write.total_events,
        ttl_epoch_s,
    };
    update(table, delta.key(), &delta.update())
}

/// The move of one watermark, conditioned on the value the plan was made against.
pub fn marker_update(
    table: &str,
    write: &MarkerWrite,
    ttl_epoch_s: i64,
) -> Result<Update, BuildError> {
    let b = &write.bucket;
    let e = watermark_update(
        &b.namespace_id,
        &b.entity_id,
        &b.resource,
        b.shard,
        write.applied.as_str(),
        write.expected.as_ref().map(|s| s.as_str()),
        ttl_epoch_s,
    );
    update(table, b.marker_key(), &e)
}

/// Every item of a planned transaction, snapshots first, then watermarks.
///
/// # Errors
/// When the SDK refuses to build a request (a missing required field).
pub fn transact_items(
    table: &str,
    tx: &Transaction,
    ttl_epoch_s: i64,
) -> Result<Vec<TransactWriteItem>, BuildError> {
    let mut items = Vec::with_capacity(tx.len());
    for snap in &tx.snapshots {
        items.push(
            TransactWriteItem::builder()
                .update(snapshot_update(table, snap, ttl_epoch_s)?)
                .build(),
        );
    }
    for marker in &tx.markers {
        items.push(
            TransactWriteItem::builder()
                .update(marker_update(table, marker, ttl_epoch_s)?)
                .build(),
        );
    }
    Ok(items)
}
