//! One rate limit's state under each algorithm.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::Window;

/// How a rate limit decides whether an amount may be taken now.
///
/// All five are given `capacity` units per `window` and start full (a burst of `capacity` is
/// admitted from idle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// A bucket of `capacity` tokens refilled continuously at `capacity / window` per second.
    /// Fractional amounts allowed; unused tokens can be refunded (up to the capacity).
    TokenBucket,
    /// The generic cell rate algorithm: emission interval `T = window / capacity`, tolerance
    /// `window`. Admits exactly what [`Algorithm::TokenBucket`] admits; state is one instant.
    /// Fractional amounts allowed; refunds move the instant back, never before now.
    Gcra,
    /// Counts the units granted during the last `window` (a rolling window). Whole amounts
    /// only; no refunds.
    SlidingWindow,
    /// Counts the units granted since the window started; a window starts at the first check
    /// made at least `window` after the previous start. Whole amounts only; no refunds.
    FixedWindow,
    /// A queue that drains continuously at `capacity / window` per second. Whole amounts only;
    /// no refunds.
    LeakyBucket,
}

impl Algorithm {
    /// The algorithm a rate limit gets when none is named: [`Algorithm::SlidingWindow`], the
    /// default of the Python library this layer follows.
    pub const DEFAULT: Algorithm = Algorithm::SlidingWindow;

    /// The snake-case name (`token_bucket`, `gcra`, `sliding_window`, `fixed_window`,
    /// `leaky_bucket`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::LeakyBucket => "leaky_bucket",
        }
    }

    /// Whether amounts may be fractional (true for the two token algorithms).
    pub fn accepts_fractions(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }

    /// Whether unused units can be given back after a grant.
    pub fn refunds(self) -> bool {
        self.accepts_fractions()
    }
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::DEFAULT
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Relative slack allowed in floating-point comparisons (a billionth of the capacity), so that
/// sums such as ten grants of 0.1 s compare as the exact arithmetic would.
const SLACK: f64 = 1e-9;

fn secs(d: Duration) -> f64 {
    nanos(d) as f64 * 1e-9
}

/// Nanoseconds of a monotonic reading (saturating after 584 years).
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// `now + seconds`, rounded up to the next nanosecond so that a check made at the returned
/// instant succeeds; saturates instead of overflowing.
fn after(now: Duration, seconds: f64) -> Duration {
    if seconds <= 0.0 {
        return now;
    }
    let wait = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
    now.saturating_add(wait)
        .saturating_add(Duration::from_nanos(1))
}

#[derive(Debug, Clone)]
enum State {
    /// Infinite capacity: nothing is counted.
    Unbounded,
    TokenBucket {
        tokens: f64,
        /// Nanoseconds of the last refill.
        last: u64,
    },
    Gcra {
        /// Theoretical arrival time, seconds on the monotonic scale.
        tat: f64,
    },
    SlidingWindow {
        /// Runs of units granted at one instant, oldest first.
        runs: VecDeque<(Duration, u64)>,
        count: u64,
    },
    FixedWindow {
        start: Duration,
        count: u64,
    },
    LeakyBucket {
        level: f64,
        /// Nanoseconds of the last drain.
        last: u64,
    },
}

/// The state of one rate limit: `capacity` units per `window` under an [`Algorithm`].
///
/// Pure and synchronous: every method takes the current monotonic reading `now`, which must
/// never decrease between calls. Amounts given to [`RateCounter::fits`] and
/// [`RateCounter::take`] must be finite, non-negative, at most the capacity and, for the
/// counting algorithms, whole (the caller validates them).
///
/// ```
/// use dynalimit_core::algorithms::{Algorithm, RateCounter, Window};
/// use std::time::Duration;
///
/// let mut bucket = RateCounter::new(Algorithm::TokenBucket, 10.0, Window::SECOND, Duration::ZERO);
/// assert!(bucket.fits(10.0, Duration::ZERO));
/// bucket.take(10.0, Duration::ZERO);
/// assert!(!bucket.fits(1.0, Duration::ZERO));
/// // one token comes back every 100 ms
/// assert_eq!(bucket.ready_at(1.0, Duration::ZERO), Some(Duration::from_millis(100)));
/// ```
#[derive(Debug, Clone)]
pub struct RateCounter {
    algorithm: Algorithm,
    capacity: f64,
    window: Duration,
    /// Units per second.
    rate: f64,
    /// Units per nanosecond.
    rate_ns: f64,
    /// Seconds per unit (the GCRA emission interval).
    interval: f64,
    /// `capacity * SLACK`.
    slack: f64,
    state: State,
}

