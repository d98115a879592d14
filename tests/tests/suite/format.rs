//! Raw items are byte-for-byte what the reference's tables prescribe: every attribute name and
//! DynamoDB type, and nothing else.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_format::item::Item;
use dynalimit_repository::{NewEntity, OnUnavailable};

fn type_of(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::M(_) => "M",
        AttributeValue::L(_) => "L",
        AttributeValue::Ss(_) => "SS",
        _ => "other",
    }
}

fn shape(item: &Item) -> BTreeMap<String, &'static str> {
    item.iter().map(|(k, v)| (k.clone(), type_of(v))).collect()
}

fn expect(item: &Item, expected: &[(&str, &'static str)]) {
    let want: BTreeMap<String, &'static str> =
        expected.iter().map(|(k, t)| (k.to_string(), *t)).collect();
    assert_eq!(shape(item), want, "item {:?}", item.get("SK"));
}

fn find<'a>(items: &'a [Item], pk: &str, sk: &str) -> &'a Item {
    items
        .iter()
        .find(|it| {
            it.get("PK").and_then(|v| v.as_s().ok()).map(String::as_str) == Some(pk)
                && it.get("SK").and_then(|v| v.as_s().ok()).map(String::as_str) == Some(sk)
        })
        .unwrap_or_else(|| panic!("no item {pk} {sk}"))
}

fn s<'a>(it: &'a Item, a: &str) -> &'a str {
    it.get(a)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .unwrap_or("")
}

fn is_iso_seconds(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z'
        && text
            .chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19].contains(&i) || c.is_ascii_digit())
}

