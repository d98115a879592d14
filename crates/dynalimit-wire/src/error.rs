//! What a request on the fast path can end in, short of an answer.

/// A request that got no answer the caller can use. The data plane maps each to its own
/// error (`RepositoryError`), and an error answer through the classification of
/// `dynalimit_core::failure`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The service could not be reached, or answered nothing usable, and nothing was applied:
    /// a connection refused, a timeout before sending, a provider that gave no credentials.
    #[error("unavailable: {message}")]
    Unavailable {
        /// What happened.
        message: String,
    },
    /// The identity the provider gave cannot sign a request (it is not an access key).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// What happened.
        message: String,
    },
    /// An attempt may have been applied and its answer was lost; it was not sent again.
    #[error("outcome unknown: {message}")]
    OutcomeUnknown {
        /// What happened.
        message: String,
    },
    /// The first attempt was refused for throughput before this call, and no retry is left.
    #[error("throttled: {message}")]
    Throttled {
        /// What happened.
        message: String,
    },
    /// The service's error answer, once the retries are spent.
    #[error("{code} ({status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error code (`ProvisionedThroughputExceededException`, …).
        code: String,
        /// The service's message.
        message: String,
    },
}
