//! The limiter, its permits and its queue.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::time::{Clock, TokioClock};
use dynalimit_core::CoreError;
use dynalimit_core::adaptive::priority::{Level, Priority, rejection_rate};
use dynalimit_core::adaptive::{ChangeReason, ControllerConfig, LimitChange, LimitController};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::oneshot;

use super::prioritizer::{Prioritizer, QueuePressure, QueueSource};
use crate::Error;
use crate::rejection::{Overload, Rejection};

type LimitListener = Box<dyn Fn(LimitChange) + Send + Sync>;
type ExceededListener = Box<dyn Fn(&Rejection) + Send + Sync>;

/// A snapshot of the limiter's gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdaptiveMetrics {
    /// Current limit.
    pub limit: u32,
    /// Permits held.
    pub inflight: u32,
    /// Highest number of permits held at once since the limiter was built or reset.
    pub max_inflight: u32,
    /// Callers waiting in the queue.
    pub queued: u32,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Queueing {
    initial_factor: f64,
    max_factor: f64,
}

impl Queueing {
    /// `(rejection threshold, max queue)` for `limit`.
    pub(super) fn bounds(self, limit: u32) -> (u64, u64) {
        let scaled = |f: f64| {
            // limit ≤ u32::MAX and factors are small: the product fits u64.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let v = (f64::from(limit) * f).ceil() as u64;
            v
        };
        let threshold = scaled(self.initial_factor);
        (threshold, scaled(self.max_factor).max(threshold + 1))
    }
}

struct Waiter {
    id: u64,
    tx: oneshot::Sender<u32>,
}

struct State {
    controller: LimitController,
    inflight: u32,
    max_inflight: u32,
    waiters: VecDeque<Waiter>,
    next_id: u64,
    rng: StdRng,
}

impl State {
    fn limit(&self) -> u32 {
        self.controller.limit()
    }

    fn queued(&self) -> u32 {
        u32::try_from(self.waiters.len()).unwrap_or(u32::MAX)
    }

    fn has_room(&self) -> bool {
        self.inflight < self.limit()
    }

    /// A permit can be handed out at once: room under the limit and nobody queued ahead.
    fn free_now(&self) -> bool {
        self.has_room() && self.waiters.is_empty()
    }

    fn take(&mut self) -> u32 {
        self.inflight += 1;
        self.max_inflight = self.max_inflight.max(self.inflight);
        self.inflight
    }

    /// Hands free permits to the queue head, FIFO.
    fn grant_waiters(&mut self) {
        while self.has_room() {
            let Some(w) = self.waiters.pop_front() else {
                break;
            };
            let inflight = self.take();
            if w.tx.send(inflight).is_err() {
                self.inflight -= 1;
            }
        }
    }

    fn rejected(&self, cause: Overload) -> Rejection {
        Rejection::overloaded(cause, self.limit(), self.inflight, self.queued())
    }
}

struct Inner {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    queueing: Option<Queueing>,
    prioritizer: Option<Prioritizer>,
    on_limit_changed: Vec<LimitListener>,
    on_limit_exceeded: Vec<ExceededListener>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("AdaptiveLimiter")
            .field("limit", &s.limit())
            .field("inflight", &s.inflight)
            .field("queued", &s.queued())
            .field("queueing", &self.queueing)
            .field("prioritized", &self.prioritizer.is_some())
            .finish_non_exhaustive()
    }
}

