//! Refusal alerts: "a limit has refused acquires for N minutes", published once per run of
//! refusal minutes to the alert bus.
//!
//! The limiter of every process reports the minutes in which a limit refused acquires: one
//! item per (entity, resource, limit, minute) in the bucket's shard-0 partition
//! ([`dynalimit_format::refusal`]); the first report of a minute creates it, a stream INSERT.
//! An operator sets the threshold on the alert item (`dynalimit alerts set acme gpt-4 rpm
//! --refusing-for 5m`, `r_{limit}` = N minutes).
//!
//! On each INSERT of a refusal item for minute M whose limit has a threshold N (the
//! thresholds are read as for quota alerts, cached [`crate::alerts::THRESHOLD_CACHE_MS`]),
//! the aggregator queries the limit's refusal minutes M−N..M (one strongly consistent
//! `Query`) and publishes when the run is exactly N minutes long at M ([`episode_start`]):
//! every minute M−N+1..M present and M−N absent. So exactly one minute of an unbroken run of
//! refusals crosses the threshold, and the run is published once; the marker
//! (`#ALERTED#{resource}#{limit}#refusing#{first minute}`, put before publishing as for quota
//! crossings) stops a redelivered record, a second aggregator, and a threshold changed in
//! the middle of a run. A refused publication, a lost answer and a function that ends between
//! the marker and the publication behave as for quota crossings ([`crate::alerts`]).
//!
//! # What can be missed, and what cannot happen
//! * A minute whose item is created after the next minute's (a process whose clock lags, or
//!   whose report was slow) is not there when the later minute is evaluated: if that later
//!   minute was the one to cross, the run is not published. The run is never published twice
//!   under one first minute; a late minute that joins two runs that were each published
//!   leaves two alerts, one per run as the aggregator saw them.
//! * A record older than [`MAX_RECORD_AGE_MS`] is not evaluated: the refusal items expire two
//!   hours after their minute, and a run's start read after its earlier minutes expired
//!   would look new.
//! * Nothing is evaluated without an alert bus: the stack's stream filter passes refusal
//!   INSERTs only then.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::Client;
use dynalimit_format::keys;
use dynalimit_format::refusal::{self, Episode, MINUTE_MS};
use futures::StreamExt;
use serde_json::json;

use crate::alerts::{AlertOutcome, Alerts, Marked, new_token};
use crate::processor::GroupKey;
use crate::record::{EventKind, SequenceNumber, StreamRecord};

/// The `detail-type` of a refusal alert.
pub const DETAIL_TYPE: &str = "Limit refusing";
/// Records of minutes older than this are not evaluated (see the module documentation).
pub const MAX_RECORD_AGE_MS: i64 = 60 * MINUTE_MS;
/// How long a refusal alert's marker is kept past its publication.
const MARKER_TTL_MS: i64 = 86_400_000;
/// Minutes evaluated at once.
const CONCURRENCY: usize = 8;

/// The first report of one minute in which a limit refused: a stream INSERT of a refusal
/// item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedMinute {
    /// The (namespace, entity, resource).
    pub group: GroupKey,
    /// The limit.
    pub limit: String,
    /// The epoch minute.
    pub minute: i64,
    /// The record that carried it.
    pub sequence_number: SequenceNumber,
}

/// The refusal minutes a batch created: its INSERTs of refusal items (in a shard-0 bucket
/// partition, with a refusal sort key). Every other record is left out.
pub fn minutes_of(records: &[StreamRecord]) -> Vec<RefusedMinute> {
    records
        .iter()
        .filter(|r| r.kind == EventKind::Insert)
        .filter_map(|r| {
            let image = r.new_image.as_ref()?;
            let (pk, sk) = dynalimit_format::item::key_of(image)?;
            let (limit, minute) = refusal::parse_refused_sk(sk)?;
            let b = keys::parse_bucket_pk(pk).filter(|b| b.shard == 0)?;
            Some(RefusedMinute {
                group: GroupKey {
                    namespace_id: b.namespace_id,
                    entity_id: b.entity_id,
                    resource: b.resource,
                },
                limit: limit.to_owned(),
                minute,
                sequence_number: r.sequence_number.clone(),
            })
        })
        .collect()
}

