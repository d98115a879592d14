//! The error type of the repository, and the classification of AWS SDK failures.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use dynalimit_core::failure::{self, ErrorClass};
use dynalimit_format::FormatError;
use thiserror::Error;

/// Everything the data plane can report. SDK failures are classified at the boundary; no SDK
/// type leaks through.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RepositoryError {
    /// Bad input, detected before any request was sent.
    #[error(transparent)]
    Validation(#[from] dynalimit_core::CoreError),

    /// The named thing does not exist (an entity, a namespace id, a config level, …).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for, e.g. `entity "user-1"`.
        what: String,
    },

    /// A create found the thing already there.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What was being created.
        what: String,
    },

    /// The namespace is not registered (or is deleted or being purged).
    #[error("namespace {name:?} is not registered (or was deleted); register it first")]
    NamespaceNotFound {
        /// The namespace name.
        name: String,
    },

    /// The namespace exists but is in a state that forbids the operation.
    #[error("namespace {name:?} is {state}: {message}")]
    NamespaceState {
        /// The namespace name or id.
        name: String,
        /// Its status (`active`, `deleted`, `purging`).
        state: String,
        /// Why the operation was refused.
        message: String,
    },

    /// The table requires a newer client than this one.
    #[error(
        "this table requires clients of version {required} or newer, dynalimit implements \
         {implemented}: {message}"
    )]
    IncompatibleVersion {
        /// The table's `client_min_version` (or the schema version that does not match).
        required: String,
        /// The compatibility version dynalimit declares.
        implemented: String,
        /// What to do about it.
        message: String,
    },

    /// A feature older readers would misread cannot be stored: the stack's aggregator is not
    /// known to read it (reference §10).
    #[error(
        "storing {feature} needs an aggregator that reads it (zae-limiter {minimum} or later, \
         or dynalimit); the table's version record says lambda_version = {lambda_version:?}: \
         run `dynalimit deploy` to deploy dynalimit's aggregator and record its version"
    )]
    ReadersTooOld {
        /// What was to be stored.
        feature: String,
        /// Its minimum reader.
        minimum: String,
        /// The aggregator version the table records, if any.
        lambda_version: Option<String>,
    },

    /// The table (the stack) does not exist.
    #[error("table {table:?} does not exist; deploy it with `dynalimit deploy`")]
    TableNotFound {
        /// The table name.
        table: String,
    },

    /// AWS refused the credentials or the permission. Never treated as an outage.
    #[error("permission denied during {operation}: {message}")]
    PermissionDenied {
        /// The DynamoDB operation.
        operation: &'static str,
        /// The service's message.
        message: String,
    },

    /// DynamoDB throttled the request after the SDK's own retries.
    #[error("throttled during {operation}: {message}")]
    Throttled {
        /// The DynamoDB operation.
        operation: &'static str,
        /// The service's message.
        message: String,
    },

    /// A transaction or single-item write lost a race with another transaction: contention,
    /// not an outage.
    #[error("transaction conflict during {operation}")]
    TransactionConflict {
        /// The DynamoDB operation.
        operation: &'static str,
    },

    /// A write kept losing to other transactions on its item through every attempt the store
    /// makes ([`crate::bucket::CONFLICT_ATTEMPTS`], with jittered backoff between them); it was
    /// not applied. Reported as unavailable ([`RepositoryError::is_unavailable`]): the item
    /// could not be written now, and trying again later may succeed.
    #[error("{operation} lost to other transactions {attempts} times in a row; not applied")]
    Contended {
        /// The DynamoDB operation.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
    },

    /// DynamoDB could not be reached or failed (network, timeout, 5xx).
    #[error("DynamoDB unavailable during {operation}: {message}")]
    Unavailable {
        /// The DynamoDB operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },

    /// A write reached DynamoDB, or may have, and its answer was lost: the connection failed
    /// after the request was written, the attempt timed out, or the service answered 5xx
    /// ("may or may not have succeeded"). The write may have been applied once; it is never
    /// sent again unless a second application is provably refused by its own condition.
    /// Reported as unavailable ([`RepositoryError::is_unavailable`]).
    #[error("{operation} may or may not have been applied (its answer was lost): {message}")]
    OutcomeUnknown {
        /// The DynamoDB operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },

    /// DynamoDB refused the request itself as invalid: a `ValidationException` (an
    /// expression over the service's limits among them), a transaction item's
    /// `ValidationError`, or any other 4xx that is not throttling, a permission, a conflict
    /// or a failed condition. Sending it again fails the same way, so it is never reported
    /// as unavailable ([`RepositoryError::is_invalid_request`]).
    #[error("DynamoDB refused {operation} as invalid ({code}): {message}")]
    InvalidRequest {
        /// The DynamoDB operation.
        operation: &'static str,
        /// The service's error code.
        code: String,
        /// The service's message.
        message: String,
    },

    /// An item in the table that dynalimit will not act on, as the format's codecs report it:
    ///
    /// - [`FormatError::Corrupt`]: the item does not have the shape the format prescribes, or
    ///   holds a value outside the range a reader accepts (`dynalimit_core::bounds`: a shard
    ///   count above 32, a time beyond the year 2500, an amount beyond 2 × 10^18
    ///   millitokens). Acquires treat it as unavailable (governed by `on_unavailable`), and no
    ///   mode admits past it.
    /// - [`FormatError::Unsupported`]: the item carries what dynalimit cannot read (a bucket
    ///   attribute it does not know, a sharded quota without grant counts, a limit that
    ///   neither refills nor resets, a configuration that does not decode). Acquires treat it
    ///   as unavailable.
    /// - [`FormatError::ReservedLimitName`]: a stored configuration names a limit after an
    ///   attribute of the table's items ([`dynalimit_format::attr::ALL`]), as a client that
    ///   refuses only `wcu` (zae-limiter 0.17) can write it. Acquires treat it as unavailable.
    /// - [`FormatError::TooManyLimits`]: a stored configuration names more limits than one
    ///   bucket's requests can carry ([`dynalimit_format::attr::MAX_LIMITS_PER_BUCKET`]). No
    ///   request could serve it, so it is an invalid request
    ///   ([`RepositoryError::is_invalid_request`]), not an outage.
    ///
    /// A stored schedule that does not decode ([`FormatError::Schedule`]) is reported as
    /// corrupt.
    #[error(transparent)]
    Format(FormatError),

    /// An idempotency key already names another kind of operation on this entity and resource
    /// (a reset's key reused for a top-up, or the other way round); nothing was written.
    #[error(
        "idempotency key {key:?} was already used for a {recorded} of this entity and resource"
    )]
    IdempotencyKeyReused {
        /// The key.
        key: String,
        /// The operation its record holds (`reset`, `top_up`).
        recorded: String,
    },

    /// A configuration was written but not every bucket could be stamped with it; running the
    /// same call again finishes the job.
    #[error("configuration written, but only {stamped} buckets were updated: {message}")]
    FanoutIncomplete {
        /// Buckets stamped before the failure.
        stamped: usize,
        /// What failed.
        message: String,
    },

    /// Provisioning the missing table as the CloudFormation stack failed (feature
    /// `provision`).
    #[cfg(feature = "provision")]
    #[error(transparent)]
    Provisioning(#[from] dynalimit_stack::StackError),

    /// No AWS region is configured for an endpoint that is not a loopback emulator.
    #[error(
        "no AWS region is configured: pass --region, set AWS_REGION, or set `region` in \
         profile {profile:?} of the AWS config file"
    )]
    MissingRegion {
        /// The profile that was read.
        profile: String,
    },
}

