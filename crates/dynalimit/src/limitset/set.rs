//! The LimitSet front end: request planning, validation, the three ways to acquire, stats.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use smallvec::SmallVec;

use super::backing::{Backing, InProcess, SyncBacking, Take};
use super::limit::SetLimit;
use super::queue::WaitQueue;
use super::stats::LimitStats;
use crate::{Error, Rejection};
use dynalimit_core::bounded::BoundedMap;
use dynalimit_core::time::{Clock, SystemClock};

/// Free-form metadata of a LimitSet (account, region, endpoint, …), visible on every
/// acquisition it grants.
pub type Config = BTreeMap<String, String>;

/// An empty request: takes every call and resource limit once (and is refused with
/// [`Error::AmountRequired`] when the set has plain rate limits).
pub const NO_AMOUNTS: [(&str, f64); 0] = [];

/// The most limits one LimitSet can hold.
pub const MAX_LIMITS: usize = 64;

/// Unknown keys are warned about once per key among the last this many of them (a set asked
/// for ever new unknown keys warns again about a key it forgot).
pub const MAX_WARNED_KEYS: usize = 1_024;

/// An unknown key not asked for this long may be warned about again.
const WARNED_IDLE: Duration = Duration::from_secs(3600);

/// A plan: the amounts to take, in request order then auto-included limits.
pub(crate) type Plan = SmallVec<[Take; 4]>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Rate,
    Call,
    Resource,
}

pub(crate) struct Shared<B> {
    pub(crate) backing: B,
    pub(crate) keys: Vec<String>,
    /// Per key, its [`Fingerprint`]: a lookup of a key up to 16 bytes long compares integers
    /// only.
    lookup: Vec<Fingerprint>,
    pub(crate) roles: Vec<Role>,
    capacities: Vec<f64>,
    /// Limits counting whole units only.
    whole: u64,
    /// Call and resource limits: taken once when a request does not name them.
    auto: u64,
    /// Rate and call limits whose algorithm can refund.
    pub(crate) refundable: u64,
    first_rate: Option<usize>,
    /// Call and resource limits whose capacity is below 1, so that taking them once fails.
    auto_too_small: u64,
    pub(crate) config: Config,
    /// Unknown keys already warned about (true once warned).
    warned: Mutex<BoundedMap<String, bool>>,
    pub(crate) queue: WaitQueue,
    pub(crate) clock: Arc<dyn Clock>,
}

impl<B: Backing> Shared<B> {
    #[inline]
    pub(crate) fn index_of(&self, key: &str) -> Option<usize> {
        let wanted = Fingerprint::of(key);
        self.lookup
            .iter()
            .zip(&self.keys)
            .position(|(&f, k)| f == wanted && (key.len() <= Fingerprint::EXACT || k == key))
    }

    /// Whether `amount` may be taken from the limit at `index` (see [`LimitSet`]'s request
    /// rules).
    #[inline]
    fn check_amount(&self, index: usize, amount: f64) -> Result<(), Error> {
        let whole_only = self.whole & (1 << index) != 0;
        if amount.is_finite()
            && amount >= 0.0
            && amount <= self.capacities[index]
            && (!whole_only || is_whole(amount))
        {
            Ok(())
        } else {
            Err(self.amount_error(index, amount))
        }
    }

    /// Why [`Shared::check_amount`] refused `amount`.
    #[cold]
    #[inline(never)]
    fn amount_error(&self, index: usize, amount: f64) -> Error {
        let invalid = |reason: &str| Error::InvalidAmount {
            key: self.keys[index].clone(),
            amount,
            reason: reason.to_owned(),
        };
        if !(amount.is_finite() && amount >= 0.0) {
            return invalid("amounts must be finite and not negative");
        }
        if self.whole & (1 << index) != 0 && !is_whole(amount) {
            return invalid(
                "this limit counts whole units: the amount must be an integer \
                 (use a TokenBucket or GCRA rate limit for fractional amounts)",
            );
        }
        Error::ExceedsCapacity {
            key: self.keys[index].clone(),
            requested: amount,
            capacity: self.capacities[index],
        }
    }

