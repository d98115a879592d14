//! Operator resets and top-ups of one (entity, resource) (reference §12.6, §1.4.8).
//!
//! One call reads (strongly consistent) the owner's META, the operation's record and the
//! four configuration levels in one `BatchGetItem`, discovers every shard (GSI3, then a
//! consistent `BatchGetItem` with probes below the highest shard count), plans every shard
//! with [`dynalimit_core::operation`] and writes them all in **one** `TransactWriteItems`:
//! each shard's rf-locked delta write, the operation record (`#OP#{id}`, put only when no
//! record of the id exists) and the audit event. A lost race (a cancelled condition, a
//! transaction conflict) re-reads and re-plans, up to [`OPERATION_ATTEMPTS`] attempts in all.
//!
//! Every call has an operation id: the caller's idempotency key, or one generated for the
//! call. The record's condition lets at most one transaction carrying an id commit, however
//! often it is sent, so a call whose answer was lost sends its re-planned transaction again
//! under the same id, and learns from the record whether the first one landed.

use std::collections::BTreeMap;

use crate::bucket::decide::TtlAction;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use dynalimit_core::bucket::bucket_ttl;
use dynalimit_core::operation::{
    OperationKind, OperationPlan, lagging, plan_reset, plan_top_up, validate_top_up,
};
use dynalimit_core::{CoreError, Limit, ids};
use dynalimit_format::FormatError;
use dynalimit_format::audit::{AuditAction, operation_details};
use dynalimit_format::config::{self, ConfigLevel};
use dynalimit_format::entity::meta_key;
use dynalimit_format::expr::WithExpr;
use dynalimit_format::item::{self, Item};
use dynalimit_format::operation::{
    self as record, NewRecord, OperationRecord, kind_name, put_condition,
};
use dynalimit_format::{attr, bucket::BucketKey};

use crate::batch::batch_get_items;
use crate::error::classify;
use crate::retry::{self, Attempt, RetryBackoff};
use crate::{Repository, RepositoryError};

/// Attempts of one reset or top-up while it loses races (a shard written since the read, a
/// transaction conflict) or its answer is lost: the first and three more, each re-reading
/// and re-planning after a pause of [`RetryBackoff::RACE`].
pub const OPERATION_ATTEMPTS: u32 = 4;

/// Options of [`Repository::reset_bucket`] and [`Repository::top_up`].
///
/// ```
/// use dynalimit::OperationOptions;
/// let options = OperationOptions::new()
///     .idempotency_key("refund-2026-11-17-0042")
///     .principal("support:alice");
/// assert_eq!(options.key(), Some("refund-2026-11-17-0042"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct OperationOptions {
    idempotency_key: Option<String>,
    principal: Option<String>,
}

impl OperationOptions {
    /// No idempotency key; the repository's principal.
    pub fn new() -> Self {
        OperationOptions::default()
    }

    /// Names the operation (1–64 letters, digits, `.`, `_`, `:`, `-`): a call with the same
    /// key on the same entity and resource within three days returns the first call's
    /// result and applies nothing.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Who is named in the audit event (default: the repository's principal).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// The idempotency key, when set.
    pub fn key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    fn validate(&self) -> Result<(), CoreError> {
        if let Some(key) = &self.idempotency_key {
            ids::validate_idempotency_key(key)?;
        }
        if let Some(principal) = &self.principal {
            ids::validate_principal(principal)?;
        }
        Ok(())
    }
}

/// What a reset or top-up did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketOperation {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// Reset or top-up.
    pub kind: OperationKind,
    /// The idempotency key, or the id generated for the call.
    pub operation_id: String,
    /// Bucket items (shards) written; 0 when there was none (the entity has no bucket on the
    /// resource yet: its first acquire creates it full).
    pub shards: u32,
    /// Whole tokens per limit: for a top-up what was granted (at most the room below each
    /// ceiling, summed over the shards); for a reset what was restored beyond the refill.
    pub amounts: BTreeMap<String, i64>,
    /// Whether this is the stored result of an earlier call with the same idempotency key
    /// (nothing was applied by this call).
    pub replayed: bool,
}