impl RepositoryError {
    /// True for failures worth retrying later (throttling, contention, outages).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RepositoryError::Throttled { .. }
                | RepositoryError::TransactionConflict { .. }
                | RepositoryError::Contended { .. }
                | RepositoryError::Unavailable { .. }
                | RepositoryError::OutcomeUnknown { .. }
        )
    }

    /// True when the failure means DynamoDB could not serve the request (what `on_unavailable`
    /// governs). Permission errors are not outages, nor is an item holding a value out of
    /// bounds ([`FormatError::Corrupt`]: no mode admits past it).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            RepositoryError::Throttled { .. }
                | RepositoryError::Contended { .. }
                | RepositoryError::Unavailable { .. }
                | RepositoryError::OutcomeUnknown { .. }
                | RepositoryError::Format(
                    FormatError::Unsupported { .. } | FormatError::ReservedLimitName { .. }
                )
        )
    }

    /// True when the request cannot be served as asked, now or later: DynamoDB refused it as
    /// invalid ([`RepositoryError::InvalidRequest`]), or the stored configuration names more limits
    /// than a bucket's requests carry ([`FormatError::TooManyLimits`]). Neither is an
    /// outage, so `on_unavailable` does not govern them.
    pub fn is_invalid_request(&self) -> bool {
        matches!(
            self,
            RepositoryError::InvalidRequest { .. }
                | RepositoryError::Format(FormatError::TooManyLimits { .. })
        )
    }

    pub(crate) fn corrupt(key: impl Into<String>, message: impl Into<String>) -> Self {
        RepositoryError::Format(FormatError::Corrupt {
            key: key.into(),
            attribute: None,
            message: message.into(),
        })
    }

    /// Classifies a failure of the AWS SDK's `operation` (throttling, permissions,
    /// conflicts, outages, refusals), for requests other crates send with the repository's
    /// client (the aggregator's snapshot transactions, for example).
    pub fn from_sdk<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> RepositoryError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        classify(operation, err)
    }
}

