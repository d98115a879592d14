//! Stream records in one shape, whichever way they arrived.
//!
//! The Lambda event source delivers records as JSON ([`aws_lambda_events`]); the stream runner
//! reads them through the DynamoDB Streams API. Both are converted here into [`StreamRecord`],
//! whose images are plain DynamoDB items, so the processor sees one type.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_format::item::Item;

/// What happened to the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The item was created.
    Insert,
    /// The item was changed.
    Modify,
    /// The item was deleted (by a writer or by TTL expiry).
    Remove,
}

impl EventKind {
    /// The kind named by a stream `eventName`, or — for a name this code does not know, such as
    /// the `UNKNOWN_TO_SDK_VERSION` some emulators send — the kind implied by which images the
    /// record carries. `None` when neither tells.
    pub fn resolve(name: &str, has_old: bool, has_new: bool) -> Option<Self> {
        match name {
            "INSERT" => Some(EventKind::Insert),
            "MODIFY" => Some(EventKind::Modify),
            "REMOVE" => Some(EventKind::Remove),
            _ => match (has_old, has_new) {
                (true, true) => Some(EventKind::Modify),
                (false, true) => Some(EventKind::Insert),
                (true, false) => Some(EventKind::Remove),
                (false, false) => None,
            },
        }
    }
}

/// A stream sequence number: a decimal string, compared as a number.
///
/// Within one item, DynamoDB Streams assigns increasing sequence numbers in the order of the
/// item's changes; the aggregator's per-bucket watermark relies on exactly that.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SequenceNumber(String);

impl SequenceNumber {
    /// Wraps a sequence number, or `None` when `text` is not a non-empty string of digits.
    pub fn parse(text: &str) -> Option<Self> {
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| SequenceNumber(text.to_owned()))
    }

    /// The sequence number as the stream wrote it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn significant(&self) -> &str {
        let trimmed = self.0.trim_start_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.significant(), other.significant());
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One change record of the table's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    /// The record's event id (for logs).
    pub event_id: String,
    /// What happened.
    pub kind: EventKind,
    /// Position in the stream; the Lambda's partial-failure identifier.
    pub sequence_number: SequenceNumber,
    /// The item before the change (MODIFY, REMOVE).
    pub old_image: Option<Item>,
    /// The item after the change (INSERT, MODIFY).
    pub new_image: Option<Item>,
    /// Whether DynamoDB's TTL made the change (a REMOVE whose user identity is the
    /// `dynamodb.amazonaws.com` service), not a writer.
    pub removed_by_ttl: bool,
}

/// The user identity type of a removal made by DynamoDB's TTL.
pub const TTL_IDENTITY_TYPE: &str = "Service";
/// The principal of a removal made by DynamoDB's TTL.
pub const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";

/// Whether a record's user identity is DynamoDB's TTL.
fn is_ttl_identity(kind: &str, principal: &str) -> bool {
    kind == TTL_IDENTITY_TYPE && principal == TTL_PRINCIPAL
}

/// Why a delivered record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record has no usable sequence number.
    #[error("record {event_id}: missing or malformed sequence number")]
    SequenceNumber {
        /// The record's event id.
        event_id: String,
    },
    /// Neither the event name nor the images say what happened.
    #[error("record {event_id}: unknown event {name} without images")]
    EventName {
        /// The record's event id.
        event_id: String,
        /// The event name received.
        name: String,
    },
}

fn non_empty(item: Item) -> Option<Item> {
    (!item.is_empty()).then_some(item)
}

impl StreamRecord {
    /// Builds a record from its parts, resolving the event kind.
    ///
    /// # Errors
    /// [`RecordError`] when the sequence number is missing or malformed, or the event is not
    /// recognisable.
    pub fn assemble(
        event_id: String,
        event_name: &str,
        sequence_number: Option<&str>,
        old_image: Option<Item>,
        new_image: Option<Item>,
    ) -> Result<Self, RecordError> {
        let Some(sequence_number) = sequence_number.and_then(SequenceNumber::parse) else {
            return Err(RecordError::SequenceNumber { event_id });
        };
        let (old_image, new_image) = (old_image.and_then(non_empty), new_image.and_then(non_empty));
        let Some(kind) = EventKind::resolve(event_name, old_image.is_some(), new_image.is_some())
        else {
            return Err(RecordError::EventName {
                event_id,
                name: event_name.to_owned(),
            });
        };
        Ok(StreamRecord {
            event_id,
            kind,
            sequence_number,
            old_image,
            new_image,
            removed_by_ttl: false,
        })
    }

