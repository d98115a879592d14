//! Where a LimitSet's counters live: the seam between the front end and the state.

use std::fmt;
use std::future::{Future, ready};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use dynalimit_core::algorithms::{RateCounter, ResourceCounter};

use super::limit::SetLimit;
use super::stats::LimitStats;
use crate::Error;

/// One amount of a plan: take `amount` from the limit at `index` (definition order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Take {
    /// Index of the limit in [`Backing::limits`].
    pub index: usize,
    /// Amount to take; validated: finite, non-negative, at most the capacity, whole where the
    /// limit counts whole units.
    pub amount: f64,
}

/// One line of a settlement made on release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settle {
    /// Give `amount` held units back to the resource at `index`.
    GiveBack {
        /// Index of the limit.
        index: usize,
        /// Units to return.
        amount: f64,
    },
    /// Refund `amount` unused units to the rate limit at `index`, as far as its algorithm
    /// allows.
    Refund {
        /// Index of the limit.
        index: usize,
        /// Units not used.
        amount: f64,
    },
}

/// What a [`Backing`] answers to a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// Every amount was taken; the ticket is handed back on settlement.
    Granted(T),
    /// Nothing was taken: the LimitSet answers with a [`Rejection`](crate::Rejection).
    Rejected {
        /// The earliest instant (on the LimitSet's clock) at which the plan could fit if
        /// nothing else happened; `None` when only a release can help (a held resource).
        retry_at: Option<Duration>,
    },
}

/// Where a LimitSet's counters live: the seam between the front end (requests, validation,
/// waiting, guards) and the state.
///
/// The front end ([`LimitSet`](super::LimitSet)) turns a request into a plan of
/// `(limit index, amount)` pairs, validated against the limits' capacities, and hands it to a
/// [`Backing`], which takes every amount or none. On release it hands back a settlement: units
/// to give back (resources) and unused units to refund (rate limits whose algorithm allows it).
///
/// - [`InProcess`] keeps one mutex over the in-process algorithms of
///   [`dynalimit_core::algorithms`]; it is also a [`SyncBacking`], so it serves the
///   non-blocking and thread-blocking acquires as well as the async ones.
/// - A distributed backing implements [`Backing`] only: its `take` is the DynamoDB acquire of an
///   entity+resource bucket (one conditional write for every limit), its ticket is the lease,
///   and its `settle` writes the refunds and gives the lease back. The LimitSet, its
///   acquisitions and the LimitPool are generic over the backing, so such a set is used through
///   the same `acquire` / `acquire_timeout` / `update` / `release` calls.
///
/// A backing is plugged in with [`LimitSet::from_backing`](super::LimitSet::from_backing).
/// Everything the front end does (request planning, auto-inclusion, capacity and amount
/// validation, unknown-key warnings, FIFO waiting on the set's [`Clock`](crate::time::Clock),
/// update rules, missing-update reporting) is the same for every backing. The async acquires
/// (set and pool) work with any backing; `try_acquire`, the thread-blocking acquires and
/// `stats` need a [`SyncBacking`]. `settle` is synchronous because it also runs from `Drop`:
/// a backing whose settlement needs I/O starts it in the background (as the lease of the
/// DynamoDB acquire does) and returns.
pub trait Backing: Send + Sync + fmt::Debug + 'static {
    /// What a successful take holds until it is settled (`()` in process; a lease for a
    /// distributed backing).
    type Ticket: Send + Sync + fmt::Debug + 'static;

    /// The limits, in definition order; plans refer to them by index.
    fn limits(&self) -> &[SetLimit];

    /// Takes every amount of `plan` at `now`, or nothing.
    ///
    /// # Errors
    /// Infrastructure failures only (a refusal is an [`Outcome`]).
    fn take(
        &self,
        plan: &[Take],
        now: Duration,
    ) -> impl Future<Output = Result<Outcome<Self::Ticket>, Error>> + Send;

    /// Settles a granted take: gives back and refunds as listed. Must not block.
    fn settle(&self, ticket: Self::Ticket, settlement: &[Settle]);
}

/// A backing that can answer at once, without I/O: serves `try_acquire`, the thread-blocking
/// acquires and stats.
pub trait SyncBacking: Backing {
    /// [`Backing::take`] without the future.
    ///
    /// # Errors
    /// As for [`Backing::take`].
    fn take_now(&self, plan: &[Take], now: Duration) -> Result<Outcome<Self::Ticket>, Error>;

