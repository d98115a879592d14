//! The limit update rule.

use std::time::Duration;

use super::stats::{CorrelationWindow, MovingAverage, MovingMedian, SampleWindow};
use crate::CoreError;

/// `max(1, floor(log10(n)))`: 1 below 100, 2 from 100 to 999, 3 from 1000 to 9999, …
///
/// The step by which the limit grows or shrinks, and the unit of the queue thresholds
/// (`alpha = 3 × log10_root`, `beta = 6 × log10_root`).
///
/// ```
/// use dynalimit_core::adaptive::log10_root;
/// assert_eq!(log10_root(0), 1);
/// assert_eq!(log10_root(99), 1);
/// assert_eq!(log10_root(100), 2);
/// assert_eq!(log10_root(12_345), 4);
/// ```
pub const fn log10_root(n: u32) -> u32 {
    match n.checked_ilog10() {
        Some(d) if d > 1 => d,
        _ => 1,
    }
}

/// Tuning of [`LimitController`]. The defaults are those of the reference design.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ControllerConfig {
    /// Lowest limit (default 1).
    pub min_limit: u32,
    /// Highest limit (default 200).
    pub max_limit: u32,
    /// Limit before the first window closes (default 20).
    pub initial_limit: u32,
    /// Headroom cap: the limit may not exceed the window's peak in-flight count times this
    /// factor (default 5).
    pub max_limit_factor: f64,
    /// When positive, the factor shrinks with load: `max(min_limit_factor, max_limit_factor −
    /// decay × log10(inflight))` (default 0, off).
    pub max_limit_factor_decay: f64,
    /// Floor of the decayed factor (default 1).
    pub min_limit_factor: f64,
    /// Shortest recent window (default 1 s).
    pub window_min_duration: Duration,
    /// Longest recent window (default 30 s).
    pub window_max_duration: Duration,
    /// Completions a window needs before it may close (default 50).
    pub window_min_samples: u64,
    /// RTT quantile taken of each window (default 0.9).
    pub recent_quantile: f64,
    /// Age, in windows, of the baseline average (default 10).
    pub baseline_window_age: u32,
    /// Windows kept by the throughput and latency correlation (default 50).
    pub correlation_window_size: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            min_limit: 1,
            max_limit: 200,
            initial_limit: 20,
            max_limit_factor: 5.0,
            max_limit_factor_decay: 0.0,
            min_limit_factor: 1.0,
            window_min_duration: Duration::from_secs(1),
            window_max_duration: Duration::from_secs(30),
            window_min_samples: 50,
            recent_quantile: 0.9,
            baseline_window_age: 10,
            correlation_window_size: 50,
        }
    }
}

impl ControllerConfig {
    /// Checks the values against each other.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] naming the first offending field.
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |field, value: String, reason: &str| {
            Err(CoreError::invalid_value(field, value, reason))
        };
        if self.min_limit == 0 {
            return bad("min_limit", "0".into(), "must be at least 1");
        }
        if self.max_limit < self.min_limit {
            return bad(
                "max_limit",
                self.max_limit.to_string(),
                "must be at least min_limit",
            );
        }
        if !(self.min_limit..=self.max_limit).contains(&self.initial_limit) {
            return bad(
                "initial_limit",
                self.initial_limit.to_string(),
                "must lie between min_limit and max_limit",
            );
        }
        if !(self.max_limit_factor.is_finite() && self.max_limit_factor >= 1.0) {
            return bad(
                "max_limit_factor",
                self.max_limit_factor.to_string(),
                "must be finite and at least 1",
            );
        }
        if !(self.max_limit_factor_decay.is_finite() && self.max_limit_factor_decay >= 0.0) {
            return bad(
                "max_limit_factor_decay",
                self.max_limit_factor_decay.to_string(),
                "must be finite and not negative",
            );
        }
        if !(self.min_limit_factor.is_finite() && self.min_limit_factor >= 1.0) {
            return bad(
                "min_limit_factor",
                self.min_limit_factor.to_string(),
                "must be finite and at least 1",
            );
        }
        if self.window_min_duration.is_zero() || self.window_max_duration < self.window_min_duration
        {
            return bad(
                "window_max_duration",
                format!("{:?}", self.window_max_duration),
                "window durations must be positive and min <= max",
            );
        }
        if !(self.recent_quantile > 0.0 && self.recent_quantile <= 1.0) {
            return bad(
                "recent_quantile",
                self.recent_quantile.to_string(),
                "must lie in (0, 1]",
            );
        }
        if self.baseline_window_age == 0 {
            return bad("baseline_window_age", "0".into(), "must be positive");
        }
        if self.correlation_window_size < 2 {
            return bad(
                "correlation_window_size",
                self.correlation_window_size.to_string(),
                "must be at least 2",
            );
        }
        Ok(())
    }
}

