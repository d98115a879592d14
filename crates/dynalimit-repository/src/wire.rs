//! The repository's side of the fast path: the transport is `dynalimit-wire`; this module
//! says what its outcomes mean here ([`RepositoryError`]) and reports its requests as the
//! client's interceptors would.

use dynalimit_format::expr::Expr;
use dynalimit_format::item::Item;
use dynalimit_wire::{Observer, WireError};

pub(crate) use dynalimit_wire::{
    EndpointCapture, FastPath, Fields, ObjectWriter, UpdateItem, UpdateOutcome, Written,
    number_openings, plain_attributes, read_attributes,
};

use crate::RepositoryError;
use crate::error::classify_code;
use crate::metrics::{RequestCounter, RequestMetrics};
use crate::retry::{self, Resend};

/// The only operation the fast path sends.
const OPERATION: &str = "UpdateItem";

impl From<WireError> for RepositoryError {
    /// A refusal is classified as the SDK path's are; a lost answer is counted in
    /// [`crate::UNKNOWN_OUTCOMES`].
    fn from(e: WireError) -> Self {
        match e {
            WireError::Unavailable { message } => RepositoryError::Unavailable {
                operation: OPERATION,
                message,
            },
            WireError::PermissionDenied { message } => RepositoryError::PermissionDenied {
                operation: OPERATION,
                message,
            },
            WireError::OutcomeUnknown { message } => retry::unknown(OPERATION, message),
            WireError::Throttled { .. } => retry::throttled_again(OPERATION),
            WireError::Refused {
                status,
                code,
                message,
            } => classify_code(OPERATION, Some(status), &code, message),
        }
    }
}

/// Reports the fast path's requests as the repository client's interceptors report the
/// SDK's: [`RequestMetrics`] always, the [`RequestCounter`] handed to the builder when given.
#[derive(Debug, Default)]
pub(crate) struct Reporting {
    pub(crate) counter: Option<RequestCounter>,
}

impl Observer for Reporting {
    fn covers(&self, name: &str) -> bool {
        name == RequestMetrics::NAME || (name == RequestCounter::NAME && self.counter.is_some())
    }

    fn started(&self, operation: &'static str) {
        crate::metrics::request_sent(operation);
        if let Some(counter) = &self.counter {
            counter.started(operation);
        }
    }

    fn finished(&self) {
        if let Some(counter) = &self.counter {
            counter.finished();
        }
    }
}

/// Sends one `UpdateItem` of `e` on item `key` of `table` through `wire` (no values
/// returned), under the rules of every bucket write: sent again only while earlier attempts
/// are known not to have been applied. The benchmark measures acquires against it.
///
/// # Errors
/// [`RepositoryError::OutcomeUnknown`] when an attempt may have been applied and its answer
/// was lost; [`RepositoryError::InvalidRequest`] for a failed condition; otherwise the classified
/// failure once the retries are spent.
pub async fn send_update(
    wire: &FastPath,
    table: &str,
    key: &Item,
    e: &Expr,
) -> Result<(), RepositoryError> {
    let update = e.update_expression();
    let condition = e.condition_expression();
    let names = e.name_pairs();
    let request = UpdateItem {
        table,
        key,
        update_expression: update.as_deref(),
        condition_expression: condition.as_deref(),
        names: &names,
        values: e.value_pairs(),
        return_all_new: false,
        return_old_on_failure: false,
        resend: Resend::Never,
    };
    match wire.update_item(&request).await? {
        UpdateOutcome::Updated(_) => Ok(()),
        UpdateOutcome::ConditionFailed(_) => Err(RepositoryError::InvalidRequest {
            operation: OPERATION,
            code: "ConditionalCheckFailedException".into(),
            message: "the condition failed".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_s_refusals_are_classified() {
        let refused = |status: u16, code: &str| {
            RepositoryError::from(WireError::Refused {
                status,
                code: code.into(),
                message: "said".into(),
            })
        };
        assert!(matches!(
            refused(400, "TransactionConflictException"),
            RepositoryError::TransactionConflict { .. }
        ));
        assert!(matches!(
            refused(400, "ResourceNotFoundException"),
            RepositoryError::TableNotFound { .. }
        ));
        assert!(matches!(
            refused(502, "InternalServerError"),
            RepositoryError::Unavailable { .. }
        ));
        assert!(matches!(
            RepositoryError::from(WireError::OutcomeUnknown {
                message: "lost".into()
            }),
            RepositoryError::OutcomeUnknown { .. }
        ));
        assert!(matches!(
            RepositoryError::from(WireError::Throttled {
                message: "again".into()
            }),
            RepositoryError::Throttled { .. }
        ));
    }

    #[test]
    fn the_reporter_stands_for_the_interceptors_that_only_count() {
        let bare = Reporting::default();
        assert!(bare.covers(RequestMetrics::NAME));
        assert!(
            !bare.covers(RequestCounter::NAME),
            "a counter it does not hold"
        );
        assert!(!bare.covers("someone::Else"));
        let counted = Reporting {
            counter: Some(RequestCounter::default()),
        };
        assert!(counted.covers(RequestCounter::NAME));
    }
}
