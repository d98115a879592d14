//! The split of a hot bucket (a doubling that conserves its tokens and serves at once) and
//! the funded creation of a shard another writer's doubling brought into use.

use std::collections::BTreeMap;

use crate::bucket::decide::{BucketImage, NewShard, line_of, plan_funding, plan_split};
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use dynalimit_format::bucket::{BucketKey, Meta, clone_for_shard, image_from_item};
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item::Item;
use dynalimit_format::keys;

use super::{BucketStore, CONDITION_FAILED, Doubling, Pace, Transacted, build_error, writes};
use crate::RepositoryError;

/// How many times a split or a funded clone is planned again after its transaction found a
/// shard changed since the read (a slow pass moved `rf`, a debit spent what a donor was to
/// give, a lagging count was raised).
const PLAN_ATTEMPTS: u32 = 4;

/// Every existing shard of a bucket below a count, and the owner's META, as read.
struct Shards {
    items: BTreeMap<u32, Item>,
    meta: Meta,
}

impl Shards {
    /// The images of the shards read; an error for one holding a value out of bounds.
    fn images(&self) -> Result<Vec<(u32, BucketImage)>, RepositoryError> {
        self.items
            .iter()
            .map(|(shard, item)| Ok((*shard, image_from_item(item)?)))
            .collect()
    }
}

impl BucketStore {
    /// Shards `0..count` of `key`'s bucket and the owner's META, in one strongly consistent
    /// `BatchGetItem`.
    async fn shards_below(&self, key: &BucketKey, count: u32) -> Result<Shards, RepositoryError> {
        let count = count.min(dynalimit_core::bucket::MAX_SHARD_COUNT);
        let pair = |item: Item| {
            dynalimit_format::item::key_of(&item).map(|(pk, sk)| (pk.to_owned(), sk.to_owned()))
        };
        let meta_key = pair(self.meta_key(&key.entity_id));
        let mut wanted: Vec<(String, String)> = (0..count)
            .map(|s| (key.with_shard(s).pk(&self.ns), keys::STATE_SK.to_owned()))
            .collect();
        wanted.extend(meta_key.clone());
        let mut found = self.batch_get(&wanted, true).await?;
        let meta = meta_key
            .and_then(|k| found.remove(&k))
            .map_or_else(Meta::absent, |item| Meta::from_item(&item));
        let items = found
            .into_values()
            .filter_map(|item| {
                let pk = dynalimit_format::item::key_of(&item)?.0;
                Some((BucketKey::parse(&self.ns, pk)?.shard, item))
            })
            .collect();
        Ok(Shards { items, meta })
    }

