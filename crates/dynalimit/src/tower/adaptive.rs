//! The adaptive concurrency limit as a tower layer.

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tower_layer::Layer;
use tower_service::Service;

/// The error type of the services of [`crate::tower`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

use crate::adaptive::{AdaptiveLimiter, Priority};

/// Tells the priority a request waits for its permit with (see
/// [`AdaptiveLimiter::acquire_with_priority`]); `None` is the limiter's default. Any
/// `Fn(&Req) -> Option<Priority>` is one.
pub trait RequestPriority<Req> {
    /// The priority of `request`.
    fn priority(&self, request: &Req) -> Option<Priority>;
}

impl<Req, F: Fn(&Req) -> Option<Priority>> RequestPriority<Req> for F {
    fn priority(&self, request: &Req) -> Option<Priority> {
        self(request)
    }
}

/// The default: every request at the limiter's default priority.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultPriority;

impl<Req> RequestPriority<Req> for DefaultPriority {
    fn priority(&self, _: &Req) -> Option<Priority> {
        None
    }
}

/// Tells whether a successful response is in fact the downstream refusing the request
/// (a 429 or 503, say): such a response is recorded as a loss signal
/// ([`Permit::record_overload`](crate::adaptive::Permit::record_overload)) instead of a
/// round-trip sample. Any `Fn(&Response) -> bool` is one.
pub trait OverloadClassifier<Res> {
    /// `true` when `response` reports an overload.
    fn is_overload(&self, response: &Res) -> bool;
}

impl<Res, F: Fn(&Res) -> bool> OverloadClassifier<Res> for F {
    fn is_overload(&self, response: &Res) -> bool {
        self(response)
    }
}

/// The default classifier: no response is an overload.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverOverloaded;

impl<Res> OverloadClassifier<Res> for NeverOverloaded {
    fn is_overload(&self, _: &Res) -> bool {
        false
    }
}

/// Applies an [`AdaptiveLimiter`] to a service.
///
/// By default a request waits in the limiter's queue for a permit (and may be shed by it);
/// [`AdaptiveLimiterLayer::max_wait`] bounds the wait, and a zero wait refuses at once when the
/// limit is reached. The limiter is shared: clone it to read its metrics elsewhere.
#[derive(Debug, Clone)]
pub struct AdaptiveLimiterLayer<C = NeverOverloaded, P = DefaultPriority> {
    limiter: AdaptiveLimiter,
    max_wait: Option<Duration>,
    classifier: C,
    priority: P,
}

impl AdaptiveLimiterLayer {
    /// A layer over `limiter`, waiting for a permit as long as the queue keeps the request.
    pub fn new(limiter: AdaptiveLimiter) -> Self {
        Self {
            limiter,
            max_wait: None,
            classifier: NeverOverloaded,
            priority: DefaultPriority,
        }
    }
}

impl<C, P> AdaptiveLimiterLayer<C, P> {
    /// Waits at most `max_wait` for a permit; `Duration::ZERO` never waits.
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Records responses for which `classifier` answers `true` as overloads (loss signals)
    /// rather than samples, e.g. `|r: &http::Response<_>| r.status() == 429`.
    pub fn overload_when<K>(self, classifier: K) -> AdaptiveLimiterLayer<K, P> {
        AdaptiveLimiterLayer {
            limiter: self.limiter,
            max_wait: self.max_wait,
            classifier,
            priority: self.priority,
        }
    }

    /// Gives each request the priority `priority` tells (a header, the route, the caller's
    /// plan): under overload the limiter's prioritizer sheds low priorities first.
    ///
    /// ```
    /// use dynalimit::adaptive::{AdaptiveLimiter, Priority};
    /// use dynalimit::tower::AdaptiveLimiterLayer;
    /// let layer = AdaptiveLimiterLayer::new(AdaptiveLimiter::builder().build().unwrap())
    ///     .priority_by(|req: &http::Request<()>| match req.headers().get("x-priority")?.to_str().ok()? {
    ///         "batch" => Some(Priority::Low),
    ///         "interactive" => Some(Priority::High),
    ///         _ => None,
    ///     });
    /// # let _ = layer;
    /// ```
    pub fn priority_by<Q>(self, priority: Q) -> AdaptiveLimiterLayer<C, Q> {
        AdaptiveLimiterLayer {
            limiter: self.limiter,
            max_wait: self.max_wait,
            classifier: self.classifier,
            priority,
        }
    }
}

impl<S, C: Clone, P: Clone> Layer<S> for AdaptiveLimiterLayer<C, P> {
    type Service = AdaptiveLimiterService<S, C, P>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptiveLimiterService {
            inner,
            limiter: self.limiter.clone(),
            max_wait: self.max_wait,
            classifier: self.classifier.clone(),
            priority: self.priority.clone(),
        }
    }
}

/// A service behind an [`AdaptiveLimiter`]; built by [`AdaptiveLimiterLayer`].
///
/// The inner service must be `Clone`: the request waits for its permit inside the response
/// future, and the clone that was polled ready is the one that handles it.
#[derive(Debug, Clone)]
pub struct AdaptiveLimiterService<S, C = NeverOverloaded, P = DefaultPriority> {
    inner: S,
    limiter: AdaptiveLimiter,
    max_wait: Option<Duration>,
    classifier: C,
    priority: P,
}

impl<S, C, P> AdaptiveLimiterService<S, C, P> {
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

impl<S, C, P, Req> Service<Req> for AdaptiveLimiterService<S, C, P>
where
    S: Service<Req> + Clone + Send + 'static,
    C: OverloadClassifier<S::Response> + Clone + Send + 'static,
    P: RequestPriority<Req>,
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
        let classifier = self.classifier.clone();
        let priority = self.priority.priority(&req);
        Box::pin(async move {
            let permit = match (priority, max_wait) {
                (Some(p), wait) => limiter.acquire_with_priority(p, wait).await,
                (None, Some(d)) if d.is_zero() => limiter.try_acquire(),
                (None, Some(d)) => limiter.acquire_timeout(d).await,
                (None, None) => limiter.acquire().await,
            }?;
            match ready.call(req).await {
                Ok(response) => {
                    if classifier.is_overload(&response) {
                        permit.record_overload();
                    } else {
                        permit.record();
                    }
                    Ok(response)
                }
                Err(e) => Err(e.into()),
            }
        })
    }
}
