//! Refusal minutes: which minutes a limit refused acquires in ([`dynalimit_format::refusal`]
//! has the item). The limiter reports them; the aggregator reads them for refusal alerts
//! ([`Repository::set_refusal_alert`]).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::Client;
use dynalimit_core::ids;
use dynalimit_format::expr::WithExpr;
use dynalimit_format::refusal::{self, Of};
use dynalimit_format::{attr, item};

use crate::error::classify;
use crate::page;
use crate::{Repository, RepositoryError};

impl Repository {
    /// `limit` of `entity_id` on `resource` in this namespace, the names checked.
    fn refusal_of<'a>(
        &'a self,
        entity_id: &'a str,
        resource: &'a str,
        limit: &'a str,
    ) -> Result<Of<'a>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        ids::validate_limit_name(limit)?;
        Ok(Of {
            ns: &self.scope.id,
            entity: entity_id,
            resource,
            limit,
        })
    }

    /// Records that `limit` of `entity_id` on `resource` refused an acquire at `at_ms` (epoch
    /// ms): one `UpdateItem` on the refusal item of that minute, in the partition of the
    /// bucket's shard 0, which the acquire-only policies let a service write. Sending it
    /// again is harmless (the minute's count `n` may count it twice; nothing depends on the
    /// count).
    ///
    /// The limiter calls it at most once a minute per (entity, resource, limit), in the
    /// background; a service has no need to.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad names; the classified
    /// failure of the write.
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn report_refusal(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &str,
        at_ms: i64,
    ) -> Result<(), RepositoryError> {
        let of = self.refusal_of(entity_id, resource, limit)?;
        let minute = refusal::minute_of(at_ms);
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(of.refused_key(minute)))
            .with_expr(&refusal::report(of, minute))
            .send()
            .await
            .map_err(|err| classify("UpdateItem", err))?;
        Ok(())
    }

    /// The epoch minutes in `from..=to` in which `limit` of `entity_id` on `resource` was
    /// reported refusing, read strongly consistent.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad names; the classified failure.
    pub async fn refusal_minutes(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &str,
        from: i64,
        to: i64,
    ) -> Result<BTreeSet<i64>, RepositoryError> {
        let of = self.refusal_of(entity_id, resource, limit)?;
        refusal_minutes(&self.shared.client, &self.shared.table, of, from, to).await
    }
}

/// The epoch minutes in `from..=to` in which `of` was reported refusing: one strongly
/// consistent `Query` of the refusal items' sort keys (the aggregator's read).
///
/// # Errors
/// The classified failure of the query.
pub async fn refusal_minutes(
    client: &Client,
    table: &str,
    of: Of<'_>,
    from: i64,
    to: i64,
) -> Result<BTreeSet<i64>, RepositoryError> {
    if to < from {
        return Ok(BTreeSet::new());
    }
    let mut e = refusal::minutes_between(of, from, to);
    let projection = e.projection(&[attr::SK]);
    let found = page::all_items(
        page::query(client, table, None, &e)
            .projection_expression(projection)
            .consistent_read(true),
    )
    .await?;
    Ok(found
        .iter()
        .filter_map(|it| item::get_s(it, attr::SK))
        .filter_map(refusal::parse_refused_sk)
        .filter(|(limit, _)| *limit == of.limit)
        .map(|(_, minute)| minute)
        .collect())
}
