//! Concurrency limits: at most `max` requests of one entity on one resource in flight at
//! once, across every process sharing the table. The slots themselves are items of the table
//! (`dynalimit_format::slot`); this is the limit as code declares it and as a configuration
//! level stores it.

use std::time::Duration;

use crate::CoreError;
use crate::ids::validate_limit_name;

/// Most slots one concurrency limit has.
pub const MAX_SLOTS: u32 = 1000;
/// The shortest hold, ms.
pub const MIN_HOLD_MS: i64 = 1000;
/// The longest hold, ms: a holder that works longer extends it.
pub const MAX_HOLD_MS: i64 = 3_600_000;
/// The hold time when none is given.
pub const DEFAULT_HOLD_TIME: Duration = Duration::from_secs(30);
/// Most concurrency limits one configuration level holds: an acquire takes a slot of each
/// (one request apiece), and a lease gives each back.
pub const MAX_CONCURRENCY_LIMITS: usize = 4;

/// Checks a slot count and a hold time (ms) before anything is written.
///
/// ```
/// use dynalimit_core::concurrency::validate;
/// assert!(validate(5, 30_000).is_ok());
/// assert!(validate(0, 30_000).is_err());
/// assert!(validate(1001, 30_000).is_err());
/// assert!(validate(5, 999).is_err());
/// ```
///
/// # Errors
/// [`CoreError::InvalidValue`] naming the rule broken.
pub fn validate(max: u32, hold_ms: i64) -> Result<(), CoreError> {
    if !(1..=MAX_SLOTS).contains(&max) {
        return Err(CoreError::invalid_value(
            "concurrency",
            max,
            format!("requests in flight, 1 to {MAX_SLOTS}"),
        ));
    }
    if !(MIN_HOLD_MS..=MAX_HOLD_MS).contains(&hold_ms) {
        return Err(CoreError::invalid_value(
            "hold time",
            format!("{hold_ms} ms"),
            "1 s to 1 hour (a longer request extends its hold)",
        ));
    }
    Ok(())
}

/// A limit on requests in flight: `max` slots, each held until released or until its hold
/// time passes without a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Concurrency {
    name: String,
    max: u32,
    hold: Duration,
}

impl Concurrency {
    /// At most `max` (1 to 1000) requests of `name` in flight, held [`DEFAULT_HOLD_TIME`].
    /// Every process using the limit gives it the same `max`: a caller looks at the first
    /// `max` slots only.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] for a bad name or `max`.
    pub fn new(name: impl Into<String>, max: u32) -> Result<Self, CoreError> {
        let name = name.into();
        validate_limit_name(&name)?;
        validate(max, MIN_HOLD_MS)?;
        Ok(Concurrency {
            name,
            max,
            hold: DEFAULT_HOLD_TIME,
        })
    }

    /// A hold time of `hold` (1 s to 1 hour, whole milliseconds): how long a slot stays held
    /// after its last heartbeat. A crashed holder's slot frees within it.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] outside 1 s to 1 hour.
    pub fn hold_time(mut self, hold: Duration) -> Result<Self, CoreError> {
        let ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
        validate(self.max, ms)?;
        self.hold = Duration::from_millis(ms.unsigned_abs());
        Ok(self)
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most requests in flight.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The hold time.
    pub fn hold(&self) -> Duration {
        self.hold
    }

    /// The hold time in whole milliseconds.
    pub fn hold_ms(&self) -> i64 {
        i64::try_from(self.hold.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Checks the concurrency limits headed for one level: at most
/// [`MAX_CONCURRENCY_LIMITS`], no name twice.
///
/// # Errors
/// [`CoreError::InvalidValue`] naming the rule broken.
pub fn validate_set(limits: &[Concurrency]) -> Result<(), CoreError> {
    if limits.len() > MAX_CONCURRENCY_LIMITS {
        return Err(CoreError::invalid_value(
            "concurrency",
            limits.len(),
            format!("at most {MAX_CONCURRENCY_LIMITS} concurrency limits per level"),
        ));
    }
    for (i, l) in limits.iter().enumerate() {
        if limits[..i].iter().any(|o| o.name == l.name) {
            return Err(CoreError::invalid_value(
                "concurrency",
                &l.name,
                "a concurrency limit may appear once per level",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_at_both_ends() {
        assert!(Concurrency::new("streams", 1).is_ok());
        assert!(Concurrency::new("streams", MAX_SLOTS).is_ok());
        assert!(Concurrency::new("streams", 0).is_err());
        assert!(Concurrency::new("streams", MAX_SLOTS + 1).is_err());
        assert!(Concurrency::new("bad name!", 5).is_err());
        let c = Concurrency::new("streams", 5).unwrap();
        assert_eq!(c.hold(), DEFAULT_HOLD_TIME);
        assert!(c.clone().hold_time(Duration::from_millis(999)).is_err());
        assert!(c.clone().hold_time(Duration::from_secs(3601)).is_err());
        let c = c.hold_time(Duration::from_secs(3600)).unwrap();
        assert_eq!(c.hold_ms(), MAX_HOLD_MS);
    }

    #[test]
    fn a_level_holds_at_most_four_distinct_names() {
        let l = |n: &str| Concurrency::new(n, 2).unwrap();
        assert!(validate_set(&[]).is_ok());
        assert!(validate_set(&[l("a"), l("b"), l("c"), l("d")]).is_ok());
        assert!(validate_set(&[l("a"), l("b"), l("c"), l("d"), l("e")]).is_err());
        assert!(validate_set(&[l("a"), l("a")]).is_err());
    }
}
