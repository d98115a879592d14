//! Concurrency limits stored at the four configuration levels: resolved like the rate limits
//! (the first level that has any supplies all of them, through the configuration cache),
//! taken by every acquire beside its debits, all or none, and by a cascading acquire on its
//! parent too; nothing read or written for them in a namespace that stores none.

use std::time::Duration;

use dynalimit::{Concurrency, Error, Limit, Reason};
use dynalimit_format::FormatError;
use dynalimit_format::item::n;

use dynalimit_tests::fault::FaultProxy;

use crate::engine::{Rig, rig};

fn streams(max: u32) -> Concurrency {
    Concurrency::new("streams", max).unwrap()
}

fn is_in_flight(e: &Error, want: u32) -> bool {
    matches!(
        e.rejection().map(dynalimit::Rejection::reason),
        Some(Reason::InFlight { limit, max }) if limit == "streams" && *max == want
    )
}

/// Acquires of 1 rpm by `entity` on `resource` until one is refused; the leases held.
async fn fill(r: &Rig, entity: &str, resource: &str) -> (Vec<dynalimit::Lease>, Error) {
    let mut held = Vec::new();
    loop {
        match r.limiter.acquire(entity, resource, [("rpm", 1)]).await {
            Ok(lease) => held.push(lease),
            Err(e) => return (held, e),
        }
        assert!(held.len() <= 10, "never refused");
    }
}

/// One rpm of `entity` on gpt-4, acquired and committed.
async fn spend(r: &Rig, entity: &str) {
    let lease = r.limiter.acquire(entity, "gpt-4", [("rpm", 1)]).await;
    lease.unwrap().commit().await.unwrap();
}

async fn rpm_left(r: &Rig, entity: &str, resource: &str) -> i64 {
    let statuses = r.limiter.balances(entity, resource, &[]).await.unwrap();
    statuses
        .iter()
        .find(|s| s.limit.name() == "rpm")
        .unwrap()
        .available
}

