//! Snapshots of a LimitSet's limits.

use dynalimit_core::algorithms::RateStats;

/// A snapshot of one limit, taken after refreshing its time-based state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LimitStats {
    /// A rate or call limit.
    Rate {
        /// The key.
        key: String,
        /// Whether this is the call-count limit.
        call_limit: bool,
        /// The algorithm's figures.
        stats: RateStats,
    },
    /// A resource limit.
    Resource {
        /// The key.
        key: String,
        /// Units that can be held at once.
        capacity: u64,
        /// Units held now.
        current_usage: u64,
        /// Units that could be taken now.
        available: u64,
        /// `current_usage / capacity`.
        utilization: f64,
    },
}

impl LimitStats {
    /// The limit's key.
    pub fn key(&self) -> &str {
        match self {
            LimitStats::Rate { key, .. } | LimitStats::Resource { key, .. } => key,
        }
    }

    /// Units that could be taken now.
    pub fn available(&self) -> f64 {
        match self {
            LimitStats::Rate { stats, .. } => stats.available,
            LimitStats::Resource { available, .. } => *available as f64,
        }
    }

    /// Fraction of the capacity in use.
    pub fn utilization(&self) -> f64 {
        match self {
            LimitStats::Rate { stats, .. } => stats.utilization,
            LimitStats::Resource { utilization, .. } => *utilization,
        }
    }
}