/// The first minute of the run of refusals that crosses a threshold of `n` minutes at minute
/// `m`, given the minutes `present` (those read among `m − n ..= m`): `Some(m − n + 1)` when
/// every minute `m − n + 1 ..= m` is present and `m − n` is not; `None` otherwise (a run
/// shorter than `n`, or one that crossed at an earlier minute). `n` of 0 crosses nothing.
pub fn episode_start(present: &BTreeSet<i64>, m: i64, n: u8) -> Option<i64> {
    let n = i64::from(n);
    if n == 0 {
        return None;
    }
    let first = m - n + 1;
    let run = (first..=m).all(|minute| present.contains(&minute));
    (run && !present.contains(&(first - 1))).then_some(first)
}

impl Alerts {
    /// Evaluates the refusal minutes a batch created and publishes the runs that reached
    /// their threshold (see the module documentation).
    pub(crate) async fn run_refusals(
        &self,
        client: &Client,
        table: &str,
        now_ms: i64,
        minutes: &[RefusedMinute],
    ) -> AlertOutcome {
        let mut outcome = AlertOutcome::default();
        let fresh: Vec<&RefusedMinute> = minutes
            .iter()
            .filter(|r| {
                now_ms.saturating_sub(r.minute.saturating_mul(MINUTE_MS)) < MAX_RECORD_AGE_MS
            })
            .collect();
        if fresh.is_empty() {
            return outcome;
        }
        let groups = fresh.iter().map(|r| r.group.clone()).collect();
        let thresholds = match self.thresholds(client, table, now_ms, groups).await {
            Ok(t) => t,
            Err(e) => {
                outcome
                    .errors
                    .push(format!("refusal alerts: reading thresholds: {e}"));
                outcome
                    .failed
                    .extend(fresh.iter().map(|r| r.sequence_number.clone()));
                return outcome;
            }
        };
        // One evaluation per (group, limit, minute): a minute is created once, but a batch may
        // carry the record twice.
        // Owned: the evaluations run in a stream the function's task must be able to send.
        let mut due: BTreeMap<(GroupKey, String, i64), (u8, SequenceNumber)> = BTreeMap::new();
        for r in fresh {
            let Some(n) = thresholds
                .get(&r.group)
                .and_then(|t| t.refusing.get(&r.limit))
            else {
                continue;
            };
            due.entry((r.group.clone(), r.limit.clone(), r.minute))
                .or_insert_with(|| (*n, r.sequence_number.clone()));
        }
        let results: Vec<_> = futures::stream::iter(due)
            .map(|((group, limit, minute), (n, seq))| async move {
                let result = self
                    .evaluate(client, table, now_ms, (&group, &limit, minute), n)
                    .await;
                (seq, result)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (seq, result) in results {
            match result {
                Ok(published) => outcome.published += usize::from(published),
                Err((message, retry)) => {
                    outcome.errors.push(message);
                    if retry {
                        outcome.failed.push(seq);
                    }
                }
            }
        }
        outcome
    }

    /// Reads the run before `minute` and publishes it when it crosses `n` there.
    async fn evaluate(
        &self,
        client: &Client,
        table: &str,
        now_ms: i64,
        (group, limit, minute): (&GroupKey, &str, i64),
        n: u8,
    ) -> Result<bool, (String, bool)> {
        let of = refusal::Of {
            ns: &group.namespace_id,
            entity: &group.entity_id,
            resource: &group.resource,
            limit,
        };
        let present =
            dynalimit_repository::refusal_minutes(client, table, of, minute - i64::from(n), minute)
                .await
                .map_err(|e| {
                    (
                        format!(
                            "refusal alert {}/{}/{limit}: reading its minutes: {e}",
                            group.entity_id, group.resource
                        ),
                        true,
                    )
                })?;
        let Some(first_minute) = episode_start(&present, minute, n) else {
            return Ok(false);
        };
        let episode = Episode {
            entity_id: group.entity_id.clone(),
            resource: group.resource.clone(),
            limit: limit.to_owned(),
            first_minute,
        };
        let ns = &group.namespace_id;
        let token = new_token();
        let ttl_s = now_ms.saturating_add(MARKER_TTL_MS).div_euclid(1000);
        let detail = json!({
            "namespace_id": ns,
            "entity_id": episode.entity_id,
            "resource": episode.resource,
            "limit": episode.limit,
            "refusing_minutes": n,
            "first_minute_ms": first_minute.saturating_mul(MINUTE_MS),
            "minute_ms": minute.saturating_mul(MINUTE_MS),
            "observed_at_ms": now_ms,
        });
        let marked = Marked {
            what: format!(
                "refusal alert {}/{}/{limit} refusing {n} minutes from minute {first_minute}",
                group.entity_id, group.resource
            ),
            marker: episode.marker_item(ns, n, now_ms, &token, ttl_s),
            key: episode.marker_key(ns),
            token,
            detail_type: DETAIL_TYPE,
            detail,
        };
        self.publish_marked(client, table, marked).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_format::item;
    use proptest::prelude::*;

    fn set(minutes: &[i64]) -> BTreeSet<i64> {
        minutes.iter().copied().collect()
    }

    #[test]
    fn a_run_crosses_at_its_nth_minute_only() {
        // N = 3: minutes 10, 11, 12 present, 9 absent: crosses at 12, from 10.
        assert_eq!(episode_start(&set(&[10, 11, 12]), 12, 3), Some(10));
        // Too short: 11, 12 only.
        assert_eq!(episode_start(&set(&[11, 12]), 12, 3), None);
        // A gap inside the run.
        assert_eq!(episode_start(&set(&[10, 12]), 12, 3), None);
        // Longer than N: crossed at an earlier minute, not again.
        assert_eq!(episode_start(&set(&[9, 10, 11, 12]), 12, 3), None);
        // N = 1: every minute after a gap crosses.
        assert_eq!(episode_start(&set(&[12]), 12, 1), Some(12));
        assert_eq!(episode_start(&set(&[11, 12]), 12, 1), None);
        // The minute itself must be present; N = 0 crosses nothing.
        assert_eq!(episode_start(&set(&[10, 11]), 12, 3), None);
        assert_eq!(episode_start(&set(&[12]), 12, 0), None);
    }

    #[test]
    fn only_inserts_of_refusal_items_in_shard_0_are_read() {
        let of = refusal::Of {
            ns: "ns1",
            entity: "acme",
            resource: "gpt-4",
            limit: "rpm",
        };
        let record = |kind, image: dynalimit_format::Item| StreamRecord {
            event_id: "e".into(),
            kind,
            sequence_number: SequenceNumber::parse("7").unwrap(),
            old_image: None,
            new_image: Some(image),
            removed_by_ttl: false,
        };
        let refused = of.refused_key(29_000_000);
        let mut shard_1 = refused.clone();
        shard_1.insert(
            "PK".into(),
            item::s(keys::bucket_pk("ns1", "acme", "gpt-4", 1)),
        );
        let state = item::key(keys::bucket_pk("ns1", "acme", "gpt-4", 0), keys::STATE_SK);
        let got = minutes_of(&[
            record(EventKind::Insert, refused.clone()),
            record(EventKind::Modify, refused),
            record(EventKind::Insert, shard_1),
            record(EventKind::Insert, state),
        ]);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].limit.as_str(), got[0].minute), ("rpm", 29_000_000));
        assert_eq!(got[0].group.entity_id, "acme");
    }

