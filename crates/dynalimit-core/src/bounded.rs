//! A map bounded by size and by idle time, for what a process remembers per caller.
//!
//! A service keyed by user or address meets an unbounded number of keys, so nothing it
//! remembers per key may grow with them. [`BoundedMap`] keeps two generations of entries, a
//! young one and an old one, each holding at most half the capacity:
//!
//! - an entry that is used or inserted goes to the young generation (a hit in the young one
//!   is one hash look-up, as in a plain map);
//! - when the young generation is full, or when the idle time has passed since the last
//!   turn, the generations turn: the old one is dropped and the young one becomes old.
//!
//! So the map never holds more than its capacity; an entry used within the idle time is kept
//! unless half the capacity of other keys came since; an entry that is not used is gone at
//! the second turn after its last use, which under steady inserts is within twice the idle
//! time. Nothing runs in the background (a map nobody inserts into does not grow, and keeps
//! what it holds), and the time is the owner's reading, passed in (a
//! [`Clock`](crate::Clock)'s monotonic reading, or a manual one in tests).
//!
//! An owner whose entries may not be dropped while they are in use (a pause in force, a
//! waiter) gives a `keep` rule: on each turn, entries of the dropped generation that it keeps
//! move to the young one instead, at most a quarter of the capacity, so a turn stays
//! proportional to the entries it handles and the bound holds whatever the rule says.
//!
//! ```
//! use std::time::Duration;
//! use dynalimit_core::bounded::BoundedMap;
//!
//! let mut seen: BoundedMap<String, u32> = BoundedMap::new(4, Duration::from_secs(60));
//! let now = Duration::ZERO;
//! for key in ["a", "b", "c", "d", "e", "f"] {
//!     seen.get_or_insert_with(key, now, || (key.to_owned(), 0), |n| *n += 1);
//! }
//! assert!(seen.len() <= 4);
//! assert_eq!(seen.get("f"), Some(&1));
//! assert_eq!(seen.get("a"), None, "the oldest went");
//! ```

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

/// Whether an entry is in use at `now` and must survive a turn (see the module
/// documentation).
pub type Keep<V> = fn(&V, Duration) -> bool;

/// A map of at most `capacity` entries that forgets the least recently used ones and those
/// idle for long (see the [module documentation](self)).
pub struct BoundedMap<K, V> {
    young: HashMap<K, V>,
    old: HashMap<K, V>,
    /// Each generation holds at most this many entries.
    half: usize,
    idle: Duration,
    /// When the generations last turned (the owner's reading).
    turned_at: Duration,
    keep: Option<Keep<V>>,
}

impl<K, V> fmt::Debug for BoundedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundedMap")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

impl<K, V> BoundedMap<K, V> {
    /// Entries held (both generations).
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.young.is_empty() && self.old.is_empty()
    }

    /// The most entries the map holds.
    pub fn capacity(&self) -> usize {
        self.half * 2
    }
}

impl<K: Hash + Eq, V> BoundedMap<K, V> {
    /// An empty map of at most `capacity` entries (at least 2), turning its generations at
    /// least every `idle` while inserts go on.
    pub fn new(capacity: usize, idle: Duration) -> Self {
        BoundedMap {
            young: HashMap::new(),
            old: HashMap::new(),
            half: (capacity / 2).max(1),
            idle,
            turned_at: Duration::ZERO,
            keep: None,
        }
    }

    /// The same map, keeping on each turn the entries `keep` says are in use.
    #[must_use]
    pub fn keeping(mut self, keep: Keep<V>) -> Self {
        self.keep = Some(keep);
        self
    }

