//! LimitPool: several LimitSets (API keys, accounts, regions) behind one acquire.
//!
//! Each acquire picks a set (round robin with a per-worker offset, or at random). When the
//! picked set cannot admit the request now, the following sets are tried in order before
//! anybody waits; only when none can admit does the call wait, on the first set (in that
//! order) for which the request is valid. The acquisition tells which set granted it
//! ([`Acquisition::pool_index`]) and carries that set's config.

use std::fmt;
use std::ops::Index;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;

use crate::Error;
use crate::limitset::Plan;
use crate::limitset::{Acquisition, Backing, InProcess, LimitSet, LimitStats, SyncBacking};

/// How a [`LimitPool`] picks the set to try first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LoadBalancing {
    /// Set `(worker_index + picks so far) % len`.
    #[default]
    RoundRobin,
    /// A uniformly random set per pick.
    Random,
}

impl LoadBalancing {
    /// `"RoundRobin"` or `"Random"`.
    pub fn name(self) -> &'static str {
        match self {
            LoadBalancing::RoundRobin => "RoundRobin",
            LoadBalancing::Random => "Random",
        }
    }
}

impl fmt::Display for LoadBalancing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LoadBalancing {
    type Err = Error;

    /// Accepts `round_robin` / `roundrobin` / `RoundRobin` and `random`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
            "roundrobin" => Ok(LoadBalancing::RoundRobin),
            "random" => Ok(LoadBalancing::Random),
            _ => Err(Error::UnknownBalancing { name: s.to_owned() }),
        }
    }
}

/// Several [`LimitSet`]s behind one acquire: see the `pool` module documentation.
///
/// ```
/// use dynalimit::limitset::{LimitSet, ResourceLimit};
/// use dynalimit::pool::LimitPool;
///
/// let key = |name: &str| {
///     LimitSet::builder()
///         .limit(ResourceLimit::new("slots", 1).unwrap())
///         .config("api_key", name)
///         .build()
///         .unwrap()
/// };
/// let pool = LimitPool::new(vec![key("a"), key("b")])?;
/// let first = pool.try_acquire([("slots", 1)])?;
/// let second = pool.try_acquire([("slots", 1)])?;
/// assert_eq!((first.config()["api_key"].as_str(), second.config()["api_key"].as_str()), ("a", "b"));
/// // both keys busy: a third try is refused
/// assert!(pool.try_acquire([("slots", 1)]).unwrap_err().is_rejected());
/// # Ok::<(), dynalimit::Error>(())
/// ```
pub struct LimitPool<B: Backing = InProcess> {
    sets: Vec<LimitSet<B>>,
    balancing: LoadBalancing,
    worker_index: usize,
    dispatched: AtomicUsize,
    /// SplitMix64 state for random picks.
    random: AtomicU64,
}

/// The SplitMix64 increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a well-mixed 64-bit value from a counter.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl<B: Backing> fmt::Debug for LimitPool<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitPool")
            .field("sets", &self.sets.len())
            .field("balancing", &self.balancing)
            .field("worker_index", &self.worker_index)
            .field("dispatched", &self.total_dispatched())
            .finish()
    }
}

/// A snapshot of a [`LimitPool`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Number of sets.
    pub num_limit_sets: usize,
    /// The balancing algorithm.
    pub load_balancing: LoadBalancing,
    /// The round-robin offset.
    pub worker_index: usize,
    /// Picks made so far (the offset not included).
    pub total_dispatched: usize,
    /// Every set's stats, in pool order.
    pub limit_sets: Vec<Vec<LimitStats>>,
}

impl<B: Backing> LimitPool<B> {
    /// A round-robin pool with offset 0.
    ///
    /// # Errors
    /// [`Error::EmptyPool`] without any set.
    pub fn new(sets: Vec<LimitSet<B>>) -> Result<Self, Error> {
        if sets.is_empty() {
            return Err(Error::EmptyPool);
        }
        Ok(LimitPool {
            sets,
            balancing: LoadBalancing::RoundRobin,
            worker_index: 0,
            dispatched: AtomicUsize::new(0),
            random: AtomicU64::new(rand::rng().random()),
        })
    }

    /// The same pool with another balancing algorithm.
    #[must_use]
    pub fn with_balancing(mut self, balancing: LoadBalancing) -> Self {
        self.balancing = balancing;
        self
    }

    /// The same pool with a round-robin offset: worker `w` of a fleet starts at set
    /// `w % len`, so workers spread over the sets from their first pick.
    #[must_use]
    pub fn with_worker_index(mut self, worker_index: usize) -> Self {
        self.worker_index = worker_index;
        self
    }

