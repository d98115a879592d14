//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! Pure domain logic of dynalimit: no I/O.
//!
//! Everything here is deterministic and takes time from an injected [`Clock`] ([`time`], the
//! one time abstraction of the workspace), so it can be tested without DynamoDB and without
//! sleeps. The acquire's decisions over a bucket image live beside the store that sends them,
//! in `dynalimit_repository::bucket::decide`.

pub mod adaptive;
pub mod algorithms;
pub mod bounded;
pub mod bounds;
pub mod bucket;
pub mod concurrency;
pub mod error;
pub mod failure;
pub mod ids;
pub mod image;
pub mod limit;
pub mod operation;
pub mod schedule;
pub mod time;
mod units;

pub use concurrency::Concurrency;
pub use error::CoreError;
pub use limit::Limit;
pub use time::{Clock, ManualClock, SystemClock};