    /// The entry of `key`, without counting it as a use.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.young.get(key).or_else(|| self.old.get(key))
    }

    /// The entry of `key` to change, without counting it as a use.
    pub fn peek_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.young.get_mut(key) {
            Some(value) => Some(value),
            None => self.old.get_mut(key),
        }
    }

    /// `f` of the entry of `key`, counted as a use (an old entry becomes young); `None` when
    /// there is none.
    pub fn get_mut<Q, T>(
        &mut self,
        key: &Q,
        now: Duration,
        f: impl FnOnce(&mut V) -> T,
    ) -> Option<T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(value) = self.young.get_mut(key) {
            return Some(f(value));
        }
        let (key, value) = self.old.remove_entry(key)?;
        Some(f(self.put(key, value, now)))
    }

    /// `f` of the entry of `key`, counted as a use; a missing entry is made by `make` (its
    /// owned key and value) first.
    pub fn get_or_insert_with<Q, T>(
        &mut self,
        key: &Q,
        now: Duration,
        make: impl FnOnce() -> (K, V),
        f: impl FnOnce(&mut V) -> T,
    ) -> T
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(value) = self.young.get_mut(key) {
            return f(value);
        }
        let (key, value) = self.old.remove_entry(key).unwrap_or_else(make);
        f(self.put(key, value, now))
    }

    /// Inserts `value` under `key` (a use); returns the value it replaces.
    pub fn insert(&mut self, key: K, value: V, now: Duration) -> Option<V> {
        if let Some(slot) = self.young.get_mut(&key) {
            return Some(std::mem::replace(slot, value));
        }
        let before = self.old.remove(&key);
        self.put(key, value, now);
        before
    }

    /// Removes the entry of `key`.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.young.remove(key).or_else(|| self.old.remove(key))
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
    }

    /// Turns the generations when the idle time has passed since the last turn (inserts do
    /// this themselves; an owner that only reads calls it to let idle entries go).
    pub fn expire(&mut self, now: Duration) {
        if now.saturating_sub(self.turned_at) >= self.idle {
            self.turn(now);
        }
    }

    /// Every entry, young then old, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.young.iter().chain(self.old.iter())
    }

    /// Puts an entry that is in neither generation into the young one, turning first when
    /// it is full or idle.
    fn put(&mut self, key: K, value: V, now: Duration) -> &mut V {
        if self.young.len() >= self.half || now.saturating_sub(self.turned_at) >= self.idle {
            self.turn(now);
        }
        self.young.entry(key).or_insert(value)
    }

    /// Drops the old generation (keeping what `keep` says is in use, up to a quarter of the
    /// capacity) and makes the young one old.
    fn turn(&mut self, now: Duration) {
        let young = std::mem::take(&mut self.young);
        let mut dropped = std::mem::replace(&mut self.old, young);
        self.turned_at = now;
        if let Some(keep) = self.keep {
            let mut room = self.half / 2;
            let kept = dropped.extract_if(|_, value| {
                let kept = room > 0 && keep(value, now);
                room -= usize::from(kept);
                kept
            });
            self.young.extend(kept);
        }
    }
}

/// An (entity, resource) pair as an owned map key, found by a borrowed `(&str, &str)`
/// ([`PairRef`]) without allocating.
///
/// ```
/// use std::collections::HashMap;
/// use dynalimit_core::bounded::{Pair, PairRef};
///
/// let mut map = HashMap::new();
/// map.insert(Pair::new("acme", "gpt-4"), 1);
/// assert_eq!(map.get(&("acme", "gpt-4") as &dyn PairRef), Some(&1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// The entity then the resource, in one allocation.
    joined: Box<str>,
    /// Where the resource starts.
    split: usize,
}

impl Pair {
    /// The pair of `entity` and `resource`.
    pub fn new(entity: &str, resource: &str) -> Pair {
        Pair {
            joined: [entity, resource].concat().into_boxed_str(),
            split: entity.len(),
        }
    }
}

/// A pair as looked up: an owned [`Pair`] or a `(&str, &str)`.
pub trait PairRef {
    /// The entity and the resource.
    fn parts(&self) -> (&str, &str);
}

impl PairRef for Pair {
    fn parts(&self) -> (&str, &str) {
        self.joined.split_at(self.split)
    }
}

impl PairRef for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl Hash for dyn PairRef + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (entity, resource) = self.parts();
        entity.hash(state);
        resource.hash(state);
    }
}

impl PartialEq for dyn PairRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn PairRef + '_ {}

impl Hash for Pair {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn PairRef).hash(state);
    }
}

