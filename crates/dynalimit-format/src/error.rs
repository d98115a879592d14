//! What a codec reports about an item it cannot read.

use thiserror::Error;

/// An item that does not decode: malformed, or carrying what dynalimit does not implement.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The item does not have the shape the format prescribes, or holds a value outside the
    /// range a reader accepts (`dynalimit_core::bounds`).
    #[error("malformed item {key}: {message}")]
    Corrupt {
        /// The item's key (`PK|SK`).
        key: String,
        /// The attribute at fault, when one is.
        attribute: Option<String>,
        /// What is wrong (naming the attribute, when there is one).
        message: String,
    },

    /// The item carries a feature of a newer zae-limiter that dynalimit does not implement.
    #[error("item {key} uses {feature}, which dynalimit does not implement")]
    Unsupported {
        /// The item's key (`PK|SK`).
        key: String,
        /// The feature found.
        feature: String,
    },

    /// A stored configuration names a limit after an item attribute of the format
    /// ([`crate::attr::ALL`]).
    #[error(
        "item {key} configures a limit named {name:?}, a reserved name (an item attribute of \
         the table format); store the limits under another name"
    )]
    ReservedLimitName {
        /// The config item's key (`PK|SK`).
        key: String,
        /// The reserved limit name found.
        name: String,
    },

    /// A stored configuration names more limits than one bucket carries
    /// ([`crate::attr::MAX_LIMITS_PER_BUCKET`]).
    #[error(
        "item {key} configures {given} limits; one bucket carries at most {max}: store fewer \
         limits (split them across resources)"
    )]
    TooManyLimits {
        /// The config item's key (`PK|SK`).
        key: String,
        /// How many limits it names.
        given: usize,
        /// The most one bucket carries.
        max: usize,
    },

    /// A stored schedule that does not decode (reference §12.2): corrupt, or written by a
    /// newer encoder. A bucket or configuration carrying it is treated as unavailable.
    #[error("stored schedule {encoded:?} does not decode: {message}")]
    Schedule {
        /// The stored string (its first 200 characters).
        encoded: String,
        /// What is wrong.
        message: String,
    },
}

impl FormatError {
    pub(crate) fn corrupt(key: impl Into<String>, message: impl Into<String>) -> Self {
        FormatError::Corrupt {
            key: key.into(),
            attribute: None,
            message: message.into(),
        }
    }

    /// The error of an item whose attribute `attribute` holds what a reader does not accept.
    pub(crate) fn corrupt_attribute(
        key: impl Into<String>,
        attribute: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        FormatError::Corrupt {
            key: key.into(),
            attribute: Some(attribute.into()),
            message: message.into(),
        }
    }
}
