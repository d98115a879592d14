//! The error type of the pure layer.

use thiserror::Error;

/// Bad input detected before any I/O.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CoreError {
    /// An identifier (entity, resource, limit name, stack, namespace, principal) is malformed.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidIdentifier {
        /// Which identifier: `entity_id`, `resource`, `limit name`, …
        field: &'static str,
        /// The offending value, cut to its first 50 characters.
        value: String,
        /// What rule it breaks.
        reason: String,
    },
    /// A limit name equal to an attribute name of an item the table format defines (raised by
    /// the table format's `attr::validate_limit_name`): limits become counter attributes of
    /// usage snapshots, so it would collide with that attribute.
    #[error(
        "invalid limit name {name:?}: reserved, it is an attribute of {items} in the table \
         format, and a limit's usage is stored under its name"
    )]
    ReservedLimitName {
        /// The refused name.
        name: String,
        /// The items that carry an attribute of that name.
        items: &'static str,
    },
    /// More limits than one bucket's requests can carry (raised by the table format's
    /// `attr::validate_limit_count`): a configuration, an acquire's limits or the names it
    /// consumes.
    #[error(
        "{field}: {given} limits, more than one bucket carries (at most {max}); DynamoDB \
         would refuse the bucket's requests as too large: split the limits across resources"
    )]
    TooManyLimits {
        /// What was counted (`limits`, `consume`).
        field: &'static str,
        /// How many were given.
        given: usize,
        /// The most one bucket carries.
        max: usize,
    },
    /// A value (amount, capacity, period, …) is outside what the format allows.
    #[error("invalid {field} {value}: {reason}")]
    InvalidValue {
        /// Which value.
        field: &'static str,
        /// The offending value, rendered.
        value: String,
        /// What rule it breaks.
        reason: String,
    },
}

impl CoreError {
    /// Builds an [`CoreError::InvalidIdentifier`], cutting `value` to 50 characters.
    pub fn invalid_identifier(field: &'static str, value: &str, reason: impl Into<String>) -> Self {
        CoreError::InvalidIdentifier {
            field,
            value: value.chars().take(50).collect(),
            reason: reason.into(),
        }
    }

    /// Builds an [`CoreError::InvalidValue`].
    pub fn invalid_value(
        field: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        CoreError::InvalidValue {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
