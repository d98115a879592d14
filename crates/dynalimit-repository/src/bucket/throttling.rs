//! Throttling as a signal: DynamoDB refusing a partition's writes beyond its throughput
//! (`ProvisionedThroughputExceededException`, `ThrottlingException`) long before a bucket's
//! `wcu` count runs out, when a table has provisioned capacity or a partition is shared.
//!
//! A refused write applied nothing, so the acquire sends it to another shard of the bucket
//! at once ([`Throttling::avoid`] says which to leave out, for `AVOID_MS`). When the
//! bucket's shards keep being refused for `SUSTAINED_THROTTLING_MS`, at least
//! `RUN_REFUSALS` times with no quiet gap longer than `RUN_GAP_MS` between two refusals (of
//! any shard: a refused shard is avoided, so the refusals move from shard to shard), while
//! the bucket still took writes in that time, its partitions are hot for good and the bucket
//! splits, as after a `wcu` shortfall ([`decide_throttling`]). A burst that dies down within
//! the second does not split it, nor does a brownout in which no write is taken at all (the
//! table, not the partition, refuses: a split would not help).
//!
//! A process sees the partitions only through its own requests. With many in flight it sees
//! a hot partition's refusals milliseconds apart; with one in flight (a Lambda function's
//! instance, a worker that acquires in turn), a refusal, the client's retry pause (up to a
//! second in the SDK's standard configuration), the next request: up to a second apart. So a
//! run tolerates quiet gaps of up to a second, and asks for a few refusals, not two.

use crate::bucket::decide::{BucketImage, Gate, fast_rejection_gate};
use dynalimit_core::bucket::{MAX_SHARD_COUNT, doubled_shard_count};
use std::collections::BTreeMap;

/// How long the bucket's shards must keep being refused before it splits: the second over
/// which the `wcu` count measures a partition's writes.
pub(crate) const SUSTAINED_THROTTLING_MS: i64 = 1_000;

/// The longest quiet gap between two refusals of the bucket's shards that still counts as one
/// run of throttling: a process with one request in flight sees them this far apart.
pub(crate) const RUN_GAP_MS: i64 = 1_000;

/// The fewest refusals in a run of throttling that splits the bucket.
pub(crate) const RUN_REFUSALS: u32 = 4;

/// How long a refused shard is left out of the draws.
pub(crate) const AVOID_MS: i64 = 250;

/// What one process saw of the throttling of one bucket's shards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Throttling {
    /// When each shard was last refused, epoch ms.
    last: BTreeMap<u32, i64>,
    /// When the current run of refusals began.
    since: Option<i64>,
    /// The refusals of the current run.
    count: u32,
    /// When a write to one of the bucket's shards was last taken.
    served: Option<i64>,
}

impl Throttling {
    /// Records that a write to one of the bucket's shards was taken at `now`.
    pub fn served(&mut self, now: i64) {
        self.served = Some(now);
    }

    /// Records that `shard` refused a write at `now`. True when the bucket's shards have now
    /// been refused for at least `SUSTAINED_THROTTLING_MS`, `RUN_REFUSALS` times or more,
    /// without a gap longer than `RUN_GAP_MS`, and the bucket took a write within that run:
    /// the bucket should split.
    pub fn refused(&mut self, shard: u32, now: i64) -> bool {
        let previous = self.last.values().copied().max();
        self.last.insert(shard.min(MAX_SHARD_COUNT), now);
        let continued = previous.is_some_and(|at| now.saturating_sub(at) <= RUN_GAP_MS);
        let since = match self.since {
            Some(since) if continued => since,
            _ => {
                self.count = 0;
                now
            }
        };
        self.since = Some(since);
        self.count = self.count.saturating_add(1);
        now.saturating_sub(since) >= SUSTAINED_THROTTLING_MS
            && self.count >= RUN_REFUSALS
            && self.served.is_some_and(|at| at >= since)
    }

    /// The shards refused within the last `AVOID_MS` at `now`: where a request is not sent
    /// while another shard may take it.
    pub fn avoid(&self, now: i64) -> Vec<u32> {
        self.last
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) <= AVOID_MS)
            .map(|(shard, _)| *shard)
            .collect()
    }

    /// Forgets the refusals: the bucket split, so its load spreads anew.
    pub fn split(&mut self) {
        *self = Throttling {
            served: self.served,
            ..Throttling::default()
        };
    }
}

