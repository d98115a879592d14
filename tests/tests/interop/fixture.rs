//! The items zae-limiter 0.17 writes, as the hostile-items suite stores them beside its own
//! (`tests/tests/hostile/zae_items.json`): zae-limiter writes one of each kind here (namespace
//! records, entities with a parent and metadata, configuration at every level with schedules,
//! quotas, a session window, a soft limit and access flags, buckets of an acquire, a bypassed
//! bucket, reset and top-up records with their audit events, usage snapshots of its
//! aggregator), and the test checks that the fixture holds an item of every key with the same
//! attributes and types. With `DYNALIMIT_WRITE_ZAE_ITEMS=1` it writes the fixture instead.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;
use dynalimit_tests::hostile::zae::{NS_PLACEHOLDER, items, to_json};
use serde_json::{Value, json};

use crate::python::shared_table;

const NS: &str = "zaefix";

/// The fixture's path.
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile/zae_items.json");

fn limit(name: &str, capacity: i64, refill: i64, period: i64) -> Value {
    json!({
        "name": name,
        "capacity": capacity,
        "refill_amount": refill,
        "refill_period_seconds": period,
    })
}

/// Every operation of zae-limiter that stores an item of its own kind.
fn operations() -> Vec<Value> {
    let scheduled = {
        let mut l = limit("tpm", 10_000, 10_000, 60);
        l["schedule"] = json!([{"cron": "0 9-17 * * 1-5", "tz": "Europe/Berlin", "scale": 0.5}]);
        l
    };
    let daily = {
        let mut l = limit("tokens", 100_000, 0, 1);
        l["reset"] = json!([{"cron": "0 0 * * *", "tz": "Europe/Berlin"}]);
        l
    };
    let session = {
        let mut l = limit("sess", 50, 0, 1);
        l["reset_after_seconds"] = json!(3600);
        l
    };
    let soft = {
        let mut l = limit("watch", 5, 5, 60);
        l["soft"] = json!(true);
        l
    };
    vec![
        json!({"op": "register_namespace", "name": "zae-extra"}),
        json!({"op": "create_entity", "id": "zp", "name": "Zae Parent", "metadata": {"team": "core"}}),
        json!({"op": "create_entity", "id": "zc", "parent_id": "zp", "cascade": true,
               "metadata": {"tier": "gold"}}),
        json!({"op": "set_system_defaults", "limits": [limit("rpm", 100, 100, 60)],
               "on_unavailable": "allow"}),
        json!({"op": "set_resource_defaults", "resource": "gpt-4",
               "limits": [limit("rpm", 50, 50, 60), scheduled, daily]}),
        json!({"op": "set_limits", "entity": "zc", "resource": "gpt-4",
               "limits": [limit("rpm", 10, 10, 60), session, soft]}),
        json!({"op": "set_limits", "entity": "zc", "limits": [limit("rpm", 20, 20, 60)],
               "disabled": false}),
        json!({"op": "access", "method": "set_entity_cascade", "args": ["zc", true, "gpt-4"]}),
        json!({"op": "access", "method": "disable_resource", "args": ["blocked"]}),
        json!({"op": "acquire", "entity": "zc", "resource": "gpt-4",
               "consume": {"rpm": 1, "sess": 1, "watch": 1}}),
        json!({"op": "acquire", "entity": "zp", "resource": "gpt-4",
               "consume": {"rpm": 1, "tpm": 10, "tokens": 5}}),
        json!({"op": "acquire", "entity": "zp", "resource": "open",
               "consume": {"rpm": 1}}),
        json!({"op": "access", "method": "bypass_entity", "args": ["zp", "open"]}),
        json!({"op": "acquire", "entity": "zp", "resource": "open",
               "consume": {"rpm": 1}}),
        json!({"op": "reset_bucket", "entity": "zc", "resource": "gpt-4",
               "idempotency_key": "fixture-reset"}),
        json!({"op": "top_up", "entity": "zc", "resource": "gpt-4", "amounts": {"rpm": 1},
               "idempotency_key": "fixture-top-up"}),
    ]
}

/// A Lambda stream record of `new` changed from `old`.
pub(crate) fn record(old: &Item, new: &Item, seq: u64) -> Value {
    let image =
        |item: &Item| -> Value { item.iter().map(|(k, v)| (k.clone(), to_json(v))).collect() };
    json!({
        "eventID": format!("ev{seq}"),
        "eventName": "MODIFY",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_798_762_200.0,
            "Keys": { "PK": to_json(&new["PK"]), "SK": to_json(&new["SK"]) },
            "SequenceNumber": seq.to_string(),
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
            "OldImage": image(old),
            "NewImage": image(new),
        }
    })
}

/// The text of a string attribute.
fn text<'a>(item: &'a Item, name: &str) -> &'a str {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map_or("", String::as_str)
}

/// What an item is, for the fixture's readers.
fn what(item: &Item) -> String {
    let (pk, sk) = (text(item, "PK"), text(item, "SK"));
    let kind = match sk {
        "#STATE" => "bucket",
        "#META" => "entity META",
        "#VERSION" => "version record",
        "#RESOURCES" => "registry of resources with defaults",
        "#ENTITY_CONFIG_RESOURCES" => "registry of resources with entity limits",
        "#CONFIG" if pk.contains("/SYSTEM#") => "system configuration",
        "#CONFIG" => "resource configuration",
        _ if sk.starts_with("#CONFIG#") => "entity configuration",
        _ if sk.starts_with("#NAMESPACE#") => "namespace forward record",
        _ if sk.starts_with("#NSID#") => "namespace reverse record",
        _ if sk.starts_with("#OP#") => "operation record",
        _ if sk.starts_with("#AUDIT#") => "audit event",
        _ if sk.starts_with("#USAGE#") => "usage snapshot",
        _ => "other",
    };
    format!("{kind} {pk} {sk}")
}

