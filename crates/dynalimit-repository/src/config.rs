//! Limit configuration at four levels and its cache (reference §1.4.5, §1.4.6, §4).
//!
//! | level | key | answers for |
//! |---|---|---|
//! | entity | `{ns}/ENTITY#{e}` / `#CONFIG#{r}` | one entity on one resource |
//! | entity default | `{ns}/ENTITY#{e}` / `#CONFIG#_default_` | one entity on every resource |
//! | resource | `{ns}/RESOURCE#{r}` / `#CONFIG` | every entity on one resource |
//! | system | `{ns}/SYSTEM#` / `#CONFIG` | everything; also carries `on_unavailable` |
//!
//! The first level that has at least one limit supplies all of them (override, not merge).
//! Resolution goes through a per-namespace cache (default TTL 60 s; zero disables it) that also
//! remembers misses; every missing level is fetched in one `BatchGetItem`. Writes made through
//! the repository evict what they change; other processes see changes after at most the TTL.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem, Update,
};
use base64::Engine;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_core::{CoreError, Limit};

use crate::audit::{self, AuditAction, SYSTEM_AUDIT_ID};
use crate::error::classify;
use crate::item::{self, Item};
use crate::{Repository, RepositoryError, keys};

/// The level a configuration lives at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigLevel {
    /// One entity on one resource.
    Entity,
    /// One entity on every resource (`_default_`).
    EntityDefault,
    /// Every entity on one resource.
    Resource,
    /// The namespace-wide default.
    System,
}

impl ConfigLevel {
    /// The label the reference uses (`entity`, `entity_default`, `resource`, `system`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigLevel::Entity => "entity",
            ConfigLevel::EntityDefault => "entity_default",
            ConfigLevel::Resource => "resource",
            ConfigLevel::System => "system",
        }
    }
}

/// What an acquire does when DynamoDB cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnUnavailable {
    /// Admit without limiting (a no-op lease), and log it.
    Allow,
    /// Refuse with an unavailable error.
    Block,
}

impl OnUnavailable {
    /// `allow` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnavailable::Allow => "allow",
            OnUnavailable::Block => "block",
        }
    }

    /// Parses `allow` / `block`.
    pub fn parse(text: &str) -> Option<OnUnavailable> {
        match text {
            "allow" => Some(OnUnavailable::Allow),
            "block" => Some(OnUnavailable::Block),
            _ => None,
        }
    }
}

/// The `disabled` flag of a config item (absent = inherit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisabledFlag {
    /// `true`: access refused.
    Disabled,
    /// `false`: explicitly enforced (overrides a disabled level below).
    Enabled,
    /// `"bypass"`: limits not enforced (written by zae-limiter 0.17; dynalimit enforces them).
    Bypass,
}

/// One level's stored configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LimitConfig {
    /// The limits, sorted by name.
    pub limits: Vec<Limit>,
    /// The `disabled` flag, when set.
    pub disabled: Option<DisabledFlag>,
    /// The cascade policy, when set (not on system config).
    pub cascade: Option<bool>,
    /// System level only: behaviour when DynamoDB is unavailable.
    pub on_unavailable: Option<OnUnavailable>,
    /// System level only: audit retention in days.
    pub audit_retention_days: Option<i64>,
}

/// The limits that apply to one (entity, resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedLimits {
    /// The limits of the first level that has any; empty when no level has.
    pub limits: Vec<Limit>,
    /// Which level supplied them.
    pub source: Option<ConfigLevel>,
    /// `on_unavailable` of the system level, when set.
    pub on_unavailable: Option<OnUnavailable>,
}

/// Counters of the configuration cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Slot look-ups answered from the cache.
    pub hits: u64,
    /// Slot look-ups that had to read DynamoDB.
    pub misses: u64,
    /// Slots currently cached (found and not found).
    pub size: u64,
    /// The time-to-live.
    pub ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    System,
    Resource(String),
    Entity(String, String),
}

/// Why a stored level cannot be used, kept in the cache (errors are not `Clone`).
#[derive(Debug)]
enum Unusable {
    /// Replayed as [`RepositoryError::Unsupported`] (also corrupt items).
    Unsupported { key: String, feature: String },
    /// Replayed as [`RepositoryError::ReservedLimitName`].
    ReservedName { key: String, name: String },
}

/// A parsed level: `Ok(None)` = no item; `Err` = an item dynalimit cannot use.
type Entry = Result<Option<LimitConfig>, Arc<Unusable>>;