impl From<FormatError> for RepositoryError {
    fn from(e: FormatError) -> Self {
        match e {
            FormatError::Schedule { .. } => RepositoryError::Format(FormatError::Corrupt {
                key: String::new(),
                attribute: None,
                message: e.to_string(),
            }),
            e => RepositoryError::Format(e),
        }
    }
}

/// Classifies an SDK failure of `operation` into a [`RepositoryError`].
pub(crate) fn classify<E>(
    operation: &'static str,
    err: SdkError<E, HttpResponse>,
) -> RepositoryError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let inner = service.err();
            let code = inner.code().unwrap_or("Unknown");
            let message = inner.message().unwrap_or_default().to_string();
            classify_code(
                operation,
                Some(service.raw().status().as_u16()),
                code,
                message,
            )
        }
        SdkError::TimeoutError(_) => RepositoryError::Unavailable {
            operation,
            message: "request timed out".into(),
        },
        SdkError::DispatchFailure(_) => RepositoryError::Unavailable {
            operation,
            message: format!("cannot reach DynamoDB: {}", error_chain(&err)),
        },
        SdkError::ResponseError(_) => RepositoryError::Unavailable {
            operation,
            message: format!("unreadable response: {}", error_chain(&err)),
        },
        SdkError::ConstructionFailure(_) => RepositoryError::InvalidRequest {
            operation,
            code: "ConstructionFailure".into(),
            message: error_chain(&err),
        },
        _ => RepositoryError::Unavailable {
            operation,
            message: error_chain(&err),
        },
    }
}

/// Classifies a service error `code` answered with `status` (also a transaction item's
/// cancellation reason, without a status) as [`failure::classify`] does.
pub(crate) fn classify_code(
    operation: &'static str,
    status: Option<u16>,
    code: &str,
    message: String,
) -> RepositoryError {
    match failure::classify(status, code) {
        ErrorClass::Throttled => RepositoryError::Throttled { operation, message },
        ErrorClass::PermissionDenied => RepositoryError::PermissionDenied { operation, message },
        ErrorClass::Conflict => RepositoryError::TransactionConflict { operation },
        ErrorClass::NotFound => RepositoryError::TableNotFound { table: message },
        ErrorClass::Unavailable => RepositoryError::Unavailable {
            operation,
            message: format!("{code}: {message}"),
        },
        ErrorClass::Invalid => RepositoryError::InvalidRequest {
            operation,
            code: code.to_string(),
            message,
        },
    }
}

pub(crate) use failure::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    fn class(status: u16, code: &str) -> RepositoryError {
        classify_code("UpdateItem", Some(status), code, "said".into())
    }

    #[test]
    fn codes_map_to_the_documented_classes() {
        assert!(matches!(
            class(400, "ProvisionedThroughputExceededException"),
            RepositoryError::Throttled { .. }
        ));
        assert!(matches!(
            class(400, "AccessDeniedException"),
            RepositoryError::PermissionDenied { .. }
        ));
        assert!(matches!(
            class(400, "TransactionConflictException"),
            RepositoryError::TransactionConflict { .. }
        ));
        assert!(matches!(
            class(500, "InternalServerError"),
            RepositoryError::Unavailable { .. }
        ));
        assert!(matches!(
            class(400, "ResourceNotFoundException"),
            RepositoryError::TableNotFound { .. }
        ));
        assert!(!class(400, "AccessDeniedException").is_unavailable());
    }

    #[test]
    fn a_request_refused_as_invalid_is_no_outage() {
        for (status, code) in [
            (400, "ValidationException"),
            (400, "SerializationException"),
            (413, "HTTP413"),
        ] {
            let e = class(status, code);
            assert!(matches!(e, RepositoryError::InvalidRequest { .. }), "{e:?}");
            assert!(e.is_invalid_request(), "{code}");
            assert!(!e.is_unavailable() && !e.is_retryable(), "{code}");
        }
        // A code nobody lists under a server status is an outage, not the request's fault.
        let e = class(503, "SomethingNew");
        assert!(e.is_unavailable() && !e.is_invalid_request(), "{e:?}");
    }
}
