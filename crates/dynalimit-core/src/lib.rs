//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! Pure domain logic of dynalimit: no I/O.
//!
//! Everything here is deterministic and takes time from an injected [`Clock`] ([`time`], the
//! one time abstraction of the workspace), so the decisions the DynamoDB data plane makes can
//! be tested without DynamoDB and without sleeps.

pub mod adaptive;
pub mod algorithms;
pub mod bounded;
pub mod bounds;
pub mod bucket;
pub mod decide;
pub mod error;
pub mod failure;
pub mod ids;
pub mod limit;
pub mod operation;
pub mod schedule;
pub mod throttling;
pub mod time;
mod units;

pub use error::CoreError;
pub use limit::Limit;
pub use time::{Clock, ManualClock, SystemClock};
