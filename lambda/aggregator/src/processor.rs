//! The pure processor: stream records in, planned writes out. No I/O, no clock.
//!
//! Two steps:
//! 1. [`extract`] reads a batch: every MODIFY of a bucket item (`SK = #STATE`) yields a
//!    [`Usage`] — the `b_{limit}_tc` deltas between the old and the new image, stamped with the
//!    new image's `rf` (reference §7.2) — and every bucket item seen yields a
//!    [`BucketActivity`] for the proactive refill and doubling of §7.3. An INSERT (a bucket's
//!    create) counts its `tc` values against 0, so the consumption of the acquire that created
//!    the bucket is not lost (the reference's aggregator drops it, §13 case 44). REMOVEs
//!    (deletes and TTL expiry) and every other item are ignored. A limit named like an
//!    attribute the snapshot update sets (`ttl`, `window`, … — refused by dynalimit, but
//!    another client may have written one) is left out of the usage.
//! 2. [`plan`] turns the usages that are newer than each bucket item's watermark into
//!    [`Transaction`]s: per (namespace, entity, resource) one write per snapshot item, each
//!    transaction carrying the new watermark of every bucket item whose records it counts.
//!
//! # Windows that share an item
//! A snapshot item is keyed by its window's UTC start alone (reference §1.4.10), so windows
//! that start at the same instant share one item: the hourly window of hour 00 and the daily
//! window start at `YYYY-MM-DDT00:00:00Z`, and on the first of a month the monthly window
//! starts there too. DynamoDB refuses a transaction that touches one item twice, so [`plan`]
//! merges them into one [`SnapshotWrite`] whose additions are exactly what zae-limiter 0.17's
//! aggregator leaves behind with its one `UpdateItem` per (delta, window):
//!
//! * each limit counter gets the record's tokens once per window sharing the item, and so do
//!   `total_events` (one per record, limit and window) and `{limit}#od`;
//! * `window` is written only when the item is new (`if_not_exists`), with the first window,
//!   in the configured order, that the earliest counted record maps to this item; a later
//!   write never changes it.
//!
//! With `hourly,daily` the item of a day's hour 00 therefore counts that hour **plus** the
//! whole day, and with `monthly` as well the item of the first of a month at 00:00 counts
//! that hour, that day and the whole month. Neither library can tell the parts apart from
//! the item alone; the hourly items of hours 01–23 (and the daily items of days 2–31) hold
//! the rest. `window_start` is the key itself, the same for every sharer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dynalimit_format::bucket::{self, balance, bucket_pk_of, consumed, counter, is_soft};
use dynalimit_format::item::Item;
use dynalimit_format::usage::{SNAPSHOT_ATTRIBUTES, SnapshotWindow};

use crate::record::{EventKind, SequenceNumber, StreamRecord};

/// Most items one `TransactWriteItems` may carry.
pub const MAX_TRANSACT_ITEMS: usize = 100;

/// One bucket item: the unit whose stream records arrive in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketRef {
    /// Namespace id (the PK prefix).
    pub namespace_id: String,
    /// Owner entity.
    pub entity_id: String,
    /// Resource.
    pub resource: String,
    /// Shard index.
    pub shard: u32,
}

impl BucketRef {
    /// The key of this bucket item's watermark: `{ns}/ENTITY#{entity}`,
    /// `#AGGREGATOR#{resource}#{shard}`.
    pub fn marker_key(&self) -> Item {
        dynalimit_format::usage::watermark_key(
            &self.namespace_id,
            &self.entity_id,
            &self.resource,
            self.shard,
        )
    }

    /// The bucket item's key within its namespace.
    pub fn bucket_key(&self) -> bucket::BucketKey {
        bucket::BucketKey::new(self.entity_id.clone(), self.resource.clone(), self.shard)
    }

