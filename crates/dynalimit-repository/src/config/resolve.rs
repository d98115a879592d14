//! Resolution of the limits of one (entity, resource) through the cache.

use std::sync::Arc;

use dynalimit_core::ids;
use dynalimit_format::config::{self, ConfigLevel, LimitConfig, OnUnavailable, Slot};
use dynalimit_format::item::{self, Item};

use super::ResolvedLimits;
use super::cache::{CacheStats, Entry, entry_result, to_entry, usable};
use crate::batch::{batch_get_items, get_item};
use crate::{Repository, RepositoryError};

impl Repository {
    /// Evicts every cached configuration of this namespace.
    pub async fn invalidate_config_cache(&self) {
        self.scope.config.forget_features();
        self.scope.config.clear().await;
    }

    /// A number that changes with every write through this repository (or its clones) that
    /// changes limit configuration or buckets behind the limiter's back: set, delete and
    /// disable calls at every level, entity deletion, resets and top-ups,
    /// [`Repository::invalidate_config_cache`]. Process-local caches
    /// derived from the configuration or the buckets (the limiter's rejection cache) compare
    /// it to drop what they hold. Writes by other processes do not change it.
    pub(crate) fn config_generation(&self) -> u64 {
        self.scope.config.generation()
    }

    /// Hits, misses, size and TTL of this namespace's configuration cache.
    pub async fn cache_stats(&self) -> CacheStats {
        self.scope.config.stats().await
    }

    /// The entries of `slots`, from the cache or, for every missing one, from one
    /// `BatchGetItem` (one `GetItem` per level when the batch fails).
    pub(super) async fn load_slots(
        &self,
        slots: &[Slot],
    ) -> Result<Vec<Arc<Entry>>, RepositoryError> {
        let mut out: Vec<Option<Arc<Entry>>> = Vec::with_capacity(slots.len());
        let mut missing = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let found = self.scope.config.get(slot).await;
            if found.is_none() {
                missing.push(i);
            }
            out.push(found);
        }
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let ns = &self.scope.id;
        let wanted: Vec<Item> = missing.iter().map(|&i| slots[i].key(ns)).collect();
        let items = match batch_get_items(
            &self.shared.client,
            &self.shared.table,
            wanted.clone(),
            false,
        )
        .await
        {
            Ok(items) => items,
            // A failed batch (a principal without BatchGetItem, a partial outage) falls
            // back to one GetItem per level.
            Err(batch_error) => {
                tracing::debug!(error = %batch_error, "BatchGetItem failed; reading levels one by one");
                let mut items = Vec::with_capacity(wanted.len());
                for key in wanted {
                    let client = &self.shared.client;
                    items.extend(get_item(client, &self.shared.table, key, false).await?);
                }
                items
            }
        };
        for &i in &missing {
            let key = slots[i].key(ns);
            let found = items
                .iter()
                .find(|it| item::key_of(it) == item::key_of(&key));
            let entry = Arc::new(to_entry(found));
            self.scope
                .config
                .put(slots[i].clone(), Arc::clone(&entry))
                .await;
            out[i] = Some(entry);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The system level as cached, when it is usable.
    async fn system_level(&self) -> Result<Option<LimitConfig>, RepositoryError> {
        let entries = self.load_slots(&[Slot::System]).await?;
        Ok(entries.first().and_then(|e| usable(e)).cloned())
    }

    /// The limits for `entity_id` on `resource`, from the first of entity, entity default,
    /// resource and system level that has any, through the cache.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent);
    /// [`FormatError::Unsupported`](dynalimit_format::FormatError::Unsupported) when the answering item carries a feature outside the
    /// core profile; the classified failure.
    pub async fn resolve_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<ResolvedLimits, RepositoryError> {
        let span = tracing::debug_span!(
            "dynalimit.config",
            entity_id,
            resource,
            source = tracing::field::Empty,
        );
        let resolved =
            tracing::Instrument::instrument(self.resolve_levels(entity_id, resource), span.clone())
                .await;
        if let Ok(r) = &resolved {
            span.record("source", r.source.map_or("none", ConfigLevel::as_str));
        }
        resolved
    }

    /// [`Repository::resolve_limits`], in its span.
    async fn resolve_levels(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<ResolvedLimits, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        let (levels, slots): (Vec<ConfigLevel>, Vec<Slot>) =
            config::levels(entity_id, resource).into_iter().unzip();
        let entries = self.load_slots(&slots).await?;
        let on_unavailable = entries
            .last()
            .and_then(|e| usable(e))
            .and_then(|c| c.on_unavailable);
        for (entry, level) in entries.iter().zip(levels) {
            if let Some(config) = entry_result(entry)?
                && !config.limits.is_empty()
            {
                return Ok(ResolvedLimits {
                    limits: config.limits.clone(),
                    source: Some(level),
                    on_unavailable,
                });
            }
        }
        Ok(ResolvedLimits {
            limits: Vec::new(),
            source: None,
            on_unavailable,
        })
    }

    /// `on_unavailable` of the system level (through the cache), when set.
    ///
    /// # Errors
    /// The classified failure.
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn resolve_on_unavailable(&self) -> Result<Option<OnUnavailable>, RepositoryError> {
        Ok(self.system_level().await?.and_then(|c| c.on_unavailable))
    }

    /// `audit_retention_days` of the system level (through the cache), when set.
    pub(crate) async fn system_audit_retention_days(&self) -> Result<Option<i64>, RepositoryError> {
        Ok(self
            .system_level()
            .await?
            .and_then(|c| c.audit_retention_days))
    }
}
