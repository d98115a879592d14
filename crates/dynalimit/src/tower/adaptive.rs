//! The adaptive concurrency limit as a tower layer.

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tower_layer::Layer;
use tower_service::Service;

use super::BoxError;
use crate::adaptive::AdaptiveLimiter;

/// Applies an [`AdaptiveLimiter`] to a service.
///
/// By default a request waits in the limiter's queue for a permit (and may be shed by it);
/// [`AdaptiveLimitLayer::max_wait`] bounds the wait, and a zero wait refuses at once when the
/// limit is reached. The limiter is shared: clone it to read its metrics elsewhere.
#[derive(Debug, Clone)]
pub struct AdaptiveLimitLayer {
    limiter: AdaptiveLimiter,
    max_wait: Option<Duration>,
}

impl AdaptiveLimitLayer {
    /// A layer over `limiter`, waiting for a permit as long as the queue keeps the request.
    pub fn new(limiter: AdaptiveLimiter) -> Self {
        Self {
            limiter,
            max_wait: None,
        }
    }

    /// Waits at most `max_wait` for a permit; `Duration::ZERO` never waits.
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }
}

impl<S> Layer<S> for AdaptiveLimitLayer {
    type Service = AdaptiveLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptiveLimit {
            inner,
            limiter: self.limiter.clone(),
            max_wait: self.max_wait,
        }
    }
}

/// A service behind an [`AdaptiveLimiter`]; built by [`AdaptiveLimitLayer`].
///
/// The inner service must be `Clone`: the request waits for its permit inside the response
/// future, and the clone that was polled ready is the one that handles it.
#[derive(Debug, Clone)]
pub struct AdaptiveLimit<S> {
    inner: S,
    limiter: AdaptiveLimiter,
    max_wait: Option<Duration>,
}

impl<S> AdaptiveLimit<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The limiter.
    pub fn limiter(&self) -> &AdaptiveLimiter {
        &self.limiter
    }
}

impl<S, Req> Service<Req> for AdaptiveLimit<S>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        let limiter = self.limiter.clone();
        let max_wait = self.max_wait;
        Box::pin(async move {
            let permit = match max_wait {
                Some(d) if d.is_zero() => limiter.try_acquire(),
                Some(d) => limiter.acquire_timeout(d).await,
                None => limiter.acquire().await,
            }?;
            match ready.call(req).await {
                Ok(response) => {
                    permit.record();
                    Ok(response)
                }
                Err(e) => Err(e.into()),
            }
        })
    }
}
