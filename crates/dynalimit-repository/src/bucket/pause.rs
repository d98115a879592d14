//! The shared pause stamp on bucket items: a number attribute holding a wall-clock deadline
//! (epoch ms) before which no acquire may spend the bucket's tokens.
//!
//! The stamp is written with a conditional max-merge on every existing shard and touches no
//! other attribute, so it never disturbs another writer's condition. The acquire paths refuse a
//! bucket whose stamp lies in the future: the speculative consume and the consumption-only
//! retry carry `attribute_not_exists(#p) OR #p <= :now` in their conditions, the rf-locked
//! write carries the same clause against its refill timestamp, and a failed write whose old
//! image shows a live stamp reports it instead of a balance problem.

use dynalimit_format::attr::{self, PAUSE_UNTIL};
use dynalimit_format::bucket::pause_stamp;
use dynalimit_format::expr::{Expr, num};
use futures::future::join_all;

use super::{BucketKey, BucketStore, Update};
use crate::RepositoryError;
use crate::error::classify;
use crate::retry::Resend;

/// Adds `attribute_not_exists(#p) OR #p <= :now` to a write's condition.
pub(crate) fn not_paused(e: &mut Expr, now: i64) {
    let (missing, past) = (e.not_exists(PAUSE_UNTIL), e.cmp(PAUSE_UNTIL, "<=", now));
    e.when(format!("{missing} OR {past}"));
}

/// `SET #p = :until IF attribute_exists(PK) AND (attribute_not_exists(#p) OR #p < :until)`.
pub(crate) fn stamp(until: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.exists(attr::PK);
    e.when(c);
    let (missing, earlier) = (e.not_exists(PAUSE_UNTIL), e.cmp(PAUSE_UNTIL, "<", until));
    e.when(format!("{missing} OR {earlier}"));
    e.set(PAUSE_UNTIL, num(until));
    e
}

impl BucketStore {
    /// Max-merges a pause deadline into every existing shard of `(entity_id, resource)`: the
    /// shard count is read from shard 0, then each shard is stamped concurrently. Returns the
    /// deadline now stored (the latest one seen), or `None` when the pair has no bucket item
    /// to stamp (a pause then has no shared effect).
    ///
    /// Each shard's stamp is tried [`super::CONFLICT_ATTEMPTS`] times while it loses to other
    /// transactions. The stamp is a max-merge, so sending it again after a lost answer is
    /// harmless: a stamp that landed makes the repeat fail its `<` condition, which reads as
    /// the deadline stored.
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when a shard's conflicts persist through every attempt
    /// (the other shards are still stamped); [`RepositoryError`] when DynamoDB cannot be
    /// reached or refuses the request.
    pub async fn stamp_pause(
        &self,
        entity_id: &str,
        resource: &str,
        until: i64,
    ) -> Result<Option<i64>, RepositoryError> {
        let first = BucketKey::new(entity_id, resource, 0);
        let Some(img) = self.read(&first).await? else {
            return Ok(None);
        };
        let e = stamp(until);
        let writes = (0..img.shards()).map(|s| {
            let key = first.with_shard(s);
            let e = &e;
            async move {
                match self.update(&key, e, false, Resend::Harmless).await? {
                    Update::Done(_) => Ok::<_, RepositoryError>(Some(until)),
                    Update::ConditionFailed(old) => Ok(old.as_ref().and_then(pause_stamp)),
                    Update::Conflict => Err(super::contended()),
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
    /// read), if any; it may lie in the past.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn read_pause(
        &self,
        entity_id: &str,
        resource: &str,
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
        Ok(out.item.as_ref().and_then(pause_stamp))
    }
}
