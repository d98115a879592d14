//! The per-scope pause, its waits and its slow start.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::time::{Clock, TokioClock};
use dynalimit_core::CoreError;
use dynalimit_core::bounded::BoundedMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use super::store::{MAX_SCOPES, PauseStore, SCOPE_IDLE};
use crate::Error;
use crate::rejection::Rejection;

/// The pause in force on a scope: how long is left, and until when on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    retry_after: Duration,
    until_epoch_ms: i64,
}

impl Pause {
    /// Time left until the deadline.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The deadline, in wall-clock milliseconds since the Unix epoch.
    pub fn until_epoch_ms(&self) -> i64 {
        self.until_epoch_ms
    }
}

impl From<Pause> for Rejection {
    fn from(p: Pause) -> Rejection {
        Rejection::paused(p.until_epoch_ms, p.retry_after, None)
    }
}

#[derive(Debug, Clone)]
struct Config {
    max_pause: Duration,
    base: Duration,
    cap: Duration,
    quiet_period: Duration,
    max_jitter: Duration,
    slow_start_initial: u32,
    slow_start_steps: u32,
    slow_start_step: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_pause: Duration::from_secs(3600),
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            quiet_period: Duration::from_secs(60),
            max_jitter: Duration::from_secs(1),
            slow_start_initial: 1,
            slow_start_steps: 6,
            slow_start_step: Duration::from_millis(250),
        }
    }
}

#[derive(Debug, Default)]
struct ScopeState {
    /// Exponential-backoff exponent of the current episode.
    episode: u32,
    /// Deadline of the latest pause (monotonic).
    deadline: Option<Duration>,
    /// Length of the latest pause, for the jitter bound.
    length: Duration,
    /// Callers admitted since the latest deadline (slow-start slots handed out).
    admitted: u64,
    /// Pauses that started while the scope was open.
    incidents: u64,
}

#[derive(Debug)]
struct Scope {
    tx: watch::Sender<Option<Duration>>,
    state: Mutex<ScopeState>,
    /// Until when (monotonic nanoseconds) the scope's pause, slow start or quiet period runs:
    /// forgetting it before then would change what the gate decides.
    busy_until: AtomicU64,
}

impl Scope {
    fn state(&self) -> MutexGuard<'_, ScopeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the gate must keep `scope` at `now`: someone waits on it, or it is busy.
    fn in_use(scope: &Arc<Scope>, now: Duration) -> bool {
        Arc::strong_count(scope) > 1 || scope.busy_until.load(Ordering::Relaxed) > nanos(now)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

struct Inner {
    clock: Arc<dyn Clock>,
    cfg: Config,
    scopes: Mutex<BoundedMap<String, Arc<Scope>>>,
    store: Option<Arc<dyn PauseStore>>,
    rng: Mutex<StdRng>,
}

/// A cooperative backoff gate: one pause per scope, shared by every caller of the scope.
/// Cloning is cheap and shares the gate.
///
/// Waits sleep on the gate's clock ([`Clock::sleep_until`]); the default
/// [`TokioClock`](crate::time::TokioClock) follows tokio's timer, including in paused-time
/// tests.
#[derive(Clone)]
pub struct Backoff {
    inner: Arc<Inner>,
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("config", &self.inner.cfg)
            .field("store", &self.inner.store)
            .finish_non_exhaustive()
    }
}

fn random_fraction(rng: &Mutex<StdRng>) -> f64 {
    rng.lock().unwrap_or_else(PoisonError::into_inner).random()
}

impl Backoff {
    /// A builder with the defaults: pauses capped at 1 h; without a retry-after, 1 s doubling up
    /// to 60 s, reset after 60 s of quiet; jitter up to 1 s (and up to a tenth of the pause);
    /// slow start 1 caller, doubling every 250 ms for 6 steps.
    pub fn builder() -> BackoffBuilder {
        BackoffBuilder::default()
    }

