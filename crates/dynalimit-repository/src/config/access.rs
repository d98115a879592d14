//! Disabling and re-enabling (reference §12.1, §4.3): a level's `disabled` flag, then the
//! access stamp of every bucket it can decide, so the fast path refuses (or admits again)
//! from the next request on.
//!
//! Each bucket is stamped with the access resolved for its own entity and resource from a
//! strongly consistent read of the levels, never with the changed level's value as such: an
//! entity that overrides a disabled resource keeps its access, and a clear leaves every
//! bucket with what now decides it. Discovery runs twice, so a bucket that an acquire in
//! flight created during the first pass is stamped by the second.
//!
//! What happens when an answer is lost: the flag write and every stamp set absolute values
//! (sent again, they land the same); the resource registry is a set. A call that fails after
//! the flag was written returns [`RepositoryError::FanoutIncomplete`] with the number of
//! buckets stamped, and running it again finishes the job. Tests:
//! `suite::outcomes::access_flag_writes` (the flag writes, the registry counted once) and
//! `suite::outcomes::access_stamp` (the stamps), under every way of losing an answer.

use std::collections::{BTreeSet, HashMap};

use crate::bucket::decide::stamp_deadline;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_format::audit::{self, AuditAction, BUCKETS_STAMPED_DETAIL, DISABLED_DETAIL};
use dynalimit_format::bucket::BucketKey;
use dynalimit_format::config::{self, Access, ConfigLevel, DisabledFlag, LimitConfig, Slot};
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item::{self, Item};
use dynalimit_format::{attr, version};

use super::write::build_err;
use crate::batch::batch_get_items;
use crate::error::classify;
use crate::{Repository, RepositoryError};

/// Which buckets a change can decide.
pub(crate) enum Scope<'a> {
    /// Every bucket of a resource, any entity (GSI2).
    Resource(&'a str),
    /// Every bucket of an entity, on one resource or on all (GSI3).
    Entity(&'a str, Option<&'a str>),
}

impl Scope<'_> {
    /// The keys of the buckets in scope, as the index lists them now (one discovery pass).
    pub(crate) async fn keys(
        &self,
        store: &crate::bucket::BucketStore,
    ) -> Result<Vec<BucketKey>, RepositoryError> {
        match *self {
            Scope::Resource(resource) => store.resource_bucket_keys(resource).await,
            Scope::Entity(entity, resource) => store.entity_bucket_keys(entity, resource).await,
        }
    }
}

impl Repository {
    /// Sets (`Some`) or clears (`None`, back to inherit) the `disabled` flag of `resource`
    /// for every entity without its own value: [`DisabledFlag::Disabled`] refuses every
    /// acquire with `ResourceDisabled`, [`DisabledFlag::Enabled`] enforces limits even where
    /// a lower level disables. Writes the flag (creating a limit-less resource level when
    /// there is none, registered like one with defaults), stamps every existing bucket of
    /// the resource with the access it now resolves to, evicts the configuration cache and
    /// writes a `limits_set` audit event. Returns the number of buckets stamped.
    ///
    /// Other processes see the change on their next request to a stamped bucket; their
    /// configuration caches learn it within their time-to-live.
    ///
    /// ```no_run
    /// # async fn run(repo: dynalimit::Repository) -> Result<(), dynalimit::RepositoryError> {
    /// use dynalimit::DisabledFlag;
    /// let stamped = repo.set_resource_disabled("gpt-4", Some(DisabledFlag::Disabled)).await?;
    /// println!("{stamped} buckets now refuse");
    /// repo.set_resource_disabled("gpt-4", None).await?; // back to inherit
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for a bad resource name;
    /// [`RepositoryError::ReadersTooOld`] for [`DisabledFlag::Bypass`] on a stack whose
    /// aggregator does not read it (see [`Repository::set_entity_disabled`]);
    /// [`RepositoryError::FanoutIncomplete`] when the flag was written but not every bucket
    /// stamped (run again to finish); the classified failure.
    pub async fn set_resource_disabled(
        &self,
        resource: &str,
        flag: Option<DisabledFlag>,
    ) -> Result<usize, RepositoryError> {
        ids::validate_resource(resource)?;
        self.require_bypass_readers(flag).await?;
        let slot = Slot::Resource(resource.into());
        self.write_flag(&slot, flag).await?;
        if flag.is_some() {
            self.register_resource(resource, true).await?;
        }
        self.scope.config.clear().await;
        let stamped = self.stamp_access(Scope::Resource(resource)).await?;
        self.audit_flag(&audit::resource_audit_id(resource), resource, flag, stamped)
            .await?;
        Ok(stamped)
    }

