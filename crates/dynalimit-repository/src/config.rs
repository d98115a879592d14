//! Limit configuration at four levels and its cache (reference §1.4.5, §4).

use std::time::Duration;

/// The per-namespace limit configuration cache.
#[derive(Debug)]
pub(crate) struct ConfigCache {
    ttl: Duration,
}

impl ConfigCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        ConfigCache { ttl }
    }

    /// The configured time-to-live.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }
}