/// What the first read of an attempt found.
struct Read {
    meta: Option<Item>,
    record: Option<OperationRecord>,
    levels: Vec<(ConfigLevel, Option<Item>)>,
}

/// How a transaction ended.
enum Sent {
    /// Committed.
    Applied,
    /// Not committed (a lost race), or not known to have been: read the record and try again.
    Again(RepositoryError),
}

/// One call.
struct Call<'a> {
    kind: OperationKind,
    entity_id: &'a str,
    resource: &'a str,
    amounts: BTreeMap<String, i64>,
    principal: Option<&'a str>,
    keyed: bool,
    operation_id: String,
    /// This call's nonce, stored in its record as `writer`.
    writer: String,
}

impl Call<'_> {
    fn result(
        &self,
        shards: u32,
        amounts: BTreeMap<String, i64>,
        replayed: bool,
    ) -> BucketOperation {
        BucketOperation {
            entity_id: self.entity_id.to_owned(),
            resource: self.resource.to_owned(),
            kind: self.kind,
            operation_id: self.operation_id.clone(),
            shards,
            amounts,
            replayed,
        }
    }

    fn key(&self, shard: u32) -> BucketKey {
        BucketKey::new(self.entity_id, self.resource, shard)
    }
}

impl Repository {
    /// Restores every limit of `entity_id` on `resource` to its ceiling, now: on every shard
    /// of the bucket, each resolved limit goes back to `capacity // shard_count` (debt is
    /// forgiven). Consumption counters, `disabled`, configuration and the parent's buckets
    /// are left alone; every shard's next acquire takes one slow pass (`vu = 0`). A bucket
    /// that does not exist yet is left alone (its first acquire creates it full): nothing is
    /// written, unless an idempotency key is given, in which case the no-op is recorded so
    /// that the key's later calls return it.
    ///
    /// Returns the shards written and, per limit, the whole tokens restored beyond what the
    /// refill to now gave back.
    ///
    /// # Idempotency and lost answers
    /// The call's writes are one transaction carrying an operation record (see the module
    /// docs). With an idempotency key, a call made again within three days returns the first
    /// call's result (`replayed`) and applies nothing. Without one the call still has an
    /// operation id of its own: when the transaction's answer is lost (a 5xx, a timeout, a
    /// connection cut after sending), the SDK sends it again under the same
    /// `ClientRequestToken`, and if the outcome is still unknown the call reads its record:
    /// present, it returns the recorded result; absent, it plans again and sends under the
    /// same id, which the record's condition lets commit at most once. A call that cannot
    /// tell in [`OPERATION_ATTEMPTS`] attempts fails with [`RepositoryError::OutcomeUnknown`]
    /// (without a key, retrying it may reset again; with one, retrying is safe).
    /// (Tests: `suite::operations::a_lost_answer_*`.)
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id, resource, key or principal (nothing
    /// sent); [`RepositoryError::NotFound`] when no limits are configured for the pair;
    /// [`FormatError::Unsupported`](dynalimit_format::FormatError::Unsupported) when the configuration or a shard is an item dynalimit
    /// cannot read (nothing written); [`RepositoryError::IdempotencyKeyReused`]
    /// when the key names a top-up; [`RepositoryError::Contended`] when the bucket kept
    /// changing through every attempt; the classified failure.
    ///
    /// ```no_run
    /// # async fn demo(repo: dynalimit::Repository) -> Result<(), dynalimit::RepositoryError> {
    /// use dynalimit::OperationOptions;
    ///
    /// let done = repo
    ///     .reset_bucket("key-1", "gpt-4", &OperationOptions::new().idempotency_key("ticket-881"))
    ///     .await?;
    /// println!("{} shards, restored {:?}", done.shards, done.amounts);
    /// # Ok(()) }
    /// ```
    pub async fn reset_bucket(
        &self,
        entity_id: &str,
        resource: &str,
        options: &OperationOptions,
    ) -> Result<BucketOperation, RepositoryError> {
        self.operate(
            OperationKind::Reset,
            entity_id,
            resource,
            BTreeMap::new(),
            options,
        )
        .await
    }

    /// Adds whole tokens to limits of `entity_id` on `resource`, now. A dripping limit gains
    /// at most the room below its ceiling, summed over the shards of the bucket (a refund,
    /// not a purchase), split over the shards in proportion to each one's room; the amount
    /// granted is returned. A bucket that does not exist yet would be created full, so it has
    /// no room: nothing is granted or written (with an idempotency key the no-op is
    /// recorded).
    ///
    /// Idempotency and lost answers as for [`Repository::reset_bucket`]: with a key a
    /// repeated call returns the first one's result; without one a lost answer is resolved
    /// through the call's own operation record, so the tokens are granted once.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad id, resource, limit name, amount (each in
    /// `1..=10^15`, at least one, no name twice, at most
    /// [`attr::MAX_LIMITS_PER_BUCKET`]), key or principal (nothing sent), and for a
    /// name that is not a limit configured for the pair or not yet on the bucket (nothing
    /// written); otherwise as [`Repository::reset_bucket`].
    ///
    /// ```no_run
    /// # async fn demo(repo: dynalimit::Repository) -> Result<(), dynalimit::RepositoryError> {
    /// use dynalimit::OperationOptions;
    ///
    /// let done = repo
    ///     .top_up("key-1", "gpt-4", [("tpm", 5_000)], &OperationOptions::new())
    ///     .await?;
    /// assert!(done.amounts["tpm"] <= 5_000);
    /// # Ok(()) }
    /// ```
    pub async fn top_up<K, I>(
        &self,
        entity_id: &str,
        resource: &str,
        amounts: I,
        options: &OperationOptions,
    ) -> Result<BucketOperation, RepositoryError>
    where
        K: Into<String>,
        I: IntoIterator<Item = (K, i64)>,
    {
        let mut named = BTreeMap::new();
        for (name, amount) in amounts {
            let name: String = name.into();
            attr::validate_limit_name(&name)?;
            if named.insert(name.clone(), amount).is_some() {
                return Err(CoreError::invalid_identifier(
                    "limit name",
                    &name,
                    "appears twice in one top-up",
                )
                .into());
            }
        }
        attr::validate_limit_count("top-up amounts", named.len())?;
        validate_top_up(&named)?;
        self.operate(OperationKind::TopUp, entity_id, resource, named, options)
            .await
    }

    async fn operate(
        &self,
        kind: OperationKind,
        entity_id: &str,
        resource: &str,
        amounts: BTreeMap<String, i64>,
        options: &OperationOptions,
    ) -> Result<BucketOperation, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        options.validate()?;
        let now = self.shared.clock.epoch_millis();
        let operation_id = match options.key() {
            Some(key) => key.to_owned(),
            None => ulid::Ulid::from_parts(now.max(0) as u64, rand::random()).to_string(),
        };
        let call = Call {
            kind,
            entity_id,
            resource,
            amounts,
            principal: options
                .principal
                .as_deref()
                .or(self.shared.principal.as_deref()),
            keyed: options.key().is_some(),
            operation_id,
            writer: format!(
                "{:016x}{:08x}",
                rand::random::<u64>(),
                rand::random::<u32>()
            ),
        };
        // A limiter on this repository forgets what it remembered of the bucket.
        self.scope.config.changed();
        // The incarnation of the first read: a record carries the entity it was made for.
        let mut incarnation: Option<String> = None;
        let mut last = None;
        for attempt in 1..=OPERATION_ATTEMPTS {
            if attempt > 1 {
                RetryBackoff::RACE.pause(attempt - 1).await;
            }
            let read = self.operation_read(&call).await?;
            let ent = incarnation
                .get_or_insert_with(|| record::incarnation(read.meta.as_ref()))
                .clone();
            if let Some(found) = self.recorded(&call, read.record, &ent)? {
                return Ok(found);
            }
            let (limits, source) = resolve(read.levels)?;
            if limits.is_empty() {
                return Err(RepositoryError::NotFound {
                    what: format!("limits for entity {entity_id:?} on resource {resource:?}"),
                });
            }
            // A quota's top-up raises its ceiling (`tu`), which older readers ignore.
            if kind == OperationKind::TopUp
                && limits
                    .iter()
                    .any(|l| l.is_quota() && call.amounts.contains_key(l.name()))
            {
                self.require_readers(dynalimit_format::version::STAMPS_AND_MOVES, "quota top-ups")
                    .await?;
            }
            let store = self.buckets();
            let shards = store.operation_shards(entity_id, resource).await?;
            for s in &shards {
                if let Some(feature) = s.image.unsupported_reason() {
                    return Err(RepositoryError::Format(FormatError::Unsupported {
                        key: call.key(s.shard).pk(&self.scope.id),
                        feature,
                    }));
                }
            }
            if let Some((top, behind)) = lagging(&shards) {
                // A doubling not yet propagated: raise the lagging shards, then plan again.
                let raised = store.raise_shard_count(&call.key(0), behind, top).await;
                if let Some((_, error)) = raised.failed.into_iter().next() {
                    return Err(error);
                }
                continue;
            }
            let now = self.shared.clock.epoch_millis();
            let ttl = match source {
                Some(ConfigLevel::Entity | ConfigLevel::EntityDefault) => TtlAction::Remove,
                _ => bucket_ttl(now, &limits, i64::from(self.shared.bucket_ttl_multiplier))
                    .map_or(TtlAction::Keep, TtlAction::Set),
            };
            let plan = match kind {
                OperationKind::Reset => plan_reset(&shards, &limits, now, ttl),
                OperationKind::TopUp => plan_top_up(&shards, &limits, &call.amounts, now, ttl)?,
            };
            let shards_written = u32::try_from(plan.writes.len()).unwrap_or(u32::MAX);
            if shards_written == 0 && !call.keyed {
                return Ok(call.result(0, plan.amounts, false));
            }
            match self.commit(&call, &plan, &ent, now, attempt).await? {
                Sent::Applied => return Ok(call.result(shards_written, plan.amounts, false)),
                Sent::Again(error) => last = Some(error),
            }
        }
        // The last attempt may have landed after all.
        let read = self.operation_read(&call).await?;
        let ent = incarnation.unwrap_or_else(|| record::incarnation(read.meta.as_ref()));
        if let Some(found) = self.recorded(&call, read.record, &ent)? {
            return Ok(found);
        }
        Err(last.unwrap_or(RepositoryError::Contended {
            operation: "TransactWriteItems",
            attempts: OPERATION_ATTEMPTS,
        }))
    }