impl QueueSource for Inner {
    fn queue_pressure(&self) -> QueuePressure {
        let s = self.lock();
        let q = self.queueing.unwrap_or(DEFAULT_PRIORITY_QUEUEING);
        let (rejection_threshold, max_queue) = q.bounds(s.limit());
        QueuePressure {
            queued: s.queued(),
            rejection_threshold,
            max_queue,
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counters consistent (every update is a single
        // step), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn exceeded(&self, rejected: Rejection) -> Rejection {
        for l in &self.on_limit_exceeded {
            l(&rejected);
        }
        rejected
    }

    fn changed(&self, change: Option<LimitChange>) {
        if let Some(change) = change {
            tracing::debug!(old = change.old, new = change.new, reason = ?change.reason, "adaptive limit changed");
            for l in &self.on_limit_changed {
                l(change);
            }
        }
    }

    fn release(&self, outcome: Outcome) {
        let change = {
            let mut s = self.lock();
            let full = !s.has_room();
            let now = self.clock.monotonic();
            let change = match outcome {
                Outcome::Sample { start, inflight } => {
                    let rtt = now.saturating_sub(start);
                    s.controller.record(now, rtt, inflight, full)
                }
                Outcome::Overload => s.controller.overload(now),
                Outcome::Ignore => None,
            };
            s.inflight -= 1;
            s.grant_waiters();
            change
        };
        self.changed(change);
    }
}

/// How a permit ended.
enum Outcome {
    /// A round trip to learn from.
    Sample { start: Duration, inflight: u32 },
    /// The downstream refused: a loss signal.
    Overload,
    /// Nothing to learn (timeout, cancellation, unrelated failure).
    Ignore,
}

const DEFAULT_PRIORITY_QUEUEING: Queueing = Queueing {
    initial_factor: 2.0,
    max_factor: 3.0,
};

enum Admission {
    Granted(u32),
    Queued(u64, oneshot::Receiver<u32>),
    Rejected(Rejection),
}

/// An adaptive concurrency limiter. Cloning is cheap and shares the limiter.
#[derive(Clone, Debug)]
pub struct AdaptiveLimiter {
    inner: Arc<Inner>,
}

/// A permit from an [`AdaptiveLimiter`]. End it with [`Permit::record`] to feed the round trip
/// to the limit, or drop it to release it without a sample (timeouts, cancellations, failures
/// that say nothing about the downstream's latency).
#[must_use = "a permit holds a slot until it is recorded or dropped"]
pub struct Permit {
    inner: Arc<Inner>,
    start: Duration,
    inflight: u32,
    released: bool,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("start", &self.start)
            .field("inflight", &self.inflight)
            .finish()
    }
}

impl Permit {
    fn new(inner: Arc<Inner>, inflight: u32) -> Self {
        let start = inner.clock.monotonic();
        Self {
            inner,
            start,
            inflight,
            released: false,
        }
    }

    /// The in-flight count when this permit was granted, itself included.
    pub fn inflight_at_acquire(&self) -> u32 {
        self.inflight
    }

    /// Releases the permit and records its round-trip time (from the grant to now) as a sample.
    pub fn record(mut self) {
        self.released = true;
        self.inner.release(Outcome::Sample {
            start: self.start,
            inflight: self.inflight,
        });
    }

    /// Releases the permit and reports that the downstream explicitly refused the request
    /// (rate limited, overloaded): the limit shrinks at once by about 10 %, at most once per
    /// window. Pair it with [`Backoff::pause`](crate::backoff::Backoff::pause) when the refusal
    /// carries a retry-after.
    pub fn record_overload(mut self) {
        self.released = true;
        self.inner.release(Outcome::Overload);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.released {
            self.inner.release(Outcome::Ignore);
        }
    }
}

/// Removes an abandoned waiter from the queue, or hands back a permit granted to it just as it
/// gave up.
struct WaitGuard {
    inner: Arc<Inner>,
    id: u64,
    rx: oneshot::Receiver<u32>,
    done: bool,
}

impl WaitGuard {
    /// Called under the lock: `Some(inflight)` if the permit was granted after all.
    fn withdraw(&mut self, s: &mut State) -> Option<u32> {
        self.done = true;
        if let Some(pos) = s.waiters.iter().position(|w| w.id == self.id) {
            s.waiters.remove(pos);
            None
        } else {
            self.rx.try_recv().ok()
        }
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let inner = Arc::clone(&self.inner);
        let mut s = inner.lock();
        if self.withdraw(&mut s).is_some() {
            s.inflight -= 1;
            s.grant_waiters();
        }
    }
}

impl AdaptiveLimiter {
    /// A builder with the reference defaults (limit 20 within [1, 200], no queue shedding).
    pub fn builder() -> AdaptiveLimiterBuilder {
        AdaptiveLimiterBuilder::default()
    }

