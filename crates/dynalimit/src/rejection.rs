//! The one rejection type: why an acquire was refused, and when to try again.

use std::fmt;
use std::time::Duration;

pub use dynalimit_core::image::LimitStatus;

/// A refused acquire: nothing was taken, except what [`Rejection::unsettled`] names.
///
/// Every component refuses the same way, in the manner of tokio's semaphore and governor's
/// `NotUntil`: a refusal is a value in the `Err` of a `Result`, carrying what the caller needs
/// to react (how long to wait, what was exhausted). Calls that can only be refused return
/// `Result<_, Rejection>` ([`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter),
/// [`Backoff`](crate::backoff::Backoff)); calls that can also fail otherwise (bad input,
/// DynamoDB) return `Result<_, Error>` with the refusal as
/// [`Error::Rejected`](crate::Error::Rejected) (`RateLimiter`,
/// [`LimitSet`](crate::limitset::LimitSet), [`LimitPool`](crate::pool::LimitPool)); `?`
/// turns the former into the latter.
///
/// ```
/// use dynalimit::{Reason, Rejection};
///
/// fn answer(r: &Rejection) -> (u16, Option<u64>) {
///     match r.reason() {
///         Reason::Overloaded { .. } => (503, None),
///         _ => (429, r.retry_after_header()),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    reason: Reason,
    retry_after: Option<Duration>,
    /// Boxed: a refusal is returned by value on every refusing path, and stays small.
    bucket: Option<Box<(String, String)>>,
    statuses: Vec<LimitStatus>,
    unsettled: Vec<Unsettled>,
}

/// A debit a refused acquire had made on another bucket and gave back, whose give-back failed
/// or has an unknown outcome (a credit is never sent twice: a second landing would hand out
/// tokens nobody returned). The debit may stand until refill: the bucket holds fewer tokens
/// than it would, never more, and its usage count (`tc`) may include it.
///
/// A cascade debits the child and its parent; when the parent refuses, the child's debit is
/// given back (and the other way round). A multi-resource acquire gives back the resources
/// that were debited when one refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsettled {
    entity_id: String,
    resource: String,
    amounts: Vec<(String, i64)>,
}

impl Unsettled {
    /// The debit of `amounts` (whole tokens per limit) on the bucket of `entity_id` on
    /// `resource`.
    #[cfg(feature = "dynamodb")]
    pub(crate) fn new(entity_id: &str, resource: &str, amounts: Vec<(String, i64)>) -> Self {
        Unsettled {
            entity_id: entity_id.to_owned(),
            resource: resource.to_owned(),
            amounts,
        }
    }

    /// The entity whose bucket was debited.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The resource of that bucket.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Whole tokens debited per limit, by name: at most this much may stand.
    pub fn amounts(&self) -> &[(String, i64)] {
        &self.amounts
    }
}

/// Why an acquire was refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reason {
    /// A shared bucket in DynamoDB cannot cover the request: at least one of
    /// [`Rejection::statuses`] is exceeded.
    Limits,
    /// Writers kept colliding on the bucket; nothing was written. Retrying after 100 ms is
    /// the right response.
    Contended,
    /// A pause is in force until this wall-clock instant (epoch ms): a bucket's shared pause
    /// stamp, or a [`Backoff`](crate::backoff::Backoff) scope.
    Paused {
        /// The deadline, epoch milliseconds.
        until_epoch_ms: i64,
    },
    /// An in-process [`LimitSet`](crate::limitset::LimitSet) cannot take these amounts now.
    Exhausted {
        /// The amounts asked for (after defaults), none of which was taken.
        requested: Vec<(String, f64)>,
    },
    /// Every slot of a fleet-wide [`Concurrency`](crate::Concurrency) limit is held.
    InFlight {
        /// The limit's name.
        limit: String,
        /// Its slots.
        max: u32,
    },
    /// The [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter) refused a permit.
    Overloaded {
        /// What refused it.
        cause: Overload,
        /// The limit at that moment.
        limit: u32,
        /// Permits held at that moment.
        inflight: u32,
        /// Callers queued at that moment.
        queued: u32,
    },
}

/// Why the adaptive limiter refused a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overload {
    /// The limit is reached and the caller would not wait.
    Full,
    /// The queue shed the request (gradual rejection).
    Shed,
    /// The request's level is below the prioritizer's current threshold.
    Priority,
    /// No permit came free within the caller's wait budget.
    Timeout,
}

/// The retry-after of a contended bucket.
#[cfg(feature = "dynamodb")]
const CONTENDED_RETRY: Duration = Duration::from_millis(100);

