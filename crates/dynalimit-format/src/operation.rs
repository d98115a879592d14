//! Operation records of resets and top-ups (reference §1.4.8, §12.6).
//!
//! One item per call, in the partition of the bucket's shard 0:
//! `{ns}/BUCKET#{entity}#{resource}#0` / `#OP#{operation_id}`, with `entity_id`, `resource`,
//! `operation` (`reset` or `top_up`), `writer` (the writing call's nonce), `ent` (the entity's
//! incarnation), `shards` (N), `amounts` (M of N, whole tokens), `ttl` (now + 3 days) and the
//! GSI4 keys `{ns}` / `OP#{entity}#{resource}#{operation_id}`, so that a namespace purge finds
//! it; no GSI1–3 keys, so no bucket reader sees it.
//!
//! The record is put in the same transaction as the shard writes, under [`put_condition`]:
//! only one transaction carrying an operation id can ever commit, and the record says whether
//! one did and what it did.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::operation::OperationKind;

use crate::FormatError;
use crate::attr;
use crate::expr::{Expr, num};
use crate::item::{self, Item};
use crate::keys;

/// How long an operation record lives: 3 days, in seconds.
pub(crate) const RECORD_TTL_SECONDS: i64 = 3 * 86_400;

/// The incarnation of an entity without META (or of a pre-0.17 META without `pinc` and
/// `created_at`): it matches every incarnation.
pub(crate) const LEGACY_INCARNATION: &str = "-";

/// The stored name of an operation: `reset` or `top_up`.
pub fn kind_name(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Reset => "reset",
        OperationKind::TopUp => "top_up",
    }
}

/// The entity incarnation an operation belongs to, read off the entity's META item: `pinc`,
/// else `created_at` (entities written before `pinc` existed), else
/// `LEGACY_INCARNATION`; `LEGACY_INCARNATION` without META.
pub fn incarnation(meta: Option<&Item>) -> String {
    meta.and_then(|m| item::get_s(m, attr::PINC).or_else(|| item::get_s(m, attr::CREATED_AT)))
        .unwrap_or(LEGACY_INCARNATION)
        .to_owned()
}

/// The key of the record of `operation_id` on `(entity, resource)`.
pub fn record_key(ns: &str, entity: &str, resource: &str, operation_id: &str) -> Item {
    item::key(
        keys::bucket_pk(ns, entity, resource, 0),
        keys::op_sk(operation_id),
    )
}

/// Whole tokens per limit as an `M` of `N`.
pub(crate) fn amounts_value(amounts: &BTreeMap<String, i64>) -> AttributeValue {
    AttributeValue::M(
        amounts
            .iter()
            .map(|(name, n)| (name.clone(), item::n(n)))
            .collect(),
    )
}

/// What one record stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRecord {
    /// `reset` or `top_up` as stored (another writer's record may hold anything).
    pub operation: String,
    /// The writing call's nonce.
    pub writer: Option<String>,
    /// The entity incarnation the record was written for.
    pub ent: String,
    /// Shards written.
    pub shards: u32,
    /// Whole tokens per limit.
    pub amounts: BTreeMap<String, i64>,
}

impl OperationRecord {
    /// Whether the record was written for `kind`.
    pub fn is(&self, kind: OperationKind) -> bool {
        self.operation == kind_name(kind)
    }

    /// Whether the record belongs to the entity incarnation `incarnation`: written for it, or
    /// either side is `LEGACY_INCARNATION` (a record written before the entity had META is
    /// its own; a caller that read no META takes any record for the key). A record of an
    /// earlier incarnation (the entity was deleted and created again) reads as absent, and
    /// [`put_condition`] lets a new record replace it.
    pub fn belongs_to(&self, incarnation: &str) -> bool {
        incarnation == LEGACY_INCARNATION
            || self.ent == incarnation
            || self.ent == LEGACY_INCARNATION
    }

    /// Decodes a record.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`] when `operation` or `shards` is missing.
    pub fn from_item(found: &Item) -> Result<OperationRecord, FormatError> {
        let shards = item::get_i64(found, attr::SHARDS)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                FormatError::corrupt(item::describe_key(found), "shards is not a shard count")
            })?;
        let amounts = match found.get(attr::AMOUNTS) {
            Some(AttributeValue::M(m)) => m
                .iter()
                .filter_map(|(name, v)| Some((name.clone(), item::parse_number(v.as_n().ok()?)?)))
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok(OperationRecord {
            operation: item::require_s(found, attr::OPERATION)?,
            writer: item::get_s(found, attr::WRITER).map(str::to_owned),
            ent: item::get_s(found, attr::ENT)
                .unwrap_or(LEGACY_INCARNATION)
                .to_owned(),
            shards,
            amounts,
        })
    }
}

/// What a new record says.
#[derive(Debug, Clone)]
pub struct NewRecord<'a> {
    /// The owner entity.
    pub entity_id: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The operation id (the caller's idempotency key, or one generated per call).
    pub operation_id: &'a str,
    /// Which operation.
    pub kind: OperationKind,
    /// The writing call's nonce.
    pub writer: &'a str,
    /// The entity incarnation ([`incarnation`]).
    pub incarnation: &'a str,
    /// Shards written.
    pub shards: u32,
    /// Whole tokens per limit.
    pub amounts: &'a BTreeMap<String, i64>,
    /// When, epoch ms (the `ttl` is 3 days later, in epoch seconds).
    pub at: i64,
}

