//! The error type of the repository crate.

use thiserror::Error;

/// A DynamoDB failure, classified for retry decisions.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RepositoryError {
    /// The caller lacks an IAM permission (`AccessDeniedException`); never an outage.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// DynamoDB throttled the request.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Anything else that kept the request from completing.
    #[error("dynamodb unavailable: {0}")]
    Unavailable(String),
    /// Bad input, detected before any I/O.
    #[error(transparent)]
    Invalid(#[from] dynalimit_core::CoreError),
}
