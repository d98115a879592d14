//! The DynamoDB JSON protocol (`application/x-amz-json-1.0`) for the fast path: a writer that
//! builds request bodies straight into a byte buffer and a reader for attribute maps.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use dynalimit_format::bucket::Value as Plain;
use dynalimit_format::item::{Digits, Item};

/// Builds one JSON object. Field names are written as given (they are protocol names, never
/// user text); every value string is escaped.
#[derive(Debug)]
pub struct ObjectWriter {
    buf: Vec<u8>,
    first: bool,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    /// An empty object.
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(1024);
        buf.push(b'{');
        ObjectWriter { buf, first: true }
    }

    fn key(&mut self, name: &str) {
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
        self.buf.push(b'"');
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b"\":");
    }

    /// `"name": "value"`.
    pub fn string(&mut self, name: &str, value: &str) -> &mut Self {
        self.key(name);
        write_string(&mut self.buf, value);
        self
    }

    /// `"name": {attribute map}`.
    pub fn item<'a>(
        &mut self,
        name: &str,
        item: impl IntoIterator<Item = (&'a String, &'a AttributeValue)>,
    ) -> &mut Self {
        self.key(name);
        write_map(&mut self.buf, item);
        self
    }

    /// `"name": {entry, …}`, each entry written by `write`.
    fn object<T>(
        &mut self,
        name: &str,
        entries: impl IntoIterator<Item = T>,
        mut write: impl FnMut(&mut Vec<u8>, T),
    ) -> &mut Self {
        self.key(name);
        self.buf.push(b'{');
        for (i, entry) in entries.into_iter().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            write(&mut self.buf, entry);
        }
        self.buf.push(b'}');
        self
    }

    /// `"name": {"k": "v", …}` for string pairs.
    pub fn strings<'a>(
        &mut self,
        name: &str,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> &mut Self {
        self.object(name, pairs, |buf, (k, v)| {
            write_string(buf, k);
            buf.push(b':');
            write_string(buf, v);
        })
    }

    /// Fields written once ahead of time ([`Fields::render`]), appended as they are.
    pub fn fields(&mut self, prepared: &Fields) -> &mut Self {
        if prepared.0.is_empty() {
            return self;
        }
        if !self.first {
            self.buf.push(b',');
        }
        self.first = false;
        self.buf.extend_from_slice(&prepared.0);
        self
    }

    /// `"name": {"attr": {"S": "value"}, …}`: a key of string attributes.
    pub fn string_key(&mut self, name: &str, attrs: &[(&str, &str)]) -> &mut Self {
        self.object(name, attrs, |buf, (attr, value)| {
            write_string(buf, attr);
            buf.push(b':');
            write_tagged(buf, "S", |b| write_string(b, value));
        })
    }

    /// `"name": {"p0": {"N": "v0"}, …}` for number values, each behind the prepared opening
    /// `"p": {"N": "` of its placeholder ([`number_openings`]).
    pub fn numbers(
        &mut self,
        name: &str,
        openings: &[Box<[u8]>],
        values: impl IntoIterator<Item = i64>,
    ) -> &mut Self {
        self.object(
            name,
            openings.iter().zip(values),
            |buf, (opening, value)| {
                buf.extend_from_slice(opening);
                write_i64(buf, value);
                buf.extend_from_slice(b"\"}");
            },
        )
    }

    /// Closes the object and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(b'}');
        self.buf
    }
}

/// Fields of an object rendered once (`"A":…,"B":…`, without braces), for requests whose
/// constant part is prepared ahead of time.
#[derive(Debug, Clone, Default)]
pub struct Fields(Vec<u8>);

impl Fields {
    /// The fields `write` adds to an empty object.
    pub fn render(write: impl FnOnce(&mut ObjectWriter)) -> Fields {
        let mut w = ObjectWriter::new();
        write(&mut w);
        let mut bytes = w.buf;
        bytes.remove(0);
        Fields(bytes)
    }
}

/// The opening `"placeholder":{"N":"` of each number value, for [`ObjectWriter::numbers`].
pub fn number_openings<'a>(placeholders: impl IntoIterator<Item = &'a str>) -> Vec<Box<[u8]>> {
    placeholders
        .into_iter()
        .map(|p| {
            let mut b = Vec::with_capacity(p.len() + 10);
            write_string(&mut b, p);
            b.extend_from_slice(b":{\"N\":\"");
            b.into_boxed_slice()
        })
        .collect()
}

/// Writes the decimal digits of `n`.
fn write_i64(buf: &mut Vec<u8>, n: i64) {
    if n < 0 {
        buf.push(b'-');
    }
    buf.extend_from_slice(Digits::of(n.unsigned_abs()).as_bytes());
}

