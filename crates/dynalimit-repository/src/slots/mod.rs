//! Concurrency limits across processes: slots of a limit on requests in flight, each held by
//! one holder until it releases it or its hold expires ([`dynalimit_format::slot`] has the
//! item).
//!
//! Every write goes through the acquire's transport when the client allows it
//! ([`Repository::fast_path`]), otherwise through the SDK.
//!
//! Taking a slot is one conditional `UpdateItem` when the slot the client picks is free: the
//! client picks at random among the slots free in the last state it saw of the limit. When
//! the pick was taken meanwhile, DynamoDB's refusal carries the item as it is, and the next
//! pick comes from it. When the last state seen shows every slot held, the item is read
//! (strongly consistent) before the take is refused: a refusal always rests on a state read
//! in the same call. A holder extends its hold while it works (a heartbeat); a holder that
//! crashes keeps its slot until the hold expires, never longer.
//!
//! # Lost answers
//! * **Take:** the request is sent again. When the first one landed, the second is
//!   refused, and the item it returns names this holder on the slot: the slot is held, unless
//!   its hold lapsed while the answers were lost (then another slot is picked: a take never
//!   hands out a hold that already expired). When
//!   the answer is still lost, the call fails ([`RepositoryError::OutcomeUnknown`], or
//!   `Unavailable` on the SDK's path): the slot may be held, by nobody who knows it, until its
//!   hold expires. It is never granted twice.
//! * **Extend:** sent again; it sets the same expiry under the same holder.
//! * **Release:** sent again; a second landing finds the slot no longer this holder's and
//!   changes nothing. When the answer stays lost, the slot frees at its expiry at the latest.

mod cache;

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use dynalimit_core::ids;
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::slot::{self, Slots};
use rand::seq::IndexedRandom;

use cache::CacheKey;
pub(crate) use cache::SlotCache;

use crate::error::classify;
use crate::retry::Resend;
use crate::wire::{UpdateItem, UpdateOutcome};
use crate::{Repository, RepositoryError};

/// Picks of one take before it reports the limit full of contention.
const TAKE_ATTEMPTS: u32 = 8;

/// A slot held: what extends and releases it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSlot {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// The concurrency limit's name.
    pub limit: String,
    /// The slot's index.
    pub slot: u32,
    /// This hold's id (random, one per take).
    pub holder: String,
    /// When the hold expires unless extended, epoch ms.
    pub expires_at_ms: i64,
}

/// What a take got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotTake {
    /// A slot is held.
    Held(HeldSlot),
    /// Every slot is held.
    Full {
        /// When the first hold expires at the latest (a holder usually releases sooner).
        retry_after_ms: i64,
    },
    /// Every pick was taken by another writer first, eight times in a row.
    Contended,
}

enum Sent {
    Done,
    /// The condition failed; the item as it is (its slots).
    Refused(Slots),
}

impl Repository {
    /// The slots of a limit, read strongly consistent.
    async fn read_slots(
        &self,
        entity: &str,
        resource: &str,
        limit: &str,
    ) -> Result<Slots, RepositoryError> {
        let key = slot::slots_key(&self.scope.id, entity, resource, limit);
        let found =
            crate::batch::get_item(&self.shared.client, &self.shared.table, key, true).await?;
        Ok(found.as_ref().map(Slots::of).unwrap_or_default())
    }

