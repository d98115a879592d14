//! The [`Aggregator`]: the I/O half of the pipeline. It reads watermarks, commits the planned
//! transactions, runs the proactive passes, and reports which records must be delivered
//! again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use dynalimit_core::{Clock, SystemClock};
use dynalimit_format::item;
use dynalimit_format::usage::watermark_seq;
use dynalimit_repository::retry::RetryBackoff;
use dynalimit_repository::{RepositoryError, batch_get_items};
use futures::StreamExt;

use crate::alerts::Alerts;
use crate::archive::Archive;
use crate::config::Settings;
use crate::processor::{self, BucketRef, GroupPlan, Transaction, Usage};
use crate::record::{SequenceNumber, StreamRecord};
use crate::writes::transact_items;

/// How many (entity, resource) groups are committed at once.
const GROUP_CONCURRENCY: usize = 8;
/// Attempts per group when a watermark moved or a transaction conflicted.
const GROUP_ATTEMPTS: u32 = 4;

/// Counter: stream records processed, by `result` (`counted`, `duplicate`: counted by an
/// earlier delivery, `failed`: to be delivered again).
pub const RECORDS: &str = "dynalimit_aggregator_records_total";
/// Counter: snapshot item writes committed.
pub const SNAPSHOT_WRITES: &str = "dynalimit_aggregator_snapshot_writes_total";
/// Counter: proactive writes that landed, by `kind` (`refill`, `shard_counts`,
/// `shard_created`).
pub const PROACTIVE_WRITES: &str = "dynalimit_aggregator_proactive_writes_total";
/// Counter: expired audit events written to the archive.
pub const ARCHIVED: &str = "dynalimit_aggregator_events_archived_total";
/// Counter: quota threshold crossings and refusal alerts published.
pub const ALERTS_PUBLISHED: &str = "dynalimit_aggregator_alerts_published_total";
/// Counter: errors of a batch (a group that could not commit, a proactive write that failed).
pub const ERRORS: &str = "dynalimit_aggregator_errors_total";

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Records received.
    pub records: usize,
    /// Records whose usage was counted now.
    pub counted: usize,
    /// Records whose usage had already been counted (a redelivery).
    pub duplicates: usize,
    /// Records that must be delivered again (their usage is not counted yet).
    pub failed: Vec<SequenceNumber>,
    /// Snapshot item writes committed.
    pub snapshots_written: usize,
    /// Transactions committed.
    pub transactions: usize,
    /// Proactive refill writes that landed.
    pub refills_written: usize,
    /// Shard counts doubled or propagated.
    pub shards_stamped: usize,
    /// Shards pre-created after a doubling (reference §7.3, path 2).
    pub shards_created: usize,
    /// Expired audit events written to the archive (each to its own object).
    pub events_archived: usize,
    /// Quota threshold crossings and refusal alerts published ([`crate::alerts`],
    /// [`crate::refusing`]).
    pub alerts_published: usize,
    /// Whole tokens counted by this delivery, per (namespace id, entity, resource) and limit
    /// (usage an earlier delivery counted is not in it): what [`crate::emf`] reports. Empty
    /// unless [`Settings::tenant_metrics`] is on.
    pub tenant_usage: crate::emf::TenantUsage,
    /// What went wrong, one line each.
    pub errors: Vec<String>,
}

impl BatchReport {
    /// Records the batch through the `metrics` facade ([`RECORDS`], [`SNAPSHOT_WRITES`],
    /// [`PROACTIVE_WRITES`], [`ARCHIVED`], [`ERRORS`]); [`Aggregator::process`] does after every batch.
    pub fn record_metrics(&self) {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        for (result, n) in [
            ("counted", self.counted),
            ("duplicate", self.duplicates),
            ("failed", self.failed.len()),
        ] {
            metrics::counter!(RECORDS, "result" => result).increment(count(n));
        }
        metrics::counter!(SNAPSHOT_WRITES).increment(count(self.snapshots_written));
        for (kind, n) in [
            ("refill", self.refills_written),
            ("shard_counts", self.shards_stamped),
            ("shard_created", self.shards_created),
        ] {
            metrics::counter!(PROACTIVE_WRITES, "kind" => kind).increment(count(n));
        }
        metrics::counter!(ARCHIVED).increment(count(self.events_archived));
        metrics::counter!(ALERTS_PUBLISHED).increment(count(self.alerts_published));
        metrics::counter!(ERRORS).increment(count(self.errors.len()));
    }
}