fn write_map<'a>(
    buf: &mut Vec<u8>,
    item: impl IntoIterator<Item = (&'a String, &'a AttributeValue)>,
) {
    buf.push(b'{');
    for (i, (k, v)) in item.into_iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        write_string(buf, k);
        buf.push(b':');
        write_value(buf, v);
    }
    buf.push(b'}');
}

fn write_list<'a, T: 'a>(
    buf: &mut Vec<u8>,
    items: &'a [T],
    mut each: impl FnMut(&mut Vec<u8>, &'a T),
) {
    buf.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        each(buf, item);
    }
    buf.push(b']');
}

fn write_tagged(buf: &mut Vec<u8>, tag: &str, body: impl FnOnce(&mut Vec<u8>)) {
    buf.extend_from_slice(b"{\"");
    buf.extend_from_slice(tag.as_bytes());
    buf.extend_from_slice(b"\":");
    body(buf);
    buf.push(b'}');
}

/// Writes one attribute value in its tagged form (`{"N":"5"}`).
fn write_value(buf: &mut Vec<u8>, value: &AttributeValue) {
    match value {
        AttributeValue::S(s) => write_tagged(buf, "S", |b| write_string(b, s)),
        AttributeValue::N(n) => write_tagged(buf, "N", |b| write_string(b, n)),
        AttributeValue::B(blob) => {
            write_tagged(buf, "B", |b| write_string(b, &BASE64.encode(blob.as_ref())));
        }
        AttributeValue::Bool(v) => write_tagged(buf, "BOOL", |b| {
            b.extend_from_slice(if *v { b"true" } else { b"false" });
        }),
        AttributeValue::Null(_) => write_tagged(buf, "NULL", |b| b.extend_from_slice(b"true")),
        AttributeValue::M(m) => write_tagged(buf, "M", |b| write_map(b, m)),
        AttributeValue::L(l) => write_tagged(buf, "L", |b| write_list(b, l, write_value)),
        AttributeValue::Ss(l) => {
            write_tagged(buf, "SS", |b| write_list(b, l, |b, s| write_string(b, s)))
        }
        AttributeValue::Ns(l) => {
            write_tagged(buf, "NS", |b| write_list(b, l, |b, s| write_string(b, s)))
        }
        AttributeValue::Bs(l) => write_tagged(buf, "BS", |b| {
            write_list(b, l, |b, blob| {
                write_string(b, &BASE64.encode(blob.as_ref()))
            });
        }),
        // A variant added by a newer SDK; the fast path never builds one.
        _ => write_tagged(buf, "NULL", |b| b.extend_from_slice(b"true")),
    }
}

/// Writes `s` as a JSON string literal.
fn write_string(buf: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &c) in bytes.iter().enumerate() {
        let escape: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            buf.extend_from_slice(b"\\u00");
            buf.push(HEX[usize::from(c >> 4)]);
            buf.push(HEX[usize::from(c & 0xf)]);
        } else {
            buf.extend_from_slice(escape);
        }
        start = i + 1;
    }
    buf.extend_from_slice(&bytes[start..]);
    buf.push(b'"');
}

/// One attribute value read from its tagged JSON form.
pub(crate) struct Value(pub(crate) AttributeValue);

/// An attribute map read from JSON.
pub(crate) struct Map(pub(crate) Item);

impl<'de> Deserialize<'de> for Map {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = Map;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an attribute map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Map, A::Error> {
                let mut item = HashMap::with_capacity(access.size_hint().unwrap_or(16));
                while let Some((k, Value(v))) = access.next_entry::<String, Value>()? {
                    item.insert(k, v);
                }
                Ok(Map(item))
            }
        }
        d.deserialize_map(MapVisitor)
    }
}

struct Values(Vec<AttributeValue>);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Values;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of attribute values")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Values, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(4));
                while let Some(Value(v)) = seq.next_element::<Value>()? {
                    out.push(v);
                }
                Ok(Values(out))
            }
        }
        d.deserialize_seq(ListVisitor)
    }
}

fn blob<E: de::Error>(text: &str) -> Result<Blob, E> {
    BASE64
        .decode(text)
        .map(Blob::new)
        .map_err(|e| E::custom(format!("invalid base64 in a binary attribute: {e}")))
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tagged attribute value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
                let Some(tag) = access.next_key::<std::borrow::Cow<'de, str>>()? else {
                    return Err(de::Error::custom("an empty attribute value"));
                };
                let value = match tag.as_ref() {
                    "S" => AttributeValue::S(access.next_value()?),
                    "N" => AttributeValue::N(access.next_value()?),
                    "B" => AttributeValue::B(blob(&access.next_value::<String>()?)?),
                    "BOOL" => AttributeValue::Bool(access.next_value()?),
                    "NULL" => AttributeValue::Null(access.next_value()?),
                    "M" => AttributeValue::M(access.next_value::<Map>()?.0),
                    "L" => AttributeValue::L(access.next_value::<Values>()?.0),
                    "SS" => AttributeValue::Ss(access.next_value()?),
                    "NS" => AttributeValue::Ns(access.next_value()?),
                    "BS" => AttributeValue::Bs(
                        access
                            .next_value::<Vec<String>>()?
                            .iter()
                            .map(|s| blob(s))
                            .collect::<Result<_, _>>()?,
                    ),
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown attribute type {other:?}"
                        )));
                    }
                };
                if access.next_key::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom("an attribute value with two types"));
                }
                Ok(Value(value))
            }
        }
        d.deserialize_map(ValueVisitor)
    }
}