#[tokio::test]
async fn every_item_written_has_the_reference_attributes_and_types() {
    let table = dynalimit_tests::table().await;
    let repo = table
        .builder()
        .namespace("fmt")
        .principal("alice@example.com")
        .open()
        .await
        .unwrap();
    let ns = repo.namespace_id().to_string();
    repo.create_entity(NewEntity::new("proj").metadata("team", "a"))
        .await
        .unwrap();
    repo.create_entity(NewEntity::new("key").parent("proj").cascade(true))
        .await
        .unwrap();
    let limits = [
        Limit::per_minute("rpm", 100),
        Limit::per_minute("tpm.v2", 1000).with_burst(1500),
    ];
    repo.set_limits("key", "openai/gpt-4", &limits)
        .await
        .unwrap();
    repo.set_limits("key", "_default_", &limits[..1])
        .await
        .unwrap();
    repo.set_resource_defaults("openai/gpt-4", &limits)
        .await
        .unwrap();
    repo.set_system_defaults(&limits[..1], Some(OnUnavailable::Block))
        .await
        .unwrap();
    let items = table.scan_all().await;

    // Version record (§1.4.3).
    let version = find(&items, "_/SYSTEM#", "#VERSION");
    expect(
        version,
        &[
            ("PK", "S"),
            ("SK", "S"),
            ("schema_version", "S"),
            ("lambda_version", "S"),
            ("client_min_version", "S"),
            ("updated_at", "S"),
            ("updated_by", "S"),
            ("GSI4PK", "S"),
            ("GSI4SK", "S"),
        ],
    );
    assert_eq!(s(version, "schema_version"), "0.10.0");
    assert_eq!(s(version, "client_min_version"), "0.0.0");
    // The table's first record names the reader dynalimit implements as its aggregator.
    assert_eq!(s(version, "lambda_version"), "0.17.0");
    assert_eq!(s(version, "GSI4PK"), "_");
    assert_eq!(s(version, "GSI4SK"), "_/SYSTEM#");
    assert!(is_iso_seconds(s(version, "updated_at")));

    // Namespace records (§1.4.1, §1.4.2).
    let registry = [
        ("PK", "S"),
        ("SK", "S"),
        ("namespace_id", "S"),
        ("namespace_name", "S"),
        ("status", "S"),
        ("created_at", "S"),
        ("GSI4PK", "S"),
        ("GSI4SK", "S"),
    ];
    let forward = find(&items, "_/SYSTEM#", "#NAMESPACE#fmt");
    expect(forward, &registry);
    assert_eq!(s(forward, "namespace_id"), ns);
    assert_eq!(s(forward, "status"), "active");
    assert!(is_iso_seconds(s(forward, "created_at")));
    let reverse = find(&items, "_/SYSTEM#", &format!("#NSID#{ns}"));
    expect(reverse, &registry);
    assert_eq!(s(reverse, "namespace_name"), "fmt");

    // Entity META (§1.4.4), without and with a parent.
    let meta = [
        ("PK", "S"),
        ("SK", "S"),
        ("entity_id", "S"),
        ("name", "S"),
        ("cascade", "BOOL"),
        ("pgen", "N"),
        ("pinc", "S"),
        ("metadata", "M"),
        ("created_at", "S"),
        ("GSI4PK", "S"),
        ("GSI4SK", "S"),
    ];
    let proj = find(&items, &format!("{ns}/ENTITY#proj"), "#META");
    let mut root = meta.to_vec();
    root.push(("parent_id", "NULL"));
    expect(proj, &root);
    assert_eq!(s(proj, "GSI4PK"), ns);
    assert_eq!(s(proj, "GSI4SK"), format!("{ns}/ENTITY#proj"));
    let key = find(&items, &format!("{ns}/ENTITY#key"), "#META");
    let mut child = meta.to_vec();
    child.extend([("parent_id", "S"), ("GSI1PK", "S"), ("GSI1SK", "S")]);
    expect(key, &child);
    assert_eq!(s(key, "GSI1PK"), format!("{ns}/PARENT#proj"));
    assert_eq!(s(key, "GSI1SK"), "CHILD#key");

    // Config items (§1.4.5) at every level.
    let limit_attrs = |names: &[&str]| -> Vec<(String, &'static str)> {
        names
            .iter()
            .flat_map(|n| ["cp", "ra", "rp"].map(|f| (format!("l_{n}_{f}"), "N")))
            .collect()
    };
    let check_config = |it: &Item, extra: &[(&str, &'static str)], names: &[&str]| {
        let mut want: Vec<(String, &'static str)> = [
            ("PK", "S"),
            ("SK", "S"),
            ("config_version", "N"),
            ("GSI4PK", "S"),
            ("GSI4SK", "S"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, t)| (k.to_string(), *t))
        .collect();
        want.extend(limit_attrs(names));
        let want: BTreeMap<String, &'static str> = want.into_iter().collect();
        assert_eq!(shape(it), want);
        assert_eq!(s(it, "GSI4PK"), ns);
        assert_eq!(s(it, "GSI4SK"), s(it, "PK"));
        assert_eq!(it["config_version"].as_n().unwrap(), "1");
    };
    let entity_cfg = find(&items, &format!("{ns}/ENTITY#key"), "#CONFIG#openai/gpt-4");
    let entity_extra = [
        ("entity_id", "S"),
        ("resource", "S"),
        ("GSI3PK", "S"),
        ("GSI3SK", "S"),
    ];
    check_config(entity_cfg, &entity_extra, &["rpm", "tpm.v2"]);
    assert_eq!(
        s(entity_cfg, "GSI3PK"),
        format!("{ns}/ENTITY_CONFIG#openai/gpt-4")
    );
    assert_eq!(s(entity_cfg, "GSI3SK"), "key");
    assert_eq!(
        entity_cfg["l_tpm.v2_cp"].as_n().unwrap(),
        "1500",
        "whole tokens"
    );
    assert_eq!(entity_cfg["l_tpm.v2_ra"].as_n().unwrap(), "1000");
    assert_eq!(entity_cfg["l_tpm.v2_rp"].as_n().unwrap(), "60", "seconds");
    let default_cfg = find(&items, &format!("{ns}/ENTITY#key"), "#CONFIG#_default_");
    check_config(default_cfg, &entity_extra, &["rpm"]);
    assert_eq!(s(default_cfg, "resource"), "_default_");
    let resource_cfg = find(&items, &format!("{ns}/RESOURCE#openai/gpt-4"), "#CONFIG");
    check_config(resource_cfg, &[("resource", "S")], &["rpm", "tpm.v2"]);
    let system_cfg = find(&items, &format!("{ns}/SYSTEM#"), "#CONFIG");
    check_config(system_cfg, &[("on_unavailable", "S")], &["rpm"]);
    assert_eq!(s(system_cfg, "on_unavailable"), "block");

    // Registries (§1.4.6).
    let resources = find(&items, &format!("{ns}/SYSTEM#"), "#RESOURCES");
    expect(
        resources,
        &[
            ("PK", "S"),
            ("SK", "S"),
            ("resources", "SS"),
            ("GSI4PK", "S"),
            ("GSI4SK", "S"),
        ],
    );
    let wide = find(&items, &format!("{ns}/SYSTEM#"), "#ENTITY_CONFIG_RESOURCES");
    expect(
        wide,
        &[
            ("PK", "S"),
            ("SK", "S"),
            ("openai/gpt-4", "N"),
            ("_default_", "N"),
            ("GSI4PK", "S"),
            ("GSI4SK", "S"),
        ],
    );
    assert_eq!(wide["openai/gpt-4"].as_n().unwrap(), "1");

    // Audit events (§1.4.9).
    let audits: Vec<&Item> = items
        .iter()
        .filter(|it| s(it, "SK").starts_with("#AUDIT#"))
        .collect();
    assert_eq!(
        audits.len(),
        6,
        "2 creates, 2 entity sets, 1 resource set, 1 system set"
    );
    for a in &audits {
        expect(
            a,
            &[
                ("PK", "S"),
                ("SK", "S"),
                ("entity_id", "S"),
                ("event_id", "S"),
                ("timestamp", "S"),
                ("action", "S"),
                ("principal", "S"),
                (
                    "resource",
                    if s(a, "action") == "entity_created" || s(a, "entity_id") == "$SYSTEM" {
                        "NULL"
                    } else {
                        "S"
                    },
                ),
                ("details", "M"),
                ("ttl", "N"),
                ("GSI4PK", "S"),
                ("GSI4SK", "S"),
            ],
        );
        assert_eq!(s(a, "event_id").len(), 26);
        assert_eq!(s(a, "SK"), format!("#AUDIT#{}", s(a, "event_id")));
        assert_eq!(s(a, "principal"), "alice@example.com");
        assert_eq!(s(a, "GSI4SK"), s(a, "PK"));
        assert!(is_iso_seconds(s(a, "timestamp")));
    }
    let entity_ids: Vec<&str> = audits.iter().map(|a| s(a, "entity_id")).collect();
    assert!(entity_ids.contains(&"$SYSTEM"));
    assert!(entity_ids.contains(&"$RESOURCE:openai/gpt-4"));
    let set = audits
        .iter()
        .find(|a| s(a, "action") == "limits_set" && s(a, "entity_id") == "key")
        .unwrap();
    let details = set["details"].as_m().unwrap();
    let first = details["limits"].as_l().unwrap()[0].as_m().unwrap();
    let mut keys: Vec<_> = first.keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["capacity", "name", "refill_amount", "refill_period_seconds"]
    );
}
