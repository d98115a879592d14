//! DynamoDB requests of the aggregator, built from the processor's plans (still no I/O).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use dynalimit_repository::item::{Item, key, n, s};
use dynalimit_repository::keys;

use crate::processor::{MarkerWrite, SnapshotWrite, Transaction};

/// Attributes of a snapshot item that its update sets or keys on, besides the limit counters
/// and `{limit}#od`. A limit of that name cannot be counted on the item (DynamoDB refuses an
/// update naming one attribute twice, or a key attribute); dynalimit refuses such names
/// (`dynalimit_core::ids::RESERVED_LIMIT_NAMES`), but a bucket another client wrote may carry
/// one, and [`crate::processor::extract`] leaves its usage out, as zae-limiter 0.17's
/// aggregator does when its update for that limit fails.
pub const SNAPSHOT_ATTRIBUTES: &[&str] = &[
    "PK",
    "SK",
    "entity_id",
    "resource",
    "window",
    "window_start",
    "GSI2PK",
    "GSI2SK",
    "GSI4PK",
    "GSI4SK",
    "ttl",
    "total_events",
];

/// Sort key of a snapshot: `#USAGE#{resource}#{window_key}`.
pub fn snapshot_sk(resource: &str, window_key: &str) -> String {
    format!("{}{resource}#{window_key}", keys::USAGE_SK_PREFIX)
}

/// GSI2 sort key of a snapshot: `USAGE#{window_key}#{entity}`.
pub fn snapshot_gsi2sk(window_key: &str, entity_id: &str) -> String {
    format!("USAGE#{window_key}#{entity_id}")
}

/// Expression parts with positional name and value tokens (reference §1.5).
#[derive(Debug, Default)]
pub(crate) struct Expr {
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: Item,
}

impl Expr {
    pub(crate) fn name(&mut self, attr: &str) -> String {
        let token = format!("#n{}", self.names.len());
        self.names.insert(token.clone(), attr.to_owned());
        token
    }

    pub(crate) fn value(&mut self, v: AttributeValue) -> String {
        let token = format!(":v{}", self.values.len());
        self.values.insert(token.clone(), v);
        token
    }
}

/// The update of one snapshot item: identity attributes set once, counters added.
///
/// `ttl_epoch_s` is written only when the item has none (`if_not_exists`).
pub fn snapshot_update(
    table: &str,
    write: &SnapshotWrite,
    ttl_epoch_s: i64,
) -> Result<Update, aws_smithy_types::error::operation::BuildError> {
    let g = &write.group;
    let mut e = Expr::default();
    let mut set = Vec::new();
    let mut assign = |e: &mut Expr, attr: &str, v: AttributeValue, once: bool| {
        let name = e.name(attr);
        let value = e.value(v);
        if once {
            set.push(format!("{name} = if_not_exists({name}, {value})"));
        } else {
            set.push(format!("{name} = {value}"));
        }
    };
    assign(&mut e, "entity_id", s(&g.entity_id), false);
    assign(&mut e, "resource", s(&g.resource), true);
    assign(&mut e, "window", s(write.window.as_str()), true);
    assign(&mut e, "window_start", s(&write.window_key), true);
    assign(
        &mut e,
        "GSI2PK",
        s(keys::resource_pk(&g.namespace_id, &g.resource)),
        false,
    );
    assign(
        &mut e,
        "GSI2SK",
        s(snapshot_gsi2sk(&write.window_key, &g.entity_id)),
        false,
    );
    assign(&mut e, "GSI4PK", s(&g.namespace_id), true);
    assign(
        &mut e,
        "GSI4SK",
        s(keys::entity_pk(&g.namespace_id, &g.entity_id)),
        true,
    );
    assign(&mut e, "ttl", n(ttl_epoch_s), true);

    let mut add = Vec::new();
    let counters = write
        .counters
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .chain(write.overdrawn.iter().map(|(k, v)| (format!("{k}#od"), *v)))
        .chain(std::iter::once((
            "total_events".to_owned(),
            write.total_events,
        )));
    for (attr, amount) in counters {
        let name = e.name(&attr);
        let value = e.value(n(amount));
        add.push(format!("{name} {value}"));
    }
    let (pk, sk) = (
        keys::entity_pk(&g.namespace_id, &g.entity_id),
        snapshot_sk(&g.resource, &write.window_key),
    );
    Update::builder()
        .table_name(table)
        .set_key(Some(key(pk, sk)))
        .update_expression(format!("SET {} ADD {}", set.join(", "), add.join(", ")))
        .set_expression_attribute_names(Some(e.names))
        .set_expression_attribute_values(Some(e.values))
        .build()
}

