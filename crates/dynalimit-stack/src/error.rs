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

    /// The stack of that name does not carry dynalimit's mark (the output or stack tag
    /// `Application=dynalimit`): it was left as it is.
    #[error(
        "stack {stack:?} is not a dynalimit stack (no output or stack tag Application=dynalimit{}); \
         it was left as it is",
        foreign_tags(tags)
    )]
    Foreign {
        /// The stack name.
        stack: String,
        /// The stack's tags, which may say whose it is (`ManagedBy=zae-limiter`).
        tags: Vec<(String, String)>,
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

/// The tags of a foreign stack, as its refusal quotes them: `; its tags: K=V, …` (at most
/// five), or nothing.
fn foreign_tags(tags: &[(String, String)]) -> String {
    if tags.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = tags
        .iter()
        .take(5)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let more = if tags.len() > 5 { ", …" } else { "" };
    format!("; its tags: {}{more}", shown.join(", "))
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
/// [`failure::classify`] does, except that a 403 whose code it does not know (an error body
/// the SDK could not read, a proxy's or an endpoint policy's refusal) is a permission
/// refusal, never an invalid request.
fn classify_code(
    operation: &'static str,
    status: Option<u16>,
    code: String,
    message: String,
) -> StackError {
    let class = match failure::classify(status, &code) {
        ErrorClass::Invalid if status == Some(403) => ErrorClass::PermissionDenied,
        class => class,
    };
    match class {
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
        let forbidden = classify_code("DescribeStacks", Some(403), "Unknown".into(), String::new());
        assert!(matches!(forbidden, StackError::PermissionDenied { .. }));
    }
}
