//! The per-namespace cache of decoded configuration levels.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dynalimit_format::FormatError;
use dynalimit_format::config::{self, Features, LimitConfig, Slot};
use dynalimit_format::item::Item;

use crate::RepositoryError;

/// Why a stored level cannot be used, kept in the cache (errors are not `Clone`).
#[derive(Debug)]
pub(crate) enum Unusable {
    /// Replayed as [`FormatError::Unsupported`](dynalimit_format::FormatError::Unsupported).
    Unsupported { key: String, feature: String },
    /// Replayed as [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt).
    Corrupt {
        key: String,
        attribute: Option<String>,
        message: String,
    },
    /// Replayed as [`FormatError::ReservedLimitName`](dynalimit_format::FormatError::ReservedLimitName).
    ReservedName { key: String, name: String },
}

/// A decoded level: `Ok(None)` = no item; `Err` = an item dynalimit cannot use.
pub(crate) type Entry = Result<Option<LimitConfig>, Arc<Unusable>>;

/// Decodes a level as read (`None`: no item) into what the cache keeps.
pub(crate) fn to_entry(found: Option<&Item>) -> Entry {
    let unusable = match found.map(config::decode).transpose() {
        Ok(c) => return Ok(c),
        Err(FormatError::Unsupported { key, feature }) => Unusable::Unsupported { key, feature },
        Err(FormatError::Corrupt {
            key,
            attribute,
            message,
        }) => Unusable::Corrupt {
            key,
            attribute,
            message,
        },
        Err(FormatError::ReservedLimitName { key, name }) => Unusable::ReservedName { key, name },
        Err(other) => Unusable::Unsupported {
            key: String::new(),
            feature: other.to_string(),
        },
    };
    Err(Arc::new(unusable))
}

/// The level an entry holds, or the error it replays.
pub(crate) fn entry_result(entry: &Entry) -> Result<Option<&LimitConfig>, RepositoryError> {
    match entry {
        Ok(c) => Ok(c.as_ref()),
        Err(problem) => Err(match problem.as_ref() {
            Unusable::Unsupported { key, feature } => {
                RepositoryError::Format(FormatError::Unsupported {
                    key: key.clone(),
                    feature: feature.clone(),
                })
            }
            Unusable::ReservedName { key, name } => {
                RepositoryError::Format(FormatError::ReservedLimitName {
                    key: key.clone(),
                    name: name.clone(),
                })
            }
            Unusable::Corrupt {
                key,
                attribute,
                message,
            } => RepositoryError::Format(FormatError::Corrupt {
                key: key.clone(),
                attribute: attribute.clone(),
                message: message.clone(),
            }),
        }),
    }
}

/// The level an entry holds, when it is usable.
pub(crate) fn usable(entry: &Entry) -> Option<&LimitConfig> {
    entry.as_ref().ok().and_then(Option::as_ref)
}

/// The per-namespace limit configuration cache.
pub(crate) struct ConfigCache {
    ttl: Duration,
    cache: Option<moka::future::Cache<Slot, Arc<Entry>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Counts the writes that evicted configuration (see [`ConfigCache::generation`]).
    generation: AtomicU64,
    /// The namespace's features item as read, and when it was read (epoch ms).
    features: std::sync::Mutex<Option<(Features, i64)>>,
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
            generation: AtomicU64::new(0),
            features: std::sync::Mutex::new(None),
        }
    }

    /// The namespace's features, as read less than the TTL (at least a second) before `now`.
    pub(crate) fn features(&self, now: i64) -> Option<Features> {
        let ttl = i64::try_from(self.ttl.as_millis())
            .unwrap_or(i64::MAX)
            .max(1000);
        let known = *self
            .features
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known
            .filter(|(_, at)| now >= *at && now - at < ttl)
            .map(|(found, _)| found)
    }

    /// Remembers the namespace's features as read (or written) at `now`.
    pub(crate) fn remember_features(&self, found: Features, now: i64) {
        *self
            .features
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((found, now));
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) async fn get(&self, slot: &Slot) -> Option<Arc<Entry>> {
        let found = match &self.cache {
            Some(c) => c.get(slot).await,
            None => None,
        };
        let (counter, result) = if found.is_some() {
            (&self.hits, "hit")
        } else {
            (&self.misses, "miss")
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::metrics::CONFIG_CACHE, "result" => result).increment(1);
        found
    }

    pub(crate) async fn put(&self, slot: Slot, entry: Arc<Entry>) {
        if let Some(c) = &self.cache {
            c.insert(slot, entry).await;
        }
    }

    /// Changes with every configuration write through this repository (each evicts), so
    /// that caches derived from the configuration elsewhere in the process can drop what
    /// they hold.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks a write that changes what the configuration or the buckets say.
    pub(crate) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) async fn evict(&self, slot: &Slot) {
        self.changed();
        if let Some(c) = &self.cache {
            c.invalidate(slot).await;
        }
    }

    /// Forgets the namespace's features: the next look reads them.
    pub(crate) fn forget_features(&self) {
        *self
            .features
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    pub(crate) async fn clear(&self) {
        self.changed();
        if let Some(c) = &self.cache {
            c.invalidate_all();
            c.run_pending_tasks().await;
        }
    }

    /// Hits, misses, size and TTL.
    pub(crate) async fn stats(&self) -> CacheStats {
        let size = match &self.cache {
            Some(c) => {
                c.run_pending_tasks().await;
                c.entry_count()
            }
            None => 0,
        };
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            size,
            ttl: self.ttl,
        }
    }
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

#[cfg(test)]
mod tests {
    use dynalimit_format::item;

    use super::*;

    #[test]
    fn unusable_levels_replay_their_error_and_stay_unavailable() {
        let mut stored = item::key("ns/SYSTEM#", "#CONFIG");
        for (k, v) in [
            ("l_x_cp", item::n(1)),
            ("l_x_ra", item::n(1)),
            ("l_x_rp", item::n(1)),
            ("w_x_cp", item::n(1)),
            ("w_x_rsa", item::n(1)),
        ] {
            stored.insert(k.to_owned(), v);
        }
        let e = RepositoryError::from(config::decode(&stored).unwrap_err());
        assert!(matches!(
            e,
            RepositoryError::Format(FormatError::Corrupt { .. })
        ));
        assert!(!e.is_unavailable(), "a corrupt item is no outage");
        let replayed = entry_result(&to_entry(Some(&stored))).unwrap_err();
        assert!(matches!(
            replayed,
            RepositoryError::Format(FormatError::Corrupt { .. })
        ));

        let mut reserved = item::key("ns/SYSTEM#", "#CONFIG");
        for f in ["cp", "ra", "rp"] {
            reserved.insert(format!("l_ttl_{f}"), item::n(10));
        }
        let e = RepositoryError::from(config::decode(&reserved).unwrap_err());
        assert!(matches!(
            e,
            RepositoryError::Format(FormatError::ReservedLimitName { .. })
        ));
        assert!(e.is_unavailable());
        // The cache replays the same variant.
        assert!(matches!(
            entry_result(&to_entry(Some(&reserved))),
            Err(RepositoryError::Format(
                FormatError::ReservedLimitName { .. }
            ))
        ));
        assert!(matches!(entry_result(&to_entry(None)), Ok(None)));
    }
}
