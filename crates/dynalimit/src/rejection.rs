//! The rejection value: why a request did not fit, and when it would.

use std::fmt;
use std::time::Duration;

pub use dynalimit_core::decide::LimitStatus;

/// A request that does not fit, as a value.
///
/// It names the bucket owner that refused (the entity itself, or its parent when a cascade
/// was refused), carries every declared limit's status on the shard that was tried (the limit
/// reported is that shard's share, see [`LimitStatus`]), and how long to wait. `contended`
/// means nothing was written because writers kept colliding; retrying after
/// [`Rejection::retry_after`] (100 ms) is the right response. `paused` means the bucket
/// carries a shared pause stamp (see `RateLimiter::pause`) and holds the time left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The entity whose bucket refused.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// Every declared limit's status; at least one is exceeded unless `contended`.
    pub statuses: Vec<LimitStatus>,
    /// Lost races persisted; nothing was written.
    pub contended: bool,
    /// The bucket is paused by a shared stamp: the time left until its deadline. The statuses
    /// are empty then (no balance was examined).
    pub paused: Option<Duration>,
}

impl Rejection {
    /// How long until the largest deficit is refilled (100 ms for a contended rejection, the
    /// time left for a paused bucket).
    pub fn retry_after(&self) -> Duration {
        if let Some(left) = self.paused {
            return left;
        }
        if self.contended {
            return Duration::from_millis(100);
        }
        let ms = self
            .statuses
            .iter()
            .map(|s| s.retry_after_ms)
            .max()
            .unwrap_or(0);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    /// The value of an HTTP `Retry-After` header: whole seconds, rounded up past the wait.
    pub fn retry_after_header(&self) -> u64 {
        self.retry_after().as_secs() + 1
    }

    /// The statuses of the limits that did not fit.
    pub fn violations(&self) -> impl Iterator<Item = &LimitStatus> {
        self.statuses.iter().filter(|s| s.exceeded)
    }

    /// The status of limit `name`.
    pub fn status(&self, name: &str) -> Option<&LimitStatus> {
        self.statuses.iter().find(|s| s.limit.name() == name)
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(left) = self.paused {
            return write!(
                f,
                "rate limit paused for {}/{}; retry after {:.3}s",
                self.entity_id,
                self.resource,
                left.as_secs_f64()
            );
        }
        if self.contended {
            return write!(
                f,
                "rate limit contended for {}/{}; retry after 0.1s",
                self.entity_id, self.resource
            );
        }
        let names: Vec<&str> = self.violations().map(|s| s.limit.name()).collect();
        write!(
            f,
            "rate limit exceeded for {}/{}: [{}]; retry after {:.3}s",
            self.entity_id,
            self.resource,
            names.join(", "),
            self.retry_after().as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_core::Limit;

    fn status(name: &str, exceeded: bool, wait: i64) -> LimitStatus {
        LimitStatus {
            limit: Limit::per_minute(name, 10),
            available: 0,
            requested: 1,
            exceeded,
            retry_after_ms: wait,
        }
    }

    #[test]
    fn retry_after_is_the_largest_wait_and_the_header_rounds_up() {
        let r = Rejection {
            entity_id: "e".into(),
            resource: "r".into(),
            statuses: vec![status("rpm", true, 6_001), status("tpm", false, 0)],
            contended: false,
            paused: None,
        };
        assert_eq!(r.retry_after(), Duration::from_millis(6_001));
        assert_eq!(r.retry_after_header(), 7);
        assert_eq!(r.violations().count(), 1);
        assert!(r.to_string().contains("[rpm]"));
        assert!(r.status("tpm").is_some());
        let c = Rejection {
            contended: true,
            statuses: vec![],
            ..r
        };
        assert_eq!(c.retry_after(), Duration::from_millis(100));
        let p = Rejection {
            contended: false,
            paused: Some(Duration::from_millis(2_500)),
            ..c
        };
        assert_eq!(p.retry_after(), Duration::from_millis(2_500));
        assert_eq!(p.retry_after_header(), 3);
        assert!(p.to_string().contains("paused"));
    }
}