/// Why a window changed the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeReason {
    /// The estimated queue exceeded `beta`.
    Queueing,
    /// At the limit, more in flight brought less throughput.
    ThroughputFalling,
    /// At the limit, latency rose with in-flight while throughput did not.
    LatencyRising,
    /// The estimated queue was below `alpha`.
    Probing,
    /// The headroom cap pulled the limit toward actual demand.
    Headroom,
    /// Set from outside, e.g. scaled down for a slow start after a pause.
    Manual,
    /// The downstream explicitly refused a request (rate limited, overloaded).
    Overload,
}

/// A limit change decided when a window closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    /// The limit before.
    pub old: u32,
    /// The limit after.
    pub new: u32,
    /// What drove it.
    pub reason: ChangeReason,
}

/// Warm-up length of the smoothing averages.
const WARMUP_SAMPLES: u32 = 10;
/// Windows in the median filter.
const SMOOTHED_SAMPLES: usize = 5;
/// Largest relative rise per window of the baseline's input: a lasting shift of the
/// downstream's latency is re-learnt (about 350 windows for 2×), an overload is not.
const BASELINE_DRIFT: f64 = 0.002;
/// Multiplicative decrease on an explicit refusal by the downstream.
const OVERLOAD_FACTOR: f64 = 0.9;
/// Bound on the RTTs a window keeps exactly.
const WINDOW_CAPACITY: usize = 4096;

/// The adaptive limit: fed one completion at a time, it closes a window when the window is old
/// enough and holds enough samples, and then moves the limit by one step (`log10_root(limit)`).
///
/// Per window: `recent = EWMA5(median5(p90(window)))`, `baseline = EWMA10(recent)`,
/// `queue = ceil(limit × (1 − baseline / recent))`, then
/// - decrease when `queue > 6·step`, or when the limiter was full, the queue estimate is at least
///   `3·step`, and throughput falls with in-flight (correlation < 0) or latency rises with
///   in-flight (> 0.5) while throughput does not follow (correlation < 0.3 or its variation
///   < 0.2);
/// - increase when `queue < 3·step`; hold otherwise;
/// - never above `peak in-flight × factor` (the headroom cap), clamped to `[min, max]`.
///
/// The baseline stands for the latency without queueing. It follows a fall at once, but it
/// holds while the queue estimate is at least `3·step` and otherwise rises by at most 0.2 % per
/// window, so a sustained overload does not turn into the new normal (with a plain EWMA it
/// catches up within a few windows and the limit drifts far past capacity), while a lasting
/// change of the downstream's own latency is still learnt once the limit has come down.
/// The correlation rules need the queue estimate at `3·step` or more because their memory spans
/// many windows: without that guard they keep shrinking a limit whose latency is back to normal.
#[derive(Debug, Clone)]
pub struct LimitController {
    cfg: ControllerConfig,
    limit: u32,
    window: SampleWindow,
    next_update: Option<Duration>,
    median: MovingMedian,
    recent: MovingAverage,
    baseline: MovingAverage,
    throughput_corr: CorrelationWindow,
    latency_corr: CorrelationWindow,
    windows: u32,
    last_overload: Option<Duration>,
}

