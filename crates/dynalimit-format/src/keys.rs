//! Key strings (reference §1.3, §1.4). Every function here builds exactly the string the
//! format prescribes; nothing else in the workspace concatenates key fragments.
//!
//! Every partition key and every GSI partition key is `{ns}/…` (the namespace id never
//! contains `/` or `#`), except the namespace registry and the version record under the
//! reserved namespace `_`, and GSI4PK, which is the bare namespace id.

/// The reserved namespace (`_`): GSI4 partition of the registry and the version record.
pub const RESERVED_NS: &str = dynalimit_core::ids::RESERVED_NAMESPACE;
/// Partition key of the namespace registry and the version record (`_/SYSTEM#`).
pub const SYSTEM_RESERVED_PK: &str = "_/SYSTEM#";
/// Sort key of the version record.
pub const VERSION_SK: &str = "#VERSION";
/// Sort key of entity metadata.
pub const META_SK: &str = "#META";
/// Sort key of bucket items.
pub const STATE_SK: &str = "#STATE";
/// Sort key of system and resource configuration.
pub const CONFIG_SK: &str = "#CONFIG";
/// Sort key of the registry of resources with defaults.
pub const RESOURCES_SK: &str = "#RESOURCES";
/// Sort key of the registry of resources with entity configs.
pub const ENTITY_CONFIG_RESOURCES_SK: &str = "#ENTITY_CONFIG_RESOURCES";
/// The sort key of the item that says which of dynalimit's own features a namespace uses (in
/// the system partition).
pub const FEATURES_SK: &str = "#FEATURES";
/// Sort-key prefix of audit events.
pub const AUDIT_SK_PREFIX: &str = "#AUDIT#";
/// Sort-key prefix of usage snapshots.
pub const USAGE_SK_PREFIX: &str = "#USAGE#";
/// Sort-key prefix of entity configuration items.
pub const CONFIG_SK_PREFIX: &str = "#CONFIG#";
/// Sort-key prefix of forward namespace records.
pub const NAMESPACE_SK_PREFIX: &str = "#NAMESPACE#";
/// Sort-key prefix of reverse namespace records.
pub const NSID_SK_PREFIX: &str = "#NSID#";
/// Sort-key prefix of operation records in bucket partitions.
pub const OP_SK_PREFIX: &str = "#OP#";
/// Sort-key prefix of dynalimit's aggregator watermarks in entity partitions.
pub const WATERMARK_SK_PREFIX: &str = "#AGGREGATOR#";
/// Sort-key prefix of dynalimit's alert threshold items in entity partitions.
pub const ALERTS_SK_PREFIX: &str = "#ALERTS#";
/// Sort-key prefix of dynalimit's alert crossing markers in entity partitions.
pub const CROSSED_SK_PREFIX: &str = "#ALERTED#";
/// Sort-key prefix of dynalimit's concurrency slot items in shard-0 bucket partitions.
pub const SLOTS_SK_PREFIX: &str = "#SLOTS#";
/// Sort-key prefix of dynalimit's refusal minutes in shard-0 bucket partitions.
pub const REFUSED_SK_PREFIX: &str = "#REFUSED#";
/// What stands in a refusal alert's marker where a quota crossing's marker has a percentage.
pub const REFUSING_LEVEL: &str = "refusing";
/// Prefix of the GSI2, GSI3 and GSI4 sort keys of bucket items.
pub const BUCKET_INDEX_SK_PREFIX: &str = "BUCKET#";
/// Prefix of the GSI2 sort keys of usage snapshots.
pub const USAGE_INDEX_SK_PREFIX: &str = "USAGE#";
/// Prefix of the GSI4 sort keys of operation records.
pub(crate) const OP_INDEX_SK_PREFIX: &str = "OP#";

/// `#NAMESPACE#{name}`.
pub(crate) fn namespace_sk(name: &str) -> String {
    format!("{NAMESPACE_SK_PREFIX}{name}")
}

/// `#NSID#{id}`.
pub(crate) fn nsid_sk(id: &str) -> String {
    format!("{NSID_SK_PREFIX}{id}")
}

/// `{ns}/SYSTEM#`.
pub fn system_pk(ns: &str) -> String {
    format!("{ns}/SYSTEM#")
}

/// `{ns}/ENTITY#{entity}`.
pub fn entity_pk(ns: &str, entity: &str) -> String {
    format!("{ns}/ENTITY#{entity}")
}

