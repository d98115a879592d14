//! The DynamoDB [`RateLimiter`] as a tower layer for HTTP services.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::{Error, Lease, Limit, RateLimiter};

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

/// Applies a [`RateLimiter`] to an HTTP service.
///
/// For each request, the key function names the bucket and the amounts (`None` lets the
/// request through unlimited). The request is then acquired:
///
/// - refused ([`Error::Rejected`]): `429 Too Many Requests` with `Retry-After` in whole
///   seconds, rounded up past the wait (`⌊retry_after⌋ + 1`), and the inner service is not
///   called;
/// - resource disabled for the entity: `403 Forbidden`; bad input (an invalid key): `400 Bad
///   Request`; the limiter unavailable (under `on_unavailable = block`) or any other failure:
///   `503 Service Unavailable`;
/// - admitted: the inner service runs while the lease is held. The lease is committed when
///   the inner service answers with a status below 500, and rolled back (the tokens given
///   back) when it fails or answers 5xx.
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
}

impl<B> Clone for RateLimiterLayer<B> {
    fn clone(&self) -> Self {
        Self {
            limiter: self.limiter.clone(),
            key: Arc::clone(&self.key),
            limits: self.limits.clone(),
        }
    }
}

impl<B> fmt::Debug for RateLimiterLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiterLayer")
            .field("limiter", &self.limiter)
            .field("limits", &self.limits)
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
        }
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

/// The response answering a refused or failed acquire.
fn refusal<R: Default>(error: &Error) -> Response<R> {
    let (status, retry_after) = match error {
        Error::Rejected(rejection) => (
            StatusCode::TOO_MANY_REQUESTS,
            rejection.retry_after_header(),
        ),
        Error::ResourceDisabled { .. } => (StatusCode::FORBIDDEN, None),
        Error::Invalid(_) => (StatusCode::BAD_REQUEST, None),
        _ => (StatusCode::SERVICE_UNAVAILABLE, None),
    };
    let mut response = Response::new(R::default());
    *response.status_mut() = status;
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
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
        let limits = self.layer.limits.clone();
        Box::pin(async move {
            let Some(key) = key else {
                return inner.call(request).await;
            };
            let mut acquire = limiter.acquire(&key.entity_id, &key.resource, key.consume);
            if let Some(limits) = limits {
                acquire = acquire.limits(limits.iter().cloned());
            }
            let lease = match acquire.await {
                Ok(lease) => lease,
                Err(e) => return Ok(refusal(&e)),
            };
            let result = inner.call(request).await;
            let succeeded = matches!(&result, Ok(r) if !r.status().is_server_error());
            settle(lease, succeeded).await;
            result
        })
    }
}