/// The per-namespace limit configuration cache.
pub(crate) struct ConfigCache {
    ttl: Duration,
    cache: Option<moka::future::Cache<Slot, Arc<Entry>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for ConfigCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigCache")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl ConfigCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        let cache = (!ttl.is_zero()).then(|| {
            moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(ttl)
                .build()
        });
        ConfigCache {
            ttl,
            cache,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    async fn get(&self, slot: &Slot) -> Option<Arc<Entry>> {
        let found = match &self.cache {
            Some(c) => c.get(slot).await,
            None => None,
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    async fn put(&self, slot: Slot, entry: Arc<Entry>) {
        if let Some(c) = &self.cache {
            c.insert(slot, entry).await;
        }
    }

    async fn evict(&self, slot: &Slot) {
        if let Some(c) = &self.cache {
            c.invalidate(slot).await;
        }
    }
}

fn slot_key(ns: &str, slot: &Slot) -> Item {
    match slot {
        Slot::System => item::key(keys::system_pk(ns), keys::CONFIG_SK),
        Slot::Resource(r) => item::key(keys::resource_pk(ns, r), keys::CONFIG_SK),
        Slot::Entity(e, r) => item::key(keys::entity_pk(ns, e), keys::entity_config_sk(r)),
    }
}

fn whole(found: &Item, attr: &str) -> Result<i64, RepositoryError> {
    item::get_i64(found, attr).ok_or_else(|| {
        RepositoryError::corrupt(
            item::describe_key(found),
            format!("{attr} is not a whole number"),
        )
    })
}

/// Parses a config item by the reading rules of reference §1.4.5.
///
/// # Errors
/// [`RepositoryError::Corrupt`] for a corrupt item, [`RepositoryError::Unsupported`] for
/// features outside dynalimit's core profile (session quotas, calendar quotas, schedules).
pub fn parse_config_item(found: &Item) -> Result<LimitConfig, RepositoryError> {
    let key = item::describe_key(found);
    let unsupported = |feature: String| RepositoryError::Unsupported {
        key: key.clone(),
        feature,
    };
    let mut plain = Vec::new();
    let mut windowed = Vec::new();
    for attr in found.keys() {
        if let Some(middle) = attr.strip_suffix("_cp") {
            if let Some(name) = middle.strip_prefix("l_") {
                plain.push(name.to_string());
            } else if let Some(name) = middle.strip_prefix("w_") {
                windowed.push(name.to_string());
            }
        }
    }
    if let Some(name) = plain
        .iter()
        .chain(&windowed)
        .find(|n| ids::reserved_limit_name(n).is_some())
    {
        return Err(RepositoryError::ReservedLimitName {
            key,
            name: name.clone(),
        });
    }
    if let Some(both) = plain.iter().find(|n| windowed.contains(n)) {
        return Err(RepositoryError::corrupt(
            key,
            format!("limit {both:?} is stored under both l_ and w_"),
        ));
    }
    if let Some(w) = windowed.first() {
        if !found.contains_key(&format!("w_{w}_rsa")) {
            return Err(RepositoryError::corrupt(
                key,
                format!("windowed limit {w:?} has no w_{w}_rsa"),
            ));
        }
        return Err(unsupported(format!(
            "session-window limit {w:?} (w_ prefix)"
        )));
    }
    if found.contains_key("sched_tz") {
        return Err(unsupported("a schedule time zone (sched_tz)".into()));
    }
    let mut limits = Vec::with_capacity(plain.len());
    for name in plain {
        for field in ["sched", "rsched"] {
            if found.contains_key(&format!("l_{name}_{field}")) {
                return Err(unsupported(format!("a {field} on limit {name:?}")));
            }
        }
        let cp = whole(found, &format!("l_{name}_cp"))?;
        let ra = whole(found, &format!("l_{name}_ra"))?;
        let rp = whole(found, &format!("l_{name}_rp"))?;
        if ra == 0 {
            return Err(unsupported(format!(
                "quota limit {name:?} (refill amount 0)"
            )));
        }
        let limit = Limit::custom(name, cp, ra, rp);
        limit
            .validate()
            .map_err(|e| RepositoryError::corrupt(key.clone(), e.to_string()))?;
        limits.push(limit);
    }
    limits.sort_by(|a, b| a.name().cmp(b.name()));
    let disabled = match found.get("disabled") {
        Some(AttributeValue::Bool(true)) => Some(DisabledFlag::Disabled),
        Some(AttributeValue::Bool(false)) => Some(DisabledFlag::Enabled),
        Some(AttributeValue::S(s)) if s == "bypass" => Some(DisabledFlag::Bypass),
        Some(AttributeValue::S(_)) => Some(DisabledFlag::Enabled),
        _ => None,
    };
    Ok(LimitConfig {
        limits,
        disabled,
        cascade: item::get_bool(found, "cascade"),
        on_unavailable: item::get_s(found, "on_unavailable").and_then(OnUnavailable::parse),
        audit_retention_days: item::get_i64(found, "audit_retention_days"),
    })
}

fn to_entry(found: Option<&Item>) -> Entry {
    let unusable = match found.map(parse_config_item).transpose() {
        Ok(c) => return Ok(c),
        Err(RepositoryError::Unsupported { key, feature }) => {
            Unusable::Unsupported { key, feature }
        }
        Err(RepositoryError::Corrupt { key, message }) => Unusable::Unsupported {
            key,
            feature: format!("corrupt item: {message}"),
        },
        Err(RepositoryError::ReservedLimitName { key, name }) => {
            Unusable::ReservedName { key, name }
        }
        Err(other) => Unusable::Unsupported {
            key: String::new(),
            feature: other.to_string(),
        },
    };
    Err(Arc::new(unusable))
}

fn entry_result(entry: &Entry) -> Result<Option<&LimitConfig>, RepositoryError> {
    match entry {
        Ok(c) => Ok(c.as_ref()),
        Err(problem) => Err(match problem.as_ref() {
            Unusable::Unsupported { key, feature } => RepositoryError::Unsupported {
                key: key.clone(),
                feature: feature.clone(),
            },
            Unusable::ReservedName { key, name } => RepositoryError::ReservedLimitName {
                key: key.clone(),
                name: name.clone(),
            },
        }),
    }
}

fn validate_limits(limits: &[Limit]) -> Result<(), RepositoryError> {
    if limits.is_empty() {
        return Err(
            CoreError::invalid_value("limits", "[]", "at least one limit is required").into(),
        );
    }
    let mut names: Vec<&str> = Vec::with_capacity(limits.len());
    for l in limits {
        l.validate()?;
        if names.contains(&l.name()) {
            return Err(CoreError::invalid_identifier(
                "limit name",
                l.name(),
                "appears twice in one configuration",
            )
            .into());
        }
        names.push(l.name());
    }
    Ok(())
}

fn write_limits(it: &mut Item, limits: &[Limit]) {
    for l in limits {
        let n = l.name();
        it.insert(format!("l_{n}_cp"), item::n(l.capacity()));
        it.insert(format!("l_{n}_ra"), item::n(l.refill_amount()));
        it.insert(format!("l_{n}_rp"), item::n(l.refill_period_seconds()));
    }
}

fn build_err(e: impl std::fmt::Display) -> RepositoryError {
    RepositoryError::Rejected {
        operation: "TransactWriteItems",
        code: "Build".into(),
        message: e.to_string(),
    }
}

const BATCH_GET_RETRIES: u32 = 3;

/// Reads `keys` (at most 100) from `table` with `BatchGetItem`, eventually consistent,
/// retrying unprocessed keys three times.
///
/// # Errors
/// The classified failure of a request, or [`RepositoryError::Unavailable`] when keys are
/// still unprocessed after the retries.
pub(crate) async fn batch_get_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: Vec<Item>,
) -> Result<Vec<Item>, RepositoryError> {
    let mut found = Vec::new();
    let mut pending = keys;
    let mut attempt = 0;
    while !pending.is_empty() {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(std::mem::take(&mut pending)))
            .build()
            .map_err(build_err)?;
        let out = client
            .batch_get_item()
            .request_items(table, request)
            .send()
            .await
            .map_err(|e| classify("BatchGetItem", e))?;
        if let Some(mut responses) = out.responses {
            found.extend(responses.remove(table).unwrap_or_default());
        }
        pending = out
            .unprocessed_keys
            .and_then(|mut u| u.remove(table))
            .map(|k| k.keys)
            .unwrap_or_default();
        if pending.is_empty() {
            break;
        }
        attempt += 1;
        if attempt > BATCH_GET_RETRIES {
            return Err(RepositoryError::Unavailable {
                operation: "BatchGetItem",
                message: format!("{} keys unprocessed after retries", pending.len()),
            });
        }
        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
    }
    Ok(found)
}

