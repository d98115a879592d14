//! Pure domain logic of dynalimit: no I/O, no runtime.
//!
//! Everything here is deterministic and takes time from an injected [`Clock`], so the
//! decisions the DynamoDB data plane makes can be tested without DynamoDB and without sleeps.

pub mod adaptive;
pub mod algorithms;
pub mod bucket;
pub mod clock;
pub mod decide;
pub mod error;
pub mod ids;
pub mod limit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::CoreError;
pub use limit::Limit;
