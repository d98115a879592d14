//! Millitoken bucket arithmetic (reference §2.3–§2.6), integer only.
//!
//! Every quantity is an `i64` of millitokens or milliseconds; products that can exceed `i64`
//! (`elapsed × rate`, `deficit × period`) are taken in `i128`, and every division is a floor
//! division, so Rust and Python writers compute identical balances.
//!
//! ```
//! use dynalimit_core::bucket::{refill, ShardParams};
//!
//! // rpm 100: empty bucket, 30 s later 50 tokens are back (worked example of reference §14).
//! let p = ShardParams::for_shard(100_000, 100_000, 60_000, 1);
//! let (tk, rf) = refill(0, 0, 30_000, p);
//! assert_eq!((tk, rf), (50_000, 30_000));
//! ```

use crate::limit::{Limit, MILLI};
use crate::schedule::Params;

/// Name of the reserved write-capacity limit on every bucket item.
pub const WCU: &str = crate::ids::WCU_LIMIT;
/// Capacity of the `wcu` limit in millitokens (1000 tokens).
pub const WCU_CAPACITY_MILLI: i64 = 1_000_000;
/// Refill amount of the `wcu` limit in millitokens (1000 tokens per period).
pub const WCU_REFILL_MILLI: i64 = 1_000_000;
/// Refill period of the `wcu` limit in milliseconds.
pub const WCU_PERIOD_MS: i64 = 1000;
/// What one fast-path write debits from `wcu` (one token).
pub const WCU_DEBIT_MILLI: i64 = 1000;
pub use crate::bounds::MAX_SHARD_COUNT;
/// Default multiplier of the bucket TTL horizon (reference §2.6).
pub const DEFAULT_TTL_MULTIPLIER: i64 = 7;

/// A limit's parameters on one shard: the ceiling (`cp // S`), the refill share (`ra // S`)
/// and the undivided period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardParams {
    /// Most millitokens the shard may hold.
    pub ceiling: i64,
    /// Millitokens dripped back per period on this shard.
    pub rate: i64,
    /// Refill period in milliseconds (never divided).
    pub period: i64,
    /// The undivided refill amount, used when the share floors to zero.
    pub undivided_rate: i64,
}

impl ShardParams {
    /// Per-shard parameters from stored (undivided) `cp`, `ra`, `rp` and the item's
    /// `shard_count`.
    pub fn for_shard(cp: i64, ra: i64, rp: i64, shard_count: u32) -> Self {
        let s = i64::from(shard_count.max(1));
        ShardParams {
            ceiling: cp.div_euclid(s),
            rate: ra.div_euclid(s),
            period: rp,
            undivided_rate: ra,
        }
    }

    /// The `wcu` limit's parameters (never divided).
    pub fn wcu() -> Self {
        ShardParams::for_shard(WCU_CAPACITY_MILLI, WCU_REFILL_MILLI, WCU_PERIOD_MS, 1)
    }
}

/// Lazy refill of reference §2.4: returns `(tokens, drift-compensated rf)`.
///
/// The result is clamped with `min` only: debt (negative `tk`) is preserved, and a balance
/// above the ceiling is trimmed even when nothing is added.
pub fn refill(tk: i64, rf: i64, now: i64, p: ShardParams) -> (i64, i64) {
    let elapsed = i128::from(now) - i128::from(rf);
    if elapsed <= 0 || p.period <= 0 || p.rate <= 0 {
        return (tk.min(p.ceiling), rf);
    }
    let add = (elapsed * i128::from(p.rate)).div_euclid(i128::from(p.period));
    if add == 0 {
        return (tk.min(p.ceiling), rf);
    }
    let used = (add * i128::from(p.period)).div_euclid(i128::from(p.rate));
    let tokens = (i128::from(tk) + add).min(i128::from(p.ceiling));
    // `tokens <= ceiling` and `used <= elapsed`, so both fit back into i64.
    (
        i64::try_from(tokens).unwrap_or(p.ceiling),
        i64::try_from(i128::from(rf) + used).unwrap_or(now),
    )
}

/// Outcome of [`try_consume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Millitokens after the refill, before the debit.
    pub after_refill: i64,
    /// Whether `after_refill >= amount`.
    pub admitted: bool,
    /// Millitokens after the debit when admitted, else `after_refill`.
    pub tokens: i64,
}

/// Refills to `now` and admits `amount` millitokens if the refilled balance covers it
/// (reference §2.5).
pub fn try_consume(tk: i64, rf: i64, now: i64, p: ShardParams, amount: i64) -> Admission {
    let (after_refill, _) = refill(tk, rf, now, p);
    let admitted = after_refill >= amount;
    Admission {
        after_refill,
        admitted,
        tokens: if admitted {
            after_refill - amount
        } else {
            after_refill
        },
    }
}

