//! The aggregator's error type.

use dynalimit_repository::RepositoryError;

/// What can stop the aggregator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AggregatorError {
    /// A setting is missing or malformed.
    #[error("aggregator configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// A DynamoDB request failed.
    #[error(transparent)]
    Repository(#[from] RepositoryError),
    /// A request of the stream runner (DescribeTable, or a DynamoDB Streams call) failed.
    #[error("{operation} failed: {message}")]
    Streams {
        /// The operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },
    /// A request to the audit archive's bucket failed.
    #[error("audit archive: {operation} failed: {message}")]
    Archive {
        /// The S3 operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },
    /// The table has no stream to read.
    #[error("table {table:?} has no stream; it must be created with NEW_AND_OLD_IMAGES")]
    NoStream {
        /// The table name.
        table: String,
    },
}
