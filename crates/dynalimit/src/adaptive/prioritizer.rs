//! The shared prioritizer: turns the combined queue pressure of several limiters into a level
//! threshold.

use std::fmt;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dynalimit_core::adaptive::priority::{Level, LevelTracker, rejection_rate};

/// How full one registered limiter's queue is, read by [`Prioritizer::calibrate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueuePressure {
    /// Callers waiting now.
    pub(super) queued: u32,
    /// The queue length from which the limiter starts refusing low levels.
    pub(super) rejection_threshold: u64,
    /// The queue length at which it refuses every level.
    pub(super) max_queue: u64,
}

/// A limiter that reports its queue to a prioritizer.
pub(super) trait QueueSource: Send + Sync {
    fn queue_pressure(&self) -> QueuePressure;
}

type ThresholdListener = Box<dyn Fn(Level, Level) + Send + Sync>;

/// Shared by every prioritized [`AdaptiveLimiter`](super::AdaptiveLimiter) that registers with
/// it. While a limiter is full, each admission attempt reports its level here. Each
/// [`Prioritizer::calibrate`] sums `limit`, `queued`, rejection threshold and max queue over the
/// registered limiters, computes the combined rejection rate, and sets the threshold to the
/// level below which that fraction of recent attempts lay. Limiters then refuse levels below
/// the threshold while they are full.
///
/// A single registered limiter does not need calibration to protect itself: it admits while it
/// has room and refuses once its queue reaches `limit × max factor`.
#[derive(Clone, Default)]
pub struct Prioritizer {
    inner: Arc<PrioritizerInner>,
}

#[derive(Default)]
struct PrioritizerInner {
    limiters: Mutex<Vec<Weak<dyn QueueSource>>>,
    tracker: Mutex<LevelTracker>,
    threshold: AtomicU16,
    on_threshold_changed: Mutex<Vec<ThresholdListener>>,
}

impl fmt::Debug for Prioritizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prioritizer")
            .field("threshold", &self.threshold())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Prioritizer {
    /// A prioritizer with threshold 0 (admit every level).
    pub fn new() -> Self {
        Self::default()
    }

    /// Called with `(old, new)` whenever a calibration moves the threshold.
    pub fn on_threshold_changed(&self, f: impl Fn(Level, Level) + Send + Sync + 'static) {
        lock(&self.inner.on_threshold_changed).push(Box::new(f));
    }

    /// The current threshold: levels below it are refused by full limiters.
    pub fn threshold(&self) -> Level {
        Level::new(self.inner.threshold.load(Ordering::Relaxed)).unwrap_or(Level::MAX)
    }

    pub(super) fn register(&self, limiter: Weak<dyn QueueSource>) {
        let mut limiters = lock(&self.inner.limiters);
        limiters.retain(|w| w.strong_count() > 0);
        limiters.push(limiter);
    }

    pub(super) fn observe(&self, level: Level) {
        lock(&self.inner.tracker).record(level);
    }

    /// Recomputes the threshold from the registered limiters' queues and the recently observed
    /// levels, and returns it.
    pub fn calibrate(&self) -> Level {
        let live: Vec<Arc<dyn QueueSource>> = {
            let mut limiters = lock(&self.inner.limiters);
            limiters.retain(|w| w.strong_count() > 0);
            limiters.iter().filter_map(Weak::upgrade).collect()
        };
        let (mut queued, mut threshold, mut max_queue) = (0u64, 0u64, 0u64);
        for l in &live {
            let pressure = l.queue_pressure();
            queued += u64::from(pressure.queued);
            threshold += pressure.rejection_threshold;
            max_queue += pressure.max_queue;
        }
        let rate = if live.is_empty() {
            0.0
        } else {
            rejection_rate(queued, threshold, max_queue.max(threshold + 1))
        };
        let new = lock(&self.inner.tracker).level_at(rate);
        let old = Level::new(self.inner.threshold.swap(new.get(), Ordering::Relaxed))
            .unwrap_or(Level::MAX);
        if old != new {
            tracing::debug!(
                old = old.get(),
                new = new.get(),
                rate,
                "priority threshold changed"
            );
            for l in lock(&self.inner.on_threshold_changed).iter() {
                l(old, new);
            }
        }
        new
    }

    /// Calibrates every `interval` on a background task until the returned handle is aborted or
    /// the last clone of the prioritizer is dropped.
    pub fn schedule_calibrations(&self, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Some(inner) = weak.upgrade() else { break };
                Prioritizer { inner }.calibrate();
            }
        })
    }
}