    fn warn_unknown(&self, key: &str) {
        let now = self.clock.monotonic();
        let first_time = self
            .warned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(
                key,
                now,
                || (key.to_owned(), false),
                |warned| !std::mem::replace(warned, true),
            );
        if first_time {
            tracing::warn!(
                key,
                "unknown limit key {key:?} ignored; available keys: {:?}",
                self.keys
            );
        }
    }
}

/// Several limits acquired together, atomically: either every requested amount is taken, or
/// nothing is.
///
/// # Requests
/// A request is a list of `(key, amount)` pairs. Listed keys take the given amounts; every
/// call and resource limit not listed is taken once; plain rate limits not listed are not
/// taken. An empty request ([`NO_AMOUNTS`]) is refused when the set has plain rate limits.
/// Unknown keys are ignored with a warning, once per key and set (among the last
/// [`MAX_WARNED_KEYS`] unknown keys asked for). Every final amount is
/// checked before any waiting: negative, non-finite or (for counting limits) fractional
/// amounts are [`Error::InvalidAmount`], amounts above a capacity are
/// [`Error::ExceedsCapacity`]. Zero is a valid amount (a plain rate limit taken with zero
/// still needs its update). A key listed twice takes its last amount.
///
/// # Acquiring
/// - [`LimitSet::try_acquire`] never waits; a refusal is [`Error::Rejected`] with a
///   [`Rejection`] value.
/// - [`crate::blocking::LimitSet`]'s `acquire` / `acquire_timeout` park the thread.
/// - [`LimitSet::acquire`] / [`LimitSet::acquire_timeout`] are async.
///
/// Waiters are served first come, first served: only the oldest waiter tries, and it sleeps
/// until the instant its limits compute (or until a release wakes it); while anybody waits,
/// `try_acquire` is refused so it cannot overtake them.
///
/// # Releasing
/// The [`Acquisition`](super::Acquisition) is a guard: give the actual usage of each rate
/// limit with [`update`](super::Acquisition::update), then
/// [`release`](super::Acquisition::release) it (or drop it). Resources always come back;
/// unused rate units are refunded where the algorithm allows (token bucket, GCRA).
///
/// ```
/// use dynalimit::limitset::{Algorithm, CallLimit, LimitSet, RateLimit, ResourceLimit};
///
/// let set = LimitSet::builder()
///     .limit(CallLimit::new(100, "second")?)
///     .limit(RateLimit::new("tokens", 1000, "minute")?.with_algorithm(Algorithm::TokenBucket))
///     .limit(ResourceLimit::new("connections", 4)?)
///     .config("region", "eu-west-1")
///     .build()?;
///
/// let mut acquisition = set.try_acquire([("tokens", 100)])?;
/// assert_eq!(acquisition.requested("connections"), Some(1.0)); // auto-included
/// assert_eq!(acquisition.config()["region"], "eu-west-1");
/// acquisition.update([("tokens", 60)])?;
/// acquisition.release()?; // 40 tokens refunded, the connection given back
/// # Ok::<(), dynalimit::Error>(())
/// ```
pub struct LimitSet<B: Backing = InProcess> {
    pub(crate) shared: Arc<Shared<B>>,
}

impl<B: Backing> Clone for LimitSet<B> {
    fn clone(&self) -> Self {
        LimitSet {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: Backing> fmt::Debug for LimitSet<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitSet")
            .field("keys", &self.shared.keys)
            .field("config", &self.shared.config)
            .field("backing", &self.shared.backing)
            .finish()
    }
}

/// Builds an in-process [`LimitSet`]; see [`LimitSet::builder`].
#[derive(Debug, Default)]
#[must_use]
pub struct LimitSetBuilder {
    pub(super) limits: Vec<SetLimit>,
    pub(super) config: Config,
    pub(super) clock: Option<Arc<dyn Clock>>,
}

impl LimitSetBuilder {
    /// Adds a limit.
    pub fn limit(mut self, limit: impl Into<SetLimit>) -> Self {
        self.limits.push(limit.into());
        self
    }

