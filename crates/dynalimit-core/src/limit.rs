//! Limit shapes: a named token bucket with a capacity, a refill amount and a refill period.
//!
//! The API speaks whole tokens and seconds; bucket items store millitokens and milliseconds
//! (reference §2.1). Conversion happens here, at the boundary, and nowhere else.
//!
//! The millitoken accessors, the shard shares, the evaluation of a schedule and the
//! `with_optional_*` setters serve the table format and the engine: they are hidden from the API.
//!
//! ```
//! use dynalimit_core::Limit;
//!
//! // 100 requests a minute, bursts of up to 150.
//! let rpm = Limit::per_minute("rpm", 100).with_burst(150);
//! assert_eq!(rpm.capacity(), 150);
//! assert_eq!(rpm.refill_amount(), 100);
//! assert_eq!(rpm.refill_period_seconds(), 60);
//! assert_eq!(rpm.capacity_milli(), 150_000);
//! assert!(rpm.validate().is_ok());
//! ```

use crate::CoreError;
use crate::ids::validate_limit_name;
use crate::schedule::{Params, ResetSchedule, Schedule, Zone};

pub use crate::units::{MAX_PERIOD_SECONDS, MAX_TOKENS, MILLI};

/// A token-bucket limit: dripping, a calendar quota or a session quota.
///
/// `capacity` tokens fit in the bucket; `refill_amount` tokens drip back every
/// `refill_period_seconds`, continuously (a per-minute limit of 100 gives back one token every
/// 0.6 s). A calendar quota ([`Limit::quota`]) has a refill amount of 0 and a reset schedule:
/// its capacity comes back whole at each reset edge. A session quota
/// ([`Limit::session_quota`]) has a refill amount of 0 and a window length: the first request
/// after a window ended opens the next one with the whole capacity.
///
/// A limit may carry a parameter [`Schedule`]: while one of its entries matches, that entry's
/// parameters are in force instead of the base (reference §12.2).
///
/// ```
/// use dynalimit_core::Limit;
/// use dynalimit_core::schedule::{Entry, Params, Schedule, Zone};
///
/// // 10 000 tokens a minute, half of it during office hours in Berlin.
/// let office = Schedule::new(
///     Zone::get("Europe/Berlin")?,
///     vec![Entry::scaled("* 9-17 * * MON-FRI", 0.5)?],
/// )?;
/// let tpm = Limit::per_minute("tpm", 10_000).with_schedule(office);
/// let wednesday_10_00_berlin = 1_784_102_400_000;
/// assert_eq!(tpm.params_at(wednesday_10_00_berlin), Params::new(5_000_000, 5_000_000, 60_000));
/// assert_eq!(tpm.capacity(), 10_000); // the base is unchanged
/// # Ok::<(), dynalimit_core::CoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    name: String,
    capacity: i64,
    refill_amount: i64,
    refill_period_seconds: i64,
    schedule: Option<Schedule>,
    reset: Option<ResetSchedule>,
    window: Option<i64>,
    soft: bool,
}

impl Limit {
    fn rate(name: impl Into<String>, rate: i64, period: i64) -> Self {
        Limit {
            name: name.into(),
            capacity: rate,
            refill_amount: rate,
            refill_period_seconds: period,
            schedule: None,
            reset: None,
            window: None,
            soft: false,
        }
    }

    /// `rate` tokens per second; capacity `rate` unless [`Limit::with_burst`] changes it.
    pub fn per_second(name: impl Into<String>, rate: i64) -> Self {
        Self::rate(name, rate, 1)
    }

    /// `rate` tokens per minute; capacity `rate` unless [`Limit::with_burst`] changes it.
    pub fn per_minute(name: impl Into<String>, rate: i64) -> Self {
        Self::rate(name, rate, 60)
    }

    /// `rate` tokens per hour; capacity `rate` unless [`Limit::with_burst`] changes it.
    pub fn per_hour(name: impl Into<String>, rate: i64) -> Self {
        Self::rate(name, rate, 3600)
    }

    /// `rate` tokens per day; capacity `rate` unless [`Limit::with_burst`] changes it.
    pub fn per_day(name: impl Into<String>, rate: i64) -> Self {
        Self::rate(name, rate, 86_400)
    }