    /// The result a stored record gives `call`, when the record exists and belongs to the
    /// entity incarnation `ent`.
    fn recorded(
        &self,
        call: &Call<'_>,
        found: Option<OperationRecord>,
        ent: &str,
    ) -> Result<Option<BucketOperation>, RepositoryError> {
        let Some(found) = found.filter(|r| r.belongs_to(ent)) else {
            return Ok(None);
        };
        if !found.is(call.kind) {
            return Err(RepositoryError::IdempotencyKeyReused {
                key: call.operation_id.clone(),
                recorded: found.operation,
            });
        }
        let mine = found.writer.as_deref() == Some(call.writer.as_str());
        Ok(Some(call.result(found.shards, found.amounts, !mine)))
    }

    /// One strongly consistent `BatchGetItem`: the owner's META, the operation's record and
    /// the configuration levels of the pair.
    async fn operation_read(&self, call: &Call<'_>) -> Result<Read, RepositoryError> {
        let ns = &self.scope.id;
        let meta = meta_key(ns, call.entity_id);
        let op = record::record_key(ns, call.entity_id, call.resource, &call.operation_id);
        let levels = config::levels(call.entity_id, call.resource);
        let mut keys = vec![meta.clone(), op.clone()];
        keys.extend(levels.iter().map(|(_, slot)| slot.key(ns)));
        let found = batch_get_items(&self.shared.client, &self.shared.table, keys, true).await?;
        let take = |key: &Item| {
            found
                .iter()
                .find(|it| item::key_of(it) == item::key_of(key))
                .cloned()
        };
        Ok(Read {
            meta: take(&meta),
            record: take(&op)
                .as_ref()
                .map(OperationRecord::from_item)
                .transpose()?,
            levels: levels
                .iter()
                .map(|(level, slot)| (*level, take(&slot.key(ns))))
                .collect(),
        })
    }