    /// Adds several limits.
    pub fn limits<L: Into<SetLimit>>(mut self, limits: impl IntoIterator<Item = L>) -> Self {
        self.limits.extend(limits.into_iter().map(Into::into));
        self
    }

    /// Adds a metadata entry, copied into every acquisition.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.insert(key.into(), value.into());
        self
    }

    /// The time source ([`SystemClock`] by default; [`ManualClock`](crate::time::ManualClock) in
    /// tests).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The set, with every limit full.
    ///
    /// # Errors
    /// [`Error::DuplicateKey`] when two limits share a key, [`Error::TooManyLimits`] beyond
    /// [`MAX_LIMITS`].
    pub fn build(self) -> Result<LimitSet, Error> {
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        check_keys(&self.limits)?;
        let backing = InProcess::new(self.limits, clock.monotonic());
        LimitSet::from_backing(backing, self.config, clock)
    }
}

fn check_keys(limits: &[SetLimit]) -> Result<(), Error> {
    if limits.len() > MAX_LIMITS {
        return Err(Error::TooManyLimits {
            max: MAX_LIMITS,
            given: limits.len(),
        });
    }
    let mut seen = HashSet::new();
    for limit in limits {
        if !seen.insert(limit.key()) {
            return Err(Error::DuplicateKey {
                key: limit.key().to_owned(),
            });
        }
    }
    Ok(())
}

impl LimitSet {
    /// A builder for an in-process set.
    pub fn builder() -> LimitSetBuilder {
        LimitSetBuilder::default()
    }
}

impl<B: Backing> LimitSet<B> {
    /// A set over any backing (the in-process one, or a distributed one).
    ///
    /// # Errors
    /// As for [`LimitSetBuilder::build`].
    pub fn from_backing(backing: B, config: Config, clock: Arc<dyn Clock>) -> Result<Self, Error> {
        let limits = backing.limits();
        check_keys(limits)?;
        let (mut whole, mut auto, mut refundable, mut first_rate) = (0u64, 0u64, 0u64, None);
        let mut auto_too_small = 0u64;
        let mut roles = Vec::with_capacity(limits.len());
        for (i, limit) in limits.iter().enumerate() {
            let bit = 1u64 << i;
            let role = match limit {
                SetLimit::Rate(_) => Role::Rate,
                SetLimit::Call(_) => Role::Call,
                _ => Role::Resource,
            };
            if limit.whole_amounts_only() {
                whole |= bit;
            }
            if role != Role::Rate {
                auto |= bit;
                if limit.capacity() < 1.0 {
                    auto_too_small |= bit;
                }
            } else if first_rate.is_none() {
                first_rate = Some(i);
            }
            if limit.as_rate().is_some_and(|r| r.algorithm().refunds()) {
                refundable |= bit;
            }
            roles.push(role);
        }
        let keys: Vec<String> = limits.iter().map(|l| l.key().to_owned()).collect();
        let lookup = keys.iter().map(|k| Fingerprint::of(k)).collect();
        let capacities = limits.iter().map(SetLimit::capacity).collect();
        Ok(LimitSet {
            shared: Arc::new(Shared {
                backing,
                keys,
                lookup,
                roles,
                capacities,
                whole,
                auto,
                refundable,
                first_rate,
                auto_too_small,
                config,
                warned: Mutex::new(BoundedMap::new(MAX_WARNED_KEYS, WARNED_IDLE)),
                queue: WaitQueue::default(),
                clock,
            }),
        })
    }

    /// Whether `other` is a handle on this same set (clones share one set).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The limits, in definition order.
    pub fn limits(&self) -> &[SetLimit] {
        self.shared.backing.limits()
    }

