//! The error type of the stack manager, and the classification of CloudFormation and S3
//! failures.

use aws_sdk_cloudformation::error::{ProvideErrorMetadata, SdkError};
use thiserror::Error;

/// Everything a stack operation can report. SDK failures are classified at the boundary; no
/// SDK type leaks through.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StackError {
    /// Bad input (an option, the stack name), detected before any request was sent.
    #[error(transparent)]
    Validation(#[from] dynalimit_core::CoreError),

    /// The CloudFormation stack does not exist.
    #[error("stack {stack:?} does not exist; deploy it with `dynalimit deploy`")]
    NotFound {
        /// The stack name.
        stack: String,
    },

    /// A CloudFormation operation on the stack did not reach the state it aimed for.
    #[error("stack {stack:?} ended in {status}: {reason}")]
    Failed {
        /// The stack name.
        stack: String,
        /// The status it ended in (e.g. `ROLLBACK_COMPLETE`).
        status: String,
        /// The first failure CloudFormation reported, or the stack's status reason.
        reason: String,
    },

    /// AWS refused the credentials or the permission.
    #[error("permission denied during {operation}: {message}")]
    PermissionDenied {
        /// The operation.
        operation: &'static str,
        /// The service's message.
        message: String,
    },

    /// The service throttled the request after the SDK's own retries.
    #[error("throttled during {operation}: {message}")]
    Throttled {
        /// The operation.
        operation: &'static str,
        /// The service's message.
        message: String,
    },

    /// The service could not be reached or failed (network, timeout, 5xx).
    #[error("AWS unavailable during {operation}: {message}")]
    Unavailable {
        /// The operation.
        operation: &'static str,
        /// What failed.
        message: String,
    },

    /// The service rejected the request for another reason.
    #[error("AWS rejected {operation} ({code}): {message}")]
    Rejected {
        /// The operation.
        operation: &'static str,
        /// The service's error code.
        code: String,
        /// The service's message.
        message: String,
    },
}

const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "SlowDown",
];

const PERMISSION_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "MissingAuthenticationTokenException",
    "ExpiredToken",
    "ExpiredTokenException",
    "IncompleteSignatureException",
];

/// Classifies an SDK failure of `operation`.
pub(crate) fn classify<E, R>(operation: &'static str, err: SdkError<E, R>) -> StackError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    match &err {
        SdkError::ServiceError(service) => {
            let inner = service.err();
            let code = inner.code().unwrap_or("Unknown").to_string();
            let message = inner.message().unwrap_or_default().to_string();
            classify_code(operation, code, message)
        }
        SdkError::ConstructionFailure(_) => StackError::Rejected {
            operation,
            code: "ConstructionFailure".into(),
            message: error_chain(&err),
        },
        _ => StackError::Unavailable {
            operation,
            message: error_chain(&err),
        },
    }
}

fn classify_code(operation: &'static str, code: String, message: String) -> StackError {
    if THROTTLING_CODES.contains(&code.as_str()) {
        StackError::Throttled { operation, message }
    } else if PERMISSION_CODES.contains(&code.as_str()) {
        StackError::PermissionDenied { operation, message }
    } else if code.starts_with("InternalFailure")
        || code.starts_with("InternalError")
        || code == "ServiceUnavailable"
    {
        StackError::Unavailable { operation, message }
    } else {
        StackError::Rejected {
            operation,
            code,
            message,
        }
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_documented_classes() {
        let c = |code: &str| classify_code("CreateStack", code.into(), String::new());
        assert!(matches!(c("Throttling"), StackError::Throttled { .. }));
        assert!(matches!(
            c("AccessDenied"),
            StackError::PermissionDenied { .. }
        ));
        assert!(matches!(
            c("InternalFailure"),
            StackError::Unavailable { .. }
        ));
        assert!(matches!(c("ValidationError"), StackError::Rejected { .. }));
    }
}
