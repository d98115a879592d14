//! The DynamoDB [`RateLimiter`] as a tower layer for HTTP services.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::time::Clock as _;
use crate::{Concurrency, Error, Lease, Limit, LimitStatus, RateLimiter};

/// What one request consumes, and on which bucket: the entity, the resource and the whole
/// tokens per limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    entity_id: String,
    resource: String,
    consume: Vec<(String, i64)>,
}

impl Charge {
    /// A request on `entity_id`'s bucket for `resource` that consumes nothing yet.
    pub fn new(entity_id: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            entity_id: entity_id.into(),
            resource: resource.into(),
            consume: Vec::new(),
        }
    }

    /// Also consumes `amount` whole tokens of limit `name`.
    #[must_use]
    pub fn consume(mut self, name: impl Into<String>, amount: i64) -> Self {
        self.consume.push((name.into(), amount));
        self
    }
}

type KeyFn<B> = dyn Fn(&Request<B>) -> Option<Charge> + Send + Sync;
type UsageFn = dyn Fn(&http::HeaderMap) -> Vec<(String, i64)> + Send + Sync;

/// Applies a [`RateLimiter`] to an HTTP service.
///
/// For each request, the key function names the bucket and the amounts (`None` lets the
/// request through unlimited). The request is then acquired:
///
/// - refused ([`Error::Rejected`]): `429 Too Many Requests` with `Retry-After` in whole
///   seconds, rounded up past the wait (`⌊retry_after⌋ + 1`), and the inner service is not
///   called;
/// - resource disabled for the entity: `403 Forbidden`; bad input (an invalid key): `400 Bad
///   Request`; a request the table refuses as invalid, such as a configuration of more limits
///   than a bucket carries ([`Error::InvalidRequest`]), or an item holding a value out of
///   bounds ([`Error::Corrupt`]): `500 Internal Server Error`; the limiter unavailable (under
///   `on_unavailable = block`) or any other failure: `503 Service Unavailable`;
/// - admitted: the inner service runs while the lease is held. The lease is committed when
///   the inner service answers with a status below 500, and rolled back (the tokens given
///   back) when it fails or answers 5xx. With [`RateLimiterLayer::usage`] the answer's
///   headers say what the request really used, and the lease is adjusted to it first (an
///   LLM call charged an estimate of its tokens, committed at the real count).
///
/// Admitted and refused answers carry the `RateLimit-Policy` and `RateLimit` fields of the
/// IETF rate-limit headers draft (draft-ietf-httpapi-ratelimit-headers), one list item per
/// limit of the charge: `"rpm";q=100;w=60` (the bucket's limit: `q` whole tokens that refill
/// in `w` seconds) and `"rpm";r=41;t=36` (`r` tokens remain, the bucket is full again in `t`
/// seconds; on a refusal, a limit that did not fit has `t` equal to `Retry-After`). A quota
/// reports its allowance as `q`, its period as `w` (the time between the reset edges around
/// now, or the session window's length) and the time to its next reset as `t`.
///
/// An admitted answer describes each limit on the bucket that binds it: the entity's own,
/// or in a cascade its parent's for a limit only the parent declares or where the parent has
/// less left (see [`Lease::statuses`]). A refusal describes the bucket that refused. On a
/// sharded bucket `r` is estimated from the shard that answered, scaled to the whole bucket
/// ([`LimitStatus::bucket_available`]): an acquire draws its shard at random, so each shard
/// holds an even share of what is left.
///
/// ```no_run
/// # async fn demo(limiter: dynalimit::RateLimiter) {
/// use dynalimit::tower::{Charge, RateLimiterLayer};
/// let layer = RateLimiterLayer::new(limiter, |req: &http::Request<axum::body::Body>| {
///     let key = req.headers().get("x-api-key")?.to_str().ok()?;
///     Some(Charge::new(key, "search").consume("rpm", 1))
/// });
/// # let _ = layer; }
/// ```
pub struct RateLimiterLayer<B> {
    limiter: RateLimiter,
    key: Arc<KeyFn<B>>,
    limits: Option<Arc<[Limit]>>,
    usage: Option<Arc<UsageFn>>,
    in_flight: Option<Arc<Concurrency>>,
}

