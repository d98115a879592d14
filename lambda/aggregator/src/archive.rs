//! Audit archival: audit events that expire from the table become S3 objects.
//!
//! Audit items carry a `ttl` (their creation plus the namespace's `audit_retention_days`).
//! When DynamoDB's TTL deletes one, the stream carries a `REMOVE` record whose old image is the
//! event and whose user identity is DynamoDB's own service principal. With an archive bucket
//! configured, the aggregator writes each such event to one object:
//!
//! ```text
//! audit/year=YYYY/month=MM/day=DD/audit-{namespace id}.{entity}.{event id}.jsonl
//! ```
//!
//! The date is the event's own (`timestamp`), so the Hive-style partitions line up with
//! zae-limiter 0.17's archive and a query engine reads both. The namespace and the entity in
//! the name let a reader of one entity's events skip every other object unread (an id that is
//! not made of letters, digits, `-` and `_` is written in hex after a `!`, so `.` separates
//! them unambiguously). The body is one JSON line with
//! zae-limiter's fields (`event_id`, `entity_id`, `action`, `timestamp`, `principal`,
//! `resource`, `details`) and `namespace`.
//!
//! # Exactly once
//! The key is a function of the event alone, and so is the body. A batch delivered again
//! (whole, split by bisection, or from a reported failure) writes the same objects with the
//! same bytes: an event is never archived twice and never under two names. A write that
//! failed, or whose answer was lost, reports its record as failed; the stream delivers it
//! again and the write is repeated, landing on the same key.
//!
//! Deletes made by a writer (an entity's or a namespace's purge) are not expiries: they carry
//! no service identity and are not archived. zae-limiter archives every removal it sees, but
//! its stream filter never passes one (its audit keys start with the namespace, its filter
//! with `AUDIT#`).

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::attr;
use dynalimit_format::audit::AuditEvent;
use dynalimit_format::item::get_s;
use dynalimit_format::keys;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::AggregatorError;
use crate::record::{EventKind, StreamRecord};

/// Where every archive object's key starts.
pub const PREFIX: &str = "audit/";
/// The content type of an archive object (JSON lines).
pub const CONTENT_TYPE: &str = "application/x-ndjson";

/// One archived audit event, as its object's line holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedEvent {
    /// The namespace id of the event's key (absent in zae-limiter's archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The event id (a ULID for events dynalimit and zae-limiter write).
    pub event_id: String,
    /// The entity, or a config-level id (`$SYSTEM`, `$RESOURCE:{resource}`).
    pub entity_id: String,
    /// What happened (`limits_set`, `entity_created`, …).
    pub action: String,
    /// When, as the event stored it (`YYYY-MM-DDTHH:MM:SSZ`).
    pub timestamp: String,
    /// Who, when known.
    #[serde(default)]
    pub principal: Option<String>,
    /// The resource, when the event names one.
    #[serde(default)]
    pub resource: Option<String>,
    /// The event's details, as JSON.
    #[serde(default)]
    pub details: BTreeMap<String, Value>,
}

/// An event to archive and the object that holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveObject {
    /// The object's key.
    pub key: String,
    /// The event.
    pub event: ArchivedEvent,
}

impl ArchiveObject {
    /// The object's body: the event as one JSON line.
    pub fn body(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(&self.event).expect("an event serialises");
        line.push(b'\n');
        line
    }
}

/// A stored attribute value as JSON: numbers as numbers (integers when they are), sets as
/// arrays, binary values as base64 text, anything else as `null`.
pub fn attribute_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => Value::from(s.as_str()),
        AttributeValue::N(n) => n
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| n.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::from(n.as_str())),
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::L(l) => Value::Array(l.iter().map(attribute_json).collect()),
        AttributeValue::M(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), attribute_json(v)))
                .collect(),
        ),
        AttributeValue::Ss(s) => Value::from(s.clone()),
        AttributeValue::Ns(n) => Value::from(n.clone()),
        AttributeValue::B(b) => Value::from(aws_smithy_types::base64::encode(b.as_ref())),
        _ => Value::Null,
    }
}

