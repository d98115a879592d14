//! Raw item writers for tests that need items in the reference's exact format (for example
//! items another client wrote).

use std::collections::HashMap;

use crate::TestTable;
use aws_sdk_dynamodb::types::AttributeValue;

/// Puts an item made of string attributes.
pub async fn put_raw(table: &TestTable, attrs: &[(&str, &str)]) {
    let item: HashMap<String, AttributeValue> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), AttributeValue::S(v.to_string())))
        .collect();
    put_item(table, item).await;
}

/// Puts `item` as it is.
pub async fn put_item(table: &TestTable, item: HashMap<String, AttributeValue>) {
    table
        .client()
        .put_item()
        .table_name(table.name())
        .set_item(Some(item))
        .send()
        .await
        .expect("put item");
}

/// Puts a bucket item (§1.4.7) with full limits `(name, capacity, refill, period_s)` and the
/// `wcu` block, `shard_count` 1 and `rf` 1 700 000 000 000.
pub async fn put_bucket(
    table: &TestTable,
    ns: &str,
    entity: &str,
    resource: &str,
    shard: u32,
    limits: &[(&str, i64, i64, i64)],
) {
    put_shard(table, ns, entity, resource, (shard, 1), limits, &[]).await;
}

/// As [`put_bucket`], for shard `at.0` of a bucket of `at.1` shards, each limit named in
/// `balances` holding that many millitokens (the others full).
pub async fn put_shard(
    table: &TestTable,
    ns: &str,
    entity: &str,
    resource: &str,
    at: (u32, u32),
    limits: &[(&str, i64, i64, i64)],
    balances: &[(&str, i64)],
) {
    let (shard, count) = at;
    let s = |v: &str| AttributeValue::S(v.to_string());
    let n = |v: i64| AttributeValue::N(v.to_string());
    let mut item = HashMap::from([
        (
            "PK".to_string(),
            s(&format!("{ns}/BUCKET#{entity}#{resource}#{shard}")),
        ),
        ("SK".to_string(), s("#STATE")),
        ("entity_id".to_string(), s(entity)),
        ("resource".to_string(), s(resource)),
        ("rf".to_string(), n(1_700_000_000_000)),
        ("shard_count".to_string(), n(i64::from(count))),
        (
            "GSI2PK".to_string(),
            s(&format!("{ns}/RESOURCE#{resource}")),
        ),
        ("GSI2SK".to_string(), s(&format!("BUCKET#{entity}#{shard}"))),
        ("GSI3PK".to_string(), s(&format!("{ns}/ENTITY#{entity}"))),
        (
            "GSI3SK".to_string(),
            s(&format!("BUCKET#{resource}#{shard}")),
        ),
        ("GSI4PK".to_string(), s(ns)),
        (
            "GSI4SK".to_string(),
            s(&format!("BUCKET#{entity}#{resource}#{shard}")),
        ),
        ("b_wcu_tk".to_string(), n(1_000_000)),
        ("b_wcu_cp".to_string(), n(1_000_000)),
        ("b_wcu_ra".to_string(), n(1_000_000)),
        ("b_wcu_rp".to_string(), n(1000)),
        ("b_wcu_tc".to_string(), n(0)),
    ]);
    for (name, cp, ra, rp) in limits {
        let tk = balances
            .iter()
            .find(|(b, _)| b == name)
            .map_or(cp * 1000, |(_, tk)| *tk);
        item.insert(format!("b_{name}_tk"), n(tk));
        item.insert(format!("b_{name}_cp"), n(cp * 1000));
        item.insert(format!("b_{name}_ra"), n(ra * 1000));
        item.insert(format!("b_{name}_rp"), n(rp * 1000));
        item.insert(format!("b_{name}_tc"), n(0));
    }
    put_item(table, item).await;
}

/// Raises `shard_count` on the existing shards `0..from` of `entity`'s bucket on `resource` to
/// `to`, touching nothing else: a doubling as zae-limiter 0.17 writes it (shard 0's count,
/// then the propagation), which moves no token and creates no shard.
pub async fn double_moving_nothing(
    table: &TestTable,
    ns: &str,
    (entity, resource): (&str, &str),
    from: u32,
    to: u32,
) {
    for shard in 0..from {
        let sent = table
            .client()
            .update_item()
            .table_name(table.name())
            .key(
                "PK",
                AttributeValue::S(format!("{ns}/BUCKET#{entity}#{resource}#{shard}")),
            )
            .key("SK", AttributeValue::S("#STATE".into()))
            .update_expression("SET shard_count = :c")
            .condition_expression("attribute_exists(PK)")
            .expression_attribute_values(":c", AttributeValue::N(to.to_string()))
            .send()
            .await;
        if let Err(e) = sent {
            assert!(
                e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()),
                "raise the count of shard {shard}: {e:?}"
            );
        }
    }
}