    /// Any dripping shape: `capacity` tokens, `refill_amount` tokens back every
    /// `refill_period_seconds`.
    ///
    /// ```
    /// use dynalimit_core::Limit;
    /// // 50 tokens, 10 back every second.
    /// let l = Limit::custom("calls", 50, 10, 1);
    /// assert_eq!(l.refill_period_millis(), 1000);
    /// ```
    pub fn custom(
        name: impl Into<String>,
        capacity: i64,
        refill_amount: i64,
        refill_period_seconds: i64,
    ) -> Self {
        Limit {
            name: name.into(),
            capacity,
            refill_amount,
            refill_period_seconds,
            schedule: None,
            reset: None,
            window: None,
            soft: false,
        }
    }

    /// The same limit with a different capacity (the burst); the refill rate is unchanged.
    #[must_use]
    pub fn with_burst(mut self, burst: i64) -> Self {
        self.capacity = burst;
        self
    }

    /// Rebuilds a limit from the millitoken/millisecond values stored on a bucket item, each
    /// floored to whole units and at least 1 (how statuses report a limit read from an item).
    pub(crate) fn from_stored(
        name: impl Into<String>,
        cp_milli: i64,
        ra_milli: i64,
        rp_ms: i64,
    ) -> Self {
        Limit {
            name: name.into(),
            capacity: cp_milli.div_euclid(MILLI).max(1),
            refill_amount: ra_milli.div_euclid(MILLI).max(1),
            refill_period_seconds: rp_ms.div_euclid(1000).max(1),
            schedule: None,
            reset: None,
            window: None,
            soft: false,
        }
    }

    /// A calendar quota (reference §12.3): `amount` tokens per period, given back whole at
    /// every rising edge of `cron` in `zone` and never dripping (refill amount 0).
    ///
    /// ```
    /// use dynalimit_core::Limit;
    /// use dynalimit_core::schedule::Zone;
    ///
    /// // 10 million tokens a month, back on the 1st at midnight UTC.
    /// let monthly = Limit::quota("tokens", 10_000_000, "0 0 1 * *", Zone::utc())?;
    /// assert!(monthly.is_quota());
    /// assert_eq!(monthly.refill_amount(), 0);
    /// # Ok::<(), dynalimit_core::CoreError>(())
    /// ```
    pub fn quota(
        name: impl Into<String>,
        amount: i64,
        cron: &str,
        zone: Zone,
    ) -> Result<Self, CoreError> {
        let reset = ResetSchedule::parse(cron, zone)?;
        Ok(Limit::custom(name, amount, 0, 1).with_reset(reset))
    }

    /// A calendar quota of `amount` tokens a day, back at midnight in `zone`.
    pub fn quota_per_day(name: impl Into<String>, amount: i64, zone: Zone) -> Self {
        Limit::quota(name, amount, "0 0 * * *", zone).expect("a valid pattern")
    }

    /// A calendar quota of `amount` tokens a month, back at midnight on the 1st in `zone`.
    pub fn quota_per_month(name: impl Into<String>, amount: i64, zone: Zone) -> Self {
        Limit::quota(name, amount, "0 0 1 * *", zone).expect("a valid pattern")
    }

    /// A session quota (reference §12.3): `amount` tokens per window of `window_seconds`,
    /// opened by the first admitted request after the previous window ended (so an idle key
    /// starts its next window when it comes back, not on a calendar), never dripping.
    ///
    /// ```
    /// use dynalimit_core::Limit;
    ///
    /// // 100 requests per 24 hours from first use.
    /// let daily = Limit::session_quota("requests", 100, 86_400);
    /// assert!(daily.is_quota());
    /// assert_eq!(daily.window_seconds(), Some(86_400));
    /// assert!(daily.validate().is_ok());
    /// ```
    pub fn session_quota(name: impl Into<String>, amount: i64, window_seconds: i64) -> Self {
        Limit::custom(name, amount, 0, 1).with_window(window_seconds)
    }

    /// The same limit, soft (reference §12.4): debited like any other, into debt when it does
    /// not cover a request, but never the reason for a refusal; a lease reports it overdrawn.
    /// For a budget to watch rather than enforce.
    ///
    /// ```
    /// use dynalimit_core::Limit;
    /// let watched = Limit::per_minute("tpm", 10_000).soft();
    /// assert!(watched.is_soft());
    /// assert!(!Limit::per_minute("tpm", 10_000).is_soft());
    /// ```
    #[must_use]
    pub fn soft(mut self) -> Self {
        self.soft = true;
        self
    }