/// `{ns}/RESOURCE#{resource}`.
pub fn resource_pk(ns: &str, resource: &str) -> String {
    format!("{ns}/RESOURCE#{resource}")
}

/// `{ns}/AUDIT#{entity}`.
pub fn audit_pk(ns: &str, entity: &str) -> String {
    format!("{ns}/AUDIT#{entity}")
}

/// `#AUDIT#{event_id}`.
pub fn audit_sk(event_id: &str) -> String {
    format!("{AUDIT_SK_PREFIX}{event_id}")
}

/// `#CONFIG#{resource}` (entity configuration, `_default_` included).
pub(crate) fn entity_config_sk(resource: &str) -> String {
    format!("{CONFIG_SK_PREFIX}{resource}")
}

/// `{ns}/PARENT#{parent}` (GSI1 partition of a parent's children).
pub fn parent_gsi1pk(ns: &str, parent: &str) -> String {
    format!("{ns}/PARENT#{parent}")
}

/// `CHILD#{entity}` (GSI1 sort key of a child).
pub(crate) fn child_gsi1sk(entity: &str) -> String {
    format!("CHILD#{entity}")
}

/// `{ns}/ENTITY_CONFIG#{resource}` (GSI3 partition listing entities with a config).
pub fn entity_config_gsi3pk(ns: &str, resource: &str) -> String {
    format!("{ns}/ENTITY_CONFIG#{resource}")
}

/// `{ns}/BUCKET#{entity}#{resource}#{shard}`.
pub fn bucket_pk(ns: &str, entity: &str, resource: &str, shard: u32) -> String {
    format!("{ns}/BUCKET#{entity}#{resource}#{shard}")
}

/// `BUCKET#{entity}#{shard}` (GSI2 sort key of a bucket).
pub fn bucket_gsi2sk(entity: &str, shard: u32) -> String {
    format!("{BUCKET_INDEX_SK_PREFIX}{entity}#{shard}")
}

/// `BUCKET#{resource}#{shard}` (GSI3 sort key of a bucket).
pub fn bucket_gsi3sk(resource: &str, shard: u32) -> String {
    format!("{BUCKET_INDEX_SK_PREFIX}{resource}#{shard}")
}

/// `BUCKET#{resource}#`: the GSI3 sort-key prefix of every shard of an entity's bucket on
/// `resource`.
pub fn bucket_gsi3sk_prefix(resource: &str) -> String {
    format!("{BUCKET_INDEX_SK_PREFIX}{resource}#")
}

/// `BUCKET#{entity}#{resource}#{shard}` (GSI4 sort key of a bucket).
pub fn bucket_gsi4sk(entity: &str, resource: &str, shard: u32) -> String {
    format!("{BUCKET_INDEX_SK_PREFIX}{entity}#{resource}#{shard}")
}

/// `#OP#{operation_id}`: sort key of a reset or top-up's operation record, in the partition
/// of the bucket's shard 0 (§1.4.8).
pub(crate) fn op_sk(operation_id: &str) -> String {
    format!("{OP_SK_PREFIX}{operation_id}")
}

/// `OP#{entity}#{resource}#{operation_id}`: GSI4 sort key of an operation record.
pub(crate) fn op_gsi4sk(entity: &str, resource: &str, operation_id: &str) -> String {
    format!("{OP_INDEX_SK_PREFIX}{entity}#{resource}#{operation_id}")
}

/// `#USAGE#{resource}#{window_key}`: sort key of a usage snapshot (§1.4.10).
pub fn usage_sk(resource: &str, window_key: &str) -> String {
    format!("{USAGE_SK_PREFIX}{resource}#{window_key}")
}

/// `#USAGE#{resource}#`: the sort-key prefix of an entity's snapshots of `resource`.
pub fn usage_sk_prefix(resource: &str) -> String {
    format!("{USAGE_SK_PREFIX}{resource}#")
}

/// `USAGE#{window_key}#{entity}`: GSI2 sort key of a usage snapshot.
pub(crate) fn usage_gsi2sk(window_key: &str, entity: &str) -> String {
    format!("{USAGE_INDEX_SK_PREFIX}{window_key}#{entity}")
}

