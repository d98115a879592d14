//! The shared pause stamp on bucket items: a number attribute holding a wall-clock deadline
//! (epoch ms) before which no acquire may spend the bucket's tokens.
//!
//! The stamp is written with a conditional max-merge on every existing shard and touches no
//! other attribute, so it never disturbs another writer's condition. The acquire paths refuse a
//! bucket whose stamp is in force: later than now and at most a day (plus the clock-skew
//! allowance, [`Stamp::Pause`]) ahead. The speculative consume and the consumption-only retry
//! carry `attribute_not_exists(#p) OR NOT (#p BETWEEN :next AND :horizon)` in their
//! conditions, the rf-locked write carries the same clause from its refill timestamp, and a
//! failed write whose old image shows a stamp in force reports it instead of a balance
//! problem. A stamp further ahead than a pause lasts (another writer's clock, or a hostile
//! value) is no pause: the acquires ignore it and the next pause replaces it.

use dynalimit_core::bounds::Stamp;
use dynalimit_format::attr::{self, PAUSE_UNTIL};
use dynalimit_format::bucket::{live_pause, pause_stamp};
use dynalimit_format::expr::{Expr, num};
use futures::future::join_all;

use super::{BucketKey, BucketStore, Update};
use crate::RepositoryError;
use crate::error::classify;
use crate::retry::Resend;

/// Adds "no pause in force after `at`" to a write's condition, judged at `now`:
/// `attribute_not_exists(#p) OR NOT (#p BETWEEN :at+1 AND :horizon)`, with the horizon
/// [`Stamp::Pause`]'s at `now` (never below `at + 1`). A stamp that is not a number is no
/// pause, as the client reads it.
pub(crate) fn not_paused(e: &mut Expr, at: i64, now: i64) {
    let next = at.saturating_add(1);
    let horizon = Stamp::Pause.horizon(now).max(next);
    let missing = e.not_exists(PAUSE_UNTIL);
    let p = e.name(PAUSE_UNTIL);
    let (next, horizon) = (e.num(next), e.num(horizon));
    e.when(format!(
        "{missing} OR NOT ({p} BETWEEN {next} AND {horizon})"
    ));
}

/// `SET #p = :until IF attribute_exists(PK) AND (attribute_not_exists(#p) OR #p < :until OR
/// #p > :horizon)`: a stamp further ahead than a pause lasts at `now` is replaced.
pub(crate) fn stamp(until: i64, now: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    let (missing, earlier, beyond) = (
        e.not_exists(PAUSE_UNTIL),
        e.cmp(PAUSE_UNTIL, "<", until),
        e.cmp(PAUSE_UNTIL, ">", Stamp::Pause.horizon(now)),
    );
    e.when(format!("{missing} OR {earlier} OR {beyond}"));
    e.set(PAUSE_UNTIL, num(until));
    e
}

impl BucketStore {
    /// Max-merges a pause deadline into every existing shard of `(entity_id, resource)`: the
    /// shard count is read from shard 0, then each shard is stamped concurrently. Returns the
    /// deadline now stored (the latest one in force at `now`), or `None` when the pair has no
    /// bucket item to stamp (a pause then has no shared effect). A stamp further ahead than a
    /// pause lasts at `now` ([`Stamp::Pause`]) is replaced by `until`.
    ///
    /// Each shard's stamp is tried [`super::CONFLICT_ATTEMPTS`] times while it loses to other
    /// transactions. The stamp is a max-merge, so sending it again after a lost answer is
    /// harmless: a stamp that landed makes the repeat fail its `<` condition, which reads as
    /// the deadline stored.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt) when shard 0 holds a value out of bounds (a shard count
    /// above 32, say: nothing is stamped); [`RepositoryError::Contended`] when a shard's
    /// conflicts persist through every attempt (the other shards are still stamped);
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn stamp_pause(
        &self,
        entity_id: &str,
        resource: &str,
        until: i64,
        now: i64,
    ) -> Result<Option<i64>, RepositoryError> {
        let first = BucketKey::new(entity_id, resource, 0);
        let Some(img) = self.read(&first).await? else {
            return Ok(None);
        };
        let e = stamp(until, now);
        let writes = (0..img.shards()).map(|s| {
            let key = first.with_shard(s);
            let e = &e;
            async move {
                match self.update(&key, e, false, Resend::Harmless).await? {
                    Update::Done(_) => Ok::<_, RepositoryError>(Some(until)),
                    Update::ConditionFailed(old) => {
                        Ok(old.as_ref().and_then(|item| live_pause(item, now)))
                    }
                }
            }
        });
        let mut stored = None;
        for result in join_all(writes).await {
            stored = stored.max(result?);
        }
        Ok(stored)
    }

    /// The pause deadline stamped on shard 0 of `(entity_id, resource)` (strongly consistent
    /// read), if any; it may lie in the past, but a stamp further ahead of `now` than a pause
    /// lasts ([`Stamp::Pause`]) is no pause and reads as `None`.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn read_pause(
        &self,
        entity_id: &str,
        resource: &str,
        now: i64,
    ) -> Result<Option<i64>, RepositoryError> {
        let key = BucketKey::new(entity_id, resource, 0);
        let mut e = Expr::default();
        let projection = e.projection(&[PAUSE_UNTIL]);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.key_map(&self.ns)))
            .consistent_read(true)
            .projection_expression(projection)
            .set_expression_attribute_names(e.names())
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        Ok(out
            .item
            .as_ref()
            .and_then(pause_stamp)
            .filter(|&until| until <= Stamp::Pause.horizon(now)))
    }
}
