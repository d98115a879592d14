//! The speculative consume on the fast path, prepared once per set of limit names.
//!
//! Every warm acquire sends the same request shape for the same limit names: the update and
//! condition expressions and the attribute names depend on the names alone, the values on the
//! amounts and the time. A [`ConsumeShape`] renders the constant part once (from
//! [`writes::speculative_consume`] itself, so the text cannot differ from what the SDK path
//! sends) and each acquire writes only its key and its numbers into the body.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::bucket::decide::BucketImage;
use dynalimit_core::bounds::Stamp;
use dynalimit_core::bucket::WCU_DEBIT_MILLI;
use dynalimit_format::bucket::{image_from_attributes, image_from_item};
use dynalimit_format::{FormatError, attr, keys};
use smallvec::SmallVec;

use super::writes;
use crate::wire::{Fields, ObjectWriter, number_openings, plain_attributes, read_attributes};

/// The most shapes a store keeps; an acquire with another set of names builds its request
/// the slow way (the expression, then the body).
const MAX_SHAPES: usize = 64;

/// Values of one speculative consume, in the order of its placeholders.
pub(crate) type Numbers = SmallVec<[i64; 32]>;

/// The speculative consume's request for one set of limit names, rendered once.
#[derive(Debug)]
pub(crate) struct ConsumeShape {
    /// The limit names, in the demand's (sorted) order.
    names: Vec<String>,
    /// `"UpdateExpression":…,"ConditionExpression":…,"ExpressionAttributeNames":{…}`.
    expressions: Fields,
    /// `":v{i}":{"N":"` of each value.
    openings: Vec<Box<[u8]>>,
}

impl ConsumeShape {
    /// The shape of a consume of `demand`'s names.
    pub(crate) fn new(demand: &BTreeMap<String, i64>) -> Self {
        let e = writes::speculative_consume(demand, 0);
        let (update, condition) = (e.update_expression(), e.condition_expression());
        let names = e.name_pairs();
        let expressions = Fields::render(|w| {
            if let Some(update) = &update {
                w.string("UpdateExpression", update);
            }
            if let Some(condition) = &condition {
                w.string("ConditionExpression", condition);
            }
            w.strings("ExpressionAttributeNames", names.iter().copied());
        });
        let openings = number_openings(e.value_pairs().iter().map(|(p, _)| p.as_str()));
        ConsumeShape {
            names: demand.keys().cloned().collect(),
            expressions,
            openings,
        }
    }

    /// Whether `demand` names exactly this shape's limits.
    fn fits(&self, demand: &BTreeMap<String, i64>) -> bool {
        self.names.len() == demand.len()
            && self.names.iter().zip(demand.keys()).all(|(a, b)| a == b)
    }

    /// The values of a consume of `demand` at `now`, in the order in which
    /// [`writes::speculative_consume`] declares them: the first instant a stamp must be past
    /// and the horizon of a bypass or soft stamp, then per limit its amount, the debit and the
    /// balance it needs, then the write-capacity debit, credit and need, the `ttl` bound
    /// (seconds), the horizon of `vu`, and the pause's bounds.
    pub(crate) fn numbers(demand: &BTreeMap<String, i64>, now: i64) -> Numbers {
        let next = now.saturating_add(1);
        let mut v = Numbers::new();
        v.extend([next, Stamp::Deadline.horizon(now)]);
        for &m in demand.values() {
            v.extend([m, -m, m]);
        }
        v.extend([
            -WCU_DEBIT_MILLI,
            WCU_DEBIT_MILLI,
            WCU_DEBIT_MILLI,
            now.div_euclid(1000),
            Stamp::Boundary.horizon(now),
            next,
            Stamp::Pause.horizon(now).max(next),
        ]);
        v
    }

