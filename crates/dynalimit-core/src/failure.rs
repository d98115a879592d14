//! What an AWS service's error answer means: one classification for every client in the
//! workspace (DynamoDB in the data plane, CloudFormation and S3 in the control plane), from
//! the answer's error code and, when known, its HTTP status.
//!
//! ```
//! use dynalimit_core::failure::{ErrorClass, classify};
//!
//! assert_eq!(classify(Some(400), "ThrottlingException"), ErrorClass::Throttled);
//! assert_eq!(classify(Some(400), "ValidationException"), ErrorClass::Invalid);
//! assert_eq!(classify(Some(503), "SomethingNew"), ErrorClass::Unavailable);
//! ```

/// What a refusal says about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Refused for its rate (throttling, a transaction item's throughput): the same request
    /// may succeed later.
    Throttled,
    /// The credentials or the permission were refused: a deployment error, not an outage.
    PermissionDenied,
    /// A write lost a race with a transaction on the same item.
    Conflict,
    /// The named resource (a DynamoDB table) does not exist.
    NotFound,
    /// The service failed: a 5xx status, or a code that says so. An outage.
    Unavailable,
    /// The request itself is wrong (`ValidationException`, `SerializationException`, a
    /// transaction's `ValidationError`, any other 4xx): sending it again fails the same way.
    Invalid,
}

/// Codes of a request refused for its rate, the reasons of a cancelled transaction's items
/// among them.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ProvisionedThroughputExceeded",
    "ThrottlingException",
    "ThrottlingError",
    "Throttling",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "SlowDown",
];

/// Codes of refused credentials or permissions.
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

/// Codes of a write that lost to a transaction.
const CONFLICT_CODES: &[&str] = &[
    "TransactionConflictException",
    "TransactionConflict",
    "TransactionInProgressException",
    "ReplicatedWriteConflictException",
];

/// Codes of a service that failed, whatever the status says.
const SERVER_CODES: &[&str] = &[
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
];

/// The class of an error answer with `code` (without its protocol namespace) and, when
/// known, HTTP `status`. A code none of the lists name is an outage under a 5xx status and
/// an invalid request otherwise.
pub fn classify(status: Option<u16>, code: &str) -> ErrorClass {
    if THROTTLING_CODES.contains(&code) {
        ErrorClass::Throttled
    } else if PERMISSION_CODES.contains(&code) {
        ErrorClass::PermissionDenied
    } else if CONFLICT_CODES.contains(&code) {
        ErrorClass::Conflict
    } else if SERVER_CODES.contains(&code)
        || code.starts_with("InternalServer")
        || code.starts_with("InternalError")
        || status.is_some_and(|s| s >= 500)
    {
        ErrorClass::Unavailable
    } else if code == "ResourceNotFoundException" {
        ErrorClass::NotFound
    } else {
        ErrorClass::Invalid
    }
}

/// An error and its sources, joined by `": "`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
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
    fn codes_map_to_their_classes() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingError",
            "SlowDown",
        ] {
            assert_eq!(classify(Some(400), code), ErrorClass::Throttled, "{code}");
        }
        for code in ["AccessDeniedException", "AccessDenied", "ExpiredToken"] {
            assert_eq!(classify(Some(400), code), ErrorClass::PermissionDenied);
        }
        assert_eq!(
            classify(Some(400), "TransactionConflictException"),
            ErrorClass::Conflict
        );
        assert_eq!(
            classify(Some(400), "ResourceNotFoundException"),
            ErrorClass::NotFound
        );
        for code in ["InternalServerError", "InternalFailure", "InternalError"] {
            assert_eq!(classify(None, code), ErrorClass::Unavailable, "{code}");
        }
        for code in [
            "ValidationException",
            "ValidationError",
            "SerializationException",
            "ItemCollectionSizeLimitExceededException",
            "Unknown",
        ] {
            assert_eq!(classify(Some(400), code), ErrorClass::Invalid, "{code}");
            assert_eq!(classify(None, code), ErrorClass::Invalid, "{code}");
        }
    }

    #[test]
    fn an_unknown_code_is_an_outage_under_a_server_status_only() {
        assert_eq!(classify(Some(502), "HTTP502"), ErrorClass::Unavailable);
        assert_eq!(classify(Some(503), "Unknown"), ErrorClass::Unavailable);
        assert_eq!(classify(Some(413), "HTTP413"), ErrorClass::Invalid);
        // The rate outranks the status: a throttle answered 5xx is still a throttle.
        assert_eq!(
            classify(Some(503), "ThrottlingException"),
            ErrorClass::Throttled
        );
    }

    #[test]
    fn an_error_chain_joins_its_sources() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("outer")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