    fn scopes(&self) -> MutexGuard<'_, BoundedMap<String, Arc<Scope>>> {
        self.inner
            .scopes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The scope `name`, made when it is new (a use).
    fn scope(&self, name: &str) -> Arc<Scope> {
        let now = self.now();
        let make = || {
            let (tx, _) = watch::channel(None);
            let scope = Scope {
                tx,
                state: Mutex::new(ScopeState::default()),
                busy_until: AtomicU64::new(0),
            };
            (name.to_owned(), Arc::new(scope))
        };
        self.scopes()
            .get_or_insert_with(name, now, make, |s| Arc::clone(s))
    }

    /// The scope `name` if the gate remembers it; a scope it does not is open, with no slow
    /// start, and nothing is made for it.
    fn find(&self, name: &str) -> Option<Arc<Scope>> {
        self.scopes().get(name).cloned()
    }

    fn now(&self) -> Duration {
        self.inner.clock.monotonic()
    }

    fn paused(&self, remaining: Duration) -> Pause {
        let ms = i64::try_from(remaining.as_millis()).unwrap_or(i64::MAX);
        // Round the wall deadline up so a reader never resumes before the local deadline.
        let ceil = if remaining.subsec_nanos().is_multiple_of(1_000_000) {
            0
        } else {
            1
        };
        Pause {
            retry_after: remaining,
            until_epoch_ms: self
                .inner
                .clock
                .epoch_millis()
                .saturating_add(ms)
                .saturating_add(ceil),
        }
    }

    /// Max-merges a pause of `length` from now; returns the time left until the merged deadline.
    fn merge(&self, scope: &Scope, st: &mut ScopeState, length: Duration) -> Duration {
        let now = self.now();
        let length = length.min(self.inner.cfg.max_pause);
        let new = now + length;
        let current = *scope.tx.borrow();
        let active = current.is_some_and(|d| d > now);
        if current.is_none_or(|c| new > c) {
            if !active {
                st.incidents += 1;
            }
            st.deadline = Some(new);
            st.length = length;
            st.admitted = 0;
            let cfg = &self.inner.cfg;
            let after = cfg
                .slow_start_step
                .saturating_mul(cfg.slow_start_steps)
                .max(cfg.quiet_period);
            scope
                .busy_until
                .store(nanos(new.saturating_add(after)), Ordering::Relaxed);
            scope.tx.send_replace(Some(new));
            new - now
        } else {
            current.map_or(Duration::ZERO, |c| c.saturating_sub(now))
        }
    }

    /// Pauses `scope` for `retry_after` from now (capped by the maximum pause), or, without a
    /// retry-after, for the next exponential backoff step with jitter. Never shortens a pause
    /// already in force.
    pub fn pause(&self, scope: &str, retry_after: Option<Duration>) -> Pause {
        let scope = self.scope(scope);
        let cfg = &self.inner.cfg;
        let mut st = scope.state();
        let now = self.now();
        let quiet = st
            .deadline
            .is_none_or(|d| now.saturating_sub(d) > cfg.quiet_period);
        let open = st.deadline.is_none_or(|d| d <= now);
        if quiet && open {
            st.episode = 0;
        }
        let length = retry_after.unwrap_or_else(|| {
            let exp = cfg
                .base
                .saturating_mul(1u32.checked_shl(st.episode).unwrap_or(u32::MAX))
                .min(cfg.cap);
            st.episode = st.episode.saturating_add(1);
            exp.mul_f64(0.5 + 0.5 * random_fraction(&self.inner.rng))
        });
        let remaining = self.merge(&scope, &mut st, length);
        drop(st);
        tracing::debug!(?remaining, "backoff gate paused");
        self.paused(remaining)
    }

    /// Merges a deadline read from a shared stamp (wall-clock epoch milliseconds). A stamp in
    /// the past changes nothing. Returns the pause now in force, if any.
    pub fn observe(&self, scope: &str, until_epoch_ms: i64) -> Option<Pause> {
        let remaining = until_epoch_ms.saturating_sub(self.inner.clock.epoch_millis());
        if let Ok(ms) = u64::try_from(remaining)
            && ms > 0
        {
            let s = self.scope(scope);
            let mut st = s.state();
            self.merge(&s, &mut st, Duration::from_millis(ms));
            drop(st);
            return self.pause_in_force(&s);
        }
        self.find(scope).and_then(|s| self.pause_in_force(&s))
    }

