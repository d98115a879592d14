//! The guard of a successful acquisition.

use std::fmt;

use smallvec::SmallVec;

use super::backing::{Backing, InProcess, Settle};
use super::set::{Config, LimitSet, MAX_LIMITS, Plan, Role};
use crate::Error;

/// What a [`LimitSet`] granted: a guard that gives everything back when released or dropped.
///
/// Before release, report the actual usage of every plain rate limit taken (and of the call
/// limit when more than one call was requested) with [`Acquisition::update`]. On release:
/// - resources are given back in full;
/// - a rate limit used less than requested is refunded the difference when its algorithm
///   allows (token bucket, GCRA); a usage above the request is only warned about, never
///   charged;
/// - a rate limit never updated is treated as fully used (no refund), and
///   [`Acquisition::release`] reports it as [`Error::MissingUpdate`] after everything else was
///   given back (dropping the guard logs a warning instead, so it never hides another error).
///
/// The acquisition carries a copy-on-write view of the set's [`Config`].
#[must_use = "dropping an acquisition releases it at once"]
#[repr(C)]
pub struct Acquisition<'a, B: Backing = InProcess> {
    // In this order (hence `repr(C)`): the amounts first and the small fields, where an
    // enclosing `Result` keeps its discriminant, last. Moving the guard out of that `Result`
    // then reads the amounts in the same aligned blocks they were just written in, which the
    // processor forwards from its store buffer; reads straddling two writes would stall.
    plan: Plan,
    /// Usage per entry of `plan`; NaN until updated.
    used: SmallVec<[f64; 4]>,
    set: &'a LimitSet<B>,
    /// Rarely used state, boxed to keep the guard small.
    extra: Option<Box<Extra>>,
    pool_index: Option<u32>,
    ticket: Option<B::Ticket>,
    released: bool,
}

#[derive(Debug, Default)]
struct Extra {
    /// This acquisition's own copy of the config, once edited.
    config: Option<Config>,
    /// Keys already warned about in `update` (at most [`MAX_LIMITS`]).
    warned: Vec<String>,
}

/// One limit held by an [`Acquisition`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held<'a> {
    /// The limit's key.
    pub key: &'a str,
    /// The amount taken.
    pub requested: f64,
    /// The usage reported with [`Acquisition::update`], if any.
    pub used: Option<f64>,
}

impl<'a, B: Backing> Acquisition<'a, B> {
    #[inline]
    pub(crate) fn new(set: &'a LimitSet<B>, plan: Plan, ticket: Option<B::Ticket>) -> Self {
        let used = if plan.len() <= 4 {
            SmallVec::from_buf_and_len([f64::NAN; 4], plan.len())
        } else {
            SmallVec::from_elem(f64::NAN, plan.len())
        };
        Acquisition {
            set,
            plan,
            used,
            ticket,
            released: false,
            pool_index: None,
            extra: None,
        }
    }

    pub(crate) fn with_pool_index(mut self, index: usize) -> Self {
        self.pool_index = u32::try_from(index).ok();
        self
    }

    fn position(&self, key: &str) -> Option<usize> {
        let index = self.set.shared.index_of(key)?;
        self.plan.iter().position(|t| t.index == index)
    }

