//! The DynamoDB data plane of dynalimit.

pub mod bucket;
pub mod error;

pub use error::RepositoryError;
