//! Concurrency limits stored at the four levels: written beside a level's rate limits,
//! resolved on their own (the first level that has any supplies all of them); and the
//! namespace's features item, which lets a namespace without any skip their resolution.

use std::collections::HashMap;

use dynalimit_core::Concurrency;
use dynalimit_core::concurrency::validate_set;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_format::audit::{self, AuditAction, CONCURRENCY_DETAIL, SYSTEM_AUDIT_ID};
use dynalimit_format::config::{self, ConfigLevel, Feature, Features, Slot};
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
    /// [`RepositoryError::Corrupt`] when the level's concurrency limits cannot be read; the
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
            Some(message) => Err(RepositoryError::Corrupt {
                key: dynalimit_format::item::describe_key(&found),
                attribute: None,
                message,
            }),
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
    /// [`RepositoryError::Corrupt`] when the first level that has concurrency limits, or a
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
        for (entry, level) in entries.iter().zip(levels) {
            let Some(found) = entry_result(entry)? else {
                continue;
            };
            if let Some(message) = &found.concurrency_error {
                return Err(RepositoryError::Corrupt {
                    key: level_key(&self.scope.id, &slots, level),
                    attribute: None,
                    message: message.clone(),
                });
            }
            if !found.concurrency.is_empty() {
                return Ok((found.concurrency.clone(), Some(level)));
            }
        }
        Ok((Vec::new(), None))
    }

    /// Whether the namespace may store concurrency limits: false only when its features item
    /// was read without them within the cache's time-to-live (no request is sent).
    pub fn may_store_concurrency(&self) -> bool {
        let now = self.shared.clock.epoch_millis();
        self.scope
            .config
            .features(now)
            .is_none_or(|f| f.concurrency)
    }

    /// Whether limiters report their refusals in this namespace: false only when its features
    /// item was read without a refusal alert within the cache's time-to-live (no request is
    /// sent).
    pub fn may_report_refusals(&self) -> bool {
        let now = self.shared.clock.epoch_millis();
        self.scope
            .config
            .features(now)
            .is_none_or(|f| f.refusal_alerts)
    }

    /// Whether some entity of the namespace has a refusal alert, so that limiters report the
    /// minutes they refuse in: the namespace's features item, through the cache.
    ///
    /// # Errors
    /// The classified failure of the read.
    pub async fn reports_refusals(&self) -> Result<bool, RepositoryError> {
        Ok(self.features().await?.refusal_alerts)
    }

    /// The features the namespace uses, through the cache: its features item is read at
    /// most once per configuration cache time-to-live, and at least a second apart.
    pub(crate) async fn features(&self) -> Result<Features, RepositoryError> {
        let now = self.shared.clock.epoch_millis();
        if let Some(known) = self.scope.config.features(now) {
            return Ok(known);
        }
        let key = config::features_key(&self.scope.id);
        let found = get_item(&self.shared.client, &self.shared.table, key, false).await?;
        let features = Features::of(found.as_ref());
        self.scope.config.remember_features(features, now);
        Ok(features)
    }

    /// Marks `feature` in use in the namespace's features item (before what uses it is
    /// stored, so that no reader misses it).
    pub(crate) async fn mark_feature(&self, feature: Feature) -> Result<(), RepositoryError> {
        let now = self.shared.clock.epoch_millis();
        let e = config::feature_write(&self.scope.id, feature, now);
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(config::features_key(&self.scope.id)))
            .with_expr(&e)
            .send()
            .await
            .map_err(|err| classify("UpdateItem", err))?;
        // What else is in use is known only if it was read.
        match self.scope.config.features(now) {
            Some(known) => self
                .scope
                .config
                .remember_features(known.with(feature), now),
            None => self.scope.config.forget_features(),
        }
        Ok(())
    }
}

/// The key of `level`'s item among `slots`, for an error.
fn level_key(ns: &str, slots: &[Slot], level: ConfigLevel) -> String {
    let i = match level {
        ConfigLevel::Entity => 0,
        ConfigLevel::EntityDefault => 1,
        ConfigLevel::Resource => 2,
        ConfigLevel::System => slots.len().saturating_sub(1),
    };
    slots
        .get(i)
        .map(|s| dynalimit_format::item::describe_key(&s.key(ns)))
        .unwrap_or_default()
}