    #[test]
    fn usage_extraction_ignores_refusal_items() {
        let of = refusal::Of {
            ns: "ns1",
            entity: "acme",
            resource: "gpt-4",
            limit: "rpm",
        };
        let mut image = of.refused_key(29_000_000);
        image.insert("b_rpm_tc".into(), item::n(5000));
        let r = StreamRecord {
            event_id: "e".into(),
            kind: EventKind::Insert,
            sequence_number: SequenceNumber::parse("7").unwrap(),
            old_image: None,
            new_image: Some(image),
            removed_by_ttl: false,
        };
        let extracted = crate::processor::extract(&[r]);
        assert!(extracted.usage.is_empty() && extracted.activity.is_empty());
        assert_eq!(extracted.ignored, 1);
    }

    proptest! {
        /// Over any pattern of refusal minutes, evaluating every present minute once (in any
        /// order, with everything already written) crosses exactly once per run of at least N
        /// minutes, at the run's N-th minute.
        #[test]
        fn each_run_of_n_minutes_crosses_once(
            present in proptest::collection::btree_set(0i64..200, 0..120),
            n in 1u8..=12,
        ) {
            let crossings: Vec<(i64, i64)> = present
                .iter()
                .filter_map(|&m| episode_start(&present, m, n).map(|f| (f, m)))
                .collect();
            // The runs, computed directly.
            let mut runs = Vec::new();
            let mut start = None;
            let mut last = None;
            for &m in &present {
                if last != Some(m - 1) {
                    if let (Some(s), Some(l)) = (start, last) { runs.push((s, l)); }
                    start = Some(m);
                }
                last = Some(m);
            }
            if let (Some(s), Some(l)) = (start, last) { runs.push((s, l)); }
            let want: Vec<(i64, i64)> = runs
                .iter()
                .filter(|(s, l)| l - s + 1 >= i64::from(n))
                .map(|(s, _)| (*s, s + i64::from(n) - 1))
                .collect();
            prop_assert_eq!(crossings, want);
        }
    }
}
