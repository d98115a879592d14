//! Concurrency limits stored at the four levels: written beside a level's rate limits,
//! resolved on their own (the first level that has any supplies all of them), skipped in a
//! namespace whose features item says it stores none (`features.rs`).

use std::collections::HashMap;

use dynalimit_core::Concurrency;
use dynalimit_core::concurrency::validate_set;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_format::FormatError;
use dynalimit_format::audit::{self, AuditAction, CONCURRENCY_DETAIL, SYSTEM_AUDIT_ID};
use dynalimit_format::config::{self, ConfigLevel, Feature, Slot};
use dynalimit_format::expr::WithExpr;

use super::access::is_condition_failed;
use super::cache::entry_result;
use crate::batch::get_item;
use crate::error::classify;
use crate::{Repository, RepositoryError};

/// The level `entity_id` and `resource` name: both for one entity on one resource, the
/// entity alone for its every resource (`_default_`), the resource alone for every entity on
/// it, neither for the system level.
fn level_of(entity_id: Option<&str>, resource: Option<&str>) -> Result<Slot, RepositoryError> {
    if let Some(e) = entity_id {
        ids::validate_entity_id(e)?;
    }
    if let Some(r) = resource {
        ids::validate_resource(r)?;
    }
    Ok(match (entity_id, resource) {
        (Some(e), r) => Slot::Entity(e.into(), r.unwrap_or(DEFAULT_RESOURCE).into()),
        (None, Some(r)) => Slot::Resource(r.into()),
        (None, None) => Slot::System,
    })
}

impl Repository {
    /// Replaces the concurrency limits of one level: `entity_id` and `resource` for one
    /// entity on one resource, `entity_id` alone for the entity on every resource, `resource`
    /// alone for every entity on it, neither for the whole namespace. An empty `limits`
    /// clears them. The level's rate limits and flags are left as they are, and the rate
    /// limit writers ([`Repository::set_limits`] and the others) keep these.
    ///
    /// An acquire resolves its concurrency limits like its rate limits, through the
    /// configuration cache: the first of entity, entity default, resource and system level
    /// that has any supplies all of them. It takes a slot of each, beside its debits, and a
    /// cascading acquire takes its parent's too. Other processes see a change within their
    /// cache's time-to-live.
    ///
    /// ```no_run
    /// # async fn run(repo: dynalimit::Repository) -> Result<(), dynalimit::RepositoryError> {
    /// use dynalimit::Concurrency;
    /// // Every API key: at most 5 streams of gpt-4 at once.
    /// repo.set_concurrency_limits(None, Some("gpt-4"), &[Concurrency::new("streams", 5)?]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A lost answer is harmless: the write sets absolute values, and sending it again leaves
    /// the same item.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad ids, more than
    /// [`MAX_CONCURRENCY_LIMITS`](dynalimit_core::concurrency::MAX_CONCURRENCY_LIMITS) limits
    /// or a name given twice; the classified failure.
    pub async fn set_concurrency_limits(
        &self,
        entity_id: Option<&str>,
        resource: Option<&str>,
        limits: &[Concurrency],
    ) -> Result<(), RepositoryError> {
        let slot = level_of(entity_id, resource)?;
        validate_set(limits)?;
        let ns = &self.scope.id;
        let key = slot.key(ns);
        let stored = get_item(&self.shared.client, &self.shared.table, key.clone(), true).await?;
        let mut sorted = limits.to_vec();
        sorted.sort_by(|a, b| a.name().cmp(b.name()));
        if !sorted.is_empty() {
            self.mark_feature(Feature::Concurrency).await?;
        }
        let Some(e) = config::concurrency_write(ns, &slot, stored.as_ref(), &sorted) else {
            return Ok(());
        };
        let update = || {
            self.shared
                .client
                .update_item()
                .table_name(&self.shared.table)
                .set_key(Some(key.clone()))
                .with_expr(&e)
        };
        match &slot {
            // A new entity level is counted in the registry of entity configs, as one with
            // rate limits is.
            Slot::Entity(_, r) if stored.is_none() => {
                let mut create = e.clone();
                let c = create.not_exists(dynalimit_format::attr::PK);
                create.when(c);
                let level = aws_sdk_dynamodb::types::Update::builder()
                    .table_name(&self.shared.table)
                    .set_key(Some(key.clone()))
                    .with_expr(&create)
                    .build()
                    .map_err(super::write::build_err)?;
                let create = aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(level)
                    .build();
                if !self.create_counted_level(create, r).await? {
                    update()
                        .send()
                        .await
                        .map_err(|err| classify("UpdateItem", err))?;
                }
            }
            _ => match update().send().await {
                // A clear of a level deleted meanwhile: nothing left to clear.
                Err(err) if sorted.is_empty() && is_condition_failed(&err) => {}
                other => {
                    other.map_err(|err| classify("UpdateItem", err))?;
                }
            },
        }
        self.scope.config.evict(&slot).await;
        let (audit_id, audit_resource) = match &slot {
            Slot::Entity(e, r) => (e.clone(), r.as_str()),
            Slot::Resource(r) => (audit::resource_audit_id(r), r.as_str()),
            Slot::System => (SYSTEM_AUDIT_ID.to_owned(), DEFAULT_RESOURCE),
        };
        self.audit(
            &audit_id,
            AuditAction::LimitsSet,
            Some(audit_resource),
            HashMap::from([(
                CONCURRENCY_DETAIL.to_string(),
                audit::concurrency_details(&sorted),
            )]),
        )
        .await?;
        Ok(())
    }