/// Whole tokens reported as available for a millitoken balance (floor; may be negative).
pub fn available_tokens(milli: i64) -> i64 {
    milli.div_euclid(MILLI)
}

/// Milliseconds until a deficit of `deficit` millitokens is refilled on one shard:
/// `(d × rp) // rate + 1`, with `rate = ra // S` or the undivided `ra` when the share floors to
/// 0. Zero for no deficit or a zero rate.
///
/// ```
/// use dynalimit_core::bucket::{retry_after_ms, ShardParams};
/// // 60 tokens short on rpm 100: 36.001 s (reference §14).
/// let p = ShardParams::for_shard(100_000, 100_000, 60_000, 1);
/// assert_eq!(retry_after_ms(60_000, p), 36_001);
/// ```
pub fn retry_after_ms(deficit: i64, p: ShardParams) -> i64 {
    if deficit <= 0 {
        return 0;
    }
    let rate = if p.rate > 0 { p.rate } else { p.undivided_rate };
    if rate <= 0 {
        return 0;
    }
    let wait = (i128::from(deficit) * i128::from(p.period)).div_euclid(i128::from(rate)) + 1;
    i64::try_from(wait).unwrap_or(i64::MAX)
}

/// The TTL horizon of a set of limits in seconds, in floating point, as the reference computes
/// it (§2.6): for a dripping limit the largest time-to-fill `(capacity / refill_amount) ×
/// period_seconds` over its base and every window of its schedule; for a calendar quota the
/// shortest cycle of its reset patterns; for a session quota its window length.
pub(crate) fn ttl_horizon_seconds<'a>(limits: impl IntoIterator<Item = &'a Limit>) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let fill = |p: Params| {
        if p.refill_amount <= 0 {
            return 0.0;
        }
        (p.capacity as f64 / p.refill_amount as f64) * (p.refill_period as f64 / 1000.0)
    };
    #[allow(clippy::cast_precision_loss)]
    let cycle = |l: &Limit| {
        if let Some(window) = l.window_seconds() {
            return Some(window as f64);
        }
        l.reset()
            .and_then(|r| {
                r.crons()
                    .iter()
                    .map(crate::schedule::Cron::cycle_seconds)
                    .min()
            })
            .map(|c| c as f64)
    };
    limits
        .into_iter()
        .flat_map(|l| {
            if let Some(c) = cycle(l) {
                return vec![c];
            }
            let base = l.base_params();
            let windows = l
                .schedule()
                .into_iter()
                .flat_map(move |s| s.entries().iter().map(move |e| fill(e.params(base))));
            std::iter::once(fill(base)).chain(windows).collect()
        })
        .fold(0.0, f64::max)
}

/// The longest time to live a bucket item is given, in seconds (10^12 s, about 31,700
/// years). A limit may take longer to fill than that (capacity 10^15 tokens refilled one token
/// per 10^9 seconds fills in 10^24 s, beyond `i64`); such a bucket is given this cap instead
/// of a sum that would overflow, and `ttl` in milliseconds still fits an `i64`. Capping is
/// preferred to refusing the limit: every valid limit keeps working, and an item that lives
/// 31,700 years is, for the sweeper, one that never expires.
pub const MAX_TTL_SECONDS: i64 = 1_000_000_000_000;

/// The `ttl` (epoch seconds) a slow-path write stamps for limits from resource/system level or
/// an override: `now_s + min(int(horizon × multiplier), MAX_TTL_SECONDS)` (the product taken
/// in floating point, then truncated), or `None` when the multiplier is 0.
///
/// ```
/// use dynalimit_core::Limit;
/// use dynalimit_core::bucket::{MAX_TTL_SECONDS, bucket_ttl};
/// let rpm = Limit::per_minute("rpm", 100);
/// assert_eq!(bucket_ttl(1_700_000_000_000, [&rpm], 7), Some(1_700_000_000 + 420));
/// let glacial = Limit::custom("g", 1_000_000_000_000_000, 1, 1_000_000_000);
/// assert_eq!(bucket_ttl(1_700_000_000_000, [&glacial], 7), Some(1_700_000_000 + MAX_TTL_SECONDS));
/// ```
pub fn bucket_ttl<'a>(
    now_ms: i64,
    limits: impl IntoIterator<Item = &'a Limit>,
    multiplier: i64,
) -> Option<i64> {
    if multiplier <= 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let horizon = ((ttl_horizon_seconds(limits) * multiplier as f64) as i64).min(MAX_TTL_SECONDS);
    Some(now_ms.div_euclid(1000).saturating_add(horizon))
}