    /// The limits held, in the order they were taken (requested keys, then auto-included ones).
    pub fn held(&self) -> impl Iterator<Item = Held<'_>> {
        self.plan.iter().zip(&self.used).map(|(take, used)| Held {
            key: &self.set.shared.keys[take.index],
            requested: take.amount,
            used: (!used.is_nan()).then_some(*used),
        })
    }

    /// The amount taken from `key`, or `None` when that limit is not held.
    pub fn requested(&self, key: &str) -> Option<f64> {
        self.position(key).map(|p| self.plan[p].amount)
    }

    /// The usage reported for `key`, if any.
    pub fn used(&self, key: &str) -> Option<f64> {
        self.position(key)
            .map(|p| self.used[p])
            .filter(|u| !u.is_nan())
    }

    /// Whether nothing is held (empty set, or only unknown keys requested).
    pub fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    /// Whether the acquisition was released.
    pub fn is_released(&self) -> bool {
        self.released
    }

    /// The set that granted this acquisition.
    pub fn limit_set(&self) -> &'a LimitSet<B> {
        self.set
    }

    /// The position of the granting set in its LimitPool, when acquired through one.
    pub fn pool_index(&self) -> Option<usize> {
        self.pool_index.map(|i| i as usize)
    }

    /// The granting set's metadata (or this acquisition's edited copy).
    pub fn config(&self) -> &Config {
        self.extra
            .as_ref()
            .and_then(|extra| extra.config.as_ref())
            .unwrap_or(&self.set.shared.config)
    }

    /// This acquisition's own copy of the metadata; editing it never changes the set's.
    pub fn config_mut(&mut self) -> &mut Config {
        let shared = &self.set.shared.config;
        self.extra
            .get_or_insert_with(Box::default)
            .config
            .get_or_insert_with(|| shared.clone())
    }

    /// Reports actual usage. Later updates of a key replace earlier ones. Keys not held are
    /// skipped with a warning (once per key and acquisition, for the first [`MAX_LIMITS`]
    /// such keys); resources need no update and ignore one.
    ///
    /// # Errors
    /// The pairs are applied in order; an invalid one stops the update (earlier pairs stay
    /// recorded): [`Error::AlreadyReleased`] after release,
    /// [`Error::InvalidAmount`] for a negative or non-finite usage,
    /// [`Error::ImplicitCallUsage`] when an implicitly taken call (amount 1) is given a usage
    /// other than 1.
    pub fn update<K, A>(&mut self, usage: impl IntoIterator<Item = (K, A)>) -> Result<(), Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        if self.released {
            return Err(Error::AlreadyReleased);
        }
        for (key, used) in usage {
            let key = key.as_ref();
            let used = used.into();
            let Some(position) = self.position(key) else {
                self.warn_not_held(key);
                continue;
            };
            if !(used.is_finite() && used >= 0.0) {
                return Err(Error::InvalidAmount {
                    key: key.to_owned(),
                    amount: used,
                    reason: "usage cannot be negative (nor infinite or NaN)".to_owned(),
                });
            }
            let take = self.plan[position];
            match self.set.shared.roles[take.index] {
                Role::Resource => continue,
                Role::Call if take.amount == 1.0 && used != 1.0 => {
                    return Err(Error::ImplicitCallUsage {
                        key: key.to_owned(),
                        used,
                    });
                }
                _ if used > take.amount => self.warn_excess(key, used, take),
                _ => {}
            }
            self.used[position] = used;
        }
        Ok(())
    }

    #[cold]
    fn warn_excess(&self, key: &str, used: f64, take: super::backing::Take) {
        let capacity = self.set.limits()[take.index].capacity();
        tracing::warn!(
            key,
            used,
            requested = take.amount,
            capacity,
            "usage {used} of {key:?} exceeds the {requested} requested \
             (capacity {capacity}); the excess is not charged",
            requested = take.amount
        );
    }

    #[cold]
    fn warn_not_held(&mut self, key: &str) {
        let warned = &mut self.extra.get_or_insert_with(Box::default).warned;
        if warned.iter().any(|k| k == key) {
            return;
        }
        if warned.len() < MAX_LIMITS {
            warned.push(key.to_owned());
        }
        tracing::warn!(
            key,
            "update for {key:?} skipped: this acquisition does not hold it; held keys: {:?}",
            self.held().map(|h| h.key).collect::<Vec<_>>()
        );
    }

    /// Gives everything back (see the type's documentation). A second call does nothing.
    ///
    /// # Errors
    /// [`Error::MissingUpdate`] listing, sorted, the limits released without a usage update;
    /// they were charged in full and everything else was given back.
    pub fn release(&mut self) -> Result<(), Error> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let shared = &*self.set.shared;
        let mut settlement: SmallVec<[Settle; 4]> = SmallVec::new();
        let mut missing = 0u64;
        for (take, &used) in self.plan.iter().zip(&self.used) {
            let (index, amount) = (take.index, take.amount);
            match shared.roles[index] {
                Role::Resource => {
                    if amount > 0.0 {
                        settlement.push(Settle::GiveBack { index, amount });
                    }
                }
                Role::Call if amount == 1.0 => {}
                Role::Rate | Role::Call => {
                    if used.is_nan() {
                        missing |= 1 << index;
                    } else if used < amount && shared.refundable & (1 << index) != 0 {
                        settlement.push(Settle::Refund {
                            index,
                            amount: amount - used,
                        });
                    }
                }
            }
        }
        if let Some(ticket) = self.ticket.take() {
            shared.backing.settle(ticket, &settlement);
            shared.queue.wake_head();
        }
        if missing == 0 {
            return Ok(());
        }
        let mut keys: Vec<String> = (0..shared.keys.len())
            .filter(|i| missing & (1 << i) != 0)
            .map(|i| shared.keys[i].clone())
            .collect();
        keys.sort();
        Err(Error::MissingUpdate { keys })
    }
}

impl<B: Backing> Drop for Acquisition<'_, B> {
    fn drop(&mut self) {
        if let Err(error) = self.release() {
            tracing::warn!(%error, "acquisition dropped without a complete usage update");
        }
    }
}

impl<B: Backing> fmt::Debug for Acquisition<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquisition")
            .field("held", &self.held().collect::<Vec<_>>())
            .field("released", &self.released)
            .field("config", self.config())
            .field("pool_index", &self.pool_index)
            .finish()
    }
}