    /// The same limit, soft or not.
    #[must_use]
    pub fn with_soft(mut self, soft: bool) -> Self {
        self.soft = soft;
        self
    }

    /// Whether the limit is soft: debited, never refusing.
    pub fn is_soft(&self) -> bool {
        self.soft
    }

    /// The same limit with a session window of `seconds` (a session quota's: its refill
    /// amount must be 0 and it has no reset schedule).
    #[must_use]
    pub fn with_window(mut self, seconds: i64) -> Self {
        self.window = Some(seconds);
        self
    }

    /// The same limit with a session window, or none.
    #[must_use]
    #[doc(hidden)]
    pub fn with_optional_window(mut self, seconds: Option<i64>) -> Self {
        self.window = seconds;
        self
    }

    /// A session quota's window length in seconds (`reset_after`).
    pub fn window_seconds(&self) -> Option<i64> {
        self.window
    }

    /// A session quota's window length in milliseconds.
    #[doc(hidden)]
    pub fn window_millis(&self) -> Option<i64> {
        self.window.map(|s| s.saturating_mul(1000))
    }

    /// The same limit with a reset schedule (a quota's: its refill amount must be 0).
    #[must_use]
    pub fn with_reset(mut self, reset: ResetSchedule) -> Self {
        self.reset = Some(reset);
        self
    }

    /// The same limit with a reset schedule, or none.
    #[must_use]
    #[doc(hidden)]
    pub fn with_optional_reset(mut self, reset: Option<ResetSchedule>) -> Self {
        self.reset = reset;
        self
    }

    /// The reset schedule of a calendar quota.
    pub fn reset(&self) -> Option<&ResetSchedule> {
        self.reset.as_ref()
    }