/// Outcome of one committed group.
#[derive(Debug, Default)]
struct GroupOutcome {
    counted: BTreeSet<SequenceNumber>,
    failed: Vec<SequenceNumber>,
    snapshots: usize,
    transactions: usize,
    errors: Vec<String>,
}

enum TxError {
    /// A watermark moved since it was read, or another transaction got in the way: re-read and
    /// re-plan.
    Retry(String),
    /// Anything else.
    Fatal(String),
}

/// The stream processor bound to a table: build it once per process (Lambda container or
/// runner) and feed it batches.
#[derive(Debug, Clone)]
pub struct Aggregator {
    client: Client,
    settings: Arc<Settings>,
    clock: Arc<dyn Clock>,
    archive: Option<Archive>,
    alerts: Option<Alerts>,
}

impl Aggregator {
    /// An aggregator writing through `client` with `settings`, on the system clock.
    pub fn new(client: Client, settings: Settings) -> Self {
        Self::with_clock(client, settings, Arc::new(SystemClock))
    }

    /// As [`Aggregator::new`] with an injected clock (snapshot TTLs and refills read it).
    pub fn with_clock(client: Client, settings: Settings, clock: Arc<dyn Clock>) -> Self {
        Aggregator {
            client,
            settings: Arc::new(settings),
            clock,
            archive: None,
            alerts: None,
        }
    }

    /// Archives the audit events that expire from the table to `archive` (see
    /// [`crate::archive`]).
    #[must_use]
    pub fn with_archive(mut self, archive: Archive) -> Self {
        self.archive = Some(archive);
        self
    }