    /// The body of the consume of `demand` at `now` on item `pk` of `table`, asking for the
    /// item after the write (`ALL_NEW`) and before a failed one (`ALL_OLD`).
    pub(crate) fn body(
        &self,
        table: &str,
        pk: &str,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> Vec<u8> {
        let mut w = ObjectWriter::new();
        w.string("TableName", table)
            .string_key("Key", &[(attr::PK, pk), (attr::SK, keys::STATE_SK)])
            .fields(&self.expressions)
            .numbers(
                "ExpressionAttributeValues",
                &self.openings,
                Self::numbers(demand, now),
            )
            .string("ReturnValues", "ALL_NEW")
            .string("ReturnValuesOnConditionCheckFailure", "ALL_OLD");
        w.finish()
    }
}

/// The image of the item a successful consume's answer carries (`None` when it carries none),
/// read straight from the answer's bytes; an answer of another shape (a schedule or a quota on
/// the item, an escaped string, a type the image does not read) is read as a whole. An item
/// holding a value out of bounds is an error ([`image_from_item`]).
pub(crate) fn image_of_answer(answer: &[u8]) -> Option<Result<BucketImage, FormatError>> {
    if let Some(attrs) = plain_attributes(answer) {
        if attrs.is_empty() {
            return None;
        }
        if let Some(image) = image_from_attributes(&attrs).transpose() {
            return Some(image);
        }
    }
    read_attributes(answer)
        .filter(|item| !item.is_empty())
        .map(|item| image_from_item(&item))
}

/// The shapes one store has prepared.
#[derive(Debug, Default)]
pub(crate) struct ConsumeShapes(RwLock<Vec<Arc<ConsumeShape>>>);

impl ConsumeShapes {
    /// The shape of `demand`'s names, prepared on first use; `None` once [`MAX_SHAPES`] other
    /// shapes are kept.
    pub(crate) fn of(&self, demand: &BTreeMap<String, i64>) -> Option<Arc<ConsumeShape>> {
        let known = |shapes: &[Arc<ConsumeShape>]| shapes.iter().find(|s| s.fits(demand)).cloned();
        if let Some(shape) = self.0.read().ok().and_then(|s| known(&s)) {
            return Some(shape);
        }
        let mut shapes = self.0.write().ok()?;
        if let Some(shape) = known(&shapes) {
            return Some(shape);
        }
        if shapes.len() >= MAX_SHAPES {
            return None;
        }
        let shape = Arc::new(ConsumeShape::new(demand));
        shapes.push(shape.clone());
        Some(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use dynalimit_format::attr::{BucketField, QuotaField};
    use dynalimit_format::item::Item;
    use proptest::prelude::*;

    /// The body the fast path sends for `e` (as `FastPath::update_item` writes it).
    fn expr_body(
        table: &str,
        pk: &str,
        demand: &BTreeMap<String, i64>,
        now: i64,
    ) -> serde_json::Value {
        let e = writes::speculative_consume(demand, now);
        let key = dynalimit_format::item::key(pk, keys::STATE_SK);
        let (update, condition) = (e.update_expression(), e.condition_expression());
        let request = crate::wire::UpdateItem {
            table,
            key: &key,
            update_expression: update.as_deref(),
            condition_expression: condition.as_deref(),
            names: &e.name_pairs(),
            values: e.value_pairs(),
            return_all_new: true,
            return_old_on_failure: true,
            resend: crate::retry::Resend::Never,
        };
        serde_json::from_slice(&request.body()).unwrap()
    }

    fn pk(shard: u32) -> String {
        keys::bucket_pk("ns", "key-1", "gpt-4", shard)
    }

    fn demand_of(amounts: &[(String, i64)]) -> BTreeMap<String, i64> {
        amounts.iter().cloned().collect()
    }

    #[test]
    fn the_prepared_body_is_the_expression_s_body() {
        let demand = demand_of(&[("rpm".into(), 1000), ("tpm".into(), 500_000)]);
        let shape = ConsumeShape::new(&demand);
        let now = 1_700_000_000_123;
        let body: serde_json::Value =
            serde_json::from_slice(&shape.body("limits", &pk(0), &demand, now)).unwrap();
        assert_eq!(body, expr_body("limits", &pk(0), &demand, now));
    }

    #[test]
    fn shapes_are_kept_per_set_of_names() {
        let shapes = ConsumeShapes::default();
        let a = shapes.of(&demand_of(&[("rpm".into(), 1)])).unwrap();
        let again = shapes.of(&demand_of(&[("rpm".into(), 7)])).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        let b = shapes
            .of(&demand_of(&[("rpm".into(), 1), ("tpm".into(), 1)]))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        for i in 2..MAX_SHAPES {
            assert!(shapes.of(&demand_of(&[(format!("l{i}"), 1)])).is_some());
        }
        assert!(
            shapes
                .of(&demand_of(&[("one-too-many".into(), 1)]))
                .is_none()
        );
        assert!(shapes.of(&demand_of(&[("rpm".into(), 3)])).is_some());
    }

    /// An `UpdateItem` answer carrying `item`, as DynamoDB writes it.
    fn answer(item: &Item) -> Vec<u8> {
        let mut w = ObjectWriter::new();
        w.item("Attributes", item);
        w.finish()
    }

    fn value() -> impl Strategy<Value = AttributeValue> {
        prop_oneof![
            4 => (-5_000_000_000i64..5_000_000_000).prop_map(|n| AttributeValue::N(n.to_string())),
            1 => Just(AttributeValue::N("12.0".into())),
            1 => Just(AttributeValue::N("1.5".into())),
            2 => "[a-z#/\"\\\\é-]{0,8}".prop_map(AttributeValue::S),
            2 => any::<bool>().prop_map(AttributeValue::Bool),
            1 => Just(AttributeValue::Null(true)),
            1 => Just(AttributeValue::Ss(vec!["a".into()])),
        ]
    }

    /// The attribute names of bucket items, limits among them.
    fn names() -> Vec<String> {
        let mut names: Vec<String> = [
            attr::PK,
            attr::SK,
            attr::RF,
            attr::SHARD_COUNT,
            attr::CASCADE,
            attr::PARENT_ID,
            attr::PGEN,
            attr::PINC,
            attr::TTL,
            attr::VU,
            attr::BYPASS,
            attr::DISABLED,
            attr::PAUSE_UNTIL,
            attr::SCHED,
        ]
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
        for limit in ["rpm", "tpm", dynalimit_core::bucket::WCU] {
            for field in [
                BucketField::Tk,
                BucketField::Cp,
                BucketField::Ra,
                BucketField::Rp,
                BucketField::Tc,
            ] {
                names.push(attr::bucket_limit(limit, field));
            }
            names.push(attr::bucket_soft(limit));
        }
        names.push(attr::bucket_quota("tpm", QuotaField::Gc));
        names
    }

    #[test]
    fn an_answer_without_an_item_has_no_image() {
        assert_eq!(image_of_answer(b"{}"), None);
        assert_eq!(image_of_answer(br#"{"Attributes":{}}"#), None);
        assert_eq!(image_of_answer(b"not json"), None);
    }

    #[test]
    fn a_plain_answer_is_read_in_place_and_others_as_a_whole() {
        let plain = br#" { "Attributes" : { "b_rpm_tk" : { "N" : "5" } , "cascade" : {"BOOL":true} } , "ConsumedCapacity" : {"CapacityUnits":1.5,"X":[null,"a",{}]} } "#;
        let attrs = plain_attributes(plain).unwrap();
        assert_eq!(attrs.len(), 2);
        for other in [
            &br#"{"Attributes":{"pinc":{"S":"a\"b"}}}"#[..],
            br#"{"Attributes":{"tags":{"SS":["a"]}}}"#,
            br#"{"Attributes":{"b_rpm_tk":{"N":"5"}}"#,
            br#"{"Attributes":{"b_rpm_tk":{"N":"5","S":"x"}}}"#,
            br#"{"Attributes":{"b_rpm_tk":{"N":"5"}}} trailing"#,
        ] {
            assert!(
                plain_attributes(other).is_none(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    proptest! {
        #[test]
        fn any_bucket_item_decodes_from_its_answer_as_from_the_item(
            picks in proptest::collection::vec((0usize..64, value()), 0..40),
        ) {
            let names = names();
            let item: Item = picks
                .into_iter()
                .map(|(i, v)| (names[i % names.len()].clone(), v))
                .collect();
            let expected = (!item.is_empty()).then(|| image_from_item(&item));
            prop_assert_eq!(image_of_answer(&answer(&item)), expected);
        }

        #[test]
        fn any_demand_at_any_time_renders_the_expression_s_body(
            amounts in proptest::collection::btree_map("[a-z][a-z0-9_.-]{0,10}", 0i64..1_000_000_000_000_000, 1..6),
            now in -10_000_000_000_000i64..10_000_000_000_000,
        ) {
            let shape = ConsumeShape::new(&amounts);
            let body: serde_json::Value =
                serde_json::from_slice(&shape.body("t", &pk(3), &amounts, now)).unwrap();
            prop_assert_eq!(body, expr_body("t", &pk(3), &amounts, now));
        }
    }
}