    /// The limit with this key.
    ///
    /// # Errors
    /// [`Error::UnknownLimit`] naming the key.
    pub fn limit(&self, key: &str) -> Result<&SetLimit, Error> {
        self.shared
            .index_of(key)
            .map(|i| &self.limits()[i])
            .ok_or_else(|| Error::UnknownLimit {
                key: key.to_owned(),
            })
    }

    /// The keys, in definition order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.shared.keys.iter().map(String::as_str)
    }

    /// The number of limits.
    pub fn len(&self) -> usize {
        self.shared.keys.len()
    }

    /// Whether the set has no limit (every acquire then succeeds at once, holding nothing).
    pub fn is_empty(&self) -> bool {
        self.shared.keys.is_empty()
    }

    /// The set's metadata.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The backing.
    pub fn backing(&self) -> &B {
        &self.shared.backing
    }

    /// The clock's monotonic reading.
    pub fn now(&self) -> Duration {
        self.shared.clock.monotonic()
    }

    /// The clock's monotonic reading, or zero when `plan` holds only resources (which need no time).
    #[inline]
    pub(super) fn now_for(&self, plan: &Plan) -> Duration {
        if plan
            .iter()
            .all(|t| self.shared.roles[t.index] == Role::Resource)
        {
            Duration::ZERO
        } else {
            self.shared.clock.monotonic()
        }
    }

    /// Turns a request into validated amounts (see the type's documentation).
    pub(crate) fn plan<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
    ) -> Result<Plan, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let mut plan = Plan::new();
        self.plan_into(request, &mut plan)?;
        Ok(plan)
    }

    /// [`LimitSet::plan`] into an empty `plan` owned by the caller (so that the amounts just
    /// written are not copied right away).
    #[inline]
    pub(crate) fn plan_into<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)>,
        plan: &mut Plan,
    ) -> Result<(), Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let shared = &*self.shared;
        let mut seen = 0u64;
        let mut any = false;
        for (key, amount) in request {
            any = true;
            let key = key.as_ref();
            let amount = amount.into();
            match shared.index_of(key) {
                Some(index) => {
                    shared.check_amount(index, amount)?;
                    let bit = 1u64 << index;
                    if seen & bit == 0 {
                        seen |= bit;
                        plan.push(Take { index, amount });
                    } else if let Some(take) = plan.iter_mut().find(|t| t.index == index) {
                        take.amount = amount;
                    }
                }
                None => shared.warn_unknown(key),
            }
        }
        if !any && let Some(first) = shared.first_rate {
            return Err(Error::AmountRequired {
                key: shared.keys[first].clone(),
            });
        }
        let mut missing = shared.auto & !seen;
        while missing != 0 {
            let index = missing.trailing_zeros() as usize;
            missing &= missing - 1;
            if shared.auto_too_small & (1 << index) != 0 {
                shared.check_amount(index, 1.0)?;
            }
            plan.push(Take { index, amount: 1.0 });
        }
        Ok(())
    }

    pub(crate) fn rejected(&self, plan: &Plan, retry_at: Option<Duration>) -> Rejection {
        let now = self.shared.clock.monotonic();
        Rejection::exhausted(
            plan.iter()
                .map(|t| (self.shared.keys[t.index].clone(), t.amount))
                .collect(),
            retry_at.map(|at| at.saturating_sub(now)),
        )
    }
}

impl<B: SyncBacking> LimitSet<B> {
    /// A snapshot of every limit, in definition order (time-based state refreshed first).
    pub fn stats(&self) -> Vec<LimitStats> {
        self.shared.backing.stats(self.shared.clock.monotonic())
    }

    /// A snapshot of the limit with this key.
    ///
    /// # Errors
    /// [`Error::UnknownLimit`] naming the key.
    pub fn limit_stats(&self, key: &str) -> Result<LimitStats, Error> {
        let index = self
            .shared
            .index_of(key)
            .ok_or_else(|| Error::UnknownLimit {
                key: key.to_owned(),
            })?;
        Ok(self.stats().swap_remove(index))
    }
}