    /// Sets (`Some`) or clears (`None`) the `disabled` flag of `entity_id` on `resource`, or
    /// on every resource when `resource` is `None` (its `_default_` level). An entity-level
    /// value outranks the resource's, so [`DisabledFlag::Enabled`] re-admits one entity to a
    /// disabled resource. Never extends to the entity's cascade parent, which resolves its
    /// own access. Writes the flag (creating a limit-less level when there is none, counted
    /// in the registry of entity configs like one with limits), stamps every existing bucket
    /// of the entity in scope with the access it now resolves to, evicts the configuration
    /// cache and writes a `limits_set` audit event. Returns the number of buckets stamped.
    ///
    /// [`DisabledFlag::Bypass`] admits every request and debits no balance (each is still
    /// counted in `tc`): the buckets are stamped with a deadline a minute ahead, which slow
    /// passes renew from the configuration. Storing it first checks that the stack's
    /// aggregator reads it and raises the table's minimum client version to 0.17.0, so that
    /// older clients, which would enforce the pair, stop (reference §10).
    ///
    /// # Errors
    /// As [`Repository::set_resource_disabled`], and for a bad entity id.
    pub async fn set_entity_disabled(
        &self,
        entity_id: &str,
        resource: Option<&str>,
        flag: Option<DisabledFlag>,
    ) -> Result<usize, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        if let Some(r) = resource {
            ids::validate_resource(r)?;
        }
        self.require_bypass_readers(flag).await?;
        let level = resource.unwrap_or(DEFAULT_RESOURCE);
        let slot = Slot::Entity(entity_id.into(), level.into());
        self.write_flag(&slot, flag).await?;
        self.scope.config.clear().await;
        let stamped = self
            .stamp_access(Scope::Entity(entity_id, resource))
            .await?;
        self.audit_flag(entity_id, level, flag, stamped).await?;
        Ok(stamped)
    }

    /// The access (enforced, disabled or bypass) that `entity_id` resolves to on `resource`
    /// from a strongly consistent, uncached read of its levels (reference §4.1).
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for bad ids (nothing sent); a level dynalimit cannot
    /// read ([`FormatError::Unsupported`](dynalimit_format::FormatError::Unsupported), [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt)); the classified
    /// failure.
    pub async fn resolve_access(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<Access, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        self.walk_levels(entity_id, resource, &mut HashMap::new())
            .await
    }

    /// The access of `entity_id` on `resource` from the levels in `read` (the levels read
    /// so far by one fan-out) and, in one strongly consistent `BatchGetItem`, the ones it
    /// lacks, which it then holds: a resource level is read once for all its entities.
    async fn walk_levels(
        &self,
        entity_id: &str,
        resource: &str,
        read: &mut HashMap<Slot, Option<LimitConfig>>,
    ) -> Result<Access, RepositoryError> {
        Ok(self.walk_levels_both(entity_id, resource, read).await?.0)
    }

    /// The access and the cascade policy (reference §12.5) of `entity_id` on `resource`, as
    /// [`Repository::walk_levels`] reads them.
    pub(crate) async fn walk_levels_both(
        &self,
        entity_id: &str,
        resource: &str,
        read: &mut HashMap<Slot, Option<LimitConfig>>,
    ) -> Result<(Access, Option<bool>), RepositoryError> {
        let levels = self.read_levels(entity_id, resource, false, read).await?;
        let decoded = levels
            .iter()
            .map(|(level, slot)| (*level, read[slot].as_ref()));
        Ok(config::walk(decoded))
    }

    /// The limits of `entity_id` on `resource` and the level that supplies them (the first
    /// of the four that has any), from strongly consistent reads: what a fan-out that just
    /// wrote a level stamps (an eventually consistent read could return the level as it was,
    /// hard case 42).
    pub(crate) async fn resolve_consistent(
        &self,
        entity_id: &str,
        resource: &str,
        read: &mut HashMap<Slot, Option<LimitConfig>>,
    ) -> Result<(Vec<dynalimit_core::Limit>, Option<ConfigLevel>), RepositoryError> {
        let levels = self.read_levels(entity_id, resource, true, read).await?;
        Ok(levels
            .iter()
            .find_map(|(level, slot)| {
                let config = read[slot].as_ref()?;
                (!config.limits.is_empty()).then(|| (config.limits.clone(), Some(*level)))
            })
            .unwrap_or_default())
    }

    /// The levels of `entity_id` on `resource` (the system level too when `system`), each
    /// read once into `read` by one strongly consistent `BatchGetItem` of those it lacks.
    async fn read_levels(
        &self,
        entity_id: &str,
        resource: &str,
        system: bool,
        read: &mut HashMap<Slot, Option<LimitConfig>>,
    ) -> Result<Vec<(ConfigLevel, Slot)>, RepositoryError> {
        let levels: Vec<(ConfigLevel, Slot)> = config::levels(entity_id, resource)
            .into_iter()
            .filter(|(level, _)| system || *level != ConfigLevel::System)
            .collect();
        let ns = &self.scope.id;
        let missing: Vec<&Slot> = levels
            .iter()
            .map(|(_, slot)| slot)
            .filter(|slot| !read.contains_key(*slot))
            .collect();
        if !missing.is_empty() {
            let wanted: Vec<Item> = missing.iter().map(|slot| slot.key(ns)).collect();
            let found =
                batch_get_items(&self.shared.client, &self.shared.table, wanted, true).await?;
            for slot in missing {
                let key = slot.key(ns);
                let stored = found
                    .iter()
                    .find(|it| item::key_of(it) == item::key_of(&key))
                    .map(config::decode)
                    .transpose()?;
                read.insert(slot.clone(), stored);
            }
        }
        Ok(levels)
    }

    /// Writes one level's `disabled` flag. A new entity level is created in one transaction
    /// with its count in the registry of entity configs; one created meanwhile by someone
    /// else is updated without touching the count (it is theirs).
    async fn write_flag(
        &self,
        slot: &Slot,
        flag: Option<DisabledFlag>,
    ) -> Result<(), RepositoryError> {
        let e = config::flag_write(&self.scope.id, slot, flag);
        self.write_level_flag(slot, e, flag.is_some()).await
    }

    /// Writes one level's flag (`disabled` or `cascade`) with `e`, setting it when `set`,
    /// removing it otherwise.
    pub(crate) async fn write_level_flag(
        &self,
        slot: &Slot,
        e: dynalimit_format::expr::Expr,
        set: bool,
    ) -> Result<(), RepositoryError> {
        let ns = &self.scope.id;
        let update = || {
            self.shared
                .client
                .update_item()
                .table_name(&self.shared.table)
                .set_key(Some(slot.key(ns)))
                .with_expr(&e)
        };
        // A clear removes the flag from an existing item (none there: already inherited); a
        // resource level is upserted; only a new entity level needs the registry count.
        let resource = match slot {
            Slot::Entity(_, resource) if set => resource,
            _ => {
                return match update().send().await {
                    Err(err) if !set && is_condition_failed(&err) => Ok(()),
                    other => other.map(|_| ()).map_err(|err| classify("UpdateItem", err)),
                };
            }
        };
        let mut create = e.clone();
        let c = create.not_exists(attr::PK);
        create.when(c);
        let level = Update::builder()
            .table_name(&self.shared.table)
            .set_key(Some(slot.key(ns)))
            .with_expr(&create)
            .build()
            .map_err(build_err)?;
        let create = TransactWriteItem::builder().update(level).build();
        if !self.create_counted_level(create, resource).await? {
            update()
                .send()
                .await
                .map_err(|err| classify("UpdateItem", err))?;
        }
        Ok(())
    }

    /// Stamps every bucket in `scope` with the access resolved for its own entity and
    /// resource; two discovery passes. Returns how many buckets were stamped (a bucket gone
    /// meanwhile is not counted).
    async fn stamp_access(&self, scope: Scope<'_>) -> Result<usize, RepositoryError> {
        let store = self.buckets();
        let mut seen: BTreeSet<BucketKey> = BTreeSet::new();
        let mut resolved: HashMap<(String, String), (Access, i64)> = HashMap::new();
        let mut levels_read = HashMap::new();
        let mut stamped = 0;
        for _pass in 0..2 {
            let found = scope.keys(&store).await?;
            for key in found {
                if !seen.insert(key.clone()) {
                    continue;
                }
                let pair = (key.entity_id.clone(), key.resource.clone());
                let (access, bypass_until) = match resolved.get(&pair) {
                    Some(known) => *known,
                    None => {
                        // The deadline is taken before the read that decides it (§2.7).
                        let until = self.bypass_deadline();
                        let access = self
                            .walk_levels(&key.entity_id, &key.resource, &mut levels_read)
                            .await
                            .map_err(|e| incomplete(stamped, e))?;
                        resolved.insert(pair, (access, until));
                        (access, until)
                    }
                };
                match store.stamp_access(&key, access, bypass_until).await {
                    Ok(true) => stamped += 1,
                    Ok(false) => {}
                    Err(e) => return Err(incomplete(stamped, e)),
                }
            }
        }
        Ok(stamped)
    }

    /// A bypass deadline from now (reference §2.7).
    fn bypass_deadline(&self) -> i64 {
        stamp_deadline(self.shared.clock.epoch_millis(), rand::random())
    }

    async fn audit_flag(
        &self,
        audit_id: &str,
        resource: &str,
        flag: Option<DisabledFlag>,
        stamped: usize,
    ) -> Result<(), RepositoryError> {
        let details = HashMap::from([
            (
                DISABLED_DETAIL.to_string(),
                flag.map_or_else(|| item::s_or_null(None), DisabledFlag::encode),
            ),
            (BUCKETS_STAMPED_DETAIL.to_string(), item::n(stamped)),
        ]);
        self.audit(audit_id, AuditAction::LimitsSet, Some(resource), details)
            .await
            .map(|_| ())
    }
}

pub(super) fn is_condition_failed<R>(
    err: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::update_item::UpdateItemError,
        R,
    >,
) -> bool {
    err.as_service_error()
        .is_some_and(|s| s.is_conditional_check_failed_exception())
}

fn incomplete(stamped: usize, e: RepositoryError) -> RepositoryError {
    RepositoryError::FanoutIncomplete {
        stamped,
        message: e.to_string(),
    }
}

impl Repository {
    /// The reader gate of a bypass (reference §10): the aggregator must read it, and the
    /// table's minimum client version is raised to 0.17.0.
    async fn require_bypass_readers(
        &self,
        flag: Option<DisabledFlag>,
    ) -> Result<(), RepositoryError> {
        if flag == Some(DisabledFlag::Bypass) {
            self.require_readers(
                version::STAMPS_AND_MOVES,
                "a bypass (disabled = \"bypass\")",
            )
            .await?;
        }
        Ok(())
    }
}
