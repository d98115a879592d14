//! Refusal reports: a limiter that refuses an acquire because a limit is short writes one
//! item per minute per (entity, resource, limit) in the bucket's shard-0 partition, in the
//! background, whether DynamoDB or the rejection cache refused; nothing while nothing is
//! refused, nor in a namespace where no entity has a refusal alert; the acquire's result is
//! the same; the entity's deletion removes the items.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dynalimit::{Error, Limit, RateLimiter, Reason};
use dynalimit_core::Clock;
use dynalimit_format::item::{Item, get_i64, get_s};

use crate::engine::rig;

/// The refusal items of the table: (PK, SK) → count `n`.
async fn refused(table: &dynalimit_tests::TestTable) -> BTreeMap<(String, String), i64> {
    let items: Vec<Item> = table.scan_all().await;
    items
        .iter()
        .filter(|it| get_s(it, "SK").is_some_and(|sk| sk.starts_with("#REFUSED#")))
        .map(|it| {
            (
                (
                    get_s(it, "PK").unwrap().to_owned(),
                    get_s(it, "SK").unwrap().to_owned(),
                ),
                get_i64(it, "n").unwrap_or(-1),
            )
        })
        .collect()
}

/// One request of an hourly limit of 2, committed when admitted.
async fn acquire(limiter: &RateLimiter) -> Result<(), Error> {
    let lease = limiter
        .acquire("acme", "gpt-4", [("rph", 1)])
        .limits([Limit::per_hour("rph", 2)])
        .await?;
    lease.commit().await?;
    Ok(())
}

#[tokio::test]
async fn refused_acquires_write_one_item_per_minute_per_process() {
    let r = rig().await;
    r.repo
        .set_refusal_alert("acme", "gpt-4", "rph", 5)
        .await
        .unwrap();
    let ns = r.repo.namespace_id().to_owned();
    // 300 ms before a minute starts: minute `m`, then `m + 1` half a second later.
    let now = r.clock.epoch_millis();
    let start = (now / 60_000 + 2) * 60_000 - 300;
    r.clock.set_epoch_millis(start);
    let m = start / 60_000;
    let pk = format!("{ns}/BUCKET#acme#gpt-4#0");
    let sk = |minute: i64| format!("#REFUSED#rph#{minute:010}");

    // Admitted: nothing is reported.
    for _ in 0..2 {
        acquire(&r.limiter).await.expect("admitted");
    }
    r.limiter.settle().await;
    assert!(refused(&r.table).await.is_empty());

    // Refused by DynamoDB: the result is the rejection it always was, and one report.
    for _ in 0..3 {
        match acquire(&r.limiter).await {
            Err(Error::Rejected(rej)) => {
                assert!(matches!(rej.reason(), Reason::Limits));
                assert!(rej.status("rph").is_some_and(|s| s.exceeded));
            }
            other => panic!("refused, not {other:?}"),
        }
    }
    r.limiter.settle().await;
    assert_eq!(
        refused(&r.table).await,
        BTreeMap::from([((pk.clone(), sk(m)), 1)])
    );

    // The next minute, refused by the rejection cache (no request for the acquire): the one
    // request sent is the report of the new minute.
    r.clock.advance(Duration::from_millis(500));
    r.counter.reset();
    for _ in 0..5 {
        assert!(matches!(acquire(&r.limiter).await, Err(Error::Rejected(_))));
    }
    r.limiter.settle().await;
    assert_eq!(
        r.counter.snapshot(),
        BTreeMap::from([("UpdateItem".to_owned(), 1)])
    );
    assert_eq!(
        refused(&r.table).await,
        BTreeMap::from([((pk.clone(), sk(m)), 1), ((pk.clone(), sk(m + 1)), 1)])
    );

    // Another process refused in the same minute: it reports too (the count says two).
    let other = RateLimiter::new(r.repo.clone());
    assert!(matches!(acquire(&other).await, Err(Error::Rejected(_))));
    other.settle().await;
    assert_eq!(refused(&r.table).await[&(pk.clone(), sk(m + 1))], 2);

    // The item is indexed under the entity: its deletion removes it with the buckets.
    let stored = r.table.scan_all().await;
    let item = stored
        .iter()
        .find(|it| get_s(it, "SK") == Some(sk(m).as_str()))
        .expect("the item of minute m");
    assert_eq!(
        get_s(item, "GSI3PK"),
        Some(format!("{ns}/ENTITY#acme").as_str())
    );
    assert_eq!(get_s(item, "GSI4PK"), Some(ns.as_str()));
    assert_eq!(get_i64(item, "ttl"), Some(m * 60 + 7200));
    assert_eq!(
        r.repo
            .refusal_minutes("acme", "gpt-4", "rph", m - 5, m + 5)
            .await
            .unwrap(),
        BTreeSet::from([m, m + 1])
    );
    r.repo.delete_entity("acme").await.unwrap();
    assert!(refused(&r.table).await.is_empty());
}

#[tokio::test]
async fn a_namespace_without_a_refusal_alert_reports_nothing() {
    let r = rig().await;
    for _ in 0..2 {
        acquire(&r.limiter).await.expect("admitted");
    }
    r.counter.reset();
    for _ in 0..5 {
        assert!(matches!(acquire(&r.limiter).await, Err(Error::Rejected(_))));
    }
    r.limiter.settle().await;
    assert!(refused(&r.table).await.is_empty());
    // The refusal, and one read of the namespace's features in the background.
    assert_eq!(
        r.counter.snapshot(),
        BTreeMap::from([("GetItem".to_owned(), 1), ("UpdateItem".to_owned(), 1)])
    );
    // Within the cache's time-to-live the features are not read again.
    r.clock.advance(Duration::from_secs(30));
    r.counter.reset();
    assert!(matches!(acquire(&r.limiter).await, Err(Error::Rejected(_))));
    r.limiter.settle().await;
    assert_eq!(r.counter.snapshot().get("GetItem"), None);
    assert!(refused(&r.table).await.is_empty());
}

#[tokio::test]
async fn a_lost_answer_to_a_report_is_sent_again_and_only_the_count_says_so() {
    let r = rig().await;
    let proxy = dynalimit_tests::fault::FaultProxy::start().await;
    let repo = proxy.repository(&r.table, "default").await;
    let minute = r.clock.epoch_millis() / 60_000;
    // DynamoDB applies the report; its answer is lost; the SDK sends it again.
    proxy.lose_next_answer("UpdateItem", 1);
    repo.report_refusal("acme", "gpt-4", "rph", minute * 60_000)
        .await
        .unwrap();
    let found = refused(&r.table).await;
    assert_eq!(found.len(), 1, "one item: {found:?}");
    assert_eq!(
        found.values().copied().collect::<Vec<_>>(),
        [2],
        "counted twice"
    );
    assert_eq!(
        repo.refusal_minutes("acme", "gpt-4", "rph", minute - 1, minute + 1)
            .await
            .unwrap(),
        BTreeSet::from([minute])
    );
}
