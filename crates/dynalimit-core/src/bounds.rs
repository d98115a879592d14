//! What a reader accepts from the table: the range of every value decoded from an item, and
//! how far ahead a stamp may lie and still be honoured.
//!
//! The table is shared with other writers (zae-limiter services, other processes, operators'
//! tools), so every value read back is untrusted. The bucket decoder
//! (`dynalimit_format::bucket`) checks each attribute against these bounds and reports an
//! item that holds a value outside them as corrupt, naming the item and the attribute; the
//! arithmetic of the decisions ([`crate::image`], [`crate::operation`]) is written for
//! values inside them and cannot overflow on them.
//!
//! | value | accepted |
//! |---|---|
//! | `shard_count` | `1..=32` ([`MAX_SHARD_COUNT`]); absent reads as 1 |
//! | times: `rf`, a session window's `ws` and `wa` | [`EARLIEST_TIME_MS`]`..=`[`LATEST_TIME_MS`] (1970 to 2500) |
//! | a limit's `tk`, `cp`, `ra`, a quota's `tu` | within ±[`MAX_STORED_MILLI`] |
//! | a limit's `rp` | `1..=`[`MAX_PERIOD_MS`], required |
//! | a session window's length `rsa` | `1..=`[`MAX_PERIOD_SECONDS`] |
//! | a quota's grant count `gc` | `1..=32` |
//!
//! Counters (`tc`, `wtc`) may hold any 64-bit integer: what is computed from them saturates.
//! `ttl` and `pgen` are only compared.
//!
//! **Stamps** are deadlines another writer set: a bypass or soft stamp, the boundary `vu`,
//! a shared pause. Each is honoured only while it is in the future and no further ahead than
//! its lifetime plus [`CLOCK_SKEW_MS`] ([`Stamp::live`]); one further ahead is treated as
//! expired, both by the client's decisions and by the condition of the fast path's write,
//! so a stamp from a writer whose clock runs fast (or a hostile one) cannot hold a bucket
//! open, or shut, for longer than that. A slow pass then writes the stamp again from the
//! configuration, as it does for an expired one.
//!
//! ```
//! use dynalimit_core::bounds::Stamp;
//!
//! let now = 1_700_000_000_000;
//! assert!(Stamp::Deadline.live(now + 60_000, now));
//! assert!(!Stamp::Deadline.live(now, now), "a deadline reached has expired");
//! assert!(!Stamp::Deadline.live(9_000_000_000_000_000_000, now), "too far ahead");
//! ```

/// Largest shard count any writer may set.
pub const MAX_SHARD_COUNT: u32 = 32;
pub use crate::units::MAX_PERIOD_SECONDS;
use crate::units::{MAX_TOKENS, MILLI};

/// How far ahead of this process's clock another writer's clock may run: a stamp it wrote
/// is honoured up to its lifetime plus this (one minute).
pub const CLOCK_SKEW_MS: i64 = 60_000;

/// The earliest instant a time read from an item may hold: the epoch, 1970-01-01T00:00:00Z.
pub const EARLIEST_TIME_MS: i64 = 0;

/// The latest instant a time read from an item may hold: 2500-01-01T00:00:00Z.
pub const LATEST_TIME_MS: i64 = 16_725_225_600_000;

/// The largest magnitude of a millitoken amount read from an item: twice the largest capacity
/// a limit may declare (2 × 10^18 millitokens), room for a capacity and the top-ups of one
/// period. Sums of a few such amounts still fit an `i64`.
pub const MAX_STORED_MILLI: i64 = 2 * MAX_TOKENS * MILLI;

/// The longest refill period, in milliseconds (10^12, [`MAX_PERIOD_SECONDS`]).
pub const MAX_PERIOD_MS: i64 = MAX_PERIOD_SECONDS * 1000;

/// The longest a soft or bypass stamp lives (reference §2.7: the stamp time-to-live, 60 s).
pub const STAMP_TTL_MS: i64 = 60_000;

