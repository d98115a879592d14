//! The stream runner behind `dynalimit aggregator run`: polls the table's stream through the
//! DynamoDB Streams API and feeds the [`Aggregator`], so DynamoDB Local and LocalStack users
//! get usage snapshots without Lambda.
//!
//! The runner walks every shard of the table's latest stream, parents before children, and
//! keeps per shard the sequence number of the last record it handed on. When a batch reports
//! failed records, the shard is re-read from the first of them. When a request fails — the
//! emulator restarted, an iterator expired, the table was recreated — the runner backs off,
//! forgets its iterators, describes the table again and resumes after its checkpoints (or from
//! the start of a new stream). Records read twice are harmless: the aggregator counts each
//! record once (see the crate documentation).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::Client as StreamsClient;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;

use crate::aggregator::Aggregator;
use crate::error::AggregatorError;
use crate::record::{SequenceNumber, StreamRecord};

/// Where the runner starts reading shards it has no checkpoint for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// The oldest record the stream still holds (24 hours on AWS): nothing is missed.
    #[default]
    TrimHorizon,
    /// Only records written after the runner started (shards found later still start at their
    /// beginning).
    Latest,
}

/// Tuning of the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerOptions {
    /// Where to start without a checkpoint.
    pub start: StartPosition,
    /// Pause between polls that found nothing.
    pub idle_wait: Duration,
    /// Largest pause after failures (the pause doubles from 200 ms up to this).
    pub max_backoff: Duration,
    /// Records per `GetRecords` call (at most 1000).
    pub batch_size: i32,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            start: StartPosition::TrimHorizon,
            idle_wait: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            batch_size: 1000,
        }
    }
}

/// What one poll did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Records read.
    pub records: usize,
    /// Records whose usage was counted.
    pub counted: usize,
    /// Records already counted before (read again).
    pub duplicates: usize,
    /// Records that failed and will be read again.
    pub failed: usize,
    /// Snapshot writes committed.
    pub snapshots_written: usize,
    /// Open or unfinished shards.
    pub shards: usize,
}

#[derive(Debug, Clone, Default)]
struct ShardState {
    parent: Option<String>,
    iterator: Option<String>,
    /// Last record handed on successfully.
    checkpoint: Option<SequenceNumber>,
    /// Re-read from this record (it failed).
    retry_at: Option<SequenceNumber>,
    /// The iterator ran out: the shard is closed and fully read.
    done: bool,
    /// Found at the runner's first discovery (relevant for [`StartPosition::Latest`]).
    initial: bool,
}

/// Polls one table's stream. Build once, then [`Runner::run`] or [`Runner::poll_once`].
#[derive(Debug)]
pub struct Runner {
    aggregator: Aggregator,
    streams: StreamsClient,
    options: RunnerOptions,
    stream_arn: Option<String>,
    shards: BTreeMap<String, ShardState>,
    discovered_once: bool,
}

fn streams_error<E>(
    operation: &'static str,
    err: aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> (Option<String>, AggregatorError)
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = err.code().map(str::to_owned);
    let e = dynalimit_repository::RepositoryError::from_sdk(operation, err);
    (
        code,
        AggregatorError::Streams {
            operation,
            message: e.to_string(),
        },
    )
}

impl Runner {
    /// A runner feeding `aggregator` from the stream read through `streams`.
    pub fn new(aggregator: Aggregator, streams: StreamsClient, options: RunnerOptions) -> Self {
        Runner {
            aggregator,
            streams,
            options,
            stream_arn: None,
            shards: BTreeMap::new(),
            discovered_once: false,
        }
    }