#[tokio::test]
async fn each_level_s_concurrency_limits_are_taken_by_acquires_the_first_level_that_has_any_winning()
 {
    let r = rig().await;
    let rpm = [Limit::per_minute("rpm", 100)];
    r.repo.set_resource_defaults("gpt-4", &rpm).await.unwrap();
    r.repo.set_resource_defaults("gpt-3", &rpm).await.unwrap();
    let set = |e: Option<&'static str>, res: Option<&'static str>, max: u32| {
        let repo = r.repo.clone();
        async move {
            repo.set_concurrency_limits(e, res, &[streams(max)])
                .await
                .unwrap();
        }
    };
    set(None, None, 1).await; // system
    set(None, Some("gpt-4"), 2).await; // resource
    set(Some("other"), None, 3).await; // entity default
    set(Some("vip"), Some("gpt-4"), 4).await; // entity on gpt-4

    for (entity, resource, max) in [
        ("acme", "gpt-3", 1),
        ("acme", "gpt-4", 2),
        ("other", "gpt-4", 3),
        ("other", "gpt-3", 3),
        ("vip", "gpt-4", 4),
    ] {
        let (held, refused) = fill(&r, entity, resource).await;
        assert_eq!(held.len(), max as usize, "{entity} on {resource}");
        assert!(
            is_in_flight(&refused, max),
            "{entity} on {resource}: {refused}"
        );
        assert!(held.iter().all(|l| l.slots().len() == 1));
        // The refused acquire's debit was given back: each held lease spent one.
        r.limiter.settle().await;
        assert_eq!(rpm_left(&r, entity, resource).await, 100 - max as i64);
        for lease in held {
            lease.commit().await.unwrap();
        }
        // Committed leases gave their slots back.
        let again = r
            .limiter
            .acquire(entity, resource, [("rpm", 1)])
            .await
            .unwrap();
        again.rollback().await.unwrap();
    }

    // Cleared at the resource level: gpt-4 falls through to the system level's limit.
    r.repo
        .set_concurrency_limits(None, Some("gpt-4"), &[])
        .await
        .unwrap();
    let (held, refused) = fill(&r, "acme", "gpt-4").await;
    assert_eq!(held.len(), 1);
    assert!(is_in_flight(&refused, 1), "{refused}");
    drop(held);

    // The rate limits were never touched, and a rate-limit write keeps the concurrency limits.
    assert_eq!(
        r.repo.resolve_limits("vip", "gpt-4").await.unwrap().limits,
        rpm
    );
    r.repo
        .set_limits("vip", "gpt-4", &[Limit::per_minute("rpm", 50)])
        .await
        .unwrap();
    assert_eq!(
        r.repo
            .concurrency_limits(Some("vip"), Some("gpt-4"))
            .await
            .unwrap(),
        [streams(4)]
    );
    assert_eq!(
        r.repo.resolve_concurrency("vip", "gpt-4").await.unwrap(),
        (vec![streams(4)], Some(dynalimit::ConfigLevel::Entity))
    );

    // Warm, an acquire with a stored concurrency limit is two writes (its debit and its
    // slot, sent together), and its commit one (the slot given back).
    spend(&r, "vip").await;
    r.counter.reset();
    let lease = r
        .limiter
        .acquire("vip", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(r.counter.total(), 2, "{:?}", r.counter.snapshot());
    assert_eq!(r.counter.snapshot().get("UpdateItem"), Some(&2));
    lease.commit().await.unwrap();
    assert_eq!(r.counter.total(), 3, "{:?}", r.counter.snapshot());

    // Explicit limits bypass the stored configuration, its concurrency limits too.
    let lease = r
        .limiter
        .acquire("vip", "gpt-4", [("rpm", 1)])
        .limits(rpm.clone())
        .await
        .unwrap();
    assert!(lease.slots().is_empty());
}

/// `name`, a child of `project` (cascading when `cascade`).
async fn child(r: &Rig, name: &str, cascade: bool) {
    let child = dynalimit::NewEntity::new(name).parent("project");
    r.repo.create_entity(child.cascade(cascade)).await.unwrap();
}

#[tokio::test]
async fn a_cascading_acquire_takes_its_parent_s_slots_and_a_refusal_gives_everything_back() {
    let r = rig().await;
    r.family(100, "project", "key-1", true).await;
    child(&r, "key-2", true).await;
    child(&r, "loner", false).await;
    // Two streams for the project in all, one per key.
    r.repo
        .set_concurrency_limits(Some("project"), Some("gpt-4"), &[streams(2)])
        .await
        .unwrap();
    r.repo
        .set_concurrency_limits(None, Some("gpt-4"), &[streams(1)])
        .await
        .unwrap();

    let a = r
        .limiter
        .acquire("key-1", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(a.slots().len(), 2, "the key's slot and the project's");
    let refused = r
        .limiter
        .acquire("key-1", "gpt-4", [("rpm", 1)])
        .await
        .unwrap_err();
    assert!(is_in_flight(&refused, 1), "the key's own limit: {refused}");
    let b = r
        .limiter
        .acquire("key-2", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(b.slots().len(), 2);

    // A third key under the project: its own slot is free, the project's are not. Its own
    // slot and both debits are given back.
    child(&r, "key-3", true).await;
    let before = rpm_left(&r, "project", "gpt-4").await;
    let refused = r
        .limiter
        .acquire("key-3", "gpt-4", [("rpm", 1)])
        .await
        .unwrap_err();
    assert!(is_in_flight(&refused, 2), "the project's limit: {refused}");
    r.limiter.settle().await;
    assert_eq!(rpm_left(&r, "project", "gpt-4").await, before);
    assert_eq!(rpm_left(&r, "key-3", "gpt-4").await, 100);

    // An entity that does not cascade takes its own slot only.
    let c = r
        .limiter
        .acquire("loner", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(c.slots().len(), 1);

    // Committed, the project's slot is free again for key-3.
    a.commit().await.unwrap();
    let d = r
        .limiter
        .acquire("key-3", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(d.slots().len(), 2);
    for lease in [b, c, d] {
        lease.rollback().await.unwrap();
    }
}

#[tokio::test]
async fn a_namespace_without_concurrency_limits_reads_its_features_once_a_minute_and_writes_nothing()
 {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    spend(&r, "acme").await;
    // Warm: one request per acquire, the features item read no more within the cache's TTL.
    r.counter.reset();
    for _ in 0..5 {
        let lease = r
            .limiter
            .acquire("acme", "gpt-4", [("rpm", 1)])
            .await
            .unwrap();
        assert!(lease.slots().is_empty());
        lease.commit().await.unwrap();
    }
    assert_eq!(r.counter.total(), 5, "{:?}", r.counter.snapshot());
    // Past the TTL, the features item is read again: one GetItem, once. (The bucket is full
    // again by then, so the first debit also materialises it: one more UpdateItem.)
    r.clock.advance(Duration::from_secs(61));
    r.counter.reset();
    for _ in 0..3 {
        spend(&r, "acme").await;
    }
    assert_eq!(
        r.counter.snapshot().get("GetItem"),
        Some(&1),
        "{:?}",
        r.counter.snapshot()
    );
    assert_eq!(
        r.counter.snapshot().get("UpdateItem"),
        Some(&4),
        "{:?}",
        r.counter.snapshot()
    );
    assert_eq!(r.counter.total(), 5, "{:?}", r.counter.snapshot());
}

#[tokio::test]
async fn unreadable_concurrency_limits_fail_acquires_closed_and_leave_rate_limits_readable() {
    let r = rig().await;
    r.repo
        .set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    r.repo
        .set_concurrency_limits(None, Some("gpt-4"), &[streams(2)])
        .await
        .unwrap();
    // Another writer stores a limit out of bounds.
    r.update_resource_config("gpt-4", "SET c_streams_max = :m", &[(":m", n(0))])
        .await;
    let e = r
        .limiter
        .acquire("acme", "gpt-4", [("rpm", 1)])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    assert_eq!(
        r.repo
            .resolve_limits("acme", "gpt-4")
            .await
            .unwrap()
            .limits
            .len(),
        1
    );
    assert!(matches!(
        r.repo.concurrency_limits(None, Some("gpt-4")).await,
        Err(dynalimit::RepositoryError::Format(
            FormatError::Corrupt { .. }
        ))
    ));
    // Nothing was debited.
    r.limiter.settle().await;
    assert_eq!(rpm_left(&r, "acme", "gpt-4").await, 100);
}

#[tokio::test]
async fn bad_concurrency_levels_are_refused_before_any_request() {
    let r = rig().await;
    r.counter.reset();
    let five: Vec<_> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| Concurrency::new(*n, 1).unwrap())
        .collect();
    for (e, res, limits) in [
        (None, Some("gpt-4"), five.clone()),
        (None, Some("gpt-4"), vec![streams(1), streams(2)]),
        (Some("ac#me"), None, vec![streams(1)]),
        (None, Some("gpt 4"), vec![streams(1)]),
    ] {
        let refused = r.repo.set_concurrency_limits(e, res, &limits).await;
        assert!(
            matches!(refused, Err(dynalimit::RepositoryError::Validation(_))),
            "{refused:?}"
        );
    }
    // Four is the most, and is stored.
    assert_eq!(r.counter.total(), 0, "{:?}", r.counter.snapshot());
    r.repo
        .set_concurrency_limits(None, Some("gpt-4"), &five[..4])
        .await
        .unwrap();
    assert_eq!(
        r.repo
            .concurrency_limits(None, Some("gpt-4"))
            .await
            .unwrap(),
        five[..4]
    );
}

#[tokio::test]
async fn a_lost_answer_to_a_level_write_is_sent_again_and_leaves_the_same_item() {
    let r = rig().await;
    let proxy = FaultProxy::start().await;
    let repo = proxy.repository(&r.table, "default").await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    let level = |repo: &dynalimit::Repository| {
        let key = dynalimit_format::config::Slot::Resource("gpt-4".into()).key(repo.namespace_id());
        let table = &r.table;
        async move {
            table
                .scan_all()
                .await
                .into_iter()
                .find(|it| {
                    dynalimit_format::item::key_of(it) == dynalimit_format::item::key_of(&key)
                })
                .expect("the level")
        }
    };
    // The features item's and the level's answers are lost after DynamoDB applied them; the SDK
    // sends both again.
    proxy.clear_requests();
    proxy.lose_next_answer("UpdateItem", 2);
    repo.set_concurrency_limits(None, Some("gpt-4"), &[streams(2)])
        .await
        .unwrap();
    let updates = proxy
        .requests()
        .iter()
        .filter(|q| q.operation == "UpdateItem")
        .count();
    assert_eq!(updates, 4, "two writes, each sent twice");
    let once = level(&repo).await;
    assert_eq!(
        repo.concurrency_limits(None, Some("gpt-4")).await.unwrap(),
        [streams(2)]
    );
    // Written again without faults: the same item.
    repo.set_concurrency_limits(None, Some("gpt-4"), &[streams(2)])
        .await
        .unwrap();
    assert_eq!(level(&repo).await, once);
    let limiter = dynalimit::RateLimiter::new(repo);
    let lease = limiter
        .acquire("acme", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(lease.slots().len(), 1);
    lease.commit().await.unwrap();
}
