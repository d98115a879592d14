//! Key strings of the table format (reference §1.3, §1.4). Every function here builds exactly
//! the string the format prescribes; nothing else in the crate concatenates key fragments.

/// Partition key of the namespace registry and the version record.
pub const SYSTEM_RESERVED_PK: &str = "_/SYSTEM#";
/// GSI4 partition of the reserved namespace.
pub const RESERVED_NS: &str = "_";
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

/// `#NAMESPACE#{name}`.
pub fn namespace_sk(name: &str) -> String {
    format!("{NAMESPACE_SK_PREFIX}{name}")
}

/// `#NSID#{id}`.
pub fn nsid_sk(id: &str) -> String {
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
pub fn entity_config_sk(resource: &str) -> String {
    format!("{CONFIG_SK_PREFIX}{resource}")
}

/// `{ns}/PARENT#{parent}` (GSI1 partition of a parent's children).
pub fn parent_gsi1pk(ns: &str, parent: &str) -> String {
    format!("{ns}/PARENT#{parent}")
}

/// `CHILD#{entity}` (GSI1 sort key of a child).
pub fn child_gsi1sk(entity: &str) -> String {
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
    format!("BUCKET#{entity}#{shard}")
}

/// `BUCKET#{resource}#{shard}` (GSI3 sort key of a bucket).
pub fn bucket_gsi3sk(resource: &str, shard: u32) -> String {
    format!("BUCKET#{resource}#{shard}")
}

/// `BUCKET#{entity}#{resource}#{shard}` (GSI4 sort key of a bucket).
pub fn bucket_gsi4sk(entity: &str, resource: &str, shard: u32) -> String {
    format!("BUCKET#{entity}#{resource}#{shard}")
}

/// The parts of a bucket partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketKey {
    /// The namespace id.
    pub namespace_id: String,
    /// The entity id.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// The shard index.
    pub shard: u32,
}

/// Parses `{ns}/BUCKET#{entity}#{resource}#{shard}`: the namespace ends at the first `/`, the
/// shard follows the last `#`, the entity ends at the first `#` (§1.4.7).
pub fn parse_bucket_pk(pk: &str) -> Option<BucketKey> {
    let (ns, rest) = pk.split_once('/')?;
    let rest = rest.strip_prefix("BUCKET#")?;
    let (head, shard) = rest.rsplit_once('#')?;
    let (entity, resource) = head.split_once('#')?;
    if ns.is_empty() || entity.is_empty() || resource.is_empty() {
        return None;
    }
    Some(BucketKey {
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
}