/// The longest id written into an object's name as it is; longer ones are named by digest.
const MAX_SEGMENT_BYTES: usize = 128;
/// The largest archive object a reader takes: an event is one item (at most 400 KB) as JSON.
pub const MAX_OBJECT_BYTES: i64 = 4 * 1024 * 1024;

/// `text` when it is safe as one segment of an object key (1 to 128 letters, digits, `-`
/// and `_`); else `!` and its bytes in hex, up to 128 bytes; else `!h` and the hex of its
/// SHA-256. `!` never starts a plain id and `h` is no hex digit, so distinct ids keep distinct
/// keys, and a key stays far below S3's 1024 bytes whatever another writer stored in the
/// item's key.
fn key_segment(text: &str) -> String {
    let plain = (1..=MAX_SEGMENT_BYTES).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        text.to_owned()
    } else if text.len() <= MAX_SEGMENT_BYTES {
        format!("!{}", hex::encode(text))
    } else {
        use sha2::Digest as _;
        format!("!h{}", hex::encode(sha2::Sha256::digest(text)))
    }
}

/// The partition of an event's date: `year=YYYY/month=MM/day=DD/` when `timestamp` starts
/// with a date, else `undated/`.
fn partition(timestamp: &str) -> String {
    let date = timestamp.get(..10).filter(|d| {
        let b = d.as_bytes();
        b[4] == b'-'
            && b[7] == b'-'
            && [0, 1, 2, 3, 5, 6, 8, 9]
                .iter()
                .all(|&i| b[i].is_ascii_digit())
    });
    match date {
        Some(d) => format!("year={}/month={}/day={}/", &d[..4], &d[5..7], &d[8..10]),
        None => "undated/".to_owned(),
    }
}

/// The key of the object archiving event `event_id` of `entity` in namespace `ns`, stamped
/// `timestamp`.
pub fn object_key(ns: &str, entity: &str, event_id: &str, timestamp: &str) -> String {
    format!(
        "{PREFIX}{}{}{}.jsonl",
        partition(timestamp),
        object_name_prefix(ns, Some(entity)),
        key_segment(event_id)
    )
}

/// How the names of the objects of namespace `ns` (and of `entity` in it, when given) start.
fn object_name_prefix(ns: &str, entity: Option<&str>) -> String {
    match entity {
        Some(e) => format!("audit-{}.{}.", key_segment(ns), key_segment(e)),
        None => format!("audit-{}.", key_segment(ns)),
    }
}

/// Whether the record is the expiry (TTL removal) of an audit item.
fn is_audit_expiry(record: &StreamRecord) -> bool {
    record.kind == EventKind::Remove
        && record.removed_by_ttl
        && record
            .old_image
            .as_ref()
            .and_then(|old| get_s(old, attr::SK))
            .is_some_and(|sk| sk.starts_with(keys::AUDIT_SK_PREFIX))
}

/// The object archiving `record`: `None` when the record is not the expiry of an audit
/// item, an error naming the record when its old image is not an audit event (such a record
/// is logged and not delivered again: delivering it cannot make it readable).
pub fn expired_event(record: &StreamRecord) -> Option<Result<ArchiveObject, String>> {
    if !is_audit_expiry(record) {
        return None;
    }
    let old = record.old_image.as_ref()?;
    let read = || -> Result<ArchiveObject, String> {
        let pk = get_s(old, attr::PK).unwrap_or_default();
        let (ns, _) = keys::parse_audit_pk(pk)
            .ok_or_else(|| format!("record {}: {pk:?} is not an audit key", record.event_id))?;
        let event = AuditEvent::from_item(old)
            .map_err(|e| format!("record {}: not an audit event: {e}", record.event_id))?;
        let key = object_key(ns, &event.entity_id, &event.event_id, &event.timestamp);
        Ok(ArchiveObject {
            key,
            event: ArchivedEvent {
                namespace: Some(ns.to_owned()),
                event_id: event.event_id,
                entity_id: event.entity_id,
                action: event.action,
                timestamp: event.timestamp,
                principal: event.principal,
                resource: event.resource,
                details: event
                    .details
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute_json(v)))
                    .collect(),
            },
        })
    };
    Some(read())
}