    /// A snapshot of every limit at `now`, in definition order.
    fn stats(&self, now: Duration) -> Vec<LimitStats>;
}

#[derive(Debug)]
enum Counter {
    Rate(RateCounter),
    Resource(ResourceCounter),
}

impl Counter {
    #[inline]
    fn fits(&mut self, amount: f64, now: Duration) -> bool {
        match self {
            Counter::Rate(rate) => rate.fits(amount, now),
            Counter::Resource(resource) => resource.fits(amount as u64),
        }
    }
}

/// The in-process backing: one mutex over the limits' algorithm states. Check-all then
/// take-all happens under that mutex, so a set's acquisition is atomic.
#[derive(Debug)]
pub struct InProcess {
    limits: Vec<SetLimit>,
    counters: Mutex<Vec<Counter>>,
}

impl InProcess {
    /// Fresh (full) counters for `limits`, created at `now`.
    pub fn new(limits: Vec<SetLimit>, now: Duration) -> Self {
        let counters = limits
            .iter()
            .map(|limit| match limit {
                SetLimit::Resource(resource) => {
                    Counter::Resource(ResourceCounter::new(resource.capacity()))
                }
                other => {
                    let rate = other.as_rate().expect("rate or call limit");
                    Counter::Rate(RateCounter::new(
                        rate.algorithm(),
                        rate.capacity(),
                        rate.window(),
                        now,
                    ))
                }
            })
            .collect();
        InProcess {
            limits,
            counters: Mutex::new(counters),
        }
    }

    #[inline]
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Counter>> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Backing for InProcess {
    type Ticket = ();

    fn limits(&self) -> &[SetLimit] {
        &self.limits
    }

    fn take(
        &self,
        plan: &[Take],
        now: Duration,
    ) -> impl Future<Output = Result<Outcome<()>, Error>> + Send {
        ready(self.take_now(plan, now))
    }

    #[inline]
    fn settle(&self, (): (), settlement: &[Settle]) {
        if settlement.is_empty() {
            return;
        }
        let mut counters = self.lock();
        for line in settlement {
            match *line {
                Settle::GiveBack { index, amount } => {
                    if let Counter::Resource(resource) = &mut counters[index] {
                        resource.give_back(amount as u64);
                    }
                }
                Settle::Refund { index, amount } => {
                    if let Counter::Rate(rate) = &mut counters[index] {
                        rate.refund(amount);
                    }
                }
            }
        }
    }
}

impl SyncBacking for InProcess {
    #[inline]
    fn take_now(&self, plan: &[Take], now: Duration) -> Result<Outcome<()>, Error> {
        let mut counters = self.lock();
        if plan
            .iter()
            .all(|take| counters[take.index].fits(take.amount, now))
        {
            for take in plan {
                match &mut counters[take.index] {
                    Counter::Rate(rate) => rate.take(take.amount, now),
                    Counter::Resource(resource) => resource.take(take.amount as u64),
                }
            }
            return Ok(Outcome::Granted(()));
        }
        // Rejected: the plan fits no earlier than the latest of the time-based limits; a full
        // resource waits for a release, which wakes the queue.
        let mut retry_at: Option<Duration> = None;
        for take in plan {
            if let Counter::Rate(rate) = &mut counters[take.index]
                && let Some(at) = rate.ready_at(take.amount, now)
                && at > now
            {
                retry_at = Some(retry_at.map_or(at, |r| r.max(at)));
            }
        }
        Ok(Outcome::Rejected { retry_at })
    }

    fn stats(&self, now: Duration) -> Vec<LimitStats> {
        let mut counters = self.lock();
        self.limits
            .iter()
            .zip(counters.iter_mut())
            .map(|(limit, counter)| match counter {
                Counter::Rate(rate) => LimitStats::Rate {
                    key: limit.key().to_owned(),
                    call_limit: matches!(limit, SetLimit::Call(_)),
                    stats: rate.stats(now),
                },
                Counter::Resource(resource) => LimitStats::Resource {
                    key: limit.key().to_owned(),
                    capacity: resource.capacity(),
                    current_usage: resource.usage(),
                    available: resource.available(),
                    utilization: resource.utilization(),
                },
            })
            .collect()
    }
}
