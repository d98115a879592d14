//! The cooperative backoff gate.
//!
//! When a downstream answers "rate limited, retry after N", every caller of that downstream —
//! not only the one that got the answer — should stop until the deadline, and the callers should
//! not all come back in the same millisecond. [`Backoff`] keeps one pause per *scope* (the unit
//! at which the downstream throttles: an API key, an account, a resource):
//!
//! - [`Backoff::pause`] max-merges a deadline (`now + retry_after`, capped by `max_pause`):
//!   concurrent reports never shorten a pause. Without a retry-after it backs off exponentially
//!   with jitter, `min(cap, base × 2^n) × U(0.5, 1)`, `n` counting the pauses of the current
//!   episode (reset after a quiet period).
//! - [`Backoff::wait`] returns at once when the scope is open, and otherwise sleeps until the
//!   deadline, then re-admits callers through a slow start: `initial` callers in the first step,
//!   twice as many in each following step, each with a small random delay
//!   (`U(0, min(max_jitter, pause / 10))`), until the ramp is over.
//! - [`Backoff::check`] is the non-blocking form, for code that must not wait.
//!
//! A gate keyed by caller meets ever new scopes, so it remembers at most [`MAX_SCOPES`] of
//! them: a scope is made by a pause (never by a check or a wait), and one whose pause, slow
//! start and quiet period are over and that nobody used for [`SCOPE_IDLE`] may be forgotten,
//! which changes nothing but its [`Backoff::incidents`] count.
//!
//! Across processes, a [`PauseStore`] carries the deadline as wall-clock epoch milliseconds:
//! [`Backoff::report`] pauses locally and publishes, [`Backoff::refresh`] reads the shared stamp
//! and [`Backoff::observe`] merges a stamp read elsewhere (for instance on a bucket item).
//!
//! ```
//! use std::time::Duration;
//! use dynalimit::backoff::Backoff;
//! use dynalimit::time::{Clock, ManualClock};
//!
//! let clock = ManualClock::new(0);
//! let gate = Backoff::builder().clock(clock.clone()).build().unwrap();
//! assert!(gate.check("ads-api").is_ok());
//! gate.pause("ads-api", Some(Duration::from_secs(15)));
//! gate.pause("ads-api", Some(Duration::from_secs(5))); // never shortens
//! let paused = gate.check("ads-api").unwrap_err();
//! assert_eq!(paused.retry_after(), Some(Duration::from_secs(15)));
//! clock.advance(Duration::from_secs(15));
//! assert!(gate.check("ads-api").is_ok());
//! ```

mod gate;
mod store;
#[cfg(test)]
mod tests;

pub use gate::{Backoff, BackoffBuilder, Pause};
pub use store::{MAX_SCOPES, MemoryPauseStore, PauseStore, SCOPE_IDLE, bucket_scope};