/// The move of one watermark, conditioned on the value the plan was made against.
pub fn marker_update(
    table: &str,
    write: &MarkerWrite,
    ttl_epoch_s: i64,
) -> Result<Update, aws_smithy_types::error::operation::BuildError> {
    let b = &write.bucket;
    let (pk, sk) = b.marker_key();
    let mut e = Expr::default();
    let seq = e.name("seq");
    let mut set = Vec::new();
    let applied = e.value(s(write.applied.as_str()));
    set.push(format!("{seq} = {applied}"));
    for (attr, v) in [
        ("entity_id", s(&b.entity_id)),
        ("resource", s(&b.resource)),
        ("shard", n(b.shard)),
        ("GSI4PK", s(&b.namespace_id)),
        ("GSI4SK", s(keys::entity_pk(&b.namespace_id, &b.entity_id))),
        ("ttl", n(ttl_epoch_s)),
    ] {
        let name = e.name(attr);
        let value = e.value(v);
        set.push(format!("{name} = {value}"));
    }
    let condition = match &write.expected {
        None => format!("attribute_not_exists({seq})"),
        Some(expected) => {
            let v = e.value(s(expected.as_str()));
            format!("{seq} = {v}")
        }
    };
    Update::builder()
        .table_name(table)
        .set_key(Some(key(pk, sk)))
        .update_expression(format!("SET {}", set.join(", ")))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(e.names))
        .set_expression_attribute_values(Some(e.values))
        .build()
}

/// Every item of a planned transaction, snapshots first, then watermarks.
///
/// # Errors
/// When the SDK refuses to build a request (a missing required field).
pub fn transact_items(
    table: &str,
    tx: &Transaction,
    ttl_epoch_s: i64,
) -> Result<Vec<TransactWriteItem>, aws_smithy_types::error::operation::BuildError> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::processor::GroupKey;
    use crate::window::Window;

    #[test]
    fn the_snapshot_update_names_only_listed_attributes_and_counters() {
        let write = SnapshotWrite {
            group: GroupKey {
                namespace_id: "ns".into(),
                entity_id: "u1".into(),
                resource: "gpt-4".into(),
            },
            window: Window::Hourly,
            windows: vec![Window::Hourly, Window::Daily],
            window_key: "2026-03-10T00:00:00Z".into(),
            counters: BTreeMap::from([("rpm".to_owned(), 2)]),
            overdrawn: BTreeMap::from([("rpm".to_owned(), 1)]),
            total_events: 2,
            first_at_ms: 0,
        };
        let update = snapshot_update("t", &write, 1).unwrap();
        let mut named: Vec<&str> = update
            .expression_attribute_names()
            .unwrap()
            .values()
            .map(String::as_str)
            .filter(|n| !matches!(*n, "rpm" | "rpm#od"))
            .chain(update.key().keys().map(String::as_str))
            .collect();
        named.sort_unstable();
        let mut listed = SNAPSHOT_ATTRIBUTES.to_vec();
        listed.sort_unstable();
        assert_eq!(named, listed);
        // Each is also refused as a limit name by the library.
        for attr in SNAPSHOT_ATTRIBUTES {
            assert!(
                dynalimit_core::ids::reserved_limit_name(attr).is_some(),
                "{attr}"
            );
        }
    }
}
