//! Named cases: one change each, of an attribute that once let a read path admit past the
//! stored limits, panic or hang. Each runs the whole case as the property does.

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_tests::hostile::mutate::Mutation;
use dynalimit_tests::hostile::strategy::Case;
use dynalimit_tests::hostile::world::{Blueprint, Level, LimitSpec, Shape};
use dynalimit_tests::hostile::{CHILD, RESOURCE};

use crate::drive;

/// One shard of the child, `rpm` 2 an hour configured for the entity on the resource.
fn world() -> Blueprint {
    Blueprint {
        limits: vec![LimitSpec {
            name: "rpm".into(),
            capacity: 2,
            refill: 2,
            period_s: 3600,
            shape: Shape::Drip,
        }],
        level: Level::EntityResource,
        shards: 1,
        cascade: false,
    }
}

/// Sets `attr` of the child's shard 0 (`None`: removes it).
fn on_shard_0(attr: &str, value: Option<AttributeValue>) -> Mutation {
    Mutation::At {
        pk: format!("BUCKET#{CHILD}#{RESOURCE}#0"),
        sk: "#STATE".into(),
        attr: attr.into(),
        value,
    }
}

fn n(text: &str) -> Option<AttributeValue> {
    Some(AttributeValue::N(text.into()))
}

/// Runs the case of `world()` with `mutations`, on both request paths of the acquire.
fn passes(mutations: Vec<Mutation>) {
    for fast_path in [true, false] {
        let case = Case {
            world: world(),
            mutations: mutations.clone(),
            zae: Vec::new(),
            fast_path,
        };
        let tally = Arc::new(drive::Tally::default());
        if let Err(e) = drive::run(&case, &tally) {
            panic!("fast path {fast_path}: {e}\n{}", tally.summary());
        }
    }
}

#[test]
fn a_refill_period_that_is_no_number_does_not_refill_at_every_millisecond() {
    passes(vec![on_shard_0(
        "b_rpm_rp",
        Some(AttributeValue::M(Default::default())),
    )]);
    passes(vec![on_shard_0(
        "b_rpm_rp",
        n("-12345678901234567890123456789012345678"),
    )]);
    passes(vec![on_shard_0("b_rpm_rp", None)]);
}

#[test]
fn a_balance_far_above_the_capacity_admits_no_more_than_the_capacity() {
    passes(vec![on_shard_0("b_rpm_tk", n("1000000000000000"))]);
}

#[test]
fn a_balance_without_its_capacity_admits_nothing_past_the_configuration() {
    passes(vec![
        on_shard_0("b_rpm_tk", n("1000000000000000")),
        on_shard_0("b_rpm_cp", None),
    ]);
}