impl NewRecord<'_> {
    /// The record item.
    pub fn into_item(self, ns: &str) -> Item {
        let mut it = record_key(ns, self.entity_id, self.resource, self.operation_id);
        for (name, value) in [
            (attr::ENTITY_ID, item::s(self.entity_id)),
            (attr::RESOURCE, item::s(self.resource)),
            (attr::OPERATION, item::s(kind_name(self.kind))),
            (attr::WRITER, item::s(self.writer)),
            (attr::ENT, item::s(self.incarnation)),
            (attr::SHARDS, item::n(self.shards)),
            (attr::AMOUNTS, amounts_value(self.amounts)),
            (
                attr::TTL,
                num(self.at.div_euclid(1000) + RECORD_TTL_SECONDS),
            ),
            (attr::GSI4PK, item::s(ns)),
            (
                attr::GSI4SK,
                item::s(keys::op_gsi4sk(
                    self.entity_id,
                    self.resource,
                    self.operation_id,
                )),
            ),
        ] {
            it.insert(name.to_owned(), value);
        }
        it
    }
}

/// The condition of a record's put: `attribute_not_exists(PK)`, or, for a caller that read a
/// META (`incarnation` other than `LEGACY_INCARNATION`), a record written for another,
/// non-legacy incarnation: `attribute_not_exists(PK) OR (ent <> :ent AND ent <> "-")`. A record
/// written before the entity had META is never replaced, and a caller that read none never
/// replaces one.
pub fn put_condition(incarnation: &str) -> Expr {
    let mut e = Expr::default();
    let absent = e.not_exists(attr::PK);
    if incarnation == LEGACY_INCARNATION {
        e.when(absent);
        return e;
    }
    let other = e.ne(attr::ENT, item::s(incarnation));
    let not_legacy = e.ne(attr::ENT, item::s(LEGACY_INCARNATION));
    e.when(format!("{absent} OR ({other} AND {not_legacy})"));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_has_the_reference_attributes_and_round_trips() {
        let amounts = BTreeMap::from([("rpm".to_owned(), 12), ("tpm".to_owned(), 0)]);
        let it = NewRecord {
            entity_id: "u1",
            resource: "openai/gpt-4",
            operation_id: "order-7",
            kind: OperationKind::TopUp,
            writer: "abc",
            incarnation: "00ff00ff00ff00ff",
            shards: 4,
            amounts: &amounts,
            at: 1_700_000_000_999,
        }
        .into_item("ns1");
        let text = |k: &str| item::get_s(&it, k).map(str::to_owned);
        assert_eq!(text("PK").as_deref(), Some("ns1/BUCKET#u1#openai/gpt-4#0"));
        assert_eq!(text("SK").as_deref(), Some("#OP#order-7"));
        assert_eq!(text("operation").as_deref(), Some("top_up"));
        assert_eq!(text("writer").as_deref(), Some("abc"));
        assert_eq!(text("ent").as_deref(), Some("00ff00ff00ff00ff"));
        assert_eq!(text("GSI4PK").as_deref(), Some("ns1"));
        assert_eq!(
            text("GSI4SK").as_deref(),
            Some("OP#u1#openai/gpt-4#order-7")
        );
        assert_eq!(item::get_i64(&it, "ttl"), Some(1_700_000_000 + 259_200));
        assert_eq!(item::get_i64(&it, "shards"), Some(4));
        assert!(
            !it.keys()
                .any(|k| k.starts_with("GSI1") || k.starts_with("GSI2") || k.starts_with("GSI3"))
        );
        assert_eq!(it.len(), 12);
        let back = OperationRecord::from_item(&it).unwrap();
        assert!(back.is(OperationKind::TopUp) && !back.is(OperationKind::Reset));
        assert_eq!(back.amounts, amounts);
        assert_eq!(back.shards, 4);
    }

    #[test]
    fn incarnations_match_as_the_reference_says() {
        let record = |ent: &str| OperationRecord {
            operation: "reset".into(),
            writer: None,
            ent: ent.into(),
            shards: 0,
            amounts: BTreeMap::new(),
        };
        assert!(record("a").belongs_to("a"));
        assert!(!record("a").belongs_to("b"));
        assert!(record("-").belongs_to("b"));
        assert!(record("a").belongs_to("-"));
        let meta = item::key("p", "s");
        assert_eq!(incarnation(None), "-");
        assert_eq!(incarnation(Some(&meta)), "-");
        let mut dated = meta.clone();
        dated.insert("created_at".into(), item::s("2026-01-01T00:00:00Z"));
        assert_eq!(incarnation(Some(&dated)), "2026-01-01T00:00:00Z");
        dated.insert("pinc".into(), item::s("0123456789abcdef"));
        assert_eq!(incarnation(Some(&dated)), "0123456789abcdef");
    }

    #[test]
    fn the_put_condition_replaces_only_another_incarnations_record() {
        let legacy = put_condition("-");
        assert_eq!(
            legacy.condition_expression().as_deref(),
            Some("(attribute_not_exists(#a0))")
        );
        let e = put_condition("abc");
        assert_eq!(
            e.condition_expression().as_deref(),
            Some("(attribute_not_exists(#a0) OR (#a1 <> :v0 AND #a1 <> :v1))")
        );
        let names = e.names().unwrap();
        assert_eq!(
            (names["#a0"].as_str(), names["#a1"].as_str()),
            ("PK", "ent")
        );
    }
}