/// How far ahead of its writer's clock a boundary (`vu`) may lie: the longest session window
/// (10^9 s). A parameter schedule's next change and a reset schedule's next edge lie within
/// 366 days.
pub(crate) const MAX_BOUNDARY_AHEAD_MS: i64 = MAX_PERIOD_MS;

/// The longest shared pause (one day).
pub const MAX_PAUSE_MS: i64 = 86_400_000;

/// A kind of stamp: a deadline another writer sets on a bucket item, honoured while it lies
/// ahead of now and within its lifetime plus the clock-skew allowance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamp {
    /// A bypass stamp (`bypass`) or a soft stamp (`b_{name}_soft`): [`STAMP_TTL_MS`].
    Deadline,
    /// The boundary `vu`: `MAX_BOUNDARY_AHEAD_MS`.
    Boundary,
    /// A shared pause: [`MAX_PAUSE_MS`].
    Pause,
}

impl Stamp {
    /// The longest this kind of stamp lives, in milliseconds.
    pub(crate) const fn lifetime_ms(self) -> i64 {
        match self {
            Stamp::Deadline => STAMP_TTL_MS,
            Stamp::Boundary => MAX_BOUNDARY_AHEAD_MS,
            Stamp::Pause => MAX_PAUSE_MS,
        }
    }

    /// The latest deadline of this kind honoured at `now`: `now` plus its lifetime plus
    /// [`CLOCK_SKEW_MS`].
    pub const fn horizon(self, now: i64) -> i64 {
        now.saturating_add(self.lifetime_ms() + CLOCK_SKEW_MS)
    }

    /// Whether a stamp of this kind holding `until` is in force at `now`: later than `now`
    /// and no later than [`Stamp::horizon`].
    pub const fn live(self, until: i64, now: i64) -> bool {
        until > now && until <= self.horizon(now)
    }
}

/// Whether `ms` is a time an item may hold ([`EARLIEST_TIME_MS`]`..=`[`LATEST_TIME_MS`]).
pub const fn is_time(ms: i64) -> bool {
    EARLIEST_TIME_MS <= ms && ms <= LATEST_TIME_MS
}

/// Whether `milli` is an amount an item may hold (within ±[`MAX_STORED_MILLI`]).
pub const fn is_amount(milli: i64) -> bool {
    -MAX_STORED_MILLI <= milli && milli <= MAX_STORED_MILLI
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_latest_time_is_the_start_of_2500() {
        let days = (2500 - 1970) * 365 + (1972..2500).step_by(4).count() as i64
            - [2100, 2200, 2300].len() as i64;
        assert_eq!(LATEST_TIME_MS, days * 86_400_000);
    }

    #[test]
    fn each_stamp_lives_its_lifetime_and_the_skew() {
        let now = 1_700_000_000_000;
        for (kind, lifetime) in [
            (Stamp::Deadline, 60_000),
            (Stamp::Boundary, 1_000_000_000_000),
            (Stamp::Pause, 86_400_000),
        ] {
            assert!(kind.live(now + 1, now));
            assert!(kind.live(now + lifetime + CLOCK_SKEW_MS, now));
            assert!(!kind.live(now + lifetime + CLOCK_SKEW_MS + 1, now));
            assert!(!kind.live(now, now));
            assert!(!kind.live(i64::MAX, now));
        }
    }

    proptest! {
        /// Any stamp at any time: no overflow, and live only inside the window.
        #[test]
        fn liveness_is_total(until in any::<i64>(), now in any::<i64>()) {
            for kind in [Stamp::Deadline, Stamp::Boundary, Stamp::Pause] {
                let live = kind.live(until, now);
                prop_assert_eq!(
                    live,
                    i128::from(until) > i128::from(now)
                        && i128::from(until)
                            <= (i128::from(now) + i128::from(kind.lifetime_ms() + CLOCK_SKEW_MS))
                                .min(i128::from(i64::MAX))
                );
            }
        }
    }
}