impl Repository {
    /// Evicts every cached configuration of this namespace.
    pub async fn invalidate_config_cache(&self) {
        if let Some(c) = &self.scope.config.cache {
            c.invalidate_all();
            c.run_pending_tasks().await;
        }
    }

    /// Hits, misses, size and TTL of this namespace's configuration cache.
    pub async fn cache_stats(&self) -> CacheStats {
        let cfg = &self.scope.config;
        let size = match &cfg.cache {
            Some(c) => {
                c.run_pending_tasks().await;
                c.entry_count()
            }
            None => 0,
        };
        CacheStats {
            hits: cfg.hits.load(Ordering::Relaxed),
            misses: cfg.misses.load(Ordering::Relaxed),
            size,
            ttl: cfg.ttl,
        }
    }

    async fn load_slots(&self, slots: &[Slot]) -> Result<Vec<Arc<Entry>>, RepositoryError> {
        let mut out: Vec<Option<Arc<Entry>>> = Vec::with_capacity(slots.len());
        let mut missing = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let found = self.scope.config.get(slot).await;
            if found.is_none() {
                missing.push(i);
            }
            out.push(found);
        }
        if !missing.is_empty() {
            let ns = &self.scope.id;
            let wanted: Vec<Item> = missing.iter().map(|&i| slot_key(ns, &slots[i])).collect();
            let items = match batch_get_items(
                &self.shared.client,
                &self.shared.table,
                wanted.clone(),
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
                        let out = self
                            .shared
                            .client
                            .get_item()
                            .table_name(&self.shared.table)
                            .set_key(Some(key))
                            .send()
                            .await
                            .map_err(|e| classify("GetItem", e))?;
                        items.extend(out.item);
                    }
                    items
                }
            };
            for &i in &missing {
                let key = slot_key(ns, &slots[i]);
                let found = items
                    .iter()
                    .find(|it| it.get("PK") == key.get("PK") && it.get("SK") == key.get("SK"));
                let entry = Arc::new(to_entry(found));
                self.scope
                    .config
                    .put(slots[i].clone(), Arc::clone(&entry))
                    .await;
                out[i] = Some(entry);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The limits for `entity_id` on `resource`, from the first of entity, entity default,
    /// resource and system level that has any, through the cache.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent);
    /// [`RepositoryError::Unsupported`] when the answering item carries a feature outside the
    /// core profile; the classified failure.
    pub async fn resolve_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<ResolvedLimits, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        let mut slots = vec![Slot::Entity(entity_id.into(), resource.into())];
        let mut levels = vec![ConfigLevel::Entity];
        if resource != DEFAULT_RESOURCE {
            slots.push(Slot::Entity(entity_id.into(), DEFAULT_RESOURCE.into()));
            levels.push(ConfigLevel::EntityDefault);
            slots.push(Slot::Resource(resource.into()));
            levels.push(ConfigLevel::Resource);
        }
        slots.push(Slot::System);
        levels.push(ConfigLevel::System);
        let entries = self.load_slots(&slots).await?;
        let on_unavailable = entries
            .last()
            .and_then(|e| e.as_ref().as_ref().ok().cloned().flatten())
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
    pub async fn resolve_on_unavailable(&self) -> Result<Option<OnUnavailable>, RepositoryError> {
        let entries = self.load_slots(&[Slot::System]).await?;
        Ok(entries
            .first()
            .and_then(|e| e.as_ref().as_ref().ok().cloned().flatten())
            .and_then(|c| c.on_unavailable))
    }

    pub(crate) async fn system_audit_retention_days(&self) -> Result<Option<i64>, RepositoryError> {
        let entries = self.load_slots(&[Slot::System]).await?;
        Ok(entries
            .first()
            .and_then(|e| e.as_ref().as_ref().ok().cloned().flatten())
            .and_then(|c| c.audit_retention_days))
    }

    async fn read_level(&self, slot: &Slot) -> Result<Option<Item>, RepositoryError> {
        let out = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(slot_key(&self.scope.id, slot)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        Ok(out.item)
    }

    async fn get_level(&self, slot: &Slot) -> Result<Option<LimitConfig>, RepositoryError> {
        self.read_level(slot)
            .await?
            .as_ref()
            .map(parse_config_item)
            .transpose()
    }

    /// Builds the full-replace item of a level, carrying `disabled` and `cascade` over from
    /// what is stored.
    async fn level_item(
        &self,
        slot: &Slot,
        limits: &[Limit],
    ) -> Result<(Item, Option<Item>), RepositoryError> {
        let stored = self.read_level(slot).await?;
        let ns = &self.scope.id;
        let mut it = slot_key(ns, slot);
        let pk = item::get_s(&it, "PK").unwrap_or_default().to_string();
        it.insert("config_version".into(), item::n(1));
        it.insert("GSI4PK".into(), item::s(ns));
        it.insert("GSI4SK".into(), item::s(pk));
        match slot {
            Slot::Entity(e, r) => {
                it.insert("entity_id".into(), item::s(e));
                it.insert("resource".into(), item::s(r));
                it.insert("GSI3PK".into(), item::s(keys::entity_config_gsi3pk(ns, r)));
                it.insert("GSI3SK".into(), item::s(e));
            }
            Slot::Resource(r) => {
                it.insert("resource".into(), item::s(r));
            }
            Slot::System => {}
        }
        if !matches!(slot, Slot::System)
            && let Some(old) = &stored
        {
            for flag in ["disabled", "cascade"] {
                if let Some(v) = old.get(flag) {
                    it.insert(flag.into(), v.clone());
                }
            }
        }
        write_limits(&mut it, limits);
        Ok((it, stored))
    }

    async fn put_item(&self, it: Item) -> Result<(), RepositoryError> {
        self.shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(it))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("PutItem", e))
    }

    /// Sets the limits of `entity_id` on `resource` (`_default_` = every resource): a full
    /// replace of that level (stored `disabled`/`cascade` flags are kept), the registry of
    /// resources with entity configs, an audit event, cache eviction, and the new parameters
    /// stamped on every existing bucket of the entity for that resource.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad ids or limits;
    /// [`RepositoryError::FanoutIncomplete`] when the config was written but some buckets were
    /// not stamped (rerun to finish); the classified failure.
    pub async fn set_limits(
        &self,
        entity_id: &str,
        resource: &str,
        limits: &[Limit],
    ) -> Result<(), RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        validate_limits(limits)?;
        let slot = Slot::Entity(entity_id.into(), resource.into());
        let (it, stored) = self.level_item(&slot, limits).await?;
        if stored.is_some() {
            self.put_item(it).await?;
        } else {
            let put = Put::builder()
                .table_name(&self.shared.table)
                .set_item(Some(it.clone()))
                .condition_expression("attribute_not_exists(PK)")
                .build()
                .map_err(build_err)?;
            let count = Update::builder()
                .table_name(&self.shared.table)
                .set_key(Some(item::key(
                    keys::system_pk(&self.scope.id),
                    keys::ENTITY_CONFIG_RESOURCES_SK,
                )))
                .update_expression(
                    "ADD #r :one SET GSI4PK = if_not_exists(GSI4PK, :ns), \
                     GSI4SK = if_not_exists(GSI4SK, :own)",
                )
                .expression_attribute_names("#r", resource)
                .expression_attribute_values(":one", item::n(1))
                .expression_attribute_values(":ns", item::s(&self.scope.id))
                .expression_attribute_values(":own", item::s(keys::system_pk(&self.scope.id)))
                .build()
                .map_err(build_err)?;
            let result = self
                .shared
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(put).build())
                .transact_items(TransactWriteItem::builder().update(count).build())
                .send()
                .await;
            if let Err(e) = result {
                if e.as_service_error()
                    .is_some_and(|s| s.is_transaction_canceled_exception())
                {
                    // Created meanwhile by someone else: replace it, the count is theirs.
                    self.put_item(it).await?;
                } else {
                    return Err(classify("TransactWriteItems", e));
                }
            }
        }
        self.scope.config.evict(&slot).await;
        self.audit(
            entity_id,
            AuditAction::LimitsSet,
            Some(resource),
            HashMap::from([("limits".to_string(), audit::limits_details(limits))]),
        )
        .await?;
        self.stamp_entity_buckets(entity_id, resource).await
    }

    /// The limits stored at the entity level for `entity_id` on `resource` (strongly
    /// consistent, not cached).
    ///
    /// # Errors
    /// As [`Repository::resolve_limits`].
    pub async fn get_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<Option<LimitConfig>, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        self.get_level(&Slot::Entity(entity_id.into(), resource.into()))
            .await
    }

    /// Deletes the entity-level limits of `entity_id` on `resource`; returns false when there
    /// were none. Existing buckets are stamped with the limits that now apply.
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn delete_limits(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<bool, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_config_resource(resource)?;
        let slot = Slot::Entity(entity_id.into(), resource.into());
        let ns = &self.scope.id;
        let delete = Delete::builder()
            .table_name(&self.shared.table)
            .set_key(Some(slot_key(ns, &slot)))
            .condition_expression("attribute_exists(PK)")
            .build()
            .map_err(build_err)?;
        let registry_key = item::key(keys::system_pk(ns), keys::ENTITY_CONFIG_RESOURCES_SK);
        let count = Update::builder()
            .table_name(&self.shared.table)
            .set_key(Some(registry_key.clone()))
            .update_expression("ADD #r :minus")
            .expression_attribute_names("#r", resource)
            .expression_attribute_values(":minus", item::n(-1))
            .build()
            .map_err(build_err)?;
        let result = self
            .shared
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().delete(delete).build())
            .transact_items(TransactWriteItem::builder().update(count).build())
            .send()
            .await;
        if let Err(e) = result {
            if e.as_service_error()
                .is_some_and(|s| s.is_transaction_canceled_exception())
            {
                self.scope.config.evict(&slot).await;
                return Ok(false);
            }
            return Err(classify("TransactWriteItems", e));
        }
        let cleanup = self
            .shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(registry_key))
            .update_expression("REMOVE #r")
            .condition_expression("#r <= :zero")
            .expression_attribute_names("#r", resource)
            .expression_attribute_values(":zero", item::n(0))
            .send()
            .await;
        if let Err(e) = cleanup
            && !e
                .as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception())
        {
            return Err(classify("UpdateItem", e));
        }
        self.scope.config.evict(&slot).await;
        self.audit(
            entity_id,
            AuditAction::LimitsDeleted,
            Some(resource),
            HashMap::new(),
        )
        .await?;
        self.stamp_entity_buckets(entity_id, resource).await?;
        Ok(true)
    }

    /// Stamps the limits that now apply on every bucket of `entity_id` for `resource` (every
    /// resource for `_default_`): `SET b_{l}_cp/ra/rp, vu = 0` (the next acquire materialises
    /// the new ceiling) and `REMOVE ttl` when the limits come from the entity level.
    async fn stamp_entity_buckets(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<(), RepositoryError> {
        let ns = &self.scope.id;
        let prefix = if resource == DEFAULT_RESOURCE {
            "BUCKET#".to_string()
        } else {
            format!("BUCKET#{resource}#")
        };
        let buckets = self
            .query_keys(
                Some("GSI3"),
                "GSI3PK = :pk AND begins_with(GSI3SK, :b)",
                &[(":pk", keys::entity_pk(ns, entity_id)), (":b", prefix)],
            )
            .await?;
        let mut stamped = 0;
        for key in buckets {
            let Some(parsed) = item::get_s(&key, "PK").and_then(keys::parse_bucket_pk) else {
                continue;
            };
            let resolved = self.resolve_limits(entity_id, &parsed.resource).await?;
            if resolved.limits.is_empty() {
                continue;
            }
            let mut set = vec!["vu = :zero".to_string()];
            let mut update = self
                .shared
                .client
                .update_item()
                .table_name(&self.shared.table)
                .set_key(Some(key.clone()))
                .condition_expression("attribute_exists(PK)")
                .expression_attribute_values(":zero", item::n(0));
            for (i, l) in resolved.limits.iter().enumerate() {
                for (field, value) in [
                    ("cp", l.capacity_milli()),
                    ("ra", l.refill_amount_milli()),
                    ("rp", l.refill_period_millis()),
                ] {
                    set.push(format!("#{field}{i} = :{field}{i}"));
                    update = update
                        .expression_attribute_names(
                            format!("#{field}{i}"),
                            format!("b_{}_{field}", l.name()),
                        )
                        .expression_attribute_values(format!(":{field}{i}"), item::n(value));
                }
            }
            let mut expression = format!("SET {}", set.join(", "));
            if matches!(
                resolved.source,
                Some(ConfigLevel::Entity | ConfigLevel::EntityDefault)
            ) {
                expression.push_str(" REMOVE #ttl");
                update = update.expression_attribute_names("#ttl", "ttl");
            }
            match update.update_expression(expression).send().await {
                Ok(_) => stamped += 1,
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_conditional_check_failed_exception()) => {}
                Err(e) => {
                    return Err(RepositoryError::FanoutIncomplete {
                        stamped,
                        message: classify("UpdateItem", e).to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Sets the default limits of `resource` for every entity (full replace; stored flags kept)
    /// and registers the resource. Existing buckets pick the change up when their TTL renews
    /// them.
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn set_resource_defaults(
        &self,
        resource: &str,
        limits: &[Limit],
    ) -> Result<(), RepositoryError> {
        ids::validate_resource(resource)?;
        validate_limits(limits)?;
        let slot = Slot::Resource(resource.into());
        let (it, _) = self.level_item(&slot, limits).await?;
        self.put_item(it).await?;
        self.update_resources_registry("ADD", resource).await?;
        self.scope.config.evict(&slot).await;
        self.audit(
            &audit::resource_audit_id(resource),
            AuditAction::LimitsSet,
            Some(resource),
            HashMap::from([("limits".to_string(), audit::limits_details(limits))]),
        )
        .await?;
        Ok(())
    }

    async fn update_resources_registry(
        &self,
        verb: &str,
        resource: &str,
    ) -> Result<(), RepositoryError> {
        let mut expression = format!("{verb} resources :r");
        if verb == "ADD" {
            expression.push_str(
                " SET GSI4PK = if_not_exists(GSI4PK, :ns), GSI4SK = if_not_exists(GSI4SK, :own)",
            );
        }
        let mut update = self
            .shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(
                keys::system_pk(&self.scope.id),
                keys::RESOURCES_SK,
            )))
            .update_expression(expression)
            .expression_attribute_values(":r", AttributeValue::Ss(vec![resource.to_string()]));
        if verb == "ADD" {
            update = update
                .expression_attribute_values(":ns", item::s(&self.scope.id))
                .expression_attribute_values(":own", item::s(keys::system_pk(&self.scope.id)));
        }
        update
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("UpdateItem", e))
    }

    /// The default limits stored for `resource`.
    ///
    /// # Errors
    /// As [`Repository::get_limits`].
    pub async fn get_resource_defaults(
        &self,
        resource: &str,
    ) -> Result<Option<LimitConfig>, RepositoryError> {
        ids::validate_resource(resource)?;
        self.get_level(&Slot::Resource(resource.into())).await
    }

    /// Deletes the default limits of `resource`; false when there were none.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn delete_resource_defaults(&self, resource: &str) -> Result<bool, RepositoryError> {
        ids::validate_resource(resource)?;
        let slot = Slot::Resource(resource.into());
        let existed = self.delete_level(&slot).await?;
        self.update_resources_registry("DELETE", resource).await?;
        self.scope.config.evict(&slot).await;
        if existed {
            self.audit(
                &audit::resource_audit_id(resource),
                AuditAction::LimitsDeleted,
                Some(resource),
                HashMap::new(),
            )
            .await?;
        }
        Ok(existed)
    }

    async fn delete_level(&self, slot: &Slot) -> Result<bool, RepositoryError> {
        let out = self
            .shared
            .client
            .delete_item()
            .table_name(&self.shared.table)
            .set_key(Some(slot_key(&self.scope.id, slot)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| classify("DeleteItem", e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    /// Resources that have default limits, sorted.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_resources_with_defaults(&self) -> Result<Vec<String>, RepositoryError> {
        let found = self
            .read_registry(keys::RESOURCES_SK)
            .await?
            .and_then(|it| match it.get("resources") {
                Some(AttributeValue::Ss(v)) => Some(v.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let mut found = found;
        found.sort();
        Ok(found)
    }

    /// Resources for which some entity has its own limits, sorted.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn list_resources_with_entity_configs(&self) -> Result<Vec<String>, RepositoryError> {
        let mut out: Vec<String> = self
            .read_registry(keys::ENTITY_CONFIG_RESOURCES_SK)
            .await?
            .map(|it| {
                it.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "PK" | "SK" | "GSI4PK" | "GSI4SK"))
                    .filter(|(_, v)| {
                        v.as_n()
                            .ok()
                            .and_then(|n| item::parse_number(n))
                            .is_some_and(|c| c > 0)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        Ok(out)
    }

    async fn read_registry(&self, sk: &str) -> Result<Option<Item>, RepositoryError> {
        let out = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(item::key(keys::system_pk(&self.scope.id), sk)))
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        Ok(out.item)
    }

    /// Sets the namespace-wide default limits and, when given, `on_unavailable` (otherwise
    /// the stored value is kept).
    ///
    /// # Errors
    /// As [`Repository::set_limits`].
    pub async fn set_system_defaults(
        &self,
        limits: &[Limit],
        on_unavailable: Option<OnUnavailable>,
    ) -> Result<(), RepositoryError> {
        validate_limits(limits)?;
        let (mut it, stored) = self.level_item(&Slot::System, limits).await?;
        let keep = stored
            .as_ref()
            .and_then(|s| item::get_s(s, "on_unavailable"))
            .and_then(OnUnavailable::parse);
        if let Some(o) = on_unavailable.or(keep) {
            it.insert("on_unavailable".into(), item::s(o.as_str()));
        }
        self.put_item(it).await?;
        self.scope.config.evict(&Slot::System).await;
        let mut details = HashMap::from([("limits".to_string(), audit::limits_details(limits))]);
        if let Some(o) = on_unavailable {
            details.insert("on_unavailable".into(), item::s(o.as_str()));
        }
        self.audit(SYSTEM_AUDIT_ID, AuditAction::LimitsSet, None, details)
            .await?;
        Ok(())
    }

    /// The namespace-wide defaults.
    ///
    /// # Errors
    /// As [`Repository::get_limits`].
    pub async fn get_system_defaults(&self) -> Result<Option<LimitConfig>, RepositoryError> {
        self.get_level(&Slot::System).await
    }

    /// Deletes the namespace-wide defaults (and `on_unavailable`); false when there were none.
    ///
    /// # Errors
    /// The classified failure.
    pub async fn delete_system_defaults(&self) -> Result<bool, RepositoryError> {
        let existed = self.delete_level(&Slot::System).await?;
        self.scope.config.evict(&Slot::System).await;
        if existed {
            self.audit(
                SYSTEM_AUDIT_ID,
                AuditAction::LimitsDeleted,
                None,
                HashMap::new(),
            )
            .await?;
        }
        Ok(existed)
    }

    /// Entities with their own limits on `resource` (`_default_` included), in pages of at
    /// most `limit`; pass the returned cursor to continue.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad resource, limit or cursor; the classified
    /// failure.
    pub async fn list_entities_with_custom_limits(
        &self,
        resource: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<String>, Option<String>), RepositoryError> {
        ids::validate_config_resource(resource)?;
        if limit == 0 || limit > 1000 {
            return Err(
                CoreError::invalid_value("limit", limit, "must be between 1 and 1000").into(),
            );
        }
        let start = cursor.map(decode_cursor).transpose()?;
        let out = self
            .shared
            .client
            .query()
            .table_name(&self.shared.table)
            .index_name("GSI3")
            .key_condition_expression("GSI3PK = :pk")
            .expression_attribute_values(
                ":pk",
                item::s(keys::entity_config_gsi3pk(&self.scope.id, resource)),
            )
            .limit(i32::try_from(limit).unwrap_or(1000))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| classify("Query", e))?;
        let ids = out
            .items()
            .iter()
            .filter_map(|it| item::get_s(it, "GSI3SK").map(str::to_string))
            .collect();
        let next = out
            .last_evaluated_key
            .filter(|k| !k.is_empty())
            .map(|k| encode_cursor(&k));
        Ok((ids, next))
    }
}

pub(crate) fn encode_cursor(key: &Item) -> String {
    let map: serde_json::Map<String, serde_json::Value> = key
        .iter()
        .filter_map(|(k, v)| {
            v.as_s()
                .ok()
                .map(|s| (k.clone(), serde_json::Value::from(s.clone())))
        })
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::Value::Object(map).to_string())
}

pub(crate) fn decode_cursor(cursor: &str) -> Result<Item, RepositoryError> {
    let bad = || CoreError::invalid_value("cursor", cursor, "not a cursor returned by this call");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let object = value.as_object().ok_or_else(bad)?;
    object
        .iter()
        .map(|(k, v)| Ok((k.clone(), item::s(v.as_str().ok_or_else(bad)?))))
        .collect::<Result<Item, CoreError>>()
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(pairs: &[(&str, AttributeValue)]) -> Item {
        let mut m = item::key("ns/SYSTEM#", "#CONFIG");
        for (k, v) in pairs {
            m.insert(k.to_string(), v.clone());
        }
        m
    }

    #[test]
    fn limit_names_may_contain_underscores() {
        let c = parse_config_item(&it(&[
            ("l_tpm_input_cp", item::n(10)),
            ("l_tpm_input_ra", item::n(10)),
            ("l_tpm_input_rp", item::n(60)),
        ]))
        .unwrap();
        assert_eq!(c.limits, [Limit::custom("tpm_input", 10, 10, 60)]);
    }

    #[test]
    fn a_name_under_both_prefixes_is_corrupt() {
        let e = parse_config_item(&it(&[
            ("l_x_cp", item::n(1)),
            ("l_x_ra", item::n(1)),
            ("l_x_rp", item::n(1)),
            ("w_x_cp", item::n(1)),
            ("w_x_rsa", item::n(1)),
        ]))
        .unwrap_err();
        assert!(matches!(e, RepositoryError::Corrupt { .. }));
        assert!(e.is_unavailable());
    }

    #[test]
    fn newer_features_are_refused_not_misread() {
        for extra in [
            vec![("w_q_cp", item::n(5)), ("w_q_rsa", item::n(60))],
            vec![
                ("l_q_cp", item::n(5)),
                ("l_q_ra", item::n(0)),
                ("l_q_rp", item::n(1)),
            ],
            vec![
                ("l_r_cp", item::n(5)),
                ("l_r_ra", item::n(5)),
                ("l_r_rp", item::n(1)),
                ("l_r_sched", item::s("x")),
            ],
            vec![("sched_tz", item::s("Europe/Paris"))],
        ] {
            let e = parse_config_item(&it(&extra)).unwrap_err();
            assert!(matches!(e, RepositoryError::Unsupported { .. }), "{e}");
        }
    }

    #[test]
    fn flags_read_as_the_reference_says() {
        let c = parse_config_item(&it(&[
            ("disabled", item::s("nonsense")),
            ("cascade", AttributeValue::Bool(true)),
            ("on_unavailable", item::s("allow")),
        ]))
        .unwrap();
        assert_eq!(c.disabled, Some(DisabledFlag::Enabled));
        assert_eq!(c.cascade, Some(true));
        assert_eq!(c.on_unavailable, Some(OnUnavailable::Allow));
        assert!(c.limits.is_empty());
    }

    #[test]
    fn a_limit_named_after_an_item_attribute_is_reported_with_item_and_name() {
        for name in ["ttl", "total_events", "GSI2PK", "window"] {
            for prefix in ["l", "w"] {
                let attrs: Vec<(String, AttributeValue)> = ["cp", "ra", "rp", "rsa"]
                    .iter()
                    .map(|f| (format!("{prefix}_{name}_{f}"), item::n(10)))
                    .chain(
                        ["cp", "ra", "rp"]
                            .iter()
                            .map(|f| (format!("l_rpm_{f}"), item::n(10))),
                    )
                    .collect();
                let pairs: Vec<(&str, AttributeValue)> =
                    attrs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                let stored = it(&pairs);
                let e = parse_config_item(&stored).unwrap_err();
                match &e {
                    RepositoryError::ReservedLimitName { key, name: n } => {
                        assert_eq!(n, name);
                        assert_eq!(key, "ns/SYSTEM#|#CONFIG");
                    }
                    other => panic!("{name}: {other:?}"),
                }
                assert!(e.is_unavailable());
                assert!(e.to_string().contains(name), "{e}");
                // The cache replays the same variant.
                assert!(matches!(
                    entry_result(&to_entry(Some(&stored))),
                    Err(RepositoryError::ReservedLimitName { .. })
                ));
            }
        }
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let key = item::key("a", "b");
        assert_eq!(decode_cursor(&encode_cursor(&key)).unwrap(), key);
        assert!(decode_cursor("!!").is_err());
    }
}