    /// The (namespace, entity, resource) whose snapshots this item's usage feeds.
    pub fn group(&self) -> GroupKey {
        GroupKey {
            namespace_id: self.namespace_id.clone(),
            entity_id: self.entity_id.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// The (namespace, entity, resource) a snapshot belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Namespace id.
    pub namespace_id: String,
    /// Entity.
    pub entity_id: String,
    /// Resource.
    pub resource: String,
}

/// One limit's consumption in one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDelta {
    /// The limit name (the snapshot counter's attribute name).
    pub limit: String,
    /// `new_tc − old_tc` in millitokens (never 0).
    pub milli: i64,
    /// Whole tokens, `milli // 1000` (floor, as the reference's writer does).
    pub tokens: i64,
    /// A soft limit went into debt with this debit (`{limit}#od` counts it).
    pub overdrawn: bool,
}

/// The usage carried by one MODIFY of a bucket item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The bucket item.
    pub bucket: BucketRef,
    /// The record's position in the stream.
    pub sequence_number: SequenceNumber,
    /// The instant that picks the snapshot windows: the new image's `rf` (reference §7.2).
    pub at_ms: i64,
    /// Non-zero deltas, by limit name.
    pub deltas: Vec<LimitDelta>,
}

/// What a batch showed of one bucket item, for the proactive refill and doubling.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketActivity {
    /// The last new image of the item in the batch.
    pub image: Item,
    /// The record that carried it.
    pub sequence_number: SequenceNumber,
    /// Millitokens consumed per limit over the batch (summed `tc` deltas).
    pub consumed: BTreeMap<String, i64>,
    /// `(old, new)` when a record raised the item's `shard_count`.
    pub shard_count_raised: Option<(u32, u32)>,
}

/// The result of reading a batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extracted {
    /// Usage records, in stream order.
    pub usage: Vec<Usage>,
    /// Every bucket item modified in the batch.
    pub activity: BTreeMap<BucketRef, BucketActivity>,
    /// Records that are not bucket modifications (inserts, removes, other items).
    pub ignored: usize,
    /// Records left out because their new image holds a value out of bounds
    /// (`dynalimit_core::bounds`: a `shard_count` above 32, an `rf` beyond the year 2500),
    /// one line each naming the item and the attribute. Nothing is counted or written for
    /// them.
    pub corrupt: Vec<String>,
}

/// The bounded shard count and refill time of a new image: `(shard_count, rf)`, 1 and 0 when
/// absent.
fn bounded(image: &Item) -> Result<(u32, i64), dynalimit_format::FormatError> {
    Ok((
        bucket::shard_count(image)?.unwrap_or(1),
        bucket::refilled_at(image)?.unwrap_or(0),
    ))
}

fn bucket_of(image: &Item) -> Option<BucketRef> {
    let k = bucket_pk_of(image)?;
    Some(BucketRef {
        namespace_id: k.namespace_id,
        entity_id: k.entity_id,
        resource: k.resource,
        shard: k.shard,
    })
}