/// The attributes of a successful `UpdateItem`'s answer (`{"Attributes": {…}}`), read in
/// place from its bytes with nothing copied: `Some` with the attributes (none when the answer
/// carries no item), `None` when the answer is anything but the plain shape (a string with an
/// escape, a value other than a number, a string or a boolean, or text that is not JSON); such
/// an answer is read as a whole instead (`UpdateItemBody`).
pub fn plain_attributes(bytes: &[u8]) -> Option<PlainAttributes<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut c = Cursor { text, at: 0 };
    let mut attrs = PlainAttributes::new();
    c.open(b'{')?;
    if !c.close(b'}') {
        loop {
            let field = c.string()?;
            c.colon()?;
            if field == "Attributes" {
                c.attributes(&mut attrs)?;
            } else {
                c.skip_value(0)?;
            }
            if c.close(b'}') {
                break;
            }
            c.comma()?;
        }
    }
    c.ws();
    (c.at == text.len()).then_some(attrs)
}

/// The attributes of an answer, on the stack for an item of up to 40 attributes (a bucket
/// with six limits).
pub type PlainAttributes<'a> = smallvec::SmallVec<[(&'a str, Plain<'a>); 40]>;

/// Reads JSON text in place; every method answers `None` where the text is not what the
/// plain answer holds.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

/// How deep [`Cursor::skip_value`] follows nested values.
const MAX_DEPTH: usize = 32;

impl<'a> Cursor<'a> {
    fn ws(&mut self) {
        let b = self.text.as_bytes();
        while self.at < b.len() && matches!(b[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.text.as_bytes().get(self.at).copied()
    }

    fn open(&mut self, c: u8) -> Option<()> {
        // Compact JSON first: the byte itself, without looking for white space.
        if self.text.as_bytes().get(self.at) == Some(&c) {
            self.at += 1;
            return Some(());
        }
        (self.peek()? == c).then(|| self.at += 1)
    }

    fn close(&mut self, c: u8) -> bool {
        self.open(c).is_some()
    }

    fn colon(&mut self) -> Option<()> {
        self.open(b':')
    }

    fn comma(&mut self) -> Option<()> {
        self.open(b',')
    }

    /// A string without escapes (or control characters, which JSON escapes).
    fn string(&mut self) -> Option<&'a str> {
        self.open(b'"')?;
        let start = self.at;
        let rest = &self.text.as_bytes()[start..];
        // The answer's strings are short (names, numbers, ids): one pass, byte by byte, beats
        // a vector search and a second pass for control characters.
        let end = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at = start + end + 1;
        // Both ends are ASCII quotes: character boundaries.
        Some(&self.text[start..start + end])
    }

    fn literal(&mut self, word: &str) -> bool {
        let found = self.text.as_bytes()[self.at..].starts_with(word.as_bytes());
        if found {
            self.at += word.len();
        }
        found
    }

    /// `{"name": {"T": value}, …}` with `T` one of `N`, `S`, `BOOL`.
    fn attributes(&mut self, out: &mut PlainAttributes<'a>) -> Option<()> {
        self.open(b'{')?;
        if self.close(b'}') {
            return Some(());
        }
        loop {
            let name = self.string()?;
            self.colon()?;
            self.open(b'{')?;
            let tag = self.string()?;
            self.colon()?;
            let value = match tag {
                "N" => Plain::N(self.string()?),
                "S" => Plain::S(self.string()?),
                "BOOL" => {
                    self.ws();
                    if self.literal("true") {
                        Plain::Bool(true)
                    } else if self.literal("false") {
                        Plain::Bool(false)
                    } else {
                        return None;
                    }
                }
                _ => return None,
            };
            if !self.close(b'}') {
                return None;
            }
            out.push((name, value));
            if self.close(b'}') {
                return Some(());
            }
            self.comma()?;
        }
    }

    /// Any JSON value, skipped (strings without escapes only).
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let (open, close) = if self.peek()? == b'{' {
                    (b'{', b'}')
                } else {
                    (b'[', b']')
                };
                self.open(open)?;
                if self.close(close) {
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.string()?;
                        self.colon()?;
                    }
                    self.skip_value(depth + 1)?;
                    if self.close(close) {
                        return Some(());
                    }
                    self.comma()?;
                }
            }
            b't' => self.literal("true").then_some(()),
            b'f' => self.literal("false").then_some(()),
            b'n' => self.literal("null").then_some(()),
            _ => {
                let b = self.text.as_bytes();
                let start = self.at;
                while self.at < b.len()
                    && matches!(b[self.at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }
}

/// The body of a successful `UpdateItem`.
#[derive(Deserialize)]
pub(crate) struct UpdateItemBody {
    #[serde(rename = "Attributes")]
    pub(crate) attributes: Option<Map>,
}

/// The body of an error response.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(rename = "__type")]
    pub(crate) kind: Option<String>,
    #[serde(alias = "Message")]
    pub(crate) message: Option<String>,
    #[serde(rename = "Item")]
    pub(crate) item: Option<Map>,
}

