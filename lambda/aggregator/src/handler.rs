//! The Lambda handler: a DynamoDB stream batch in, a partial batch failure response out.

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};

use crate::aggregator::{Aggregator, BatchReport};
use crate::record::{SequenceNumber, StreamRecord};

/// Converts a Lambda stream event into records, in delivery order. Records that cannot be read
/// (no sequence number, no recognisable event) are dropped with a warning: delivering them
/// again would not make them readable.
pub fn records_of(event: Event) -> Vec<StreamRecord> {
    event
        .records
        .into_iter()
        .filter_map(|r| match StreamRecord::from_lambda(r) {
            Ok(record) => Some(record),
            Err(e) => {
                tracing::warn!(error = %e, "skipping unreadable stream record");
                None
            }
        })
        .collect()
}

/// The partial batch failure response for a report: every record whose usage is not counted
/// yet, by sequence number (the event source restarts from the lowest one).
pub fn response_of(report: &BatchReport) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = report
        .failed
        .iter()
        .map(|seq: &SequenceNumber| {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(seq.as_str().to_owned());
            failure
        })
        .collect();
    response
}

/// Handles one stream event.
pub async fn handle(aggregator: &Aggregator, event: Event) -> DynamoDbEventResponse {
    let records = records_of(event);
    let report = aggregator.process(&records).await;
    tracing::info!(
        records = report.records,
        counted = report.counted,
        duplicates = report.duplicates,
        failed = report.failed.len(),
        snapshots = report.snapshots_written,
        refills = report.refills_written,
        shards = report.shards_stamped,
        shards_created = report.shards_created,
        archived = report.events_archived,
        alerts = report.alerts_published,
        errors = report.errors.len(),
        "batch processed"
    );
    if aggregator.settings().tenant_metrics {
        let now = aggregator.clock().epoch_millis();
        for line in crate::emf::lines(&aggregator.settings().table_name, now, &report.tenant_usage)
        {
            println!("{line}");
        }
    }
    response_of(&report)
}
