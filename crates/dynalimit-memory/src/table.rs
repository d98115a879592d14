//! One table of the store: its definition (keys, attribute types, indexes, settings) and its
//! items in primary-key order.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};

use super::eval;
use super::fault::{Fault, Item};
use super::number::Decimal;

/// The largest item DynamoDB stores (400 KB).
const MAX_ITEM_BYTES: usize = 400 * 1024;

/// A key attribute's value, ordered as DynamoDB orders sort keys: strings and binaries by
/// their bytes, numbers by value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyPart {
    /// A binary value.
    B(Vec<u8>),
    /// A number.
    N(Decimal),
    /// A string.
    S(String),
}

impl KeyPart {
    fn of(v: &AttributeValue) -> Option<KeyPart> {
        Some(match v {
            AttributeValue::S(s) => KeyPart::S(s.clone()),
            AttributeValue::N(n) => KeyPart::N(Decimal::parse(n).ok()?),
            AttributeValue::B(b) => KeyPart::B(b.as_ref().to_vec()),
            _ => return None,
        })
    }
}

/// A primary key in storage order.
pub(crate) type PrimaryKey = (KeyPart, Option<KeyPart>);

/// A hash key and an optional range key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The partition key attribute.
    pub(crate) hash: String,
    /// The sort key attribute.
    pub(crate) range: Option<String>,
}

impl Keys {
    /// The attribute names, hash first.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.hash).chain(&self.range)
    }

    fn schema(&self) -> Value {
        let mut out = vec![json!({"AttributeName": self.hash, "KeyType": "HASH"})];
        if let Some(r) = &self.range {
            out.push(json!({"AttributeName": r, "KeyType": "RANGE"}));
        }
        Value::Array(out)
    }
}

/// What an index holds of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Projection {
    /// Every attribute.
    All,
    /// The table and index keys.
    KeysOnly,
    /// The keys and these attributes.
    Include(Vec<String>),
}

/// A secondary index.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    /// Its name.
    pub(crate) name: String,
    /// Its keys.
    pub(crate) keys: Keys,
    /// What it holds.
    pub(crate) projection: Projection,
    /// Global (own partition key) or local.
    pub(crate) global: bool,
}

/// One table.
#[derive(Debug)]
pub(crate) struct Table {
    /// The table name.
    pub(crate) name: String,
    /// The primary key.
    pub(crate) keys: Keys,
    /// Declared key attribute types (`S`, `N`, `B`).
    pub(crate) types: BTreeMap<String, String>,
    /// Secondary indexes, global ones first.
    pub(crate) indexes: Vec<Index>,
    /// The stream specification as given (recorded; no stream is kept).
    pub(crate) stream: Option<Value>,
    /// `PAY_PER_REQUEST` or `PROVISIONED`.
    pub(crate) billing: String,
    /// The TTL attribute, when enabled (recorded; nothing expires).
    pub(crate) ttl: Option<String>,
    /// Creation time, epoch seconds.
    pub(crate) created: f64,
    /// The items, by primary key.
    pub(crate) items: BTreeMap<PrimaryKey, Item>,
}

impl Table {
    /// The index named `name`.
    pub(crate) fn index(&self, name: &str) -> Result<&Index, Fault> {
        self.indexes.iter().find(|i| i.name == name).ok_or_else(|| {
            Fault::validation(format!(
                "The table does not have the specified index: {name}"
            ))
        })
    }

    /// The primary key of a `Key` parameter, which must name exactly the key attributes.
    pub(crate) fn key_of(&self, key: &Item) -> Result<PrimaryKey, Fault> {
        let expected = self.keys.names().count();
        if key.len() != expected {
            return Err(Fault::validation(
                "The provided key element does not match the schema",
            ));
        }
        self.primary_key(key)
    }

    /// The primary key of an item (which may hold other attributes).
    pub(crate) fn primary_key(&self, item: &Item) -> Result<PrimaryKey, Fault> {
        let part = |name: &String| -> Result<KeyPart, Fault> {
            let value = item.get(name).ok_or_else(|| {
                Fault::validation("The provided key element does not match the schema")
            })?;
            self.key_part(name, value, None)
        };
        let hash = part(&self.keys.hash)?;
        let range = self.keys.range.as_ref().map(part).transpose()?;
        Ok((hash, range))
    }

    /// A key attribute's value, checked against its declared type.
    fn key_part(
        &self,
        name: &str,
        value: &AttributeValue,
        index: Option<&str>,
    ) -> Result<KeyPart, Fault> {
        let declared = self.types.get(name).map_or("S", String::as_str);
        let actual = eval::type_name(value);
        if declared != actual {
            return Err(Fault::validation(match index {
                None => "The provided key element does not match the schema".to_owned(),
                Some(index) => format!(
                    "One or more parameter values were invalid: Type mismatch for Index Key {name} Expected: {declared} Actual: {actual} IndexName: {index}"
                ),
            }));
        }
        let empty = match value {
            AttributeValue::S(s) => s.is_empty(),
            AttributeValue::B(b) => b.as_ref().is_empty(),
            _ => false,
        };
        if empty {
            return Err(Fault::validation(match index {
                None => format!(
                    "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: {name}"
                ),
                Some(index) => format!(
                    "One or more parameter values are not valid. A value specified for a secondary index key is not supported. The AttributeValue for a key attribute cannot contain an empty string value. IndexName: {index}, IndexKey: {name}"
                ),
            }));
        }
        KeyPart::of(value).ok_or_else(|| Fault::validation("Invalid key value"))
    }

