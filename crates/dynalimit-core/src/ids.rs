//! Identifier rules of the table format (reference §6.1), checked before any request.
//!
//! | identifier | first character | then | max length |
//! |---|---|---|---|
//! | entity id, parent id, principal | letter or digit | letters, digits, `_ . - : @` | 256 |
//! | limit name | letter | letters, digits, `_ . -` | 64 (`wcu` and [`RESERVED_LIMIT_NAMES`] are reserved) |
//! | resource | letter | letters, digits, `_ . - / :` | 64 (`_default_` is the entity-wide name) |
//! | stack (table) name | letter | letters, digits, `-` | 55 |
//! | namespace name | any | no `/`, `#` or control characters, not `_` | 128 |

use crate::CoreError;

/// The reserved resource name meaning "every resource of this entity".
pub const DEFAULT_RESOURCE: &str = "_default_";
/// The reserved namespace holding the namespace registry and the version record.
pub const RESERVED_NAMESPACE: &str = "_";
/// The reserved limit name of the write-capacity tracker on every bucket item.
pub const WCU_LIMIT: &str = "wcu";

/// Limit names refused because they are attribute names of items the table format defines
/// (reference §1.2–§1.4, every item kind), each with the items that carry it.
///
/// A limit's consumption is stored on usage snapshot items as a counter attribute named
/// exactly after the limit (§1.4.10), so a limit named `ttl`, `window` or `PK` would
/// overwrite (or be refused as) an attribute the format gives that item, and every
/// aggregator transaction for the bucket would fail. The list takes every item kind, not
/// only snapshots, so that no future use of limit names as attribute names can collide
/// either. Comparison is exact: DynamoDB attribute names are case-sensitive, so `pk` or
/// `TTL` stay allowed.
///
/// zae-limiter 0.17 refuses only `wcu` (`zae_limiter.models.RESERVED_LIMIT_NAMES`); a
/// configuration it stored with one of these names is reported by dynalimit's reader instead
/// of being read.
pub const RESERVED_LIMIT_NAMES: &[(&str, &str)] = &[
    // §1.2: primary key, index keys (GSI1–4, the reserved LSI1–5) and the TTL attribute.
    ("PK", "every item (primary key)"),
    ("SK", "every item (sort key)"),
    ("GSI1PK", "entity items (GSI1 key)"),
    ("GSI1SK", "entity items (GSI1 key)"),
    ("GSI2PK", "bucket and usage snapshot items (GSI2 key)"),
    ("GSI2SK", "bucket and usage snapshot items (GSI2 key)"),
    ("GSI3PK", "entity config and bucket items (GSI3 key)"),
    ("GSI3SK", "entity config and bucket items (GSI3 key)"),
    ("GSI4PK", "every namespaced item (GSI4 key)"),
    ("GSI4SK", "every namespaced item (GSI4 key)"),
    ("LSI1SK", "the table's reserved LSI1 key"),
    ("LSI2SK", "the table's reserved LSI2 key"),
    ("LSI3SK", "the table's reserved LSI3 key"),
    ("LSI4SK", "the table's reserved LSI4 key"),
    ("LSI5SK", "the table's reserved LSI5 key"),
    (
        "ttl",
        "bucket, operation, audit and usage snapshot items (the table's TTL)",
    ),
    // §1.4.1–§1.4.2: namespace registry records.
    ("namespace_id", "namespace registry items"),
    ("namespace_name", "namespace registry items"),
    ("status", "namespace registry items"),
    ("created_at", "namespace registry and entity items"),
    ("deleted_at", "namespace registry items"),
    // §1.4.3: the version record (`template_version` is tolerated by readers).
    ("schema_version", "the version record"),
    ("lambda_version", "the version record"),
    ("client_min_version", "the version record"),
    ("updated_at", "the version record"),
    ("updated_by", "the version record"),
    ("template_version", "the version record"),
    // §1.4.4: entity metadata.
    (
        "entity_id",
        "entity, config, bucket, operation, audit and usage snapshot items",
    ),
    ("name", "entity items"),
    ("parent_id", "entity and bucket items"),
    ("cascade", "entity, config and bucket items"),
    ("pgen", "entity and bucket items"),
    ("pinc", "entity and bucket items"),
    ("metadata", "entity items"),
    // §1.4.5–§1.4.6: limit configuration items and registries.
    ("config_version", "config items"),
    ("on_unavailable", "the system config item"),
    ("audit_retention_days", "the system config item"),
    (
        "resource",
        "config, bucket, operation, audit and usage snapshot items",
    ),
    ("disabled", "config and bucket items"),
    ("sched_tz", "config and bucket items"),
    ("resources", "the resource registry item"),
    // §1.4.7: bucket items (item-level attributes).
    ("rf", "bucket items"),
    ("shard_count", "bucket items"),
    ("bypass", "bucket items"),
    ("vu", "bucket items"),
    ("sched", "bucket items"),
    ("rsched", "bucket items"),
    // §1.4.8: reset / top-up operation records.
    ("operation", "operation records"),
    ("writer", "operation records"),
    ("ent", "operation records"),
    ("shards", "operation records"),
    ("amounts", "operation records"),
    // §1.4.9: audit events.
    ("event_id", "audit items"),
    ("timestamp", "audit items"),
    ("action", "audit items"),
    ("principal", "audit items"),
    ("details", "audit items"),
    // §1.4.10: usage snapshots (besides the keys, ids and ttl above).
    ("window", "usage snapshot items"),
    ("window_start", "usage snapshot items"),
    ("total_events", "usage snapshot items"),
    // §1.4.11: provisioner state.
    ("managed_system", "the provisioner state item"),
    ("managed_resources", "the provisioner state item"),
    ("managed_entities", "the provisioner state item"),
    ("last_applied", "the provisioner state item"),
    ("applied_hash", "the provisioner state item"),
    ("owners", "provisioner pending items"),
    // §1.4.12: legacy formats readers still recognise.
    ("total_consumed_milli", "legacy (pre-0.6) items"),
    ("tokens_milli", "legacy (pre-0.6) items"),
    ("data", "legacy (pre-0.6) items"),
    // dynalimit's aggregator watermark items (`#AGGREGATOR#…`, lambda/aggregator).
    ("seq", "aggregator watermark items"),
    ("shard", "aggregator watermark items"),
];