/// `#AGGREGATOR#{resource}#{shard}`: sort key of the aggregator's watermark of one bucket
/// item, in the owner entity's partition.
pub(crate) fn watermark_sk(resource: &str, shard: u32) -> String {
    format!("{WATERMARK_SK_PREFIX}{resource}#{shard}")
}

/// `#ALERTS#{resource}`: sort key of the alert thresholds of one (entity, resource), in the
/// entity's partition.
pub fn alerts_sk(resource: &str) -> String {
    format!("{ALERTS_SK_PREFIX}{resource}")
}

/// `#ALERTED#{resource}#{limit}#{level}#{period_start_ms}`: sort key of the marker of one
/// threshold crossed in one period, in the entity's partition.
pub fn crossed_sk(resource: &str, limit: &str, level: u8, period_start_ms: i64) -> String {
    format!("{CROSSED_SK_PREFIX}{resource}#{limit}#{level}#{period_start_ms}")
}

/// `#ALERTED#{resource}#{limit}#refusing#{first_minute}`: sort key of the marker of one run
/// of refusal minutes published as an alert, in the entity's partition (`first_minute`
/// zero-padded as in the refusal items' keys).
pub fn refusing_sk(resource: &str, limit: &str, first_minute: &str) -> String {
    format!("{CROSSED_SK_PREFIX}{resource}#{limit}#{REFUSING_LEVEL}#{first_minute}")
}

/// The parts of a bucket partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPk {
    /// The namespace id.
    pub namespace_id: String,
    /// The entity id.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// The shard index.
    pub shard: u32,
}

/// Parses `{ns}/AUDIT#{entity}` into the namespace id and the entity (or config-level id):
/// the namespace ends at the first `/` (§1.4.9). `None` for any other key.
pub fn parse_audit_pk(pk: &str) -> Option<(&str, &str)> {
    let (ns, rest) = pk.split_once('/')?;
    let entity = rest.strip_prefix("AUDIT#")?;
    (!ns.is_empty() && !entity.is_empty()).then_some((ns, entity))
}

/// Parses `{ns}/BUCKET#{entity}#{resource}#{shard}`: the namespace ends at the first `/`, the
/// shard follows the last `#`, the entity ends at the first `#` (§1.4.7).
pub fn parse_bucket_pk(pk: &str) -> Option<BucketPk> {
    let (ns, rest) = pk.split_once('/')?;
    let rest = rest.strip_prefix(BUCKET_INDEX_SK_PREFIX)?;
    let (head, shard) = rest.rsplit_once('#')?;
    let (entity, resource) = head.split_once('#')?;
    if ns.is_empty() || entity.is_empty() || resource.is_empty() {
        return None;
    }
    Some(BucketPk {
        namespace_id: ns.to_string(),
        entity_id: entity.to_string(),
        resource: resource.to_string(),
        shard: shard.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_keys_round_trip_with_slashes_and_colons_in_the_resource() {
        let pk = bucket_pk("abc123", "user-1", "openai/gpt-4:turbo", 7);
        assert_eq!(pk, "abc123/BUCKET#user-1#openai/gpt-4:turbo#7");
        let parsed = parse_bucket_pk(&pk).unwrap();
        assert_eq!(parsed.entity_id, "user-1");
        assert_eq!(parsed.resource, "openai/gpt-4:turbo");
        assert_eq!(parsed.shard, 7);
        assert!(parse_bucket_pk("abc/ENTITY#x").is_none());
        assert!(parse_bucket_pk("abc/BUCKET#x#y#z").is_none());
    }

    #[test]
    fn snapshot_and_watermark_keys_match_the_format() {
        assert_eq!(
            usage_sk("gpt-4", "2026-03-10T00:00:00Z"),
            "#USAGE#gpt-4#2026-03-10T00:00:00Z"
        );
        assert_eq!(
            usage_gsi2sk("2026-03-10T00:00:00Z", "u1"),
            "USAGE#2026-03-10T00:00:00Z#u1"
        );
        assert_eq!(watermark_sk("gpt-4", 3), "#AGGREGATOR#gpt-4#3");
        assert_eq!(bucket_gsi3sk_prefix("gpt-4"), "BUCKET#gpt-4#");
    }

    #[test]
    fn operation_record_keys_match_the_format() {
        assert_eq!(op_sk("order-7"), "#OP#order-7");
        assert_eq!(
            op_gsi4sk("u1", "openai/gpt-4", "order-7"),
            "OP#u1#openai/gpt-4#order-7"
        );
    }
}
