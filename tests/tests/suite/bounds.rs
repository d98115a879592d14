//! Values another writer stores out of bounds (`dynalimit_core::bounds`), written raw as a
//! hostile or broken client would: a `shard_count` above 32 makes the item corrupt on every
//! path (a typed error naming the attribute; nothing stamped, collected or created for it),
//! and a stamp further ahead than it lives counts as expired: it admits nothing past the
//! limit and the next slow pass writes it again. A stamp within its lifetime plus the
//! clock-skew allowance is honoured as before.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::{Error, FormatError, Limit, OnUnavailable, Reason};
use dynalimit_aggregator::{Aggregator, EventKind, SequenceNumber, Settings, StreamRecord};
use dynalimit_core::bounds::{CLOCK_SKEW_MS, STAMP_TTL_MS};
use dynalimit_core::schedule::{Entry, Schedule, Zone};
use dynalimit_core::{Clock, ManualClock};
use dynalimit_format::item::{Item, get_i64};
use dynalimit_repository::{OperationOptions, RepositoryError};

use super::engine::{Rig, rig};

/// Far beyond any stamp's lifetime.
const FAR: &str = "9000000000000000000";

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.to_owned())
}

/// gpt-4 at 3 rpm by default, and one admitted acquire by `k` (which creates shard 0).
async fn three_rpm() -> Rig {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 3)])
        .await
        .unwrap();
    let (admitted, _) = r.spend("rpm", 1).await;
    assert_eq!(admitted, 1);
    r
}

/// Sets `attr` on shard 0 of `k`'s gpt-4 bucket to the number `value`, as another writer.
async fn stamp(r: &Rig, attr: &str, value: &str) {
    r.update_bucket(
        "k",
        "gpt-4",
        &format!("SET {attr} = :v"),
        &[(":v", n(value))],
    )
    .await;
}

async fn bucket(r: &Rig) -> Item {
    r.first_shard("k", "gpt-4").await
}

/// Whether `e` is the corrupt item of `k`'s shard 0, naming `shard_count`.
fn names_the_shard_count(e: &RepositoryError) -> bool {
    matches!(
        e,
        RepositoryError::Format(FormatError::Corrupt { key, attribute: Some(a), .. })
            if a == "shard_count" && key.contains("BUCKET#k#gpt-4#0")
    )
}

/// A corrupt-item error of an acquire (or pause, or check) naming `shard_count`.
fn corrupt_for_the_shard_count(e: &Error) -> bool {
    matches!(e, Error::Corrupt(inner) if names_the_shard_count(inner))
}

#[tokio::test]
async fn a_shard_count_above_32_is_corrupt_on_every_path_and_nothing_is_written_for_it() {
    let r = three_rpm().await;
    stamp(&r, "shard_count", "4294967295").await;

    // The acquire fails with the corrupt item, under `on_unavailable = allow` too: an item
    // out of bounds is no outage, and nothing is admitted past it. Its fast-path debit may
    // stand: the item's own balance admitted it; nothing else is written.
    for mode in [OnUnavailable::Block, OnUnavailable::Allow] {
        let acquired = r
            .limiter
            .acquire("k", "gpt-4", [("rpm", 1)])
            .on_unavailable(mode)
            .await;
        assert!(
            acquired.as_ref().is_err_and(corrupt_for_the_shard_count),
            "{mode:?}: {:?}",
            acquired.map(|_| ())
        );
    }
    let before = r.table.scan_all().await;

    let paused = r.limiter.pause("k", "gpt-4", Duration::from_secs(30)).await;
    assert!(
        paused.as_ref().is_err_and(corrupt_for_the_shard_count),
        "{paused:?}"
    );
    let available = r.limiter.available("k", "gpt-4", &[]).await;
    assert!(
        available.as_ref().is_err_and(corrupt_for_the_shard_count),
        "{available:?}"
    );
    let options = OperationOptions::default();
    let reset = r.repo.reset_bucket("k", "gpt-4", &options).await;
    assert!(
        reset.as_ref().is_err_and(names_the_shard_count),
        "{reset:?}"
    );
    let top_up = r.repo.top_up("k", "gpt-4", [("rpm", 1)], &options).await;
    assert!(
        top_up.as_ref().is_err_and(names_the_shard_count),
        "{top_up:?}"
    );

    // The aggregator reads the record of the write that raised the count: it counts
    // nothing, creates no shard and reports the item.
    let item = bucket(&r).await;
    let mut old = item.clone();
    old.insert("shard_count".into(), n("1"));
    let record = StreamRecord {
        event_id: "e0".into(),
        kind: EventKind::Modify,
        sequence_number: SequenceNumber::parse("100").unwrap(),
        old_image: Some(old),
        new_image: Some(item),
        removed_by_ttl: false,
    };
    let extracted = dynalimit_aggregator::processor::extract(std::slice::from_ref(&record));
    assert!(extracted.activity.is_empty() && extracted.usage.is_empty());
    assert_eq!(extracted.corrupt.len(), 1, "{extracted:?}");
    let clock = Arc::new(ManualClock::new(r.clock.epoch_millis()));
    let aggregator = Aggregator::with_clock(
        r.table.client().clone(),
        Settings::new(r.table.name()),
        clock,
    );
    let report = aggregator.process(&[record]).await;
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(
        (report.counted, report.shards_created, report.shards_stamped),
        (0, 0, 0)
    );
    assert!(
        report.errors.iter().any(|e| e.contains("shard_count")),
        "{report:?}"
    );

    let mut after = r.table.scan_all().await;
    let mut before = before;
    let order = |i: &Item| format!("{:?}{:?}", i.get("PK"), i.get("SK"));
    before.sort_by_key(order);
    after.sort_by_key(order);
    assert_eq!(after, before, "nothing written");
}

