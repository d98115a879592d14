//! Concurrency limits across processes (slots with a hold time): held up to the limit and
//! refused beyond it, freed by a release, by a drop, or by the hold time passing without a
//! heartbeat; a heartbeat that comes too late finds the slot lost; values another writer
//! stored never hold a slot forever; a lost answer never grants a slot twice.

use std::time::Duration;

use dynalimit::{Concurrency, Error, RateLimiter, Reason};
use dynalimit_core::Clock as _;
use dynalimit_format::item::{Item, get_s, n, s};
use dynalimit_format::slot::slots_key;
use dynalimit_tests::fault::FaultProxy;

use crate::engine::{Rig, rig};

const HOLD: Duration = Duration::from_secs(30);

fn streams(max: u32) -> Concurrency {
    Concurrency::new("streams", max)
        .unwrap()
        .hold_time(HOLD)
        .unwrap()
}

/// The slots item of acme on gpt-4, as stored.
async fn stored(r: &Rig) -> Option<Item> {
    let key = slots_key(r.repo.namespace_id(), "acme", "gpt-4", "streams");
    r.table
        .scan_all()
        .await
        .into_iter()
        .find(|it| get_s(it, "SK") == get_s(&key, "SK") && get_s(it, "PK") == get_s(&key, "PK"))
}

fn held(item: &Item) -> usize {
    item.keys()
        .filter(|k| k.starts_with('x') && k[1..].bytes().all(|b| b.is_ascii_digit()))
        .count()
}

fn in_flight(e: &Error) -> Duration {
    let r = e
        .rejection()
        .unwrap_or_else(|| panic!("not a refusal: {e}"));
    assert!(
        matches!(r.reason(), Reason::InFlight { limit, max } if limit == "streams" && *max > 0),
        "{e}"
    );
    r.retry_after().expect("a refusal says when")
}

#[tokio::test]
async fn slots_are_held_up_to_the_limit_then_refused_until_one_is_released() {
    let r = rig().await;
    r.counter.reset();
    let mut slots = Vec::new();
    for _ in 0..3 {
        slots.push(r.limiter.hold("acme", "gpt-4", &streams(3)).await.unwrap());
    }
    assert_eq!(
        r.counter.snapshot().get("UpdateItem"),
        Some(&3),
        "one request a slot when one is free: {:?}",
        r.counter.snapshot()
    );
    let mut indices: Vec<u32> = slots.iter().map(dynalimit::Slot::index).collect();
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2]);

    // Full: refused after reading the item, with the first expiry as the retry-after.
    r.counter.reset();
    let refused = r
        .limiter
        .hold("acme", "gpt-4", &streams(3))
        .await
        .unwrap_err();
    let wait = in_flight(&refused);
    assert!(wait <= HOLD + Duration::from_millis(1), "{wait:?}");
    assert!(wait >= HOLD - Duration::from_secs(1), "{wait:?}");
    assert_eq!(
        r.counter.snapshot().get("UpdateItem"),
        None,
        "{:?}",
        r.counter.snapshot()
    );

    // Another process's view: a second limiter on the same table sees the same count.
    let other = RateLimiter::new(r.repo.clone());
    assert!(other.hold("acme", "gpt-4", &streams(3)).await.is_err());

    // A release frees one slot, once; a release sent twice finds nothing more to free.
    let first = slots.remove(0);
    let index = first.index();
    assert!(first.release().await.unwrap());
    let again = r.limiter.hold("acme", "gpt-4", &streams(3)).await.unwrap();
    assert_eq!(again.index(), index);
    assert_eq!(held(&stored(&r).await.unwrap()), 3);
    for slot in slots {
        assert!(slot.release().await.unwrap());
    }
    assert!(again.release().await.unwrap());
    assert_eq!(held(&stored(&r).await.unwrap()), 0);

    // The slots item is the entity's: deleting the entity deletes it.
    r.repo.delete_entity("acme").await.unwrap();
    assert!(stored(&r).await.is_none());
}