/// The items carrying attribute `name` when it is one of [`RESERVED_LIMIT_NAMES`].
///
/// ```
/// use dynalimit_core::ids::reserved_limit_name;
/// assert!(reserved_limit_name("ttl").is_some());
/// assert!(reserved_limit_name("TTL").is_none());
/// ```
pub fn reserved_limit_name(name: &str) -> Option<&'static str> {
    RESERVED_LIMIT_NAMES
        .iter()
        .find(|(reserved, _)| *reserved == name)
        .map(|(_, items)| *items)
}

fn check(
    field: &'static str,
    value: &str,
    max: usize,
    first: fn(char) -> bool,
    first_rule: &str,
    rest: fn(char) -> bool,
    rest_rule: &str,
) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::invalid_identifier(
            field,
            value,
            "must not be empty",
        ));
    }
    let len = value.chars().count();
    if len > max {
        return Err(CoreError::invalid_identifier(
            field,
            value,
            format!("is {len} characters long, the maximum is {max}"),
        ));
    }
    if value.contains('#') {
        return Err(CoreError::invalid_identifier(
            field,
            value,
            "must not contain '#'",
        ));
    }
    let mut chars = value.chars();
    if let Some(c) = chars.next()
        && !first(c)
    {
        return Err(CoreError::invalid_identifier(
            field,
            value,
            format!("must start with {first_rule}"),
        ));
    }
    if let Some(bad) = chars.find(|c| !rest(*c)) {
        return Err(CoreError::invalid_identifier(
            field,
            value,
            format!("character {bad:?} is not allowed (allowed: {rest_rule})"),
        ));
    }
    Ok(())
}

fn alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn alpha(c: char) -> bool {
    c.is_ascii_alphabetic()
}

