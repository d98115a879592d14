//! The LLM gateway's cascade: per-key `rpm` on the key, a `tpm` budget on its project, each
//! stored for its own entity. Each bucket is written with the consumed names it declares, so
//! a warm acquire is one request per bucket, an adjustment reaches every bucket that declares
//! its limit, and a consumed name no bucket of the cascade declares is refused before any
//! write.

use dynalimit::{Error, Limit, RateLimiter};
use dynalimit_format::item::get_i64;
use dynalimit_repository::NewEntity;

use crate::engine::{Rig, rig};

const R: &str = "gpt-4";

fn rpm(n: i64) -> Limit {
    Limit::per_minute("rpm", n)
}

fn tpm(n: i64) -> Limit {
    Limit::per_minute("tpm", n)
}

/// Project `project` and key `key` under it (cascading), with the given limits stored at
/// entity level on `R` (none stored when empty).
async fn family(r: &Rig, key: (&str, &[Limit]), project: (&str, &[Limit])) {
    r.repo
        .create_entity(NewEntity::new(project.0))
        .await
        .unwrap();
    r.repo
        .create_entity(NewEntity::new(key.0).parent(project.0).cascade(true))
        .await
        .unwrap();
    for (entity, limits) in [key, project] {
        if !limits.is_empty() {
            r.repo.set_limits(entity, R, limits).await.unwrap();
        }
    }
}

/// The requests of one gateway request (acquire 1 rpm and an estimate of 500 tpm, adjust tpm
/// to `real`, commit): those of the acquire, those of the commit, and how many of the
/// acquire's were in flight together.
async fn request(r: &Rig, limiter: &RateLimiter, key: &str, real: i64) -> (u64, u64, usize) {
    r.counter.reset();
    let lease = limiter
        .acquire(key, R, [("rpm", 1), ("tpm", 500)])
        .await
        .unwrap();
    let (acquire, together) = (r.counter.total(), r.counter.max_in_flight());
    lease.adjust("tpm", real - 500).unwrap();
    r.counter.reset();
    lease.commit().await.unwrap();
    (acquire, r.counter.total(), together)
}

/// Two gateway requests by `key` (137, then 300 tokens really used); the second, warm, takes
/// `(acquire, commit)` requests, the acquire's in flight together. Then each `(entity,
/// limit, count)` of `counts` holds: the whole tokens counted on the entity's bucket on `R`
/// (`None`: the bucket does not carry the limit).
async fn twice(r: &Rig, key: &str, requests: (u64, u64), counts: &[(&str, &str, Option<i64>)]) {
    request(r, &r.limiter, key, 137).await;
    let warm = request(r, &r.limiter, key, 300).await;
    assert_eq!(warm, (requests.0, requests.1, 2), "{key}");
    for (entity, limit, count) in counts {
        assert_eq!(tc_on(r, entity, R, limit).await, *count, "{entity} {limit}");
    }
}

/// Σ `b_{limit}_tc` over the shards of `entity`'s bucket on `resource`, whole tokens; `None`
/// when no shard carries the limit.
async fn tc_on(r: &Rig, entity: &str, resource: &str, limit: &str) -> Option<i64> {
    let marker = format!("#{resource}#");
    let counts: Vec<i64> = r
        .buckets(entity)
        .await
        .iter()
        .filter(|i| {
            i.get("PK")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|pk| pk.contains(&marker))
        })
        .filter_map(|i| get_i64(i, &format!("b_{limit}_tc")))
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum::<i64>() / 1000)
}

#[tokio::test]
async fn the_gateway_cascade_writes_each_bucket_once_and_commits_the_real_token_count() {
    let r = rig().await;
    family(&r, ("key", &[rpm(100)]), ("proj", &[tpm(100_000)])).await;
    let first = request(&r, &r.limiter, "key", 137).await;
    let mut warm = Vec::new();
    for real in [420, 0, 900] {
        warm.push(request(&r, &r.limiter, "key", real).await);
    }
    println!("gateway cascade (acquire, commit, in flight): first {first:?}, warm {warm:?}");
    for w in &warm {
        assert_eq!(
            *w,
            (2, 1, 2),
            "a warm acquire writes the key and the project at once; the commit the project's tpm"
        );
    }
    // The project's tpm counts what was really used; each bucket carries only its limit.
    assert_eq!(tc_on(&r, "proj", R, "tpm").await, Some(137 + 420 + 900));
    assert_eq!(tc_on(&r, "key", R, "rpm").await, Some(4));
    assert_eq!(tc_on(&r, "key", R, "tpm").await, None);
    assert_eq!(tc_on(&r, "proj", R, "rpm").await, None);
    let left = r.limiter.available("proj", R, &[]).await.unwrap();
    assert_eq!(
        left["tpm"],
        100_000 - 1457,
        "the clock is frozen: no refill"
    );

    // A process that starts cold learns the shape on its first acquire.
    let fresh = RateLimiter::new(r.repo.clone());
    let cold = request(&r, &fresh, "key", 10).await;
    let again = request(&r, &fresh, "key", 10).await;
    println!("a new limiter: first {cold:?}, then {again:?}");
    assert_eq!(again, (2, 1, 2));
    assert_eq!(tc_on(&r, "proj", R, "tpm").await, Some(1477));
}

