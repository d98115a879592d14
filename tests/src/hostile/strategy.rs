//! proptest strategies: worlds, mutations, and cases made of both.

use proptest::prelude::*;
use proptest::sample::Index;

use super::mutate::{KEY_APPENDS, KeyShape, LIMIT_FIELDS, Mutation, PK_LASTS, SKS};
use aws_sdk_dynamodb::types::AttributeValue;

use super::value::{instant, number_text, value};
use super::world::{Blueprint, Level, LimitSpec, Shape};

/// Limit names: plain, with the `.` and `-` that need positional aliases, with `_` (the name
/// itself splits like an attribute), and one shaped like a suffix readers look for.
const NAMES: &[&str] = &["rpm", "tpm", "rpm.v2", "req-s", "x_y", "tk"];

/// A world: 1 to 3 limits, the first a small dripping one (so that a bound on what it admits
/// is tight), the others of any shape.
pub fn blueprint() -> impl Strategy<Value = Blueprint> {
    let consumed = (1i64..=3, 1i64..=3, prop_oneof![Just(600i64), Just(3600)]);
    let other = (
        1i64..=1_000_000,
        1i64..=1_000,
        prop_oneof![Just(1i64), Just(60), Just(86_400)],
        proptest::sample::select(&[
            Shape::Drip,
            Shape::Scheduled,
            Shape::Soft,
            Shape::DailyQuota,
            Shape::Session,
        ]),
    );
    (
        proptest::sample::subsequence(NAMES, 1..=3).prop_shuffle(),
        consumed,
        proptest::collection::vec(other, 2),
        proptest::sample::select(&[
            Level::EntityResource,
            Level::EntityDefault,
            Level::Resource,
            Level::System,
        ]),
        1u32..=4,
        any::<bool>(),
    )
        .prop_map(
            |(names, (capacity, refill, period_s), others, level, shards, cascade)| {
                let mut limits = vec![LimitSpec {
                    name: names[0].to_owned(),
                    capacity,
                    refill: refill.min(capacity),
                    period_s,
                    shape: Shape::Drip,
                }];
                for (name, (capacity, refill, period_s, shape)) in names[1..].iter().zip(others) {
                    limits.push(LimitSpec {
                        name: (*name).to_owned(),
                        capacity,
                        refill: refill.min(capacity),
                        period_s,
                        shape,
                    });
                }
                Blueprint {
                    limits,
                    level,
                    shards,
                    cascade,
                }
            },
        )
}

/// One mutation of any kind.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    let shape = prop_oneof![
        proptest::sample::select(PK_LASTS).prop_map(KeyShape::PkLast),
        proptest::sample::select(KEY_APPENDS).prop_map(KeyShape::PkAppend),
        (1usize..=12).prop_map(KeyShape::PkCut),
        proptest::sample::select(KEY_APPENDS).prop_map(KeyShape::SkAppend),
        proptest::sample::select(SKS).prop_map(KeyShape::SkReplace),
    ];
    prop_oneof![
        2 => (any::<Index>(), any::<Index>()).prop_map(|(item, attr)| Mutation::Drop { item, attr }),
        2 => (any::<Index>(), any::<Index>(), any::<super::value::Kind>())
            .prop_map(|(item, attr, to)| Mutation::Retype { item, attr, to }),
        2 => (any::<Index>(), any::<Index>(), value())
            .prop_map(|(item, attr, value)| Mutation::Set { item, attr, value }),
        4 => (any::<Index>(), any::<Index>(), any::<Index>(), value())
            .prop_map(|(item, name, limit, value)| Mutation::SetNamed { item, name, limit, value }),
        6 => (any::<Index>(), any::<Index>(), any::<Index>(), prop_oneof![
                3 => number_text().prop_map(AttributeValue::N),
                1 => value(),
            ])
            .prop_map(|(item, name, limit, value)| Mutation::OnBucket { item, name, limit, value }),
        4 => (any::<Index>(), proptest::sample::select(LIMIT_FIELDS), prop_oneof![
                4 => number_text().prop_map(AttributeValue::N),
                1 => value(),
            ])
            .prop_map(|(item, field, value)| Mutation::OnConsumed { item, field, value }),
        3 => (any::<Index>(), any::<Index>(), any::<Index>(), instant())
            .prop_map(|(item, name, limit, at)| Mutation::Stamp { item, name, limit, at }),
        1 => (any::<Index>(), shape).prop_map(|(item, shape)| Mutation::Rekey { item, shape }),
        1 => any::<Index>().prop_map(|item| Mutation::Transplant { item }),
        1 => any::<Index>().prop_map(|item| Mutation::ForeignIndex { item }),
    ]
}

/// A case: a world, up to eight mutations of it, and a subset of zae-limiter 0.17's items
/// (indexes into [`super::zae::items`]).
#[derive(Debug, Clone)]
pub struct Case {
    /// The valid world.
    pub world: Blueprint,
    /// What is changed in it, in order.
    pub mutations: Vec<Mutation>,
    /// Which of zae-limiter's items are stored too.
    pub zae: Vec<Index>,
    /// Whether acquires send their `UpdateItem` through the repository's own request path
    /// (reading the answer's bytes itself) or through the SDK's.
    pub fast_path: bool,
}

/// Cases.
pub fn case() -> impl Strategy<Value = Case> {
    (
        blueprint(),
        proptest::collection::vec(mutation(), 0..=8),
        proptest::collection::vec(any::<Index>(), 0..=3),
        any::<bool>(),
    )
        .prop_map(|(world, mutations, zae, fast_path)| Case {
            world,
            mutations,
            zae,
            fast_path,
        })
}
