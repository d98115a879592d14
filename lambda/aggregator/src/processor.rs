//! The pure processor: stream records in, planned writes out. No I/O, no clock.
//!
//! Two steps:
//! 1. [`extract`] reads a batch: every MODIFY of a bucket item (`SK = #STATE`) yields a
//!    [`Usage`] — the `b_{limit}_tc` deltas between the old and the new image, stamped with the
//!    new image's `rf` (reference §7.2) — and every bucket item seen yields a
//!    [`BucketActivity`] for the proactive refill and doubling of §7.3. An INSERT (a bucket's
//!    create) counts its `tc` values against 0, so the consumption of the acquire that created
//!    the bucket is not lost (the reference's aggregator drops it, §13 case 44). REMOVEs
//!    (deletes and TTL expiry) and every other item are ignored.
//! 2. [`plan`] turns the usages that are newer than each bucket item's watermark into
//!    [`Transaction`]s: per (namespace, entity, resource) one write per (window, window key),
//!    each carrying the new watermark of every bucket item whose records it counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::bucket::WCU;
use dynalimit_repository::item::{Item, get_i64, get_s};
use dynalimit_repository::keys::{self, parse_bucket_pk};

use crate::record::{EventKind, SequenceNumber, StreamRecord};
use crate::window::Window;

/// Most items one `TransactWriteItems` may carry.
pub const MAX_TRANSACT_ITEMS: usize = 100;

/// Sort-key prefix of the aggregator's watermark items (one per bucket item, in the owner
/// entity's partition). It deliberately does not start with `#USAGE#`, so snapshot queries
/// never see it.
pub const MARKER_SK_PREFIX: &str = "#AGGREGATOR#";

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
    /// `(PK, SK)` of this bucket item's watermark: `{ns}/ENTITY#{entity}`,
    /// `#AGGREGATOR#{resource}#{shard}`.
    pub fn marker_key(&self) -> (String, String) {
        (
            keys::entity_pk(&self.namespace_id, &self.entity_id),
            format!("{MARKER_SK_PREFIX}{}#{}", self.resource, self.shard),
        )
    }

    /// `(PK, SK)` of the bucket item itself.
    pub fn bucket_key(&self) -> (String, String) {
        (
            keys::bucket_pk(
                &self.namespace_id,
                &self.entity_id,
                &self.resource,
                self.shard,
            ),
            keys::STATE_SK.to_owned(),
        )
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
}

fn shard_count(image: &Item) -> u32 {
    get_i64(image, "shard_count")
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(1)
        .max(1)
}

/// The limit names with a `b_{name}_tc` number on `image`, and their values.
fn consumed_counters(image: &Item) -> impl Iterator<Item = (&str, i64)> {
    image.iter().filter_map(|(attr, value)| {
        let name = attr.strip_prefix("b_")?.strip_suffix("_tc")?;
        if name.is_empty() || name == WCU {
            return None;
        }
        match value {
            AttributeValue::N(n) => dynalimit_repository::item::parse_number(n).map(|v| (name, v)),
            _ => None,
        }
    })
}

fn bucket_of(image: &Item) -> Option<BucketRef> {
    if get_s(image, "SK") != Some(keys::STATE_SK) {
        return None;
    }
    let k = parse_bucket_pk(get_s(image, "PK")?)?;
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
        let at_ms = get_i64(new, "rf").unwrap_or(0);
        let mut deltas: Vec<LimitDelta> = consumed_counters(new)
            .filter_map(|(name, new_tc)| {
                let old_tc = match old {
                    Some(old) => get_i64(old, &format!("b_{name}_tc"))?,
                    None => 0,
                };
                let milli = new_tc.checked_sub(old_tc)?;
                (milli != 0).then(|| {
                    let soft = new.contains_key(&format!("b_{name}_soft"));
                    let tk = get_i64(new, &format!("b_{name}_tk")).unwrap_or(0);
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

        let new_sc = shard_count(new);
        let old_sc = old.map_or(new_sc, shard_count);
        let entry = out
            .activity
            .entry(bucket.clone())
            .or_insert_with(|| BucketActivity {
                image: Item::new(),
                consumed: BTreeMap::new(),
                shard_count_raised: None,
            });
        entry.image = new.clone();
        for d in &deltas {
            *entry.consumed.entry(d.limit.clone()).or_default() += d.milli;
        }
        if new_sc > old_sc {
            let from = entry
                .shard_count_raised
                .map_or(old_sc, |(f, _)| f.min(old_sc));
            entry.shard_count_raised = Some((from, new_sc));
        }
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

/// The additions to one snapshot item (reference §1.4.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotWrite {
    /// Owner of the snapshot.
    pub group: GroupKey,
    /// The window.
    pub window: Window,
    /// The window key (its UTC start).
    pub window_key: String,
    /// Whole tokens to add per limit.
    pub counters: BTreeMap<String, i64>,
    /// Soft-limit overdraw events to add per limit (`{limit}#od`).
    pub overdrawn: BTreeMap<String, i64>,
    /// Events to add to `total_events`: one per (record, limit).
    pub total_events: i64,
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
    /// Snapshot updates, one per (window, window key).
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
    snapshots: BTreeMap<(Window, String), SnapshotWrite>,
    markers: BTreeMap<BucketRef, MarkerWrite>,
    records: Vec<SequenceNumber>,
}

impl Builder {
    fn would_overflow(&self, usage: &Usage, windows: &[Window]) -> bool {
        let new_snapshots = windows
            .iter()
            .filter(|w| !self.snapshots.contains_key(&(**w, w.key(usage.at_ms))))
            .count();
        let new_marker = usize::from(!self.markers.contains_key(&usage.bucket));
        self.snapshots.len() + self.markers.len() + new_snapshots + new_marker > MAX_TRANSACT_ITEMS
    }

    fn add(&mut self, usage: &Usage, expected: Option<SequenceNumber>, windows: &[Window]) {
        for &window in windows {
            let window_key = window.key(usage.at_ms);
            let snap = self
                .snapshots
                .entry((window, window_key.clone()))
                .or_insert_with(|| SnapshotWrite {
                    group: usage.bucket.group(),
                    window,
                    window_key,
                    counters: BTreeMap::new(),
                    overdrawn: BTreeMap::new(),
                    total_events: 0,
                });
            for d in &usage.deltas {
                *snap.counters.entry(d.limit.clone()).or_default() += d.tokens;
                if d.overdrawn {
                    *snap.overdrawn.entry(d.limit.clone()).or_default() += 1;
                }
                snap.total_events += 1;
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
/// bucket item it counts from the value read to its last counted sequence number.
pub fn plan(
    usage: &[Usage],
    watermarks: &HashMap<BucketRef, SequenceNumber>,
    windows: &[Window],
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
