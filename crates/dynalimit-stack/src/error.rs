//! The error type of the stack manager, and the classification of CloudFormation and S3
//! failures.

use aws_sdk_cloudformation::config::http::HttpResponse;
use aws_sdk_cloudformation::error::{ProvideErrorMetadata, SdkError};
use dynalimit_core::failure::{self, ErrorClass, error_chain};
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

/// Classifies an SDK failure of `operation`.
pub(crate) fn classify<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> StackError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let inner = service.err();
            let code = inner.code().unwrap_or("Unknown").to_string();
            let message = inner.message().unwrap_or_default().to_string();
            classify_code(
                operation,
                Some(service.raw().status().as_u16()),
                code,
                message,
            )
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

/// The error of a service answer with `code` and `status`, classified as
/// [`failure::classify`] does.
fn classify_code(
    operation: &'static str,
    status: Option<u16>,
    code: String,
    message: String,
) -> StackError {
    match failure::classify(status, &code) {
        ErrorClass::Throttled => StackError::Throttled { operation, message },
        ErrorClass::PermissionDenied => StackError::PermissionDenied { operation, message },
        ErrorClass::Unavailable => StackError::Unavailable { operation, message },
        ErrorClass::Conflict | ErrorClass::NotFound | ErrorClass::Invalid => StackError::Rejected {
            operation,
            code,
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_documented_classes() {
        let c = |code: &str| classify_code("CreateStack", Some(400), code.into(), String::new());
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
