//! The last state seen of each concurrency limit's slots, per repository.

use std::collections::HashMap;
use std::sync::Mutex;

use dynalimit_format::slot::Slots;

/// Limits whose last state one repository remembers.
const CACHE_ENTRIES: usize = 10_000;

pub(super) type CacheKey = (String, String, String, String);

/// The last state seen of each limit's slots.
#[derive(Debug, Default)]
pub(crate) struct SlotCache(Mutex<HashMap<CacheKey, Slots>>);

impl SlotCache {
    pub(super) fn get(&self, key: &CacheKey) -> Slots {
        self.0
            .lock()
            .ok()
            .and_then(|c| c.get(key).cloned())
            .unwrap_or_default()
    }

    pub(super) fn update(&self, key: &CacheKey, f: impl FnOnce(&mut Slots)) {
        if let Ok(mut c) = self.0.lock() {
            if c.len() >= CACHE_ENTRIES && !c.contains_key(key) {
                c.clear();
            }
            f(c.entry(key.clone()).or_default());
        }
    }
}
