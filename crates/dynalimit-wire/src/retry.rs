//! How a request is sent again: the declarations a write carries ([`Resend`], [`OnThrottle`]),
//! the pauses between attempts ([`RetryBackoff`]) and the retry quota ([`Budget`]).
//!
//! The transport carries out what the caller declares. A request is sent again after a
//! refused connection or a 4xx refusal (throttling, a refused signature or credential): nothing
//! was applied. Once it may have reached the service and no answer says what happened (a
//! connection failing after the request was written, an attempt timeout, a 5xx answer), it is
//! sent again only when the caller declared a second application harmless
//! ([`Resend::Harmless`]). Every retry is paid from a [`Budget`], as the SDK's standard retry
//! quota: 500 units, 14 per retry (5 after throttling), refunded on success.
//!
//! Pauses are the async runtime's timer, not an injected clock: a clock injected for tests
//! moves the time of buckets, not the pauses between attempts.

use std::time::Duration;

use aws_smithy_types::retry::RetryConfig;
use rand::Rng;

/// Whether a write may be sent again after an attempt that may have been applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A second application would count twice (a debit, a credit, a lock whose second
    /// attempt fails its own condition and reads as lost): never sent again once it may
    /// have been applied.
    Never,
    /// The write's condition refuses a second application and that refusal means "already
    /// done" to the caller (a shard count raised under `shard_count < :new`).
    Harmless,
}

/// What a bucket write does when DynamoDB refuses it for throughput (throttling): nothing
/// was applied, so it may go anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnThrottle {
    /// Wait and send it again to the same item, as the client's retry configuration says.
    Retry,
    /// Hand the refusal back at once, so that the caller sends the request to another
    /// shard of the bucket.
    Return,
    /// The write's first attempt was already refused for throughput (and handed back with
    /// [`OnThrottle::Return`]): go on with the client's retry configuration from its first
    /// retry (its pause, then the attempts left), as [`OnThrottle::Retry`] would have.
    Resume,
}

impl OnThrottle {
    /// Whether a throttled attempt is sent again.
    pub fn retries(self) -> bool {
        self != OnThrottle::Return
    }
}

/// How long to wait before retry number `n` (1 for the first retry): a cap of
/// `first × 2^(n-1)`, never above `max`, and a random pause below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackoff {
    first: Duration,
    max: Duration,
    jitter: Jitter,
}

/// Where in `[0, cap)` a pause falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Jitter {
    /// Anywhere in `[0, cap)`: retries of many callers spread out the most.
    Full,
    /// In `[cap/2, cap)`: never much shorter than the cap, for retries that wait for the
    /// service to catch up (unprocessed batch items).
    Half,
}

impl RetryBackoff {
    /// A transaction conflict on one item: full jitter below 25, 50, 100 ms, …
    pub const CONFLICT: RetryBackoff = RetryBackoff::new(25, 1600, Jitter::Full);
    /// Keys or items a batch request left unprocessed (DynamoDB asks for exponential
    /// backoff): half jitter below 50, 100, 200 ms, … up to 3.2 s.
    pub const UNPROCESSED: RetryBackoff = RetryBackoff::new(50, 3200, Jitter::Half);
    /// A conditional transaction that lost to another writer and is planned again: full
    /// jitter below 50, 100, 200 and 400 ms.
    pub const RACE: RetryBackoff = RetryBackoff::new(50, 400, Jitter::Full);
    /// A split's transaction refused for throughput: it relieves the hot partition, so it
    /// is sent again soon, with full jitter below 50, 100, 200 and then 400 ms.
    pub const SPLIT: RetryBackoff = RetryBackoff::new(50, 400, Jitter::Full);

    const fn new(first_ms: u64, max_ms: u64, jitter: Jitter) -> RetryBackoff {
        RetryBackoff {
            first: Duration::from_millis(first_ms),
            max: Duration::from_millis(max_ms),
            jitter,
        }
    }

    /// The backoff of a client's retry configuration (the SDK's standard one when it has
    /// none): full jitter below `initial_backoff × 2^(n-1)`, at most `max_backoff`.
    pub fn of_client(config: Option<&RetryConfig>) -> RetryBackoff {
        let standard = RetryConfig::standard();
        let retry = config.unwrap_or(&standard);
        RetryBackoff {
            first: retry.initial_backoff(),
            max: retry.max_backoff(),
            jitter: Jitter::Full,
        }
    }

    /// The cap of retry `n`.
    fn cap(&self, n: u32) -> Duration {
        self.first
            .saturating_mul(1 << n.saturating_sub(1).min(16))
            .min(self.max)
    }

    /// A pause before retry `n` (1 for the first retry).
    pub fn delay(&self, n: u32) -> Duration {
        let cap = self.cap(n);
        let fraction = rand::rng().random::<f64>();
        match self.jitter {
            Jitter::Full => cap.mul_f64(fraction),
            Jitter::Half => cap.mul_f64(0.5 + fraction / 2.0),
        }
    }