    /// Converts a record of a Lambda DynamoDB stream event.
    ///
    /// # Errors
    /// [`RecordError`] when the record has no sequence number or no recognisable event.
    pub fn from_lambda(record: EventRecord) -> Result<Self, RecordError> {
        let by_ttl = record
            .user_identity
            .as_ref()
            .is_some_and(|who| is_ttl_identity(&who.type_, &who.principal_id));
        let change = record.change;
        let mut converted = Self::assemble(
            record.event_id,
            &record.event_name,
            change.sequence_number.as_deref(),
            Some(change.old_image.into()),
            Some(change.new_image.into()),
        )?;
        converted.removed_by_ttl = by_ttl && converted.kind == EventKind::Remove;
        Ok(converted)
    }

    /// Converts a record read through the DynamoDB Streams API.
    ///
    /// # Errors
    /// [`RecordError`] when the record has no sequence number or no recognisable event.
    pub fn from_streams(
        record: &aws_sdk_dynamodbstreams::types::Record,
    ) -> Result<Self, RecordError> {
        let change = record.dynamodb();
        let by_ttl = record.user_identity().is_some_and(|who| {
            is_ttl_identity(
                who.r#type().unwrap_or_default(),
                who.principal_id().unwrap_or_default(),
            )
        });
        let mut converted = Self::assemble(
            record.event_id().unwrap_or_default().to_owned(),
            record.event_name().map_or("", |n| n.as_str()),
            change.and_then(|c| c.sequence_number()),
            change.and_then(|c| c.old_image()).map(convert_item),
            change.and_then(|c| c.new_image()).map(convert_item),
        )?;
        converted.removed_by_ttl = by_ttl && converted.kind == EventKind::Remove;
        Ok(converted)
    }
}

/// Converts a Streams-API item into a DynamoDB item (the two SDKs have twin value types).
pub fn convert_item(
    item: &HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
) -> Item {
    item.iter()
        .map(|(k, v)| (k.clone(), convert_value(v)))
        .collect()
}

fn convert_value(value: &aws_sdk_dynamodbstreams::types::AttributeValue) -> AttributeValue {
    use aws_sdk_dynamodbstreams::types::AttributeValue as S;
    match value {
        S::S(v) => AttributeValue::S(v.clone()),
        S::N(v) => AttributeValue::N(v.clone()),
        S::B(v) => AttributeValue::B(v.clone()),
        S::Bool(v) => AttributeValue::Bool(*v),
        S::Null(v) => AttributeValue::Null(*v),
        S::Ss(v) => AttributeValue::Ss(v.clone()),
        S::Ns(v) => AttributeValue::Ns(v.clone()),
        S::Bs(v) => AttributeValue::Bs(v.clone()),
        S::L(v) => AttributeValue::L(v.iter().map(convert_value).collect()),
        S::M(v) => AttributeValue::M(convert_item(v)),
        _ => AttributeValue::Null(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        let a = SequenceNumber::parse("900").unwrap();
        let b = SequenceNumber::parse("1000").unwrap();
        let c = SequenceNumber::parse("0001000").unwrap();
        assert!(a < b);
        assert_eq!(b.cmp(&c), Ordering::Equal);
        assert!(SequenceNumber::parse("12a").is_none());
        assert!(SequenceNumber::parse("").is_none());
    }

    #[test]
    fn unknown_event_names_are_resolved_from_the_images() {
        let r = |n, o, w| EventKind::resolve(n, o, w);
        assert_eq!(r("MODIFY", true, true), Some(EventKind::Modify));
        assert_eq!(
            r("UNKNOWN_TO_SDK_VERSION", true, true),
            Some(EventKind::Modify)
        );
        assert_eq!(
            r("UNKNOWN_TO_SDK_VERSION", false, true),
            Some(EventKind::Insert)
        );
        assert_eq!(
            r("UNKNOWN_TO_SDK_VERSION", true, false),
            Some(EventKind::Remove)
        );
        assert_eq!(r("UNKNOWN_TO_SDK_VERSION", false, false), None);
    }
}