impl<B> Clone for RateLimiterLayer<B> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            key: Arc::clone(&self.key),
            limits: self.limits.clone(),
            usage: self.usage.clone(),
            in_flight: self.in_flight.clone(),
        }
    }
}

impl<B> fmt::Debug for RateLimiterLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiterLayer")
            .field("limiter", &self.limiter)
            .field("limits", &self.limits)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl<B> RateLimiterLayer<B> {
    /// A layer over `limiter` with `key` telling what each request consumes; the limits come
    /// from the stored configuration unless [`RateLimiterLayer::limits`] is set.
    pub fn new<F>(limiter: RateLimiter, key: F) -> Self
    where
        F: Fn(&Request<B>) -> Option<Charge> + Send + Sync + 'static,
    {
        Self {
            limiter,
            key: Arc::new(key),
            limits: None,
            usage: None,
            in_flight: None,
        }
    }

    /// Also holds a slot of the fleet-wide concurrency limit `limit` on the charge's entity
    /// and resource while the inner service handles the request ([`RateLimiter::hold`]),
    /// taken before the rate limits and given back when the inner service answers (or the
    /// request is refused). With every slot held the answer is `429` with `Retry-After` up to
    /// the first hold's expiry (a release usually comes sooner). The slot is kept alive while
    /// the inner service runs; a body streamed after the answer is not covered: a handler
    /// that streams holds its own [`Slot`](crate::Slot) in the stream.
    ///
    /// ```no_run
    /// # async fn demo(limiter: dynalimit::RateLimiter) -> Result<(), dynalimit::Error> {
    /// use dynalimit::Concurrency;
    /// use dynalimit::tower::{Charge, RateLimiterLayer};
    /// let layer = RateLimiterLayer::new(limiter, |req: &http::Request<axum::body::Body>| {
    ///     let key = req.headers().get("x-api-key")?.to_str().ok()?;
    ///     Some(Charge::new(key, "gpt-4").consume("rpm", 1))
    /// })
    /// .in_flight(Concurrency::new("streams", 5)?);
    /// # let _ = layer; Ok(()) }
    /// ```
    #[must_use]
    pub fn in_flight(mut self, limit: Concurrency) -> Self {
        self.in_flight = Some(Arc::new(limit));
        self
    }

    /// Reads what a request really used from its answer's headers (whole tokens per limit
    /// name, for limits of the charge; others are ignored with a warning) and adjusts the
    /// lease to it before the commit.
    ///
    /// ```no_run
    /// # async fn demo(limiter: dynalimit::RateLimiter) {
    /// use dynalimit::tower::{Charge, RateLimiterLayer};
    /// let layer = RateLimiterLayer::new(limiter, |req: &http::Request<axum::body::Body>| {
    ///     let key = req.headers().get("x-api-key")?.to_str().ok()?;
    ///     Some(Charge::new(key, "gpt-4").consume("rpm", 1).consume("tpm", 1000))
    /// })
    /// .usage(|headers| {
    ///     let used = headers.get("x-tokens-used").and_then(|v| v.to_str().ok()?.parse().ok());
    ///     used.map(|n| vec![("tpm".to_owned(), n)]).unwrap_or_default()
    /// });
    /// # let _ = layer; }
    /// ```
    #[must_use]
    pub fn usage<F>(mut self, usage: F) -> Self
    where
        F: Fn(&http::HeaderMap) -> Vec<(String, i64)> + Send + Sync + 'static,
    {
        self.usage = Some(Arc::new(usage));
        self
    }

    /// Uses these limits instead of the stored configuration.
    #[must_use]
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.limits = Some(limits.into_iter().collect());
        self
    }
}