impl<'a> Borrow<dyn PairRef + 'a> for Pair {
    fn borrow(&self) -> &(dyn PairRef + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn key(i: usize) -> String {
        format!("caller-{i}")
    }

    fn touch(map: &mut BoundedMap<String, usize>, i: usize, now: Duration) {
        let k = key(i);
        map.get_or_insert_with(k.as_str(), now, || (k.clone(), i), |_| ());
    }

    #[test]
    fn a_million_distinct_keys_never_hold_more_than_the_capacity() {
        let mut map = BoundedMap::new(1_000, MIN);
        let mut most = 0;
        for i in 0..1_000_000 {
            touch(&mut map, i, Duration::ZERO);
            most = most.max(map.len());
        }
        assert_eq!(most, 1_000);
        assert!(map.len() <= 1_000);
        assert_eq!(map.get(key(999_999).as_str()), Some(&999_999));
    }

    #[test]
    fn a_key_in_use_survives_a_flood_of_others_and_an_unused_one_does_not() {
        let mut map = BoundedMap::new(100, MIN);
        for i in 0..10_000 {
            touch(&mut map, 0, Duration::ZERO);
            touch(&mut map, 1 + i, Duration::ZERO);
        }
        assert!(map.get(key(0).as_str()).is_some(), "used all along");
        assert!(map.get(key(1).as_str()).is_none(), "used once, long ago");
    }

    #[test]
    fn idle_entries_go_after_twice_the_idle_time_and_used_ones_stay() {
        let mut map = BoundedMap::new(100, MIN);
        touch(&mut map, 1, Duration::ZERO);
        touch(&mut map, 2, Duration::ZERO);
        // One idle time on: a turn; both are old now, still there.
        touch(&mut map, 3, MIN);
        assert!(map.get(key(1).as_str()).is_some());
        // Key 2 is used; key 1 is not.
        assert_eq!(map.get_mut(key(2).as_str(), MIN, |v| *v), Some(2));
        map.expire(2 * MIN);
        assert!(map.get(key(1).as_str()).is_none(), "idle twice the time");
        assert!(map.get(key(2).as_str()).is_some(), "used one idle time ago");
        assert!(map.get(key(3).as_str()).is_some());
        // Nothing turns before the idle time is over.
        map.expire(2 * MIN + MIN / 2);
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn kept_entries_survive_turns_within_a_quarter_of_the_capacity() {
        // Odd values are in use.
        let mut map = BoundedMap::new(100, MIN).keeping(|v: &usize, _| v % 2 == 1);
        for i in 0..1_000_000 {
            touch(&mut map, i, Duration::ZERO);
            assert!(map.len() <= 100);
        }
        let mut map = BoundedMap::new(100, MIN).keeping(|v: &usize, _| *v == 7);
        touch(&mut map, 7, Duration::ZERO);
        for i in 100..10_000 {
            touch(&mut map, i, Duration::ZERO);
        }
        for turn in 1..10 {
            map.expire(MIN * turn);
        }
        assert_eq!(map.get(key(7).as_str()), Some(&7), "in use, never dropped");
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn insert_replace_and_remove() {
        let mut map = BoundedMap::new(4, MIN);
        assert_eq!(map.insert(key(1), 1, Duration::ZERO), None);
        assert_eq!(map.insert(key(1), 2, Duration::ZERO), Some(1));
        map.expire(MIN);
        assert_eq!(
            map.insert(key(1), 3, MIN),
            Some(2),
            "found in the old generation"
        );
        assert_eq!(map.remove(key(1).as_str()), Some(3));
        assert!(map.is_empty());
        assert_eq!(map.capacity(), 4);
    }

    #[test]
    fn pairs_are_found_by_borrowed_strings() {
        let mut map: BoundedMap<Pair, u8> = BoundedMap::new(10, MIN);
        map.insert(Pair::new("e", "r"), 1, Duration::ZERO);
        assert_eq!(map.get(&("e", "r") as &dyn PairRef), Some(&1));
        assert_eq!(map.get(&("e", "x") as &dyn PairRef), None);
        // The split between entity and resource is part of the key.
        assert_eq!(map.get(&("", "er") as &dyn PairRef), None);
    }
}