    /// The concurrency limits stored at one level (addressed as in
    /// [`Repository::set_concurrency_limits`]), strongly consistent, not cached.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent);
    /// [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt) when the level's concurrency limits cannot be read; the
    /// classified failure.
    pub async fn concurrency_limits(
        &self,
        entity_id: Option<&str>,
        resource: Option<&str>,
    ) -> Result<Vec<Concurrency>, RepositoryError> {
        let slot = level_of(entity_id, resource)?;
        let key = slot.key(&self.scope.id);
        let Some(found) = get_item(&self.shared.client, &self.shared.table, key, true).await?
        else {
            return Ok(Vec::new());
        };
        let level = config::decode(&found)?;
        match level.concurrency_error {
            Some(message) => Err(RepositoryError::Format(FormatError::Corrupt {
                key: dynalimit_format::item::describe_key(&found),
                attribute: None,
                message,
            })),
            None => Ok(level.concurrency),
        }
    }

    /// The concurrency limits that apply to `entity_id` on `resource`, with the level that
    /// supplied them: those of the first level that has any, through the configuration
    /// cache. Nothing more is read while the namespace has never stored one: its features
    /// item says so, read at most once per cache time-to-live and at least a second apart.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent);
    /// [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt) when the first level that has concurrency limits, or a
    /// level before it, cannot be read; the classified failure.
    pub async fn resolve_concurrency(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<(Vec<Concurrency>, Option<ConfigLevel>), RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        if !self.features().await?.concurrency {
            return Ok((Vec::new(), None));
        }
        let (levels, slots): (Vec<ConfigLevel>, Vec<Slot>) =
            config::levels(entity_id, resource).into_iter().unzip();
        let entries = self.load_slots(&slots).await?;
        for ((entry, level), slot) in entries.iter().zip(levels).zip(&slots) {
            let Some(found) = entry_result(entry)? else {
                continue;
            };
            if let Some(message) = &found.concurrency_error {
                return Err(RepositoryError::Format(FormatError::Corrupt {
                    key: dynalimit_format::item::describe_key(&slot.key(&self.scope.id)),
                    attribute: None,
                    message: message.clone(),
                }));
            }
            if !found.concurrency.is_empty() {
                return Ok((found.concurrency.clone(), Some(level)));
            }
        }
        Ok((Vec::new(), None))
    }
}
