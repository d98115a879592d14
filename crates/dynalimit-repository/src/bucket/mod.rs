//! Bucket items (reference §1.4.7): the acquire's DynamoDB algorithm, planning and requests.
//!
//! `decide` says what to write, given what was read, without I/O. [`BucketStore`] sends its
//! plans as single DynamoDB requests and turns their answers back into [`BucketImage`]s. A
//! failed condition is an ordinary outcome (the image returned with it decides what happens
//! next), a transaction conflict is retried with full jitter up to [`CONFLICT_ATTEMPTS`]
//! attempts in all and then reported as contention (a `Contended` outcome of the acquire's
//! writes, which the caller turns into a contended rejection; [`RepositoryError::Contended`] from a lease's net change and from the
//! pause stamp, which have no rejection to give), and every other failure is a
//! [`RepositoryError`]. No write retries conflicts without bound.
//!
//! | operation | request | condition |
//! |---|---|---|
//! | [`BucketStore::speculative_consume`] | `UpdateItem` | exists, `tk >= amount`, `wcu`, `ttl`, `disabled`, `vu`, no pause in force |
//! | [`BucketStore::create`] | `TransactWriteItems` (Put + owner META check + donors' moves) | `attribute_not_exists(PK)`, donors' `tk >= amount` and pins |
//! | [`BucketStore::refill`] | `UpdateItem` | `rf = :read`, no pause in force, floors, pins |
//! | [`BucketStore::consume_only`] | `UpdateItem` | `tk >= amount`, no pause in force |
//! | [`BucketStore::bypass_consume`] | `UpdateItem` | exists, a bypass stamp, no pause in force |
//! | [`BucketStore::apply_delta`] | `UpdateItem` (then a trimming retry) | exists, ceiling guards |
//! | `BucketStore::stamp_access` | `UpdateItem` | exists |
//! | [`BucketStore::stamp_pause`] | `UpdateItem` on every existing shard | exists, stamp absent, earlier, or further ahead than a pause lasts |
//! | [`BucketStore::double_shards`] | `TransactWriteItems`: every shard below `old` (rf-locked, gives part of its balances) + a Put of its twin + owner META check | `rf = :read`, `shard_count = :old`, floors; `attribute_not_exists(PK)` |
//! | [`BucketStore::create_shard`] | `TransactWriteItems` (Put of a clone + owner META check + donors' moves) | as a create |
//! | [`BucketStore::propagate_shard_count`] | `UpdateItem` on shards `1..old` | `shard_count < :new` |

mod consume;
// The pure planning of the bucket writes: the engine's (`crate::acquire`) and this store's,
// reachable from outside only for the workspace's tests.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod decide;
#[cfg(not(feature = "test-support"))]
#[allow(unreachable_pub)]
pub(crate) mod decide;
mod pause;
#[cfg(test)]
mod sizes;
mod split;
pub mod throttling;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::bucket::decide::{
    BucketImage, CreatePlan, DeltaPlan, Move, ProactiveRefill, RefillPlan,
};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use aws_smithy_types::retry::RetryConfig;
use bytes::Bytes;
use dynalimit_core::Limit;
use dynalimit_core::operation::{OperationShard, ShardWrite};
use futures::future::join_all;

pub use dynalimit_format::bucket::{BucketKey, Meta, MetaCheck, Owner};
use dynalimit_format::bucket::{create_item, image_from_item, live_pause};
use dynalimit_format::config::{self, Access, ConfigLevel, LimitConfig};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::item::{self, Item, get_s as get_str};
use dynalimit_format::schema::{GSI2, GSI3, GSI4};
use dynalimit_format::{FormatError, attr, keys};

use crate::RepositoryError;
use crate::batch::{batch_get_items, get_item};
use crate::error::{classify, classify_code, error_chain};
pub use crate::retry::OnThrottle;
use crate::retry::{self, Attempt, Resend, RetryBackoff};
use crate::wire::{FastPath, UpdateItem, UpdateOutcome, Written};

/// What the slow path of an acquire reads of one shard in one `BatchGetItem` (reference
/// §3.7): the shard's item, the owner's META, the pause stamps in force and every
/// configuration level of the pair, uncached (the access walk must see the current
/// `disabled` and cascade flags).
#[derive(Debug, Clone)]
pub struct SlowRead {
    /// The shard's item, when it exists.
    pub image: Option<BucketImage>,
    /// The owner's META ([`Meta::absent`] without one).
    pub meta: Meta,
    /// The latest pause deadline in force at the read's `now`, on the shard or on shard 0
    /// (which carries the stamp of a pair whose shard is not created yet).
    pub pause: Option<i64>,
    /// The configuration levels of the pair in precedence order (entity, entity default,
    /// resource, system; the two middle ones only for a resource other than `_default_`),
    /// each with its stored configuration when it has an item.
    pub levels: Vec<(ConfigLevel, Option<LimitConfig>)>,
}

/// Result of a speculative consume or a consumption-only retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumeOutcome {
    /// Written; the item after the write.
    Consumed(BucketImage),
    /// The condition failed; the item before the attempt (`None`: no item).
    Failed(Option<BucketImage>),
    /// The item carries a pause stamp in force until this deadline (epoch ms); nothing was
    /// written.
    Paused(i64),
    /// Transaction conflicts persisted through the retries.
    Contended,
    /// DynamoDB refused the write for throughput (`ProvisionedThroughputExceededException`,
    /// `ThrottlingException`): nothing was applied. Only with [`OnThrottle::Return`]; holds
    /// the refusal's [`RepositoryError::Throttled`] fields.
    Throttled {
        /// The refused operation.
        operation: &'static str,
        /// What DynamoDB said.
        message: String,
    },
}

/// Result of [`BucketStore::double_shards`].
#[derive(Debug)]
pub struct Doubling {
    /// The shard count to use from now on.
    pub count: u32,
    /// Shards whose propagation write failed, with the error; the count on them is still
    /// lower until a later propagation heals them.
    pub failed: Vec<(u32, RepositoryError)>,
}

/// Result of [`BucketStore::propagate_shard_count`].
#[derive(Debug, Default)]
pub struct Propagation {
    /// Shards that took the new count now.
    pub updated: Vec<u32>,
    /// Shards whose write failed, with the error.
    pub failed: Vec<(u32, RepositoryError)>,
}

/// Result of a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The item was created.
    Created,
    /// Another writer created it first.
    Lost,
    /// The owner's META changed since it was read (moved, recreated, created).
    OwnerChanged,
    /// A balance to move from a sibling changed since it was read (spent, granted anew, the
    /// period turned, the count raised), or a shard created with it exists already: nothing
    /// was written; plan again.
    MoveLost,
    /// Transaction conflicts persisted through the retries.
    Contended,
}

/// What a bucket transaction came to.
#[derive(Debug)]
enum Transacted {
    /// Applied.
    Done,
    /// Cancelled by a failed condition: the cancellation code of each item, in order.
    Failed(Vec<String>),
    /// Transaction conflicts persisted through the retries.
    Contended,
}

/// The cancellation code of an item whose condition failed.
const CONDITION_FAILED: &str = "ConditionalCheckFailed";

/// Result of an rf-locked write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefillOutcome {
    /// Written.
    Applied,
    /// The lock or a guard failed: somebody wrote in between.
    LostLock,
    /// Transaction conflicts persisted through the retries.
    Contended,
}

/// Result of a lease's net change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaOutcome {
    /// Written within the guards.
    Applied,
    /// Written unguarded with `vu = 0` (a credit could exceed the ceiling).
    Trimmed,
    /// The item no longer exists; nothing written.
    Gone,
}