    /// The same pool with a fixed seed for random picks (reproducible sequences in tests).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        self.random.store(seed, Ordering::Relaxed);
        self
    }

    /// The balancing algorithm.
    pub fn balancing(&self) -> LoadBalancing {
        self.balancing
    }

    /// The round-robin offset.
    pub fn worker_index(&self) -> usize {
        self.worker_index
    }

    /// Picks made so far.
    pub fn total_dispatched(&self) -> usize {
        self.dispatched.load(Ordering::Relaxed)
    }

    /// Number of sets.
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Always false: a pool holds at least one set.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// The sets, in pool order.
    pub fn sets(&self) -> &[LimitSet<B>] {
        &self.sets
    }

    /// The set at `index`; a negative index counts from the end (`-1` is the last set).
    pub fn get(&self, index: isize) -> Option<&LimitSet<B>> {
        let len = self.sets.len() as isize;
        let index = if index < 0 { index + len } else { index };
        usize::try_from(index).ok().and_then(|i| self.sets.get(i))
    }

    /// Picks the set to try first and counts the pick.
    pub fn select(&self) -> usize {
        let pick = self.dispatched.fetch_add(1, Ordering::Relaxed);
        let len = self.sets.len();
        match self.balancing {
            LoadBalancing::RoundRobin => self.worker_index.wrapping_add(pick) % len,
            LoadBalancing::Random => {
                let x = mix(self.random.fetch_add(GAMMA, Ordering::Relaxed));
                // Lemire's multiply-shift: uniform in 0..len without a division
                ((u128::from(x) * len as u128) >> 64) as usize
            }
        }
    }

    fn order(&self) -> impl Iterator<Item = usize> + use<B> {
        let start = self.select();
        let len = self.sets.len();
        (start..len).chain(0..start)
    }

    /// The sets in trying order (the pick first), each with the request planned for it.
    fn planned<'r, R, K, A>(
        &'r self,
        request: &'r R,
    ) -> impl Iterator<Item = (usize, Result<Plan, Error>)> + 'r
    where
        R: IntoIterator<Item = (K, A)> + Clone,
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.order()
            .map(move |i| (i, self.sets[i].plan(request.clone())))
    }

    /// Acquires through the pool, waiting asynchronously as long as needed.
    ///
    /// # Errors
    /// The first set's request error when no set accepts the request as valid.
    pub async fn acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)> + Clone,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.acquire_async(request, None).await
    }

    /// Acquires through the pool, waiting asynchronously at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`]; request errors as for [`LimitPool::acquire`].
    pub async fn acquire_timeout<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)> + Clone,
        timeout: Duration,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        self.acquire_async(request, Some(timeout)).await
    }

    async fn acquire_async<R, K, A>(
        &self,
        request: R,
        timeout: Option<Duration>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        R: IntoIterator<Item = (K, A)> + Clone,
        K: AsRef<str>,
        A: Into<f64>,
    {
        let mut fallback = Fallback::default();
        for (i, plan) in self.planned(&request) {
            let Some(plan) = fallback.valid(plan) else {
                continue;
            };
            if let Some(acquisition) = self.sets[i].attempt(&plan).await? {
                return Ok(acquisition.with_pool_index(i));
            }
            fallback.refused(i, plan);
        }
        let (i, plan) = fallback.wait_on()?;
        Ok(self.sets[i]
            .wait_async(plan, timeout)
            .await?
            .with_pool_index(i))
    }
}

impl<B: SyncBacking> LimitPool<B> {
    /// Tries the picked set, then the following ones; never waits.
    ///
    /// # Errors
    /// The first set's request error when no set accepts the request as valid; a refusal by
    /// every set is [`Error::Rejected`] with the first refusal.
    pub fn try_acquire<K, A>(
        &self,
        request: impl IntoIterator<Item = (K, A)> + Clone,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        K: AsRef<str>,
        A: Into<f64>,
    {
        let mut fallback = Fallback::default();
        let mut first_refusal = None;
        for (i, plan) in self.planned(&request) {
            let Some(mut plan) = fallback.valid(plan) else {
                continue;
            };
            match self.sets[i].try_plan(&mut plan)? {
                Ok(acquisition) => return Ok(acquisition.with_pool_index(i)),
                Err(rejected) => {
                    first_refusal.get_or_insert(rejected);
                }
            }
        }
        match first_refusal {
            Some(rejected) => Err(Error::Rejected(rejected)),
            None => Err(fallback.wait_on().expect_err("no set refused")),
        }
    }

    /// Acquires through the pool, parking the thread at most `timeout` (none: as long as
    /// needed). The form a service calls is [`crate::blocking::LimitPool`].
    pub(crate) fn acquire_parked<R, K, A>(
        &self,
        request: R,
        timeout: Option<Duration>,
    ) -> Result<Acquisition<'_, B>, Error>
    where
        R: IntoIterator<Item = (K, A)> + Clone,
        K: AsRef<str>,
        A: Into<f64>,
    {
        let mut fallback = Fallback::default();
        for (i, plan) in self.planned(&request) {
            let Some(mut plan) = fallback.valid(plan) else {
                continue;
            };
            if let Ok(acquisition) = self.sets[i].try_plan(&mut plan)? {
                return Ok(acquisition.with_pool_index(i));
            }
            fallback.refused(i, plan);
        }
        let (i, plan) = fallback.wait_on()?;
        Ok(self.sets[i]
            .wait_blocking(plan, timeout)?
            .with_pool_index(i))
    }

    /// A snapshot of the pool and of every set.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            num_limit_sets: self.sets.len(),
            load_balancing: self.balancing,
            worker_index: self.worker_index,
            total_dispatched: self.total_dispatched(),
            limit_sets: self.sets.iter().map(LimitSet::stats).collect(),
        }
    }
}

/// What a pass over the sets leaves when none admitted the request: the first set that
/// refused (to wait on) and the first request error (when no set accepted the request).
#[derive(Default)]
struct Fallback {
    first_error: Option<Error>,
    wait_on: Option<(usize, Plan)>,
}

impl Fallback {
    fn valid(&mut self, plan: Result<Plan, Error>) -> Option<Plan> {
        plan.map_err(|error| {
            self.first_error.get_or_insert(error);
        })
        .ok()
    }

    fn refused(&mut self, index: usize, plan: Plan) {
        self.wait_on.get_or_insert((index, plan));
    }

    fn wait_on(self) -> Result<(usize, Plan), Error> {
        self.wait_on
            .ok_or_else(|| self.first_error.unwrap_or(Error::EmptyPool))
    }
}

impl<B: Backing> Index<usize> for LimitPool<B> {
    type Output = LimitSet<B>;

    fn index(&self, index: usize) -> &LimitSet<B> {
        &self.sets[index]
    }
}