    /// Pauses locally like [`Backoff::pause`] and publishes the deadline to the shared store
    /// (when one is configured), merging back whatever later deadline the store holds.
    ///
    /// # Errors
    /// The store's error; the local pause is in force regardless.
    pub async fn report(&self, scope: &str, retry_after: Option<Duration>) -> Result<Pause, Error> {
        let paused = self.pause(scope, retry_after);
        if let Some(store) = &self.inner.store {
            let stored = store.publish(scope, paused.until_epoch_ms).await?;
            return Ok(self.observe(scope, stored).unwrap_or(paused));
        }
        Ok(paused)
    }

    /// Reads the shared stamp of `scope` and merges it. Returns the pause now in force, if any.
    ///
    /// # Errors
    /// The store's error.
    pub async fn refresh(&self, scope: &str) -> Result<Option<Pause>, Error> {
        if let Some(store) = &self.inner.store
            && let Some(stamp) = store.load(scope).await?
        {
            return Ok(self.observe(scope, stamp));
        }
        Ok(self.find(scope).and_then(|s| self.pause_in_force(&s)))
    }

    /// `Ok` when `scope` is open now, `Err` with the time left while it is paused. Does not wait
    /// and does not take a slow-start slot.
    ///
    /// # Errors
    /// A [`Rejection`] ([`Reason::Paused`](crate::Reason::Paused)) while the deadline has not
    /// passed.
    pub fn check(&self, scope: &str) -> Result<(), Rejection> {
        match self.find(scope).and_then(|s| self.pause_in_force(&s)) {
            Some(p) => Err(p.into()),
            None => Ok(()),
        }
    }

    /// The pause in force on `scope` now, if any.
    fn pause_in_force(&self, scope: &Scope) -> Option<Pause> {
        let deadline = *scope.tx.borrow();
        let now = self.now();
        match deadline {
            Some(d) if d > now => Some(self.paused(d - now)),
            _ => None,
        }
    }

    /// Pauses that started while `scope` was open (extensions of a running pause not counted),
    /// since the gate last forgot the scope (see [`SCOPE_IDLE`]).
    pub fn incidents(&self, scope: &str) -> u64 {
        self.find(scope).map_or(0, |s| s.state().incidents)
    }

    /// How many scopes the gate remembers (at most [`MAX_SCOPES`]).
    pub fn scope_count(&self) -> usize {
        self.scopes().len()
    }

    /// When `scope` may next be called: `None` if open now.
    fn slot(&self, scope: &Scope, now: Duration) -> Option<Duration> {
        let cfg = &self.inner.cfg;
        let mut st = scope.state();
        let resume = st.deadline?;
        let step = cfg.slow_start_step;
        if now >= resume + step.saturating_mul(cfg.slow_start_steps) {
            return None;
        }
        let n = st.admitted;
        st.admitted += 1;
        // Step k admits initial × 2^k callers: slot n falls in step floor(log2(n / initial + 1)).
        let k = (n / u64::from(cfg.slow_start_initial.max(1)) + 1).ilog2();
        if k >= cfg.slow_start_steps {
            return None;
        }
        let jitter_bound = cfg.max_jitter.min(st.length / 10);
        drop(st);
        let jitter = jitter_bound.mul_f64(random_fraction(&self.inner.rng));
        Some(resume + step * k + jitter)
    }