#[tokio::test]
async fn a_limit_both_buckets_declare_is_debited_and_adjusted_on_both() {
    let r = rig().await;
    // The key keeps its own tpm as well; the project only tpm.
    family(
        &r,
        ("key", &[rpm(100), tpm(5_000)]),
        ("proj", &[tpm(100_000)]),
    )
    .await;
    // The commit corrects tpm on both buckets.
    let counts = [
        ("key", "tpm", Some(437)),
        ("proj", "tpm", Some(437)),
        ("proj", "rpm", None),
    ];
    twice(&r, "key", (2, 2), &counts).await;

    // The project keeps rpm too: both carry rpm, only the project tpm.
    family(
        &r,
        ("key2", &[rpm(100)]),
        ("proj2", &[rpm(1_000), tpm(100_000)]),
    )
    .await;
    let counts = [
        ("proj2", "rpm", Some(2)),
        ("key2", "rpm", Some(2)),
        ("proj2", "tpm", Some(437)),
        ("key2", "tpm", None),
    ];
    twice(&r, "key2", (2, 1), &counts).await;
}

#[tokio::test]
async fn a_limit_newly_stored_for_the_key_is_debited_from_its_next_acquire() {
    let r = rig().await;
    family(&r, ("key", &[rpm(100)]), ("proj", &[tpm(100_000)])).await;
    request(&r, &r.limiter, "key", 137).await;
    request(&r, &r.limiter, "key", 137).await;
    // The key gets a tpm budget of its own: stored at entity level, which stamps its buckets,
    // so the next write takes the slow path, seeds the limit and debits it.
    r.repo
        .set_limits("key", R, &[rpm(100), tpm(5_000)])
        .await
        .unwrap();
    request(&r, &r.limiter, "key", 300).await;
    let counts = [
        ("key", "tpm", Some(300 + 137 + 300)),
        ("proj", "tpm", Some(137 + 137 + 300 + 137 + 300)),
    ];
    twice(&r, "key", (2, 2), &counts).await;
    let left = r.limiter.available("key", R, &[]).await.unwrap();
    assert_eq!(left["tpm"], 5_000 - 737);
}

#[tokio::test]
async fn a_name_no_bucket_of_the_cascade_declares_is_refused_before_any_write() {
    let r = rig().await;
    family(&r, ("key", &[rpm(100)]), ("proj", &[tpm(100_000)])).await;
    let unknown = |limiter: &RateLimiter| {
        let limiter = limiter.clone();
        async move {
            limiter
                .acquire("key", R, [("rpm", 1), ("tpm", 500), ("images", 1)])
                .await
        }
    };
    // Cold: neither bucket exists yet, and none is created.
    let err = unknown(&r.limiter).await.unwrap_err();
    assert!(
        matches!(&err, Error::UnknownLimit { key } if key == "images"),
        "{err}"
    );
    assert!(r.buckets("key").await.is_empty());
    assert!(r.buckets("proj").await.is_empty());
    // Warm: both buckets known, nothing written on either.
    request(&r, &r.limiter, "key", 137).await;
    let err = unknown(&r.limiter).await.unwrap_err();
    assert!(
        matches!(&err, Error::UnknownLimit { key } if key == "images"),
        "{err}"
    );
    r.limiter.settle().await;
    assert_eq!(tc_on(&r, "key", R, "rpm").await, Some(1));
    assert_eq!(tc_on(&r, "proj", R, "tpm").await, Some(137));
    // A lease adjusts what some bucket debited, and refuses what none did.
    let lease = r
        .limiter
        .acquire("key", R, [("rpm", 1), ("tpm", 500)])
        .await
        .unwrap();
    assert!(matches!(
        lease.adjust("images", 1),
        Err(Error::UnknownLimit { key }) if key == "images"
    ));
    assert!(lease.adjust("rpm", 1).is_ok() && lease.adjust("tpm", -100).is_ok());
    assert_eq!(
        lease.consumed(),
        [("rpm".to_owned(), 2), ("tpm".to_owned(), 400)].into()
    );
    lease.commit().await.unwrap();
    assert_eq!(tc_on(&r, "key", R, "rpm").await, Some(3));
    assert_eq!(tc_on(&r, "proj", R, "tpm").await, Some(537));

    // Neither declares tpm: refused, on a fresh limiter and on a warm one.
    family(&r, ("key2", &[rpm(100)]), ("proj2", &[rpm(1_000)])).await;
    for limiter in [RateLimiter::new(r.repo.clone()), r.limiter.clone()] {
        let err = limiter
            .acquire("key2", R, [("rpm", 1), ("tpm", 500)])
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::UnknownLimit { key } if key == "tpm"),
            "{err}"
        );
        limiter
            .acquire("key2", R, [("rpm", 1)])
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
    }
    r.limiter.settle().await;
    assert_eq!(tc_on(&r, "key2", R, "rpm").await, Some(2));
    assert_eq!(tc_on(&r, "proj2", R, "rpm").await, Some(2));
}