    /// A permit now, or a rejection; never waits and never queues.
    ///
    /// # Errors
    /// [`Overload::Full`] when the limit is reached or callers are queued.
    pub fn try_acquire(&self) -> Result<Permit, Rejection> {
        let inflight = {
            let mut s = self.inner.lock();
            if !s.free_now() {
                let r = s.rejected(Overload::Full);
                drop(s);
                return Err(self.inner.exceeded(r));
            }
            s.take()
        };
        Ok(Permit::new(Arc::clone(&self.inner), inflight))
    }

    /// A permit, waiting in the FIFO queue as long as it takes.
    ///
    /// # Errors
    /// Only when the queue sheds the request ([`Overload::Shed`], [`Overload::Priority`]).
    pub async fn acquire(&self) -> Result<Permit, Rejection> {
        self.acquire_inner(None, None).await
    }

    /// A permit within `max_wait`.
    ///
    /// # Errors
    /// [`Overload::Timeout`] when none came free in time, or a shedding rejection.
    pub async fn acquire_timeout(&self, max_wait: Duration) -> Result<Permit, Rejection> {
        self.acquire_inner(None, Some(max_wait)).await
    }

    /// A permit for a request of `priority` (a random level in its band), waiting at most
    /// `max_wait` when given.
    ///
    /// # Errors
    /// As [`AdaptiveLimiter::acquire_timeout`], plus [`Overload::Priority`].
    pub async fn acquire_with_priority(
        &self,
        priority: Priority,
        max_wait: Option<Duration>,
    ) -> Result<Permit, Rejection> {
        let level = {
            let mut s = self.inner.lock();
            let fraction: f64 = s.rng.random();
            priority.level_at(fraction)
        };
        self.acquire_inner(Some(level), max_wait).await
    }

    /// A permit for a request at an exact `level`, waiting at most `max_wait` when given.
    ///
    /// # Errors
    /// As [`AdaptiveLimiter::acquire_with_priority`].
    pub async fn acquire_with_level(
        &self,
        level: Level,
        max_wait: Option<Duration>,
    ) -> Result<Permit, Rejection> {
        self.acquire_inner(Some(level), max_wait).await
    }

    /// Whether a permit is free right now (nobody queued and the limit not reached).
    pub fn can_acquire(&self) -> bool {
        let s = self.inner.lock();
        s.free_now()
    }

    fn admit(&self, level: Option<Level>) -> Admission {
        let mut s = self.inner.lock();
        if s.free_now() {
            return Admission::Granted(s.take());
        }
        let limit = s.limit();
        let queued = u64::from(s.queued());
        if let Some(p) = &self.inner.prioritizer {
            let level = level.unwrap_or_else(|| Priority::Medium.level_at(0.5));
            p.observe(level);
            let (_, max_queue) = self
                .inner
                .queueing
                .unwrap_or(DEFAULT_PRIORITY_QUEUEING)
                .bounds(limit);
            if queued >= max_queue {
                return Admission::Rejected(s.rejected(Overload::Shed));
            }
            if level < p.threshold() {
                return Admission::Rejected(s.rejected(Overload::Priority));
            }
        } else if let Some(q) = self.inner.queueing {
            let (threshold, max_queue) = q.bounds(limit);
            let rate = rejection_rate(queued, threshold, max_queue);
            if rate >= 1.0 || (rate > 0.0 && s.rng.random::<f64>() < rate) {
                return Admission::Rejected(s.rejected(Overload::Shed));
            }
        }
        let id = s.next_id;
        s.next_id += 1;
        let (tx, rx) = oneshot::channel();
        s.waiters.push_back(Waiter { id, tx });
        Admission::Queued(id, rx)
    }