/// Checks an entity id (also used for parent ids).
///
/// ```
/// use dynalimit_core::ids::validate_entity_id;
/// assert!(validate_entity_id("user-123@example.com").is_ok());
/// assert!(validate_entity_id("#bad").is_err());
/// ```
pub fn validate_entity_id(entity_id: &str) -> Result<(), CoreError> {
    check(
        "entity_id",
        entity_id,
        256,
        alnum,
        "a letter or digit",
        |c| alnum(c) || matches!(c, '_' | '.' | '-' | ':' | '@'),
        "letters, digits, _ . - : @",
    )
}

/// Checks an audit principal: ARNs are accepted as they are, anything else follows the entity
/// id rule.
pub fn validate_principal(principal: &str) -> Result<(), CoreError> {
    if principal.starts_with("arn:") {
        if principal.len() > 2048 {
            return Err(CoreError::invalid_identifier(
                "principal",
                principal,
                "is longer than 2048 characters",
            ));
        }
        return Ok(());
    }
    check(
        "principal",
        principal,
        256,
        alnum,
        "a letter or digit",
        |c| alnum(c) || matches!(c, '_' | '.' | '-' | ':' | '@'),
        "letters, digits, _ . - : @",
    )
}

/// Checks a limit name: the format's rule, `wcu` (the write-capacity tracker) and the
/// attribute names of [`RESERVED_LIMIT_NAMES`] are refused.
///
/// ```
/// use dynalimit_core::CoreError;
/// use dynalimit_core::ids::validate_limit_name;
/// assert!(validate_limit_name("rpm.v2").is_ok());
/// assert!(validate_limit_name("wcu").is_err());
/// assert!(matches!(
///     validate_limit_name("total_events"),
///     Err(CoreError::ReservedLimitName { .. })
/// ));
/// ```
///
/// # Errors
/// [`CoreError::InvalidIdentifier`] for a name breaking the rule or `wcu`,
/// [`CoreError::ReservedLimitName`] for an item attribute name.
pub fn validate_limit_name(name: &str) -> Result<(), CoreError> {
    check(
        "limit name",
        name,
        64,
        alpha,
        "a letter",
        |c| alnum(c) || matches!(c, '_' | '.' | '-'),
        "letters, digits, _ . -",
    )?;
    if name == WCU_LIMIT {
        return Err(CoreError::invalid_identifier(
            "limit name",
            name,
            "'wcu' is reserved for the write-capacity tracker",
        ));
    }
    if let Some(items) = reserved_limit_name(name) {
        return Err(CoreError::ReservedLimitName {
            name: name.to_owned(),
            items,
        });
    }
    Ok(())
}

/// Checks a resource name as used by an acquire. The reserved `_default_` is refused here; the
/// configuration calls that accept it check for it first.
///
/// ```
/// use dynalimit_core::ids::validate_resource;
/// assert!(validate_resource("openai/gpt-4").is_ok());
/// assert!(validate_resource("llama3:8b").is_ok());
/// assert!(validate_resource("_default_").is_err());
/// ```
pub fn validate_resource(resource: &str) -> Result<(), CoreError> {
    check(
        "resource",
        resource,
        64,
        alpha,
        "a letter",
        |c| alnum(c) || matches!(c, '_' | '.' | '-' | '/' | ':'),
        "letters, digits, _ . - / :",
    )
}

/// Checks a resource name where the entity-wide `_default_` is also meaningful (entity
/// limit configuration).
pub fn validate_config_resource(resource: &str) -> Result<(), CoreError> {
    if resource == DEFAULT_RESOURCE {
        Ok(())
    } else {
        validate_resource(resource)
    }
}

/// Checks a stack name, which is also the table name.
///
/// ```
/// use dynalimit_core::ids::validate_stack_name;
/// assert!(validate_stack_name("dynalimit-prod").is_ok());
/// assert!(validate_stack_name("my_table").is_err());
/// ```
pub fn validate_stack_name(name: &str) -> Result<(), CoreError> {
    check(
        "stack name",
        name,
        55,
        alpha,
        "a letter",
        |c| alnum(c) || c == '-',
        "letters, digits, -",
    )
}

