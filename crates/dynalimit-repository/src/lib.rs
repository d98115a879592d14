//! The DynamoDB data plane of dynalimit.
//!
//! A [`Repository`] owns one namespace of one table: it creates the table with the schema of
//! [`schema::TABLE_SCHEMA`], keeps the namespace registry and the version record, and reads and
//! writes entities, limit configuration and buckets in the zae-limiter 0.17 table format, so
//! Python and Rust services can share one table.
//!
//! Every `UpdateItem` of the bucket engine goes through [`wire`], a direct transport that
//! signs and sends the request without the SDK's orchestrator, when the client allows it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dynalimit_repository::RepositoryError> {
//! use dynalimit_repository::Repository;
//!
//! let repo = Repository::builder()
//!     .endpoint_url("http://127.0.0.1:8000")
//!     .namespace("tenant-alpha")
//!     .open()
//!     .await?;
//! repo.ping().await?;
//! # Ok(()) }
//! ```

pub mod audit;
pub mod aws;
pub mod bucket;
pub mod config;
pub mod entity;
pub mod error;
pub mod item;
pub mod keys;
pub mod local;
pub mod metrics;
pub mod namespace;
mod repository;
pub mod retry;
pub mod schema;
pub mod stack;
pub mod usage;
pub mod version;
pub mod wire;

pub use audit::{AuditEvent, AuditPage};
pub use aws::{is_loopback, local_credentials};
pub use config::{
    CacheStats, ConfigLevel, DisabledFlag, LimitConfig, OnUnavailable, ResolvedLimits,
};
pub use entity::{Entity, NewEntity};
pub use error::RepositoryError;
pub use namespace::NamespaceInfo;
pub use repository::{
    DEFAULT_BUCKET_TTL_MULTIPLIER, DEFAULT_CONFIG_CACHE_TTL, DEFAULT_NAMESPACE, DEFAULT_STACK,
    Repository, RepositoryBuilder,
};
pub use usage::{UsagePage, UsageQuery, UsageSnapshot, UsageSummary};
pub use version::VersionRecord;