    /// Waits until `scope` is open, then through the slow start. Returns at once when the scope
    /// is open and no slow start is running.
    pub async fn wait(&self, scope: &str) {
        let Some(scope) = self.find(scope) else {
            return;
        };
        let mut rx = scope.tx.subscribe();
        let mut release: Option<Duration> = None;
        loop {
            let deadline = *rx.borrow_and_update();
            let now = self.now();
            let target = match deadline {
                Some(d) if d > now => {
                    release = None;
                    d
                }
                _ => {
                    if release.is_none() {
                        release = self.slot(&scope, now).or(Some(Duration::ZERO));
                    }
                    match release {
                        Some(r) if r > now => r,
                        _ => return,
                    }
                }
            };
            tokio::select! {
                () = self.inner.clock.sleep_until(target) => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Like [`Backoff::wait`] but gives up at once when the pause outlasts `budget`, or when
    /// `budget` runs out while waiting.
    ///
    /// # Errors
    /// A [`Rejection`] ([`Reason::Paused`](crate::Reason::Paused)) with the time left.
    pub async fn wait_timeout(&self, scope: &str, budget: Duration) -> Result<(), Rejection> {
        if let Some(p) = self.find(scope).and_then(|s| self.pause_in_force(&s))
            && p.retry_after > budget
        {
            return Err(p.into());
        }
        let deadline = self.inner.clock.sleep_until(self.now() + budget);
        tokio::select! {
            biased;
            () = self.wait(scope) => Ok(()),
            () = deadline => Err(self
                .check(scope)
                .err()
                .unwrap_or_else(|| self.paused(Duration::ZERO).into())),
        }
    }
}

/// Builds a [`Backoff`] gate.
#[must_use]
#[derive(Default)]
pub struct BackoffBuilder {
    cfg: Config,
    clock: Option<Arc<dyn Clock>>,
    store: Option<Arc<dyn PauseStore>>,
    seed: Option<u64>,
}

impl fmt::Debug for BackoffBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackoffBuilder")
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl BackoffBuilder {
    /// Longest pause accepted from a retry-after or a shared stamp (default 1 h).
    pub fn max_pause(mut self, max: Duration) -> Self {
        self.cfg.max_pause = max;
        self
    }

    /// Exponential backoff without a retry-after: `base`, doubling up to `cap`, restarting
    /// after `quiet_period` without a pause (defaults 1 s, 60 s, 60 s).
    pub fn exponential(mut self, base: Duration, cap: Duration, quiet_period: Duration) -> Self {
        self.cfg.base = base;
        self.cfg.cap = cap;
        self.cfg.quiet_period = quiet_period;
        self
    }

    /// Upper bound of the random delay added on resume (default 1 s; never more than a tenth
    /// of the pause).
    pub fn max_jitter(mut self, max: Duration) -> Self {
        self.cfg.max_jitter = max;
        self
    }

    /// Slow start after a pause: `initial` callers in the first `step`, doubling each step, for
    /// `steps` steps (defaults 1, 250 ms, 6). `steps = 0` turns it off.
    pub fn slow_start(mut self, initial: u32, step: Duration, steps: u32) -> Self {
        self.cfg.slow_start_initial = initial;
        self.cfg.slow_start_step = step;
        self.cfg.slow_start_steps = steps;
        self
    }

    /// Time source (default [`TokioClock`](crate::time::TokioClock)).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Shares pauses with other processes through `store`.
    pub fn store(mut self, store: impl PauseStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Seed of the jitter, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Builds the gate.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `base` is zero, `cap < base`, or `initial` is zero while the
    /// slow start is on.
    pub fn build(self) -> Result<Backoff, Error> {
        let cfg = self.cfg;
        if cfg.base.is_zero() || cfg.cap < cfg.base {
            return Err(CoreError::invalid_value(
                "exponential",
                format!("base {:?}, cap {:?}", cfg.base, cfg.cap),
                "base must be positive and cap at least base",
            )
            .into());
        }
        if cfg.slow_start_steps > 0
            && (cfg.slow_start_initial == 0 || cfg.slow_start_step.is_zero())
        {
            return Err(CoreError::invalid_value(
                "slow_start",
                format!(
                    "initial {}, step {:?}",
                    cfg.slow_start_initial, cfg.slow_start_step
                ),
                "initial and step must be positive",
            )
            .into());
        }
        let rng = match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Ok(Backoff {
            inner: Arc::new(Inner {
                clock: self
                    .clock
                    .unwrap_or_else(|| Arc::new(TokioClock::from_system())),
                cfg,
                scopes: Mutex::new(BoundedMap::new(MAX_SCOPES, SCOPE_IDLE).keeping(Scope::in_use)),
                store: self.store,
                rng: Mutex::new(rng),
            }),
        })
    }
}