    /// A runner whose DynamoDB and DynamoDB Streams clients (and EventBridge client, with
    /// [`Settings::alert_event_bus`](crate::Settings::alert_event_bus)) all come from `sdk`
    /// (endpoint, region, credentials).
    pub fn from_sdk_config(
        sdk: &aws_config::SdkConfig,
        settings: crate::Settings,
        options: RunnerOptions,
    ) -> Self {
        let alerts = settings
            .alert_event_bus
            .as_ref()
            .map(|bus| crate::alerts::Alerts::new(sdk, bus.clone()));
        let mut aggregator = Aggregator::new(aws_sdk_dynamodb::Client::new(sdk), settings);
        if let Some(alerts) = alerts {
            aggregator = aggregator.with_alerts(alerts);
        }
        Runner::new(aggregator, StreamsClient::new(sdk), options)
    }

    /// The aggregator fed by this runner.
    pub fn aggregator(&self) -> &Aggregator {
        &self.aggregator
    }

    /// The stream being read, once discovered.
    pub fn stream_arn(&self) -> Option<&str> {
        self.stream_arn.as_deref()
    }

    /// Polls until `shutdown` completes, backing off on failures and waiting
    /// [`RunnerOptions::idle_wait`] when a poll found nothing. Never returns an error: every
    /// failure is logged and retried.
    pub async fn run(&mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = Duration::from_millis(200);
        loop {
            let wait = tokio::select! {
                () = &mut shutdown => return,
                result = self.poll_once() => match result {
                    Ok(report) => {
                        backoff = Duration::from_millis(200);
                        if report.records > 0 {
                            tracing::info!(
                                records = report.records,
                                counted = report.counted,
                                duplicates = report.duplicates,
                                failed = report.failed,
                                snapshots = report.snapshots_written,
                                "stream batch"
                            );
                        }
                        if report.records == 0 || report.failed > 0 {
                            self.options.idle_wait
                        } else {
                            Duration::ZERO
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "stream poll failed");
                        let wait = backoff;
                        backoff = (backoff * 2).min(self.options.max_backoff);
                        wait
                    }
                },
            };
            if !wait.is_zero() {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }

    /// One pass: discovers the stream and its shards, then reads one page from every readable
    /// shard and processes it.
    ///
    /// # Errors
    /// [`AggregatorError`] when the table, the stream or a shard cannot be read. Iterators are
    /// forgotten, so the next call starts again from the checkpoints.
    pub async fn poll_once(&mut self) -> Result<PollReport, AggregatorError> {
        let result = self.poll_inner().await;
        if result.is_err() {
            for shard in self.shards.values_mut() {
                shard.iterator = None;
            }
        }
        result
    }

    async fn poll_inner(&mut self) -> Result<PollReport, AggregatorError> {
        self.discover().await?;
        let mut report = PollReport::default();
        let ids: Vec<String> = self.shards.keys().cloned().collect();
        for id in ids {
            let readable = {
                let shard = &self.shards[&id];
                !shard.done
                    && shard
                        .parent
                        .as_ref()
                        .and_then(|p| self.shards.get(p))
                        .is_none_or(|p| p.done)
            };
            if !readable {
                continue;
            }
            report.shards += 1;
            self.read_shard(&id, &mut report).await?;
        }
        Ok(report)
    }

    async fn discover(&mut self) -> Result<(), AggregatorError> {
        let table = self.aggregator.settings().table_name.clone();
        let described = self
            .aggregator
            .client()
            .describe_table()
            .table_name(&table)
            .send()
            .await
            .map_err(|e| streams_error("DescribeTable", e).1)?;
        let arn = described
            .table()
            .and_then(|t| t.latest_stream_arn())
            .map(str::to_owned)
            .ok_or_else(|| AggregatorError::NoStream {
                table: table.clone(),
            })?;
        if self.stream_arn.as_deref() != Some(arn.as_str()) {
            if self.stream_arn.is_some() {
                tracing::info!(stream = %arn, "table has a new stream; reading it from the start");
            }
            self.stream_arn = Some(arn.clone());
            self.shards.clear();
        }
        let mut start: Option<String> = None;
        loop {
            let page = self
                .streams
                .describe_stream()
                .stream_arn(&arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| streams_error("DescribeStream", e).1)?;
            let Some(desc) = page.stream_description() else {
                break;
            };
            for shard in desc.shards() {
                let Some(id) = shard.shard_id() else {
                    continue;
                };
                self.shards
                    .entry(id.to_owned())
                    .or_insert_with(|| ShardState {
                        parent: shard.parent_shard_id().map(str::to_owned),
                        initial: !self.discovered_once,
                        ..ShardState::default()
                    });
            }
            match desc.last_evaluated_shard_id() {
                Some(last) => start = Some(last.to_owned()),
                None => break,
            }
        }
        self.discovered_once = true;
        Ok(())
    }

    async fn iterator(&mut self, id: &str) -> Result<Option<String>, AggregatorError> {
        let arn = self.stream_arn.clone().unwrap_or_default();
        let shard = self.shards.get(id).cloned().unwrap_or_default();
        if let Some(it) = shard.iterator {
            return Ok(Some(it));
        }
        let (kind, seq) = if let Some(seq) = shard.retry_at {
            (ShardIteratorType::AtSequenceNumber, Some(seq))
        } else if let Some(seq) = shard.checkpoint {
            (ShardIteratorType::AfterSequenceNumber, Some(seq))
        } else if shard.initial && self.options.start == StartPosition::Latest {
            (ShardIteratorType::Latest, None)
        } else {
            (ShardIteratorType::TrimHorizon, None)
        };
        let result = self
            .streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(id)
            .shard_iterator_type(kind)
            .set_sequence_number(seq.map(|s| s.as_str().to_owned()))
            .send()
            .await;
        match result {
            Ok(out) => Ok(out.shard_iterator().map(str::to_owned)),
            Err(err) => {
                let (code, e) = streams_error("GetShardIterator", err);
                if code.as_deref() == Some("TrimmedDataAccessException") {
                    // The checkpoint is older than the stream's retention: start over.
                    if let Some(s) = self.shards.get_mut(id) {
                        s.checkpoint = None;
                        s.retry_at = None;
                    }
                }
                Err(e)
            }
        }
    }

    async fn read_shard(
        &mut self,
        id: &str,
        report: &mut PollReport,
    ) -> Result<(), AggregatorError> {
        let Some(iterator) = self.iterator(id).await? else {
            if let Some(s) = self.shards.get_mut(id) {
                s.done = true;
            }
            return Ok(());
        };
        let page = match self
            .streams
            .get_records()
            .shard_iterator(iterator)
            .limit(self.options.batch_size)
            .send()
            .await
        {
            Ok(page) => page,
            Err(err) => {
                let (code, e) = streams_error("GetRecords", err);
                if code.as_deref() == Some("ExpiredIteratorException") {
                    if let Some(s) = self.shards.get_mut(id) {
                        s.iterator = None;
                    }
                    return Ok(());
                }
                return Err(e);
            }
        };
        let records: Vec<StreamRecord> = page
            .records()
            .iter()
            .filter_map(|r| match StreamRecord::from_streams(r) {
                Ok(record) => Some(record),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping unreadable stream record");
                    None
                }
            })
            .collect();
        let next = page.next_shard_iterator().map(str::to_owned);
        report.records += records.len();
        let batch = if records.is_empty() {
            None
        } else {
            Some(self.aggregator.process(&records).await)
        };
        let Some(shard) = self.shards.get_mut(id) else {
            return Ok(());
        };
        if let Some(batch) = batch {
            report.counted += batch.counted;
            report.duplicates += batch.duplicates;
            report.failed += batch.failed.len();
            report.snapshots_written += batch.snapshots_written;
            if let Some(first_failed) = batch.failed.iter().min() {
                // Re-read from the first failed record; what follows it is filtered by the
                // watermarks when it comes again.
                shard.retry_at = Some(first_failed.clone());
                shard.iterator = None;
                return Ok(());
            }
            shard.checkpoint = records.last().map(|r| r.sequence_number.clone());
            shard.retry_at = None;
        }
        match next {
            Some(it) => shard.iterator = Some(it),
            None => {
                shard.iterator = None;
                shard.done = true;
            }
        }
        Ok(())
    }
}