/// What one bucket `UpdateItem` writes.
#[derive(Debug, Clone, Copy)]
enum Write<'a> {
    /// A write built as an expression.
    Expr(&'a Expr),
    /// The speculative consume of `demand` at `now` ([`writes::speculative_consume`]), sent
    /// from its prepared shape on the fast path ([`consume::ConsumeShape`]).
    Consume {
        demand: &'a BTreeMap<String, i64>,
        now: i64,
    },
}

impl Write<'_> {
    /// The write's expression: `built` holds it when it is built here.
    fn expr<'e>(&'e self, built: &'e mut Option<Expr>) -> &'e Expr {
        match *self {
            Write::Expr(e) => e,
            Write::Consume { demand, now } => {
                built.insert(writes::speculative_consume(demand, now))
            }
        }
    }
}

// The image is moved once per write and read at once; boxing it would cost every acquire
// an allocation.
#[allow(clippy::large_enum_variant)]
/// What one bucket `UpdateItem` came to. A write that lost to transactions through every
/// attempt is no outcome but [`RepositoryError::Contended`], decided in one place
/// ([`BucketStore::send`]).
enum Update {
    /// Applied; the item after the write when it was asked for (`ALL_NEW`) and the answer
    /// carries one (an error when it holds a value out of bounds).
    Done(Option<Result<BucketImage, FormatError>>),
    /// The condition failed; the item before the attempt (`None`: no item).
    ConditionFailed(Option<Item>),
}

impl Update {
    /// Whether the write was applied (its condition held).
    fn applied(&self) -> bool {
        matches!(self, Update::Done(_))
    }
}

/// Attempts of one bucket write while it loses to other transactions (a
/// `TransactionConflictException`): the first try and three retries, each after a full-jitter
/// pause below 25, 50 and 100 ms. A conflict changes nothing, so each attempt is a fresh try.
pub const CONFLICT_ATTEMPTS: u32 = 4;

/// How a bucket transaction is sent again after DynamoDB refused it for throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// As the client's retry configuration says.
    Client,
    /// Soon and often: the writes of a split (the doubling, the funding of a shard it brought
    /// into use), which relieve a hot partition and so must win a turn on a partition that
    /// the load they relieve keeps refusing. Up to [`PERSISTENT_ATTEMPTS`] attempts after
    /// refusals for throughput (of the request or of one of its items), with the pauses of
    /// [`RetryBackoff::SPLIT`] (about a second in all, two at most), outside the SDK's retry
    /// quota and the repository's retry budget: one split of a bucket is in flight in a
    /// limiter at a time. A client whose configuration sends nothing again gets one attempt.
    Persistent,
}

/// The most attempts of a split's transaction refused for throughput ([`Pace::Persistent`]).
const PERSISTENT_ATTEMPTS: u32 = 8;

/// A `ClientRequestToken` for one transaction (up to 36 characters): 32 random hex digits.
fn new_request_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Reads and writes bucket items of one namespace in one table.
#[derive(Debug, Clone)]
pub struct BucketStore {
    client: Client,
    table: String,
    ns: String,
    wire: Option<Arc<FastPath>>,
    budget: Arc<retry::Budget>,
    /// The speculative consume's prepared requests, per set of limit names.
    shapes: Arc<consume::ConsumeShapes>,
}

impl BucketStore {
    /// Whether the client's retry configuration sends a write again after a refusal for
    /// throughput (more than one attempt).
    pub fn retries_throttled_writes(&self) -> bool {
        retry::max_attempts(self.client.config().retry_config()) > 1
    }

    /// A store over `table`, for namespace id `ns`.
    pub fn new(client: Client, table: impl Into<String>, ns: impl Into<String>) -> Self {
        BucketStore {
            client,
            table: table.into(),
            ns: ns.into(),
            wire: None,
            budget: Arc::default(),
            shapes: Arc::default(),
        }
    }

    /// Sends this store's `UpdateItem`s over `wire` (the fast path) instead of the SDK.
    pub(crate) fn with_fast_path(mut self, wire: Option<Arc<FastPath>>) -> Self {
        self.wire = wire;
        self
    }

    /// Pays the retries of this store's SDK-path `UpdateItem`s from `budget` (shared with
    /// the fast path of the same repository).
    pub(crate) fn with_retry_budget(mut self, budget: Arc<retry::Budget>) -> Self {
        self.budget = budget;
        self
    }

    /// The namespace id.
    pub fn namespace_id(&self) -> &str {
        &self.ns
    }

    /// The primary key of an entity's META item.
    fn meta_key(&self, entity_id: &str) -> Item {
        dynalimit_format::entity::meta_key(&self.ns, entity_id)
    }

    /// One `UpdateItem` of an expression: [`BucketStore::send`] with throttled attempts sent
    /// again as the client's retry configuration says.
    async fn update(
        &self,
        key: &BucketKey,
        e: &Expr,
        return_new: bool,
        resend: Resend,
    ) -> Result<Update, RepositoryError> {
        self.send(key, Write::Expr(e), return_new, (resend, OnThrottle::Retry))
            .await
    }

    /// Sends one bucket `UpdateItem`, on the fast path when the store has one, and tries it
    /// again while it loses to transactions: [`CONFLICT_ATTEMPTS`] attempts, then
    /// [`RepositoryError::Contended`]. An attempt that may have been applied is not sent again
    /// unless `resend` is [`Resend::Harmless`] (see [`crate::retry`]).
    async fn send(
        &self,
        key: &BucketKey,
        write: Write<'_>,
        return_new: bool,
        policy: (Resend, OnThrottle),
    ) -> Result<Update, RepositoryError> {
        let span = request_span("UpdateItem", key);
        let mut attempt = 1;
        let result = tracing::Instrument::instrument(
            async {
                loop {
                    let sent = match &self.wire {
                        Some(wire) => self.send_fast(wire, key, write, return_new, policy).await,
                        None => {
                            let mut built = None;
                            // Boxed: the SDK's future is large, and the fast path's callers
                            // should not carry it.
                            let e = write.expr(&mut built);
                            Box::pin(self.update_sdk(key, e, return_new, policy)).await
                        }
                    };
                    match sent {
                        Err(RepositoryError::TransactionConflict { .. })
                            if attempt < CONFLICT_ATTEMPTS =>
                        {
                            crate::metrics::contention_retry("UpdateItem");
                            RetryBackoff::CONFLICT.pause(attempt).await;
                            attempt += 1;
                        }
                        Err(RepositoryError::TransactionConflict { .. }) => return Err(contended()),
                        done => return done,
                    }
                }
            },
            span.clone(),
        )
        .await;
        span.record("attempts", attempt);
        span.record(
            "outcome",
            match &result {
                Ok(Update::Done(_)) => "done",
                Ok(Update::ConditionFailed(_)) => "condition_failed",
                Err(RepositoryError::Contended { .. }) => "conflict",
                Err(_) => "error",
            },
        );
        result
    }

    /// One attempt on the fast path: the warm acquire's prepared request (its image read from
    /// the answer's bytes), or any write rendered from its expression.
    async fn send_fast(
        &self,
        wire: &FastPath,
        key: &BucketKey,
        write: Write<'_>,
        return_new: bool,
        (resend, on_throttle): (Resend, OnThrottle),
    ) -> Result<Update, RepositoryError> {
        if let Write::Consume { demand, now } = write
            && let Some(shape) = self.shapes.of(demand)
        {
            let body = shape.body(&self.table, &key.pk(&self.ns), demand, now);
            return Ok(
                match wire
                    .update_item_body(Bytes::from(body), resend, on_throttle)
                    .await?
                {
                    Written::Updated(answer) => Update::Done(consume::image_of_answer(&answer)),
                    Written::ConditionFailed(old) => Update::ConditionFailed(old),
                },
            );
        }
        let mut built = None;
        let e = write.expr(&mut built);
        let key = key.key_map(&self.ns);
        let update = e.update_expression();
        let condition = e.condition_expression();
        let names = e.name_pairs();
        let request = UpdateItem {
            table: &self.table,
            key: &key,
            update_expression: update.as_deref(),
            condition_expression: condition.as_deref(),
            names: &names,
            values: e.value_pairs(),
            return_all_new: return_new,
            return_old_on_failure: true,
            resend,
        };
        Ok(
            match wire.update_item_on_throttle(&request, on_throttle).await? {
                UpdateOutcome::Updated(item) => Update::Done(image_if(return_new, item)),
                UpdateOutcome::ConditionFailed(old) => Update::ConditionFailed(old),
            },
        )
    }

