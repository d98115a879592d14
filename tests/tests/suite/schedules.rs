//! Scheduled limits (reference §12.2) against DynamoDB Local: a bucket admits what the window
//! in force allows, stores its schedules and next boundary as zae-limiter does, takes one slow
//! pass at the boundary, and reports the wait walked across windows.
//!
//! The client's clock is a `ManualClock` set to chosen instants (Wednesday 2026-07-15 in
//! Berlin); frozen between steps, so nothing refills unless the test moves it.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, Limit};
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use dynalimit_format::item::{get_i64, get_s};

use crate::engine::rig;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
/// 2026-07-15 10:00 in Berlin (08:00 UTC), a Wednesday.
const WED_10_00: i64 = 1_784_102_400_000;
/// 18:00 the same day: office hours (`* 9-17`) are over.
const WED_18_00: i64 = WED_10_00 + 8 * HOUR;
/// 09:00 the next day: office hours again.
const THU_09_00: i64 = WED_10_00 + 23 * HOUR;

/// `rpm` per minute, half of it during office hours in Berlin.
fn office(rpm: i64) -> Limit {
    let zone = Zone::get("Europe/Berlin").unwrap();
    let half = Entry::scaled("* 9-17 * * MON-FRI", 0.5).unwrap();
    Limit::per_minute("rpm", rpm).with_schedule(Schedule::new(zone, vec![half]).unwrap())
}

#[tokio::test]
async fn a_scheduled_limit_admits_its_window_then_the_base_after_the_boundary() {
    let r = rig().await;
    r.clock.set_epoch_millis(WED_10_00);
    r.repo
        .set_resource_defaults("gpt-4", &[office(100)])
        .await
        .unwrap();

    let (admitted, rejection) = r.spend("rpm", 60).await;
    assert_eq!(admitted, 50, "half of 100 during office hours");
    let rejection = rejection.expect("the 51st is refused");
    let status = rejection.status("rpm").unwrap();
    assert_eq!(
        status.limit.capacity(),
        50,
        "the status reports the capacity in force"
    );
    // One token at 50 a minute: 1.2 s.
    assert_eq!(rejection.retry_after().unwrap().as_millis(), 1201);

    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_s(&item, "sched"), Some("1h9-17w1-5s500"));
    assert_eq!(get_s(&item, "sched_tz"), Some("Europe/Berlin"));
    assert_eq!(
        get_i64(&item, "b_rpm_cp"),
        Some(100_000),
        "the base is stored"
    );
    assert_eq!(get_i64(&item, "vu"), Some(WED_18_00), "the next boundary");

    // At 18:00 the fast path refuses on `vu`; the slow pass refills to the base capacity and
    // stamps the next boundary, Thursday 09:00.
    r.clock.set_epoch_millis(WED_18_00);
    let (admitted, rejection) = r.spend("rpm", 101).await;
    assert_eq!(admitted, 100, "the base capacity after office hours");
    assert_eq!(
        rejection.unwrap().status("rpm").unwrap().limit.capacity(),
        100
    );
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_i64(&item, "vu"), Some(THU_09_00));
}

#[tokio::test]
async fn the_wait_is_walked_across_the_boundary() {
    let r = rig().await;
    // 30 s before the end of office hours.
    let now = WED_18_00 - 30_000;
    r.clock.set_epoch_millis(now);
    r.repo
        .set_resource_defaults("gpt-4", &[office(100)])
        .await
        .unwrap();
    let lease = r
        .limiter
        .acquire("k", "gpt-4", [("rpm", 50)])
        .await
        .expect("the window's 50");
    lease.commit().await.unwrap();
    let Err(Error::Rejected(rejection)) = r.limiter.acquire("k", "gpt-4", [("rpm", 60)]).await
    else {
        panic!("60 of an empty bucket must be refused");
    };
    // 30 s at 50 a minute give 25 tokens; the other 35 take 21 s at 100 a minute.
    assert_eq!(rejection.retry_after().unwrap().as_millis(), 51_001);
}

