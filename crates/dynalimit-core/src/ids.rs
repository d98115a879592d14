//! Identifier rules of the table format (reference §6.1), checked before any request.
//!
//! | identifier | first character | then | max length |
//! |---|---|---|---|
//! | entity id, parent id, principal | letter or digit | letters, digits, `_ . - : @` | 256 |
//! | limit name | letter | letters, digits, `_ . -` | 64 (`wcu` is reserved; the table format reserves its attribute names too) |
//! | resource | letter | letters, digits, `_ . - / :` | 64 (`_default_` is the entity-wide name) |
//! | stack (table) name | letter | letters, digits, `-` | 55 |
//! | namespace name | any | no `/`, `#` or control characters, not `_` | 128 |
//! | idempotency key (reset, top-up) | letter, digit, `_ . - :` | the same | 64 |

use crate::CoreError;

/// The reserved resource name meaning "every resource of this entity".
pub const DEFAULT_RESOURCE: &str = "_default_";
/// The reserved namespace holding the namespace registry and the version record.
pub const RESERVED_NAMESPACE: &str = "_";
/// The reserved limit name of the write-capacity tracker on every bucket item.
pub(crate) const WCU_LIMIT: &str = "wcu";

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

/// Checks a limit name: the format's rule, and `wcu` (the write-capacity tracker) is refused.
/// The table format also refuses its item attribute names (`ttl`, `window`, …); limits headed
/// for the table are checked with `dynalimit_format::attr::validate_limit_name`.
///
/// ```
/// use dynalimit_core::ids::validate_limit_name;
/// assert!(validate_limit_name("rpm.v2").is_ok());
/// assert!(validate_limit_name("wcu").is_err());
/// assert!(validate_limit_name("9lives").is_err());
/// ```
///
/// # Errors
/// [`CoreError::InvalidIdentifier`] for a name breaking the rule or `wcu`.
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

/// Checks the idempotency key of a reset or top-up: 1 to 64 letters, digits, `.`, `_`, `:`
/// or `-` (it becomes part of a sort key, so `#` and anything else is refused).
///
/// ```
/// use dynalimit_core::ids::validate_idempotency_key;
/// assert!(validate_idempotency_key("order-2026.11:17_a").is_ok());
/// assert!(validate_idempotency_key("a#b").is_err());
/// assert!(validate_idempotency_key(&"k".repeat(65)).is_err());
/// ```
pub fn validate_idempotency_key(key: &str) -> Result<(), CoreError> {
    let allowed = |c: char| alnum(c) || matches!(c, '_' | '.' | '-' | ':');
    check(
        "idempotency_key",
        key,
        64,
        allowed,
        "a letter, digit, _ . - or :",
        allowed,
        "letters, digits, _ . - :",
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
