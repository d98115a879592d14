//! How long until a deficit clears on a scheduled limit (reference §2.5, §12.2).

use super::model::{Params, ResetSchedule, Schedule, next_boundary};

/// Windows the walk crosses before it falls back to the base rate.
const MAX_WINDOWS: usize = 8;

/// Milliseconds until `deficit` millitokens are back on one shard of a limit with `base`
/// parameters (undivided) and its schedules, measured from `now_ms`; 0 when there is no
/// deficit or no finite wait.
///
/// The walk goes window by window: in each, the rate in force (its shard's share, or the
/// whole rate when the share floors to zero) either clears the deficit before the window
/// ends, or the deficit shrinks by what the window refills. A reset edge that comes first
/// is the answer outright. After 8 windows the wait is estimated at the base rate. Without
/// schedules this equals [`crate::bucket::retry_after_ms`].
///
/// ```
/// use dynalimit_core::schedule::{retry_after_ms, Params, ResetSchedule, Zone};
///
/// // A quota of 10 000 a day, reset at midnight UTC: the wait is until midnight.
/// let quota = Params::new(10_000_000, 0, 1_000);
/// let daily = ResetSchedule::parse("0 0 * * *", Zone::utc())?;
/// let noon = 1_784_203_200_000; // 2026-07-16 12:00 UTC
/// assert_eq!(retry_after_ms(1_000, quota, None, Some(&daily), noon, 1), 12 * 3_600_000 + 1);
/// # Ok::<(), dynalimit_core::CoreError>(())
/// ```
pub fn retry_after_ms(
    deficit: i64,
    base: Params,
    schedule: Option<&Schedule>,
    reset: Option<&ResetSchedule>,
    now_ms: i64,
    shard_count: u32,
) -> i64 {
    if deficit <= 0 {
        return 0;
    }
    let divisor = i64::from(shard_count.max(1));
    let rate_of = |ra: i64| match ra / divisor {
        0 => ra,
        share => share,
    };
    let mut remaining = i128::from(deficit);
    let mut cursor = now_ms;
    for _ in 0..MAX_WINDOWS {
        let params = schedule.map_or(base, |s| s.params(base, cursor));
        let rate = rate_of(params.refill_amount);
        let edge = reset.and_then(|r| r.next_edge(cursor));
        let boundary = next_boundary(schedule, reset, cursor);
        if rate <= 0 {
            // Nothing refills in this window: an edge inside it is the answer, otherwise
            // the rate may resume at the boundary.
            if let Some(edge) = edge
                && boundary.is_none_or(|b| edge <= b)
            {
                return wait_until(edge, now_ms);
            }
            match boundary {
                Some(b) => {
                    cursor = b;
                    continue;
                }
                None => break,
            }
        }
        let need = remaining * i128::from(params.refill_period) / i128::from(rate);
        let need = i64::try_from(need).unwrap_or(i64::MAX);
        let clears_at = cursor.saturating_add(need);
        let window_end = boundary.unwrap_or(clears_at);
        if let Some(edge) = edge
            && edge <= window_end.min(clears_at)
        {
            return wait_until(edge, now_ms);
        }
        if clears_at <= window_end {
            return wait_until(clears_at, now_ms);
        }
        remaining -= (i128::from(window_end) - i128::from(cursor)) * i128::from(rate)
            / i128::from(params.refill_period);
        cursor = window_end;
    }
    // Past the walk: the base rate, or the next reset edge from now.
    let flat_rate = rate_of(base.refill_amount);
    if flat_rate <= 0 {
        return reset
            .and_then(|r| r.next_edge(now_ms))
            .map_or(0, |edge| wait_until(edge, now_ms));
    }
    let wait = i128::from(deficit) * i128::from(base.refill_period) / i128::from(flat_rate);
    i64::try_from(wait + 1).unwrap_or(i64::MAX)
}

/// Milliseconds from `now_ms` until just after `at` (`at - now + 1`), saturating.
fn wait_until(at: i64, now_ms: i64) -> i64 {
    at.saturating_sub(now_ms).saturating_add(1)
}