    /// Checks an item about to be stored: its keys, the index keys it carries, its size.
    pub(crate) fn check_item(&self, item: &Item) -> Result<PrimaryKey, Fault> {
        let key = self.primary_key(item)?;
        for index in &self.indexes {
            for name in index.keys.names() {
                if let Some(value) = item.get(name) {
                    self.key_part(name, value, Some(&index.name))?;
                }
            }
        }
        if item_size(item) > MAX_ITEM_BYTES {
            return Err(Fault::validation(
                "Item size has exceeded the maximum allowed size",
            ));
        }
        Ok(key)
    }

    /// The key attributes of an item (table keys, and an index's keys when given).
    pub(crate) fn key_attributes(&self, item: &Item, index: Option<&Index>) -> Item {
        self.keys
            .names()
            .chain(index.into_iter().flat_map(|i| i.keys.names()))
            .filter_map(|n| item.get(n).map(|v| (n.clone(), v.clone())))
            .collect()
    }

    /// What `index` holds of `item`: `None` when the item lacks the index's keys.
    pub(crate) fn indexed(&self, item: &Item, index: &Index) -> Option<Item> {
        if !index.keys.names().all(|n| item.contains_key(n)) {
            return None;
        }
        Some(match &index.projection {
            Projection::All => item.clone(),
            Projection::KeysOnly => self.key_attributes(item, Some(index)),
            Projection::Include(names) => {
                let mut out = self.key_attributes(item, Some(index));
                for n in names {
                    if let Some(v) = item.get(n) {
                        out.insert(n.clone(), v.clone());
                    }
                }
                out
            }
        })
    }

    /// The order of an item in `index` (its keys, then the table's to break ties).
    pub(crate) fn position(&self, item: &Item, index: Option<&Index>) -> Vec<Option<KeyPart>> {
        let part = |n: &String| item.get(n).and_then(KeyPart::of);
        let mut out = Vec::new();
        if let Some(index) = index {
            out.extend(index.keys.names().map(part));
        }
        out.extend(self.keys.names().map(part));
        out
    }

    /// The table's description (`DescribeTable`, `CreateTable`, `DeleteTable`).
    pub(crate) fn describe(&self, status: &str) -> Value {
        let arn = format!("arn:aws:dynamodb:memory:000000000000:table/{}", self.name);
        let mut out = json!({
            "TableName": self.name,
            "TableStatus": status,
            "TableArn": arn,
            "CreationDateTime": self.created,
            "KeySchema": self.keys.schema(),
            "AttributeDefinitions": self.types.iter().map(|(n, t)| json!({
                "AttributeName": n, "AttributeType": t
            })).collect::<Vec<_>>(),
            "ItemCount": self.items.len(),
            "TableSizeBytes": self.items.values().map(item_size).sum::<usize>(),
            "BillingModeSummary": {"BillingMode": self.billing},
        });
        let describe_index = |i: &Index| {
            let projection = match &i.projection {
                Projection::All => json!({"ProjectionType": "ALL"}),
                Projection::KeysOnly => json!({"ProjectionType": "KEYS_ONLY"}),
                Projection::Include(names) => {
                    json!({"ProjectionType": "INCLUDE", "NonKeyAttributes": names})
                }
            };
            let count = self
                .items
                .values()
                .filter(|item| self.indexed(item, i).is_some())
                .count();
            let mut d = json!({
                "IndexName": i.name,
                "KeySchema": i.keys.schema(),
                "Projection": projection,
                "IndexArn": format!("{arn}/index/{}", i.name),
                "ItemCount": count,
                "IndexSizeBytes": 0,
            });
            if i.global {
                d["IndexStatus"] = json!("ACTIVE");
            }
            d
        };
        let globals: Vec<Value> = self
            .indexes
            .iter()
            .filter(|i| i.global)
            .map(describe_index)
            .collect();
        let locals: Vec<Value> = self
            .indexes
            .iter()
            .filter(|i| !i.global)
            .map(describe_index)
            .collect();
        if !globals.is_empty() {
            out["GlobalSecondaryIndexes"] = Value::Array(globals);
        }
        if !locals.is_empty() {
            out["LocalSecondaryIndexes"] = Value::Array(locals);
        }
        if let Some(stream) = &self.stream {
            out["StreamSpecification"] = stream.clone();
        }
        out
    }
}

/// An item's size as DynamoDB counts it, closely enough to enforce the 400 KB limit.
fn item_size(item: &Item) -> usize {
    fn value_size(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => n.len().div_ceil(2) + 1,
            AttributeValue::B(b) => b.as_ref().len(),
            AttributeValue::Ss(s) | AttributeValue::Ns(s) => s.iter().map(String::len).sum(),
            AttributeValue::Bs(s) => s.iter().map(|b| b.as_ref().len()).sum(),
            AttributeValue::L(l) => 3 + l.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
            AttributeValue::M(m) => 3 + item_size(m) + m.len(),
            _ => 1,
        }
    }
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}