impl ErrorBody {
    /// The error code without its namespace (`ConditionalCheckFailedException`).
    pub(crate) fn code(&self) -> &str {
        let kind = self.kind.as_deref().unwrap_or("Unknown");
        kind.rsplit('#').next().unwrap_or(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(bytes: &[u8]) -> Item {
        serde_json::from_slice::<Map>(bytes).unwrap().0
    }

    #[test]
    fn strings_are_escaped_as_json() {
        let mut buf = Vec::new();
        write_string(&mut buf, "a\"b\\c\nd\u{1}é");
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(text, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        assert_eq!(
            serde_json::from_str::<String>(&text).unwrap(),
            "a\"b\\c\nd\u{1}é"
        );
    }

    #[test]
    fn every_attribute_type_round_trips() {
        let mut nested = HashMap::new();
        nested.insert("x".to_string(), AttributeValue::N("-1.5".into()));
        let mut item = HashMap::new();
        item.insert("s".to_string(), AttributeValue::S("tenant/\"q\"".into()));
        item.insert("n".to_string(), AttributeValue::N("12".into()));
        item.insert(
            "b".to_string(),
            AttributeValue::B(Blob::new(vec![0, 255, 7])),
        );
        item.insert("t".to_string(), AttributeValue::Bool(true));
        item.insert("z".to_string(), AttributeValue::Null(true));
        item.insert("m".to_string(), AttributeValue::M(nested));
        item.insert(
            "l".to_string(),
            AttributeValue::L(vec![
                AttributeValue::S("a".into()),
                AttributeValue::Bool(false),
            ]),
        );
        item.insert(
            "ss".to_string(),
            AttributeValue::Ss(vec!["a".into(), "b".into()]),
        );
        item.insert("ns".to_string(), AttributeValue::Ns(vec!["1".into()]));
        item.insert(
            "bs".to_string(),
            AttributeValue::Bs(vec![Blob::new(vec![1])]),
        );
        let mut w = ObjectWriter::new();
        w.item("Item", &item);
        let body: serde_json::Value = serde_json::from_slice(&w.finish()).unwrap();
        let back = read(serde_json::to_vec(&body["Item"]).unwrap().as_slice());
        assert_eq!(back, item);
    }

    #[test]
    fn an_error_body_gives_its_code_message_and_item() {
        let body: ErrorBody = serde_json::from_slice(
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed","Item":{"tk":{"N":"5"}}}"#,
        )
        .unwrap();
        assert_eq!(body.code(), "ConditionalCheckFailedException");
        assert_eq!(
            body.message.as_deref(),
            Some("The conditional request failed")
        );
        assert_eq!(body.item.unwrap().0["tk"], AttributeValue::N("5".into()));
        let bare: ErrorBody =
            serde_json::from_slice(br#"{"__type":"ThrottlingException","Message":"slow down"}"#)
                .unwrap();
        assert_eq!(bare.code(), "ThrottlingException");
        assert_eq!(bare.message.as_deref(), Some("slow down"));
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            &br#"{"a":{}}"#[..],
            br#"{"a":{"S":"x","N":"1"}}"#,
            br#"{"a":{"Q":"x"}}"#,
            br#"{"a":{"B":"!!"}}"#,
        ] {
            assert!(
                serde_json::from_slice::<Map>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest! {
        #[test]
        fn any_strings_and_numbers_round_trip(
            entries in proptest::collection::hash_map("\\PC{0,12}", ("\\PC{0,24}", any::<i64>()), 0..8)
        ) {
            let mut item = HashMap::new();
            for (k, (s, n)) in &entries {
                item.insert(format!("s{k}"), AttributeValue::S(s.clone()));
                item.insert(format!("n{k}"), AttributeValue::N(n.to_string()));
            }
            let mut w = ObjectWriter::new();
            w.item("I", &item);
            let bytes = w.finish();
            let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let back = read(serde_json::to_vec(&parsed["I"]).unwrap().as_slice());
            prop_assert_eq!(back, item);
        }
    }
}