#[tokio::test]
async fn explicit_limits_and_configuration_at_every_level_keep_the_fast_path() {
    let r = rig().await;
    // Explicit limits are every bucket's: both carry rpm and tpm.
    family(&r, ("k1", &[]), ("p1", &[])).await;
    let explicit = [rpm(100), tpm(100_000)];
    for real in [137, 300] {
        r.counter.reset();
        let lease = r
            .limiter
            .acquire("k1", R, [("rpm", 1), ("tpm", 500)])
            .limits(explicit.clone())
            .await
            .unwrap();
        let acquire = r.counter.total();
        lease.adjust("tpm", real - 500).unwrap();
        lease.commit().await.unwrap();
        if real == 300 {
            assert_eq!(acquire, 2);
        }
    }
    for entity in ["k1", "p1"] {
        assert_eq!(tc_on(&r, entity, R, "tpm").await, Some(437), "{entity}");
    }

    // Entity limits on the key, the resource's defaults for the project.
    r.repo
        .set_resource_defaults(R, &[rpm(1_000), tpm(100_000)])
        .await
        .unwrap();
    family(&r, ("k2", &[rpm(10)]), ("p2", &[])).await;
    let counts = [
        ("k2", "tpm", None),
        ("p2", "tpm", Some(437)),
        ("p2", "rpm", Some(2)),
    ];
    twice(&r, "k2", (2, 1), &counts).await;

    // The resource's defaults for the key, entity limits on the project.
    r.repo.set_resource_defaults(R, &[rpm(10)]).await.unwrap();
    family(&r, ("k3", &[]), ("p3", &[tpm(100_000)])).await;
    let counts = [
        ("k3", "rpm", Some(2)),
        ("p3", "tpm", Some(437)),
        ("p3", "rpm", None),
    ];
    twice(&r, "k3", (2, 1), &counts).await;
}

#[tokio::test]
async fn a_multi_resource_acquire_shares_each_resource_between_the_buckets() {
    let r = rig().await;
    family(&r, ("key", &[rpm(100)]), ("proj", &[tpm(100_000)])).await;
    for (entity, limit) in [("key", rpm(100)), ("proj", tpm(100_000))] {
        r.repo.set_limits(entity, "embed", &[limit]).await.unwrap();
    }
    let both = || async {
        r.counter.reset();
        let lease = r
            .limiter
            .acquire("key", R, [("rpm", 1), ("tpm", 500)])
            .also("embed", [("rpm", 1), ("tpm", 50)])
            .await
            .unwrap();
        let acquire = r.counter.total();
        lease.adjust("tpm", -363).unwrap();
        lease.resource("embed").unwrap().adjust("tpm", -20).unwrap();
        r.counter.reset();
        lease.commit().await.unwrap();
        (acquire, r.counter.total())
    };
    both().await;
    assert_eq!(
        both().await,
        (4, 2),
        "two buckets per resource; the project's tpm of each corrected"
    );
    assert_eq!(tc_on(&r, "proj", R, "tpm").await, Some(274));
    assert_eq!(tc_on(&r, "proj", "embed", "tpm").await, Some(60));
    assert_eq!(tc_on(&r, "key", "embed", "rpm").await, Some(2));
    assert_eq!(tc_on(&r, "key", "embed", "tpm").await, None);
    // A name neither bucket of one resource declares refuses the whole acquire.
    let err = r
        .limiter
        .acquire("key", R, [("rpm", 1)])
        .also("embed", [("rpm", 1), ("images", 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownLimit { key } if key == "images"),
        "{err}"
    );
    r.limiter.settle().await;
    assert_eq!(tc_on(&r, "key", R, "rpm").await, Some(2), "given back");
}