#[tokio::test]
async fn a_dropped_slot_is_released_and_a_crashed_holders_slot_frees_at_its_expiry() {
    let r = rig().await;
    let slot = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    drop(slot);
    // The release runs on a task: wait for it.
    for _ in 0..100 {
        if stored(&r).await.is_some_and(|it| held(&it) == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let crashed = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    // A holder that crashes releases nothing: leaked here, as a killed process would.
    std::mem::forget(crashed);
    assert!(r.limiter.hold("acme", "gpt-4", &streams(1)).await.is_err());
    r.clock.advance(HOLD - Duration::from_millis(1));
    assert!(r.limiter.hold("acme", "gpt-4", &streams(1)).await.is_err());
    r.clock.advance(Duration::from_millis(2));
    let next = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn a_heartbeat_keeps_the_slot_and_a_late_one_finds_it_lost() {
    let r = rig().await;
    let mut slot = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    let start = r.clock.epoch_millis();
    r.clock.advance(HOLD * 2 / 3);
    slot.extend().await.unwrap();
    assert_eq!(
        slot.expires_at_ms(),
        start + i64::try_from((HOLD * 2 / 3 + HOLD).as_millis()).unwrap()
    );
    r.clock.advance(HOLD * 2 / 3);
    // Past the first hold, within the extended one: still held.
    assert!(r.limiter.hold("acme", "gpt-4", &streams(1)).await.is_err());

    // No heartbeat for a whole hold: another holder takes the slot, and the first learns it
    // lost it.
    r.clock.advance(HOLD);
    let thief = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    let lost = slot.extend().await.unwrap_err();
    assert!(
        matches!(lost, Error::SlotLost { ref limit, slot: 0 } if limit == "streams"),
        "{lost}"
    );
    assert!(slot.is_lost());
    assert!(!slot.release().await.unwrap(), "not this holder's any more");
    // The thief still holds it.
    assert!(r.limiter.hold("acme", "gpt-4", &streams(1)).await.is_err());
    assert!(thief.release().await.unwrap());
}

#[tokio::test]
async fn values_another_writer_stored_never_hold_a_slot_forever() {
    let r = rig().await;
    let now = r.clock.epoch_millis();
    let mut it = slots_key(r.repo.namespace_id(), "acme", "gpt-4", "streams");
    for (k, v) in [
        // The year 3000: beyond any hold.
        ("x0", n(32_503_680_000_000_i64)),
        ("h0", s("someone")),
        ("x1", s("tomorrow")),
        // Far beyond the slots asked for, and beyond the most a limit has.
        ("x2000", n(now + 10_000)),
        ("x3", n(now + 10_000)),
        ("h3", s("x".repeat(5000))),
    ] {
        it.insert(k.to_owned(), v);
    }
    dynalimit_tests::raw::put_item(&r.table, it).await;
    let mut slots = Vec::new();
    for _ in 0..3 {
        slots.push(r.limiter.hold("acme", "gpt-4", &streams(4)).await.unwrap());
    }
    let mut indices: Vec<u32> = slots.iter().map(dynalimit::Slot::index).collect();
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2], "slot 3 is held until its expiry");
    assert!(r.limiter.hold("acme", "gpt-4", &streams(4)).await.is_err());
}

#[tokio::test]
async fn bad_concurrency_limits_are_refused_before_any_request() {
    let r = rig().await;
    r.counter.reset();
    for bad in [
        Concurrency::new("wcu", 5).err().map(Error::from),
        Concurrency::new("streams", 0).err().map(Error::from),
        Concurrency::new("streams", 1001).err().map(Error::from),
        Concurrency::new("str eams", 5).err().map(Error::from),
        Concurrency::new("streams", 5)
            .unwrap()
            .hold_time(Duration::from_millis(999))
            .err()
            .map(Error::from),
        Concurrency::new("streams", 5)
            .unwrap()
            .hold_time(Duration::from_secs(3601))
            .err()
            .map(Error::from),
    ] {
        assert!(matches!(bad, Some(Error::Invalid(_))), "{bad:?}");
    }
    let e = r
        .limiter
        .hold("ac#me", "gpt-4", &streams(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert_eq!(r.counter.total(), 0, "{:?}", r.counter.snapshot());
}

#[tokio::test]
async fn a_lost_answer_to_a_take_holds_one_slot_once() {
    let r = rig().await;
    let proxy = FaultProxy::start().await;
    let repo = proxy.repository(&r.table, "default").await;
    let ns = repo.namespace_id().to_owned();
    let limiter = RateLimiter::new(repo);
    // DynamoDB applies the take; its answer is lost; the SDK sends it again.
    proxy.clear_requests();
    proxy.lose_next_answer("UpdateItem", 1);
    let slot = limiter.hold("acme", "gpt-4", &streams(2)).await.unwrap();
    let updates = |p: &FaultProxy| {
        p.requests()
            .iter()
            .filter(|q| q.operation == "UpdateItem")
            .count()
    };
    assert_eq!(updates(&proxy), 2, "the take, and the take sent again");
    let item = stored_in(&r, &ns).await;
    assert_eq!(held(&item), 1, "one slot, held once: {item:?}");
    assert_eq!(
        get_s(&item, &format!("h{}", slot.index())).map(str::len),
        Some(32)
    );
    // A lost answer to the release: sent again, it changes nothing more.
    proxy.lose_next_answer("UpdateItem", 1);
    slot.release().await.unwrap();
    assert_eq!(held(&stored_in(&r, &ns).await), 0);
}

async fn stored_in(r: &Rig, ns: &str) -> Item {
    let key = slots_key(ns, "acme", "gpt-4", "streams");
    r.table
        .scan_all()
        .await
        .into_iter()
        .find(|it| get_s(it, "SK") == get_s(&key, "SK") && get_s(it, "PK") == get_s(&key, "PK"))
        .expect("the slots item")
}

#[tokio::test]
async fn a_slot_and_rate_limits_are_taken_together_all_or_none() {
    let r = rig().await;
    let limits = [
        dynalimit::Limit::per_minute("rpm", 3),
        dynalimit::Limit::per_minute("tpm", 10_000),
    ];
    let tokens = |r: &Rig| {
        let limits = limits.clone();
        let limiter = r.limiter.clone();
        async move {
            let statuses = limiter.balances("acme", "gpt-4", &limits).await.unwrap();
            statuses
                .iter()
                .map(|s| (s.limit.name().to_owned(), s.available))
                .collect::<Vec<_>>()
        }
    };
    let limiter = r.limiter.clone();
    let acquire = |_: &Rig, max: u32| {
        limiter
            .acquire("acme", "gpt-4", [("rpm", 1), ("tpm", 500)])
            .limits(limits.clone())
            .in_flight(streams(max))
    };

    // Both fit: the lease holds the slot; its commit gives the slot back, not the tokens.
    let lease = acquire(&r, 1).await.unwrap();
    assert_eq!(lease.slots().len(), 1);
    assert_eq!(held(&stored(&r).await.unwrap()), 1);
    lease.commit().await.unwrap();
    assert_eq!(held(&stored(&r).await.unwrap()), 0);
    assert_eq!(
        tokens(&r).await,
        vec![("rpm".to_owned(), 2), ("tpm".to_owned(), 9_500)]
    );

    // The slot is full: refused, and the debits are given back.
    let holder = r.limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    let refused = acquire(&r, 1).await.unwrap_err();
    in_flight(&refused);
    r.limiter.settle().await;
    assert_eq!(
        tokens(&r).await,
        vec![("rpm".to_owned(), 2), ("tpm".to_owned(), 9_500)]
    );
    assert!(holder.release().await.unwrap());

    // The rate limit is spent: refused, and the slot is given back.
    for _ in 0..2 {
        acquire(&r, 5).await.unwrap().commit().await.unwrap();
    }
    let refused = acquire(&r, 5).await.unwrap_err();
    assert!(
        matches!(
            refused.rejection().map(dynalimit::Rejection::reason),
            Some(Reason::Limits)
        ),
        "{refused}"
    );
    assert_eq!(held(&stored(&r).await.unwrap()), 0, "no slot left behind");

    // A rollback gives both back.
    r.clock.advance(Duration::from_secs(60));
    let lease = acquire(&r, 5).await.unwrap();
    lease.rollback().await.unwrap();
    assert_eq!(held(&stored(&r).await.unwrap()), 0);
    assert_eq!(tokens(&r).await[0], ("rpm".to_owned(), 3));
}

#[tokio::test]
async fn a_hold_that_lapsed_before_its_answer_came_is_not_handed_out() {
    let r = rig().await;
    let proxy = FaultProxy::start().await;
    let repo = r
        .table
        .builder()
        .client(proxy.client(3, Some(Duration::from_secs(5))).await)
        .clock(std::sync::Arc::new(r.clock.clone()))
        .open()
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo);
    // The take is applied, and its answer comes 300 ms late; meanwhile the hold time passes.
    proxy.lose_after_applying("UpdateItem", None, dynalimit_tests::fault::Lost::Delay, 1);
    let clock = r.clock.clone();
    let pass_the_hold = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        clock.advance(HOLD + Duration::from_secs(1));
    });
    let slot = limiter.hold("acme", "gpt-4", &streams(1)).await.unwrap();
    pass_the_hold.await.unwrap();
    assert!(
        slot.expires_at_ms() > r.clock.epoch_millis(),
        "a hold that already lapsed was handed out: expires {} at {}",
        slot.expires_at_ms(),
        r.clock.epoch_millis()
    );
    assert!(slot.release().await.unwrap());
}
