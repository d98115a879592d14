//! The error type of the demo.

use dynalimit_local::LocalError;
use dynalimit_repository::RepositoryError;

/// Everything that can stop the demo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is out of range; found before any I/O.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option (`--seconds`, `--tasks`).
        option: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },

    /// The stack or the namespace name is invalid; found before any I/O.
    #[error(transparent)]
    Invalid(#[from] dynalimit_core::CoreError),

    /// DynamoDB Local could not be installed or started.
    #[error("starting DynamoDB Local: {0}")]
    Local(#[from] LocalError),

    /// A request to the table failed (opening it, entities, limits, bucket reads).
    #[error(transparent)]
    Repository(#[from] RepositoryError),

    /// An acquire, adjust or commit failed for a reason other than a rejection.
    #[error(transparent)]
    Limiter(#[from] dynalimit::Error),

    /// A task of the demo (a simulated client, the progress display, the emulator's start)
    /// panicked or was cancelled.
    #[error("{task} stopped: {source}")]
    Task {
        /// Which task.
        task: &'static str,
        /// Why it stopped.
        source: tokio::task::JoinError,
    },
}
