//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! The table format of dynalimit, in one place: every key, attribute name, expression rule and
//! item codec of the DynamoDB table, with no I/O.
//!
//! The format is zae-limiter 0.17's (core profile), so Python and Rust services can share one
//! table; `shared/reference/table-format.md` is the contract, and each module names the
//! section it implements. The repository (every request of a service), the limiter's shared
//! pause, the aggregator (stream records, snapshots, watermarks) and the tests read and write
//! items only through this crate: no attribute name or key fragment is spelled anywhere else
//! in the workspace (a test of the workspace checks it).
//!
//! | module | what |
//! |---|---|
//! | [`attr`] | attribute names, per-limit attribute builders, the limit-name rule they impose |
//! | [`keys`] | partition and sort keys, index keys, key parsing |
//! | [`item`] | the raw item type and typed reads of attribute values |
//! | [`expr`] | positional expressions: how every request names attributes and values |
//! | [`index`] | whether an index query's result belongs to the namespace that asked |
//! | [`bucket`] | bucket items: key, image, create item, owner stamp, pause stamp |
//! | [`config`] | limit configuration at four levels and its registries |
//! | [`entity`] | entity metadata |
//! | [`namespace`] | the namespace registry |
//! | [`audit`] | audit events |
//! | [`operation`] | the operation records of resets and top-ups |
//! | [`refusal`] | the minutes in which a limit refused acquires, for refusal alerts |
//! | [`usage`] | usage snapshots, their windows and keys, the aggregator's watermarks |
//! | [`schedule`] | the compact storage encoding of parameter and reset schedules |
//! | [`schema`] | the table's keys, indexes, TTL attribute, stream and billing |
//! | [`version`] | the version record and the compatibility gate |
//!
//! ```
//! use dynalimit_format::{attr, keys};
//!
//! assert_eq!(keys::bucket_pk("a7x3kq", "u1", "gpt-4", 0), "a7x3kq/BUCKET#u1#gpt-4#0");
//! assert_eq!(attr::bucket_limit("rpm", attr::BucketField::Tc), "b_rpm_tc");
//! ```

pub mod alert;
pub mod attr;
pub mod audit;
pub mod bucket;
pub mod config;
pub mod entity;
mod error;
pub mod expr;
pub mod index;
pub mod item;
pub mod keys;
pub mod namespace;
pub mod operation;
pub mod refusal;
pub mod schedule;
pub mod schema;
pub mod slot;
pub mod usage;
pub mod version;

pub use error::FormatError;
pub use item::Item;