    async fn slot_update(
        &self,
        entity: &str,
        resource: &str,
        limit: &str,
        e: &Expr,
    ) -> Result<Sent, RepositoryError> {
        let key = slot::slots_key(&self.scope.id, entity, resource, limit);
        if let Some(wire) = self.fast_path() {
            // The acquire's transport: a take, an extend and a release are each harmless to
            // send twice (a second landing is refused by its own condition and read as done).
            let update = e.update_expression();
            let condition = e.condition_expression();
            let names = e.name_pairs();
            let request = UpdateItem {
                table: &self.shared.table,
                key: &key,
                update_expression: update.as_deref(),
                condition_expression: condition.as_deref(),
                names: &names,
                values: e.value_pairs(),
                return_all_new: false,
                return_old_on_failure: true,
                resend: Resend::Harmless,
            };
            return Ok(match wire.update_item(&request).await? {
                UpdateOutcome::Updated(_) => Sent::Done,
                UpdateOutcome::ConditionFailed(old) => {
                    Sent::Refused(old.as_ref().map(Slots::of).unwrap_or_default())
                }
            });
        }
        match self
            .shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(key))
            .with_expr(e)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await
        {
            Ok(_) => Ok(Sent::Done),
            Err(SdkError::ServiceError(s))
                if matches!(s.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(c) = s.into_err() else {
                    unreachable!("matched above")
                };
                Ok(Sent::Refused(
                    c.item.as_ref().map(Slots::of).unwrap_or_default(),
                ))
            }
            Err(e) => Err(classify("UpdateItem", e)),
        }
    }

    /// Takes a slot of concurrency limit `limit` (at most `max` in flight) of `entity_id` on
    /// `resource`, held for `hold` unless extended ([`Repository::extend_slot`]) or released
    /// ([`Repository::release_slot`]). One request when the slot picked is free (see the
    /// module documentation).
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] before any request for bad names, a `max` outside
    /// `1..=1000` or a `hold` outside 1 s to 1 hour; the classified failure of a request
    /// (when an answer was lost, see the module documentation).
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn take_slot(
        &self,
        entity_id: &str,
        resource: &str,
        limit: &str,
        max: u32,
        hold: Duration,
    ) -> Result<SlotTake, RepositoryError> {
        ids::validate_entity_id(entity_id)?;
        ids::validate_resource(resource)?;
        ids::validate_limit_name(limit)?;
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
        slot::validate(max, hold_ms)?;
        let key: CacheKey = (
            self.scope.id.clone(),
            entity_id.to_owned(),
            resource.to_owned(),
            limit.to_owned(),
        );
        let holder = format!("{:032x}", rand::random::<u128>());
        let held = |slot: u32, expires_at_ms: i64| {
            SlotTake::Held(HeldSlot {
                entity_id: entity_id.to_owned(),
                resource: resource.to_owned(),
                limit: limit.to_owned(),
                slot,
                holder: holder.clone(),
                expires_at_ms,
            })
        };
        let mut seen = self.shared.slots.get(&key);
        // Whether `seen` was read in this call: only then does "no slot free" refuse (the
        // cache does not see other processes' releases).
        let mut fresh = false;
        let mut attempts = 0;
        while attempts < TAKE_ATTEMPTS {
            let now = self.shared.clock.epoch_millis();
            let free = seen.free(max, now);
            let Some(&pick) = free.choose(&mut rand::rng()) else {
                if !fresh {
                    seen = self.read_slots(entity_id, resource, limit).await?;
                    self.shared.slots.update(&key, |s| *s = seen.clone());
                    fresh = true;
                    continue;
                }
                let first = seen.next_expiry(max, now).unwrap_or(now);
                return Ok(SlotTake::Full {
                    retry_after_ms: first.saturating_sub(now).saturating_add(1),
                });
            };
            attempts += 1;
            let expiry = now.saturating_add(hold_ms);
            let of = slot::Of {
                ns: &self.scope.id,
                entity: entity_id,
                resource,
                limit,
            };
            let e = slot::take(of, pick, &holder, expiry, now);
            match self.slot_update(entity_id, resource, limit, &e).await? {
                Sent::Done => {
                    self.shared
                        .slots
                        .update(&key, |s| s.record_take(pick, &holder, expiry));
                    // An answer slower than the hold time brings a hold that already
                    // lapsed: the slot may be another's by now, so it is not handed out.
                    if expiry > self.shared.clock.epoch_millis() {
                        return Ok(held(pick, expiry));
                    }
                    seen.record_take(pick, &holder, expiry);
                }
                Sent::Refused(current) => {
                    self.shared.slots.update(&key, |s| *s = current.clone());
                    // A resent request whose first copy landed: the slot is this holder's,
                    // unless its hold lapsed meanwhile.
                    if current.holder.get(&pick) == Some(&holder)
                        && let Some(&x) = current.expiry.get(&pick)
                        && x > self.shared.clock.epoch_millis()
                    {
                        return Ok(held(pick, x));
                    }
                    seen = current;
                    fresh = true;
                }
            }
        }
        Ok(SlotTake::Contended)
    }

    /// Extends `held` to `hold` from now (a heartbeat) and returns the new expiry.
    ///
    /// # Errors
    /// [`RepositoryError::NotFound`] when the slot is no longer this holder's (its hold
    /// expired and another took it, or it was released); [`RepositoryError::Validation`]
    /// for a `hold` outside 1 s to 1 hour; the classified failure.
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn extend_slot(
        &self,
        held: &HeldSlot,
        hold: Duration,
    ) -> Result<i64, RepositoryError> {
        let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
        slot::validate(1, hold_ms)?;
        let expiry = self.shared.clock.epoch_millis().saturating_add(hold_ms);
        let e = slot::extend(held.slot, &held.holder, expiry);
        match self
            .slot_update(&held.entity_id, &held.resource, &held.limit, &e)
            .await?
        {
            Sent::Done => Ok(expiry),
            Sent::Refused(current) => {
                // Sent again after a landing: the same expiry under the same holder.
                if current.holder.get(&held.slot) == Some(&held.holder)
                    && current.expiry.get(&held.slot) == Some(&expiry)
                {
                    return Ok(expiry);
                }
                Err(RepositoryError::NotFound {
                    what: format!(
                        "slot {} of {} of {} on {} for this holder (its hold expired)",
                        held.slot, held.limit, held.entity_id, held.resource
                    ),
                })
            }
        }
    }

    /// Releases `held`. Returns whether it was still this holder's (`false`: its hold had
    /// expired, or a release sent twice found it gone).
    ///
    /// # Errors
    /// The classified failure (the slot frees at its expiry at the latest).
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub async fn release_slot(&self, held: &HeldSlot) -> Result<bool, RepositoryError> {
        let e = slot::release(held.slot, &held.holder);
        let released = matches!(
            self.slot_update(&held.entity_id, &held.resource, &held.limit, &e)
                .await?,
            Sent::Done
        );
        let key: CacheKey = (
            self.scope.id.clone(),
            held.entity_id.clone(),
            held.resource.clone(),
            held.limit.clone(),
        );
        self.shared.slots.update(&key, |s| {
            if s.holder.get(&held.slot) == Some(&held.holder) {
                s.record_release(held.slot);
            }
        });
        Ok(released)
    }
}