    async fn acquire_inner(
        &self,
        level: Option<Level>,
        max_wait: Option<Duration>,
    ) -> Result<Permit, Rejection> {
        let (id, rx) = match self.admit(level) {
            Admission::Granted(inflight) => {
                return Ok(Permit::new(Arc::clone(&self.inner), inflight));
            }
            Admission::Rejected(r) => return Err(self.inner.exceeded(r)),
            Admission::Queued(id, rx) => (id, rx),
        };
        let mut guard = WaitGuard {
            inner: Arc::clone(&self.inner),
            id,
            rx,
            done: false,
        };
        let granted = match max_wait {
            None => (&mut guard.rx).await.ok(),
            Some(d) => {
                let deadline = self
                    .inner
                    .clock
                    .sleep_until(self.inner.clock.monotonic() + d);
                tokio::select! {
                    biased;
                    r = &mut guard.rx => r.ok(),
                    () = deadline => None,
                }
            }
        };
        let inflight = match granted {
            Some(inflight) => {
                guard.done = true;
                inflight
            }
            None => {
                let mut s = self.inner.lock();
                match guard.withdraw(&mut s) {
                    Some(inflight) => inflight,
                    None => {
                        let r = s.rejected(Overload::Timeout);
                        drop(s);
                        return Err(self.inner.exceeded(r));
                    }
                }
            }
        };
        Ok(Permit::new(Arc::clone(&self.inner), inflight))
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.inner.lock().limit()
    }

    /// Permits held.
    pub fn inflight(&self) -> u32 {
        self.inner.lock().inflight
    }

    /// Callers waiting.
    pub fn queued(&self) -> u32 {
        self.inner.lock().queued()
    }

    /// All gauges at once, consistent with each other.
    pub fn metrics(&self) -> AdaptiveMetrics {
        let s = self.inner.lock();
        AdaptiveMetrics {
            limit: s.limit(),
            inflight: s.inflight,
            max_inflight: s.max_inflight,
            queued: s.queued(),
        }
    }

    /// Scales the limit by `factor` (clamped to the configured bounds) and returns the new
    /// limit, e.g. to re-enter slowly after a downstream asked every caller to pause. The limit
    /// then regrows by the usual rules.
    pub fn scale_limit(&self, factor: f64) -> u32 {
        let change = {
            let mut s = self.inner.lock();
            let old = s.limit();
            let target = (f64::from(old) * factor.max(0.0)).floor();
            // Clamped by set_limit; the float is non-negative and finite here.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let new = s
                .controller
                .set_limit(target.min(f64::from(u32::MAX)) as u32);
            s.grant_waiters();
            (new != old).then_some(LimitChange {
                old,
                new,
                reason: ChangeReason::Manual,
            })
        };
        let new = change.map(|c| c.new);
        self.inner.changed(change);
        new.unwrap_or_else(|| self.limit())
    }

    /// Forgets every measurement and returns to the initial limit. Held permits stay valid.
    pub fn reset(&self) {
        let mut s = self.inner.lock();
        s.controller.reset();
        s.max_inflight = s.inflight;
        s.grant_waiters();
    }
}

/// Builds an [`AdaptiveLimiter`].
#[must_use]
#[derive(Default)]
pub struct AdaptiveLimiterBuilder {
    config: ControllerConfig,
    clock: Option<Arc<dyn Clock>>,
    queueing: Option<(f64, f64)>,
    prioritizer: Option<Prioritizer>,
    seed: Option<u64>,
    on_limit_changed: Vec<LimitListener>,
    on_limit_exceeded: Vec<ExceededListener>,
}

impl fmt::Debug for AdaptiveLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimiterBuilder")
            .field("config", &self.config)
            .field("queueing", &self.queueing)
            .finish_non_exhaustive()
    }
}

impl AdaptiveLimiterBuilder {
    /// Lowest and highest limit (defaults 1 and 200).
    pub fn limits(mut self, min: u32, max: u32) -> Self {
        self.config.min_limit = min;
        self.config.max_limit = max;
        self
    }

    /// Starting limit (default 20).
    pub fn initial_limit(mut self, limit: u32) -> Self {
        self.config.initial_limit = limit;
        self
    }

    /// Headroom cap: the limit stays below `factor ×` the peak in-flight count (default 5).
    pub fn max_limit_factor(mut self, factor: f64) -> Self {
        self.config.max_limit_factor = factor;
        self
    }

