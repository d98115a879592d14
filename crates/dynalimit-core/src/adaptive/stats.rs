//! Moving statistics used by the limit controller.

use std::collections::VecDeque;
use std::time::Duration;

/// A mean of the first `warmup` values, then an exponentially weighted moving average with
/// factor `2 / (age + 1)`.
///
/// ```
/// use dynalimit_core::adaptive::MovingAverage;
///
/// let mut avg = MovingAverage::new(5, 2);
/// assert_eq!(avg.add(10.0), 10.0);
/// assert_eq!(avg.add(20.0), 15.0); // still warming up: plain mean
/// assert_eq!(avg.add(30.0), 20.0); // 15 + (30 - 15) / 3
/// ```
#[derive(Debug, Clone)]
pub struct MovingAverage {
    alpha: f64,
    warmup: u32,
    count: u32,
    value: f64,
}

impl MovingAverage {
    /// An average over roughly the last `age` values, warming up over `warmup` values.
    ///
    /// # Panics
    /// When `age` is zero.
    pub fn new(age: u32, warmup: u32) -> Self {
        assert!(age > 0, "MovingAverage age must be positive");
        Self {
            alpha: 2.0 / (f64::from(age) + 1.0),
            warmup,
            count: 0,
            value: 0.0,
        }
    }

    /// Adds a value and returns the new average.
    pub fn add(&mut self, x: f64) -> f64 {
        if self.count < self.warmup || self.count == 0 {
            self.count += 1;
            self.value += (x - self.value) / f64::from(self.count);
        } else {
            self.value += (x - self.value) * self.alpha;
        }
        self.value
    }

    /// The current average (0 before the first value).
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Scales the current average by `factor` (used to let a stale baseline catch up).
    pub fn scale(&mut self, factor: f64) {
        self.value *= factor;
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.count = 0;
        self.value = 0.0;
    }
}

/// The median of the last `size` values.
///
/// ```
/// use dynalimit_core::adaptive::MovingMedian;
///
/// let mut median = MovingMedian::new(3);
/// median.add(1.0);
/// median.add(100.0);
/// assert_eq!(median.add(2.0), 2.0); // the spike is filtered out
/// ```
#[derive(Debug, Clone)]
pub struct MovingMedian {
    size: usize,
    values: VecDeque<f64>,
    scratch: Vec<f64>,
}

impl MovingMedian {
    /// A median over the last `size` values.
    ///
    /// # Panics
    /// When `size` is zero.
    pub fn new(size: usize) -> Self {
        assert!(size > 0, "MovingMedian size must be positive");
        Self {
            size,
            values: VecDeque::with_capacity(size),
            scratch: Vec::with_capacity(size),
        }
    }

    /// Adds a value and returns the median of the values held (the lower middle for an even
    /// count).
    pub fn add(&mut self, x: f64) -> f64 {
        if self.values.len() == self.size {
            self.values.pop_front();
        }
        self.values.push_back(x);
        self.scratch.clear();
        self.scratch.extend(self.values.iter().copied());
        self.scratch.sort_by(f64::total_cmp);
        self.scratch[(self.scratch.len() - 1) / 2]
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.values.clear();
    }
}

/// The recent window of completions: round-trip times and the in-flight count each one saw when
/// it was admitted.
///
/// Up to `capacity` RTTs are kept exactly; beyond that a deterministic reservoir keeps a uniform
/// sample, so a busy window costs bounded memory while its quantile stays representative.
#[derive(Debug, Clone)]
pub struct SampleWindow {
    capacity: usize,
    rtts: Vec<f64>,
    seen: u64,
    min_rtt: Option<Duration>,
    max_inflight: u32,
    rng: u64,
}

