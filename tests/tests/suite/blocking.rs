//! The blocking API (`dynalimit::blocking`) from plain threads: no async runtime of the
//! caller's, the same semantics as the async types.

use dynalimit::blocking::{RateLimiter, Repository};
use dynalimit::{Error, Limit, NewEntity};

/// A fresh table, set up on a runtime of its own; the blocking API runs on its own.
fn setup() -> (tokio::runtime::Runtime, dynalimit_tests::TestTable) {
    let setup = tokio::runtime::Runtime::new().unwrap();
    let table = setup.block_on(dynalimit_tests::table());
    (setup, table)
}

#[test]
fn a_blocking_limiter_admits_refuses_and_settles_like_the_async_one() {
    let (_setup, table) = setup();
    let repo = Repository::open_with(table.builder().namespace("blocking")).unwrap();
    repo.set_resource_defaults("gpt-4", &[Limit::per_hour("rph", 3)])
        .unwrap();
    let limiter = RateLimiter::new(&repo);
    let first = limiter.acquire("k", "gpt-4", [("rph", 1)]).unwrap();
    assert_eq!(first.consumed()["rph"], 1);
    assert_eq!(first.statuses()[0].available, 2);
    first.commit().unwrap();
    let second = limiter.acquire("k", "gpt-4", [("rph", 2)]).unwrap();
    second.give_back("rph", 1).unwrap();
    second.commit().unwrap();
    // One token left: a request for two is refused, one for one admitted and dropped.
    let refused = limiter.acquire("k", "gpt-4", [("rph", 2)]).unwrap_err();
    assert!(matches!(refused, Error::Rejected(_)), "{refused}");
    drop(limiter.acquire("k", "gpt-4", [("rph", 1)]).unwrap());
    // The dropped lease's rollback runs on the runtime; wait for it before spending again.
    limiter.settle();
    let rolled_back = limiter.acquire("k", "gpt-4", [("rph", 1)]).unwrap();
    rolled_back.rollback().unwrap();
    drop(limiter);
    // The dropped lease was rolled back before the limiter went: one token is still there.
    let limiter = RateLimiter::new(&repo);
    assert_eq!(limiter.available("k", "gpt-4", &[]).unwrap()["rph"], 1);
    let explicit = limiter
        .acquire_with(
            "other",
            "gpt-4",
            [("rpm", 5)],
            &[Limit::per_minute("rpm", 5)],
        )
        .unwrap();
    explicit.commit().unwrap();
}

#[test]
fn a_blocking_repository_reads_and_writes_configuration_and_entities() {
    let (_setup, table) = setup();
    let repo = Repository::open_with(table.builder().namespace("blocking")).unwrap();
    let created = repo.create_entity(NewEntity::new("proj")).unwrap();
    assert_eq!(repo.get_entity("proj").unwrap(), Some(created));
    repo.set_limits("proj", "gpt-4", &[Limit::per_minute("rpm", 7)])
        .unwrap();
    let resolved = repo.resolve_limits("proj", "gpt-4").unwrap();
    assert_eq!(resolved.limits, [Limit::per_minute("rpm", 7)]);
    assert!(repo.delete_limits("proj", "gpt-4").unwrap());
    assert_eq!(repo.get_limits("proj", "gpt-4").unwrap(), None);
    let events = repo.audit_events("proj", 10, None).unwrap().events;
    assert_eq!(events.len(), 3, "created, limits set, limits deleted");
    // Connecting never writes: an unknown namespace is an error.
    let missing = Repository::connect_with(table.builder().namespace("nowhere"));
    assert!(missing.is_err());
}
