//! When a request is sent again, and how long to wait before it: the data plane's policy.
//!
//! The transport (`dynalimit-wire`) sends one request again as the client's retry
//! configuration says, and only as far as the write's declarations allow ([`Resend`],
//! [`OnThrottle`]). This module decides those declarations and runs the retry loops of
//! conditional writes, batches and transactions.
//!
//! # Pauses
//! Every retry loop of the workspace waits with a [`RetryBackoff`], one named policy per kind of
//! failure: [`RetryBackoff::CONFLICT`] (a transaction conflict on one item),
//! [`RetryBackoff::UNPROCESSED`] (keys or items a batch request left unprocessed),
//! [`RetryBackoff::RACE`] (a conditional transaction that lost to another writer),
//! [`RetryBackoff::SPLIT`] (a split's transaction refused for throughput) and
//! [`RetryBackoff::of_client`] (the client's own retry configuration, for bucket writes). Pauses
//! are the async runtime's timer, not a repository's clock: a clock injected for tests moves
//! the time of buckets, not the pauses between attempts.
//!
//! # Bucket writes
//! Shared by the fast path and the SDK path of [`crate::bucket::BucketStore`]:
//!
//! A write is sent again only when its earlier attempt is known not to have been applied:
//! the connection was never established, or DynamoDB refused the request with a 4xx
//! (throttling, a refused signature or credential). Once the request may have reached the
//! service and no answer says what happened (a connection failing after the request was
//! written, an attempt timeout, a 5xx answer, which DynamoDB documents as "may or may not
//! have succeeded"), the outcome is unknown, and the write is reported as
//! [`RepositoryError::OutcomeUnknown`] instead of being sent again, unless the caller
//! declared that a second application is harmless. A 2xx status is an applied write even when
//! its body cannot be read: the write is reported as applied with no returned item. Every
//! retry is paid from the repository's retry budget, as the SDK's standard retry quota: 500
//! units, 14 per retry (5 after throttling), refunded on success. A split's transaction
//! refused for throughput is the exception: sent again up to eight times outside the budget,
//! since it relieves the partition that refuses it (`Pace::Persistent` in
//! [`crate::bucket`]).

use aws_sdk_dynamodb::error::SdkError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

pub(crate) use dynalimit_wire::retry::{
    Budget, RETRY_COST, Resend, THROTTLING_RETRY_COST, max_attempts, never_connected,
};
pub use dynalimit_wire::retry::{OnThrottle, RetryBackoff};

use crate::RepositoryError;

/// A write whose first attempt was refused for throughput and which the client's retry
/// configuration (or the retry budget) does not send again.
pub(crate) fn throttled_again(operation: &'static str) -> RepositoryError {
    RepositoryError::Throttled {
        operation,
        message: "throttled, and no retry left to send it again".to_owned(),
    }
}

/// The error of a write whose outcome is unknown.
pub(crate) fn unknown(operation: &'static str, message: impl Into<String>) -> RepositoryError {
    crate::metrics::unknown_outcome(operation);
    RepositoryError::OutcomeUnknown {
        operation,
        message: message.into(),
    }
}

/// What an SDK attempt that failed did to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A 2xx status whose body could not be read: applied.
    Applied,
    /// Refused, or never sent: nothing applied.
    Refused,
    /// It may have been applied.
    MaybeApplied,
}

/// Classifies an SDK failure by what it may have applied.
pub(crate) fn sdk_attempt<E>(err: &SdkError<E, HttpResponse>) -> Attempt
where
    E: std::error::Error + 'static,
{
    let by_status = |status: u16| match status {
        200..=299 => Attempt::Applied,
        400..=499 => Attempt::Refused,
        _ => Attempt::MaybeApplied,
    };
    match err {
        SdkError::ServiceError(ctx) => match by_status(ctx.raw().status().as_u16()) {
            // A service error always has a body; a 2xx one is not an answer DynamoDB gives.
            Attempt::Applied => Attempt::MaybeApplied,
            other => other,
        },
        SdkError::ResponseError(ctx) => by_status(ctx.raw().status().as_u16()),
        SdkError::DispatchFailure(_) if never_connected(err) => Attempt::Refused,
        SdkError::ConstructionFailure(_) => Attempt::Refused,
        _ => Attempt::MaybeApplied,
    }
}