/// Reads a batch of stream records (reference §7.2).
pub fn extract(records: &[StreamRecord]) -> Extracted {
    let mut out = Extracted::default();
    for record in records {
        // A create carries the consumption of the acquire that created the bucket: it counts
        // against an old `tc` of 0.
        let (old, new) = match (record.kind, &record.old_image, &record.new_image) {
            (EventKind::Modify, Some(old), Some(new)) => (Some(old), new),
            (EventKind::Insert, _, Some(new)) => (None, new),
            _ => {
                out.ignored += 1;
                continue;
            }
        };
        let Some(bucket) = bucket_of(new) else {
            out.ignored += 1;
            continue;
        };
        let (new_sc, at_ms) = match bounded(new) {
            Ok(read) => read,
            Err(e) => {
                out.corrupt.push(e.to_string());
                continue;
            }
        };
        let mut deltas: Vec<LimitDelta> = consumed(new)
            .filter_map(|(name, new_tc)| {
                let old_tc = match old {
                    Some(old) => counter(old, name)?,
                    None => 0,
                };
                let milli = new_tc.checked_sub(old_tc)?;
                (milli != 0).then(|| {
                    let soft = is_soft(new, name);
                    let tk = balance(new, name).unwrap_or(0);
                    LimitDelta {
                        limit: name.to_owned(),
                        milli,
                        tokens: milli.div_euclid(1000),
                        overdrawn: soft && milli > 0 && tk < 0,
                    }
                })
            })
            .collect();
        deltas.sort_by(|a, b| a.limit.cmp(&b.limit));

        // An old image out of bounds raises nothing.
        let old_sc = old.map_or(Ok(Some(new_sc)), bucket::shard_count);
        let old_sc = old_sc.ok().map_or(new_sc, |sc| sc.unwrap_or(1));
        let entry = out
            .activity
            .entry(bucket.clone())
            .or_insert_with(|| BucketActivity {
                image: Item::new(),
                sequence_number: record.sequence_number.clone(),
                consumed: BTreeMap::new(),
                shard_count_raised: None,
            });
        entry.image = new.clone();
        entry.sequence_number = record.sequence_number.clone();
        for d in &deltas {
            let sum = entry.consumed.entry(d.limit.clone()).or_default();
            *sum = sum.saturating_add(d.milli);
        }
        if new_sc > old_sc {
            let from = entry
                .shard_count_raised
                .map_or(old_sc, |(f, _)| f.min(old_sc));
            entry.shard_count_raised = Some((from, new_sc));
        }
        // A limit named like an attribute the snapshot update sets cannot be counted (see
        // `SNAPSHOT_ATTRIBUTES`); it still counts for the proactive passes above.
        deltas.retain(|d| !SNAPSHOT_ATTRIBUTES.contains(&d.limit.as_str()));
        if !deltas.is_empty() {
            out.usage.push(Usage {
                bucket,
                sequence_number: record.sequence_number.clone(),
                at_ms,
                deltas,
            });
        }
    }
    out
}

/// The additions to one snapshot item (reference §1.4.10): one per item, however many
/// windows share it (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    /// Owner of the snapshot.
    pub group: GroupKey,
    /// The value of `window` if this write creates the item: the first configured window
    /// the earliest counted record maps to this item.
    pub window: SnapshotWindow,
    /// Every window whose counts this write carries, in the configured order (more than one
    /// when windows share the item).
    pub windows: Vec<SnapshotWindow>,
    /// The window key (its UTC start), which is also the item's key.
    pub window_key: String,
    /// Whole tokens to add per limit: each record's tokens once per window it is counted in.
    pub counters: BTreeMap<String, i64>,
    /// Soft-limit overdraw events to add per limit (`{limit}#od`), once per window.
    pub overdrawn: BTreeMap<String, i64>,
    /// Events to add to `total_events`: one per (record, limit, window).
    pub total_events: i64,
    /// The instant of the earliest record counted (the one that chose `window`).
    pub first_at_ms: i64,
}

/// The move of one bucket item's watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerWrite {
    /// The bucket item whose records are counted.
    pub bucket: BucketRef,
    /// The watermark the plan was made against (`None`: no marker yet).
    pub expected: Option<SequenceNumber>,
    /// The last sequence number counted by this transaction.
    pub applied: SequenceNumber,
}

/// One atomic write: snapshot additions and the watermarks that make them count once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Snapshot updates, one per snapshot item (windows sharing an item are merged).
    pub snapshots: Vec<SnapshotWrite>,
    /// Watermark moves, one per bucket item counted.
    pub markers: Vec<MarkerWrite>,
    /// The records whose usage this transaction counts.
    pub records: Vec<SequenceNumber>,
}

impl Transaction {
    /// Items the transaction writes.
    pub fn len(&self) -> usize {
        self.snapshots.len() + self.markers.len()
    }

