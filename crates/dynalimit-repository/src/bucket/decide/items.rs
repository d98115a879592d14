//! The items the format writes for what [`plan_create`] plans, read back as the plans say.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_format::bucket::{BucketKey, Owner, clone_for_shard, create_item, image_from_item};
use dynalimit_format::expr::num;
use dynalimit_format::item::{get_i64, get_s as get_str};

use super::{NewShard, Plan, Stamps, plan_create};

const T0: i64 = 1_700_000_000_000;

#[test]
fn create_item_matches_the_worked_example() {
    let limits = [
        Limit::per_minute("rpm", 100),
        Limit::per_minute("tpm", 10_000),
    ];
    let demand = BTreeMap::from([("rpm".to_owned(), 1000), ("tpm".to_owned(), 500_000)]);
    let Plan::Write(plan) = plan_create(
        &limits,
        &demand,
        1,
        0,
        T0,
        Some(1_700_000_420),
        &Stamps::default(),
    ) else {
        panic!()
    };
    let key = BucketKey::new("u1", "gpt-4", 0);
    let item = create_item("a7x3kq", &key, &plan, &Owner::default());
    let s = |k: &str| get_str(&item, k).unwrap().to_owned();
    let n = |k: &str| get_i64(&item, k).unwrap();
    assert_eq!(s("PK"), "a7x3kq/BUCKET#u1#gpt-4#0");
    assert_eq!(s("SK"), "#STATE");
    assert_eq!(s("GSI2PK"), "a7x3kq/RESOURCE#gpt-4");
    assert_eq!(s("GSI2SK"), "BUCKET#u1#0");
    assert_eq!(s("GSI3PK"), "a7x3kq/ENTITY#u1");
    assert_eq!(s("GSI3SK"), "BUCKET#gpt-4#0");
    assert_eq!(s("GSI4PK"), "a7x3kq");
    assert_eq!(s("GSI4SK"), "BUCKET#u1#gpt-4#0");
    assert_eq!(n("ttl"), 1_700_000_420);
    assert_eq!(n("rf"), T0);
    assert_eq!(n("shard_count"), 1);
    assert_eq!(n("b_wcu_tk"), 1_000_000);
    assert_eq!(n("b_wcu_rp"), 1000);
    assert_eq!(n("b_rpm_tk"), 99_000);
    assert_eq!(n("b_rpm_cp"), 100_000);
    assert_eq!(n("b_rpm_rp"), 60_000);
    assert_eq!(n("b_rpm_tc"), 1000);
    assert_eq!(n("b_tpm_tk"), 9_500_000);
    assert_eq!(n("b_tpm_tc"), 500_000);
    assert!(matches!(item["cascade"], AttributeValue::Bool(false)));
    // Decoding gives the same state back.
    let img = image_from_item(&item).unwrap();
    assert_eq!(img.limits["rpm"].tk, 99_000);
    assert_eq!(img.wcu.unwrap().cp, 1_000_000);
    assert!(img.unsupported.is_empty());
}

#[test]
fn a_clone_of_quotas_reads_as_the_core_describes_it() {
    use dynalimit_core::schedule::Zone;
    let limits = [
        Limit::quota_per_day("q", 40, Zone::get("Europe/Paris").unwrap()),
        Limit::session_quota("s", 40, 600),
        Limit::per_minute("rpm", 40).soft(),
    ];
    let soft = Stamps {
        names: ["rpm".to_owned()].into(),
        until: T0 + 60_000,
        restamp: true,
        ..Stamps::default()
    };
    let Plan::Write(plan) = plan_create(&limits, &BTreeMap::new(), 2, 0, T0, Some(7), &soft) else {
        panic!("a create");
    };
    let owner = Owner {
        cascade: true,
        parent_id: Some("org".into()),
        pgen: Some(3),
        pinc: Some("i".into()),
    };
    let mut donor = create_item("ns1", &BucketKey::new("k", "r", 0), &plan, &owner);
    donor.insert("b_q_tu".to_owned(), num(5_000));
    donor.insert("b_q_rn".to_owned(), num(2));
    donor.insert("b_s_wtc".to_owned(), num(3_000));
    let new = NewShard {
        shard: 2,
        shard_count: 4,
        rf: T0 + 5,
        balances: [("q".to_owned(), 7_000), ("s".to_owned(), 2_000)].into(),
        windows: [("s".to_owned(), T0 + 1)].into(),
        vu: Some(T0 + 9),
    };
    let clone = clone_for_shard(&donor, "ns1", &BucketKey::new("k", "r", 2), &new).unwrap();
    let img = image_from_item(&clone).unwrap();
    assert_eq!(img, new.image(&image_from_item(&donor).unwrap()));
    assert!(img.unsupported.is_empty(), "{:?}", img.unsupported);
    assert_eq!(img.quotas["q"].gc, Some(4));
    assert_eq!((img.quotas["q"].tu, img.quotas["q"].rn), (None, Some(2)));
    assert_eq!(img.windows["s"].ws, Some(T0 + 1));
    assert_eq!(img.windows["s"].wa, Some(T0 + 1));
    assert_eq!(img.windows["s"].wtc, None);
    assert_eq!(img.soft["rpm"], T0 + 60_000);
    assert_eq!((img.ttl, img.parent_id.as_deref()), (Some(7), Some("org")));
    assert_eq!(img.limits["rpm"].tk, 0);
}