impl SampleWindow {
    /// A window keeping at most `capacity` RTTs (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            rtts: Vec::with_capacity(capacity.min(1024)),
            seen: 0,
            min_rtt: None,
            max_inflight: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// Adds one completion.
    pub fn add(&mut self, rtt: Duration, inflight: u32) {
        self.seen += 1;
        self.max_inflight = self.max_inflight.max(inflight);
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        let secs = rtt.as_secs_f64();
        if self.rtts.len() < self.capacity {
            self.rtts.push(secs);
        } else {
            // xorshift64: deterministic, and good enough to pick a reservoir slot.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let slot = self.rng % self.seen;
            if let Ok(slot) = usize::try_from(slot)
                && slot < self.capacity
            {
                self.rtts[slot] = secs;
            }
        }
    }

    /// How many completions the window has seen.
    pub fn len(&self) -> u64 {
        self.seen
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// The smallest RTT seen, if any.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The largest in-flight count seen.
    pub fn max_inflight(&self) -> u32 {
        self.max_inflight
    }

    /// The `q` quantile (0 ≤ q ≤ 1, nearest rank) of the RTTs, in seconds; `None` when empty.
    pub fn quantile(&mut self, q: f64) -> Option<f64> {
        if self.rtts.is_empty() {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let last = self.rtts.len() - 1;
        // Nearest rank on a bounded vector: the product is at most `last`, so the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((q * last as f64).ceil() as usize).min(last);
        let (_, v, _) = self.rtts.select_nth_unstable_by(rank, f64::total_cmp);
        Some(*v)
    }

    /// Empties the window.
    pub fn reset(&mut self) {
        self.rtts.clear();
        self.seen = 0;
        self.min_rtt = None;
        self.max_inflight = 0;
    }
}

/// The result of adding a pair to a [`CorrelationWindow`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Correlation {
    /// Pearson correlation of x and y in [-1, 1]; 0 while warming up or when either series is
    /// (nearly) constant.
    pub r: f64,
    /// Coefficient of variation (σ / μ) of x.
    pub cv_x: f64,
    /// Coefficient of variation (σ / μ) of y.
    pub cv_y: f64,
}

/// Rolling Pearson correlation over the last `size` (x, y) pairs.
///
/// ```
/// use dynalimit_core::adaptive::CorrelationWindow;
///
/// let mut w = CorrelationWindow::new(50, 3);
/// let mut last = None;
/// for i in 1..=10 {
///     let x = f64::from(i);
///     last = Some(w.add(x, 2.0 * x + 1.0));
/// }
/// assert!((last.unwrap().r - 1.0).abs() < 1e-9);
/// ```
#[derive(Debug, Clone)]
pub struct CorrelationWindow {
    size: usize,
    warmup: usize,
    pairs: VecDeque<(f64, f64)>,
}

/// Below this coefficient of variation a series is treated as constant.
const MIN_CV: f64 = 0.01;

impl CorrelationWindow {
    /// A window over the last `size` pairs that reports 0 until it holds `warmup` pairs.
    pub fn new(size: usize, warmup: usize) -> Self {
        Self {
            size: size.max(2),
            warmup: warmup.max(2),
            pairs: VecDeque::with_capacity(size.max(2)),
        }
    }

    /// Adds a pair and returns the correlation over the window.
    pub fn add(&mut self, x: f64, y: f64) -> Correlation {
        if self.pairs.len() == self.size {
            self.pairs.pop_front();
        }
        self.pairs.push_back((x, y));
        // Bounded by `size`, exact in f64.
        #[allow(clippy::cast_precision_loss)]
        let n = self.pairs.len() as f64;
        let (sx, sy) = self
            .pairs
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let (mut vxx, mut vyy, mut vxy) = (0.0, 0.0, 0.0);
        for (x, y) in &self.pairs {
            let (dx, dy) = (x - mx, y - my);
            vxx += dx * dx;
            vyy += dy * dy;
            vxy += dx * dy;
        }
        let cv = |var: f64, mean: f64| {
            if mean.abs() < f64::EPSILON {
                0.0
            } else {
                (var / n).sqrt() / mean.abs()
            }
        };
        let (cv_x, cv_y) = (cv(vxx, mx), cv(vyy, my));
        let r = if self.pairs.len() < self.warmup || cv_x < MIN_CV || cv_y < MIN_CV {
            0.0
        } else {
            (vxy / (vxx.sqrt() * vyy.sqrt())).clamp(-1.0, 1.0)
        };
        Correlation { r, cv_x, cv_y }
    }

