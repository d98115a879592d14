//! Alert thresholds on quotas and refusal alerts: set, list and clear them
//! ([`dynalimit_format::alert`] has the items). The aggregator evaluates them from the table's
//! stream and publishes each quota crossing once per period, and each run of refusal minutes
//! once.

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValue;
use dynalimit_core::ids;
use dynalimit_format::alert::{self, Thresholds};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::{attr, item, keys};

use crate::entity::partition;
use crate::error::classify;
use crate::page;
use crate::{Repository, RepositoryError};

impl Repository {
    /// Sets the alert thresholds of quota `limit` of `entity_id` on `resource`: percentages of
    /// the quota's period grant (`80` publishes an alert once 80 % of it is consumed). Replaces
    /// the thresholds that limit had there; the other limits' stay. Returns the thresholds as
    /// stored, ascending.
    ///
    /// Thresholds apply to quotas (calendar and session); on a limit that refills they never
    /// fire. The stack's aggregator publishes the crossings when alerts are on
    /// (`dynalimit deploy --enable-alerts`). Setting the same thresholds again is harmless, so a
    /// call whose answer was lost can simply be made again.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for a bad entity, resource or limit
    /// name, or thresholds that are not one to ten distinct percentages in `1..=100`; the
    /// classified failure of the write.
    pub async fn set_alert_thresholds(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &str,
        levels: &[u8],
    ) -> Result<Vec<u8>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        ids::validate_limit_name(limit)?;
        let levels = alert::validate_levels(levels)?;
        let attribute = format!("{}{limit}", alert::LEVELS_PREFIX);
        let value = item::s(alert::encode_levels(&levels));
        self.set_threshold(entity_id, resource, &attribute, value)
            .await?;
        Ok(levels)
    }

    /// Sets the refusal alert of `limit` of `entity_id` on `resource`: an alert is published
    /// once `limit` has refused acquires in each of `minutes` minutes in a row (1 to 60), once
    /// per such run. Replaces that limit's refusal alert there; its quota thresholds and the
    /// other limits' stay. Returns the minutes as stored.
    ///
    /// The limiter reports the minutes in which a limit refused ([`Repository::report_refusal`]);
    /// the stack's aggregator publishes when alerts are on. Setting the same value again is
    /// harmless.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad names or minutes outside
    /// `1..=60`; the classified failure of the write.
    pub async fn set_refusal_alert(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &str,
        minutes: u32,
    ) -> Result<u8, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        ids::validate_limit_name(limit)?;
        let minutes = alert::validate_refusing(minutes)?;
        // Limiters report refusals only in a namespace that has a refusal alert.
        self.mark_feature(dynalimit_format::config::Feature::RefusalAlerts)
            .await?;
        let attribute = format!("{}{limit}", alert::REFUSING_PREFIX);
        self.set_threshold(entity_id, resource, &attribute, item::n(minutes))
            .await?;
        Ok(minutes)
    }

    /// Sets one attribute of the threshold item of (`entity_id`, `resource`), with the item's
    /// identity and GSI4 keys.
    async fn set_threshold(
        &self,
        entity_id: &str,
        resource: &str,
        attribute: &str,
        value: aws_sdk_dynamodb::types::AttributeValue,
    ) -> Result<(), RepositoryError> {
        let ns = &self.scope.id;
        let mut e = Expr::default();
        e.set(attribute, value);
        for (name, value) in [
            (attr::ENTITY_ID, item::s(entity_id)),
            (attr::RESOURCE, item::s(resource)),
            (attr::GSI4PK, item::s(ns)),
            (attr::GSI4SK, item::s(keys::entity_pk(ns, entity_id))),
        ] {
            e.set(name, value);
        }
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(alert::thresholds_key(ns, entity_id, resource)))
            .with_expr(&e)
            .send()
            .await
            .map_err(|err| classify("UpdateItem", err))?;
        Ok(())
    }

    /// The alert thresholds of `entity_id` (quota percentages and refusal alerts), one entry
    /// per resource that has any, by resource. Threshold attributes another writer stored out of bounds are listed in
    /// [`Thresholds::unreadable`] and not used.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad entity id; the classified failure.
    pub async fn alert_thresholds(
        &self,
        entity_id: &str,
    ) -> Result<Vec<Thresholds>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        let ns = &self.scope.id;
        let e = partition(
            &keys::entity_pk(ns, entity_id),
            Some(keys::ALERTS_SK_PREFIX),
        );
        let found = page::all_items(self.query(None, &e).consistent_read(true)).await?;
        let mut out: Vec<Thresholds> = found
            .iter()
            .filter_map(|it| alert::thresholds_of(ns, it))
            .filter(|t| !t.levels.is_empty() || !t.refusing.is_empty() || !t.unreadable.is_empty())
            .collect();
        out.sort_by(|a, b| a.resource.cmp(&b.resource));
        Ok(out)
    }

    /// Clears the alert thresholds of `limit` (every limit when `None`) of `entity_id` on
    /// `resource`, its refusal alert included. Returns whether there were any. Crossings already published stay
    /// published; a threshold set again later fires again only in a period it has not fired in.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad names; the classified
    /// failure.
    pub async fn clear_alert_thresholds(
        &self,
        entity_id: &str,
        resource: &str,
        limit: Option<&str>,
    ) -> Result<bool, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        if let Some(limit) = limit {
            ids::validate_limit_name(limit)?;
        }
        let key = alert::thresholds_key(&self.scope.id, entity_id, resource);
        let limit_filter = limit;
        let old = match limit {
            Some(limit) => {
                let mut e = Expr::default();
                e.remove(&format!("{}{limit}", alert::LEVELS_PREFIX));
                e.remove(&format!("{}{limit}", alert::REFUSING_PREFIX));
                // Only an item that exists: a REMOVE on a missing key would create it.
                let c = e.exists(attr::PK);
                e.when(c);
                match self
                    .shared
                    .client
                    .update_item()
                    .table_name(&self.shared.table)
                    .set_key(Some(key))
                    .with_expr(&e)
                    .return_values(ReturnValue::UpdatedOld)
                    .send()
                    .await
                {
                    Ok(out) => out.attributes,
                    Err(err)
                        if matches!(
                            err.as_service_error(),
                            Some(UpdateItemError::ConditionalCheckFailedException(_))
                        ) =>
                    {
                        None
                    }
                    Err(err) => return Err(classify("UpdateItem", err)),
                }
            }
            None => {
                self.shared
                    .client
                    .delete_item()
                    .table_name(&self.shared.table)
                    .set_key(Some(key))
                    .return_values(ReturnValue::AllOld)
                    .send()
                    .await
                    .map_err(|err| classify("DeleteItem", err))?
                    .attributes
            }
        };
        Ok(old.is_some_and(|a| {
            a.keys().any(|k| {
                let limit = k
                    .strip_prefix(alert::LEVELS_PREFIX)
                    .or_else(|| k.strip_prefix(alert::REFUSING_PREFIX));
                limit.is_some_and(|l| limit_filter.is_none_or(|only| only == l))
            })
        }))
    }
}