    /// The zones of the limit's schedules (parameter and reset).
    #[doc(hidden)]
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.schedule
            .iter()
            .map(Schedule::zone)
            .chain(self.reset.iter().map(ResetSchedule::zone))
    }

    /// Whether this is a quota: no drip, given back whole at its reset edges or when a new
    /// session window opens.
    pub fn is_quota(&self) -> bool {
        self.reset.is_some() || self.window.is_some()
    }

    /// The same limit with a parameter schedule.
    #[must_use]
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// The same limit with a parameter schedule, or none.
    #[must_use]
    #[doc(hidden)]
    pub fn with_optional_schedule(mut self, schedule: Option<Schedule>) -> Self {
        self.schedule = schedule;
        self
    }

    /// The parameter schedule, if the limit has one.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.schedule.as_ref()
    }

    /// The base parameters in millitokens and milliseconds, as stored on a bucket item.
    pub(crate) fn base_params(&self) -> Params {
        Params::new(
            self.capacity_milli(),
            self.refill_amount_milli(),
            self.refill_period_millis(),
        )
    }

    /// The parameters in force at `now_ms`: the base, or the matching schedule entry's.
    #[doc(hidden)]
    pub fn params_at(&self, now_ms: i64) -> Params {
        match &self.schedule {
            Some(s) => s.params(self.base_params(), now_ms),
            None => self.base_params(),
        }
    }

    /// One shard's share of this limit: capacity and refill amount divided by `shards`
    /// (floor), each at least 1 token; the period is never divided (reference §2.5).
    ///
    /// ```
    /// use dynalimit_core::Limit;
    /// let share = Limit::per_minute("rpm", 100).shard_share(8);
    /// assert_eq!((share.capacity(), share.refill_amount()), (12, 12));
    /// ```
    #[must_use]
    #[doc(hidden)]
    pub fn shard_share(&self, shards: u32) -> Self {
        let s = i64::from(shards.max(1));
        Limit {
            name: self.name.clone(),
            capacity: self.capacity.div_euclid(s).max(1),
            refill_amount: if self.is_quota() {
                0
            } else {
                self.refill_amount.div_euclid(s).max(1)
            },
            refill_period_seconds: self.refill_period_seconds,
            schedule: None,
            reset: self.reset.clone(),
            window: self.window,
            soft: self.soft,
        }
    }

    /// One shard's share of the parameters in force at `now_ms`, in whole units (the schedule
    /// applied first, then the division; each at least 1): what a status reports.
    #[must_use]
    #[doc(hidden)]
    pub fn shard_share_at(&self, shards: u32, now_ms: i64) -> Self {
        if self.schedule.is_none() {
            return self.shard_share(shards);
        }
        let quota = self.is_quota();
        let p = self.params_at(now_ms);
        let s = i64::from(shards.max(1));
        Limit {
            name: self.name.clone(),
            capacity: p.capacity.div_euclid(s).div_euclid(MILLI).max(1),
            refill_amount: if quota {
                0
            } else {
                p.refill_amount.div_euclid(s).div_euclid(MILLI).max(1)
            },
            refill_period_seconds: p.refill_period.div_euclid(1000).max(1),
            schedule: None,
            reset: None,
            window: self.window,
            soft: self.soft,
        }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Capacity in whole tokens.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    /// Tokens given back per period.
    pub fn refill_amount(&self) -> i64 {
        self.refill_amount
    }

    /// Refill period in seconds.
    pub fn refill_period_seconds(&self) -> i64 {
        self.refill_period_seconds
    }

    /// Capacity in millitokens, as stored in `b_{name}_cp`.
    #[doc(hidden)]
    pub fn capacity_milli(&self) -> i64 {
        self.capacity.saturating_mul(MILLI)
    }

    /// Refill amount in millitokens, as stored in `b_{name}_ra`.
    #[doc(hidden)]
    pub fn refill_amount_milli(&self) -> i64 {
        self.refill_amount.saturating_mul(MILLI)
    }

    /// Refill period in milliseconds, as stored in `b_{name}_rp`.
    #[doc(hidden)]
    pub fn refill_period_millis(&self) -> i64 {
        self.refill_period_seconds.saturating_mul(1000)
    }

    /// Checks the name rule and the bounds of reference §2.1: `0 < capacity <= 10^15`,
    /// `0 < refill_amount <= 10^15` (a zero refill is a quota, which this shape does not
    /// support), `0 < refill_period_seconds <= 10^9`.
    ///
    /// Every path that sends limits to DynamoDB (the repository's `set_limits` family, an
    /// acquire with explicit limits, the CLI) calls this first, through the table format's
    /// `attr::validate_limit`, which also refuses the format's attribute names.
    ///
    /// # Errors
    /// [`CoreError::InvalidIdentifier`] for a bad name, [`CoreError::InvalidValue`] for a
    /// value out of bounds.
    pub fn validate(&self) -> Result<(), CoreError> {
        validate_limit_name(&self.name)?;
        bounded("capacity", self.capacity, MAX_TOKENS)?;
        if let Some(window) = self.window {
            bounded("reset_after", window, MAX_PERIOD_SECONDS)?;
            if self.reset.is_some() {
                return Err(CoreError::invalid_value(
                    "reset_after",
                    window,
                    "a quota has either a reset schedule or a session window, not both",
                ));
            }
        }
        match (self.refill_amount, self.is_quota()) {
            (0, false) => {
                return Err(CoreError::invalid_value(
                    "refill_amount",
                    0,
                    "a limit that never refills needs a reset schedule or a session window \
                     (a quota, Limit::quota or Limit::session_quota)",
                ));
            }
            (0, true) => {}
            (_, true) => {
                return Err(CoreError::invalid_value(
                    "refill_amount",
                    self.refill_amount,
                    "a quota (a limit with a reset schedule or a session window) does not \
                     refill: its refill amount is 0",
                ));
            }
            (amount, false) => bounded("refill_amount", amount, MAX_TOKENS)?,
        }
        crate::schedule::one_zone(self.zones())?;
        bounded(
            "refill_period_seconds",
            self.refill_period_seconds,
            MAX_PERIOD_SECONDS,
        )
    }
}

fn bounded(field: &'static str, value: i64, max: i64) -> Result<(), CoreError> {
    if value <= 0 {
        return Err(CoreError::invalid_value(field, value, "must be positive"));
    }
    if value > max {
        return Err(CoreError::invalid_value(
            field,
            value,
            format!("must be at most {max}"),
        ));
    }
    Ok(())
}