    /// Publishes the quota threshold crossings of each batch with `alerts` (see
    /// [`crate::alerts`]).
    #[must_use]
    pub fn with_alerts(mut self, alerts: Alerts) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// The alert publisher, when crossings are published.
    pub fn alerts(&self) -> Option<&Alerts> {
        self.alerts.as_ref()
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Processes one batch of stream records, in stream order.
    ///
    /// Usage already counted by an earlier delivery is skipped (see the crate documentation);
    /// the report lists the records whose usage could not be committed, which the caller must
    /// deliver again. Proactive refill and sharding run afterwards; their failures are logged
    /// in the report but never fail a record. A record whose new image holds a value out of
    /// bounds (a `shard_count` above 32, an `rf` beyond 2500) is left out and reported as an
    /// error: it is not counted, nothing is written for it, and it is not delivered again.
    pub async fn process(&self, records: &[StreamRecord]) -> BatchReport {
        let extracted = processor::extract(records);
        let mut report = BatchReport {
            records: records.len(),
            errors: extracted.corrupt.clone(),
            ..BatchReport::default()
        };
        let usage_records: BTreeSet<&SequenceNumber> =
            extracted.usage.iter().map(|u| &u.sequence_number).collect();

        let mut by_group: HashMap<processor::GroupKey, Vec<Usage>> = HashMap::new();
        for u in &extracted.usage {
            by_group
                .entry(u.bucket.group())
                .or_default()
                .push(u.clone());
        }
        let outcomes: Vec<GroupOutcome> = futures::stream::iter(by_group.into_values())
            .map(|usage| async move { self.commit_group(&usage).await })
            .buffer_unordered(GROUP_CONCURRENCY)
            .collect()
            .await;
        let mut failed = BTreeSet::new();
        let mut counted = BTreeSet::new();
        for o in outcomes {
            report.counted += o.counted.len();
            counted.extend(o.counted.iter().cloned());
            report.snapshots_written += o.snapshots;
            report.transactions += o.transactions;
            report.errors.extend(o.errors);
            failed.extend(o.failed);
        }
        report.duplicates = usage_records
            .len()
            .saturating_sub(report.counted + failed.len());
        report.failed = failed.into_iter().collect();
        for u in extracted
            .usage
            .iter()
            .filter(|u| self.settings.tenant_metrics && counted.contains(&u.sequence_number))
        {
            let b = &u.bucket;
            let limits = report
                .tenant_usage
                .entry((
                    b.namespace_id.clone(),
                    b.entity_id.clone(),
                    b.resource.clone(),
                ))
                .or_default();
            for d in &u.deltas {
                *limits.entry(d.limit.clone()).or_default() += d.tokens;
            }
        }

        if self.settings.proactive_refill || self.settings.proactive_sharding {
            let passes = crate::proactive::Passes {
                client: &self.client,
                table: &self.settings.table_name,
                clock: self.clock.as_ref(),
                refill: self.settings.proactive_refill,
                sharding: self.settings.proactive_sharding,
            };
            let p = passes.run(&extracted.activity).await;
            report.refills_written = p.refills;
            report.shards_stamped = p.shards_stamped;
            report.shards_created = p.shards_created;
            report.errors.extend(p.errors);
        }
        if let Some(archive) = &self.archive {
            self.archive_expired(archive, records, &mut report).await;
        }
        if let Some(alerts) = &self.alerts {
            let a = alerts
                .run(
                    &self.client,
                    &self.settings.table_name,
                    self.clock.epoch_millis(),
                    &extracted.activity,
                )
                .await;
            report.alerts_published = a.published;
            report.errors.extend(a.errors);
            let mut failed: BTreeSet<SequenceNumber> = report.failed.drain(..).collect();
            failed.extend(a.failed);
            let refused = crate::refusing::minutes_of(records);
            if !refused.is_empty() {
                let r = alerts
                    .run_refusals(
                        &self.client,
                        &self.settings.table_name,
                        self.clock.epoch_millis(),
                        &refused,
                    )
                    .await;
                report.alerts_published += r.published;
                report.errors.extend(r.errors);
                failed.extend(r.failed);
            }
            report.failed = failed.into_iter().collect();
        }
        for e in &report.errors {
            tracing::warn!(error = %e, "aggregator");
        }
        report.record_metrics();
        report
    }

    /// Writes each expired audit event of `records` to its object. A write that failed (or
    /// whose answer was lost) reports its record as failed: delivered again, it lands on the
    /// same key with the same bytes.
    async fn archive_expired(
        &self,
        archive: &Archive,
        records: &[StreamRecord],
        report: &mut BatchReport,
    ) {
        let mut objects = Vec::new();
        for record in records {
            match crate::archive::expired_event(record) {
                Some(Ok(object)) => objects.push((record.sequence_number.clone(), object)),
                Some(Err(e)) => report.errors.push(e),
                None => {}
            }
        }
        let results: Vec<_> = futures::stream::iter(objects)
            .map(|(seq, object)| async move { (seq, archive.put(&object).await) })
            .buffer_unordered(GROUP_CONCURRENCY)
            .collect()
            .await;
        let mut failed: BTreeSet<SequenceNumber> = report.failed.drain(..).collect();
        for (seq, result) in results {
            match result {
                Ok(()) => report.events_archived += 1,
                Err(e) => {
                    report.errors.push(e.to_string());
                    failed.insert(seq);
                }
            }
        }
        report.failed = failed.into_iter().collect();
    }

    /// Commits the usage of one (namespace, entity, resource), re-planning from fresh
    /// watermarks when another writer moved them.
    async fn commit_group(&self, usage: &[Usage]) -> GroupOutcome {
        let mut outcome = GroupOutcome::default();
        let buckets = processor::watermark_keys(usage);
        let mut last_error = String::new();
        for attempt in 0..GROUP_ATTEMPTS {
            if attempt > 0 {
                RetryBackoff::RACE.pause(attempt).await;
            }
            let watermarks = match self.read_watermarks(&buckets).await {
                Ok(w) => w,
                Err(e) => {
                    last_error = format!("reading watermarks: {e}");
                    if e.is_retryable() {
                        continue;
                    }
                    break;
                }
            };
            let plans: Vec<GroupPlan> = processor::plan(usage, &watermarks, &self.settings.windows);
            let Some(plan) = plans.into_iter().next() else {
                // Everything was counted already.
                return outcome;
            };
            match self.commit_plan(&plan, &mut outcome).await {
                Ok(()) => return outcome,
                Err(TxError::Retry(e)) => last_error = e,
                Err(TxError::Fatal(e)) => {
                    last_error = e;
                    break;
                }
            }
        }
        // Whatever is not counted now must come again.
        outcome.failed = usage
            .iter()
            .map(|u| u.sequence_number.clone())
            .filter(|s| !outcome.counted.contains(s))
            .collect();
        outcome.errors.push(last_error);
        outcome
    }

    async fn commit_plan(
        &self,
        plan: &GroupPlan,
        outcome: &mut GroupOutcome,
    ) -> Result<(), TxError> {
        let ttl = self.settings.snapshot_ttl(self.clock.epoch_millis());
        for tx in &plan.transactions {
            self.commit(tx, ttl).await?;
            outcome.transactions += 1;
            outcome.snapshots += tx.snapshots.len();
            outcome.counted.extend(tx.records.iter().cloned());
        }
        Ok(())
    }

    async fn commit(&self, tx: &Transaction, ttl: i64) -> Result<(), TxError> {
        let items = transact_items(&self.settings.table_name, tx, ttl)
            .map_err(|e| TxError::Fatal(format!("building TransactWriteItems: {e}")))?;
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err) => {
                if let Some(TransactWriteItemsError::TransactionCanceledException(c)) =
                    err.as_service_error()
                {
                    let codes: Vec<&str> = c
                        .cancellation_reasons()
                        .iter()
                        .filter_map(|r| r.code())
                        .filter(|c| *c != "None")
                        .collect();
                    let message = format!("snapshot transaction cancelled: {codes:?}");
                    let retry = codes.iter().all(|c| {
                        matches!(
                            *c,
                            "ConditionalCheckFailed"
                                | "TransactionConflict"
                                | "ThrottlingError"
                                | "ProvisionedThroughputExceeded"
                        )
                    });
                    return Err(if retry {
                        TxError::Retry(message)
                    } else {
                        TxError::Fatal(message)
                    });
                }
                let code = err.code().map(str::to_owned);
                let e = RepositoryError::from_sdk("TransactWriteItems", err);
                let message = format!("{e}{}", code.map(|c| format!(" ({c})")).unwrap_or_default());
                Err(if e.is_retryable() {
                    TxError::Retry(message)
                } else {
                    TxError::Fatal(message)
                })
            }
        }
    }

    /// Reads the watermarks of `buckets` (strongly consistent).
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB fails or keeps keys unprocessed.
    pub async fn read_watermarks(
        &self,
        buckets: &[BucketRef],
    ) -> Result<HashMap<BucketRef, SequenceNumber>, RepositoryError> {
        let by_key: HashMap<(String, String), &BucketRef> = buckets
            .iter()
            .filter_map(|b| {
                let key = b.marker_key();
                let (pk, sk) = item::key_of(&key)?;
                Some(((pk.to_owned(), sk.to_owned()), b))
            })
            .collect();
        let mut out = HashMap::new();
        for chunk in buckets.chunks(100) {
            let keys = chunk.iter().map(BucketRef::marker_key).collect();
            let found =
                batch_get_items(&self.client, &self.settings.table_name, keys, true).await?;
            for found in &found {
                let Some((pk, sk)) = item::key_of(found) else {
                    continue;
                };
                let Some(bucket) = by_key.get(&(pk.to_owned(), sk.to_owned())) else {
                    continue;
                };
                if let Some(seq) = watermark_seq(found).and_then(SequenceNumber::parse) {
                    out.insert((*bucket).clone(), seq);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn a_batch_is_recorded_through_the_metrics_facade() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let report = BatchReport {
            records: 6,
            counted: 3,
            duplicates: 2,
            failed: vec![SequenceNumber::parse("9").unwrap()],
            snapshots_written: 4,
            refills_written: 1,
            errors: vec!["a group could not commit".into()],
            ..BatchReport::default()
        };
        metrics::with_local_recorder(&recorder, || report.record_metrics());
        let mut seen: Vec<(String, Vec<String>, u64)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n) => Some((
                    key.key().name().to_owned(),
                    key.key().labels().map(|l| l.value().to_owned()).collect(),
                    n,
                )),
                _ => None,
            })
            .collect();
        seen.sort();
        let get = |name: &str, label: &[&str]| {
            seen.iter()
                .find(|(n, l, _)| {
                    n == name && l.iter().map(String::as_str).eq(label.iter().copied())
                })
                .map(|(_, _, v)| *v)
        };
        assert_eq!(get(RECORDS, &["counted"]), Some(3));
        assert_eq!(get(RECORDS, &["duplicate"]), Some(2));
        assert_eq!(get(RECORDS, &["failed"]), Some(1));
        assert_eq!(get(SNAPSHOT_WRITES, &[]), Some(4));
        assert_eq!(get(PROACTIVE_WRITES, &["refill"]), Some(1));
        assert_eq!(get(ERRORS, &[]), Some(1));
    }
}