    /// Shrinks the headroom factor with load: `max(min_factor, factor − decay × log10(inflight))`.
    pub fn max_limit_factor_decay(mut self, decay: f64, min_factor: f64) -> Self {
        self.config.max_limit_factor_decay = decay;
        self.config.min_limit_factor = min_factor;
        self
    }

    /// Recent window bounds: it closes after at least `min` and `min_samples` completions, and
    /// lasts `2 × min RTT` clamped to `[min, max]` (defaults 1 s, 30 s, 50).
    pub fn recent_window(mut self, min: Duration, max: Duration, min_samples: u64) -> Self {
        self.config.window_min_duration = min;
        self.config.window_max_duration = max;
        self.config.window_min_samples = min_samples;
        self
    }

    /// The RTT quantile of each window (default 0.9).
    pub fn recent_quantile(mut self, q: f64) -> Self {
        self.config.recent_quantile = q;
        self
    }

    /// Age of the baseline average, in windows (default 10).
    pub fn baseline_window_age(mut self, windows: u32) -> Self {
        self.config.baseline_window_age = windows;
        self
    }

    /// Windows kept by the throughput and latency correlation (default 50).
    pub fn correlation_window_size(mut self, windows: usize) -> Self {
        self.config.correlation_window_size = windows;
        self
    }

    /// Replaces the whole controller configuration.
    pub fn controller_config(mut self, config: ControllerConfig) -> Self {
        self.config = config;
        self
    }

    /// Turns on gradual queue shedding: none below `limit × initial_factor` queued, all from
    /// `limit × max_factor`, linear in between.
    pub fn queueing(mut self, initial_factor: f64, max_factor: f64) -> Self {
        self.queueing = Some((initial_factor, max_factor));
        self
    }

    /// Registers the limiter with a shared prioritizer; queueing defaults to factors 2 and 3.
    pub fn prioritizer(mut self, prioritizer: &Prioritizer) -> Self {
        self.prioritizer = Some(prioritizer.clone());
        self
    }

    /// Time source (default [`crate::time::TokioClock`]); RTTs are measured on its monotonic
    /// reading.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Seed of the random choices (levels inside a band, probabilistic shedding), for
    /// reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Called after every limit change.
    pub fn on_limit_changed(mut self, f: impl Fn(LimitChange) + Send + Sync + 'static) -> Self {
        self.on_limit_changed.push(Box::new(f));
        self
    }

    /// Called on every rejection.
    pub fn on_limit_exceeded(mut self, f: impl Fn(&Rejection) + Send + Sync + 'static) -> Self {
        self.on_limit_exceeded.push(Box::new(f));
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an inconsistent configuration or queueing factors that are not
    /// finite with `0 ≤ initial < max`.
    pub fn build(self) -> Result<AdaptiveLimiter, Error> {
        let controller = LimitController::new(self.config)?;
        let queueing = match self.queueing {
            None => None,
            Some((i, m)) if i.is_finite() && m.is_finite() && i >= 0.0 && i < m => Some(Queueing {
                initial_factor: i,
                max_factor: m,
            }),
            Some((i, m)) => {
                return Err(CoreError::invalid_value(
                    "queueing",
                    format!("({i}, {m})"),
                    "factors must be finite with 0 <= initial < max",
                )
                .into());
            }
        };
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(TokioClock::from_system()));
        let rng = match self.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let inner = Arc::new(Inner {
            clock,
            state: Mutex::new(State {
                controller,
                inflight: 0,
                max_inflight: 0,
                waiters: VecDeque::new(),
                next_id: 0,
                rng,
            }),
            queueing,
            prioritizer: self.prioritizer,
            on_limit_changed: self.on_limit_changed,
            on_limit_exceeded: self.on_limit_exceeded,
        });
        if let Some(p) = &inner.prioritizer {
            let source: Weak<Inner> = Arc::downgrade(&inner);
            p.register(source);
        }
        Ok(AdaptiveLimiter { inner })
    }
}
