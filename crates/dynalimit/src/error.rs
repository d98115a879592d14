//! The error type of the `dynalimit` crate.

use thiserror::Error;

/// Everything that can go wrong in this crate, other than a rate-limit rejection (a rejection
/// is a value, not an error).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, detected before any I/O.
    #[error(transparent)]
    Invalid(#[from] dynalimit_core::CoreError),
    /// The shared pause store (see [`crate::backoff::PauseStore`]) failed.
    #[error("pause store: {0}")]
    PauseStore(#[source] Box<dyn std::error::Error + Send + Sync>),
}
