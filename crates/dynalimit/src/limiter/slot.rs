//! Concurrency limits across the fleet: at most `max` requests in flight per entity and
//! resource, counted in the table, so every process and Lambda function sharing it shares the
//! count ([`RateLimiter::hold`](super::RateLimiter::hold)).
//!
//! A [`Slot`] is held until [`Slot::release`], or until it is dropped (released by a spawned
//! task), or until its hold time passes without a heartbeat: a holder that crashes keeps its
//! slot for at most the hold time. A long request (a stream) keeps its slot with
//! [`Slot::extend`] or [`Slot::keep_alive`].
//!
//! ```no_run
//! # async fn demo(limiter: dynalimit::RateLimiter) -> Result<(), dynalimit::Error> {
//! use std::time::Duration;
//! use dynalimit::Concurrency;
//!
//! let streams = Concurrency::new("streams", 5)?.hold_time(Duration::from_secs(30))?;
//! let mut slot = limiter.hold("api-key-123", "gpt-4", &streams).await?; // or Err(Rejected)
//! slot.keep_alive(); // extended every 10 s while the stream runs
//! // ... stream the answer ...
//! slot.release().await?;
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use dynalimit_repository::{HeldSlot, Repository, RepositoryError, SlotTake};

use super::inner::repo_error;
use crate::{Error, Rejection};

pub use dynalimit_core::concurrency::{Concurrency, DEFAULT_HOLD_TIME};

/// A slot of a [`Concurrency`] limit, held.
#[derive(Debug)]
pub struct Slot {
    repo: Repository,
    held: HeldSlot,
    hold: Duration,
    expires_at_ms: Arc<AtomicI64>,
    lost: Arc<AtomicBool>,
    released: bool,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl Slot {
    /// Takes a slot of `limit` on `entity_id`'s `resource` through `repo` (see
    /// [`RateLimiter::hold`](super::RateLimiter::hold)).
    pub(crate) async fn take(
        repo: &Repository,
        entity_id: &str,
        resource: &str,
        limit: &Concurrency,
    ) -> Result<Slot, Error> {
        let repo = repo.clone();
        let taken = repo
            .take_slot(entity_id, resource, limit.name(), limit.max(), limit.hold())
            .await
            .map_err(|e| repo_error(entity_id, resource, e))?;
        match taken {
            SlotTake::Held(held) => Ok(Slot {
                expires_at_ms: Arc::new(AtomicI64::new(held.expires_at_ms)),
                repo,
                held,
                hold: limit.hold(),
                lost: Arc::default(),
                released: false,
                heartbeat: None,
            }),
            SlotTake::Full { retry_after_ms } => Err(Rejection::in_flight(
                entity_id,
                resource,
                limit.name(),
                limit.max(),
                Duration::from_millis(u64::try_from(retry_after_ms).unwrap_or(0)),
            )
            .into()),
            SlotTake::Contended => Err(Rejection::contended(entity_id, resource).into()),
        }
    }
}

fn lost_error(e: RepositoryError, held: &HeldSlot) -> Error {
    match e {
        RepositoryError::NotFound { .. } => Error::SlotLost {
            limit: held.limit.clone(),
            slot: held.slot,
        },
        other => repo_error(&held.entity_id, &held.resource, other),
    }
}

impl Slot {
    /// The slot's index (0 to `max − 1`).
    pub fn index(&self) -> u32 {
        self.held.slot
    }

    /// When the hold expires unless extended, epoch ms.
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms.load(Ordering::Relaxed)
    }

    /// Whether a heartbeat found the slot taken by another holder (its hold had expired):
    /// the request should stop, as the slot no longer counts it.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Extends the hold to the hold time from now (a heartbeat).
    ///
    /// # Errors
    /// [`Error::SlotLost`] when the hold had expired and another holder took the slot;
    /// [`Error::Unavailable`] when DynamoDB fails.
    pub async fn extend(&mut self) -> Result<(), Error> {
        match self.repo.extend_slot(&self.held, self.hold).await {
            Ok(expiry) => {
                self.expires_at_ms.store(expiry, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                let e = lost_error(e, &self.held);
                if matches!(e, Error::SlotLost { .. }) {
                    self.lost.store(true, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// Extends the hold every third of the hold time from a spawned task, until the slot is
    /// released or dropped, or a heartbeat finds it lost ([`Slot::is_lost`]). A heartbeat
    /// DynamoDB fails is tried again at the next tick; meanwhile [`Slot::expires_at_ms`]
    /// stops moving, and past it the slot may already be another holder's.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn keep_alive(&mut self) {
        if self.heartbeat.is_some() {
            return;
        }
        let repo = self.repo.clone();
        let held = self.held.clone();
        let hold = self.hold;
        let expires = self.expires_at_ms.clone();
        let lost = self.lost.clone();
        self.heartbeat = Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(hold / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                match repo.extend_slot(&held, hold).await {
                    Ok(expiry) => expires.store(expiry, Ordering::Relaxed),
                    Err(RepositoryError::NotFound { .. }) => {
                        lost.store(true, Ordering::Relaxed);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "slot heartbeat failed; trying again"),
                }
            }
        }));
    }

    /// Gives the slot back. Returns whether it was still held (`false`: its hold had expired).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when DynamoDB fails; the slot frees at its expiry at the latest.
    pub async fn release(mut self) -> Result<bool, Error> {
        self.released = true;
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        self.repo
            .release_slot(&self.held)
            .await
            .map_err(|e| repo_error(&self.held.entity_id, &self.held.resource, e))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        if self.released {
            return;
        }
        // Released by a task; without a runtime, the hold expires on its own.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let repo = self.repo.clone();
            let held = self.held.clone();
            handle.spawn(async move {
                if let Err(e) = repo.release_slot(&held).await {
                    tracing::warn!(error = %e, "releasing a dropped slot failed; it frees at its expiry");
                }
            });
        }
    }
}