#[tokio::test]
async fn limits_beside_a_scheduled_one_are_marked_unscheduled_and_keep_their_base() {
    let r = rig().await;
    r.clock.set_epoch_millis(WED_10_00);
    r.repo
        .set_resource_defaults("gpt-4", &[office(100), Limit::per_minute("tpm", 1000)])
        .await
        .unwrap();
    let lease = r
        .limiter
        .acquire("k", "gpt-4", [("rpm", 1), ("tpm", 1000)])
        .await
        .expect("the whole tpm, which no window halves");
    lease.commit().await.unwrap();
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_s(&item, "sched"), Some("1h9-17w1-5s500"));
    assert_eq!(get_s(&item, "b_tpm_sched"), Some("-"));
    assert_eq!(
        get_s(&item, "b_rpm_sched"),
        None,
        "rpm inherits the item's default"
    );
    assert_eq!(get_i64(&item, "b_rpm_tk"), Some(49_000));
}

#[tokio::test]
async fn schedules_in_two_zones_on_one_level_are_refused_before_any_write() {
    let r = rig().await;
    let paris = Schedule::new(
        Zone::get("Europe/Paris").unwrap(),
        vec![Entry::scaled("* 0-6 * * *", 2.0).unwrap()],
    )
    .unwrap();
    let night = Limit::per_minute("tpm", 1000).with_schedule(paris);
    let before = r.counter.total();
    let e = r
        .repo
        .set_resource_defaults("gpt-4", &[office(100), night.clone()])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("one time zone"), "{e}");
    let e = r
        .limiter
        .acquire("k", "gpt-4", [("rpm", 1)])
        .limits([office(100), night])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("one time zone"), "{e}");
    assert_eq!(r.counter.total(), before, "nothing was sent");
}

#[tokio::test]
async fn a_stored_schedule_that_does_not_decode_makes_the_pair_unavailable() {
    let r = rig().await;
    r.clock.set_epoch_millis(WED_10_00);
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    r.limiter
        .acquire("k", "gpt-4", [("rpm", 1)])
        .await
        .unwrap()
        .commit()
        .await
        .unwrap();
    // A newer encoder's schedule on the bucket, and a boundary that has passed.
    let values = [
        (":s", AttributeValue::S("9h9s500".into())),
        (":v", AttributeValue::N("0".into())),
    ];
    r.update_bucket("k", "gpt-4", "SET sched = :s, vu = :v", &values)
        .await;
    let e = r
        .limiter
        .acquire("k", "gpt-4", [("rpm", 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
}

#[tokio::test]
async fn a_reset_gives_back_the_capacity_in_force() {
    let r = rig().await;
    r.clock.set_epoch_millis(WED_10_00);
    r.repo
        .set_resource_defaults("gpt-4", &[office(100)])
        .await
        .unwrap();
    let (admitted, _) = r.spend("rpm", 20).await;
    assert_eq!(admitted, 20);
    let done = r
        .repo
        .reset_bucket("k", "gpt-4", &dynalimit_repository::OperationOptions::new())
        .await
        .unwrap();
    assert_eq!(done.amounts["rpm"], 20);
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(
        get_i64(&item, "b_rpm_tk"),
        Some(50_000),
        "half of 100 in office hours"
    );
}

#[tokio::test]
async fn two_scheduled_limits_added_to_a_bucket_are_seeded_in_one_write() {
    let r = rig().await;
    r.clock.set_epoch_millis(WED_10_00);
    let plain = Limit::per_minute("rpm", 100);
    r.repo
        .set_limits("k", "gpt-4", std::slice::from_ref(&plain))
        .await
        .unwrap();
    let (admitted, _) = r.spend("rpm", 1).await;
    assert_eq!(admitted, 1);
    // Two limits with schedules join the bucket: the next rf-locked write seeds both, and
    // the item's zone is written once.
    let zone = Zone::get("Europe/Berlin").unwrap();
    let scheduled = |name: &str| {
        let half = Entry::scaled("* 9-17 * * MON-FRI", 0.5).unwrap();
        Limit::per_minute(name, 10).with_schedule(Schedule::new(zone.clone(), vec![half]).unwrap())
    };
    r.repo
        .set_limits("k", "gpt-4", &[plain, scheduled("tpm"), scheduled("rpd")])
        .await
        .unwrap();
    let (admitted, rejection) = r.spend("rpm", 1).await;
    assert_eq!(admitted, 1, "{rejection:?}");
    let item = r.first_shard("k", "gpt-4").await;
    assert_eq!(get_s(&item, "sched_tz"), Some("Europe/Berlin"));
    for name in ["b_tpm_tk", "b_rpd_tk"] {
        assert_eq!(
            get_i64(&item, name),
            Some(5_000),
            "{name}: half of 10 in office hours"
        );
    }
}