/// The events of one archive object's body, one per non-empty line (zae-limiter's objects
/// hold several; they are gzip-compressed and must be unpacked first).
///
/// # Errors
/// The line that is not an archived event, and why.
pub fn parse_object(body: &[u8]) -> Result<Vec<ArchivedEvent>, String> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .enumerate()
        .map(|(i, line)| serde_json::from_slice(line).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The archive bucket, written by the aggregator and read by `dynalimit audit --archive`.
#[derive(Debug, Clone)]
pub struct Archive {
    s3: aws_sdk_s3::Client,
    bucket: String,
}

fn s3_error(operation: &'static str, e: impl std::fmt::Display) -> AggregatorError {
    AggregatorError::Archive {
        operation,
        message: e.to_string(),
    }
}

impl Archive {
    /// The archive in `bucket`, through a client made from `config` (path-style addressing
    /// when the configuration names an endpoint, as emulators need).
    pub fn new(config: &aws_config::SdkConfig, bucket: impl Into<String>) -> Self {
        let s3 = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(config.endpoint_url().is_some())
            .build();
        Archive {
            s3: aws_sdk_s3::Client::from_conf(s3),
            bucket: bucket.into(),
        }
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Writes one object (the same key and bytes however often it is called).
    ///
    /// # Errors
    /// [`AggregatorError::Archive`] when S3 refused the write or did not answer.
    pub async fn put(&self, object: &ArchiveObject) -> Result<(), AggregatorError> {
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(&object.key)
            .content_type(CONTENT_TYPE)
            .body(object.body().into())
            .send()
            .await
            .map_err(|e| s3_error("PutObject", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }

    /// Every object key under `prefix`, in key order.
    ///
    /// # Errors
    /// [`AggregatorError::Archive`] when a listing failed.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, AggregatorError> {
        let mut keys = Vec::new();
        let mut pages = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                s3_error("ListObjectsV2", aws_sdk_s3::error::DisplayErrorContext(e))
            })?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        Ok(keys)
    }

    /// The events of namespace `ns` (of `entity` alone, when given) under `prefix` (a day's
    /// partition, or [`PREFIX`] for all), oldest first. Objects of other namespaces or
    /// entities, and zae-limiter's, are skipped by their name, unread.
    ///
    /// # Errors
    /// [`AggregatorError::Archive`] when a listing or a read failed, or an object of `ns` is
    /// not an archived event.
    pub async fn events(
        &self,
        ns: &str,
        entity: Option<&str>,
        prefix: &str,
    ) -> Result<Vec<ArchivedEvent>, AggregatorError> {
        let marker = format!("/{}", object_name_prefix(ns, entity));
        let mut events = Vec::new();
        for key in self.keys(prefix).await? {
            if !key.contains(&marker) {
                continue;
            }
            let object = self
                .s3
                .get_object()
                .bucket(&self.bucket)
                .key(&key)
                .send()
                .await
                .map_err(|e| s3_error("GetObject", aws_sdk_s3::error::DisplayErrorContext(e)))?;
            // Anything may sit in the bucket under a matching name: read no more than an
            // event can be.
            let size = object.content_length().unwrap_or(MAX_OBJECT_BYTES + 1);
            if !(0..=MAX_OBJECT_BYTES).contains(&size) {
                return Err(s3_error(
                    "GetObject",
                    format!(
                        "{key}: {size} bytes, more than an archived event ({MAX_OBJECT_BYTES})"
                    ),
                ));
            }
            let body = object
                .body
                .collect()
                .await
                .map_err(|e| s3_error("GetObject", e))?
                .into_bytes();
            let parsed =
                parse_object(&body).map_err(|e| s3_error("GetObject", format!("{key}: {e}")))?;
            events.extend(parsed);
        }
        events.sort_by(|a, b| (&a.timestamp, &a.event_id).cmp(&(&b.timestamp, &b.event_id)));
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use dynalimit_format::audit::{AuditAction, NewAuditEvent};

    use super::*;
    use crate::record::SequenceNumber;

    fn expiry(item: dynalimit_format::item::Item, by_ttl: bool) -> StreamRecord {
        StreamRecord {
            event_id: "e1".into(),
            kind: EventKind::Remove,
            sequence_number: SequenceNumber::parse("100").unwrap(),
            old_image: Some(item),
            new_image: None,
            removed_by_ttl: by_ttl,
        }
    }

    fn audit_item(ns: &str, entity: &str, event_id: &str) -> dynalimit_format::item::Item {
        NewAuditEvent {
            entity_id: entity,
            event_id,
            at: 1_764_374_400_000,
            action: AuditAction::LimitsSet,
            principal: Some("arn:aws:iam::1:role/ops"),
            resource: Some("gpt-4"),
            details: HashMap::from([(
                "limits".to_owned(),
                AttributeValue::L(vec![AttributeValue::N("5".into())]),
            )]),
            retention_days: 90,
        }
        .into_item(ns)
    }

    #[test]
    fn an_expired_audit_event_has_one_key_and_one_body_whatever_the_delivery() {
        let record = expiry(
            audit_item("ns1", "key-1", "01KB0000000000000000000000"),
            true,
        );
        let a = expired_event(&record).unwrap().unwrap();
        let b = expired_event(&record.clone()).unwrap().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.body(), b.body());
        assert_eq!(
            a.key,
            "audit/year=2025/month=11/day=29/audit-ns1.key-1.01KB0000000000000000000000.jsonl"
        );
        let back = parse_object(&a.body()).unwrap();
        assert_eq!(back, vec![a.event.clone()]);
        assert_eq!(a.event.entity_id, "key-1");
        assert_eq!(a.event.namespace.as_deref(), Some("ns1"));
        assert_eq!(a.event.details["limits"], serde_json::json!([5]));
    }

    #[test]
    fn only_ttl_removals_of_audit_items_are_archived() {
        let item = audit_item("ns1", "key-1", "01KB0000000000000000000000");
        assert!(expired_event(&expiry(item.clone(), false)).is_none());
        let mut bucket = item.clone();
        bucket.insert(attr::SK.into(), AttributeValue::S(keys::STATE_SK.into()));
        assert!(expired_event(&expiry(bucket, true)).is_none());
        let mut modify = expiry(item, true);
        modify.kind = EventKind::Modify;
        assert!(expired_event(&modify).is_none());
    }

    #[test]
    fn a_foreign_audit_item_is_named_not_archived_and_odd_ids_stay_distinct() {
        let mut broken = audit_item("ns1", "key-1", "01KB0000000000000000000000");
        broken.remove("action");
        let err = expired_event(&expiry(broken, true)).unwrap().unwrap_err();
        assert!(err.contains("e1"), "{err}");
        assert_ne!(key_segment("a/b"), key_segment("a_b"));
        assert_eq!(key_segment("a/b"), "!612f62");
        assert_ne!(key_segment("a/b"), key_segment("x612f62"));
        // `.` separates the parts: no id can make two objects' names collide.
        assert_ne!(
            object_key("a", "b.c", "E", "2026-01-01T00:00:00Z"),
            object_key("a.b", "c", "E", "2026-01-01T00:00:00Z")
        );
        assert_eq!(
            object_key("ns", "$RESOURCE:gpt-4", "E", "2026-01-01T00:00:00Z"),
            "audit/year=2026/month=01/day=01/audit-ns.!245245534f555243453a6770742d34.E.jsonl"
        );
        assert_eq!(partition("not a date"), "undated/");
        // However long an id another writer stored, the key stays short and its own.
        let (long_a, long_b) = ("a".repeat(2048), format!("{}b", "a".repeat(2047)));
        let (key_a, key_b) = (
            object_key("ns", &long_a, "E", "2026-01-01T00:00:00Z"),
            object_key("ns", &long_b, "E", "2026-01-01T00:00:00Z"),
        );
        assert!(key_a.len() < 200 && key_b.len() < 200, "{key_a}");
        assert_ne!(key_a, key_b);
        assert_eq!(
            partition("2026-02-03T04:05:06Z"),
            "year=2026/month=02/day=03/"
        );
    }

    #[test]
    fn zae_limiter_lines_parse_without_a_namespace() {
        let line = br#"{"event_id":"E","entity_id":"k","action":"limits_set","timestamp":"2026-01-01T00:00:00Z","principal":null,"resource":null,"details":{}}
"#;
        let events = parse_object(line).unwrap();
        assert_eq!(events[0].namespace, None);
        assert!(parse_object(b"{").is_err());
    }
}
