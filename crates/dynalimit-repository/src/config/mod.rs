//! Limit configuration at four levels, its cache and its writers (reference §1.4.5, §1.4.6,
//! §4).
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
//!
//! | module | concern |
//! |---|---|
//! | `cache` | the per-namespace cache of decoded levels, misses and unusable items included |
//! | `resolve` | resolution through the cache, `on_unavailable`, the cache's counters |
//! | `write` | the per-level writers (full replace, flags carried over) and their audit events |
//! | `registry` | the registries of resources with defaults and with entity configs |
//! | `concurrency` | the concurrency limits of a level and their resolution |
//! | `features` | the namespace's features item: which costly features of dynalimit's own are in use |
//!
//! The items themselves are [`dynalimit_format::config`]'s.

mod access;
mod cache;
mod cascade;
mod concurrency;
mod features;
mod registry;
mod resolve;
mod write;

use dynalimit_core::{CoreError, Limit};
use dynalimit_format::attr;
use dynalimit_format::config::ConfigLevel;

pub use cache::CacheStats;
pub(crate) use cache::ConfigCache;

/// The limits that apply to one (entity, resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedLimits {
    /// The limits of the first level that has any; empty when no level has.
    pub limits: Vec<Limit>,
    /// Which level supplied them.
    pub source: Option<ConfigLevel>,
    /// `on_unavailable` of the system level, when set.
    pub on_unavailable: Option<dynalimit_format::config::OnUnavailable>,
}

/// Checks limits headed for a level: at least one, and what [`attr::validate_limits`] asks
/// of one bucket's limits (at most [`attr::MAX_LIMITS_PER_BUCKET`], each valid for the table,
/// no name twice, one zone).
pub(crate) fn validate_limits(limits: &[Limit]) -> Result<(), CoreError> {
    if limits.is_empty() {
        return Err(CoreError::invalid_value(
            "limits",
            "[]",
            "at least one limit is required",
        ));
    }
    attr::validate_limits(limits)
}