/// Whether a finite, non-negative `amount` is a whole number (without a libm call).
fn is_whole(amount: f64) -> bool {
    // every f64 from 2^53 up is a whole number
    amount >= 9_007_199_254_740_992.0 || (amount as u64) as f64 == amount
}

/// A key's length and up to sixteen of its bytes as integers. Two keys of at most
/// [`Fingerprint::EXACT`] bytes are equal exactly when their fingerprints are; longer keys with
/// equal fingerprints still need a full comparison.
///
/// The bytes are read with whole-word loads (never assembled in a buffer, whose wide read
/// right after narrow writes would stall the processor's store forwarding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    head: u64,
    tail: u64,
}

impl Fingerprint {
    /// Keys up to this length are identified by their fingerprint alone.
    const EXACT: usize = 16;

    #[inline]
    fn of(key: &str) -> Self {
        let bytes = key.as_bytes();
        let len = bytes.len();
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let half = |at: usize| {
            u64::from(u32::from_le_bytes(
                bytes[at..at + 4].try_into().unwrap_or([0; 4]),
            ))
        };
        // The two reads overlap or touch, so together they cover every byte of a key up to
        // 16 bytes (8 for the half-words; the three single bytes cover up to 3).
        let (head, tail) = match len {
            8.. => (word(0), word(len - 8)),
            4..8 => (half(0), half(len - 4)),
            1..4 => (
                u64::from(bytes[0])
                    | u64::from(bytes[len / 2]) << 8
                    | u64::from(bytes[len - 1]) << 16,
                0,
            ),
            0 => (0, 0),
        };
        Fingerprint { len, head, tail }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::limitset::ResourceLimit;

    proptest! {
        #[test]
        fn fingerprints_of_short_keys_are_equal_exactly_when_the_keys_are(
            a in "[a-c_]{0,16}",
            b in "[a-c_]{0,16}",
        ) {
            prop_assert_eq!(Fingerprint::of(&a) == Fingerprint::of(&b), a == b);
        }
    }

    #[test]
    fn a_million_unknown_keys_are_warned_about_within_the_bound() {
        let clock = dynalimit_core::ManualClock::new(0);
        let set = LimitSet::builder()
            .limit(ResourceLimit::new("connections", 10).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
        let warned = |key: &str| {
            let map = set.shared.warned.lock().unwrap();
            map.get(key).copied()
        };
        set.shared.warn_unknown("typo");
        assert_eq!(warned("typo"), Some(true));
        let mut most = 0;
        for i in 0..1_000_000 {
            set.shared.warn_unknown(&format!("key-{i}"));
            most = most.max(set.shared.warned.lock().unwrap().len());
        }
        assert!(most <= MAX_WARNED_KEYS, "{most} keys");
        assert_eq!(warned("typo"), None, "forgotten under the flood");
        // A key not asked for is forgotten at the second turn of the generations after it
        // (a turn comes with a new key once the idle time has passed).
        set.shared.warn_unknown("typo");
        clock.advance(WARNED_IDLE * 2);
        set.shared.warn_unknown("other");
        assert_eq!(warned("typo"), Some(true), "one turn is not enough");
        clock.advance(WARNED_IDLE);
        set.shared.warn_unknown("third");
        assert_eq!(warned("typo"), None);
    }

    #[test]
    fn long_keys_with_the_same_ends_are_told_apart() {
        let keys = ["requests_in_the_window", "requests_of_the_window"];
        assert_eq!(Fingerprint::of(keys[0]), Fingerprint::of(keys[1]));
        let set = LimitSet::builder()
            .limits(keys.map(|k| ResourceLimit::new(k, 1).unwrap()))
            .build()
            .unwrap();
        assert_eq!(set.shared.index_of(keys[0]), Some(0));
        assert_eq!(set.shared.index_of(keys[1]), Some(1));
        assert_eq!(set.shared.index_of("requests_at_the_window"), None);
        assert_eq!(set.shared.index_of(""), None);
    }
}
