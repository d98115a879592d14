//! Where a pause is shared between processes.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::bounded::BoundedMap;
use dynalimit_core::time::{Clock, SystemClock};
use futures::future::BoxFuture;

use crate::Error;

/// The gate remembers at most this many scopes. Beyond it the least recently used ones
/// without a pause, slow start or quiet period running are forgotten first; only when more
/// than a quarter of the bound is in use at once are paused ones forgotten too (a forgotten
/// pause costs the downstream the calls it refuses again, which pause the scope again).
pub const MAX_SCOPES: usize = 100_000;

/// A scope whose pause, slow start and quiet period are over, and that nobody used for this
/// long, may be forgotten (while other scopes are paused, it is gone within twice as long):
/// forgetting it changes nothing but its `Backoff::incidents` count.
pub const SCOPE_IDLE: Duration = Duration::from_secs(600);

/// A shared record of pause deadlines, as wall-clock epoch milliseconds per scope.
///
/// Implementations must max-merge: a publish never moves a stored deadline backward, whatever
/// order concurrent publishes land in.
///
/// The DynamoDB implementation (`RateLimiter::pause_store`, feature `dynamodb`) keeps the
/// deadline on the bucket items of the scope's entity and resource (scopes built with
/// [`bucket_scope`]), in the attribute `dl_pause_until` (type N, epoch ms; the table format's
/// `attr::PAUSE_UNTIL`), written to every
/// existing shard (the count read from shard 0) with
///
/// ```text
/// UpdateItem  Key = {PK: {ns}/BUCKET#{entity}#{resource}#{shard}, SK: #STATE}
///   SET #p = :until
///   IF attribute_exists(PK) AND (attribute_not_exists(#p) OR #p < :until)
///   ReturnValuesOnConditionCheckFailure = ALL_OLD   (a later stamp already there wins)
/// ```
///
/// It touches no other attribute (not `rf`, `tk`, `tc`, `ttl`, `vu`, `wcu`), so no other
/// writer's condition is affected, and its name carries none of the `b_` / `l_` / `w_`
/// prefixes the zae-limiter readers parse, so they ignore it. A RateLimiter honours it by
/// adding `(attribute_not_exists(#p) OR #p <= :now)` to its speculative write, its
/// consumption-only retry and its rf-locked refill write, reading the stamp from the old image
/// returned with a failed condition, and checking it (on the shard and on shard 0) in the slow
/// path's read before a refill or a create, so a paused bucket is refused before any token is
/// spent. A pair without any bucket item has nothing to stamp: the publish then stores nothing.
/// Lease commits and rollbacks are not held by a pause.
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

/// The scope of the buckets of `entity_id` on `resource`: `"{entity_id}#{resource}"`.
/// Unambiguous because neither identifier may contain `#`.
///
/// ```
/// assert_eq!(dynalimit::backoff::bucket_scope("acme", "ads-api"), "acme#ads-api");
/// ```
pub fn bucket_scope(entity_id: &str, resource: &str) -> String {
    format!("{entity_id}#{resource}")
}

/// A [`PauseStore`] in memory, shared by clones: for tests, and for several gates inside one
/// process.
///
/// It holds at most [`MAX_SCOPES`](MAX_SCOPES) stamps. A stamp that has passed (on the
/// store's clock) says nothing a reader acts on, and goes once it was not published for
/// [`SCOPE_IDLE`](SCOPE_IDLE); beyond the bound, the least recently published go first,
/// live ones last.
#[derive(Clone)]
pub struct MemoryPauseStore {
    stamps: Arc<Mutex<BoundedMap<String, i64>>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MemoryPauseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPauseStore")
            .field("stamps", &self.stamps().len())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryPauseStore {
    fn default() -> Self {
        Self::with_clock(SystemClock)
    }
}

/// Whether a stamp is live at `now` (epoch milliseconds, as a duration since the epoch).
fn live(stamp: &i64, now: Duration) -> bool {
    u64::try_from(*stamp).is_ok_and(|ms| ms > u64::try_from(now.as_millis()).unwrap_or(u64::MAX))
}

impl MemoryPauseStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that tells live stamps by `clock`'s wall reading.
    pub fn with_clock(clock: impl Clock) -> Self {
        MemoryPauseStore {
            stamps: Arc::new(Mutex::new(
                BoundedMap::new(MAX_SCOPES, SCOPE_IDLE).keeping(live),
            )),
            clock: Arc::new(clock),
        }
    }

    /// How many stamps the store holds (at most [`MAX_SCOPES`](MAX_SCOPES)).
    pub fn len(&self) -> usize {
        self.stamps().len()
    }

    /// Whether the store holds no stamp.
    pub fn is_empty(&self) -> bool {
        self.stamps().is_empty()
    }

    fn now(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.clock.epoch_millis()).unwrap_or(0))
    }

    fn stamps(&self) -> std::sync::MutexGuard<'_, BoundedMap<String, i64>> {
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
        let now = self.now();
        let stored = self.stamps().get_or_insert_with(
            scope,
            now,
            || (scope.to_owned(), until_epoch_ms),
            |slot| {
                *slot = (*slot).max(until_epoch_ms);
                *slot
            },
        );
        Box::pin(async move { Ok(stored) })
    }

    fn load<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, Error>> {
        let stamp = self.stamps().get(scope).copied();
        Box::pin(async move { Ok(stamp) })
    }
}
