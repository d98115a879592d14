//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! The DynamoDB data plane of dynalimit.
//!
//! A [`Repository`] owns one namespace of one table: it creates the table when it is missing,
//! keeps the namespace registry and the version record, and reads and writes entities, limit
//! configuration, buckets, audit events and usage snapshots in the zae-limiter 0.17 table
//! format ([`dynalimit_format`]), so Python and Rust services can share one table.
//!
//! Every `UpdateItem` of the bucket engine takes a fast path that signs the request and hands
//! it to the SDK client's own HTTP connector, when the client allows it
//! ([`Repository::fast_path`]).
//!
//! | item | for |
//! |---|---|
//! | [`Repository`], [`RepositoryBuilder`], [`RepositoryError`] | services and operators |
//! | [`OperationOptions`], [`BucketOperation`] | an operator's reset or top-up of a bucket ([`Repository::reset_bucket`], [`Repository::top_up`]) |
//! | [`acquire`] | one limiter's acquire against the table ([`acquire::Engine`]): the seam the `dynalimit` limiter calls |
//! | [`bucket`] | the bucket store the engine drives: its plans (`bucket::decide`, no I/O, private to the crate) and the reads and writes that carry them out (the engine, the aggregator, the benchmarks) |
//! | [`aws`] | AWS settings, loaded as the AWS CLI loads them, for every client dynalimit builds |
//! | [`RequestCounter`] | counting the requests a client sends (tests, the benchmark) |
//! | [`FastPath`], [`send_update`] | the acquire's transport (`dynalimit-wire`), and one raw `UpdateItem` through it (the benchmark) |
//! | `RepositoryBuilder::in_memory` (feature `memory`) | opening on the in-process table store of `dynalimit-memory`, for tests and single-process use |
//!
//! A missing table is created directly on an emulator (DynamoDB Local, LocalStack). On AWS it
//! is provisioned as the CloudFormation stack of `dynalimit-stack` when the cargo feature
//! `provision` is on (the `dynalimit` crate turns it on by default); without it, deploy the
//! stack with `dynalimit deploy` first.
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

pub mod acquire;
mod alerts;
mod audit;
pub mod aws;
mod batch;
pub mod bucket;
mod config;
mod entity;
mod error;
mod metrics;
mod namespace;
mod operation;
mod page;
mod refusals;
mod repository;
pub mod retry;
mod schema;
mod slots;
mod usage;
mod wire;

pub use audit::AuditPage;
pub use batch::batch_get_items;
pub use config::{CacheStats, ResolvedLimits};
pub use dynalimit_core::operation::OperationKind;
pub use dynalimit_format::FormatError;
pub use dynalimit_format::audit::AuditEvent;
pub use dynalimit_format::config::{Access, ConfigLevel, DisabledFlag, LimitConfig, OnUnavailable};
pub use dynalimit_format::entity::{Entity, NewEntity};
pub use dynalimit_format::namespace::NamespaceInfo;
pub use dynalimit_format::usage::UsageSnapshot;
pub use dynalimit_format::version::VersionRecord;
pub use dynalimit_wire::{FastPath, MAX_RESPONSE_BYTES};
pub use error::RepositoryError;
pub use metrics::{
    CONFIG_CACHE, CONTENTION_RETRIES, DYNAMODB_REQUESTS, FAST_PATH, FOREIGN_INDEX_ITEMS,
    RequestCounter, UNKNOWN_OUTCOMES, counting_requests,
};
pub use operation::{BucketOperation, OPERATION_ATTEMPTS, OperationOptions};
pub use refusals::refusal_minutes;
pub use repository::{
    DEFAULT_BUCKET_TTL_MULTIPLIER, DEFAULT_CONFIG_CACHE_TTL, DEFAULT_NAMESPACE, DEFAULT_STACK,
    Repository, RepositoryBuilder,
};
pub use schema::create_table;
pub use slots::{HeldSlot, SlotTake};
pub use usage::{UsagePage, UsageQuery, UsageSummary};
pub use wire::send_update;