/// Decides the response to sustained throttling of shard 0, read as `img` (reference §3.8,
/// with throttling as the signal): split from the image's count to twice it, as a `wcu`
/// shortfall does, unless a declared limit is short even after refill (splitting a bucket on
/// the way to a rejection moves load, not tokens, hard case 19) or the count is at the cap.
pub fn decide_throttling(
    img: &BucketImage,
    demand: &BTreeMap<String, i64>,
    now: i64,
) -> Option<(u32, u32)> {
    if let Gate::Reject(_) = fast_rejection_gate(img, demand, now) {
        return None;
    }
    doubled_shard_count(img.shards()).map(|to| (img.shards(), to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::decide::{Plan, Stamps, plan_create};
    use dynalimit_core::Limit;

    const T0: i64 = 1_700_000_000_000;

    #[test]
    fn a_second_of_refusals_without_a_quiet_second_asks_for_a_split() {
        let mut t = Throttling::default();
        let mut at = T0;
        assert!(!t.refused(0, at));
        for _ in 0..4 {
            at += 200;
            t.served(at - 100);
            assert!(!t.refused(0, at));
        }
        at += 200;
        assert!(t.refused(0, at), "1000 ms of refusals");
        // Nothing taken during the run: a brownout, not a hot partition.
        let mut t = Throttling::default();
        t.served(T0 - 1);
        for i in 0..=10 {
            assert!(!t.refused(0, T0 + i * 100), "{i}");
        }
        t.served(T0 + 1_050);
        assert!(t.refused(0, T0 + 1_100), "a write taken within the run");
        // A quiet gap over a second starts a new run.
        let mut t = Throttling::default();
        t.served(T0 + 100);
        assert!(!t.refused(0, T0));
        assert!(!t.refused(0, T0 + 500));
        assert!(!t.refused(0, T0 + 900));
        assert!(!t.refused(0, T0 + 2_000), "a 1100 ms gap: a new run");
        t.served(T0 + 2_100);
        assert!(!t.refused(0, T0 + 2_500));
        assert!(!t.refused(0, T0 + 2_900));
        assert!(
            t.refused(0, T0 + 3_000),
            "a second of the new run, four refusals"
        );
        // Refusals a second apart, as a process with one request in flight sees a hot
        // partition (a refusal, the client's retry pause, the next request): one run, which
        // asks for a split at its fourth refusal.
        let mut t = Throttling::default();
        t.served(T0 + 300);
        assert!(!t.refused(0, T0));
        assert!(!t.refused(0, T0 + 1_000), "two refusals");
        assert!(!t.refused(0, T0 + 2_000), "three refusals");
        assert!(t.refused(0, T0 + 3_000), "four refusals over three seconds");
        // Refusals moving from shard to shard are one run.
        let mut t = Throttling::default();
        t.served(T0 + 500);
        for i in 0..10 {
            assert!(
                !t.refused(u32::try_from(i % 4).unwrap(), T0 + i * 100),
                "{i}"
            );
        }
        assert!(t.refused(3, T0 + 1_000));
        // A shard refused once, then quiet, starts no run with another shard's refusal later.
        let mut t = Throttling::default();
        t.served(T0 + 1_900);
        assert!(!t.refused(3, T0));
        assert!(!t.refused(0, T0 + 2_000));
        t.served(T0 + 2_000);
        t.split();
        assert!(t.avoid(T0 + 2_000).is_empty());
        assert!(!t.refused(0, T0 + 2_100), "a new run");
    }

    #[test]
    fn a_refused_shard_is_avoided_for_a_quarter_second() {
        let mut t = Throttling::default();
        t.refused(2, T0);
        t.refused(5, T0 + 100);
        assert_eq!(t.avoid(T0 + 200), [2, 5]);
        assert_eq!(t.avoid(T0 + 300), [5]);
        assert!(t.avoid(T0 + 400).is_empty());
    }

    #[test]
    fn throttling_splits_unless_the_request_would_be_refused_or_the_count_is_at_the_cap() {
        let limits = [Limit::per_minute("rpm", 10)];
        let want = |n: i64| BTreeMap::from([("rpm".to_owned(), n * 1000)]);
        let Plan::Write(p) = plan_create(&limits, &want(9), 1, 0, T0, None, &Stamps::default())
        else {
            panic!("created");
        };
        let mut img = BucketImage {
            rf: p.rf,
            shard_count: 1,
            ..BucketImage::default()
        };
        let (l, tk, tc) = &p.limits[0];
        img.limits.insert(
            "rpm".into(),
            crate::bucket::decide::LimitState {
                tk: *tk,
                cp: l.capacity_milli(),
                ra: l.refill_amount_milli(),
                rp: l.refill_period_millis(),
                tc: *tc,
            },
        );
        assert_eq!(decide_throttling(&img, &want(1), T0), Some((1, 2)));
        assert_eq!(decide_throttling(&img, &want(2), T0), None, "1 token left");
        img.shard_count = 32;
        assert_eq!(decide_throttling(&img, &want(0), T0), None);
    }
}
