//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! The dynalimit aggregator: turns the table's DynamoDB stream into usage snapshots, tops up
//! active buckets and doubles the shard count of hot ones (reference §7).
//!
//! It runs either as a Lambda function fed by the stream's event source mapping (the `bootstrap`
//! binary of this crate, see [`handler`]) or as `dynalimit aggregator run`, which polls the
//! stream through the DynamoDB Streams API (see [`runner`]) — the way to get snapshots on
//! DynamoDB Local or LocalStack. Both feed the same [`Aggregator`].
//!
//! # Pipeline
//! 1. [`record`]: Lambda JSON records and Streams API records become one [`StreamRecord`].
//! 2. [`processor::extract`] (pure): each MODIFY of a bucket item yields the `b_{limit}_tc`
//!    deltas between its images, in whole tokens (floor), stamped with the new image's `rf`;
//!    a create (INSERT) yields its `tc` values, so snapshots equal the tokens consumed (the
//!    reference's aggregator misses the creating acquire; an event source filter must
//!    therefore pass INSERTs of `#STATE` items too). Deletes and TTL expiries (REMOVE) and
//!    other items are ignored. Event names this code does not know (DynamoDB Local sends
//!    `UNKNOWN_TO_SDK_VERSION`) are resolved from which images the record carries.
//! 3. [`processor::plan`] (pure): per (namespace, entity, resource), one snapshot write per
//!    snapshot item — counters named after the limits, `total_events` one per
//!    (record, limit, window), `{limit}#od` for soft-limit overdraws, identity and GSI2/GSI4
//!    keys, `ttl` set once — inside one `TransactWriteItems` with the watermark moves below.
//!    Windows that start at the same instant share an item (hour 00 and its day, and on the
//!    first of a month the month too); their counts are added to that one item, as
//!    zae-limiter does (see [`processor`]).
//! 4. [`Aggregator::process`]: reads the watermarks, commits, re-plans when another
//!    aggregator moved a watermark in between, and reports the records whose usage is not
//!    committed (the Lambda answers them as partial batch failures).
//! 5. Proactive passes, each behind a switch of [`Settings`]: refill of the buckets seen in the
//!    batch under their `rf` lock, doubling of shard 0 when its `wcu` projects below 20 %, and
//!    propagation of a raised shard count to the older shards with pre-creation of the new ones
//!    (planned and written by the repository's bucket store: `BucketStore::proactive_refill`,
//!    `proactive_doubling`, `propagate_shard_count` and `create_shard`).
//!
//! 6. [`emf`]: with tenant metrics on, the Lambda handler writes the tokens each batch counted
//!    per (namespace, entity, resource) as CloudWatch embedded-metric log lines.
//! 7. [`archive`]: with an archive bucket, each audit event that DynamoDB's TTL removed is
//!    written to its own S3 object, keyed by the event (exactly once under redelivery).
//!
//! # Counting each record once
//! Stream delivery is at-least-once: a failed Lambda batch is delivered again (whole, or from
//! the first reported failure), and a restarted runner reads records again. Snapshots are
//! additive, so the aggregator keeps a **watermark per bucket item**: the sequence number of
//! the last record of that item whose usage is in the snapshots. DynamoDB Streams delivers the
//! records of one item in order with increasing sequence numbers, so "already counted" is
//! exactly "sequence number ≤ watermark".
//!
//! The watermark is a separate item in the owner entity's partition,
//! `PK = {ns}/ENTITY#{entity}`, `SK = #AGGREGATOR#{resource}#{shard}`, with `seq` (S), owner
//! attributes, GSI4 keys (so namespace purges remove it) and a `ttl` refreshed on every write
//! (the snapshot retention). Each snapshot transaction moves the watermark of every bucket item
//! it counts, conditioned on the value the plan was made against (`attribute_not_exists(seq)`
//! for the first one). So a redelivered batch is filtered to nothing and changes no snapshot,
//! a partially counted one adds only what is new, and two aggregators racing on the same
//! records cannot both count them: the loser's transaction is cancelled, it re-reads the
//! watermarks and finds nothing left to do.
//!
//! The marker is not an attribute of the snapshot item on purpose: zae-limiter's snapshot
//! reader takes every number attribute it does not know as a limit counter, and the sort-key
//! prefix `#AGGREGATOR#` does not match the `#USAGE#` prefix its snapshot queries use.

mod aggregator;
pub mod alerts;
pub mod archive;
pub mod config;
pub mod emf;
pub mod error;
pub mod handler;
mod proactive;
pub mod processor;
pub mod record;
pub mod refusing;
pub mod runner;
pub mod sample;
pub mod writes;

pub use aggregator::{Aggregator, BatchReport};

/// The metrics the aggregator records after every batch, through the `metrics` facade (the
/// library's, `dynalimit::metrics`, come from the same facade):
///
/// | name | kind | labels | what |
/// |---|---|---|---|
/// | `dynalimit_aggregator_records_total` | counter | `result` | stream records: `counted`, `duplicate` (counted by an earlier delivery), `failed` (to be delivered again) |
/// | `dynalimit_aggregator_snapshot_writes_total` | counter | | usage snapshot writes committed |
/// | `dynalimit_aggregator_proactive_writes_total` | counter | `kind` | proactive writes that landed: `refill`, `shard_counts` (doubled or propagated), `shard_created` |
/// | `dynalimit_aggregator_events_archived_total` | counter | | expired audit events written to the archive |
/// | `dynalimit_aggregator_alerts_published_total` | counter | | quota threshold crossings and refusal alerts published ([`alerts`], [`refusing`]) |
/// | `dynalimit_aggregator_errors_total` | counter | | a group that could not commit, a proactive write that failed, an archive write that failed |
pub mod metrics {
    pub use crate::aggregator::{
        ALERTS_PUBLISHED, ARCHIVED, ERRORS, PROACTIVE_WRITES, RECORDS, SNAPSHOT_WRITES,
    };
}
pub use config::Settings;
pub use dynalimit_format::usage::SnapshotWindow;
pub use error::AggregatorError;
pub use record::{EventKind, SequenceNumber, StreamRecord};
