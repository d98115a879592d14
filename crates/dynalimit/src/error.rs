//! The error type of the `dynalimit` crate.

use thiserror::Error;

use crate::Rejection;

/// Everything that can go wrong in this crate.
///
/// A rate-limit rejection is a value: [`Error::RateLimited`] carries a [`Rejection`] with the
/// retry-after and every limit's status, so `?` propagates it while callers that want to
/// answer `429` match on it (or call [`Error::rejection`]). Every other variant is an input or
/// infrastructure failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, detected before any I/O.
    #[error(transparent)]
    Invalid(#[from] dynalimit_core::CoreError),

    /// The request does not fit; nothing was consumed.
    #[error("{0}")]
    RateLimited(Rejection),

    /// Access to the resource is disabled for this entity (or its cascade parent). Never
    /// retried.
    #[error("resource {resource} is disabled for {entity_id}")]
    ResourceDisabled {
        /// The entity whose bucket is disabled (the parent when the parent's is).
        entity_id: String,
        /// The resource.
        resource: String,
    },

    /// No limits were given and none are configured for the pair.
    #[error("no limits configured for {entity_id}/{resource}")]
    NoLimits {
        /// The entity.
        entity_id: String,
        /// The resource.
        resource: String,
    },

    /// AWS refused the credentials or a permission. Raised under every `on_unavailable` mode:
    /// a permission problem is a deployment error, not an outage.
    #[cfg(feature = "dynamodb")]
    #[error("permission denied: {0}")]
    PermissionDenied(#[source] dynalimit_repository::RepositoryError),

    /// The limiter could not decide — DynamoDB failed, or a bucket or configuration carries a
    /// feature this client does not implement (it fails closed rather than guess) — and
    /// `on_unavailable` is `block`.
    #[error("rate limiter unavailable for {entity_id}/{resource}: {message}")]
    Unavailable {
        /// The entity.
        entity_id: String,
        /// The resource.
        resource: String,
        /// What failed.
        message: String,
    },

    /// A lease's commit or rollback could not be written completely.
    #[cfg(feature = "dynamodb")]
    #[error("lease write failed: {0}")]
    LeaseWrite(#[source] dynalimit_repository::RepositoryError),
}

impl Error {
    /// The rejection, when this is one.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Error::RateLimited(r) => Some(r),
            _ => None,
        }
    }

    /// Whether this is a rate-limit rejection.
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Error::RateLimited(_))
    }
}