#[tokio::test]
async fn a_far_future_bypass_admits_nothing_past_the_limit_and_the_slow_pass_removes_it() {
    let r = three_rpm().await;
    stamp(&r, "bypass", FAR).await;
    let (admitted, last) = r.spend("rpm", 5).await;
    assert_eq!(admitted, 2, "3 a minute, 1 spent before");
    assert!(last.is_some());
    assert_eq!(get_i64(&bucket(&r).await, "bypass"), None, "removed");
    assert_eq!(r.tc("k", "rpm").await, 3);
}

#[tokio::test]
async fn a_far_future_bypass_on_a_bypassed_pair_is_written_again_within_its_lifetime() {
    let r = three_rpm().await;
    r.update_resource_config(
        "gpt-4",
        "SET disabled = :v",
        &[(":v", AttributeValue::S("bypass".into()))],
    )
    .await;
    stamp(&r, "bypass", FAR).await;
    let lease = r.limiter.acquire("k", "gpt-4", [("rpm", 1)]).await.unwrap();
    assert!(lease.bypassed());
    lease.commit().await.unwrap();
    let now = r.clock.epoch_millis();
    let renewed = get_i64(&bucket(&r).await, "bypass").unwrap();
    assert!(
        (now..=now + STAMP_TTL_MS).contains(&renewed),
        "{renewed} written again from {now}"
    );
}

#[tokio::test]
async fn a_far_future_soft_stamp_on_a_hard_limit_refuses_past_it_and_is_removed() {
    let r = three_rpm().await;
    stamp(&r, "b_rpm_soft", FAR).await;
    let (admitted, last) = r.spend("rpm", 5).await;
    assert_eq!(admitted, 2);
    assert!(last.is_some_and(|l| l.statuses().iter().all(|s| !s.overdrawn)));
    assert_eq!(get_i64(&bucket(&r).await, "b_rpm_soft"), None);
}

#[tokio::test]
async fn a_far_future_boundary_does_not_keep_a_lowered_limit_from_applying() {
    // 100 a minute, 10 a minute from 09:00 UTC: a bucket filled at 08:58 holds 99 tokens
    // and its boundary (`vu`) is 09:00. Another writer moves `vu` far ahead; at 09:01 the
    // fast path must not spend the 99 tokens the lowered limit no longer allows.
    let r = rig().await;
    let july_15_0858 = 1_784_073_600_000 + (8 * 60 + 58) * 60_000;
    r.clock.set_epoch_millis(july_15_0858);
    let office = Schedule::new(
        Zone::utc(),
        vec![Entry::scaled("* 9-17 * * *", 0.1).unwrap()],
    )
    .unwrap();
    r.repo
        .set_resource_defaults(
            "gpt-4",
            &[Limit::per_minute("rpm", 100).with_schedule(office)],
        )
        .await
        .unwrap();
    assert_eq!(r.spend("rpm", 1).await.0, 1);
    let nine = july_15_0858 + 2 * 60_000;
    assert_eq!(get_i64(&bucket(&r).await, "vu"), Some(nine));
    stamp(&r, "vu", FAR).await;
    r.clock.set_epoch_millis(nine + 60_000);
    let (admitted, _) = r.spend("rpm", 20).await;
    assert_eq!(
        admitted, 10,
        "the 10 of the lowered limit, not the 99 stored"
    );
    // The slow pass wrote the true boundary: 18:00.
    assert_eq!(
        get_i64(&bucket(&r).await, "vu"),
        Some(july_15_0858 + (9 * 60 + 2) * 60_000)
    );
}

#[tokio::test]
async fn a_far_future_pause_is_no_pause_and_the_next_pause_replaces_it() {
    let r = three_rpm().await;
    stamp(&r, "dl_pause_until", FAR).await;
    assert_eq!(r.limiter.paused_until("k", "gpt-4").await.unwrap(), None);
    let (admitted, last) = r.spend("rpm", 5).await;
    assert_eq!(admitted, 2, "not paused, still limited");
    assert!(last.is_some_and(|l| matches!(l.reason(), Reason::Limits)));

    let now = r.clock.epoch_millis();
    let stored = r
        .limiter
        .pause("k", "gpt-4", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(stored, Some(now + 30_000));
    assert_eq!(
        get_i64(&bucket(&r).await, "dl_pause_until"),
        Some(now + 30_000)
    );
    match r.limiter.acquire("k", "gpt-4", [("rpm", 1)]).await {
        Err(Error::Rejected(rejection)) => assert_eq!(
            rejection.reason(),
            &Reason::Paused {
                until_epoch_ms: now + 30_000
            }
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn a_bypass_within_its_lifetime_and_the_skew_is_honoured_and_one_beyond_is_not() {
    let r = three_rpm().await;
    let now = r.clock.epoch_millis();
    let horizon = now + STAMP_TTL_MS + CLOCK_SKEW_MS;
    // At the horizon: live, so the bucket admits past its balance (bypassed).
    stamp(&r, "bypass", &horizon.to_string()).await;
    let (admitted, _) = r.spend("rpm", 5).await;
    assert_eq!(admitted, 5);
    // One millisecond beyond: expired, and the limit applies again (the 3 of the minute
    // were spent before the bypass; a bypassed debit moves no balance).
    stamp(&r, "bypass", &(horizon + 1).to_string()).await;
    let (admitted, _) = r.spend("rpm", 5).await;
    assert_eq!(admitted, 2);
}