/// Converts a whole-token amount to millitokens, checking it is within `0..=10^15`.
///
/// # Errors
/// [`CoreError::InvalidValue`] for a negative amount or one above 10^15 tokens.
pub fn amount_to_milli(field: &'static str, tokens: i64) -> Result<i64, CoreError> {
    if tokens < 0 {
        return Err(CoreError::invalid_value(
            field,
            tokens,
            "must not be negative",
        ));
    }
    if tokens > MAX_TOKENS {
        return Err(CoreError::invalid_value(
            field,
            tokens,
            format!("must be at most {MAX_TOKENS}"),
        ));
    }
    Ok(tokens * MILLI)
}

/// Converts a signed whole-token delta (an adjustment) to millitokens, checking
/// `|delta| <= 10^15`.
///
/// # Errors
/// [`CoreError::InvalidValue`] when the magnitude exceeds 10^15 tokens.
pub fn delta_to_milli(field: &'static str, tokens: i64) -> Result<i64, CoreError> {
    if tokens.unsigned_abs() > MAX_TOKENS.unsigned_abs() {
        return Err(CoreError::invalid_value(
            field,
            tokens,
            format!("magnitude must be at most {MAX_TOKENS}"),
        ));
    }
    Ok(tokens * MILLI)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factories_set_capacity_rate_and_period() {
        let cases = [
            (Limit::per_second("a", 5), 1),
            (Limit::per_minute("a", 5), 60),
            (Limit::per_hour("a", 5), 3600),
            (Limit::per_day("a", 5), 86_400),
        ];
        for (limit, period) in cases {
            assert_eq!(limit.capacity(), 5);
            assert_eq!(limit.refill_amount(), 5);
            assert_eq!(limit.refill_period_seconds(), period);
        }
        let burst = Limit::per_second("a", 5).with_burst(20);
        assert_eq!((burst.capacity(), burst.refill_amount()), (20, 5));
    }

    #[test]
    fn validation_enforces_the_bounds() {
        assert!(
            Limit::custom("a", MAX_TOKENS, MAX_TOKENS, MAX_PERIOD_SECONDS)
                .validate()
                .is_ok()
        );
        assert!(Limit::custom("a", MAX_TOKENS + 1, 1, 1).validate().is_err());
        assert!(Limit::custom("a", 0, 1, 1).validate().is_err());
        assert!(Limit::custom("a", 1, 0, 1).validate().is_err());
        assert!(Limit::custom("a", 1, -1, 1).validate().is_err());
        assert!(Limit::custom("a", 1, 1, 0).validate().is_err());
        assert!(
            Limit::custom("a", 1, 1, MAX_PERIOD_SECONDS + 1)
                .validate()
                .is_err()
        );
        assert!(Limit::per_minute("wcu", 1).validate().is_err());
        assert!(Limit::session_quota("s", 10, 1).validate().is_ok());
        assert!(
            Limit::session_quota("s", 10, MAX_PERIOD_SECONDS)
                .validate()
                .is_ok()
        );
        assert!(Limit::session_quota("s", 10, 0).validate().is_err());
        assert!(
            Limit::session_quota("s", 10, MAX_PERIOD_SECONDS + 1)
                .validate()
                .is_err()
        );
        assert!(
            Limit::per_minute("s", 10)
                .with_window(60)
                .validate()
                .is_err()
        );
        let both = Limit::quota_per_day("s", 10, crate::schedule::Zone::utc()).with_window(60);
        assert!(both.validate().is_err());
        assert!(Limit::per_minute("9lives", 1).validate().is_err());
    }

    #[test]
    fn stored_values_round_down_and_never_reach_zero() {
        let l = Limit::from_stored("rpm", 100_999, 500, 60_500);
        assert_eq!(
            (l.capacity(), l.refill_amount(), l.refill_period_seconds()),
            (100, 1, 60)
        );
    }

    #[test]
    fn amounts_convert_with_bounds() {
        assert_eq!(amount_to_milli("n", 3), Ok(3000));
        assert!(amount_to_milli("n", -1).is_err());
        assert!(amount_to_milli("n", MAX_TOKENS + 1).is_err());
        assert_eq!(delta_to_milli("n", -4), Ok(-4000));
        assert!(delta_to_milli("n", i64::MIN).is_err());
    }
}
