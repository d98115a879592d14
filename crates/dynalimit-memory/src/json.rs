//! Attribute values in the JSON protocol's shape (`{"S": "x"}`, `{"N": "1"}`, …), read with
//! DynamoDB's checks (numbers, empty and duplicate sets) and written canonically.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use serde_json::{Map, Value};

use super::fault::{Fault, Item};
use super::number::Decimal;

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn malformed(what: &str) -> Fault {
    Fault::new(
        "SerializationException",
        format!("Unexpected value for an attribute value: {what}"),
    )
}

/// A number in canonical form.
pub(crate) fn number(text: &str) -> Result<String, Fault> {
    Ok(Decimal::parse(text)?.to_text())
}

fn text(v: &Value) -> Result<&str, Fault> {
    v.as_str().ok_or_else(|| malformed("expected a string"))
}

fn blob(v: &Value) -> Result<Blob, Fault> {
    BASE64
        .decode(text(v)?)
        .map(Blob::new)
        .map_err(|_| malformed("a binary value is not base64"))
}

/// The members of a set: read each, refuse an empty set and duplicates.
fn set<T: PartialEq>(
    v: &Value,
    kind: &str,
    read: impl Fn(&Value) -> Result<T, Fault>,
) -> Result<Vec<T>, Fault> {
    let list = v.as_array().ok_or_else(|| malformed("expected a list"))?;
    if list.is_empty() {
        return Err(Fault::validation(format!(
            "One or more parameter values were invalid: An {kind} may not be empty"
        )));
    }
    let members = list.iter().map(read).collect::<Result<Vec<T>, Fault>>()?;
    for (i, m) in members.iter().enumerate() {
        if members[..i].contains(m) {
            return Err(Fault::validation(
                "One or more parameter values were invalid: Input collection contains duplicates",
            ));
        }
    }
    Ok(members)
}

/// Reads one attribute value.
pub(crate) fn value(v: &Value) -> Result<AttributeValue, Fault> {
    let object = v
        .as_object()
        .ok_or_else(|| malformed("expected an object"))?;
    let mut entries = object.iter();
    let (Some((tag, inner)), None) = (entries.next(), entries.next()) else {
        return Err(Fault::validation(
            "Supplied AttributeValue has more or less than one datatype set",
        ));
    };
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text(inner)?.to_owned()),
        "N" => AttributeValue::N(number(text(inner)?)?),
        "B" => AttributeValue::B(blob(inner)?),
        "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or_else(|| malformed("BOOL"))?),
        "NULL" => {
            if inner.as_bool() != Some(true) {
                return Err(Fault::validation(
                    "One or more parameter values were invalid: Null attribute value types must have the value of true",
                ));
            }
            AttributeValue::Null(true)
        }
        "SS" => AttributeValue::Ss(set(inner, "string set", |m| text(m).map(str::to_owned))?),
        "NS" => AttributeValue::Ns(set(inner, "number set", |m| number(text(m)?))?),
        "BS" => AttributeValue::Bs(set(inner, "binary set", blob)?),
        "L" => AttributeValue::L(
            inner
                .as_array()
                .ok_or_else(|| malformed("L"))?
                .iter()
                .map(value)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item(inner)?),
        other => return Err(malformed(other)),
    })
}

/// Reads an item (or a key, or a map value).
pub(crate) fn item(v: &Value) -> Result<Item, Fault> {
    v.as_object()
        .ok_or_else(|| malformed("expected a map of attributes"))?
        .iter()
        .map(|(k, v)| Ok((k.clone(), value(v)?)))
        .collect()
}

/// Writes one attribute value.
pub(crate) fn write_value(v: &AttributeValue) -> Value {
    let tagged = |tag: &str, inner: Value| {
        let mut m = Map::new();
        m.insert(tag.to_owned(), inner);
        Value::Object(m)
    };
    let strings = |s: &[String]| Value::Array(s.iter().cloned().map(Value::String).collect());
    match v {
        AttributeValue::S(s) => tagged("S", Value::String(s.clone())),
        AttributeValue::N(n) => tagged("N", Value::String(n.clone())),
        AttributeValue::B(b) => tagged("B", Value::String(BASE64.encode(b.as_ref()))),
        AttributeValue::Bool(b) => tagged("BOOL", Value::Bool(*b)),
        AttributeValue::Ss(s) => tagged("SS", strings(s)),
        AttributeValue::Ns(s) => tagged("NS", strings(s)),
        AttributeValue::Bs(s) => tagged(
            "BS",
            Value::Array(
                s.iter()
                    .map(|b| Value::String(BASE64.encode(b.as_ref())))
                    .collect(),
            ),
        ),
        AttributeValue::L(l) => tagged("L", Value::Array(l.iter().map(write_value).collect())),
        AttributeValue::M(m) => tagged("M", write_item(m)),
        // `Null` and any type this SDK version does not know.
        _ => tagged("NULL", Value::Bool(true)),
    }
}

/// Writes an item.
pub(crate) fn write_item(item: &Item) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), write_value(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_round_trip_with_canonical_numbers() {
        let given = json!({
            "s": {"S": "x"}, "n": {"N": "010.50"}, "b": {"B": "AAE="}, "t": {"BOOL": true},
            "z": {"NULL": true}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2.0"]},
            "l": {"L": [{"S": "a"}, {"N": "1"}]}, "m": {"M": {"k": {"S": "v"}}}
        });
        let read = item(&given).unwrap();
        assert_eq!(read["n"], AttributeValue::N("10.5".into()));
        assert_eq!(read["ns"], AttributeValue::Ns(vec!["1".into(), "2".into()]));
        assert_eq!(item(&write_item(&read)).unwrap(), read);
    }

    #[test]
    fn malformed_values_are_refused_as_dynamodb_refuses_them() {
        for bad in [
            json!({"S": "x", "N": "1"}),
            json!({"N": "one"}),
            json!({"SS": []}),
            json!({"SS": ["a", "a"]}),
            json!({"NS": ["1", "1.0"]}),
            json!({"NULL": false}),
            json!({"X": "?"}),
        ] {
            assert!(value(&bad).is_err(), "{bad}");
        }
    }
}