impl LimitController {
    /// A controller at `cfg.initial_limit`.
    ///
    /// # Errors
    /// When the configuration is inconsistent (see [`ControllerConfig::validate`]).
    pub fn new(cfg: ControllerConfig) -> Result<Self, CoreError> {
        cfg.validate()?;
        let corr = cfg.correlation_window_size;
        Ok(Self {
            limit: cfg.initial_limit,
            window: SampleWindow::new(WINDOW_CAPACITY),
            next_update: None,
            median: MovingMedian::new(SMOOTHED_SAMPLES),
            recent: MovingAverage::new(5, WARMUP_SAMPLES),
            baseline: MovingAverage::new(cfg.baseline_window_age, WARMUP_SAMPLES),
            throughput_corr: CorrelationWindow::new(corr, WARMUP_SAMPLES as usize),
            latency_corr: CorrelationWindow::new(corr, WARMUP_SAMPLES as usize),
            windows: 0,
            last_overload: None,
            cfg,
        })
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The configuration.
    pub fn config(&self) -> &ControllerConfig {
        &self.cfg
    }

    /// The baseline RTT estimate (0 before the first window closed).
    pub fn baseline_rtt(&self) -> Duration {
        Duration::from_secs_f64(self.baseline.value().max(0.0))
    }

    /// Sets the limit directly (clamped to `[min, max]`), e.g. for a slow start after a pause.
    pub fn set_limit(&mut self, limit: u32) -> u32 {
        self.limit = limit.clamp(self.cfg.min_limit, self.cfg.max_limit);
        self.limit
    }

    /// Forgets all history and returns to the initial limit.
    pub fn reset(&mut self) {
        self.limit = self.cfg.initial_limit;
        self.window.reset();
        self.next_update = None;
        self.median.reset();
        self.recent.reset();
        self.baseline.reset();
        self.throughput_corr.reset();
        self.latency_corr.reset();
        self.windows = 0;
        self.last_overload = None;
    }

    /// Records an explicit refusal by the downstream (a loss signal): the limit shrinks at once
    /// to `max(limit − step, ⌊limit × 0.9⌋)`, at most once per minimum window duration so that
    /// a burst of refusals counts once. `now` is monotonic time.
    pub fn overload(&mut self, now: Duration) -> Option<LimitChange> {
        if self
            .last_overload
            .is_some_and(|t| now.saturating_sub(t) < self.cfg.window_min_duration)
        {
            return None;
        }
        self.last_overload = Some(now);
        let old = self.limit;
        let step_down = old.saturating_sub(log10_root(old));
        // A tenth of a u32 fits a u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let scaled = (f64::from(old) * OVERLOAD_FACTOR).floor() as u32;
        let new = step_down
            .min(scaled)
            .clamp(self.cfg.min_limit, self.cfg.max_limit);
        self.limit = new;
        (new != old).then_some(LimitChange {
            old,
            new,
            reason: ChangeReason::Overload,
        })
    }

    fn baseline_ready(&self) -> bool {
        self.windows > WARMUP_SAMPLES
    }

    /// Records one completion: its `rtt`, the in-flight count when it was admitted (itself
    /// included) and whether the limiter was full when it completed. `now` is monotonic time.
    ///
    /// Returns the change when this completion closed a window and the limit moved.
    pub fn record(
        &mut self,
        now: Duration,
        rtt: Duration,
        inflight: u32,
        full: bool,
    ) -> Option<LimitChange> {
        self.window.add(rtt, inflight);
        let next = *self
            .next_update
            .get_or_insert(now + self.cfg.window_min_duration);
        if now < next || self.window.len() < self.cfg.window_min_samples {
            return None;
        }
        let quantile = self.window.quantile(self.cfg.recent_quantile)?;
        let filtered = self.median.add(quantile);
        let recent = self.recent.add(filtered);
        let peak = self.window.max_inflight();
        let min_rtt = self.window.min_rtt().unwrap_or_default();
        let change = self.update(recent, peak, full);
        self.next_update = Some(
            now + (2 * min_rtt).clamp(self.cfg.window_min_duration, self.cfg.window_max_duration),
        );
        self.window.reset();
        change
    }

    fn headroom_cap(&self, peak: u32) -> f64 {
        let factor = if self.cfg.max_limit_factor_decay > 0.0 && peak > 0 {
            (self.cfg.max_limit_factor - self.cfg.max_limit_factor_decay * f64::from(peak).log10())
                .max(self.cfg.min_limit_factor)
        } else {
            self.cfg.max_limit_factor
        };
        f64::from(peak) * factor
    }

    fn update(&mut self, recent: f64, peak: u32, full: bool) -> Option<LimitChange> {
        let old = self.limit;
        self.windows = self.windows.saturating_add(1);
        // The baseline is the latency without queueing: it follows falls at once, rises at most
        // BASELINE_DRIFT per window, and holds while the current estimate shows queueing, so that a
        // sustained overload never becomes the new normal.
        let step = log10_root(old);
        let (alpha, beta) = (f64::from(3 * step), f64::from(6 * step));
        let baseline = if self.baseline_ready() {
            let held = self.baseline.value();
            let queued = f64::from(old) * (1.0 - held / recent) >= alpha;
            if queued {
                held
            } else {
                self.baseline.add(recent.min(held * (1.0 + BASELINE_DRIFT)))
            }
        } else {
            self.baseline.add(recent)
        };
        if recent <= 0.0 {
            return None;
        }
        let gradient = baseline / recent;
        let queue = (f64::from(old) * (1.0 - gradient)).ceil();
        let throughput = f64::from(peak) / recent;
        let thr = self.throughput_corr.add(f64::from(peak), throughput);
        let lat = self.latency_corr.add(f64::from(peak), recent);

        // The correlations remember many windows; they only count while the queue estimate shows
        // some queueing, so that stale memory cannot keep shrinking a limit whose latency has
        // already come back to the baseline.
        let elevated = full && queue >= alpha;
        let decision = if queue > beta {
            Some((false, ChangeReason::Queueing))
        } else if elevated && thr.r < 0.0 {
            Some((false, ChangeReason::ThroughputFalling))
        } else if elevated && lat.r > 0.5 && (thr.r < 0.3 || thr.cv_y < 0.2) {
            Some((false, ChangeReason::LatencyRising))
        } else if queue < alpha {
            Some((true, ChangeReason::Probing))
        } else {
            None
        };
        let (increase, mut reason) = decision?;
        let mut proposed = if increase {
            old.saturating_add(step)
        } else {
            old.saturating_sub(step)
        };

        let cap = self.headroom_cap(peak);
        if f64::from(proposed) > cap {
            reason = ChangeReason::Headroom;
            if f64::from(old) > cap {
                proposed = old.saturating_sub(step);
            } else if f64::from(old) < cap {
                // The cap is below u32::MAX here because old < cap ≤ proposed.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let capped = cap.floor() as u32;
                proposed = capped;
            } else {
                proposed = old;
            }
        }
        let new = proposed.clamp(self.cfg.min_limit, self.cfg.max_limit);
        self.limit = new;
        (new != old).then_some(LimitChange { old, new, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feeds one window of `n` completions of `rtt` at in-flight `inflight`, starting at `*t`.
    fn window(
        c: &mut LimitController,
        t: &mut Duration,
        n: u32,
        rtt: Duration,
        inflight: u32,
        full: bool,
    ) -> Option<LimitChange> {
        let mut change = None;
        let step = Duration::from_secs(1) / n;
        for _ in 0..n {
            *t += step;
            if let Some(ch) = c.record(*t, rtt, inflight, full) {
                change = Some(ch);
            }
        }
        change
    }

    #[test]
    fn no_window_closes_before_min_samples_or_min_duration() {
        let mut c = LimitController::new(ControllerConfig::default()).unwrap();
        let mut t = Duration::ZERO;
        // 49 samples over 2 s: not enough samples.
        for _ in 0..49 {
            t += ms(40);
            assert_eq!(c.record(t, ms(10), 20, true), None);
        }
        assert_eq!(c.limit(), 20);
    }

    #[test]
    fn steady_latency_at_full_demand_grows_the_limit_by_one_step_per_window() {
        let mut c = LimitController::new(ControllerConfig::default()).unwrap();
        let mut t = Duration::ZERO;
        let mut changes = 0;
        for _ in 0..5 {
            let limit = c.limit();
            if let Some(ch) = window(&mut c, &mut t, 100, ms(10), limit, true) {
                assert_eq!(ch.new, ch.old + 1);
                assert_eq!(ch.reason, ChangeReason::Probing);
                changes += 1;
            }
        }
        assert!(changes >= 4, "{changes}");
        assert!(c.limit() >= 24);
    }

    #[test]
    fn a_latency_jump_is_read_as_queueing_and_shrinks_the_limit() {
        let cfg = ControllerConfig {
            initial_limit: 50,
            ..ControllerConfig::default()
        };
        let mut c = LimitController::new(cfg).unwrap();
        let mut t = Duration::ZERO;
        for _ in 0..15 {
            window(&mut c, &mut t, 100, ms(10), 50, false);
        }
        let before = c.limit();
        let mut reasons = Vec::new();
        for _ in 0..10 {
            if let Some(ch) = window(&mut c, &mut t, 100, ms(40), before, true) {
                reasons.push(ch.reason);
            }
        }
        assert!(c.limit() < before, "{} !< {before}", c.limit());
        assert!(reasons.contains(&ChangeReason::Queueing), "{reasons:?}");
    }

    #[test]
    fn a_sustained_overload_does_not_become_the_baseline() {
        let cfg = ControllerConfig {
            initial_limit: 50,
            ..ControllerConfig::default()
        };
        let mut c = LimitController::new(cfg).unwrap();
        let mut t = Duration::ZERO;
        for _ in 0..15 {
            window(&mut c, &mut t, 100, ms(10), 50, true);
        }
        for _ in 0..60 {
            let limit = c.limit();
            window(&mut c, &mut t, 100, ms(30), limit, true);
        }
        assert!(c.baseline_rtt() < ms(11), "baseline {:?}", c.baseline_rtt());
        assert!(c.limit() < 20, "limit {}", c.limit());
    }

    #[test]
    fn an_overload_shrinks_the_limit_once_per_window() {
        let cfg = ControllerConfig {
            initial_limit: 100,
            ..ControllerConfig::default()
        };
        let mut c = LimitController::new(cfg).unwrap();
        let ch = c.overload(ms(1000)).unwrap();
        assert_eq!(
            (ch.old, ch.new, ch.reason),
            (100, 90, ChangeReason::Overload)
        );
        assert_eq!(c.overload(ms(1500)), None, "same window");
        assert_eq!(c.overload(ms(2000)).unwrap().new, 81);
        c.set_limit(5);
        assert_eq!(c.overload(ms(3000)).unwrap().new, 4, "at least one step");
        c.set_limit(1);
        assert_eq!(c.overload(ms(4000)), None, "already at the minimum");
    }

    #[test]
    fn headroom_cap_pulls_the_limit_toward_demand() {
        let cfg = ControllerConfig {
            initial_limit: 150,
            ..ControllerConfig::default()
        };
        let mut c = LimitController::new(cfg).unwrap();
        let mut t = Duration::ZERO;
        // Only 4 in flight: cap = 20, the limit steps down from 150 by 2 each window.
        let ch = (0..3)
            .find_map(|_| window(&mut c, &mut t, 100, ms(10), 4, false))
            .unwrap();
        assert_eq!(
            ch,
            LimitChange {
                old: 150,
                new: 148,
                reason: ChangeReason::Headroom
            }
        );
    }

    #[test]
    fn headroom_cap_lifts_a_limit_below_it_straight_to_the_cap() {
        let cfg = ControllerConfig {
            initial_limit: 10,
            max_limit_factor: 1.5,
            ..ControllerConfig::default()
        };
        let mut c = LimitController::new(cfg).unwrap();
        c.set_limit(7);
        let mut t = Duration::ZERO;
        // Peak 5 in flight → cap 7.5; proposal 8 exceeds it while 7 < 7.5 → jump to floor(7.5).
        let ch = (0..3).find_map(|_| window(&mut c, &mut t, 100, ms(10), 5, false));
        assert_eq!(ch, None, "7 → floor(7.5) = 7 is no change");
        assert_eq!(c.limit(), 7);
        // Peak 6 → cap 9: from 7 the proposal 8 fits under the cap.
        let ch = (0..3)
            .find_map(|_| window(&mut c, &mut t, 100, ms(10), 6, false))
            .unwrap();
        assert_eq!((ch.old, ch.new), (7, 8));
    }

    #[test]
    fn decayed_factor_shrinks_with_load() {
        let cfg = ControllerConfig {
            max_limit_factor_decay: 1.0,
            ..ControllerConfig::default()
        };
        let c = LimitController::new(cfg).unwrap();
        assert!((c.headroom_cap(1) - 5.0).abs() < 1e-9);
        assert!((c.headroom_cap(10) - 40.0).abs() < 1e-9);
        assert!((c.headroom_cap(100) - 300.0).abs() < 1e-9);
    }

    #[test]
    fn invalid_configs_are_rejected_with_the_field_name() {
        let err = LimitController::new(ControllerConfig {
            min_limit: 0,
            ..ControllerConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("min_limit"));
        let err = LimitController::new(ControllerConfig {
            initial_limit: 500,
            ..ControllerConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("initial_limit"));
        let err = LimitController::new(ControllerConfig {
            recent_quantile: 0.0,
            ..ControllerConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("recent_quantile"));
    }

    proptest! {
        #[test]
        fn limit_stays_within_bounds(samples in proptest::collection::vec((1u64..2000, 1u32..400, any::<bool>()), 1..2000),
                                     min in 1u32..10, span in 0u32..100) {
            let cfg = ControllerConfig {
                min_limit: min,
                max_limit: min + span,
                initial_limit: min,
                window_min_samples: 5,
                window_min_duration: ms(10),
                ..ControllerConfig::default()
            };
            let mut c = LimitController::new(cfg).unwrap();
            let mut t = Duration::ZERO;
            for (rtt, inflight, full) in samples {
                t += ms(3);
                if let Some(ch) = c.record(t, ms(rtt), inflight, full) {
                    prop_assert_ne!(ch.old, ch.new);
                    prop_assert!(ch.new.abs_diff(ch.old) <= log10_root(ch.old).max(ch.old));
                }
                prop_assert!((min..=min + span).contains(&c.limit()));
            }
        }
    }
}
