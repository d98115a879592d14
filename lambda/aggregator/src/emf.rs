//! Per-tenant usage metrics in CloudWatch's embedded metric format (EMF).
//!
//! With [`Settings::tenant_metrics`](crate::Settings::tenant_metrics) on, every batch writes one
//! log line per (namespace, entity, resource) whose usage it counted: the whole tokens consumed
//! per limit, as metrics of the CloudWatch namespace [`METRIC_NAMESPACE`] with the dimensions
//! `Table`, `NamespaceId`, `Entity` and `Resource`. CloudWatch Logs turns the lines of the
//! function's log group into metrics; nothing else is sent.
//!
//! Only usage counted by this delivery is reported: a redelivered record whose usage the
//! watermark shows counted adds nothing. A batch that ends before its lines are written loses
//! them (the metrics are at most once; the snapshots stay exact).
//!
//! Each distinct dimension set is a custom metric that CloudWatch bills, so the lines are off
//! by default (`EnableTenantMetrics` in the stack).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of the metrics.
pub const METRIC_NAMESPACE: &str = "dynalimit";

/// The fields of a line other than metrics.
const RESERVED: [&str; 5] = ["_aws", "Table", "NamespaceId", "Entity", "Resource"];

/// The tokens one delivery counted for one (namespace id, entity, resource), per limit.
pub type TenantUsage = BTreeMap<(String, String, String), BTreeMap<String, i64>>;

/// The EMF lines of `usage` for `table`, stamped `timestamp_ms`: one JSON object per
/// (namespace, entity, resource), limits with no net usage left out.
pub fn lines(table: &str, timestamp_ms: i64, usage: &TenantUsage) -> Vec<String> {
    usage
        .iter()
        .filter_map(|((ns, entity, resource), limits)| {
            // A limit named like a field of the line cannot be a metric of it.
            let limits: Vec<(&String, &i64)> = limits
                .iter()
                .filter(|(name, n)| **n != 0 && !RESERVED.contains(&name.as_str()))
                .collect();
            if limits.is_empty() {
                return None;
            }
            let mut line = Map::new();
            line.insert(
                "_aws".into(),
                json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": METRIC_NAMESPACE,
                        "Dimensions": [["Table", "NamespaceId", "Entity", "Resource"]],
                        "Metrics": limits
                            .iter()
                            .map(|(name, _)| json!({ "Name": name, "Unit": "Count" }))
                            .collect::<Vec<_>>(),
                    }],
                }),
            );
            for (k, v) in [
                ("Table", table),
                ("NamespaceId", ns),
                ("Entity", entity),
                ("Resource", resource),
            ] {
                line.insert(k.into(), Value::from(v));
            }
            for (name, n) in limits {
                line.insert(name.clone(), Value::from(*n));
            }
            Some(Value::Object(line).to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_tenant_with_its_limits_as_metrics() {
        let mut usage = TenantUsage::new();
        usage.insert(
            ("ns1".into(), "key-1".into(), "gpt-4".into()),
            BTreeMap::from([
                ("rpm".into(), 3),
                ("tpm".into(), 1200),
                ("idle".into(), 0),
                ("Entity".into(), 9),
            ]),
        );
        usage.insert(
            ("ns1".into(), "key-2".into(), "gpt-4".into()),
            BTreeMap::from([("rpm".into(), 0)]),
        );
        let out = lines("limits", 1_764_400_000_000, &usage);
        assert_eq!(out.len(), 1, "a tenant with no net usage writes nothing");
        let line: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(line["_aws"]["Timestamp"], 1_764_400_000_000_i64);
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], METRIC_NAMESPACE);
        assert_eq!(
            directive["Dimensions"],
            json!([["Table", "NamespaceId", "Entity", "Resource"]])
        );
        assert_eq!(
            directive["Metrics"],
            json!([{ "Name": "rpm", "Unit": "Count" }, { "Name": "tpm", "Unit": "Count" }])
        );
        assert_eq!(
            (&line["Entity"], &line["rpm"], &line["tpm"]),
            (&json!("key-1"), &json!(3), &json!(1200))
        );
        assert!(line.get("idle").is_none());
    }
}