impl RateCounter {
    /// A full limit created at `now`. `capacity` must be greater than zero (it may be
    /// fractional or infinite; an infinite capacity admits everything).
    pub fn new(algorithm: Algorithm, capacity: f64, window: Window, now: Duration) -> Self {
        let window = window.as_duration();
        let rate = capacity / window.as_secs_f64();
        let state = if capacity.is_infinite() {
            State::Unbounded
        } else {
            match algorithm {
                Algorithm::TokenBucket => State::TokenBucket {
                    tokens: capacity,
                    last: nanos(now),
                },
                Algorithm::Gcra => State::Gcra { tat: 0.0 },
                Algorithm::SlidingWindow => State::SlidingWindow {
                    runs: VecDeque::new(),
                    count: 0,
                },
                Algorithm::FixedWindow => State::FixedWindow {
                    start: now,
                    count: 0,
                },
                Algorithm::LeakyBucket => State::LeakyBucket {
                    level: 0.0,
                    last: nanos(now),
                },
            }
        };
        RateCounter {
            algorithm,
            capacity,
            window,
            rate,
            rate_ns: rate * 1e-9,
            interval: 1.0 / rate,
            slack: capacity * SLACK,
            state,
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The capacity per window.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    #[inline]
    fn slack(&self) -> f64 {
        self.slack
    }

    /// Brings time-based state up to `now`: refill, expiry, drain, window reset.
    #[inline]
    fn refresh(&mut self, now: Duration) {
        let (capacity, rate_ns, window) = (self.capacity, self.rate_ns, self.window);
        match &mut self.state {
            State::Unbounded | State::Gcra { .. } => {}
            State::TokenBucket { tokens, last } => {
                let now = nanos(now);
                if now > *last {
                    *tokens = capacity.min(*tokens + (now - *last) as f64 * rate_ns);
                    *last = now;
                }
            }
            State::SlidingWindow { runs, count } => {
                while let Some(&(at, n)) = runs.front() {
                    if now.saturating_sub(at) < window {
                        break;
                    }
                    runs.pop_front();
                    *count -= n;
                }
            }
            State::FixedWindow { start, count } => {
                if now.saturating_sub(*start) >= window {
                    *start = now;
                    *count = 0;
                }
            }
            State::LeakyBucket { level, last } => {
                let now = nanos(now);
                if now > *last {
                    *level = (*level - (now - *last) as f64 * rate_ns).max(0.0);
                    *last = now;
                }
            }
        }
    }

    /// Units that could be taken at `now` (after refreshing the state). Infinite when the
    /// capacity is.
    #[inline]
    pub fn available(&mut self, now: Duration) -> f64 {
        self.refresh(now);
        match &self.state {
            State::Unbounded => f64::INFINITY,
            State::TokenBucket { tokens, .. } => tokens.max(0.0),
            State::Gcra { tat } => {
                let debt = (tat - secs(now)).max(0.0) * self.rate;
                (self.capacity - debt).max(0.0)
            }
            State::SlidingWindow { count, .. } | State::FixedWindow { count, .. } => {
                (self.capacity - *count as f64).max(0.0)
            }
            State::LeakyBucket { level, .. } => (self.capacity - level).max(0.0),
        }
    }

    /// Whether `amount` could be taken at `now`.
    #[inline]
    pub fn fits(&mut self, amount: f64, now: Duration) -> bool {
        amount <= self.available(now) + self.slack()
    }

    /// Takes `amount` at `now`. Call only after [`RateCounter::fits`] answered true for the
    /// same `now` (the LimitSet checks every limit before taking from any): the state it
    /// refreshed is used as it is.
    #[inline]
    pub fn take(&mut self, amount: f64, now: Duration) {
        let interval = self.interval;
        match &mut self.state {
            State::Unbounded => {}
            State::TokenBucket { tokens, .. } => *tokens -= amount,
            State::Gcra { tat } => *tat = tat.max(secs(now)) + amount * interval,
            State::SlidingWindow { runs, count } => {
                let n = amount as u64;
                if n > 0 {
                    match runs.back_mut() {
                        Some((at, run)) if *at == now => *run += n,
                        _ => runs.push_back((now, n)),
                    }
                    *count += n;
                }
            }
            State::FixedWindow { count, .. } => *count += amount as u64,
            State::LeakyBucket { level, .. } => *level += amount,
        }
    }

    /// Gives back `amount` units that were taken but not used, where the algorithm allows it;
    /// returns whether anything could be given back (false for the counting algorithms).
    ///
    /// No time reading is needed, so a release never reads the clock:
    /// - token bucket: `tokens = min(capacity, tokens + amount)` on the state as last
    ///   refreshed. Refilling first or afterwards gives the same result, since
    ///   `min(c, min(c, x) + y) = min(c, x + y)` for `y >= 0`; the bucket never rises above
    ///   its capacity.
    /// - GCRA: the arrival instant moves back by `amount` emission intervals. An instant
    ///   moved before "now" behaves exactly like one equal to now (every check uses
    ///   `max(instant, now)`), so a refund never creates credit beyond an idle limiter.
    #[inline]
    pub fn refund(&mut self, amount: f64) -> bool {
        if amount <= 0.0 {
            return false;
        }
        let interval = self.interval;
        match &mut self.state {
            State::TokenBucket { tokens, .. } => {
                *tokens = self.capacity.min(*tokens + amount);
                true
            }
            State::Gcra { tat } => {
                *tat -= amount * interval;
                true
            }
            State::Unbounded
            | State::SlidingWindow { .. }
            | State::FixedWindow { .. }
            | State::LeakyBucket { .. } => false,
        }
    }

    /// The earliest instant at which `amount` would fit if nothing else happened in between;
    /// `now` when it fits already, `None` when it never can (more than the capacity).
    pub fn ready_at(&mut self, amount: f64, now: Duration) -> Option<Duration> {
        if amount > self.capacity + self.slack() {
            return None;
        }
        if self.fits(amount, now) {
            return Some(now);
        }
        let slack = self.slack();
        Some(match &self.state {
            State::Unbounded => now,
            State::TokenBucket { tokens, .. } => after(now, (amount - tokens - slack) / self.rate),
            State::Gcra { tat } => {
                // debt(t) = (tat - t) * rate must fall to capacity - amount
                let target = tat - (self.capacity - amount + slack) / self.rate;
                after(now, target - secs(now))
            }
            State::LeakyBucket { level, .. } => {
                after(now, (level + amount - self.capacity - slack) / self.rate)
            }
            State::FixedWindow { start, .. } => start.saturating_add(self.window),
            State::SlidingWindow { runs, count } => {
                let mut left = *count;
                let mut at = now;
                for &(granted, n) in runs {
                    left -= n;
                    at = granted.saturating_add(self.window);
                    if (left as f64) + amount <= self.capacity + slack {
                        break;
                    }
                }
                at
            }
        })
    }

    /// A snapshot at `now` (after refreshing the state).
    pub fn stats(&mut self, now: Duration) -> RateStats {
        let available = self.available(now);
        let in_use = match &self.state {
            State::Unbounded => 0.0,
            State::SlidingWindow { count, .. } | State::FixedWindow { count, .. } => *count as f64,
            State::LeakyBucket { level, .. } => *level,
            State::TokenBucket { .. } | State::Gcra { .. } => (self.capacity - available).max(0.0),
        };
        let utilization = if self.capacity.is_infinite() {
            0.0
        } else {
            in_use / self.capacity
        };
        RateStats {
            algorithm: self.algorithm,
            capacity: self.capacity,
            window: self.window,
            rate_per_second: self.rate,
            available,
            in_use,
            utilization,
            emission_interval: match self.algorithm {
                Algorithm::Gcra => Duration::try_from_secs_f64(1.0 / self.rate).ok(),
                _ => None,
            },
        }
    }
}

/// A snapshot of one rate limit.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RateStats {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Units per window.
    pub capacity: f64,
    /// The window.
    pub window: Duration,
    /// `capacity / window` in units per second.
    pub rate_per_second: f64,
    /// Units that could be taken now.
    pub available: f64,
    /// Units counted against the limit now: requests in the current window (sliding and fixed
    /// window), queue level (leaky bucket), or `capacity - available` (token bucket, GCRA).
    pub in_use: f64,
    /// `in_use / capacity`.
    pub utilization: f64,
    /// `window / capacity`, for GCRA only.
    pub emission_interval: Option<Duration>,
}
