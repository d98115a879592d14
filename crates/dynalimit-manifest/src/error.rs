//! The crate's error: a manifest or an invocation refused before any request (with the
//! place of what is refused), a failed read or write of the table, an undelivered answer.

use dynalimit_core::CoreError;
use dynalimit_repository::RepositoryError;

/// Where in the manifest a refusal points: the line (when found) and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The 1-based line.
    pub line: Option<usize>,
    /// The dotted path, e.g. `resources.gpt-4.limits.rpm`.
    pub path: String,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.path.is_empty()) {
            (Some(line), false) => write!(f, "line {line} ({})", self.path),
            (Some(line), true) => write!(f, "line {line}"),
            (None, false) => f.write_str(&self.path),
            (None, true) => f.write_str("the manifest"),
        }
    }
}

/// Why a manifest is refused. Every one is found before the table is read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The text is not YAML, or not a mapping at the top.
    #[error("{at}: not a valid manifest: {message}")]
    Syntax {
        /// Where.
        at: Place,
        /// What the parser said.
        message: String,
    },
    /// A key the format does not define.
    #[error("{at}: unknown key {key:?}; expected one of: {expected}")]
    UnknownKey {
        /// Where.
        at: Place,
        /// The key.
        key: String,
        /// The keys allowed there.
        expected: &'static str,
    },
    /// A value of the wrong type or out of its range (an id, a flag, a number).
    #[error("{at}: {message}")]
    InvalidValue {
        /// Where.
        at: Place,
        /// What is wrong.
        message: String,
    },
    /// A limit name the table format reserves.
    #[error("{at}: {message}")]
    ReservedName {
        /// Where.
        at: Place,
        /// The refused name and why.
        message: String,
    },
    /// A limit whose schedule, reset schedule or time zone does not parse.
    #[error("{at}: {message}")]
    Schedule {
        /// Where.
        at: Place,
        /// What is wrong.
        message: String,
    },
    /// A limit the table cannot hold (bounds, drip and reset together, …).
    #[error("{at}: {message}")]
    InvalidLimit {
        /// Where.
        at: Place,
        /// What is wrong.
        message: String,
    },
    /// More limits at one level than one bucket carries.
    #[error("{at}: {count} limits, more than one bucket carries (at most {max})")]
    TooManyLimits {
        /// Where (the level's `limits`).
        at: Place,
        /// How many.
        count: usize,
        /// The most one bucket carries.
        max: usize,
    },
    /// Entities whose declared parents form a cycle.
    #[error("{at}: the parents form a cycle: {cycle}")]
    ParentCycle {
        /// Where (the first entity's `parent`).
        at: Place,
        /// The cycle, `a -> b -> a`.
        cycle: String,
    },
    /// The manifest is written for another namespace than the command's.
    #[error(
        "{at}: the manifest is for namespace {manifest:?}, the command works in {command:?}; \
         run with -N {manifest}"
    )]
    Namespace {
        /// Where.
        at: Place,
        /// The manifest's namespace.
        manifest: String,
        /// The command's.
        command: String,
    },
    /// A limit's text or YAML form refused (the command line's forms, which a manifest
    /// may use too).
    #[error("{message}")]
    LimitForm {
        /// What is wrong, naming the limit.
        message: String,
        /// The check of the limit that refused it, when one did.
        core: Option<CoreError>,
    },
    /// A read or write of the table failed.
    #[error("{step}")]
    Repository {
        /// What was being done: `reading the table`, `applying resource gpt-4`.
        step: String,
        /// The repository's error.
        #[source]
        source: RepositoryError,
    },
    /// An invocation of the provisioner it cannot take (before any request).
    #[error("{0}")]
    Event(String),
    /// The answer to CloudFormation could not be delivered.
    #[error("the answer to CloudFormation was not delivered: {0}")]
    Response(String),
}

impl ManifestError {
    /// Whether the error is bad input (a refused manifest, limit or invocation), found before
    /// anything was read or written.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ManifestError::Repository { .. } | ManifestError::Response(_)
        )
    }

    /// The error and its causes on one line, `a: b: c`.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }
}

impl From<CoreError> for ManifestError {
    fn from(core: CoreError) -> Self {
        ManifestError::LimitForm {
            message: core.to_string(),
            core: Some(core),
        }
    }
}

impl From<RepositoryError> for ManifestError {
    fn from(source: RepositoryError) -> Self {
        ManifestError::Repository {
            step: "reading the table".into(),
            source,
        }
    }
}

/// The result of the limit forms' parsers.
pub(crate) type Result<T, E = ManifestError> = std::result::Result<T, E>;

/// A refused limit form, with a formatted message.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::error::ManifestError::LimitForm { message: format!($($arg)*), core: None }
    };
}

/// Returns a refused limit form, with a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::invalid!($($arg)*))
    };
}

pub(crate) use {bail, invalid};

/// Puts what was being read in front of a refusal: `limit "rpm": …`.
pub(crate) trait Context<T> {
    /// With a fixed text.
    fn context(self, what: &str) -> Result<T>;
    /// With a text made only on failure.
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T>;
}

impl<T> Context<T> for Result<T, CoreError> {
    fn context(self, what: &str) -> Result<T> {
        self.with_context(|| what.to_owned())
    }
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T> {
        self.map_err(|core| ManifestError::LimitForm {
            message: format!("{}: {core}", what()),
            core: Some(core),
        })
    }
}

impl<T> Context<T> for Result<T> {
    fn context(self, what: &str) -> Result<T> {
        self.with_context(|| what.to_owned())
    }
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T> {
        self.map_err(|e| match e {
            ManifestError::LimitForm { message, core } => ManifestError::LimitForm {
                message: format!("{}: {message}", what()),
                core,
            },
            other => other,
        })
    }
}

impl<T> Context<T> for Result<T, serde_yaml_ng::Error> {
    fn context(self, what: &str) -> Result<T> {
        self.with_context(|| what.to_owned())
    }
    fn with_context<F: FnOnce() -> String>(self, what: F) -> Result<T> {
        self.map_err(|e| invalid!("{}: {e}", what()))
    }
}
