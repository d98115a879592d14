//! Snapshot windows (reference §1.4.10): hourly, daily and monthly, keyed by their UTC start.

use std::fmt;
use std::str::FromStr;

use dynalimit_repository::item::civil_from_days;

/// A snapshot window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Window {
    /// One UTC hour.
    Hourly,
    /// One UTC day.
    Daily,
    /// One UTC calendar month.
    Monthly,
}

impl Window {
    /// The stored name: `hourly`, `daily` or `monthly`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Hourly => "hourly",
            Window::Daily => "daily",
            Window::Monthly => "monthly",
        }
    }

    /// The window key of the window holding `epoch_ms`: `YYYY-MM-DDTHH:00:00Z` (hourly),
    /// `YYYY-MM-DDT00:00:00Z` (daily) or `YYYY-MM-01T00:00:00Z` (monthly), UTC.
    ///
    /// ```
    /// use dynalimit_aggregator::window::Window;
    /// let t = 1_700_000_000_000; // 2023-11-14T22:13:20Z
    /// assert_eq!(Window::Hourly.key(t), "2023-11-14T22:00:00Z");
    /// assert_eq!(Window::Daily.key(t), "2023-11-14T00:00:00Z");
    /// assert_eq!(Window::Monthly.key(t), "2023-11-01T00:00:00Z");
    /// ```
    pub fn key(self, epoch_ms: i64) -> String {
        let secs = epoch_ms.div_euclid(1000);
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        match self {
            Window::Hourly => {
                let hour = secs.rem_euclid(86_400) / 3600;
                format!("{y:04}-{m:02}-{d:02}T{hour:02}:00:00Z")
            }
            Window::Daily => format!("{y:04}-{m:02}-{d:02}T00:00:00Z"),
            Window::Monthly => format!("{y:04}-{m:02}-01T00:00:00Z"),
        }
    }

    /// Parses a comma-separated list such as `hourly,daily` (spaces and empty entries are
    /// ignored, duplicates removed, order kept).
    ///
    /// # Errors
    /// The first unknown name.
    pub fn parse_list(text: &str) -> Result<Vec<Window>, UnknownWindow> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let w: Window = part.parse()?;
            if !out.contains(&w) {
                out.push(w);
            }
        }
        Ok(out)
    }
}

/// A window name other than `hourly`, `daily` or `monthly`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown snapshot window {0:?} (expected hourly, daily or monthly)")]
pub struct UnknownWindow(pub String);

impl FromStr for Window {
    type Err = UnknownWindow;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hourly" => Ok(Window::Hourly),
            "daily" => Ok(Window::Daily),
            "monthly" => Ok(Window::Monthly),
            other => Err(UnknownWindow(other.to_owned())),
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_at_boundaries_and_before_the_epoch() {
        assert_eq!(Window::Hourly.key(0), "1970-01-01T00:00:00Z");
        assert_eq!(Window::Hourly.key(3_599_999), "1970-01-01T00:00:00Z");
        assert_eq!(Window::Hourly.key(3_600_000), "1970-01-01T01:00:00Z");
        assert_eq!(Window::Daily.key(-1), "1969-12-31T00:00:00Z");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(Window::Daily.key(1_709_251_199_999), "2024-02-29T00:00:00Z");
        assert_eq!(
            Window::Monthly.key(1_709_251_200_000),
            "2024-03-01T00:00:00Z"
        );
    }

    #[test]
    fn window_lists_parse_and_reject_unknown_names() {
        assert_eq!(
            Window::parse_list(" hourly, daily,,hourly ").unwrap(),
            vec![Window::Hourly, Window::Daily]
        );
        assert_eq!(
            Window::parse_list("weekly"),
            Err(UnknownWindow("weekly".into()))
        );
    }
}
