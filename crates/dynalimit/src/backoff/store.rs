//! Where a pause is shared between processes.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::Error;

/// A shared record of pause deadlines, as wall-clock epoch milliseconds per scope.
///
/// Implementations must max-merge: a publish never moves a stored deadline backward, whatever
/// order concurrent publishes land in. The DynamoDB implementation stamps the deadline on the
/// bucket item of the scope's entity and resource with a conditional update, so every limiter
/// reading that item sees it.
pub trait PauseStore: Send + Sync + fmt::Debug + 'static {
    /// Max-merges `until_epoch_ms` into the stamp of `scope` and returns the stamp now stored
    /// (which may be later than the one published).
    fn publish<'a>(
        &'a self,
        scope: &'a str,
        until_epoch_ms: i64,
    ) -> BoxFuture<'a, Result<i64, Error>>;

    /// The stamp of `scope`, if any (it may lie in the past).
    fn load<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, Error>>;
}

/// A [`PauseStore`] in memory, shared by clones: for tests, and for several gates inside one
/// process.
#[derive(Debug, Clone, Default)]
pub struct MemoryPauseStore {
    stamps: Arc<Mutex<HashMap<String, i64>>>,
}

impl MemoryPauseStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn stamps(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.stamps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PauseStore for MemoryPauseStore {
    fn publish<'a>(
        &'a self,
        scope: &'a str,
        until_epoch_ms: i64,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        let stored = {
            let mut stamps = self.stamps();
            let slot = stamps.entry(scope.to_owned()).or_insert(until_epoch_ms);
            *slot = (*slot).max(until_epoch_ms);
            *slot
        };
        Box::pin(async move { Ok(stored) })
    }

    fn load<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, Error>> {
        let stamp = self.stamps().get(scope).copied();
        Box::pin(async move { Ok(stamp) })
    }
}