    /// True when it writes nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The transactions of one (namespace, entity, resource), to run in order: a later one
/// expects the watermarks an earlier one writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// The group.
    pub group: GroupKey,
    /// Its transactions, in order.
    pub transactions: Vec<Transaction>,
}

#[derive(Default)]
struct Builder {
    /// Snapshot writes by item key (the window key).
    snapshots: BTreeMap<String, SnapshotWrite>,
    markers: BTreeMap<BucketRef, MarkerWrite>,
    records: Vec<SequenceNumber>,
}

impl Builder {
    fn would_overflow(&self, usage: &Usage, windows: &[SnapshotWindow]) -> bool {
        let new_snapshots = windows
            .iter()
            .map(|w| w.key(usage.at_ms))
            .filter(|k| !self.snapshots.contains_key(k))
            .collect::<BTreeSet<_>>()
            .len();
        let new_marker = usize::from(!self.markers.contains_key(&usage.bucket));
        self.snapshots.len() + self.markers.len() + new_snapshots + new_marker > MAX_TRANSACT_ITEMS
    }

    fn add(&mut self, usage: &Usage, expected: Option<SequenceNumber>, windows: &[SnapshotWindow]) {
        // Item keys this record has reached so far: the first window (in the configured
        // order) to reach an item is the `window` it gets if this record is the earliest.
        let mut firsts: Vec<&str> = Vec::with_capacity(windows.len());
        let keys: Vec<String> = windows.iter().map(|w| w.key(usage.at_ms)).collect();
        for (&window, window_key) in windows.iter().zip(&keys) {
            let first_for_item = !firsts.contains(&window_key.as_str());
            firsts.push(window_key);
            let snap = self
                .snapshots
                .entry(window_key.clone())
                .or_insert_with(|| SnapshotWrite {
                    group: usage.bucket.group(),
                    window,
                    windows: Vec::new(),
                    window_key: window_key.clone(),
                    counters: BTreeMap::new(),
                    overdrawn: BTreeMap::new(),
                    total_events: 0,
                    first_at_ms: usage.at_ms,
                });
            if first_for_item && usage.at_ms < snap.first_at_ms {
                snap.first_at_ms = usage.at_ms;
                snap.window = window;
            }
            if !snap.windows.contains(&window) {
                snap.windows.push(window);
                snap.windows
                    .sort_by_key(|w| windows.iter().position(|c| c == w));
            }
            // Sums saturate: counters another writer drove to the ends of the range stay
            // there rather than wrap.
            for d in &usage.deltas {
                let sum = snap.counters.entry(d.limit.clone()).or_default();
                *sum = sum.saturating_add(d.tokens);
                if d.overdrawn {
                    let sum = snap.overdrawn.entry(d.limit.clone()).or_default();
                    *sum = sum.saturating_add(1);
                }
                snap.total_events = snap.total_events.saturating_add(1);
            }
        }
        self.markers
            .entry(usage.bucket.clone())
            .and_modify(|m| m.applied = usage.sequence_number.clone())
            .or_insert_with(|| MarkerWrite {
                bucket: usage.bucket.clone(),
                expected,
                applied: usage.sequence_number.clone(),
            });
        self.records.push(usage.sequence_number.clone());
    }

    fn finish(self) -> Transaction {
        Transaction {
            snapshots: self.snapshots.into_values().collect(),
            markers: self.markers.into_values().collect(),
            records: self.records,
        }
    }
}

