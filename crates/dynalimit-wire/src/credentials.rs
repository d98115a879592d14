//! When the fast path's cached credentials are used, refreshed or waited for.
//!
//! The SDK's identity cache keeps credentials until shortly before they expire and gives
//! credentials without an expiry a lifetime of 15 minutes, after which they are resolved again
//! (so a rotated static key is picked up). The fast path keeps the same lifetimes, but starts
//! the refresh five minutes before the end: one request resolves new credentials while the
//! others go on signing with the current ones, which are still valid. Only when the
//! credentials are at their end (or there are none yet) do requests wait for the refresh.
//!
//! Resolutions are at least [`MIN_RESOLVE_INTERVAL_MS`] apart, whatever they returned: a
//! provider that hands out credentials with less than five minutes left, or credentials
//! already in their last seconds, or that fails, is asked again only after the interval.
//! Meanwhile requests sign with the credentials they have while those are valid, and fail as
//! unavailable, without asking the provider, when there are none. A request the service
//! refuses for its credentials may resolve them once more at once, at most once per
//! interval too.
//!
//! The decision is a pure function of the times, so it is tested with a manual clock.

/// The lifetime the SDK's identity cache gives credentials without an expiry.
pub(crate) const DEFAULT_EXPIRATION_MS: i64 = 15 * 60 * 1000;
/// The refresh starts this long before the credentials' end.
pub(crate) const REFRESH_BEFORE_EXPIRY_MS: i64 = 5 * 60 * 1000;
/// Expiring credentials are not signed with in their last seconds, as the SDK's identity
/// cache treats them as expired this long before their expiry.
pub(crate) const EXPIRY_BUFFER_MS: i64 = 10_000;
/// The least time between two resolutions of credentials, after a success as after a
/// failure (five seconds): a provider that keeps returning credentials close to their end,
/// or keeps failing, is asked twelve times a minute per repository, not once per request.
pub(crate) const MIN_RESOLVE_INTERVAL_MS: i64 = 5_000;

/// When one set of credentials is refreshed and when it may no longer sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lifetime {
    /// From here on, one request refreshes while the others use these credentials.
    pub(crate) refresh_at_ms: i64,
    /// From here on, requests wait for new credentials.
    pub(crate) usable_until_ms: i64,
    /// From here on, the credentials are expired (never, for credentials without an expiry).
    pub(crate) expires_ms: i64,
}

impl Lifetime {
    /// The lifetime of credentials resolved at `resolved_ms` that expire at `expiry_ms`
    /// (never, for `None`).
    pub(crate) fn of(resolved_ms: i64, expiry_ms: Option<i64>) -> Lifetime {
        match expiry_ms {
            Some(expiry) => Lifetime {
                refresh_at_ms: expiry.saturating_sub(REFRESH_BEFORE_EXPIRY_MS),
                usable_until_ms: expiry.saturating_sub(EXPIRY_BUFFER_MS),
                expires_ms: expiry,
            },
            // They stay valid: the old ones keep signing while the refresh runs, for as long
            // as an expiring credential's refresh window lasts.
            None => {
                let refresh_at_ms = resolved_ms.saturating_add(DEFAULT_EXPIRATION_MS);
                Lifetime {
                    refresh_at_ms,
                    usable_until_ms: refresh_at_ms.saturating_add(REFRESH_BEFORE_EXPIRY_MS),
                    expires_ms: i64::MAX,
                }
            }
        }
    }

    /// What a request at `now_ms` does; `next_resolve_ms` is the earliest instant another
    /// resolution may start ([`MIN_RESOLVE_INTERVAL_MS`] after the last one).
    pub(crate) fn decide(&self, now_ms: i64, next_resolve_ms: i64) -> Decision {
        let may_resolve = now_ms >= next_resolve_ms;
        if now_ms < self.refresh_at_ms {
            Decision::Use
        } else if now_ms < self.usable_until_ms {
            if may_resolve {
                Decision::UseAndRefresh
            } else {
                Decision::Use
            }
        } else if may_resolve {
            Decision::Wait
        } else if now_ms < self.expires_ms {
            // In their last seconds, but the provider was asked a moment ago and gave these.
            Decision::Use
        } else {
            Decision::Spent
        }
    }
}

/// What a request does with the cached credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Sign with them.
    Use,
    /// Sign with them; one request (the first to get there) resolves new ones meanwhile.
    UseAndRefresh,
    /// They are at their end: wait for new ones.
    Wait,
    /// They have expired and the provider may not be asked yet: the request fails as
    /// unavailable.
    Spent,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn credentials_without_expiry_are_resolved_again_after_the_sdks_fifteen_minutes() {
        let t0 = 1_000_000;
        let life = Lifetime::of(t0, None);
        assert_eq!(life.decide(t0, 0), Decision::Use);
        assert_eq!(life.decide(t0 + 15 * MIN - 1, 0), Decision::Use);
        assert_eq!(life.decide(t0 + 15 * MIN, 0), Decision::UseAndRefresh);
        assert_eq!(life.decide(t0 + 20 * MIN - 1, 0), Decision::UseAndRefresh);
        assert_eq!(life.decide(t0 + 20 * MIN, 0), Decision::Wait);
    }

    #[test]
    fn expiring_credentials_refresh_five_minutes_early_and_sign_until_the_buffer() {
        let expiry = 10_000_000;
        let life = Lifetime::of(0, Some(expiry));
        assert_eq!(life.decide(expiry - 5 * MIN - 1, 0), Decision::Use);
        assert_eq!(life.decide(expiry - 5 * MIN, 0), Decision::UseAndRefresh);
        assert_eq!(life.decide(expiry - 10_001, 0), Decision::UseAndRefresh);
        assert_eq!(life.decide(expiry - 10_000, 0), Decision::Wait);
        assert_eq!(life.decide(expiry + MIN, 0), Decision::Wait);
    }

    #[test]
    fn a_refresh_comes_no_sooner_than_the_interval_after_the_last_resolution() {
        let life = Lifetime::of(0, None);
        let resolved_at = 15 * MIN + 7;
        let next = resolved_at + MIN_RESOLVE_INTERVAL_MS;
        assert_eq!(life.decide(resolved_at + 1, next), Decision::Use);
        assert_eq!(life.decide(next, next), Decision::UseAndRefresh);
        // At the end, requests wait once the interval is over.
        assert_eq!(life.decide(20 * MIN, next), Decision::Wait);
    }

    #[test]
    fn short_lived_credentials_just_resolved_sign_until_they_expire() {
        // Resolved with eight seconds left: inside the buffer, valid, and the provider was
        // asked a moment ago.
        let now = 1_000_000;
        let life = Lifetime::of(now, Some(now + 8_000));
        let next = now + MIN_RESOLVE_INTERVAL_MS;
        assert_eq!(life.decide(now, next), Decision::Use);
        assert_eq!(life.decide(next, next), Decision::Wait);
        // Already expired when resolved: nothing to sign with until the provider may be asked.
        let life = Lifetime::of(now, Some(now - 1));
        assert_eq!(life.decide(now, next), Decision::Spent);
        assert_eq!(life.decide(next, next), Decision::Wait);
    }

    #[test]
    fn already_expired_credentials_are_waited_for() {
        let life = Lifetime::of(5 * MIN, Some(MIN));
        assert_eq!(life.decide(5 * MIN, 0), Decision::Wait);
    }
}
