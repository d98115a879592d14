//! The limits a LimitSet is built from: rate, call and resource limits, and [`SetLimit`], any
//! of the three.

use std::fmt;
use std::time::Duration;

use dynalimit_core::algorithms::{Algorithm, Window};

use crate::Error;

/// The key every [`CallLimit`] has.
pub const CALL_COUNT_KEY: &str = "call_count";

/// How a window is given to a builder: seconds, a name (`"minute"`, `"per_hour"`, `"wk"`, …),
/// a [`Window`] or a [`Duration`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WindowSpec {
    /// A number of seconds.
    Seconds(f64),
    /// A named window, parsed with [`Window`]'s `FromStr`.
    Named(String),
    /// A window already checked.
    Window(Window),
}

impl From<f64> for WindowSpec {
    fn from(seconds: f64) -> Self {
        WindowSpec::Seconds(seconds)
    }
}

impl From<i32> for WindowSpec {
    fn from(seconds: i32) -> Self {
        WindowSpec::Seconds(f64::from(seconds))
    }
}

impl From<u32> for WindowSpec {
    fn from(seconds: u32) -> Self {
        WindowSpec::Seconds(f64::from(seconds))
    }
}

impl From<&str> for WindowSpec {
    fn from(name: &str) -> Self {
        WindowSpec::Named(name.to_owned())
    }
}

impl From<Window> for WindowSpec {
    fn from(window: Window) -> Self {
        WindowSpec::Window(window)
    }
}

impl From<Duration> for WindowSpec {
    fn from(duration: Duration) -> Self {
        WindowSpec::Seconds(duration.as_secs_f64())
    }
}

impl WindowSpec {
    fn resolve(self) -> Result<Window, dynalimit_core::CoreError> {
        match self {
            WindowSpec::Seconds(seconds) => Window::seconds(seconds),
            WindowSpec::Named(name) => name.parse(),
            WindowSpec::Window(window) => Ok(window),
        }
    }
}

/// `capacity` units per `window` under an [`Algorithm`], for a key such as `"tokens"`.
///
/// A plain rate limit is only taken when a request names it, and must then be given its actual
/// usage with [`Acquisition::update`](super::Acquisition::update) before release.
///
/// ```
/// use dynalimit::limitset::{Algorithm, RateLimit};
///
/// let tokens = RateLimit::builder("tokens")
///     .capacity(1000)
///     .window("minute")
///     .algorithm(Algorithm::TokenBucket)
///     .build()?;
/// assert_eq!(tokens.window().as_secs_f64(), 60.0);
/// assert_eq!(tokens.params_signature(), "c1000w60tok");
/// # Ok::<(), dynalimit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    key: String,
    capacity: f64,
    window: Window,
    algorithm: Algorithm,
}

impl RateLimit {
    /// A builder for the limit named `key`.
    pub fn builder(key: impl Into<String>) -> RateLimitBuilder {
        RateLimitBuilder {
            key: key.into(),
            capacity: None,
            window: None,
            per: None,
            algorithm: Algorithm::DEFAULT,
        }
    }

    /// `capacity` per `window` with the default algorithm ([`Algorithm::DEFAULT`]).
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] as for [`RateLimitBuilder::build`].
    pub fn new(
        key: impl Into<String>,
        capacity: impl Into<f64>,
        window: impl Into<WindowSpec>,
    ) -> Result<RateLimit, Error> {
        RateLimit::builder(key)
            .capacity(capacity)
            .window(window)
            .build()
    }

    /// The same limit under another algorithm.
    #[must_use]
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> RateLimit {
        self.algorithm = algorithm;
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Units per window. May be fractional or infinite (an infinite capacity admits everything).
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// The window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// `capacity / window`, in units per second.
    pub fn rate_per_second(&self) -> f64 {
        self.capacity / self.window.as_secs_f64()
    }

    /// A compact text of the parameters: `c{capacity}w{window seconds}{first three letters of
    /// the algorithm}`, numbers printed without a fraction when whole (`"c300w60gcr"`).
    pub fn params_signature(&self) -> String {
        fn number(value: f64) -> String {
            if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
                format!("{value:.0}")
            } else {
                format!("{value}")
            }
        }
        let algorithm: String = self.algorithm.name().chars().take(3).collect();
        format!(
            "c{}w{}{algorithm}",
            number(self.capacity),
            number(self.window.as_secs_f64())
        )
    }
}

/// Builds a [`RateLimit`]; see [`RateLimit::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RateLimitBuilder {
    key: String,
    capacity: Option<f64>,
    window: Option<WindowSpec>,
    per: Option<WindowSpec>,
    algorithm: Algorithm,
}

impl RateLimitBuilder {
    /// Units per window: greater than zero; fractions and `f64::INFINITY` are accepted.
    pub fn capacity(mut self, capacity: impl Into<f64>) -> Self {
        self.capacity = Some(capacity.into());
        self
    }

    /// The window: seconds, a name or a [`Window`].
    pub fn window(mut self, window: impl Into<WindowSpec>) -> Self {
        self.window = Some(window.into());
        self
    }

    /// Another name for [`RateLimitBuilder::window`] (`per("minute")`); giving both is an error.
    pub fn per(mut self, window: impl Into<WindowSpec>) -> Self {
        self.per = Some(window.into());
        self
    }