    /// Forgets every pair.
    pub fn reset(&mut self) {
        self.pairs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn moving_average_switches_from_mean_to_ewma_after_warmup() {
        let mut avg = MovingAverage::new(10, 3);
        for x in [2.0, 4.0, 6.0] {
            avg.add(x);
        }
        assert!((avg.value() - 4.0).abs() < 1e-12);
        // alpha = 2/11
        let next = avg.add(15.0);
        assert!((next - (4.0 + 11.0 * 2.0 / 11.0)).abs() < 1e-12);
    }

    #[test]
    fn moving_median_of_even_count_is_lower_middle() {
        let mut m = MovingMedian::new(5);
        assert_eq!(m.add(4.0), 4.0);
        assert_eq!(m.add(1.0), 1.0);
        assert_eq!(m.add(3.0), 3.0);
        for _ in 0..5 {
            m.add(9.0);
        }
        assert_eq!(m.add(0.0), 9.0);
    }

    #[test]
    fn sample_window_tracks_quantile_min_and_max_inflight() {
        let mut w = SampleWindow::new(1000);
        for i in 1..=100u32 {
            w.add(Duration::from_millis(u64::from(i)), i % 7);
        }
        assert_eq!(w.len(), 100);
        assert_eq!(w.min_rtt(), Some(Duration::from_millis(1)));
        assert_eq!(w.max_inflight(), 6);
        let p90 = w.quantile(0.9).unwrap();
        assert!((p90 - 0.091).abs() < 1e-9, "p90 {p90}");
        w.reset();
        assert!(w.is_empty());
        assert_eq!(w.quantile(0.9), None);
    }

    #[test]
    fn sample_window_reservoir_keeps_quantile_close_on_large_windows() {
        let mut w = SampleWindow::new(256);
        for i in 0..100_000u64 {
            w.add(Duration::from_micros(i % 1000), 1);
        }
        let p90 = w.quantile(0.9).unwrap();
        assert!((p90 - 0.0009).abs() < 0.0001, "p90 {p90}");
    }

    #[test]
    fn correlation_is_zero_for_constant_series_and_negative_for_inverse() {
        let mut w = CorrelationWindow::new(50, 10);
        let mut c = None;
        for i in 0..20 {
            c = Some(w.add(f64::from(i), 5.0));
        }
        assert_eq!(c.unwrap().r, 0.0);
        let mut w = CorrelationWindow::new(50, 10);
        for i in 1..=20 {
            c = Some(w.add(f64::from(i), 100.0 - f64::from(i)));
        }
        assert!(c.unwrap().r < -0.99);
    }

    proptest! {
        #[test]
        fn correlation_stays_in_range(pairs in proptest::collection::vec((0.0f64..1e6, 0.0f64..1e6), 1..120)) {
            let mut w = CorrelationWindow::new(50, 10);
            for (x, y) in pairs {
                let c = w.add(x, y);
                prop_assert!((-1.0..=1.0).contains(&c.r));
                prop_assert!(c.cv_x >= 0.0 && c.cv_y >= 0.0);
            }
        }

        #[test]
        fn quantile_is_one_of_the_samples_and_monotone_in_q(ms in proptest::collection::vec(0u64..10_000, 1..300)) {
            let mut w = SampleWindow::new(1024);
            for m in &ms {
                w.add(Duration::from_millis(*m), 1);
            }
            let p50 = w.quantile(0.5).unwrap();
            let p90 = w.quantile(0.9).unwrap();
            prop_assert!(p50 <= p90);
            prop_assert!(ms.iter().any(|m| (Duration::from_millis(*m).as_secs_f64() - p90).abs() < 1e-12));
        }
    }
}