    /// Sends one attempt's transaction: every shard's write, the record and the audit event,
    /// under the `ClientRequestToken` `{writer}-{attempt}` (the SDK sends a request whose
    /// answer was lost again with it, and DynamoDB applies a token once).
    async fn commit(
        &self,
        call: &Call<'_>,
        plan: &OperationPlan,
        ent: &str,
        now: i64,
        attempt: u32,
    ) -> Result<Sent, RepositoryError> {
        let store = self.buckets();
        let shards = u32::try_from(plan.writes.len()).unwrap_or(u32::MAX);
        let mut items = Vec::with_capacity(plan.writes.len() + 2);
        for write in &plan.writes {
            let update = store.operation_update(&call.key(write.shard), write)?;
            items.push(TransactWriteItem::builder().update(update).build());
        }
        let op = NewRecord {
            entity_id: call.entity_id,
            resource: call.resource,
            operation_id: &call.operation_id,
            kind: call.kind,
            writer: &call.writer,
            incarnation: ent,
            shards,
            amounts: &plan.amounts,
            at: now,
        }
        .into_item(&self.scope.id);
        let action = match call.kind {
            OperationKind::Reset => AuditAction::BucketReset,
            OperationKind::TopUp => AuditAction::BucketToppedUp,
        };
        let (_, event) = self
            .audit_item(
                call.entity_id,
                action,
                call.principal,
                Some(call.resource),
                operation_details(&plan.amounts, shards),
            )
            .await;
        for (it, condition) in [(op, Some(put_condition(ent))), (event, None)] {
            let mut put = Put::builder()
                .table_name(&self.shared.table)
                .set_item(Some(it));
            if let Some(c) = &condition {
                put = put.with_expr(c);
            }
            let put = put.build().map_err(|e| RepositoryError::InvalidRequest {
                operation: "TransactWriteItems",
                code: "ConstructionFailure".to_owned(),
                message: e.to_string(),
            })?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let sent = self
            .shared
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(format!("{}-{attempt}", call.writer))
            .send()
            .await;
        let err = match sent {
            Ok(_) => return Ok(Sent::Applied),
            Err(err) => err,
        };
        let lost_race = || RepositoryError::Contended {
            operation: "TransactWriteItems",
            attempts: OPERATION_ATTEMPTS,
        };
        match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(t)) => {
                let permanent = t.cancellation_reasons().iter().find_map(|r| {
                    let code = r.code().unwrap_or("None");
                    PERMANENT_REASONS.contains(&code).then(|| code.to_owned())
                });
                return match permanent {
                    Some(code) => Err(RepositoryError::InvalidRequest {
                        operation: "TransactWriteItems",
                        code,
                        message: format!(
                            "{} of {:?} on {:?} cancelled",
                            kind_name(call.kind),
                            call.entity_id,
                            call.resource
                        ),
                    }),
                    None => Ok(Sent::Again(lost_race())),
                };
            }
            Some(TransactWriteItemsError::TransactionInProgressException(_)) => {
                return Ok(Sent::Again(lost_race()));
            }
            _ => {}
        }
        Ok(match retry::sdk_attempt(&err) {
            Attempt::Applied => Sent::Applied,
            Attempt::MaybeApplied => Sent::Again(retry::unknown(
                "TransactWriteItems",
                crate::error::error_chain(&err),
            )),
            Attempt::Refused => return Err(classify("TransactWriteItems", err)),
        })
    }
}

/// Cancellation reasons that no new attempt can change.
const PERMANENT_REASONS: &[&str] = &["ValidationError", "ItemCollectionSizeLimitExceeded"];

/// The limits of the first level that has any, and that level. Levels are decoded in turn
/// until one has limits, so a level dynalimit cannot read refuses the operation when it
/// would answer.
fn resolve(
    levels: Vec<(ConfigLevel, Option<Item>)>,
) -> Result<(Vec<Limit>, Option<ConfigLevel>), RepositoryError> {
    for (level, found) in levels {
        let Some(found) = found else {
            continue;
        };
        let decoded = config::decode(&found)?;
        if !decoded.limits.is_empty() {
            return Ok((decoded.limits, Some(level)));
        }
    }
    Ok((Vec::new(), None))
}
