//! Cascade policies and parent moves (reference §12.5): whether an entity's acquires on a
//! resource also debit its parent, set per (entity, resource), per entity or per resource;
//! and the move of an entity to another parent. Both end in the same fan-out: every bucket
//! in scope is stamped with the owner stamp (`cascade`, `parent_id`, `pgen`, `pinc`) its
//! entity and resource now resolve to, so the fast path, which trusts the stamp, follows at
//! once.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::ReturnValue;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_format::audit::{
    AuditAction, BUCKETS_STAMPED_DETAIL, CASCADE_DETAIL, OLD_PARENT_DETAIL, PARENT_DETAIL,
    PGEN_DETAIL, resource_audit_id,
};
use dynalimit_format::bucket::{BucketKey, Owner};
use dynalimit_format::config::Slot;
use dynalimit_format::entity::{Entity, meta_key, parent_move};
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item;
use dynalimit_format::version;

use super::access::Scope;
use crate::error::classify;
use crate::retry::RetryBackoff;
use crate::{Repository, RepositoryError};

/// The deepest ancestor chain a move accepts.
const MAX_ANCESTOR_HOPS: usize = 32;
/// Attempts of a META write that loses to bucket creates' transactions.
const META_ATTEMPTS: u32 = 5;

impl Repository {
    /// Sets (`Some`) or clears (`None`, back to inherit) whether `entity_id`'s acquires on
    /// `resource` (on every resource without a policy of its own when `None`, its
    /// `_default_` level) debit its parent, then stamps every bucket of the entity in scope
    /// with the policy it now resolves to. The policy outranks the resource's and the
    /// entity's own `cascade` flag; an entity without a parent never cascades. Storing one
    /// checks that the stack's aggregator reads it and raises the table's minimum client
    /// version to 0.16.0 (reference §10). Returns the number of buckets stamped.
    ///
    /// ```no_run
    /// # async fn run(repo: dynalimit::Repository) -> Result<(), dynalimit::RepositoryError> {
    /// // key-1's gpt-4 requests also count against its project; its other resources do not.
    /// repo.set_cascade_policy("key-1", Some("gpt-4"), Some(true)).await?;
    /// repo.set_cascade_policy("key-1", None, Some(false)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad ids;
    /// [`RepositoryError::ReadersTooOld`] when the stack's aggregator predates cascade
    /// policies (nothing written); [`RepositoryError::FanoutIncomplete`] when the policy was
    /// written but not every bucket stamped (run again to finish); the classified failure.
    pub async fn set_cascade_policy(
        &self,
        entity_id: &str,
        resource: Option<&str>,
        policy: Option<bool>,
    ) -> Result<usize, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        if let Some(r) = resource {
            ids::validate_resource(r)?;
        }
        self.require_readers(version::CASCADE_POLICIES, "cascade policies")
            .await?;
        let level = resource.unwrap_or(DEFAULT_RESOURCE);
        let slot = Slot::Entity(entity_id.into(), level.into());
        let e = dynalimit_format::config::cascade_write(&self.scope.id, &slot, policy);
        self.write_level_flag(&slot, e, policy.is_some()).await?;
        self.scope.config.clear().await;
        let stamped = self
            .stamp_owners(Scope::Entity(entity_id, resource))
            .await?;
        self.audit_cascade(entity_id, level, policy, stamped)
            .await?;
        Ok(stamped)
    }

    /// Sets (`Some`) or clears (`None`) whether acquires on `resource` debit the acquiring
    /// entity's parent, for every entity without a policy of its own, then stamps every
    /// bucket of the resource with the policy its entity now resolves to. Gated like
    /// [`Repository::set_cascade_policy`]. Returns the number of buckets stamped.
    ///
    /// # Errors
    /// As [`Repository::set_cascade_policy`].
    pub async fn set_resource_cascade_policy(
        &self,
        resource: &str,
        policy: Option<bool>,
    ) -> Result<usize, RepositoryError> {
        ids::validate_resource(resource)?;
        self.require_readers(version::CASCADE_POLICIES, "cascade policies")
            .await?;
        let slot = Slot::Resource(resource.into());
        let e = dynalimit_format::config::cascade_write(&self.scope.id, &slot, policy);
        self.write_level_flag(&slot, e, policy.is_some()).await?;
        if policy.is_some() {
            self.register_resource(resource, true).await?;
        }
        self.scope.config.clear().await;
        let stamped = self.stamp_owners(Scope::Resource(resource)).await?;
        self.audit_cascade(&resource_audit_id(resource), resource, policy, stamped)
            .await?;
        Ok(stamped)
    }

    /// Moves `entity_id` under `parent_id` (or to no parent), then stamps every bucket it
    /// owns with its new parent and generation (reference §12.5). Whether it cascades is
    /// decided as before the move (its policies, else its own `cascade` flag). What was
    /// already debited stays where it was: a lease open across the move gives back to the
    /// parent it debited. The new parent must exist and may not be the entity or one of its
    /// descendants. Checks that the stack's aggregator reads moves and raises the table's
    /// minimum client version to 0.17.0 first. Returns the number of buckets stamped; run
    /// again after [`RepositoryError::FanoutIncomplete`] to finish.
    ///
    /// A META write whose answer was lost is sent again by the client's retries: the move
    /// lands once, its generation raised once or twice (generations only order stamps), and
    /// the fan-out stamps the generation it then reads from META, strongly consistent.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad ids or a move under
    /// itself; [`RepositoryError::NotFound`] when the entity or the parent does not exist;
    /// [`RepositoryError::Validation`] for a move that would make a cycle;
    /// [`RepositoryError::ReadersTooOld`]; [`RepositoryError::FanoutIncomplete`]; the
    /// classified failure.
    pub async fn set_parent(
        &self,
        entity_id: &str,
        parent_id: Option<&str>,
    ) -> Result<usize, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        if let Some(p) = parent_id {
            ids::validate_entity_id(p)?;
            if p == entity_id {
                return Err(dynalimit_core::CoreError::invalid_value(
                    "parent",
                    p,
                    "an entity cannot be its own parent",
                )
                .into());
            }
        }
        self.require_readers(version::STAMPS_AND_MOVES, "parent moves (set_parent)")
            .await?;
        if let Some(p) = parent_id {
            self.check_new_parent(entity_id, p).await?;
        }
        let old = self.write_parent(entity_id, parent_id).await?;
        let stamped = self.stamp_owners(Scope::Entity(entity_id, None)).await;
        let details = HashMap::from([
            (
                OLD_PARENT_DETAIL.to_string(),
                item::s_or_null(old.parent_id.as_deref()),
            ),
            (PARENT_DETAIL.to_string(), item::s_or_null(parent_id)),
            (PGEN_DETAIL.to_string(), item::n(old.parent_generation + 1)),
            (
                BUCKETS_STAMPED_DETAIL.to_string(),
                item::n(match &stamped {
                    Ok(n) => *n,
                    Err(RepositoryError::FanoutIncomplete { stamped, .. }) => *stamped,
                    Err(_) => 0,
                }),
            ),
        ]);
        self.audit(entity_id, AuditAction::EntityParentChanged, None, details)
            .await?;
        stamped
    }

    /// Refuses a parent that does not exist, or whose ancestors include `entity_id`
    /// (strongly consistent META reads, one per level, at most [`MAX_ANCESTOR_HOPS`]).
    async fn check_new_parent(
        &self,
        entity_id: &str,
        parent_id: &str,
    ) -> Result<(), RepositoryError> {
        let parent = self
            .read_meta(parent_id)
            .await?
            .ok_or_else(|| RepositoryError::NotFound {
                what: format!("entity {parent_id:?}"),
            })?;
        let mut cursor = parent.parent_id;
        for _ in 0..MAX_ANCESTOR_HOPS {
            let Some(ancestor) = cursor else {
                return Ok(());
            };
            if ancestor == entity_id {
                return Err(dynalimit_core::CoreError::invalid_value(
                    "parent",
                    parent_id,
                    format!(
                        "{entity_id} is an ancestor of {parent_id}: the move would make a cycle"
                    ),
                )
                .into());
            }
            cursor = self.read_meta(&ancestor).await?.and_then(|a| a.parent_id);
        }
        Err(dynalimit_core::CoreError::invalid_value(
            "parent",
            parent_id,
            format!("its ancestor chain is deeper than {MAX_ANCESTOR_HOPS} levels"),
        )
        .into())
    }

    /// The META write of a move; the entity as it was.
    async fn write_parent(
        &self,
        entity_id: &str,
        parent_id: Option<&str>,
    ) -> Result<Entity, RepositoryError> {
        let e = parent_move(&self.scope.id, entity_id, parent_id);
        let mut attempt = 1;
        loop {
            let sent = self
                .shared
                .client
                .update_item()
                .table_name(&self.shared.table)
                .set_key(Some(meta_key(&self.scope.id, entity_id)))
                .with_expr(&e)
                .return_values(ReturnValue::AllOld)
                .send()
                .await;
            match sent {
                Ok(out) => {
                    let old = out.attributes.unwrap_or_default();
                    return Ok(Entity::from_item(&old)?);
                }
                Err(err)
                    if err
                        .as_service_error()
                        .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
                {
                    return Err(RepositoryError::NotFound {
                        what: format!("entity {entity_id:?}"),
                    });
                }
                // Every bucket create checks this item in its transaction: a conflict did
                // not apply the move and is sent again.
                Err(err)
                    if attempt < META_ATTEMPTS
                        && err
                            .as_service_error()
                            .is_some_and(|s| s.is_transaction_conflict_exception()) =>
                {
                    RetryBackoff::CONFLICT.pause(attempt).await;
                    attempt += 1;
                }
                Err(err) => return Err(classify("UpdateItem", err)),
            }
        }
    }

    /// An entity's META, strongly consistent.
    async fn read_meta(&self, entity_id: &str) -> Result<Option<Entity>, RepositoryError> {
        self.read_entity(entity_id, true).await
    }

    /// Stamps every bucket in `scope` with the owner stamp its entity and resource resolve
    /// to, from strongly consistent reads of the entity's META and configuration levels; two
    /// discovery passes (a bucket an in-flight acquire creates during the first is stamped by
    /// the second). A bucket whose entity has no META is left alone. Returns how many were
    /// stamped (a bucket gone, or already carrying a newer stamp, is not counted).
    async fn stamp_owners(&self, scope: Scope<'_>) -> Result<usize, RepositoryError> {
        let store = self.buckets();
        let mut seen: BTreeSet<BucketKey> = BTreeSet::new();
        let mut owners: HashMap<String, Option<Entity>> = HashMap::new();
        let mut stamps: HashMap<(String, String), Option<Owner>> = HashMap::new();
        let mut levels = HashMap::new();
        let mut stamped = 0;
        let incomplete = |stamped: usize, e: RepositoryError| RepositoryError::FanoutIncomplete {
            stamped,
            message: e.to_string(),
        };
        for _pass in 0..2 {
            let found = scope
                .keys(&store)
                .await
                .map_err(|e| incomplete(stamped, e))?;
            for key in found {
                if !seen.insert(key.clone()) {
                    continue;
                }
                let pair = (key.entity_id.clone(), key.resource.clone());
                if !stamps.contains_key(&pair) {
                    if !owners.contains_key(&key.entity_id) {
                        let meta = self
                            .read_meta(&key.entity_id)
                            .await
                            .map_err(|e| incomplete(stamped, e))?;
                        owners.insert(key.entity_id.clone(), meta);
                    }
                    let (_, policy) = self
                        .walk_levels_both(&key.entity_id, &key.resource, &mut levels)
                        .await
                        .map_err(|e| incomplete(stamped, e))?;
                    let owner = owners[&key.entity_id].as_ref().map(|meta| Owner {
                        cascade: meta.parent_id.is_some() && policy.unwrap_or(meta.cascade),
                        parent_id: meta.parent_id.clone(),
                        pgen: Some(meta.parent_generation),
                        pinc: meta.incarnation.clone(),
                    });
                    stamps.insert(pair.clone(), owner);
                }
                let Some(owner) = &stamps[&pair] else {
                    continue;
                };
                match store.stamp_owner(&key, owner).await {
                    Ok(true) => stamped += 1,
                    Ok(false) => {}
                    Err(e) => return Err(incomplete(stamped, e)),
                }
            }
        }
        Ok(stamped)
    }

    async fn audit_cascade(
        &self,
        audit_id: &str,
        resource: &str,
        policy: Option<bool>,
        stamped: usize,
    ) -> Result<(), RepositoryError> {
        let details = HashMap::from([
            (
                CASCADE_DETAIL.to_string(),
                policy.map_or_else(
                    || item::s_or_null(None),
                    aws_sdk_dynamodb::types::AttributeValue::Bool,
                ),
            ),
            (BUCKETS_STAMPED_DETAIL.to_string(), item::n(stamped)),
        ]);
        self.audit(audit_id, AuditAction::LimitsSet, Some(resource), details)
            .await
            .map(|_| ())
    }
}
