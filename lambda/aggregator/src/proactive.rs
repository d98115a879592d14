//! Proactive refill and sharding (reference §7.3), run after the snapshots of a batch.
//!
//! * **Refill**: for each bucket item seen in the batch (its last image), each limit is
//!   projected to now with the core's refill. A positive delta is written only when the
//!   projected balance is below what the batch saw consumed — the bucket is busy and the next
//!   acquire would otherwise take the slow path — and a trim (a balance above a lowered
//!   ceiling) is always written. One `UpdateItem` per item: `ADD` the deltas, `SET rf`, under
//!   the `rf` lock with pins on `vu`, `shard_count` and each raised balance. A lost condition
//!   means a client moved first; it is skipped silently.
//! * **Doubling**: on shard 0, when `wcu` projected to now is below 20 % of its capacity, the
//!   bucket splits (cap 32) through the same transaction the acquire path uses
//!   (`BucketStore::double_shards`): every shard gives part of its balances to the new shard
//!   it splits into, created in the same transaction, so the split adds no token and the new
//!   shards serve at once.
//! * **Propagation**: when a record raised `shard_count` on shard 0 from `old` to `new` (a
//!   doubling by a writer that moves nothing, such as zae-limiter's), the new count is set on
//!   shards `1..old` under `shard_count < :new`: a writer whose propagation failed leaves no
//!   shard on the old count and the old share. Every shard is tried; the failures are
//!   reported. Then each of shards `old..new` still missing is pre-created, funded as a
//!   client's create funds it (`BucketStore::create_shard`: a clone of the nearest shard of
//!   its line holding what moves from its siblings give it, in one transaction with their
//!   debits); a shard already created (by a split, or by a client) is left alone.
//!
//! Items dynalimit cannot interpret (session windows, a schedule that does not decode) are left
//! alone, as are disabled ones and items holding a value out of bounds
//! (`dynalimit_core::bounds`: such an item is reported in the batch's errors, and no shard is
//! stamped or created for it). A scheduled limit is refilled at the parameters in force; a
//! quota is neither refilled nor trimmed (its next slow pass gives the new period's grant),
//! and the `vu` stamp is left for the slow pass to move.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use dynalimit_core::Clock;
use dynalimit_core::bucket::{MAX_SHARD_COUNT, doubled_shard_count};
use dynalimit_format::bucket::{BucketKey, image_from_item, shard_count};
use dynalimit_format::item::Item;
use dynalimit_repository::bucket::BucketStore;

use crate::processor::{BucketActivity, BucketRef};

/// What the proactive passes did.
#[derive(Debug, Default)]
pub(crate) struct ProactiveReport {
    pub(crate) refills: usize,
    pub(crate) shards_stamped: usize,
    pub(crate) shards_created: usize,
    pub(crate) errors: Vec<String>,
}

/// The proactive passes over one batch's activity, with what they write through.
pub(crate) struct Passes<'a> {
    pub(crate) client: &'a Client,
    pub(crate) table: &'a str,
    pub(crate) clock: &'a dyn Clock,
    /// Refill busy buckets.
    pub(crate) refill: bool,
    /// Double hot shard 0s, propagate raised counts and pre-create new shards.
    pub(crate) sharding: bool,
}

impl Passes<'_> {
    fn store(&self, bucket: &BucketRef) -> BucketStore {
        BucketStore::new(
            self.client.clone(),
            self.table.to_owned(),
            bucket.namespace_id.clone(),
        )
    }

    /// The propagation pass for a count raised on shard 0 from `old` to `new` (see the
    /// module docs).
    async fn propagate(
        &self,
        store: &BucketStore,
        bucket: &BucketRef,
        image: &Item,
        (old, new): (u32, u32),
        report: &mut ProactiveReport,
    ) {
        let key = BucketKey::new(bucket.entity_id.clone(), bucket.resource.clone(), 0);
        let done = store.propagate_shard_count(&key, old, new).await;
        report.shards_stamped += done.updated.len();
        for (shard, e) in done.failed {
            report.errors.push(format!(
                "propagation of shard_count {new} to shard {shard} of {bucket:?}: {e}"
            ));
        }
        // The image decoded already ([`Passes::run`]); `new` is its shard count, at most 32.
        let Ok(img) = image_from_item(image) else {
            return;
        };
        if img.disabled || img.unsupported_reason().is_some() {
            return;
        }
        let now = self.clock.epoch_millis();
        for shard in old..new.min(MAX_SHARD_COUNT) {
            // Boxed: the transaction's future is deep, and this pass runs inside the
            // handler's.
            match Box::pin(store.create_shard(&key.with_shard(shard), new, now)).await {
                Ok(true) => report.shards_created += 1,
                Ok(false) => {}
                Err(e) => report
                    .errors
                    .push(format!("pre-creation of shard {shard} of {bucket:?}: {e}")),
            }
        }
    }

    pub(crate) async fn run(
        &self,
        activity: &BTreeMap<BucketRef, BucketActivity>,
    ) -> ProactiveReport {
        let mut report = ProactiveReport::default();
        for (bucket, act) in activity {
            // An item holding a value out of bounds is left alone (and reported).
            let (img, stored_count) = match image_from_item(&act.image)
                .and_then(|img| Ok((img, shard_count(&act.image)?.map(i64::from))))
            {
                Ok(read) => read,
                Err(e) => {
                    report.errors.push(format!("{bucket:?} left alone: {e}"));
                    continue;
                }
            };
            let now = self.clock.epoch_millis();
            let store = self.store(bucket);
            if self.refill {
                let key = bucket.bucket_key();
                let refill = store.proactive_refill(&key, &img, stored_count, &act.consumed, now);
                match refill.await {
                    Ok(true) => report.refills += 1,
                    Ok(false) => {}
                    Err(e) => report.errors.push(format!("refill of {bucket:?}: {e}")),
                }
            }
            if !self.sharding || bucket.shard != 0 {
                continue;
            }
            if let Some(raised) = act.shard_count_raised {
                self.propagate(&store, bucket, &act.image, raised, &mut report)
                    .await;
            }
            let key = BucketKey::new(bucket.entity_id.clone(), bucket.resource.clone(), 0);
            match Box::pin(store.proactive_doubling(&key, &img, now)).await {
                Ok(None) => {}
                Ok(Some(doubling)) => {
                    // This call split the bucket (not another writer before it).
                    if Some(doubling.count) == doubled_shard_count(img.shards()) {
                        report.shards_stamped += 1;
                    }
                    for (shard, e) in doubling.failed {
                        report.errors.push(format!(
                            "propagation of shard_count {} to shard {shard} of {bucket:?}: {e}",
                            doubling.count
                        ));
                    }
                }
                Err(e) => report.errors.push(format!("doubling of {bucket:?}: {e}")),
            }
        }
        report
    }
}