    /// Waits [`RetryBackoff::delay`] of retry `n`.
    pub async fn pause(&self, n: u32) {
        tokio::time::sleep(self.delay(n)).await;
    }
}

/// The number of attempts of a client's retry configuration (at least 1).
pub fn max_attempts(config: Option<&RetryConfig>) -> u32 {
    config
        .map_or(
            RetryConfig::standard().max_attempts(),
            RetryConfig::max_attempts,
        )
        .max(1)
}

/// Capacity of a repository's retry budget, as the SDK's standard retry quota.
pub const BUDGET_CAPACITY: u32 = 500;
/// What a retry after a failure costs from the budget.
pub const RETRY_COST: u32 = 14;
/// What a retry after throttling costs from the budget.
pub const THROTTLING_RETRY_COST: u32 = 5;

/// The retry quota shared by every bucket write of one repository, fast path and SDK path
/// alike, as the SDK's standard retry mode keeps one per client: each retry pays
/// [`RETRY_COST`] ([`THROTTLING_RETRY_COST`] after throttling), a request that succeeds after
/// retrying gives its payments back, and one that succeeds at once adds one unit, up to
/// [`BUDGET_CAPACITY`]. An empty budget makes the next failure final, so a brownout is not
/// multiplied by every caller's retries.
#[derive(Debug)]
pub struct Budget {
    available: std::sync::atomic::AtomicU32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            available: std::sync::atomic::AtomicU32::new(BUDGET_CAPACITY),
        }
    }
}

impl Budget {
    /// Units left.
    #[cfg(test)]
    fn available(&self) -> u32 {
        self.available.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pays `cost` for a retry; false (nothing paid) when the budget cannot.
    pub fn pay(&self, cost: u32) -> bool {
        use std::sync::atomic::Ordering;
        self.available
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                a.checked_sub(cost)
            })
            .is_ok()
    }

    /// A request succeeded after paying `paid` for its retries (0 when it took none).
    pub fn succeeded(&self, paid: u32) {
        use std::sync::atomic::Ordering;
        let back = if paid == 0 { 1 } else { paid };
        let _ = self
            .available
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                Some(a.saturating_add(back).min(BUDGET_CAPACITY))
            });
    }
}

/// Whether `error`'s source chain shows a connection that was never established (the
/// request did not leave).
pub fn never_connected(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && h.is_connect()
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_is_capped_and_grows_with_the_attempt() {
        let config = RetryConfig::standard()
            .with_initial_backoff(Duration::from_millis(10))
            .with_max_backoff(Duration::from_millis(50));
        let policy = RetryBackoff::of_client(Some(&config));
        for _ in 0..200 {
            assert!(policy.delay(1) < Duration::from_millis(10));
            assert!(policy.delay(2) < Duration::from_millis(20));
            assert!(policy.delay(9) < Duration::from_millis(50));
        }
    }

    #[test]
    fn named_policies_keep_their_caps_and_jitter() {
        for _ in 0..200 {
            assert!(RetryBackoff::CONFLICT.delay(1) < Duration::from_millis(25));
            assert!(RetryBackoff::CONFLICT.delay(3) < Duration::from_millis(100));
            let d = RetryBackoff::UNPROCESSED.delay(2);
            assert!(
                d >= Duration::from_millis(50) && d < Duration::from_millis(100),
                "{d:?}"
            );
            assert!(RetryBackoff::UNPROCESSED.delay(20) < Duration::from_millis(3200));
            assert!(RetryBackoff::RACE.delay(9) < Duration::from_millis(400));
        }
    }

    #[test]
    fn the_budget_stops_retries_when_spent_and_refills_on_success() {
        let budget = Budget::default();
        let mut paid = 0;
        while budget.pay(RETRY_COST) {
            paid += RETRY_COST;
        }
        assert_eq!(paid, BUDGET_CAPACITY / RETRY_COST * RETRY_COST);
        assert!(budget.available() < RETRY_COST);
        assert!(budget.pay(budget.available()), "the rest can still be paid");
        assert!(!budget.pay(THROTTLING_RETRY_COST));
        // A request that succeeded after one retry gives its payment back.
        budget.succeeded(RETRY_COST);
        assert_eq!(budget.available(), RETRY_COST);
        // One that succeeded at once adds a unit, never beyond the capacity.
        budget.succeeded(0);
        assert_eq!(budget.available(), RETRY_COST + 1);
        for _ in 0..1000 {
            budget.succeeded(0);
        }
        assert_eq!(budget.available(), BUDGET_CAPACITY);
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_apart_from_a_failure_after_sending() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        let request = http::Request::post(format!("http://127.0.0.1:{port}/"))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let err = client.request(request).await.unwrap_err();
        assert!(never_connected(&err), "{err:?}");
    }

    #[test]
    fn a_plain_error_is_not_a_connection_that_never_happened() {
        let io = std::io::Error::other("reset by peer");
        assert!(!never_connected(&io));
    }
}