    /// Splits the bucket of `(entity, resource)` from `from` to `to = 2 × from` shards at
    /// `now` (reference §3.8, with the split of `crate::bucket::decide::plan_split`): one
    /// `TransactWriteItems` in which every existing shard `i < from` is materialised under its
    /// `rf` lock, gives part of each balance and takes the new count (under `shard_count =
    /// :from`), shard `i + from` is created with what it was given (a clone of shard `i`,
    /// under `attribute_not_exists(PK)`), and the owner's META is checked as read. The bucket
    /// then holds what it held, every shard carries the new count at once, and the new
    /// shards serve at once.
    ///
    /// Read first, strongly consistent: shards `0..to` and the META. A shard below `from`
    /// that lags behind shard 0's count is raised first (as a propagation does). When shard
    /// 0 already holds a higher count (another writer doubled, perhaps without propagating),
    /// that count is propagated to the older shards instead ([`Self::propagate_shard_count`]),
    /// and a shard it brought into use is funded when it is created. A transaction cancelled
    /// by a changed shard is planned again from a fresh read, up to four times.
    ///
    /// Refused for throughput (the partition it relieves is hot), the transaction is sent
    /// again soon, up to eight attempts (test
    /// `suite::throttle::a_split_refused_for_throughput_is_sent_again_soon_and_lands`). A
    /// lost answer: the transaction is sent again with the same `ClientRequestToken`, within
    /// the client's attempts, which DynamoDB answers as the first time without applying it
    /// again, so the split lands once (test `suite::outcomes::split`). An error after the
    /// attempts leaves the outcome unknown: shard 0 is read back, strongly consistent;
    /// a raised count means the transaction landed, whole (every donor debited once, every
    /// new shard created once), and that count is returned; otherwise the error is.
    ///
    /// Returns the count to use (`to` when this call split the bucket, the count shard 0
    /// holds when it was already raised, `from` when the bucket cannot be split this way or
    /// the split kept losing) and the shards whose propagation failed.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt) when a shard read holds a value out of bounds (nothing is
    /// written); [`RepositoryError`] when a read fails, or when the transaction fails and
    /// shard 0 still holds `from`.
    pub async fn double_shards(
        &self,
        key: &BucketKey,
        from: u32,
        to: u32,
        now: i64,
    ) -> Result<Doubling, RepositoryError> {
        let unchanged = Doubling {
            count: from,
            failed: Vec::new(),
        };
        for _ in 0..PLAN_ATTEMPTS {
            let read = self.shards_below(key, to).await?;
            let images = read.images()?;
            let Some((_, zero)) = images.iter().find(|(s, _)| *s == 0) else {
                return Ok(unchanged);
            };
            let seen = zero.shards();
            if seen > from {
                return Ok(self.adopt(key, from, seen).await);
            }
            if seen < from {
                return Ok(unchanged);
            }
            let lagging: Vec<u32> = images
                .iter()
                .filter(|(s, img)| *s > 0 && *s < from && img.shards() < from)
                .map(|(s, _)| *s)
                .collect();
            if !lagging.is_empty() {
                self.raise_shard_count(key, lagging, from).await;
                continue;
            }
            let Some(plan) = plan_split(&images, from, to, now) else {
                return Ok(unchanged);
            };
            let mut items = Vec::with_capacity(2 * plan.splits.len() + 1);
            for split in &plan.splits {
                let e = writes::split_donor(&split.write, from, to);
                let update = Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key.with_shard(split.donor).key_map(&self.ns)))
                    .with_expr(&e)
                    .build()
                    .map_err(|e| build_error("TransactWriteItems", &e))?;
                items.push(TransactWriteItem::builder().update(update).build());
                if let Some(new) = &split.shard {
                    items.push(self.clone_put(key, &read.items[&split.donor], new)?);
                }
            }
            items.push(self.meta_check(&key.entity_id, &read.meta.check)?);
            match self.transact(key, items, Pace::Persistent).await {
                Ok(Transacted::Done) => {
                    return Ok(Doubling {
                        count: to,
                        failed: Vec::new(),
                    });
                }
                Ok(Transacted::Failed(_)) => {}
                Ok(Transacted::Contended) => return Ok(unchanged),
                Err(error) => {
                    return match self.get(&key.with_shard(0), true).await {
                        Ok(Some(image)) if image.shards() > from => {
                            Ok(self.adopt(key, from, image.shards()).await)
                        }
                        _ => Err(error),
                    };
                }
            }
        }
        Ok(unchanged)
    }

    /// The count `seen` that shard 0 holds above `from`, propagated to the shards that
    /// existed before the last doubling (counts only double, so they are `1..seen / 2`, or
    /// `1..from` when that is more). Idempotent: a shard already at `seen` is left alone.
    async fn adopt(&self, key: &BucketKey, from: u32, seen: u32) -> Doubling {
        let prior = from.max(seen / 2);
        let propagation = self.propagate_shard_count(key, prior, seen).await;
        Doubling {
            count: seen,
            failed: propagation.failed,
        }
    }

    /// The `Put` of new shard `new` of `key`'s bucket, cloned from its donor's `item`, under
    /// `attribute_not_exists(PK)`.
    fn clone_put(
        &self,
        key: &BucketKey,
        item: &Item,
        new: &NewShard,
    ) -> Result<TransactWriteItem, RepositoryError> {
        let clone = clone_for_shard(item, &self.ns, &key.with_shard(new.shard), new)?;
        let absent = crate::namespace::absent();
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(clone))
            .with_expr(&absent)
            .build()
            .map(|put| TransactWriteItem::builder().put(put).build())
            .map_err(|e| build_error("TransactWriteItems", &e))
    }

    /// Creates shard `key.shard` of a bucket of `count` shards at `now`, as an aggregator
    /// pre-creates a shard that another writer's doubling brought into use (reference §7.3,
    /// path 2): a clone of the nearest existing shard of its line
    /// (`crate::bucket::decide::line_of`), holding what `plan_funding` gives it (moves from
    /// its siblings, as the client's create makes them, or a fresh share), in one
    /// transaction with the donors' debits and a `ConditionCheck` on the owner's META as
    /// read. A transaction cancelled by a changed donor is planned again from a fresh read.
    /// Returns false when the shard exists already (a client created it first), when no
    /// shard of its line exists, or when its donor is disabled or carries what the core
    /// profile cannot interpret.
    ///
    /// Sent again after throttling and after a lost answer as a split's transaction is
    /// ([`Self::double_shards`]): DynamoDB applies it once (test
    /// `suite::outcomes::aggregator_clone_of_a_new_shard`); an error after the attempts
    /// leaves it applied once or not at all.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt) when a shard read holds a value out of bounds, or `count`
    /// is not a shard count (`1..=32`) above `key`'s shard (nothing is written);
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn create_shard(
        &self,
        key: &BucketKey,
        count: u32,
        now: i64,
    ) -> Result<bool, RepositoryError> {
        for _ in 0..PLAN_ATTEMPTS {
            let read = self.shards_below(key, count).await?;
            if read.items.contains_key(&key.shard) {
                return Ok(false);
            }
            let Some(donor) = line_of(key.shard).find_map(|s| read.items.get(&s)) else {
                return Ok(false);
            };
            let image = image_from_item(donor)?;
            if image.disabled || image.unsupported_reason().is_some() {
                return Ok(false);
            }
            let siblings = read.images()?;
            let limits = image.stored_limits();
            let (balances, moves) = plan_funding(&limits, &siblings, key.shard, count, now);
            let scheduled = !image.schedules.is_empty()
                || !image.resets.is_empty()
                || !image.windows.is_empty();
            let new = NewShard {
                shard: key.shard,
                shard_count: count,
                rf: now,
                balances,
                windows: image
                    .windows
                    .iter()
                    .filter_map(|(name, w)| Some((name.clone(), w.ws?)))
                    .collect(),
                vu: image.vu.filter(|_| scheduled),
            };
            let mut items = vec![
                self.clone_put(key, donor, &new)?,
                self.meta_check(&key.entity_id, &read.meta.check)?,
            ];
            items.extend(self.move_updates(key, &moves)?);
            match self.transact(key, items, Pace::Persistent).await? {
                Transacted::Done => return Ok(true),
                Transacted::Failed(reasons)
                    if reasons.first().is_some_and(|r| r == CONDITION_FAILED) =>
                {
                    return Ok(false);
                }
                Transacted::Failed(_) => {}
                Transacted::Contended => return Ok(false),
            }
        }
        Ok(false)
    }
}
