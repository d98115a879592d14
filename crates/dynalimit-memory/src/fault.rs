//! A refused request, as DynamoDB words it: the error code of the JSON protocol, its message,
//! and what some codes carry (the item of a failed condition, a transaction's reasons).

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// An item: attribute name to value.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Why one item of a transaction was cancelled (`None` for the items that were not).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reason {
    /// `None`, `ConditionalCheckFailed`, `ValidationError`.
    pub(crate) code: &'static str,
    /// The message, when there is one.
    pub(crate) message: Option<String>,
    /// The item as it was, when `ALL_OLD` was asked for on a failed condition.
    pub(crate) item: Option<Item>,
}

/// A refused request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    /// The error code (`ValidationException`, …) without the protocol's namespace.
    pub(crate) code: &'static str,
    /// The message.
    pub(crate) message: String,
    /// The item of a failed condition, when it was asked for (`ALL_OLD`) and exists.
    pub(crate) item: Option<Item>,
    /// A cancelled transaction's reasons, one per item.
    pub(crate) reasons: Option<Vec<Reason>>,
}

impl Fault {
    /// A fault with `code` and `message`.
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Fault {
        Fault {
            code,
            message: message.into(),
            item: None,
            reasons: None,
        }
    }

    /// A `ValidationException`.
    pub(crate) fn validation(message: impl Into<String>) -> Fault {
        Fault::new("ValidationException", message)
    }

    /// A `ValidationException` naming what the in-memory store does not implement.
    pub(crate) fn unsupported(what: impl std::fmt::Display) -> Fault {
        Fault::validation(format!(
            "The in-memory DynamoDB store does not support {what}"
        ))
    }

    /// A `ResourceNotFoundException` for `table`.
    pub(crate) fn no_table(table: &str) -> Fault {
        Fault::new(
            "ResourceNotFoundException",
            format!("Requested resource not found: Table: {table} not found"),
        )
    }

    /// A failed condition, with the item as it was when asked for.
    pub(crate) fn condition_failed(item: Option<Item>) -> Fault {
        Fault {
            item,
            ..Fault::new(
                "ConditionalCheckFailedException",
                "The conditional request failed",
            )
        }
    }
}