/// Plans the snapshot writes of `usage` against the stored watermarks.
///
/// A usage whose sequence number is at or below its bucket item's watermark was already
/// counted and is dropped; what remains is grouped per (namespace, entity, resource) into
/// transactions of at most [`MAX_TRANSACT_ITEMS`] items, each moving the watermark of every
/// bucket item it counts from the value read to its last counted sequence number. `windows`
/// is the configured list, in its configured order; windows that map a record to the same
/// item are merged into one write of that item (see the module documentation).
pub fn plan(
    usage: &[Usage],
    watermarks: &HashMap<BucketRef, SequenceNumber>,
    windows: &[SnapshotWindow],
) -> Vec<GroupPlan> {
    let mut per_bucket: BTreeMap<&BucketRef, Vec<&Usage>> = BTreeMap::new();
    for u in usage {
        if watermarks
            .get(&u.bucket)
            .is_some_and(|w| u.sequence_number <= *w)
        {
            continue;
        }
        per_bucket.entry(&u.bucket).or_default().push(u);
    }
    let mut groups: BTreeMap<GroupKey, Vec<(&BucketRef, Vec<&Usage>)>> = BTreeMap::new();
    for (bucket, mut list) in per_bucket {
        list.sort_by(|a, b| a.sequence_number.cmp(&b.sequence_number));
        list.dedup_by(|a, b| a.sequence_number == b.sequence_number);
        groups
            .entry(bucket.group())
            .or_default()
            .push((bucket, list));
    }
    groups
        .into_iter()
        .map(|(group, buckets)| {
            let mut transactions = Vec::new();
            let mut current = Builder::default();
            for (bucket, list) in buckets {
                let mut expected = watermarks.get(bucket).cloned();
                for u in list {
                    if current.would_overflow(u, windows) {
                        transactions.push(std::mem::take(&mut current).finish());
                    }
                    let marker_expected = current
                        .markers
                        .get(bucket)
                        .map_or_else(|| expected.clone(), |m| m.expected.clone());
                    current.add(u, marker_expected, windows);
                    expected = Some(u.sequence_number.clone());
                }
            }
            if !current.records.is_empty() {
                transactions.push(current.finish());
            }
            GroupPlan {
                group,
                transactions,
            }
        })
        .collect()
}