    /// The SDK's `UpdateItem`, with the SDK's own retries off: the attempts follow the
    /// client's retry configuration under the rules of [`crate::retry`], which the SDK's
    /// retry classifier does not know (it sends a write again after a timeout or a 5xx).
    async fn update_sdk(
        &self,
        key: &BucketKey,
        e: &Expr,
        return_new: bool,
        (resend, on_throttle): (Resend, OnThrottle),
    ) -> Result<Update, RepositoryError> {
        let config = self.client.config();
        let backoff = retry::RetryBackoff::of_client(config.retry_config());
        let max_attempts = retry::max_attempts(config.retry_config());
        let mut attempt = 0;
        let mut paid = 0;
        if on_throttle == OnThrottle::Resume {
            // The first attempt was refused for throughput before this call: the first retry.
            if max_attempts <= 1 || !self.budget.pay(retry::THROTTLING_RETRY_COST) {
                return Err(retry::throttled_again("UpdateItem"));
            }
            paid += retry::THROTTLING_RETRY_COST;
            attempt = 1;
            backoff.pause(attempt).await;
        }
        loop {
            attempt += 1;
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key.key_map(&self.ns)))
                .with_expr(e)
                .return_values(if return_new {
                    ReturnValue::AllNew
                } else {
                    ReturnValue::None
                })
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .customize()
                .config_override(
                    aws_sdk_dynamodb::Config::builder().retry_config(RetryConfig::disabled()),
                )
                .send()
                .await;
            let err = match result {
                Ok(out) => {
                    self.budget.succeeded(paid);
                    return Ok(Update::Done(image_if(return_new, out.attributes)));
                }
                Err(err) => err,
            };
            match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    return Ok(Update::ConditionFailed(c.item().cloned()));
                }
                Some(UpdateItemError::TransactionConflictException(_)) => {
                    return Err(RepositoryError::TransactionConflict {
                        operation: "UpdateItem",
                    });
                }
                _ => {}
            }
            let last = attempt >= max_attempts;
            match retry::sdk_attempt(&err) {
                Attempt::Applied => {
                    self.budget.succeeded(paid);
                    return Ok(Update::Done(None));
                }
                Attempt::MaybeApplied
                    if last || resend == Resend::Never || !self.budget.pay(retry::RETRY_COST) =>
                {
                    return Err(retry::unknown("UpdateItem", error_chain(&err)));
                }
                Attempt::MaybeApplied => paid += retry::RETRY_COST,
                Attempt::Refused => {
                    let refused = classify("UpdateItem", err);
                    let throttled = matches!(refused, RepositoryError::Throttled { .. });
                    let cost = if throttled {
                        retry::THROTTLING_RETRY_COST
                    } else {
                        retry::RETRY_COST
                    };
                    let elsewhere = throttled && !on_throttle.retries();
                    if last || elsewhere || !refused.is_retryable() || !self.budget.pay(cost) {
                        return Err(refused);
                    }
                    paid += cost;
                }
            }
            backoff.pause(attempt).await;
        }
    }

    async fn consume_with(
        &self,
        key: &BucketKey,
        write: Write<'_>,
        now: i64,
        on_throttle: OnThrottle,
    ) -> Result<ConsumeOutcome, RepositoryError> {
        let written = self
            .send(key, write, true, (Resend::Never, on_throttle))
            .await;
        Ok(match written {
            Err(RepositoryError::Throttled { operation, message }) if !on_throttle.retries() => {
                ConsumeOutcome::Throttled { operation, message }
            }
            Err(RepositoryError::Contended { .. }) => ConsumeOutcome::Contended,
            Err(e) => return Err(e),
            // Applied to an item holding a value out of bounds: the debit stands (the
            // item's own balance admitted it) and the item is reported corrupt.
            Ok(Update::Done(Some(image))) => ConsumeOutcome::Consumed(image?),
            // Applied, but the answer lacks the item asked for (`ALL_NEW`). The write stands;
            // the item is read back, strongly consistent, so the caller still learns the
            // owner stamps (cascade, parent) and the limits for its credit guards. An empty
            // image would read as "no cascade" and skip the parent.
            Ok(Update::Done(_)) => match Box::pin(self.get(key, true)).await? {
                Some(img) => ConsumeOutcome::Consumed(img),
                None => {
                    return Err(RepositoryError::corrupt(
                        key.pk(&self.ns),
                        "a consume was applied, but the item is gone and its answer had no \
                         attributes",
                    ));
                }
            },
            Ok(Update::ConditionFailed(old)) => {
                match old.as_ref().and_then(|i| live_pause(i, now)) {
                    Some(until) => ConsumeOutcome::Paused(until),
                    None => ConsumeOutcome::Failed(old.as_ref().map(image_from_item).transpose()?),
                }
            }
        })
    }

    /// The speculative consume (one `UpdateItem`): debits `demand` (millitokens per limit) and
    /// one `wcu` token.
    ///
    /// A success whose answer carries no item (`ALL_NEW` missing or empty, or a 2xx body cut
    /// short or longer than [`crate::MAX_RESPONSE_BYTES`]) is followed by a strongly
    /// consistent `GetItem` of the item. Should that read fail, the debit stands and the error
    /// is returned: the caller loses the tokens, never gets them twice.
    ///
    /// An answer lost after the request may have reached DynamoDB (a connection failing after
    /// the request left, a timeout, a 5xx) is [`RepositoryError::OutcomeUnknown`]; the debit
    /// is never sent again, so it counts once or not at all (test
    /// `suite::ambiguous::fast_path_a_consume_answered_5xx_after_it_landed_is_unknown_and_counted_once`
    /// and its SDK-path twin). A quota's credit carries its period and grant pins in both
    /// shapes, so a credit whose answer was lost lands once, in its period, or not at all
    /// (test `suite::outcomes::quota_credit`).
    ///
    /// A write DynamoDB refuses for throughput applied nothing: with [`OnThrottle::Return`]
    /// it is not sent again to this shard, and [`ConsumeOutcome::Throttled`] lets the caller
    /// send it to another; with [`OnThrottle::Retry`] (or [`OnThrottle::Resume`], after such
    /// a refusal) it is sent again as the client's retry configuration says, and a refusal
    /// that outlasts it is [`RepositoryError::Throttled`].
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn speculative_consume(
        &self,
        key: &BucketKey,
        demand: &BTreeMap<String, i64>,
        now: i64,
        on_throttle: OnThrottle,
    ) -> Result<ConsumeOutcome, RepositoryError> {
        self.consume_with(key, Write::Consume { demand, now }, now, on_throttle)
            .await
    }

    /// The consumption-only retry after a lost lock or a lost create (refused while a pause
    /// stamp is in force at `now`). A lost answer is handled as for
    /// [`BucketStore::speculative_consume`]: never sent again.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn consume_only(
        &self,
        key: &BucketKey,
        retry: &[(String, i64)],
        now: i64,
    ) -> Result<ConsumeOutcome, RepositoryError> {
        let e = writes::consumption_only(retry, now);
        self.consume_with(key, Write::Expr(&e), now, OnThrottle::Retry)
            .await
    }

    /// The consume of a bypassed pair on the slow path (reference §12.1): `ADD tc` per
    /// declared limit and the bypass stamp renewed to `until`, on an item that still carries
    /// a stamp (refused while a pause stamp is in force at `now`). A failed condition (the
    /// stamp was removed meanwhile) is `Failed`, and the caller plans the acquire enforced. A
    /// lost answer is handled as for [`BucketStore::speculative_consume`]: never sent again,
    /// so the count moves once or not at all (`suite::outcomes::bypass_consume`).
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn bypass_consume(
        &self,
        key: &BucketKey,
        demand: &BTreeMap<String, i64>,
        until: i64,
        now: i64,
    ) -> Result<ConsumeOutcome, RepositoryError> {
        self.consume_with(
            key,
            Write::Expr(&writes::bypass_consume(demand, until, now)),
            now,
            OnThrottle::Retry,
        )
        .await
    }

    /// The rf-locked materialising write, with the owner stamp when `owner` is given
    /// (reference §3.7.2, §12.5; a lost owner pin reads as a lost lock).
    ///
    /// Never sent again after a lost answer: a second attempt would fail its own `rf` lock,
    /// read as a lost lock, and the caller would consume again. The caller gets
    /// [`RepositoryError::OutcomeUnknown`] instead (the write counted once or not at all).
    /// The same holds for what the write stamps with it: the next schedule boundary (`vu`),
    /// a quota's new grant (`b_{name}_gc`, dropped `tu`) and seeded schedules (tests
    /// `suite::outcomes::rf_locked_refill`, `quota_grant`).
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn refill(
        &self,
        key: &BucketKey,
        plan: &RefillPlan,
        owner: Option<&Owner>,
    ) -> Result<RefillOutcome, RepositoryError> {
        let e = writes::refill_write(plan, owner);
        Ok(match self.update(key, &e, false, Resend::Never).await {
            Ok(sent) if sent.applied() => RefillOutcome::Applied,
            Ok(_) => RefillOutcome::LostLock,
            Err(RepositoryError::Contended { .. }) => RefillOutcome::Contended,
            Err(e) => return Err(e),
        })
    }

    /// Writes a lease's net change: guarded first, then (if a credit could exceed the
    /// ceiling) unguarded with `SET vu = 0`.
    ///
    /// A write that keeps losing to other transactions is tried [`CONFLICT_ATTEMPTS`] times
    /// and then reported; a conflict on the guarded shape never escalates to the unguarded
    /// one (only a failed guard does). A conflict applies nothing, so after
    /// [`RepositoryError::Contended`] the item is as it was.
    ///
    /// A lost answer (the connection fails or times out after the request left, or a 5xx)
    /// is [`RepositoryError::OutcomeUnknown`]: the write is not sent again and never
    /// escalates to the unguarded shape, so a credit lands once or not at all (test
    /// `suite::ambiguous::fast_path_a_rollback_answered_5xx_after_it_landed_is_credited_once`
    /// and its SDK-path twin).
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when transaction conflicts persist through every
    /// attempt; [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn apply_delta(
        &self,
        key: &BucketKey,
        plan: &DeltaPlan,
    ) -> Result<DeltaOutcome, RepositoryError> {
        if plan.is_empty() {
            return Ok(DeltaOutcome::Applied);
        }
        for trim in [false, true] {
            match self
                .update(key, &writes::delta(plan, trim), false, Resend::Never)
                .await?
            {
                Update::Done(_) => {
                    return Ok(if trim {
                        DeltaOutcome::Trimmed
                    } else {
                        DeltaOutcome::Applied
                    });
                }
                Update::ConditionFailed(None) => return Ok(DeltaOutcome::Gone),
                Update::ConditionFailed(Some(_)) => {}
            }
        }
        Ok(DeltaOutcome::Gone)
    }

    /// Creates a missing bucket item in one transaction with a `ConditionCheck` on the
    /// owner's META as read (reference §3.7.3), the donors' side of `moves` (a shard other
    /// than 0 funded by its siblings, `decide::plan_funding`), and `others`:
    /// the other shards of a bucket recreated whole after every shard was swept, each at its
    /// share.
    ///
    /// A lost answer is sent again by the SDK with the same `ClientRequestToken`, which
    /// DynamoDB answers as the first time without applying the transaction again: the item
    /// is created once and the donors are debited once (tests
    /// `suite::ambiguous::a_bucket_create_answered_5xx_after_it_landed_is_applied_once`,
    /// `suite::outcomes::create_with_a_move` and `create_with_a_grant_move`). An error after
    /// the SDK's attempts leaves the outcome unknown: applied once or not at all.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn create(
        &self,
        key: &BucketKey,
        plan: &CreatePlan,
        owner: &Owner,
        check: &MetaCheck,
        moves: &[Move],
        others: &[(u32, CreatePlan)],
    ) -> Result<CreateOutcome, RepositoryError> {
        let absent = crate::namespace::absent();
        let put = |key: &BucketKey, plan: &CreatePlan| {
            Put::builder()
                .table_name(&self.table)
                .set_item(Some(create_item(&self.ns, key, plan, owner)))
                .with_expr(&absent)
                .build()
                .map(|put| TransactWriteItem::builder().put(put).build())
                .map_err(|e| build_error("TransactWriteItems", &e))
        };
        let mut items = vec![put(key, plan)?, self.meta_check(&key.entity_id, check)?];
        for (shard, other) in others {
            items.push(put(&key.with_shard(*shard), other)?);
        }
        items.extend(self.move_updates(key, moves)?);
        Ok(match self.transact(key, items, Pace::Client).await? {
            Transacted::Done => CreateOutcome::Created,
            Transacted::Contended => CreateOutcome::Contended,
            Transacted::Failed(reasons) => {
                let failed = |i: usize| reasons.get(i).is_some_and(|r| r == CONDITION_FAILED);
                if failed(0) {
                    CreateOutcome::Lost
                } else if failed(1) {
                    CreateOutcome::OwnerChanged
                } else {
                    CreateOutcome::MoveLost
                }
            }
        })
    }

    /// The `ConditionCheck` of a create on the owner's META as read.
    fn meta_check(
        &self,
        entity_id: &str,
        check: &MetaCheck,
    ) -> Result<TransactWriteItem, RepositoryError> {
        let meta = meta_condition(check);
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(self.meta_key(entity_id)))
            .with_expr(&meta)
            .build()
            .map_err(|e| build_error("TransactWriteItems", &e))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// The donors' side of `moves` to shards of `key`'s bucket: one update per donor (a
    /// transaction touches an item once).
    fn move_updates(
        &self,
        key: &BucketKey,
        moves: &[Move],
    ) -> Result<Vec<TransactWriteItem>, RepositoryError> {
        let mut donors: BTreeMap<u32, Vec<&Move>> = BTreeMap::new();
        for m in moves {
            donors.entry(m.donor).or_default().push(m);
        }
        donors
            .iter()
            .map(|(donor, moved)| {
                let e = writes::moves(moved);
                aws_sdk_dynamodb::types::Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key.with_shard(*donor).key_map(&self.ns)))
                    .with_expr(&e)
                    .build()
                    .map(|update| TransactWriteItem::builder().update(update).build())
                    .map_err(|e| build_error("TransactWriteItems", &e))
            })
            .collect()
    }

    /// Sends one transaction on `key`'s bucket, again while it loses to other transactions
    /// (at most [`CONFLICT_ATTEMPTS`] attempts), in a span that records its outcome. An
    /// attempt whose answer was lost is sent again with the same `ClientRequestToken` (by the
    /// SDK, or by this loop under [`Pace::Persistent`]), which DynamoDB answers without
    /// applying it twice; one refused for throughput, as `pace` says.
    async fn transact(
        &self,
        key: &BucketKey,
        items: Vec<TransactWriteItem>,
        pace: Pace,
    ) -> Result<Transacted, RepositoryError> {
        let span = request_span("TransactWriteItems", key);
        let sent =
            tracing::Instrument::instrument(self.transact_attempts(items, pace), span.clone())
                .await;
        span.record(
            "outcome",
            match &sent {
                Ok(Transacted::Done) => "done",
                Ok(Transacted::Contended) => "conflict",
                Ok(_) => "condition_failed",
                Err(_) => "error",
            },
        );
        sent
    }

    async fn transact_attempts(
        &self,
        items: Vec<TransactWriteItem>,
        pace: Pace,
    ) -> Result<Transacted, RepositoryError> {
        let config = self.client.config().retry_config();
        // Under `Pace::Persistent` the attempts are this loop's, not the SDK's (whose retry
        // quota a hot partition's refusals may have spent): a lost answer is sent again with
        // the same token, as the SDK would, and so is every later attempt (the transaction may
        // have landed); until then a refusal is sent again with a new one.
        let persistent = pace == Pace::Persistent && self.retries_throttled_writes();
        let (mut conflicts, mut throttled, mut lost) = (0, 0, 0);
        let mut token = persistent.then(new_request_token).unwrap_or_default();
        loop {
            let request = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()));
            let result = if persistent {
                request
                    .client_request_token(token.as_str())
                    .customize()
                    .config_override(
                        aws_sdk_dynamodb::Config::builder().retry_config(RetryConfig::disabled()),
                    )
                    .send()
                    .await
            } else {
                request.send().await
            };
            let err = match result {
                Ok(_) => return Ok(Transacted::Done),
                Err(err) => err,
            };
            if persistent {
                match retry::sdk_attempt(&err) {
                    Attempt::Applied => return Ok(Transacted::Done),
                    Attempt::MaybeApplied if lost + 1 < retry::max_attempts(config) => {
                        lost += 1;
                        RetryBackoff::of_client(config).pause(lost).await;
                        continue;
                    }
                    _ => {}
                }
            }
            let reasons: Option<Vec<String>> = match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(t)) => Some(
                    t.cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect(),
                ),
                Some(TransactWriteItemsError::TransactionInProgressException(_)) => {
                    Some(vec!["TransactionConflict".to_owned()])
                }
                _ => None,
            };
            let refused = match reasons {
                None => classify("TransactWriteItems", err),
                Some(reasons) => {
                    if reasons.iter().any(|r| r == CONDITION_FAILED) {
                        return Ok(Transacted::Failed(reasons));
                    }
                    if reasons.iter().any(|r| r == "TransactionConflict") {
                        if conflicts + 1 >= CONFLICT_ATTEMPTS {
                            return Ok(Transacted::Contended);
                        }
                        crate::metrics::contention_retry("TransactWriteItems");
                        conflicts += 1;
                        RetryBackoff::CONFLICT.pause(conflicts).await;
                        if persistent && lost == 0 {
                            token = new_request_token();
                        }
                        continue;
                    }
                    // Another reason (a throttled item, an invalid one) says what the
                    // transaction met.
                    let reason = reasons
                        .iter()
                        .find(|r| r.as_str() != "None")
                        .map_or("TransactionCanceledException", String::as_str);
                    classify_code(
                        "TransactWriteItems",
                        None,
                        reason,
                        format!("bucket transaction cancelled: {reasons:?}"),
                    )
                }
            };
            // Refused for throughput, the request or one of its items: nothing was applied.
            if persistent
                && matches!(refused, RepositoryError::Throttled { .. })
                && throttled + 1 < PERSISTENT_ATTEMPTS
            {
                throttled += 1;
                RetryBackoff::SPLIT.pause(throttled).await;
                if lost == 0 {
                    token = new_request_token();
                }
                continue;
            }
            return Err(refused);
        }
    }

    /// The aggregator's proactive refill of one bucket item, planned from its image `img`,
    /// the `shard_count` stored on it and the batch's consumption per limit (millitokens,
    /// `decide::plan_proactive_refill`). Returns false when nothing needed writing or a
    /// condition failed (a client wrote first; nothing to do). Never sent again after a lost
    /// answer: its `rf` lock refuses a second application, and the caller reads
    /// [`RepositoryError::OutcomeUnknown`] (the refill landed once or not at all).
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub async fn proactive_refill(
        &self,
        key: &BucketKey,
        img: &BucketImage,
        shard_count: Option<i64>,
        consumed: &BTreeMap<String, i64>,
        now: i64,
    ) -> Result<bool, RepositoryError> {
        let Some(plan) = decide::plan_proactive_refill(img, shard_count, consumed, now) else {
            return Ok(false);
        };
        let e = writes::proactive_refill(&plan);
        Ok(self.update(key, &e, false, Resend::Never).await?.applied())
    }

    /// The aggregator's proactive doubling of shard 0 (`key`) of a hot bucket whose image is
    /// `img`: when its `wcu` projected to `now` is below a fifth of its capacity and the count
    /// is below the cap (`decide::plan_proactive_doubling`), [`BucketStore::double_shards`]
    /// from its count to twice it. `None` when the bucket is not hot.
    ///
    /// # Errors
    /// As [`BucketStore::double_shards`].
    pub async fn proactive_doubling(
        &self,
        key: &BucketKey,
        img: &BucketImage,
        now: i64,
    ) -> Result<Option<Doubling>, RepositoryError> {
        let Some((from, to)) = decide::plan_proactive_doubling(img, now) else {
            return Ok(None);
        };
        Box::pin(self.double_shards(key, from, to, now))
            .await
            .map(Some)
    }

    /// The materialising write after a fast-path debit (`decide::plan_materialise`). Returns false
    /// when a condition failed: another writer moved `rf` (its refill clamped the balance),
    /// or credited the bucket since the debit. Never sent again after a lost answer: its `rf`
    /// lock refuses a second application, so it landed once or not at all, and the caller
    /// reads [`RepositoryError::OutcomeUnknown`]. Not landing leaves the bucket as the shared
    /// format's fast path leaves it.
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub async fn materialise(
        &self,
        key: &BucketKey,
        plan: &ProactiveRefill,
    ) -> Result<bool, RepositoryError> {
        let e = writes::materialise(plan);
        Ok(self.update(key, &e, false, Resend::Never).await?.applied())
    }

    /// Stamps `limits` on one existing bucket item (the parameter sync of §4.3): their
    /// stored parameters, `vu = 0`, no `ttl` when `remove_ttl`, and each soft limit's stamp
    /// until `soft_until` (a hard limit's removed). Returns false when the
    /// item does not exist. The values are absolute, so a write whose answer was lost is sent
    /// again and lands the same.
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub(crate) async fn sync_parameters(
        &self,
        key: &BucketKey,
        limits: &[Limit],
        remove_ttl: bool,
        soft_until: i64,
    ) -> Result<bool, RepositoryError> {
        let e = writes::sync_parameters(limits, remove_ttl, soft_until);
        Ok(self
            .update(key, &e, false, Resend::Harmless)
            .await?
            .applied())
    }

    /// The other shards of `key`'s bucket below `count`, strongly consistent: the donors a
    /// new quota shard's grant may move from (reference §12.3). Sorted by shard.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn sibling_images(
        &self,
        key: &BucketKey,
        count: u32,
    ) -> Result<Vec<(u32, BucketImage)>, RepositoryError> {
        let keys: Vec<(String, String)> = (0..count.min(dynalimit_core::bucket::MAX_SHARD_COUNT))
            .filter(|s| *s != key.shard)
            .map(|s| (key.with_shard(s).pk(&self.ns), keys::STATE_SK.to_owned()))
            .collect();
        let mut out: Vec<(u32, BucketImage)> = Vec::with_capacity(keys.len());
        for ((pk, _), found) in self.batch_get(&keys, true).await? {
            if let Some(key) = BucketKey::parse(&self.ns, &pk) {
                out.push((key.shard, image_from_item(&found)?));
            }
        }
        out.sort_by_key(|(s, _)| *s);
        Ok(out)
    }

    /// The session windows of shard 0 of `key`'s bucket, read strongly consistently
    /// (reference §12.3): the start of each of `names`' windows that is still live at `now`
    /// given its length in seconds. A shard other than 0 that is created or seeds a session
    /// quota joins such a window; an eventually consistent read could miss one a sibling just
    /// opened and hand out a second share in it.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn live_windows(
        &self,
        key: &BucketKey,
        names: &[(String, i64)],
        now: i64,
    ) -> Result<BTreeMap<String, i64>, RepositoryError> {
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        let shard0 = self.get(&key.with_shard(0), true).await?;
        Ok(live_windows_of(shard0.as_ref(), names, now))
    }

    /// Tells every other shard of a bucket of `shard_count` shards about the session windows
    /// `opened` on shard `key.shard`, `(limit, start, length)`: one `UpdateItem` per (shard,
    /// limit), sent together. A sibling whose own window is
    /// still live keeps it; a failed or lost write is not reported (the sibling opens its own
    /// window at its next pass, or applies the next fan-out). Returns how many landed.
    pub async fn fan_out_windows(
        &self,
        key: &BucketKey,
        shard_count: u32,
        opened: &[(String, i64, i64)],
    ) -> usize {
        if shard_count <= 1 || opened.is_empty() {
            return 0;
        }
        let sends = (0..shard_count.min(dynalimit_core::bucket::MAX_SHARD_COUNT))
            .filter(|s| *s != key.shard)
            .flat_map(|shard| {
                opened.iter().map(move |(name, start, rsa)| {
                    let sibling = BucketKey {
                        shard,
                        ..key.clone()
                    };
                    let e = writes::window_fanout(name, *start, *rsa);
                    async move {
                        self.update(&sibling, &e, false, Resend::Harmless)
                            .await
                            .is_ok_and(|sent| sent.applied())
                    }
                })
            });
        join_all(sends)
            .await
            .into_iter()
            .filter(|landed| *landed)
            .count()
    }

    /// Stamps one existing bucket item with its owner's cascade policy and parent (reference
    /// §12.5: the owner stamp of an rf-locked write, under a pin that never lowers a generation of
    /// the same incarnation). Returns false when the item does not exist or already
    /// carries a newer stamp of the same incarnation.
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub(crate) async fn stamp_owner(
        &self,
        key: &BucketKey,
        owner: &Owner,
    ) -> Result<bool, RepositoryError> {
        let e = writes::owner_fanout(owner);
        Ok(self
            .update(key, &e, false, Resend::Harmless)
            .await?
            .applied())
    }

    /// Stamps one existing bucket item's soft limits (reference §12.4): `SET b_{name}_soft =
    /// until` for each of `limits` that is soft, `REMOVE` it for the others. Returns false
    /// when the item does not exist (it is never recreated). Absolute values: a write whose
    /// answer was lost is sent again and lands the same.
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub(crate) async fn stamp_soft(
        &self,
        key: &BucketKey,
        limits: &[Limit],
        until: i64,
    ) -> Result<bool, RepositoryError> {
        let e = writes::soft_stamps(limits, until);
        Ok(self
            .update(key, &e, false, Resend::Harmless)
            .await?
            .applied())
    }

    /// Stamps one existing bucket item with its access mode (reference §4.3): `disabled`,
    /// `bypass` until `bypass_until`, or neither. Returns false when the item does not exist
    /// (it is never recreated). The values are absolute, so a write whose answer was lost is
    /// sent again and lands the same (`suite::outcomes::access_stamp`).
    ///
    /// # Errors
    /// [`RepositoryError::Contended`] when conflicts persist; [`RepositoryError`] when
    /// DynamoDB cannot be reached or refuses the request.
    pub(crate) async fn stamp_access(
        &self,
        key: &BucketKey,
        access: Access,
        bypass_until: i64,
    ) -> Result<bool, RepositoryError> {
        let e = dynalimit_format::bucket::access_stamp(access, bypass_until);
        Ok(self
            .update(key, &e, false, Resend::Harmless)
            .await?
            .applied())
    }

    /// Sets `shard_count = to` on shards `1..from` of `(entity, resource)` under
    /// `shard_count < :to` (never creating an item), keeping their balances as
    /// [`BucketStore::double_shards`] does. Every shard is tried, concurrently; one shard's
    /// failure does not stop the others. Idempotent: a shard already at `to` (or missing)
    /// fails the condition and is left as it is, so a write whose answer is lost is sent
    /// again and lands once (test
    /// `suite::sharding::a_propagation_whose_answer_is_lost_is_sent_again_and_lands_once`).
    pub async fn propagate_shard_count(&self, key: &BucketKey, from: u32, to: u32) -> Propagation {
        self.raise_shard_count(key, 1..from, to).await
    }

    /// Sets `shard_count = to` on `shards` of `(entity, resource)` as
    /// [`BucketStore::propagate_shard_count`] does (under `shard_count < :to`, never creating
    /// an item, balances kept), concurrently. A write whose answer is lost is sent again and
    /// lands once: the second application fails its own condition, which means "already
    /// raised".
    ///
    /// Only shard counts a writer may set are written: nothing when `to` is above
    /// [`MAX_SHARD_COUNT`](dynalimit_core::bucket::MAX_SHARD_COUNT), and only the first 32
    /// of `shards` that lie below `to`.
    pub async fn raise_shard_count(
        &self,
        key: &BucketKey,
        shards: impl IntoIterator<Item = u32>,
        to: u32,
    ) -> Propagation {
        const MAX: u32 = dynalimit_core::bucket::MAX_SHARD_COUNT;
        let propagate = writes::propagate(to);
        let shards = shards
            .into_iter()
            .take(MAX as usize)
            .filter(|s| to <= MAX && *s < to);
        let writes = shards.map(|s| {
            let k = key.with_shard(s);
            let e = &propagate;
            async move { (s, self.update(&k, e, false, Resend::Harmless).await) }
        });
        let mut report = Propagation::default();
        for (shard, result) in join_all(writes).await {
            match result {
                Ok(sent) if sent.applied() => report.updated.push(shard),
                Ok(_) => {}
                Err(e) => report.failed.push((shard, e)),
            }
        }
        report
    }

    /// The slow path's read of shard `key` ([`SlowRead`]), with pause stamps judged at `now`.
    ///
    /// # Errors
    /// [`FormatError::Unsupported`], [`FormatError::Corrupt`] or
    /// [`FormatError::ReservedLimitName`] for a configuration item dynalimit cannot use;
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn read_for_slow_path(
        &self,
        key: &BucketKey,
        now: i64,
    ) -> Result<SlowRead, RepositoryError> {
        let ns = &self.ns;
        let (entity, resource) = (key.entity_id.as_str(), key.resource.as_str());
        let pair = |k: Item| item::key_of(&k).map(|(pk, sk)| (pk.to_owned(), sk.to_owned()));
        let bucket = pair(key.key_map(ns));
        let first = pair(key.with_shard(0).key_map(ns));
        let meta = pair(self.meta_key(entity));
        let levels = Levels::of(ns, entity, resource);
        let wanted: Vec<(String, String)> = [&bucket, &meta, &first]
            .into_iter()
            .flatten()
            .chain(&levels.keys)
            .cloned()
            .collect();
        let span = request_span("BatchGetItem", key);
        let items =
            tracing::Instrument::instrument(self.batch_get(&wanted, false), span.clone()).await;
        span.record("outcome", if items.is_ok() { "done" } else { "error" });
        let items = items?;
        let found = |k: &Option<(String, String)>| k.as_ref().and_then(|k| items.get(k));
        Ok(SlowRead {
            image: found(&bucket).map(image_from_item).transpose()?,
            meta: found(&meta).map_or_else(Meta::absent, Meta::from_item),
            pause: [&bucket, &first]
                .into_iter()
                .filter_map(|k| live_pause(found(k)?, now))
                .max(),
            levels: levels.decode(&items)?,
        })
    }

    /// The configuration levels that answer for `entity` on `resource` (reference §4.1), in
    /// precedence order, read uncached in one `BatchGetItem`: a cascading child's slow pass
    /// reads its parent's to refuse, before its own write, a consumed name that neither
    /// bucket declares.
    ///
    /// # Errors
    /// As [`BucketStore::read_for_slow_path`].
    pub async fn read_levels(
        &self,
        entity: &str,
        resource: &str,
    ) -> Result<Vec<(ConfigLevel, Option<LimitConfig>)>, RepositoryError> {
        let levels = Levels::of(&self.ns, entity, resource);
        let key = BucketKey::new(entity, resource, 0);
        let span = request_span("BatchGetItem", &key);
        let items =
            tracing::Instrument::instrument(self.batch_get(&levels.keys, false), span.clone())
                .await;
        span.record("outcome", if items.is_ok() { "done" } else { "error" });
        levels.decode(&items?)
    }

    /// Reads one bucket item (eventually consistent).
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn read(&self, key: &BucketKey) -> Result<Option<BucketImage>, RepositoryError> {
        self.get(key, false).await
    }

    async fn get(
        &self,
        key: &BucketKey,
        consistent: bool,
    ) -> Result<Option<BucketImage>, RepositoryError> {
        let found = get_item(&self.client, &self.table, key.key_map(&self.ns), consistent).await?;
        Ok(found.as_ref().map(image_from_item).transpose()?)
    }

    /// Reads items by `(PK, SK)`, 100 per `BatchGetItem` (strongly consistent when
    /// `consistent`), retrying unprocessed keys.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached, refuses the request, or leaves
    /// keys unprocessed after the retries.
    async fn batch_get(
        &self,
        keys: &[(String, String)],
        consistent: bool,
    ) -> Result<HashMap<(String, String), Item>, RepositoryError> {
        let mut found = HashMap::new();
        for chunk in keys.chunks(100) {
            let mut request: Vec<Item> = chunk
                .iter()
                .map(|(pk, sk)| item::key(pk.as_str(), sk.as_str()))
                .collect();
            request.sort_by_key(item::describe_key);
            request.dedup();
            for found_item in
                batch_get_items(&self.client, &self.table, request, consistent).await?
            {
                if let Some((pk, sk)) = item::key_of(&found_item) {
                    found.insert((pk.to_owned(), sk.to_owned()), found_item);
                }
            }
        }
        Ok(found)
    }

    /// Every shard of `(entity_id, resource)`, strongly consistent, for a reset or top-up
    /// (reference §12.6). GSI3 discovery is eventually consistent and may miss a shard created
    /// just before, so shard 0 is always read by key, and so is every slot below the highest
    /// stored `shard_count` that discovery did not list. Sorted by shard. An item numbered
    /// 32 or above is no shard of the bucket and is left out.
    ///
    /// # Errors
    /// [`FormatError::Corrupt`] when a shard holds a value out of bounds (a
    /// `shard_count` above 32, say: nothing is collected beyond the cap);
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub(crate) async fn operation_shards(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<Vec<OperationShard>, RepositoryError> {
        let owner = BucketKey::new(entity_id, resource, 0);
        let mut wanted: Vec<u32> = self
            .query_bucket_index(
                GSI3,
                keys::entity_pk(&self.ns, entity_id),
                keys::bucket_gsi3sk_prefix(resource),
            )
            .await?
            .iter()
            .filter_map(|found| BucketKey::parse(&self.ns, get_str(found, attr::PK)?))
            .filter(|k| k.entity_id == entity_id && k.resource == resource)
            // No writer numbers a shard 32 or above: such an item is not part of the bucket.
            .filter(|k| k.shard < dynalimit_core::bucket::MAX_SHARD_COUNT)
            .map(|k| k.shard)
            .chain([0])
            .collect();
        let mut probed = Vec::new();
        let mut shards: Vec<OperationShard> = Vec::new();
        while !wanted.is_empty() {
            wanted.sort_unstable();
            wanted.dedup();
            let keys: Vec<(String, String)> = wanted
                .iter()
                .map(|&s| (owner.with_shard(s).pk(&self.ns), keys::STATE_SK.to_owned()))
                .collect();
            for ((pk, _), found) in self.batch_get(&keys, true).await? {
                if let Some(key) = BucketKey::parse(&self.ns, &pk) {
                    shards.push(OperationShard {
                        shard: key.shard,
                        stored_count: dynalimit_format::bucket::shard_count(&found)?,
                        image: image_from_item(&found)?,
                    });
                }
            }
            probed.append(&mut wanted);
            let top = shards.iter().map(|s| s.image.shards()).max().unwrap_or(1);
            wanted = (0..top)
                .filter(|s| !probed.contains(s) && !shards.iter().any(|h| h.shard == *s))
                .collect();
        }
        shards.sort_by_key(|s| s.shard);
        Ok(shards)
    }

    /// The `Update` of one shard's part of a reset or top-up, for its transaction.
    pub(crate) fn operation_update(
        &self,
        key: &BucketKey,
        plan: &ShardWrite,
    ) -> Result<aws_sdk_dynamodb::types::Update, RepositoryError> {
        aws_sdk_dynamodb::types::Update::builder()
            .table_name(&self.table)
            .set_key(Some(key.key_map(&self.ns)))
            .with_expr(&writes::operation_write(plan))
            .build()
            .map_err(|e| build_error("TransactWriteItems", &e))
    }

    /// Every bucket item of an entity, any resource and shard: GSI3 discovery (every page) and
    /// `BatchGetItem`. Items of bucket partitions whose sort key is not `#STATE` are ignored.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn entity_buckets(
        &self,
        entity_id: &str,
    ) -> Result<Vec<(BucketKey, BucketImage)>, RepositoryError> {
        let keys: Vec<(String, String)> = self
            .query_bucket_index(
                GSI3,
                keys::entity_pk(&self.ns, entity_id),
                keys::BUCKET_INDEX_SK_PREFIX.to_owned(),
            )
            .await?
            .iter()
            .filter_map(|found| {
                Some((
                    get_str(found, attr::PK)?.to_owned(),
                    keys::STATE_SK.to_owned(),
                ))
            })
            .collect();
        let items = self.batch_get(&keys, false).await?;
        let mut found = Vec::with_capacity(items.len());
        for ((pk, _), item) in &items {
            if let Some(key) = BucketKey::parse(&self.ns, pk) {
                found.push((key, image_from_item(item)?));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// Every bucket item of a resource, any entity and shard: GSI2 (projection ALL), every
    /// page.
    ///
    /// # Errors
    /// [`RepositoryError`] when DynamoDB cannot be reached or refuses the request.
    pub async fn resource_buckets(
        &self,
        resource: &str,
    ) -> Result<Vec<(BucketKey, BucketImage)>, RepositoryError> {
        let mut found = Vec::new();
        for found_item in self
            .query_bucket_index(
                GSI2,
                keys::resource_pk(&self.ns, resource),
                keys::BUCKET_INDEX_SK_PREFIX.to_owned(),
            )
            .await?
        {
            if let Some(key) =
                get_str(&found_item, attr::PK).and_then(|pk| BucketKey::parse(&self.ns, pk))
            {
                found.push((key, image_from_item(&found_item)?));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// The keys of every bucket item of `resource`, any entity and shard (GSI2, every page).
    pub(crate) async fn resource_bucket_keys(
        &self,
        resource: &str,
    ) -> Result<Vec<BucketKey>, RepositoryError> {
        let found = self
            .query_bucket_index(
                GSI2,
                keys::resource_pk(&self.ns, resource),
                keys::BUCKET_INDEX_SK_PREFIX.to_owned(),
            )
            .await?;
        Ok(self.keys_of(&found))
    }

    /// The keys of every bucket item of `entity_id` (GSI3, every page), on `resource` only
    /// when given.
    pub(crate) async fn entity_bucket_keys(
        &self,
        entity_id: &str,
        resource: Option<&str>,
    ) -> Result<Vec<BucketKey>, RepositoryError> {
        let prefix = resource.map_or_else(
            || keys::BUCKET_INDEX_SK_PREFIX.to_owned(),
            keys::bucket_gsi3sk_prefix,
        );
        let found = self
            .query_bucket_index(GSI3, keys::entity_pk(&self.ns, entity_id), prefix)
            .await?;
        let mut out = self.keys_of(&found);
        out.retain(|k| resource.is_none_or(|r| k.resource == r));
        Ok(out)
    }

    /// The keys of every bucket item of the namespace (GSI4, every page).
    pub(crate) async fn namespace_bucket_keys(&self) -> Result<Vec<BucketKey>, RepositoryError> {
        let found = self
            .query_bucket_index(
                GSI4,
                self.ns.clone(),
                keys::BUCKET_INDEX_SK_PREFIX.to_owned(),
            )
            .await?;
        Ok(self.keys_of(&found))
    }

    fn keys_of(&self, found: &[Item]) -> Vec<BucketKey> {
        found
            .iter()
            .filter_map(|it| BucketKey::parse(&self.ns, get_str(it, attr::PK)?))
            .collect()
    }

    /// Every `#STATE` item of a bucket index partition (`GSI2`, `GSI3` or `GSI4`), all pages: the
    /// index's partition key equals `pk` and its sort key starts with `prefix` (`BUCKET#`, or
    /// narrower). An item of another namespace, or whose index keys its key does not imply,
    /// is skipped and counted ([`crate::page::own_items`]).
    async fn query_bucket_index(
        &self,
        index: &'static str,
        pk: String,
        prefix: String,
    ) -> Result<Vec<Item>, RepositoryError> {
        let (hash, range) = match index {
            GSI2 => (attr::GSI2PK, attr::GSI2SK),
            GSI3 => (attr::GSI3PK, attr::GSI3SK),
            _ => (attr::GSI4PK, attr::GSI4SK),
        };
        let mut e = Expr::default();
        let c = e.eq(hash, AttributeValue::S(pk));
        e.when(c);
        let c = e.begins_with(range, prefix);
        e.when(c);
        let found = crate::page::all_items(crate::page::query(
            &self.client,
            &self.table,
            Some(index),
            &e,
        ))
        .await?;
        Ok(crate::page::own_items(&self.ns, index, found)
            .into_iter()
            .filter(|found| get_str(found, attr::SK) == Some(keys::STATE_SK))
            .collect())
    }
}

/// The starts of `names`' session windows (each with its length in seconds) that shard 0's
/// image holds live at `now`.
pub fn live_windows_of(
    shard0: Option<&BucketImage>,
    names: &[(String, i64)],
    now: i64,
) -> BTreeMap<String, i64> {
    let Some(img) = shard0 else {
        return BTreeMap::new();
    };
    names
        .iter()
        .filter_map(|(name, rsa)| {
            let w = img.windows.get(name)?;
            let end = w.end(*rsa)?;
            (end > now).then_some((name.clone(), w.ws?))
        })
        .collect()
}

/// The span of one DynamoDB request (or a write's attempts) on a bucket:
/// `dynalimit.dynamodb` with the operation, the bucket's entity, resource and shard, and,
/// recorded when it ends, the attempts and the outcome (`done`, `condition_failed`,
/// `conflict`, `error`).
fn request_span(operation: &'static str, key: &BucketKey) -> tracing::Span {
    tracing::debug_span!(
        "dynalimit.dynamodb",
        operation,
        entity_id = %key.entity_id,
        resource = %key.resource,
        shard = key.shard,
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// The image of the item an answer carries, when it was asked for and is not empty.
fn image_if(return_new: bool, item: Option<Item>) -> Option<Result<BucketImage, FormatError>> {
    item.filter(|i| return_new && !i.is_empty())
        .map(|i| image_from_item(&i))
}

/// The owner check of a create: the META must still be what was read.
fn meta_condition(check: &MetaCheck) -> Expr {
    let mut e = Expr::default();
    match check {
        MetaCheck::Absent => {
            let c = e.not_exists(attr::PK);
            e.when(c);
        }
        MetaCheck::Present {
            pgen,
            pinc,
            created_at,
        } => {
            let c = e.exists(attr::PK);
            e.when(c);
            let c = match pgen {
                Some(g) if *g != 0 => e.cmp(attr::PGEN, "=", *g),
                _ => {
                    let (missing, zero) = (e.not_exists(attr::PGEN), e.cmp(attr::PGEN, "=", 0));
                    format!("{missing} OR {zero}")
                }
            };
            e.when(c);
            let c = match (pinc, created_at) {
                (Some(inc), _) => e.eq(attr::PINC, AttributeValue::S(inc.clone())),
                (None, Some(at)) => {
                    let missing = e.not_exists(attr::PINC);
                    let same = e.eq(attr::CREATED_AT, AttributeValue::S(at.clone()));
                    format!("{missing} AND {same}")
                }
                (None, None) => {
                    let (a, b) = (e.not_exists(attr::PINC), e.not_exists(attr::CREATED_AT));
                    format!("{a} AND {b}")
                }
            };
            e.when(c);
        }
    }
    e
}

/// The error of an `UpdateItem` whose conflicts outlasted [`CONFLICT_ATTEMPTS`].
fn contended() -> RepositoryError {
    RepositoryError::Contended {
        operation: "UpdateItem",
        attempts: CONFLICT_ATTEMPTS,
    }
}

fn build_error(operation: &'static str, e: &dyn std::error::Error) -> RepositoryError {
    RepositoryError::InvalidRequest {
        operation,
        code: "ConstructionFailure".to_owned(),
        message: e.to_string(),
    }
}

impl crate::Repository {
    /// The bucket reads and writes of this repository's namespace.
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub fn buckets(&self) -> BucketStore {
        BucketStore::new(
            self.shared.client.clone(),
            self.shared.table.clone(),
            self.scope.id.clone(),
        )
        .with_fast_path(self.shared.wire.get().cloned())
        .with_retry_budget(Arc::clone(&self.shared.budget))
    }
}

/// The configuration levels of one `(entity, resource)` and the keys of their items.
struct Levels {
    levels: Vec<ConfigLevel>,
    keys: Vec<(String, String)>,
}

impl Levels {
    fn of(ns: &str, entity: &str, resource: &str) -> Self {
        let (levels, keys) = config::levels(entity, resource)
            .into_iter()
            .map(|(level, slot)| {
                let key = slot.key(ns);
                let (pk, sk) = item::key_of(&key).unwrap_or_default();
                (level, (pk.to_owned(), sk.to_owned()))
            })
            .unzip();
        Levels { levels, keys }
    }

    /// Each level with its configuration among `items` (`None` where it has no item).
    fn decode(
        self,
        items: &HashMap<(String, String), Item>,
    ) -> Result<Vec<(ConfigLevel, Option<LimitConfig>)>, RepositoryError> {
        self.levels
            .into_iter()
            .zip(&self.keys)
            .map(|(level, k)| Ok((level, items.get(k).map(config::decode).transpose()?)))
            .collect()
    }
}