    /// The algorithm; [`Algorithm::DEFAULT`] (sliding window) when not given.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The limit.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] when the capacity is missing, zero, negative or NaN; when the
    /// window is missing, not positive, or an unknown name (the message lists the valid
    /// names); when both `window` and `per` are given.
    pub fn build(self) -> Result<RateLimit, Error> {
        let key = self.key;
        let invalid = |reason: String| Error::InvalidLimit {
            key: key.clone(),
            reason,
        };
        let window = match (self.window, self.per) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give either `window` or its alias `per`, not both".into(),
                ));
            }
            (Some(w), None) | (None, Some(w)) => w,
            (None, None) => return Err(invalid("a window (or `per`) is required".into())),
        };
        let window = window.resolve().map_err(|e| invalid(e.to_string()))?;
        let capacity = self
            .capacity
            .ok_or_else(|| invalid("a capacity is required".into()))?;
        if capacity.is_nan() || capacity <= 0.0 {
            return Err(invalid(format!(
                "capacity {capacity} must be greater than 0"
            )));
        }
        Ok(RateLimit {
            key,
            capacity,
            window,
            algorithm: self.algorithm,
        })
    }
}

/// A rate limit on the number of calls, always keyed [`CALL_COUNT_KEY`].
///
/// Every acquisition takes one call automatically (no update needed). A request may name
/// `call_count` with a larger amount (a batch of calls); that amount must then be updated with
/// the calls actually made, like a plain rate limit.
///
/// ```
/// use dynalimit::limitset::{CallLimit, CALL_COUNT_KEY};
///
/// let calls = CallLimit::new(100, "minute")?;
/// assert_eq!(calls.rate().key(), CALL_COUNT_KEY);
/// # Ok::<(), dynalimit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CallLimit(RateLimit);

impl CallLimit {
    /// `capacity` calls per `window` with the default algorithm.
    ///
    /// # Errors
    /// As for [`RateLimitBuilder::build`].
    pub fn new(capacity: impl Into<f64>, window: impl Into<WindowSpec>) -> Result<Self, Error> {
        RateLimit::new(CALL_COUNT_KEY, capacity, window).map(CallLimit)
    }

    /// A call limit from a rate limit's capacity, window and algorithm; its key is replaced by
    /// [`CALL_COUNT_KEY`].
    pub fn from_rate(mut rate: RateLimit) -> Self {
        rate.key = CALL_COUNT_KEY.to_owned();
        CallLimit(rate)
    }

    /// The same limit under another algorithm.
    #[must_use]
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        CallLimit(self.0.with_algorithm(algorithm))
    }

    /// The underlying rate limit.
    pub fn rate(&self) -> &RateLimit {
        &self.0
    }
}

/// At most `capacity` units held at once (connections, worker slots); held units come back on
/// release. No time component, no update needed.
///
/// ```
/// use dynalimit::limitset::ResourceLimit;
///
/// assert!(ResourceLimit::new("connections", 10).is_ok());
/// assert!(ResourceLimit::new("connections", 0).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimit {
    key: String,
    capacity: u64,
}

impl ResourceLimit {
    /// A resource of `capacity` units.
    ///
    /// # Errors
    /// [`Error::InvalidLimit`] when `capacity` is 0 (it must be >= 1).
    pub fn new(key: impl Into<String>, capacity: u64) -> Result<Self, Error> {
        let key = key.into();
        if capacity == 0 {
            return Err(Error::InvalidLimit {
                key,
                reason: "capacity must be >= 1".into(),
            });
        }
        Ok(ResourceLimit { key, capacity })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Units that can be held at once.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// One limit of a LimitSet. Limits are passive definitions: they are acquired only through a
/// [`LimitSet`](super::LimitSet).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SetLimit {
    /// A plain rate limit.
    Rate(RateLimit),
    /// The call-count limit.
    Call(CallLimit),
    /// A held resource.
    Resource(ResourceLimit),
}

impl SetLimit {
    /// The key.
    pub fn key(&self) -> &str {
        match self {
            SetLimit::Rate(rate) | SetLimit::Call(CallLimit(rate)) => rate.key(),
            SetLimit::Resource(resource) => resource.key(),
        }
    }

    /// The capacity (per window for rate limits).
    pub fn capacity(&self) -> f64 {
        match self {
            SetLimit::Rate(rate) | SetLimit::Call(CallLimit(rate)) => rate.capacity(),
            SetLimit::Resource(resource) => resource.capacity() as f64,
        }
    }

    /// The rate part, for rate and call limits.
    pub fn as_rate(&self) -> Option<&RateLimit> {
        match self {
            SetLimit::Rate(rate) | SetLimit::Call(CallLimit(rate)) => Some(rate),
            SetLimit::Resource(_) => None,
        }
    }

    /// Whether amounts must be whole numbers (counting algorithms and resources).
    pub(crate) fn whole_amounts_only(&self) -> bool {
        self.as_rate()
            .is_none_or(|rate| !rate.algorithm().accepts_fractions())
    }
}

impl From<RateLimit> for SetLimit {
    fn from(rate: RateLimit) -> Self {
        SetLimit::Rate(rate)
    }
}

impl From<CallLimit> for SetLimit {
    fn from(call: CallLimit) -> Self {
        SetLimit::Call(call)
    }
}

impl From<ResourceLimit> for SetLimit {
    fn from(resource: ResourceLimit) -> Self {
        SetLimit::Resource(resource)
    }
}

impl fmt::Display for SetLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetLimit::Rate(rate) | SetLimit::Call(CallLimit(rate)) => write!(
                f,
                "{} {}/{} ({})",
                rate.key(),
                rate.capacity(),
                rate.window(),
                rate.algorithm()
            ),
            SetLimit::Resource(resource) => {
                write!(f, "{} {} held", resource.key(), resource.capacity())
            }
        }
    }
}
