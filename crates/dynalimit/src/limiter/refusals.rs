//! Refusal reports: the minutes in which a limit refused acquires, written for the stack's
//! refusal alerts ("a limit has refused for N minutes", `dynalimit alerts set … --refusing-for`).
//!
//! When an acquire is refused because a limit is short (a rejection with limit statuses; not
//! contention, a disabled bucket, a pause or DynamoDB unavailable), the limiter records the
//! refusal of each limit that did not fit, whether the refusal came from DynamoDB or from the
//! local rejection cache (no request sent): a refusal storm the cache absorbs is reported
//! too. Each process writes at most one report per (entity, resource, limit) per epoch minute
//! of its clock ([`Repository::report_refusal`], one `UpdateItem` in the bucket's shard-0
//! partition), in a task of its own: the acquire never waits for it and never fails because of
//! it. A failed report is logged at `warn` and forgotten, so the next refusal of that minute
//! tries again. Nothing is written while nothing is refused, nor in a namespace where no
//! entity has a refusal alert: the namespace's features item says so, read in the background
//! at most once per configuration cache time-to-live.
//!
//! What was reported is remembered for at most [`MAX_REPORTED_PAIRS`] (entity, resource)
//! pairs ([`BoundedMap`]); a pair forgotten within its minute may be reported twice that
//! minute, which adds to the item's count and changes nothing else.
//!
//! [`RateLimiter::settle`](super::RateLimiter::settle) waits for the reports under way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynalimit_core::bounded::{BoundedMap, Pair, PairRef};
use dynalimit_core::image::LimitStatus;
use dynalimit_format::refusal::minute_of;
use dynalimit_repository::Repository;
use tokio::sync::Notify;

/// At most this many (entity, resource) pairs are remembered.
pub(super) const MAX_REPORTED_PAIRS: usize = 10_000;
/// A pair not refused for this long may be forgotten.
const REPORTED_IDLE: Duration = Duration::from_secs(5 * 60);

/// The epoch minute of each limit's last report, per (entity, resource).
type Reported = Vec<(String, i64)>;

/// What a limiter remembers of its refusal reports, and the count of reports under way.
pub(crate) struct RefusalReports {
    reported: Arc<Mutex<BoundedMap<Pair, Reported>>>,
    pending: Arc<AtomicUsize>,
    settled: Arc<Notify>,
}

impl RefusalReports {
    /// Reports counted in `pending`, and `settled` notified as each ends (what
    /// `RateLimiter::settle` waits on).
    pub(super) fn new(pending: Arc<AtomicUsize>, settled: Arc<Notify>) -> Self {
        RefusalReports {
            reported: Arc::new(Mutex::new(BoundedMap::new(
                MAX_REPORTED_PAIRS,
                REPORTED_IDLE,
            ))),
            pending,
            settled,
        }
    }

    /// The limits among `names` not reported yet in `minute` for the pair, marked reported.
    fn due<'a>(
        &self,
        (entity, resource): (&str, &str),
        names: impl Iterator<Item = &'a str>,
        minute: i64,
        now: Duration,
    ) -> Vec<String> {
        let mut map = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get_or_insert_with(
            &(entity, resource) as &dyn PairRef,
            now,
            || (Pair::new(entity, resource), Vec::new()),
            |seen| {
                let mut due = Vec::new();
                for name in names {
                    match seen.iter_mut().find(|(n, _)| n == name) {
                        Some((_, m)) if *m == minute => {}
                        Some((_, m)) => {
                            *m = minute;
                            due.push(name.to_owned());
                        }
                        None => {
                            seen.push((name.to_owned(), minute));
                            due.push(name.to_owned());
                        }
                    }
                }
                due
            },
        )
    }

    /// Reports the limits of `statuses` that refused an acquire of `entity` on `resource` at
    /// `now_ms` (monotonic reading `now`), each at most once a minute; the writes run on a
    /// task of the current Tokio runtime (none outside one).
    pub(super) fn refused(
        &self,
        repo: &Repository,
        (entity, resource): (&str, &str),
        statuses: &[LimitStatus],
        now_ms: i64,
        now: Duration,
    ) {
        // A namespace without a refusal alert reports nothing.
        if !repo.may_report_refusals() {
            return;
        }
        let short = statuses
            .iter()
            .filter(|s| s.exceeded)
            .map(|s| s.limit.name());
        let minute = minute_of(now_ms);
        let due = self.due((entity, resource), short, minute, now);
        if due.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let guard = Underway::new(&self.pending, &self.settled);
        let repo = repo.clone();
        let reported = Arc::clone(&self.reported);
        let (entity, resource) = (entity.to_owned(), resource.to_owned());
        handle.spawn(async move {
            // Read once per configuration cache time-to-live.
            if matches!(repo.reports_refusals().await, Ok(false)) {
                drop(guard);
                return;
            }
            for limit in due {
                if let Err(e) = repo
                    .report_refusal(&entity, &resource, &limit, now_ms)
                    .await
                {
                    tracing::warn!(
                        entity_id = %entity, resource = %resource, limit = %limit, error = %e,
                        "refusal report failed (the next refusal this minute tries again)"
                    );
                    let mut map = reported
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(seen) =
                        map.peek_mut(&(entity.as_str(), resource.as_str()) as &dyn PairRef)
                    {
                        seen.retain(|(n, m)| !(n == &limit && *m == minute));
                    }
                }
            }
            drop(guard);
        });
    }
}

/// One report under way: counted while it lives.
struct Underway {
    pending: Arc<AtomicUsize>,
    settled: Arc<Notify>,
}

impl Underway {
    fn new(pending: &Arc<AtomicUsize>, settled: &Arc<Notify>) -> Self {
        pending.fetch_add(1, Ordering::SeqCst);
        Underway {
            pending: Arc::clone(pending),
            settled: Arc::clone(settled),
        }
    }
}

impl Drop for Underway {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.settled.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_due_once_a_minute_per_pair() {
        let r = RefusalReports::new(Arc::default(), Arc::default());
        let now = Duration::ZERO;
        let pair = ("acme", "gpt-4");
        assert_eq!(r.due(pair, ["rpm"].into_iter(), 7, now), vec!["rpm"]);
        assert!(r.due(pair, ["rpm"].into_iter(), 7, now).is_empty());
        // Another limit of the pair, another pair: due.
        assert_eq!(r.due(pair, ["rpm", "tpm"].into_iter(), 7, now), vec!["tpm"]);
        assert_eq!(
            r.due(("acme", "claude"), ["rpm"].into_iter(), 7, now),
            vec!["rpm"]
        );
        // The next minute: due again.
        assert_eq!(
            r.due(pair, ["rpm", "tpm"].into_iter(), 8, now),
            vec!["rpm", "tpm"]
        );
    }
}
