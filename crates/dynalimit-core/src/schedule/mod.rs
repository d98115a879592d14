//! Scheduled limits (reference §12.2): parameter schedules, reset schedules and the instants
//! at which they change.
//!
//! A limit may carry a **parameter schedule**: entries of a cron pattern and the parameters
//! in force while it matches (a scale of the base, or absolute values). The first matching
//! entry wins; when none matches the base applies. A quota carries a **reset schedule**:
//! patterns whose rising edges (the first minute of a match) put the balance back. All the
//! entries of a schedule share one IANA zone and are evaluated in its local time.
//!
//! ```
//! use dynalimit_core::schedule::{Entry, Params, Schedule, Zone};
//!
//! // Half rate during office hours in Berlin.
//! let zone = Zone::get("Europe/Berlin")?;
//! let schedule = Schedule::new(zone, vec![Entry::scaled("* 9-17 * * MON-FRI", 0.5)?])?;
//! let base = Params::new(100_000, 100_000, 60_000); // 100 per minute, in millitokens
//! let wednesday_10_00_berlin = 1_784_102_400_000; // 2026-07-15 08:00 UTC
//! assert_eq!(schedule.params(base, wednesday_10_00_berlin), Params::new(50_000, 50_000, 60_000));
//! // The office day ends at 18:00 Berlin time, 16:00 UTC.
//! assert_eq!(schedule.next_change(wednesday_10_00_berlin), 1_784_131_200_000);
//! # Ok::<(), dynalimit_core::CoreError>(())
//! ```
//!
//! Everything here is computed the way zae-limiter 0.17 computes it, to the millisecond;
//! `crates/dynalimit-format/tests/data/schedule-cases.json`, computed by zae-limiter itself,
//! is the table the tests compare against.

mod cron;
mod model;
mod retry;
mod scan;
mod zone;

#[cfg(test)]
mod tests;

pub use cron::Cron;
pub use model::{
    Entry, MAX_SCALE, Modifier, Params, ResetSchedule, Schedule, next_boundary, one_zone,
};
pub use retry::retry_after_ms;
pub use zone::Zone;
