//! Raw DynamoDB items: the map type, attribute values and typed reads.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::FormatError;
use crate::attr;

/// A raw DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// A string attribute value.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute value.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The key map `{PK, SK}`.
pub fn key(pk: impl Into<String>, sk: impl Into<String>) -> Item {
    HashMap::from([(attr::PK.to_string(), s(pk)), (attr::SK.to_string(), s(sk))])
}

/// `PK` and `SK` of an item, when both are strings.
pub fn key_of(item: &Item) -> Option<(&str, &str)> {
    Some((get_s(item, attr::PK)?, get_s(item, attr::SK)?))
}

/// The key map `{PK, SK}` of an item, when both are strings.
pub fn key_map_of(item: &Item) -> Option<Item> {
    key_of(item).map(|(pk, sk)| key(pk, sk))
}

/// Reads a string attribute; `None` when absent or NULL.
pub fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.as_str()),
        _ => None,
    }
}

/// Reads a number attribute as i64; `None` when absent, NULL or not an integer.
pub fn get_i64(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => parse_number(v),
        _ => None,
    }
}

/// The decimal digits of an unsigned number, written on the stack (no formatter, no
/// allocation): for request bodies and expression placeholders built on the hot path.
///
/// ```
/// use dynalimit_format::item::Digits;
/// assert_eq!(Digits::of(0).as_bytes(), b"0");
/// assert_eq!(Digits::of(u64::MAX).as_bytes(), u64::MAX.to_string().as_bytes());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    /// The digits of `n`.
    pub fn of(n: u64) -> Self {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        let mut rest = n;
        loop {
            start -= 1;
            buf[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        Digits { buf, start }
    }

    /// The digits, as ASCII bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// Parses a DynamoDB number that holds an integer (`"12"`, `"12.0"`, `"1.2E1"`).
pub(crate) fn parse_number(text: &str) -> Option<i64> {
    if let Ok(v) = text.parse::<i64>() {
        return Some(v);
    }
    let f = text.parse::<f64>().ok()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// Reads a boolean attribute.
pub(crate) fn get_bool(item: &Item, name: &str) -> Option<bool> {
    match item.get(name) {
        Some(AttributeValue::Bool(v)) => Some(*v),
        _ => None,
    }
}

/// Reads a required string attribute.
///
/// # Errors
/// [`FormatError::Corrupt`] when missing.
pub(crate) fn require_s(item: &Item, name: &str) -> Result<String, FormatError> {
    get_s(item, name)
        .map(str::to_string)
        .ok_or_else(|| FormatError::corrupt(describe_key(item), format!("missing string {name}")))
}

/// `PK|SK` of an item, for messages.
pub fn describe_key(item: &Item) -> String {
    format!(
        "{}|{}",
        get_s(item, attr::PK).unwrap_or("?"),
        get_s(item, attr::SK).unwrap_or("?")
    )
}

/// Whether an attribute is absent or NULL.
pub fn is_null(value: Option<&AttributeValue>) -> bool {
    matches!(value, Some(AttributeValue::Null(true)) | None)
}

/// A string attribute, or NULL for `None`.
pub fn s_or_null(value: Option<&str>) -> AttributeValue {
    value.map_or(AttributeValue::Null(true), s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_in_every_shape_dynamodb_returns() {
        assert_eq!(parse_number("-12"), Some(-12));
        assert_eq!(parse_number("12.0"), Some(12));
        assert_eq!(parse_number("1.2E1"), Some(12));
        assert_eq!(parse_number("1.5"), None);
    }
}