impl<S, B> Layer<S> for RateLimiterLayer<B> {
    type Service = RateLimiterService<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimiterService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RateLimiterLayer`].
pub struct RateLimiterService<S, B> {
    inner: S,
    layer: RateLimiterLayer<B>,
}

impl<S: Clone, B> Clone for RateLimiterService<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, B> fmt::Debug for RateLimiterService<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

/// Seconds, rounded up, for `tokens` of `limit` to refill (in `u128`: tokens up to 10^15
/// times a period up to 10^9 seconds do not fit an `i64`); at most `i64::MAX`.
fn refill_seconds(limit: &Limit, tokens: i64) -> i64 {
    let amount = u128::from(limit.refill_amount().max(1).unsigned_abs());
    let period = u128::from(limit.refill_period_seconds().max(0).unsigned_abs());
    let tokens = u128::from(tokens.max(0).unsigned_abs());
    i64::try_from((tokens * period).div_ceil(amount)).unwrap_or(i64::MAX)
}

/// Whole seconds in `ms` milliseconds, rounded up; never negative.
fn seconds_up(ms: i64) -> i64 {
    ms.max(0).saturating_add(999) / 1000
}

/// A quota's period and the seconds until it resets, at `now` (epoch ms): a calendar
/// quota's period is the time between the reset edges around now (its longest cycle when an
/// edge is out of reach), a session quota's is its window, which resets when the live window
/// ends (none live: the whole allowance is there, 0). `None` for a limit that refills.
fn quota_period(status: &LimitStatus, now: i64) -> Option<(i64, i64)> {
    let limit = &status.bucket_limit;
    if let Some(reset) = limit.reset() {
        let next = reset.next_edge(now);
        let period = match (reset.prev_edge(now), next) {
            (Some(prev), Some(next)) => seconds_up(next.saturating_sub(prev)),
            _ => reset.cycle_seconds(),
        };
        let resets_in = next.map_or(period, |next| seconds_up(next.saturating_sub(now)));
        return Some((period, resets_in));
    }
    let window = limit.window_seconds()?;
    let resets_in = status
        .resets_at_ms
        .map_or(0, |end| seconds_up(end.saturating_sub(now)));
    Some((window, resets_in))
}

/// The `RateLimit-Policy` and `RateLimit` fields of `statuses` at `now` (epoch ms): each
/// bucket's limit and its estimated balance; `wait` is the `t` of a limit that did not fit
/// (the refusal's `Retry-After`).
fn ratelimit_fields(
    statuses: &[LimitStatus],
    wait: Option<u64>,
    now: i64,
) -> Option<(String, String)> {
    if statuses.is_empty() {
        return None;
    }
    let mut policy = Vec::with_capacity(statuses.len());
    let mut state = Vec::with_capacity(statuses.len());
    for st in statuses {
        let limit = &st.bucket_limit;
        let (name, quota) = (limit.name(), limit.capacity());
        let remaining = st.bucket_available().clamp(0, quota);
        let (window, full_in) = quota_period(st, now).unwrap_or_else(|| {
            (
                refill_seconds(limit, quota),
                refill_seconds(limit, quota - remaining),
            )
        });
        policy.push(format!("\"{name}\";q={quota};w={window}"));
        let reset = match wait {
            Some(seconds) if st.exceeded => i64::try_from(seconds).unwrap_or(i64::MAX),
            _ => full_in,
        };
        state.push(format!("\"{name}\";r={remaining};t={reset}"));
    }
    Some((policy.join(", "), state.join(", ")))
}

/// Adds the rate-limit fields of `statuses` at `now` to `response`.
fn with_ratelimit<R>(
    response: &mut Response<R>,
    statuses: &[LimitStatus],
    wait: Option<u64>,
    now: i64,
) {
    let Some((policy, state)) = ratelimit_fields(statuses, wait, now) else {
        return;
    };
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", state)] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(http::HeaderName::from_static(name), value);
        }
    }
}

/// The response answering a refused or failed acquire at `now` (epoch ms).
fn refusal<R: Default>(error: &Error, now: i64) -> Response<R> {
    let (status, retry_after) = match error {
        Error::Rejected(rejection) => (
            StatusCode::TOO_MANY_REQUESTS,
            rejection.retry_after_header(),
        ),
        Error::ResourceDisabled { .. } => (StatusCode::FORBIDDEN, None),
        Error::Invalid(_) => (StatusCode::BAD_REQUEST, None),
        Error::InvalidRequest(_) | Error::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, None),
        _ => (StatusCode::SERVICE_UNAVAILABLE, None),
    };
    let mut response = Response::new(R::default());
    *response.status_mut() = status;
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Error::Rejected(rejection) = error {
        with_ratelimit(&mut response, rejection.statuses(), retry_after, now);
    }
    response
}

/// Adjusts `lease` so that each limit in `used` counts what the request really used.
fn adjust_to_usage(lease: &Lease, used: &[(String, i64)]) {
    let charged = lease.consumed();
    for (name, amount) in used {
        let Some(already) = charged.get(name) else {
            tracing::warn!(limit = %name, "usage reported for a limit the request was not charged");
            continue;
        };
        if let Err(e) = lease.adjust(name, amount - already) {
            tracing::warn!(limit = %name, error = %e, "usage adjustment refused");
        }
    }
}

async fn settle(lease: Lease, succeeded: bool) {
    let outcome = if succeeded {
        lease.commit().await
    } else {
        lease.rollback().await
    };
    if let Err(e) = outcome {
        tracing::warn!(error = %e, succeeded, "settling a rate-limit lease failed");
    }
}

/// Gives `slot` back, if one is held.
async fn release(slot: Option<crate::Slot>) {
    if let Some(slot) = slot
        && let Err(e) = slot.release().await
    {
        tracing::warn!(error = %e, "releasing a concurrency slot failed; it frees at its expiry");
    }
}

impl<S, B, R> Service<Request<B>> for RateLimiterService<S, B>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The readied service handles this request; a fresh clone waits for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let key = (self.layer.key)(&request);
        let limiter = self.layer.limiter.clone();
        let clock = Arc::clone(limiter.repository().clock());
        let limits = self.layer.limits.clone();
        let usage = self.layer.usage.clone();
        let in_flight = self.layer.in_flight.clone();
        Box::pin(async move {
            let Some(key) = key else {
                return inner.call(request).await;
            };
            let slot = match &in_flight {
                Some(limit) => match limiter.hold(&key.entity_id, &key.resource, limit).await {
                    Ok(mut slot) => {
                        slot.keep_alive();
                        Some(slot)
                    }
                    Err(e) => return Ok(refusal(&e, clock.epoch_millis())),
                },
                None => None,
            };
            let mut acquire = limiter.acquire(&key.entity_id, &key.resource, key.consume);
            if let Some(limits) = limits {
                acquire = acquire.limits(limits.iter().cloned());
            }
            let lease = match acquire.await {
                Ok(lease) => lease,
                Err(e) => {
                    release(slot).await;
                    return Ok(refusal(&e, clock.epoch_millis()));
                }
            };
            let mut result = inner.call(request).await;
            let succeeded = matches!(&result, Ok(r) if !r.status().is_server_error());
            if let (Ok(response), true) = (&mut result, succeeded) {
                if let Some(usage) = &usage {
                    adjust_to_usage(&lease, &usage(response.headers()));
                }
                with_ratelimit(response, &lease.statuses(), None, clock.epoch_millis());
            }
            settle(lease, succeeded).await;
            release(slot).await;
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Zone;

    /// A status of one shard's share of `bucket` split `shards` ways.
    fn status(bucket: Limit, shards: u32, available: i64, exceeded: bool) -> LimitStatus {
        LimitStatus {
            limit: bucket.shard_share(shards),
            bucket_limit: bucket,
            available,
            requested: 1,
            exceeded,
            retry_after_ms: 0,
            overdrawn: false,
            resets_at_ms: None,
        }
    }

    #[test]
    fn fields_describe_each_limit_as_the_draft_spells_them() {
        let statuses = [
            status(Limit::per_minute("rpm", 100), 1, 41, false),
            status(
                Limit::per_minute("tpm", 10_000).with_burst(20_000),
                1,
                -5,
                true,
            ),
        ];
        let (policy, state) = ratelimit_fields(&statuses, Some(31), 0).unwrap();
        assert_eq!(policy, "\"rpm\";q=100;w=60, \"tpm\";q=20000;w=120");
        // 59 tokens at 100/min take 35.4 s (rounded up); tpm did not fit: Retry-After.
        assert_eq!(state, "\"rpm\";r=41;t=36, \"tpm\";r=0;t=31");
        let (_, admitted) = ratelimit_fields(&statuses[..1], None, 0).unwrap();
        assert_eq!(admitted, "\"rpm\";r=41;t=36");
        assert!(ratelimit_fields(&[], None, 0).is_none());
        assert_eq!(refill_seconds(&Limit::per_hour("rph", 7), 7), 3600);
        assert_eq!(refill_seconds(&Limit::per_hour("rph", 7), 0), 0);
    }

    #[test]
    fn a_request_the_table_refuses_is_a_server_error_not_an_outage() {
        let refused = dynalimit_repository::RepositoryError::InvalidRequest {
            operation: "UpdateItem",
            code: "ValidationException".into(),
            message: "too many operators".into(),
        };
        let response: Response<()> = refusal(&Error::InvalidRequest(refused), 0);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let down = Error::Unavailable {
            entity_id: "e".into(),
            resource: "r".into(),
            message: "down".into(),
        };
        let response: Response<()> = refusal(&down, 0);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn a_sharded_bucket_reports_its_limit_and_its_balance_scaled_from_the_shard() {
        // 100 a minute over 8 shards: a shard holds 12; one with 3 left stands for 25 of 100.
        let statuses = [status(Limit::per_minute("rpm", 100), 8, 3, false)];
        let (policy, state) = ratelimit_fields(&statuses, None, 0).unwrap();
        assert_eq!(policy, "\"rpm\";q=100;w=60");
        assert_eq!(state, "\"rpm\";r=25;t=45");
        // A full shard: the whole bucket, never more.
        let full = [status(Limit::per_minute("rpm", 100), 3, 33, false)];
        let (_, state) = ratelimit_fields(&full, None, 0).unwrap();
        assert_eq!(state, "\"rpm\";r=100;t=0");
    }

    #[test]
    fn a_quota_reports_its_period_and_the_time_to_its_next_reset() {
        let utc = Zone::utc();
        // 2026-03-10T18:00:00Z: the daily quota resets in 6 h, its month in 22 days.
        let now = 1_773_165_600_000;
        let day = Limit::quota_per_day("tpd", 1_000_000, utc.clone());
        let month = Limit::quota_per_month("tpmo", 5_000, utc);
        let statuses = [status(day, 2, 125_000, false), status(month, 1, 0, true)];
        let (policy, state) = ratelimit_fields(&statuses, Some(9), now).unwrap();
        assert_eq!(
            policy,
            "\"tpd\";q=1000000;w=86400, \"tpmo\";q=5000;w=2678400"
        );
        assert_eq!(state, "\"tpd\";r=250000;t=21600, \"tpmo\";r=0;t=9");
        // A session quota: its window; resetting when the live one ends, else full now.
        let mut session = status(Limit::session_quota("tps", 500, 3600), 1, 100, false);
        session.resets_at_ms = Some(now + 1_500);
        let (policy, state) = ratelimit_fields(std::slice::from_ref(&session), None, now).unwrap();
        assert_eq!(policy, "\"tps\";q=500;w=3600");
        assert_eq!(state, "\"tps\";r=100;t=2");
        session.resets_at_ms = None;
        let (_, state) = ratelimit_fields(&[session], None, now).unwrap();
        assert_eq!(state, "\"tps\";r=100;t=0");
    }

    #[test]
    fn the_largest_limits_never_overflow() {
        use dynalimit_core::limit::{MAX_PERIOD_SECONDS, MAX_TOKENS};
        let huge = Limit::custom("big", MAX_TOKENS, 1, MAX_PERIOD_SECONDS);
        // 10^15 tokens at one every 10^9 s: 10^24 s, beyond i64, reported as its maximum.
        assert_eq!(refill_seconds(&huge, MAX_TOKENS), i64::MAX);
        let statuses = [status(huge, 32, 0, false)];
        let (policy, state) = ratelimit_fields(&statuses, None, 0).unwrap();
        assert_eq!(policy, format!("\"big\";q={MAX_TOKENS};w={}", i64::MAX));
        assert_eq!(state, format!("\"big\";r=0;t={}", i64::MAX));
        assert_eq!(
            refill_seconds(
                &Limit::custom("x", MAX_TOKENS, MAX_TOKENS, MAX_PERIOD_SECONDS),
                1
            ),
            1
        );
    }
}
