//! LimitSet: several in-process or distributed limits acquired atomically.
//!
//! - Limits: [`RateLimit`] (`capacity` per window under an [`Algorithm`]; the default is
//!   [`Algorithm::DEFAULT`], the sliding window), [`CallLimit`] (a rate limit on calls, taken
//!   once per acquisition automatically) and [`ResourceLimit`] (units held until release).
//! - [`LimitSet`]: partial requests with auto-included call and resource limits, validation
//!   before any waiting, atomic acquisition, FIFO waiting (blocking or async) woken at the
//!   computed instant, RAII [`Acquisition`] guards with usage updates and refunds, stats.
//! - [`Backing`]: the seam between the LimitSet front end and where the counters live
//!   ([`InProcess`], and with the `dynamodb` feature [`Distributed`], whose limits are one
//!   DynamoDB entity+resource bucket shared by every process).
//! - Time: injected through a [`Clock`](crate::time::Clock); a
//!   [`ManualClock`](crate::time::ManualClock) makes every wait deterministic.
//!
//! The behaviour follows the LimitSet contract of the project's reference documents, with its
//! corrections: monotonic injected time, a continuously draining leaky bucket, negative amounts
//! rejected, a refused `try_acquire` that holds nothing, and a missing update that never leaks
//! a resource.

mod acquire;
mod acquisition;
mod backing;
#[cfg(feature = "dynamodb")]
mod dynamo;
mod limit;
mod queue;
mod set;
mod stats;

pub use acquisition::{Acquisition, Held};
pub use backing::{Backing, InProcess, Outcome, Settle, SyncBacking, Take};
pub use dynalimit_core::algorithms::{Algorithm, RateStats, Window};
#[cfg(feature = "dynamodb")]
pub use dynamo::{Distributed, DistributedBuilder, DistributedTicket};
pub use limit::{
    CALL_COUNT_KEY, CallLimit, RateLimit, RateLimitBuilder, ResourceLimit, SetLimit, WindowSpec,
};
pub(crate) use set::Plan;
pub use set::{Config, LimitSet, LimitSetBuilder, MAX_LIMITS, MAX_WARNED_KEYS, NO_AMOUNTS};
pub use stats::LimitStats;