/// Checks a namespace name: any text but the reserved `_`, without `/`, `#` or control
/// characters, at most 128 characters.
pub fn validate_namespace_name(name: &str) -> Result<(), CoreError> {
    if name == RESERVED_NAMESPACE {
        return Err(CoreError::invalid_identifier(
            "namespace",
            name,
            "'_' is reserved for the namespace registry",
        ));
    }
    check(
        "namespace",
        name,
        128,
        |c| !c.is_control() && c != '/',
        "a printable character other than '/'",
        |c| !c.is_control() && c != '/',
        "printable characters other than / and #",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_ids_follow_the_reference_rule() {
        for ok in ["a", "0abc", "user_1.2-3:4@x", &"a".repeat(256)] {
            assert!(validate_entity_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "_a", "-a", "a#b", "a b", "a/b", &"a".repeat(257), "é"] {
            assert!(validate_entity_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resources_allow_slash_and_colon_but_must_start_with_a_letter() {
        assert!(validate_resource("openai/gpt-4").is_ok());
        assert!(validate_resource("a:b_c.d-e").is_ok());
        assert!(validate_resource("4o").is_err());
        assert!(validate_resource(&"r".repeat(65)).is_err());
        assert!(validate_resource("a@b").is_err());
        assert!(validate_config_resource(DEFAULT_RESOURCE).is_ok());
    }

    #[test]
    fn limit_names_reserve_wcu_and_forbid_slash() {
        assert!(validate_limit_name("tpm_input").is_ok());
        assert!(validate_limit_name("rpm.v2").is_ok());
        assert!(validate_limit_name("a/b").is_err());
        assert!(validate_limit_name("1rpm").is_err());
        assert!(validate_limit_name("wcu").is_err());
    }

    #[test]
    fn every_item_attribute_name_is_refused_as_a_limit_name() {
        for (name, items) in RESERVED_LIMIT_NAMES {
            // Each would pass the name rule: the refusal is the reservation.
            assert!(name.chars().next().unwrap().is_ascii_alphabetic(), "{name}");
            match validate_limit_name(name) {
                Err(CoreError::ReservedLimitName { name: n, items: i }) => {
                    assert_eq!((n.as_str(), i), (*name, *items));
                }
                other => panic!("{name}: {other:?}"),
            }
            let message = validate_limit_name(name).unwrap_err().to_string();
            assert!(
                message.contains(name) && message.contains(items),
                "{message}"
            );
        }
        let mut names: Vec<&str> = RESERVED_LIMIT_NAMES.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RESERVED_LIMIT_NAMES.len(), "listed twice");
    }

    #[test]
    fn near_misses_of_reserved_names_stay_allowed() {
        for ok in [
            "pk",
            "Pk",
            "sk",
            "TTL",
            "Ttl",
            "ttl2",
            "ttl_s",
            "ttls",
            "Window",
            "window2",
            "windows",
            "window-start",
            "window.start",
            "total",
            "total_events2",
            "events",
            "gsi2pk",
            "GSI5PK",
            "GSI2PK1",
            "LSI6SK",
            "entity",
            "entity_ids",
            "Resource",
            "resource2",
            "res",
            "rpm",
            "tpm",
            "requests",
            "tokens",
            "status_code",
            "names",
            "sched2",
            "rf2",
            "shard_counts",
            "datas",
            "dat",
        ] {
            assert!(validate_limit_name(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn errors_keep_the_first_fifty_characters() {
        let long = "#".repeat(80);
        match validate_entity_id(&long) {
            Err(CoreError::InvalidIdentifier { value, .. }) => assert_eq!(value.len(), 50),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn stack_and_namespace_names() {
        assert!(validate_stack_name("ZAEL-legacy").is_ok());
        assert!(validate_stack_name(&"s".repeat(56)).is_err());
        assert!(validate_stack_name("a.b").is_err());
        assert!(validate_namespace_name("tenant alpha").is_ok());
        assert!(validate_namespace_name("_").is_err());
        assert!(validate_namespace_name("a/b").is_err());
        assert!(validate_namespace_name("a#b").is_err());
        assert!(validate_namespace_name("").is_err());
    }
}
