//! Priorities, levels and the queue rejection ramp.
//!
//! Five priorities cover 100 levels each, 0–499. A request carrying only a priority gets a random
//! level inside its band, so shedding inside one band is gradual rather than all-or-nothing.

use std::collections::VecDeque;
use std::ops::RangeInclusive;

use crate::CoreError;

/// Number of levels per priority band.
pub const LEVELS_PER_PRIORITY: u16 = 100;
/// Highest level.
pub const MAX_LEVEL: u16 = 5 * LEVELS_PER_PRIORITY - 1;

/// A request priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Levels 0–99: shed first.
    VeryLow,
    /// Levels 100–199.
    Low,
    /// Levels 200–299.
    #[default]
    Medium,
    /// Levels 300–399.
    High,
    /// Levels 400–499: shed last.
    VeryHigh,
}

impl Priority {
    /// All priorities, lowest first.
    pub const ALL: [Priority; 5] = [
        Priority::VeryLow,
        Priority::Low,
        Priority::Medium,
        Priority::High,
        Priority::VeryHigh,
    ];

    /// The levels of this priority's band.
    ///
    /// ```
    /// use dynalimit_core::adaptive::priority::Priority;
    /// assert_eq!(Priority::High.band(), 300..=399);
    /// ```
    pub const fn band(self) -> RangeInclusive<u16> {
        let lower = self as u16 * LEVELS_PER_PRIORITY;
        lower..=lower + LEVELS_PER_PRIORITY - 1
    }

    /// The level at `fraction` (clamped to [0, 1)) of the band: 0 is its lowest level.
    pub fn level_at(self, fraction: f64) -> Level {
        let lower = *self.band().start();
        let offset = (fraction.clamp(0.0, 1.0) * f64::from(LEVELS_PER_PRIORITY)).floor();
        // offset ∈ [0, 100], clamped to 99 below.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let offset = (offset as u16).min(LEVELS_PER_PRIORITY - 1);
        Level(lower + offset)
    }

    /// The priority whose band holds `level`.
    pub fn of(level: Level) -> Priority {
        Priority::ALL[usize::from(level.0 / LEVELS_PER_PRIORITY)]
    }
}

/// A level in 0–499; higher levels are admitted first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Level(u16);

impl Level {
    /// The lowest level.
    pub const MIN: Level = Level(0);
    /// The highest level.
    pub const MAX: Level = Level(MAX_LEVEL);

    /// A level.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] above 499.
    pub fn new(level: u16) -> Result<Self, CoreError> {
        if level > MAX_LEVEL {
            return Err(CoreError::invalid_value(
                "level",
                level,
                "levels range from 0 to 499",
            ));
        }
        Ok(Level(level))
    }

    /// The number.
    pub const fn get(self) -> u16 {
        self.0
    }
}

/// Gradual queue rejection: 0 while `queued < threshold`, 1 at `queued ≥ max_queue`, linear in
/// between.
///
/// ```
/// use dynalimit_core::adaptive::priority::rejection_rate;
/// assert_eq!(rejection_rate(19, 20, 30), 0.0);
/// assert_eq!(rejection_rate(25, 20, 30), 0.5);
/// assert_eq!(rejection_rate(30, 20, 30), 1.0);
/// ```
pub fn rejection_rate(queued: u64, threshold: u64, max_queue: u64) -> f64 {
    if queued < threshold {
        0.0
    } else if queued >= max_queue {
        1.0
    } else {
        // Counts far below 2^52: exact in f64.
        #[allow(clippy::cast_precision_loss)]
        let rate = (queued - threshold) as f64 / (max_queue - threshold) as f64;
        rate
    }
}

/// How many recent levels a [`LevelTracker`] remembers.
pub const LEVEL_HISTORY: usize = 1000;

/// The levels of the last [`LEVEL_HISTORY`] admission attempts made while a limiter was full,
/// with per-level counts, to turn a rejection rate into a level threshold.
#[derive(Debug, Clone)]
pub struct LevelTracker {
    ring: VecDeque<u16>,
    counts: Vec<u32>,
}

impl Default for LevelTracker {
    fn default() -> Self {
        Self {
            ring: VecDeque::with_capacity(LEVEL_HISTORY),
            counts: vec![0; usize::from(MAX_LEVEL) + 1],
        }
    }
}

impl LevelTracker {
    /// Remembers one attempt's level, forgetting the oldest beyond [`LEVEL_HISTORY`].
    pub fn record(&mut self, level: Level) {
        if self.ring.len() == LEVEL_HISTORY
            && let Some(old) = self.ring.pop_front()
        {
            self.counts[usize::from(old)] -= 1;
        }
        self.ring.push_back(level.0);
        self.counts[usize::from(level.0)] += 1;
    }

    /// Attempts remembered.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The level below which a `rate` fraction of the remembered attempts lie: admitting only
    /// levels at or above it sheds about that fraction. 0 when `rate` is 0 or nothing is known.
    pub fn level_at(&self, rate: f64) -> Level {
        if rate <= 0.0 || self.ring.is_empty() {
            return Level::MIN;
        }
        // len ≤ 1000: exact.
        #[allow(clippy::cast_precision_loss)]
        let target = rate.min(1.0) * self.ring.len() as f64;
        let mut cumulative = 0.0;
        for (level, count) in self.counts.iter().enumerate() {
            cumulative += f64::from(*count);
            if cumulative >= target {
                // level ≤ 499.
                #[allow(clippy::cast_possible_truncation)]
                return Level(level as u16);
            }
        }
        Level::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bands_cover_0_to_499_without_overlap() {
        let mut next = 0;
        for p in Priority::ALL {
            assert_eq!(*p.band().start(), next);
            next = p.band().end() + 1;
            assert_eq!(Priority::of(Level(*p.band().start())), p);
            assert_eq!(Priority::of(Level(*p.band().end())), p);
        }
        assert_eq!(next, 500);
        assert!(Level::new(500).is_err());
        assert_eq!(Priority::Low.level_at(0.0), Level(100));
        assert_eq!(Priority::Low.level_at(0.999), Level(199));
        assert_eq!(Priority::Low.level_at(1.0), Level(199));
    }

    #[test]
    fn tracker_threshold_sheds_the_requested_fraction_of_recent_levels() {
        let mut t = LevelTracker::default();
        for i in 0..2000u16 {
            t.record(Level(i % 500));
        }
        assert_eq!(t.len(), LEVEL_HISTORY);
        assert_eq!(t.level_at(0.0), Level::MIN);
        let th = t.level_at(0.4);
        let shed = (0..500u16).filter(|l| *l < th.get()).count();
        assert!((195..=205).contains(&shed), "threshold {th:?}");
    }

    proptest! {
        #[test]
        fn rejection_rate_is_monotone_and_in_unit_range(q in 0u64..1000, th in 0u64..500, extra in 1u64..500) {
            let max = th + extra;
            let r = rejection_rate(q, th, max);
            prop_assert!((0.0..=1.0).contains(&r));
            prop_assert!(rejection_rate(q + 1, th, max) >= r);
        }
    }
}