/// The shard count after a doubling of `current`, or `None` at or above the cap of 32.
///
/// ```
/// use dynalimit_core::bucket::doubled_shard_count;
/// assert_eq!(doubled_shard_count(1), Some(2));
/// assert_eq!(doubled_shard_count(16), Some(32));
/// assert_eq!(doubled_shard_count(32), None);
/// ```
pub fn doubled_shard_count(current: u32) -> Option<u32> {
    if current >= MAX_SHARD_COUNT {
        None
    } else {
        Some(current.max(1).saturating_mul(2).min(MAX_SHARD_COUNT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::MAX_TOKENS;
    use proptest::prelude::*;

    fn rpm100() -> ShardParams {
        ShardParams::for_shard(100_000, 100_000, 60_000, 1)
    }

    #[test]
    fn refill_keeps_debt_and_trims_above_the_ceiling() {
        // Debt survives a pass that adds nothing.
        assert_eq!(refill(-5_000, 1000, 1000, rpm100()), (-5_000, 1000));
        // A balance above a shrunken ceiling is trimmed even with nothing added.
        let shrunk = ShardParams::for_shard(100_000, 100_000, 60_000, 4);
        assert_eq!(refill(90_000, 0, 0, shrunk), (25_000, 0));
    }

    #[test]
    fn refill_compensates_drift() {
        // 100/min: 1 token per 600 ms. 1000 ms adds 1666 milli and uses 999 ms.
        let (tk, rf) = refill(0, 0, 1000, rpm100());
        assert_eq!(tk, 1666);
        assert_eq!(rf, 999);
    }

    #[test]
    fn clock_behind_rf_adds_nothing() {
        assert_eq!(refill(10, 5_000, 1_000, rpm100()), (10, 5_000));
    }

    #[test]
    fn sharded_params_divide_capacity_and_rate_not_period() {
        let p = ShardParams::for_shard(100_000, 100_000, 60_000, 4);
        assert_eq!((p.ceiling, p.rate, p.period), (25_000, 25_000, 60_000));
    }

    #[test]
    fn retry_after_uses_undivided_rate_when_share_floors_to_zero() {
        let p = ShardParams::for_shard(10, 10, 1000, 32);
        assert_eq!(p.rate, 0);
        assert_eq!(retry_after_ms(10, p), 1001);
        assert_eq!(retry_after_ms(0, p), 0);
    }

    #[test]
    fn ttl_horizon_matches_reference_examples() {
        let rpm = Limit::per_minute("rpm", 100);
        let tpm = Limit::per_minute("tpm", 10_000);
        assert_eq!(ttl_horizon_seconds([&rpm, &tpm]), 60.0);
        assert_eq!(
            bucket_ttl(1_700_000_000_000, [&rpm, &tpm], 7),
            Some(1_700_000_420)
        );
        assert_eq!(bucket_ttl(1_700_000_000_000, [&rpm], 0), None);
        // Floating point then truncation: 100/3 × 60 is 1999.99… in binary floating point.
        let odd = Limit::custom("odd", 100, 3, 60);
        assert_eq!(ttl_horizon_seconds([&odd]), 100.0f64 / 3.0 * 60.0);
        // The product is truncated, not the horizon: 10/3 × 7 = 23.3 s, not 3 × 7.
        let third = Limit::custom("third", 10, 3, 1);
        assert_eq!(
            bucket_ttl(1_700_000_000_000, [&third], 7),
            Some(1_700_000_023)
        );
    }

    #[test]
    fn hard_case_29_a_quota_lives_for_its_reset_cycle() {
        use crate::schedule::Zone;
        // Hard case 29: a quota's horizon is its cycle, never a division by its zero refill.
        let daily = Limit::quota_per_day("q", 10, Zone::utc());
        assert_eq!(ttl_horizon_seconds([&daily]), 86_400.0);
        assert_eq!(
            bucket_ttl(1_700_000_000_000, [&daily], 7),
            Some(1_700_000_000 + 604_800)
        );
        let monthly = Limit::quota_per_month("m", 10, Zone::utc());
        let rpm = Limit::per_minute("rpm", 100);
        assert_eq!(ttl_horizon_seconds([&rpm, &monthly]), 31.0 * 86_400.0);
    }

    #[test]
    fn a_schedule_window_that_refills_slower_lengthens_the_horizon() {
        use crate::schedule::{Entry, Schedule, Zone};
        // 60 a minute, but one token an hour at night: an hour to fill... 60 hours.
        let night = Entry::absolute("* 0-6 * * *", None, Some(1), Some(3600)).unwrap();
        let rpm = Limit::per_minute("rpm", 60)
            .with_schedule(Schedule::new(Zone::utc(), vec![night]).unwrap());
        assert_eq!(ttl_horizon_seconds([&rpm]), 60.0 * 3600.0);
        // A scale keeps the time to fill.
        let half = Entry::scaled("* 9-17 * * *", 0.5).unwrap();
        let tpm = Limit::per_minute("tpm", 1000)
            .with_schedule(Schedule::new(Zone::utc(), vec![half]).unwrap());
        assert_eq!(ttl_horizon_seconds([&tpm]), 60.0);
    }

    #[test]
    fn a_time_to_fill_beyond_i64_is_capped_not_wrapped() {
        use crate::limit::{MAX_PERIOD_SECONDS, MAX_TOKENS};
        let glacial = Limit::custom("g", MAX_TOKENS, 1, MAX_PERIOD_SECONDS);
        glacial.validate().expect("a valid limit");
        let rpm = Limit::per_minute("rpm", 100);
        let now_ms = 1_700_000_000_000;
        for multiplier in [1, 7, i64::from(u32::MAX)] {
            let ttl = bucket_ttl(now_ms, [&rpm, &glacial], multiplier).unwrap();
            assert_eq!(
                ttl,
                1_700_000_000 + MAX_TTL_SECONDS,
                "multiplier {multiplier}"
            );
            assert!(ttl.checked_mul(1000).is_some(), "ttl in ms fits an i64");
        }
        // Within the cap nothing changes: 60 s × 7.
        assert_eq!(bucket_ttl(now_ms, [&rpm], 7), Some(1_700_000_420));
        // At the end of time the TTL still lies ahead instead of wrapping into the past.
        let last = bucket_ttl(i64::MAX, [&glacial], 7).unwrap();
        assert!(last > i64::MAX / 1000, "{last}");
    }

    #[test]
    fn doubling_stops_at_the_cap() {
        assert_eq!(doubled_shard_count(0), Some(2));
        assert_eq!(doubled_shard_count(20), Some(32));
        assert_eq!(doubled_shard_count(2048), None);
    }

    proptest! {
        /// Refilling never lowers a balance below what it was (unless the ceiling trims it),
        /// never exceeds the ceiling, never moves rf backward or past now.
        #[test]
        fn refill_is_monotone_and_bounded(
            tk in -1_000_000_000i64..1_000_000_000,
            rf in 0i64..10_000_000,
            dt in 0i64..10_000_000,
            cp in 1i64..10_000_000,
            ra in 1i64..10_000_000,
            rp in 1i64..100_000,
            shards in 1u32..=32,
        ) {
            let p = ShardParams::for_shard(cp, ra, rp, shards);
            let now = rf + dt;
            let (t, r) = refill(tk, rf, now, p);
            prop_assert!(t <= p.ceiling);
            prop_assert!(t >= tk.min(p.ceiling));
            prop_assert!(r >= rf && r <= now);
            // Later is never worse.
            let (t2, _) = refill(tk, rf, now + dt, p);
            prop_assert!(t2 >= t);
        }

        /// Whatever the sequence of requests and their timing, a bucket starting full admits at
        /// most `capacity + refill over the elapsed time`.
        #[test]
        fn no_over_admission(
            steps in proptest::collection::vec((0i64..5_000, 0i64..30), 1..200),
            cp in 1i64..200,
            ra in 1i64..200,
            rp_s in 1i64..120,
        ) {
            let p = ShardParams::for_shard(cp * MILLI, ra * MILLI, rp_s * 1000, 1);
            let (mut tk, mut rf, mut now) = (p.ceiling, 0i64, 0i64);
            let mut admitted = 0i64;
            for (dt, n) in steps {
                now += dt;
                let a = try_consume(tk, rf, now, p, n * MILLI);
                // Writers stamp rf = max(now, rf), discarding the fraction (reference §2.4).
                rf = rf.max(now);
                tk = a.tokens;
                if a.admitted {
                    admitted += n * MILLI;
                }
            }
            let bound = i128::from(p.ceiling)
                + i128::from(now) * i128::from(p.rate) / i128::from(p.period);
            prop_assert!(i128::from(admitted) <= bound);
        }

        /// No overflow at the bounds of §2.1: capacity and refill up to 10^15 tokens, periods
        /// up to 10^9 s, elapsed times of centuries.
        #[test]
        fn no_overflow_at_the_bounds(
            cp in 1i64..=MAX_TOKENS,
            ra in 1i64..=MAX_TOKENS,
            rp_s in 1i64..=1_000_000_000,
            elapsed in 0i64..=4_000_000_000_000,
            tk in -MAX_TOKENS..=MAX_TOKENS,
            shards in 1u32..=32,
        ) {
            let p = ShardParams::for_shard(cp * MILLI, ra * MILLI, rp_s * 1000, shards);
            let (t, r) = refill(tk * MILLI, 0, elapsed, p);
            prop_assert!(t <= p.ceiling);
            prop_assert!(r <= elapsed);
            let wait = retry_after_ms(cp * MILLI, p);
            prop_assert!(wait > 0);
        }
    }
}
