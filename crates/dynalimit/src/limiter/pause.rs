//! Shared pauses on bucket items: [`RateLimiter::pause`] and the DynamoDB [`PauseStore`].

use std::time::Duration;

use dynalimit_core::bounds::MAX_PAUSE_MS;
use dynalimit_core::ids::{validate_entity_id, validate_resource};
use dynalimit_core::{Clock, CoreError};
use futures::future::BoxFuture;

use super::inner::repo_error;
use super::rate_limiter::RateLimiter;
use crate::Error;
use crate::backoff::PauseStore;

/// The longest pause [`RateLimiter::pause`] accepts (one day). A pause stamp further ahead
/// (plus a minute's clock-skew allowance) is no pause to any reader
/// ([`dynalimit_core::bounds::Stamp::Pause`]).
pub const MAX_PAUSE: Duration = Duration::from_millis(MAX_PAUSE_MS as u64);

impl RateLimiter {
    /// Pauses every acquire on `entity_id`'s bucket for `resource`, in every process sharing
    /// the table, for `retry_after` from now: the deadline is max-merged into each existing
    /// shard's item (a later deadline already stored wins). Until it passes, acquires are
    /// refused with [`Error::Rejected`] whose [`Rejection::retry_after`](crate::Rejection::retry_after) holds
    /// the time left, and no token is spent. Commits and rollbacks of leases are not affected.
    ///
    /// Returns the deadline now stored (epoch ms), or `None` when the pair has no bucket item
    /// yet (nothing to stamp: acquire once first).
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad identifiers or a pause of zero or longer than
    /// [`MAX_PAUSE`] (before any I/O); [`Error::PermissionDenied`], [`Error::Unavailable`].
    pub async fn pause(
        &self,
        entity_id: &str,
        resource: &str,
        retry_after: Duration,
    ) -> Result<Option<i64>, Error> {
        validate_entity_id(entity_id)?;
        validate_resource(resource)?;
        if retry_after.is_zero() || retry_after > MAX_PAUSE {
            return Err(CoreError::invalid_value(
                "retry_after",
                format!("{retry_after:?}"),
                "a pause lasts more than zero and at most one day",
            )
            .into());
        }
        let ms = i64::try_from(retry_after.as_millis()).unwrap_or(i64::MAX);
        let until = self.inner.clock.epoch_millis().saturating_add(ms.max(1));
        self.stamp(entity_id, resource, until).await
    }

    /// Stamps a pause until `until` (epoch ms, at most [`MAX_PAUSE`] from now: a later
    /// deadline is stamped as now plus [`MAX_PAUSE`]) on every shard of the pair; this
    /// process's remembered refusals of the pair are dropped, so that its acquires report the
    /// pause.
    async fn stamp(
        &self,
        entity_id: &str,
        resource: &str,
        until: i64,
    ) -> Result<Option<i64>, Error> {
        let now = self.inner.clock.epoch_millis();
        let until = until.min(now.saturating_add(MAX_PAUSE_MS));
        self.inner
            .engine
            .stamp_pause(entity_id, resource, until, now)
            .await
            .map_err(|e| repo_error(entity_id, resource, e))
    }

    /// The pause deadline (epoch ms) stamped on `entity_id`'s bucket for `resource`, if any;
    /// it may lie in the past. A stamp further ahead than a pause lasts ([`MAX_PAUSE`] and a
    /// minute's clock-skew allowance) is no pause and reads as `None`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad identifiers; [`Error::PermissionDenied`],
    /// [`Error::Unavailable`].
    pub async fn paused_until(
        &self,
        entity_id: &str,
        resource: &str,
    ) -> Result<Option<i64>, Error> {
        validate_entity_id(entity_id)?;
        validate_resource(resource)?;
        let now = self.inner.clock.epoch_millis();
        self.inner
            .engine
            .read_pause(entity_id, resource, now)
            .await
            .map_err(|e| repo_error(entity_id, resource, e))
    }

    /// A [`PauseStore`] over this limiter's bucket items, for a
    /// [`Backoff`](crate::backoff::Backoff) gate whose scopes are
    /// [`bucket_scope`](crate::backoff::bucket_scope)s: a reported pause then also holds every
    /// RateLimiter acquiring on that bucket, in every process.
    pub fn pause_store(&self) -> DynamoPauseStore {
        DynamoPauseStore {
            limiter: self.clone(),
        }
    }
}

/// The [`PauseStore`] that keeps deadlines on bucket items (see
/// [`RateLimiter::pause_store`]). Scopes must be [`bucket_scope`](crate::backoff::bucket_scope)
/// strings, `"{entity_id}#{resource}"`. A deadline more than [`MAX_PAUSE`] ahead is stored as
/// now plus [`MAX_PAUSE`] (a gate whose `max_pause` is longer still pauses locally for it).
#[derive(Debug, Clone)]
pub struct DynamoPauseStore {
    limiter: RateLimiter,
}

fn split_scope(scope: &str) -> Result<(&str, &str), Error> {
    scope.split_once('#').ok_or_else(|| {
        CoreError::invalid_value("scope", scope, "expected \"{entity_id}#{resource}\"").into()
    })
}

impl PauseStore for DynamoPauseStore {
    fn publish<'a>(
        &'a self,
        scope: &'a str,
        until_epoch_ms: i64,
    ) -> BoxFuture<'a, Result<i64, Error>> {
        Box::pin(async move {
            let (entity_id, resource) = split_scope(scope)?;
            validate_entity_id(entity_id)?;
            validate_resource(resource)?;
            let stored = self
                .limiter
                .stamp(entity_id, resource, until_epoch_ms)
                .await?;
            Ok(stored.unwrap_or(until_epoch_ms))
        })
    }

    fn load<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, Error>> {
        Box::pin(async move {
            let (entity_id, resource) = split_scope(scope)?;
            self.limiter.paused_until(entity_id, resource).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_split_at_the_first_hash() {
        assert_eq!(split_scope("acme#ads-api").unwrap(), ("acme", "ads-api"));
        assert!(matches!(split_scope("acme"), Err(Error::Invalid(_))));
    }
}