/// The bucket items whose watermarks [`plan`] needs, deduplicated.
pub fn watermark_keys(usage: &[Usage]) -> Vec<BucketRef> {
    usage
        .iter()
        .map(|u| u.bucket.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_format::keys;

    /// 2026-03-10T00:20:00Z and 2026-03-10T01:05:00Z.
    const MAR10_0020: i64 = 1_773_102_000_000;
    const MAR10_0105: i64 = 1_773_104_700_000;
    /// 2026-04-01T00:10:00Z and 2026-04-01T05:00:00Z.
    const APR01_0010: i64 = 1_775_002_200_000;
    const APR01_0500: i64 = 1_775_019_600_000;
    /// 2026-12-31T23:30:00Z and 2027-01-01T00:10:00Z.
    const DEC31_2330: i64 = 1_798_759_800_000;
    const JAN01_0010: i64 = 1_798_762_200_000;

    const ALL: [SnapshotWindow; 3] = [
        SnapshotWindow::Hourly,
        SnapshotWindow::Daily,
        SnapshotWindow::Monthly,
    ];

    fn bucket(shard: u32) -> BucketRef {
        BucketRef {
            namespace_id: "ns".into(),
            entity_id: "u1".into(),
            resource: "gpt-4".into(),
            shard,
        }
    }

    fn delta(limit: &str, tokens: i64, overdrawn: bool) -> LimitDelta {
        LimitDelta {
            limit: limit.into(),
            milli: tokens * 1000,
            tokens,
            overdrawn,
        }
    }

    fn usage(shard: u32, seq: u64, at_ms: i64, deltas: Vec<LimitDelta>) -> Usage {
        Usage {
            bucket: bucket(shard),
            sequence_number: SequenceNumber::parse(&seq.to_string()).unwrap(),
            at_ms,
            deltas,
        }
    }

    fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    /// The single transaction of a single group, with its snapshot writes by item key.
    fn one_transaction(
        usage: &[Usage],
        windows: &[SnapshotWindow],
    ) -> (Transaction, BTreeMap<String, SnapshotWrite>) {
        let plans = plan(usage, &HashMap::new(), windows);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].transactions.len(), 1);
        let tx = plans[0].transactions[0].clone();
        let by_key = tx
            .snapshots
            .iter()
            .map(|s| (s.window_key.clone(), s.clone()))
            .collect();
        (tx, by_key)
    }

    /// DynamoDB refuses two operations on one item in a transaction.
    fn assert_one_operation_per_item(tx: &Transaction) {
        let keys: BTreeSet<&str> = tx.snapshots.iter().map(|s| s.window_key.as_str()).collect();
        assert_eq!(keys.len(), tx.snapshots.len(), "{tx:?}");
    }

    /// A MODIFY of shard 0 from `old` to `new`, each given as `(attribute, number)` pairs on
    /// a bucket item of `u1` on gpt-4.
    fn modify(seq: u64, old: &[(&str, i64)], new: &[(&str, i64)]) -> StreamRecord {
        let image = |pairs: &[(&str, i64)]| {
            let mut it = dynalimit_format::item::key(
                keys::bucket_pk("ns", "u1", "gpt-4", 0),
                keys::STATE_SK,
            );
            for (k, v) in pairs {
                it.insert((*k).to_owned(), dynalimit_format::item::n(v));
            }
            it
        };
        StreamRecord {
            event_id: format!("e{seq}"),
            kind: EventKind::Modify,
            sequence_number: SequenceNumber::parse(&seq.to_string()).unwrap(),
            old_image: Some(image(old)),
            new_image: Some(image(new)),
            removed_by_ttl: false,
        }
    }

    #[test]
    fn a_record_whose_new_image_is_out_of_bounds_is_left_out_and_reported() {
        let records = [
            // A shard count no writer may set: no usage, no activity, no shards to create.
            modify(
                1,
                &[("rf", MAR10_0020), ("shard_count", 1), ("b_rpm_tc", 0)],
                &[
                    ("rf", MAR10_0020),
                    ("shard_count", 4_294_967_295),
                    ("b_rpm_tc", 1000),
                ],
            ),
            // A refill time past 2500.
            modify(
                2,
                &[("rf", MAR10_0020), ("b_rpm_tc", 0)],
                &[("rf", i64::MAX), ("b_rpm_tc", 1000)],
            ),
        ];
        let out = extract(&records);
        assert!(out.usage.is_empty() && out.activity.is_empty(), "{out:?}");
        assert_eq!(out.corrupt.len(), 2);
        assert!(out.corrupt[0].contains("shard_count"), "{:?}", out.corrupt);
        assert!(out.corrupt[1].contains("rf"), "{:?}", out.corrupt);
        // An old image out of bounds raises nothing: the new count is taken as the old.
        let out = extract(&[modify(
            3,
            &[("rf", MAR10_0020), ("shard_count", 0)],
            &[("rf", MAR10_0020), ("shard_count", 4)],
        )]);
        assert_eq!(out.activity[&bucket(0)].shard_count_raised, None);
    }

    #[test]
    fn sums_of_counters_at_the_ends_of_the_range_saturate() {
        // Two records each consuming almost i64::MAX millitokens: the batch's consumption
        // stays at the top of the range, and so do the snapshot's counters.
        let big = i64::MAX - 1;
        let records = [
            modify(1, &[("b_rpm_tc", 0)], &[("b_rpm_tc", big)]),
            modify(2, &[("b_rpm_tc", -1)], &[("b_rpm_tc", big)]),
        ];
        let out = extract(&records);
        assert_eq!(out.activity[&bucket(0)].consumed["rpm"], i64::MAX);
        let (tx, _) = one_transaction(&out.usage, &[SnapshotWindow::Hourly]);
        assert_eq!(tx.snapshots[0].counters["rpm"], (big / 1000) * 2);
        let many: Vec<Usage> = (0..3)
            .map(|i| {
                let half = LimitDelta {
                    limit: "rpm".into(),
                    milli: i64::MAX,
                    tokens: i64::MAX / 2,
                    overdrawn: false,
                };
                usage(0, i, MAR10_0020, vec![half])
            })
            .collect();
        let (tx, _) = one_transaction(&many, &[SnapshotWindow::Hourly]);
        assert_eq!(tx.snapshots[0].counters["rpm"], i64::MAX);
    }

    #[test]
    fn limits_named_like_snapshot_attributes_are_left_out_of_usage_only() {
        let image = |tc: i64| {
            let mut it = dynalimit_format::item::key(
                keys::bucket_pk("ns", "u1", "gpt-4", 0),
                keys::STATE_SK,
            );
            it.insert("rf".into(), dynalimit_format::item::n(MAR10_0105));
            for limit in ["rpm", "ttl", "window"] {
                it.insert(format!("b_{limit}_tc"), dynalimit_format::item::n(tc));
            }
            it
        };
        let record = StreamRecord {
            event_id: "e1".into(),
            kind: EventKind::Modify,
            sequence_number: SequenceNumber::parse("1").unwrap(),
            old_image: Some(image(0)),
            new_image: Some(image(2000)),
            removed_by_ttl: false,
        };
        let out = extract(&[record]);
        let limits: Vec<&str> = out.usage[0]
            .deltas
            .iter()
            .map(|d| d.limit.as_str())
            .collect();
        assert_eq!(limits, ["rpm"]);
        assert_eq!(out.activity[&bucket(0)].consumed.len(), 3);
    }

    #[test]
    fn hour_00_and_its_day_share_one_write_counting_both() {
        let (tx, snaps) = one_transaction(
            &[
                usage(
                    0,
                    1,
                    MAR10_0020,
                    vec![delta("rpm", 3, false), delta("tpm", 100, false)],
                ),
                usage(0, 2, MAR10_0105, vec![delta("rpm", 5, false)]),
            ],
            &[SnapshotWindow::Hourly, SnapshotWindow::Daily],
        );
        assert_one_operation_per_item(&tx);
        // Two items: 00 (hour 00 and the day) and 01; plus one watermark.
        assert_eq!(tx.len(), 3);
        let shared = &snaps["2026-03-10T00:00:00Z"];
        assert_eq!(
            shared.windows,
            [SnapshotWindow::Hourly, SnapshotWindow::Daily]
        );
        assert_eq!(shared.window, SnapshotWindow::Hourly);
        // Hour 00 (3 rpm, 100 tpm) + the day (8 rpm, 100 tpm).
        assert_eq!(shared.counters, counts(&[("rpm", 11), ("tpm", 200)]));
        // (record, limit, window): 2 limits x 2 windows + 1 limit x 1 window.
        assert_eq!(shared.total_events, 5);
        let h01 = &snaps["2026-03-10T01:00:00Z"];
        assert_eq!(h01.windows, [SnapshotWindow::Hourly]);
        assert_eq!(h01.counters, counts(&[("rpm", 5)]));
        assert_eq!(h01.total_events, 1);
    }

    #[test]
    fn the_first_of_a_month_at_00_is_one_write_for_all_three_windows() {
        let (tx, snaps) = one_transaction(
            &[
                usage(
                    0,
                    1,
                    APR01_0010,
                    vec![delta("rpm", 2, false), delta("soft", 4, true)],
                ),
                usage(0, 2, APR01_0500, vec![delta("rpm", 7, false)]),
            ],
            &ALL,
        );
        assert_one_operation_per_item(&tx);
        assert_eq!(tx.snapshots.len(), 2);
        let shared = &snaps["2026-04-01T00:00:00Z"];
        assert_eq!(shared.windows, ALL);
        assert_eq!(shared.window, SnapshotWindow::Hourly);
        // 00:10 counted three times (hour, day, month), 05:00 twice (day, month).
        assert_eq!(
            shared.counters,
            counts(&[("rpm", 2 * 3 + 7 * 2), ("soft", 12)])
        );
        assert_eq!(shared.overdrawn, counts(&[("soft", 3)]));
        assert_eq!(shared.total_events, 2 * 3 + 2);
        let h05 = &snaps["2026-04-01T05:00:00Z"];
        assert_eq!(
            (h05.window, h05.counters.clone()),
            (SnapshotWindow::Hourly, counts(&[("rpm", 7)]))
        );
    }

    #[test]
    fn the_window_written_is_the_first_configured_one_of_the_earliest_record() {
        let records = [
            // Shard 0 at 05:00 reaches the shared item through daily and monthly only…
            usage(0, 1, APR01_0500, vec![delta("rpm", 1, false)]),
            // …shard 1 at 00:10, earlier, through all three.
            usage(1, 7, APR01_0010, vec![delta("rpm", 1, false)]),
        ];
        let (_, snaps) = one_transaction(&records, &ALL);
        assert_eq!(snaps["2026-04-01T00:00:00Z"].window, SnapshotWindow::Hourly);
        let (_, snaps) =
            one_transaction(&records, &[SnapshotWindow::Monthly, SnapshotWindow::Daily]);
        let shared = &snaps["2026-04-01T00:00:00Z"];
        assert_eq!(shared.window, SnapshotWindow::Monthly);
        assert_eq!(
            shared.windows,
            [SnapshotWindow::Monthly, SnapshotWindow::Daily]
        );
        assert_eq!(shared.counters, counts(&[("rpm", 4)]));
        // Only shard 0's record: daily first in this order.
        let (_, snaps) = one_transaction(
            &records[..1],
            &[SnapshotWindow::Daily, SnapshotWindow::Monthly],
        );
        assert_eq!(snaps["2026-04-01T00:00:00Z"].window, SnapshotWindow::Daily);
    }

    #[test]
    fn a_year_end_batch_writes_each_item_once() {
        let (tx, snaps) = one_transaction(
            &[
                usage(0, 1, DEC31_2330, vec![delta("rpm", 1, false)]),
                usage(0, 2, JAN01_0010, vec![delta("rpm", 10, false)]),
            ],
            &ALL,
        );
        assert_one_operation_per_item(&tx);
        let got: BTreeMap<&str, (Vec<SnapshotWindow>, i64, i64)> = snaps
            .iter()
            .map(|(k, s)| {
                (
                    k.as_str(),
                    (s.windows.clone(), s.counters["rpm"], s.total_events),
                )
            })
            .collect();
        assert_eq!(
            got,
            BTreeMap::from([
                (
                    "2026-12-01T00:00:00Z",
                    (vec![SnapshotWindow::Monthly], 1, 1)
                ),
                ("2026-12-31T00:00:00Z", (vec![SnapshotWindow::Daily], 1, 1)),
                ("2026-12-31T23:00:00Z", (vec![SnapshotWindow::Hourly], 1, 1)),
                ("2027-01-01T00:00:00Z", (ALL.to_vec(), 30, 3)),
            ])
        );
        assert_eq!(tx.len(), 5, "four items and one watermark");
    }

    #[test]
    fn a_transaction_never_exceeds_the_limit_with_shared_items() {
        // 120 records, one per hour from 2026-04-01T00:10Z: every day's 00 item is shared.
        let usage: Vec<Usage> = (0..120u64)
            .map(|i| {
                usage(
                    0,
                    100 + i,
                    APR01_0010 + i as i64 * 3_600_000,
                    vec![delta("rpm", 1, false)],
                )
            })
            .collect();
        let plans = plan(&usage, &HashMap::new(), &ALL);
        let txs = &plans[0].transactions;
        assert!(txs.len() >= 2);
        let mut total = 0;
        for tx in txs {
            assert!(tx.len() <= MAX_TRANSACT_ITEMS, "{}", tx.len());
            assert_one_operation_per_item(tx);
            total += tx.snapshots.iter().map(|s| s.counters["rpm"]).sum::<i64>();
        }
        // Each record is counted once per window.
        assert_eq!(total, 120 * 3);
    }
}