/// The item with the namespace id replaced by the fixture's placeholder.
fn placeheld(item: &Item, ns: &str) -> Item {
    fn walk(v: &AttributeValue, ns: &str) -> AttributeValue {
        match v {
            AttributeValue::S(s) => AttributeValue::S(s.replace(ns, NS_PLACEHOLDER)),
            AttributeValue::M(m) => AttributeValue::M(
                m.iter()
                    .map(|(k, v)| (k.replace(ns, NS_PLACEHOLDER), walk(v, ns)))
                    .collect(),
            ),
            AttributeValue::L(l) => AttributeValue::L(l.iter().map(|v| walk(v, ns)).collect()),
            other => other.clone(),
        }
    }
    item.iter()
        .map(|(k, v)| (k.replace(ns, NS_PLACEHOLDER), walk(v, ns)))
        .collect()
}

/// An item's shape: its key with the parts that differ from run to run (event ids,
/// namespace ids of other namespaces, window starts) masked, and its attribute names with
/// their types.
fn shape(item: &Item) -> (String, BTreeMap<String, String>) {
    let (pk, sk) = (text(item, "PK"), text(item, "SK"));
    let mask = |s: &str| -> String {
        for prefix in ["#AUDIT#", "#NSID#"] {
            if let Some(rest) = s.strip_prefix(prefix)
                && !rest.contains(NS_PLACEHOLDER)
            {
                return format!("{prefix}*");
            }
        }
        // A snapshot's window start is the time of the run.
        if s.starts_with("#USAGE#")
            && let Some((head, _)) = s.rsplit_once('#')
        {
            return format!("{head}#*");
        }
        s.to_owned()
    };
    let types = item
        .iter()
        .map(|(k, v)| {
            let t = to_json(v)
                .as_object()
                .and_then(|o| o.keys().next().cloned())
                .unwrap_or_default();
            (k.clone(), t)
        })
        .collect();
    (format!("{pk} | {}", mask(sk)), types)
}

#[tokio::test]
async fn zae_limiter_writes_the_items_of_the_hostile_fixture() {
    let (table, python) = shared_table!();
    let repo = table.repository(NS).await;
    let ns = repo.namespace_id().to_owned();
    let own: BTreeSet<(String, String)> = table
        .scan_all()
        .await
        .iter()
        .map(|i| (text(i, "PK").to_owned(), text(i, "SK").to_owned()))
        .collect();
    python.ok(NS, operations()).await;
    // zae-limiter's aggregator on a change of the child's shard 0: its snapshots.
    let shard0 = table
        .scan_all()
        .await
        .into_iter()
        .find(|i| text(i, "PK").ends_with("/BUCKET#zc#gpt-4#0") && text(i, "SK") == "#STATE")
        .expect("the child's bucket");
    let mut before = shard0.clone();
    before.insert("b_rpm_tc".into(), AttributeValue::N("0".into()));
    let answer = python
        .one(
            NS,
            json!({"op": "aggregate", "records": [record(&before, &shard0, 100)],
                   "windows": ["hourly", "daily", "monthly"]}),
        )
        .await;
    assert_eq!(answer["errors"], json!([]), "{answer}");
    assert!(
        answer["snapshots_updated"].as_u64() > Some(0),
        "zae-limiter's aggregator wrote no snapshot: {answer}"
    );

    let mut written: Vec<Item> = table
        .scan_all()
        .await
        .iter()
        .filter(|i| !own.contains(&(text(i, "PK").to_owned(), text(i, "SK").to_owned())))
        .map(|i| placeheld(i, &ns))
        .collect();
    written.sort_by_key(shape);
    assert!(written.len() >= 20, "{} items written", written.len());
    if std::env::var_os("DYNALIMIT_WRITE_ZAE_ITEMS").is_some() {
        let doc: Vec<Value> = written
            .iter()
            .map(|item| {
                let mut attrs: Vec<(&String, &AttributeValue)> = item.iter().collect();
                attrs.sort_by_key(|(k, _)| *k);
                let attrs_json: serde_json::Map<String, Value> = attrs
                    .into_iter()
                    .map(|(k, v)| (k.clone(), to_json(v)))
                    .collect();
                json!({ "what": what(item), "item": attrs_json })
            })
            .collect();
        let text = serde_json::to_string_pretty(&doc).expect("JSON") + "\n";
        std::fs::write(FIXTURE, text).expect("write the fixture");
        return;
    }
    // Items of one masked key (a partition's audit events) may differ in shape: each written
    // shape must be among the fixture's.
    let fixture: BTreeSet<(String, BTreeMap<String, String>)> = items(NS_PLACEHOLDER)
        .iter()
        .map(|(_, item)| shape(item))
        .collect();
    for item in &written {
        let (key, types) = shape(item);
        assert!(
            fixture.contains(&(key.clone(), types.clone())),
            "zae-limiter now writes {key} otherwise than the fixture holds it ({types:?}); \
             DYNALIMIT_WRITE_ZAE_ITEMS=1 rewrites the fixture"
        );
    }
}
