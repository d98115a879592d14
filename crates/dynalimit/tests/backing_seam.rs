//! The Backing seam: a LimitSet and a LimitPool over a backing that only offers the async
//! `take` (as a distributed one does), with a ticket that must be settled exactly once.

mod support;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dynalimit::Error;
use dynalimit::limitset::{
    Backing, Config, InProcess, LimitSet, Outcome, SetLimit, Settle, SyncBacking, Take,
};
use dynalimit::pool::LimitPool;
use dynalimit::time::{Clock, ManualClock};
use support::*;

/// An async-only backing that stands in for a remote store: every take crosses an await
/// point and hands out a numbered lease; settlements are recorded.
#[derive(Debug)]
struct Remote {
    store: InProcess,
    leases: AtomicU64,
    settled: Mutex<Vec<(u64, Vec<Settle>)>>,
}

#[derive(Debug)]
struct Lease(u64);

impl Remote {
    fn new(limits: Vec<SetLimit>) -> Self {
        Remote {
            store: InProcess::new(limits, Duration::ZERO),
            leases: AtomicU64::new(0),
            settled: Mutex::new(Vec::new()),
        }
    }
}

impl Backing for Remote {
    type Ticket = Lease;

    fn limits(&self) -> &[SetLimit] {
        self.store.limits()
    }

    async fn take(&self, plan: &[Take], now: Duration) -> Result<Outcome<Lease>, Error> {
        tokio::task::yield_now().await; // the round trip
        Ok(match self.store.take_now(plan, now)? {
            Outcome::Granted(()) => {
                Outcome::Granted(Lease(self.leases.fetch_add(1, Ordering::SeqCst)))
            }
            Outcome::Rejected { retry_at } => Outcome::Rejected { retry_at },
        })
    }

    fn settle(&self, lease: Lease, settlement: &[Settle]) {
        self.store.settle((), settlement);
        self.settled
            .lock()
            .unwrap()
            .push((lease.0, settlement.to_vec()));
    }
}

fn remote_set(entity: &str, timer: &ManualClock) -> LimitSet<Remote> {
    let limits = vec![SetLimit::from(token_bucket("rpm", 3.0, 60.0))];
    let mut config = Config::new();
    config.insert("entity".into(), entity.into());
    LimitSet::from_backing(Remote::new(limits), config, Arc::new(timer.clone())).unwrap()
}

#[tokio::test]
async fn async_only_backing_serves_the_same_api_and_settles_each_lease_once() {
    let timer = ManualClock::default();
    let set = remote_set("alpha", &timer);
    let mut acquisition = set.acquire([("rpm", 2)]).await.unwrap();
    assert_eq!(acquisition.config()["entity"], "alpha");
    acquisition.update([("rpm", 1)]).unwrap();
    acquisition.release().unwrap();
    acquisition.release().unwrap();
    drop(acquisition);
    let settled = set.backing().settled.lock().unwrap().clone();
    assert_eq!(
        settled,
        [(
            0,
            vec![Settle::Refund {
                index: 0,
                amount: 1.0
            }]
        )]
    );
    // request validation happens in the front end, before the backing is asked
    assert!(matches!(
        set.acquire([("rpm", 4)]).await,
        Err(Error::ExceedsCapacity { .. })
    ));
    // a refused take waits for the computed instant on the set's timer
    let set = Arc::new(set);
    let waiter = {
        let set = set.clone();
        tokio::spawn(async move {
            let mut acquisition = set.acquire([("rpm", 3)]).await.unwrap();
            acquisition.update([("rpm", 3)]).unwrap();
            set.now()
        })
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished());
    // 2 units are left (3 - 2 taken + 1 refunded); one more comes back after 20 s
    timer.advance(Duration::from_secs(19));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished());
    timer.advance(Duration::from_secs(1));
    assert_eq!(waiter.await.unwrap(), Duration::from_secs(20));
}

#[tokio::test]
async fn pool_over_three_async_backed_sets_spreads_and_falls_through() {
    let timer = ManualClock::default();
    let pool = LimitPool::new(vec![
        remote_set("alpha", &timer),
        remote_set("beta", &timer),
        remote_set("gamma", &timer),
    ])
    .unwrap();
    let mut per_entity = std::collections::BTreeMap::new();
    for _ in 0..9 {
        let mut acquisition = pool.acquire([("rpm", 1)]).await.unwrap();
        acquisition.update([("rpm", 1)]).unwrap();
        *per_entity
            .entry(acquisition.config()["entity"].clone())
            .or_insert(0) += 1;
    }
    assert_eq!(
        per_entity.into_iter().collect::<Vec<_>>(),
        [("alpha".into(), 3), ("beta".into(), 3), ("gamma".into(), 3)]
    );
    // everything exhausted: a zero timeout fails after trying every set
    assert!(matches!(
        pool.acquire_timeout([("rpm", 1)], Duration::ZERO).await,
        Err(Error::Timeout { .. })
    ));
    // 20 s later each has one unit; exhaust alpha and gamma directly: picks fall through
    timer.advance(Duration::from_secs(20));
    for i in [0, 2] {
        let mut direct = pool[i].acquire([("rpm", 1)]).await.unwrap();
        direct.update([("rpm", 1)]).unwrap();
    }
    let mut acquisition = pool.acquire([("rpm", 1)]).await.unwrap();
    acquisition.update([("rpm", 1)]).unwrap();
    assert_eq!(acquisition.config()["entity"], "beta");
    assert_eq!(timer.monotonic(), Duration::from_secs(20));
}