impl Rejection {
    /// A bucket of `entity_id` on `resource` that cannot cover the request; the retry-after
    /// is the largest wait of the statuses.
    #[cfg(feature = "dynamodb")]
    pub(crate) fn limits(entity_id: &str, resource: &str, statuses: Vec<LimitStatus>) -> Self {
        let ms = statuses.iter().map(|s| s.retry_after_ms).max().unwrap_or(0);
        Rejection {
            reason: Reason::Limits,
            retry_after: Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
            bucket: Some(Box::new((entity_id.to_owned(), resource.to_owned()))),
            statuses,
            unsettled: Vec::new(),
        }
    }

    /// This rejection waiting at least `wait` (a multi-resource acquire's longest).
    #[cfg(feature = "dynamodb")]
    pub(crate) fn retry_at_least(mut self, wait: Duration) -> Self {
        self.retry_after = Some(self.retry_after.map_or(wait, |own| own.max(wait)));
        self
    }

    /// This rejection with the give-backs that did not land for certain.
    #[cfg(feature = "dynamodb")]
    pub(crate) fn with_unsettled(mut self, unsettled: Vec<Unsettled>) -> Self {
        self.unsettled = unsettled;
        self
    }

    /// Writers kept colliding on the bucket of `entity_id` on `resource`.
    #[cfg(feature = "dynamodb")]
    pub(crate) fn contended(entity_id: &str, resource: &str) -> Self {
        Rejection {
            reason: Reason::Contended,
            retry_after: Some(CONTENDED_RETRY),
            bucket: Some(Box::new((entity_id.to_owned(), resource.to_owned()))),
            statuses: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// A pause until `until_epoch_ms`, `left` from now; on the bucket of `bucket` when given.
    pub(crate) fn paused(
        until_epoch_ms: i64,
        left: Duration,
        bucket: Option<(&str, &str)>,
    ) -> Self {
        Rejection {
            reason: Reason::Paused { until_epoch_ms },
            retry_after: Some(left),
            bucket: bucket.map(|(e, r)| Box::new((e.to_owned(), r.to_owned()))),
            statuses: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// A LimitSet that cannot take `requested` now; it could in `retry_after` if nothing
    /// else happened (`None`: only a release helps).
    pub(crate) fn exhausted(requested: Vec<(String, f64)>, retry_after: Option<Duration>) -> Self {
        Rejection {
            reason: Reason::Exhausted { requested },
            retry_after,
            bucket: None,
            statuses: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// Every slot of concurrency limit `limit` (`max` slots) of `entity_id` on `resource` is
    /// held; the first hold expires in `retry_after` at the latest.
    #[cfg(feature = "dynamodb")]
    pub(crate) fn in_flight(
        entity_id: &str,
        resource: &str,
        limit: &str,
        max: u32,
        retry_after: Duration,
    ) -> Self {
        Rejection {
            reason: Reason::InFlight {
                limit: limit.to_owned(),
                max,
            },
            retry_after: Some(retry_after),
            bucket: Some(Box::new((entity_id.to_owned(), resource.to_owned()))),
            statuses: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// The adaptive limiter refused a permit.
    pub(crate) fn overloaded(cause: Overload, limit: u32, inflight: u32, queued: u32) -> Self {
        Rejection {
            reason: Reason::Overloaded {
                cause,
                limit,
                inflight,
                queued,
            },
            retry_after: None,
            bucket: None,
            statuses: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    /// Why.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// How long until the request could fit if nothing else happened: the largest deficit's
    /// refill for exhausted buckets, 100 ms for a contended one, the time left of a pause.
    /// `None` when only a release can help (a held resource, a full concurrency limit).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The value of an HTTP `Retry-After` header: whole seconds, rounded up past the wait.
    pub fn retry_after_header(&self) -> Option<u64> {
        self.retry_after.map(|d| d.as_secs() + 1)
    }

    /// The entity whose bucket refused (the parent when a cascade was refused).
    pub fn entity_id(&self) -> Option<&str> {
        self.bucket.as_deref().map(|(e, _)| e.as_str())
    }

    /// The resource of the bucket that refused.
    pub fn resource(&self) -> Option<&str> {
        self.bucket.as_deref().map(|(_, r)| r.as_str())
    }

    /// Every declared limit's status on the shard that was tried (the limit reported is that
    /// shard's share, with the bucket's in [`LimitStatus::bucket_limit`]); empty unless the
    /// reason is [`Reason::Limits`].
    pub fn statuses(&self) -> &[LimitStatus] {
        &self.statuses
    }

    /// The statuses of the limits that did not fit.
    pub fn violations(&self) -> impl Iterator<Item = &LimitStatus> {
        self.statuses.iter().filter(|s| s.exceeded)
    }

    /// The status of limit `name`.
    pub fn status(&self, name: &str) -> Option<&LimitStatus> {
        self.statuses.iter().find(|s| s.limit.name() == name)
    }

    /// The debits this acquire made and gave back whose give-back failed or has an unknown
    /// outcome; empty when nothing was taken. Each may stand until refill, so a caller that
    /// keeps its own account of consumption counts them as possibly consumed.
    pub fn unsettled(&self) -> &[Unsettled] {
        &self.unsettled
    }

    /// The deadline of a pause, epoch milliseconds, when the reason is one.
    pub fn paused_until(&self) -> Option<i64> {
        match self.reason {
            Reason::Paused { until_epoch_ms } => Some(until_epoch_ms),
            _ => None,
        }
    }

    /// What refused an adaptive permit, when the reason is [`Reason::Overloaded`].
    pub fn overload(&self) -> Option<Overload> {
        match self.reason {
            Reason::Overloaded { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bucket = self
            .bucket
            .as_deref()
            .map(|(e, r)| format!(" for {e}/{r}"))
            .unwrap_or_default();
        match &self.reason {
            Reason::Limits => {
                let names: Vec<&str> = self.violations().map(|s| s.limit.name()).collect();
                write!(f, "rate limit exceeded{bucket}: [{}]", names.join(", "))?;
            }
            Reason::Contended => write!(f, "rate limit contended{bucket}")?,
            Reason::Paused { .. } => write!(f, "rate limit paused{bucket}")?,
            Reason::Exhausted { requested } => write!(f, "limits exhausted for {requested:?}")?,
            Reason::InFlight { limit, max } => {
                write!(f, "all {max} slots of {limit} in flight{bucket}")?;
            }
            Reason::Overloaded {
                cause,
                limit,
                inflight,
                queued,
            } => {
                let why = match cause {
                    Overload::Full => "limit reached",
                    Overload::Shed => "shed by the queue",
                    Overload::Priority => "priority below the current threshold",
                    Overload::Timeout => "no permit within the wait budget",
                };
                write!(
                    f,
                    "concurrency limit exceeded ({why}): limit {limit}, in flight {inflight}, \
                     queued {queued}"
                )?;
            }
        }
        if let Some(after) = self.retry_after {
            write!(f, "; retry after {:.3}s", after.as_secs_f64())?;
        }
        for u in &self.unsettled {
            write!(
                f,
                "; a debit on {}/{} was given back without confirmation and may stand",
                u.entity_id, u.resource
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_core::Limit;

    fn status(name: &str, exceeded: bool, wait: i64) -> LimitStatus {
        LimitStatus {
            limit: Limit::per_minute(name, 10),
            bucket_limit: Limit::per_minute(name, 10),
            available: 0,
            requested: 1,
            exceeded,
            retry_after_ms: wait,
            overdrawn: false,
            resets_at_ms: None,
        }
    }

    #[test]
    fn retry_after_is_the_largest_wait_and_the_header_rounds_up() {
        let r = Rejection::limits(
            "e",
            "r",
            vec![status("rpm", true, 6_001), status("tpm", false, 0)],
        );
        assert_eq!(r.retry_after(), Some(Duration::from_millis(6_001)));
        assert_eq!(r.retry_after_header(), Some(7));
        assert_eq!(r.violations().count(), 1);
        assert!(r.to_string().contains("[rpm]"));
        assert!(r.status("tpm").is_some());
        assert_eq!((r.entity_id(), r.resource()), (Some("e"), Some("r")));
        let c = Rejection::contended("e", "r");
        assert_eq!(c.retry_after(), Some(Duration::from_millis(100)));
        let p = Rejection::paused(9_000, Duration::from_millis(2_500), Some(("e", "r")));
        assert_eq!(p.retry_after(), Some(Duration::from_millis(2_500)));
        assert_eq!(p.retry_after_header(), Some(3));
        assert_eq!(p.paused_until(), Some(9_000));
        assert!(p.to_string().contains("paused"));
        let o = Rejection::overloaded(Overload::Shed, 4, 4, 9);
        assert_eq!(
            (o.retry_after(), o.overload()),
            (None, Some(Overload::Shed))
        );
        assert!(o.to_string().contains("shed"));
    }
}
