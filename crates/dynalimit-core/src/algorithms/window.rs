//! The length of a rate limit's window: seconds, or a named period.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::CoreError;

/// The span over which a rate limit's capacity applies (`capacity` per `window`).
///
/// A window is a positive, finite number of seconds. The named periods `second`, `minute`,
/// `hour`, `day` and `week` (1, 60, 3 600, 86 400 and 604 800 s) can be spelled in several ways,
/// case-insensitively: `"min"`, `"mins"`, `"per_minute"`, `"minutely"`, `"hr"`, `"hourly"`,
/// `"wk"`, … (see [`Window::from_str`]).
///
/// ```
/// use dynalimit_core::algorithms::Window;
/// use std::time::Duration;
///
/// assert_eq!("per_minute".parse::<Window>().unwrap().as_duration(), Duration::from_secs(60));
/// assert_eq!(Window::seconds(0.5).unwrap().as_secs_f64(), 0.5);
/// assert!(Window::seconds(0.0).is_err());
/// assert!("fortnight".parse::<Window>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window(Duration);

/// The named windows and their accepted spellings (compared after lower-casing).
const NAMED: [(&str, u64, &[&str]); 5] = [
    (
        "second",
        1,
        &[
            "second",
            "seconds",
            "sec",
            "secs",
            "s",
            "per_second",
            "secondly",
        ],
    ),
    (
        "minute",
        60,
        &[
            "minute",
            "minutes",
            "min",
            "mins",
            "m",
            "per_minute",
            "minutely",
        ],
    ),
    (
        "hour",
        3_600,
        &["hour", "hours", "hr", "hrs", "h", "per_hour", "hourly"],
    ),
    ("day", 86_400, &["day", "days", "d", "per_day", "daily"]),
    (
        "week",
        604_800,
        &["week", "weeks", "wk", "wks", "w", "per_week", "weekly"],
    ),
];

impl Window {
    /// One second.
    pub const SECOND: Window = Window(Duration::from_secs(1));
    /// One minute.
    pub const MINUTE: Window = Window(Duration::from_secs(60));
    /// One hour.
    pub const HOUR: Window = Window(Duration::from_secs(3_600));
    /// One day.
    pub const DAY: Window = Window(Duration::from_secs(86_400));
    /// One week.
    pub const WEEK: Window = Window(Duration::from_secs(604_800));

    /// A window of `seconds` seconds.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] unless `seconds` is finite and greater than zero.
    pub fn seconds(seconds: f64) -> Result<Window, CoreError> {
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(CoreError::invalid_value(
                "window",
                seconds,
                "must be a finite number of seconds greater than 0",
            ));
        }
        Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| !d.is_zero())
            .map(Window)
            .ok_or_else(|| {
                CoreError::invalid_value("window", seconds, "is outside the representable range")
            })
    }

    /// A window of the given duration.
    ///
    /// # Errors
    /// [`CoreError::InvalidValue`] if `duration` is zero.
    pub fn from_duration(duration: Duration) -> Result<Window, CoreError> {
        if duration.is_zero() {
            return Err(CoreError::invalid_value(
                "window",
                "0s",
                "must be greater than 0",
            ));
        }
        Ok(Window(duration))
    }

    /// The window as a duration.
    pub fn as_duration(self) -> Duration {
        self.0
    }

    /// The window in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }

    /// The canonical names of the named windows, in increasing length.
    pub fn names() -> [&'static str; 5] {
        NAMED.map(|(name, _, _)| name)
    }
}

impl FromStr for Window {
    type Err = CoreError;

    /// Parses a named window (case-insensitive, with aliases) or a number of seconds.
    fn from_str(s: &str) -> Result<Window, CoreError> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some((_, secs, _)) = NAMED
            .iter()
            .find(|(_, _, aliases)| aliases.contains(&lower.as_str()))
        {
            return Ok(Window(Duration::from_secs(*secs)));
        }
        if let Ok(seconds) = lower.parse::<f64>() {
            return Window::seconds(seconds);
        }
        Err(CoreError::invalid_value(
            "window",
            s,
            format!(
                "is not a known window; use a number of seconds or one of {}",
                Window::names().join(", ")
            ),
        ))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_case_insensitive() {
        for (text, secs) in [
            ("min", 60),
            ("MINS", 60),
            ("per_minute", 60),
            ("Hourly", 3_600),
            ("hr", 3_600),
            ("wk", 604_800),
            ("Day", 86_400),
            ("second", 1),
        ] {
            assert_eq!(
                text.parse::<Window>().unwrap().as_duration(),
                Duration::from_secs(secs),
                "{text}"
            );
        }
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let err = "fortnight".parse::<Window>().unwrap_err().to_string();
        assert!(err.contains("fortnight"), "{err}");
        for name in Window::names() {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn non_positive_and_non_finite_seconds_are_refused() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(Window::seconds(bad).is_err(), "{bad}");
        }
        assert!(Window::from_duration(Duration::ZERO).is_err());
        assert_eq!("2.5".parse::<Window>().unwrap().as_secs_f64(), 2.5);
    }
}
