//! Concurrency slots: dynalimit's item for limits on requests in flight, which zae-limiter 0.17
//! neither writes nor reads.
//!
//! One item per (entity, resource, limit), in the partition of the bucket's shard 0 (so the
//! acquire-only policies of either library's stack, which let a service write bucket
//! partitions only, allow it): `PK = {ns}/BUCKET#{entity}#{resource}#0`, `SK = #SLOTS#{limit}`,
//! with `entity_id`, `resource`, GSI3 keys under the entity (`SLOTS#{resource}#{limit}`: an
//! entity's deletion finds it), GSI4 keys (`SLOTS#{entity}#{resource}#{limit}`: a namespace
//! purge removes it) and, per slot `i` in use, `x{i}` (N, the epoch ms at which the hold
//! expires) and `h{i}` (S, the holder). A slot is free when it has no `x{i}`, when `x{i}` is
//! in the past, or when `x{i}` is not a number or lies further ahead than the longest hold
//! allows ([`MAX_HOLD_MS`] plus [`CLOCK_MARGIN_MS`]): a value another writer stored out of
//! bounds frees the slot rather than holding it forever.
//!
//! * Take slot `i`: `SET x{i} = :expiry, h{i} = :holder` (and the identity) under "slot `i` is
//!   free" ([`take`]).
//! * Extend (heartbeat): `SET x{i} = :expiry` under `h{i} = :holder` ([`extend`]).
//! * Release: `REMOVE x{i}, h{i}` under `h{i} = :holder` ([`release`]).
//!
//! zae-limiter 0.17 reads a bucket partition's `#STATE` item and its `#OP#` records, and its
//! entity's buckets on GSI3 under `BUCKET#`; this item is none of them. Its `delete_entity`
//! deletes everything GSI3 lists under the entity, this item included.

use std::collections::BTreeMap;

use crate::expr::Expr;
use crate::item::{self, Item};
use crate::{attr, keys};

pub use dynalimit_core::concurrency::{MAX_HOLD_MS, MAX_SLOTS, MIN_HOLD_MS, validate};
/// How far ahead of a reader's clock a writer's expiry may lie beyond [`MAX_HOLD_MS`] and
/// still hold the slot.
pub const CLOCK_MARGIN_MS: i64 = 60_000;
/// Longest holder id read back.
const MAX_HOLDER_LEN: usize = 64;

/// `#SLOTS#{limit}`.
pub fn slots_sk(limit: &str) -> String {
    format!("{}{limit}", keys::SLOTS_SK_PREFIX)
}

/// `SLOTS#{resource}#{limit}`: the slots item's GSI3 sort key, under the entity.
pub fn slots_gsi3sk(resource: &str, limit: &str) -> String {
    format!("{SLOTS_INDEX_SK_PREFIX}{resource}#{limit}")
}

/// `SLOTS#{entity}#{resource}#{limit}`: the slots item's GSI4 sort key, under the namespace.
pub fn slots_gsi4sk(entity: &str, resource: &str, limit: &str) -> String {
    format!("{SLOTS_INDEX_SK_PREFIX}{entity}#{resource}#{limit}")
}

/// The prefix of the slots item's GSI3 and GSI4 sort keys.
pub const SLOTS_INDEX_SK_PREFIX: &str = "SLOTS#";

/// The key of the slots item of (`entity`, `resource`, `limit`).
pub fn slots_key(ns: &str, entity: &str, resource: &str, limit: &str) -> Item {
    item::key(keys::bucket_pk(ns, entity, resource, 0), slots_sk(limit))
}

fn expiry_attr(slot: u32) -> String {
    format!("x{slot}")
}

fn holder_attr(slot: u32) -> String {
    format!("h{slot}")
}

/// The slots of an item as read: per slot index below [`MAX_SLOTS`], the stored expiry (when
/// it is an integer) and holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slots {
    /// Expiry per slot, epoch ms.
    pub expiry: BTreeMap<u32, i64>,
    /// Holder per slot.
    pub holder: BTreeMap<u32, String>,
}

fn slot_index(name: &str, prefix: char) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|i| *i < MAX_SLOTS)
}

impl Slots {
    /// Reads the slots of `found`; attributes that are not slots, indices beyond
    /// [`MAX_SLOTS`], expiries that are not integers and over-long holders are left out.
    pub fn of(found: &Item) -> Slots {
        let mut out = Slots::default();
        for (name, value) in found {
            if let Some(i) = slot_index(name, 'x') {
                if let Some(ms) = value
                    .as_n()
                    .ok()
                    .filter(|n| n.len() <= 20)
                    .and_then(|n| n.parse::<i64>().ok())
                {
                    out.expiry.insert(i, ms);
                }
            } else if let Some(i) = slot_index(name, 'h')
                && let Ok(h) = value.as_s()
                && h.len() <= MAX_HOLDER_LEN
            {
                out.holder.insert(i, h.clone());
            }
        }
        out
    }

    /// Whether slot `i` is free at `now`, as the condition of [`take`] judges it.
    pub fn is_free(&self, i: u32, now: i64) -> bool {
        self.expiry.get(&i).is_none_or(|&x| is_free_at(x, now))
    }

    /// The free slots among the first `max` at `now`.
    pub fn free(&self, max: u32, now: i64) -> Vec<u32> {
        (0..max.min(MAX_SLOTS))
            .filter(|i| self.is_free(*i, now))
            .collect()
    }

    /// The earliest expiry among the first `max` slots held at `now` (`None` when none is
    /// held): when a full limit frees a slot at the latest, if no holder releases one.
    pub fn next_expiry(&self, max: u32, now: i64) -> Option<i64> {
        (0..max.min(MAX_SLOTS))
            .filter_map(|i| self.expiry.get(&i).copied())
            .filter(|x| !is_free_at(*x, now))
            .min()
    }

    /// Records slot `i` taken by `holder` until `expiry` (what a successful take wrote).
    pub fn record_take(&mut self, i: u32, holder: &str, expiry: i64) {
        self.expiry.insert(i, expiry);
        self.holder.insert(i, holder.to_owned());
    }

    /// Records slot `i` released.
    pub fn record_release(&mut self, i: u32) {
        self.expiry.remove(&i);
        self.holder.remove(&i);
    }
}

/// Whether an expiry `x` leaves its slot free at `now`: past, or beyond the longest hold.
pub fn is_free_at(x: i64, now: i64) -> bool {
    x < now || x > horizon(now)
}

fn horizon(now: i64) -> i64 {
    now.saturating_add(MAX_HOLD_MS + CLOCK_MARGIN_MS)
}

/// Which limit's slots: the namespace, entity, resource and limit name.
#[derive(Debug, Clone, Copy)]
pub struct Of<'a> {
    /// The namespace id.
    pub ns: &'a str,
    /// The entity.
    pub entity: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The limit's name.
    pub limit: &'a str,
}

/// Taking slot `i` of `of` for `holder` until `expiry`, if it is free at `now`.
pub fn take(of: Of<'_>, slot: u32, holder: &str, expiry: i64, now: i64) -> Expr {
    let Of {
        ns,
        entity,
        resource,
        limit,
    } = of;
    let mut e = Expr::default();
    let x = expiry_attr(slot);
    e.set(&x, item::n(expiry));
    e.set(&holder_attr(slot), item::s(holder));
    for (name, value) in [
        (attr::ENTITY_ID, item::s(entity)),
        (attr::RESOURCE, item::s(resource)),
        (attr::GSI3PK, item::s(keys::entity_pk(ns, entity))),
        (attr::GSI3SK, item::s(slots_gsi3sk(resource, limit))),
        (attr::GSI4PK, item::s(ns)),
        (attr::GSI4SK, item::s(slots_gsi4sk(entity, resource, limit))),
    ] {
        e.set(name, value);
    }
    let a = e.name(&x);
    let number = e.value(item::s("N"));
    let past = e.num(now);
    let beyond = e.num(horizon(now));
    e.when(format!(
        "attribute_not_exists({a}) OR NOT attribute_type({a}, {number}) OR {a} < {past} OR {a} > {beyond}"
    ));
    e
}

/// Extending slot `i` of `holder` to `expiry`.
pub fn extend(slot: u32, holder: &str, expiry: i64) -> Expr {
    let mut e = Expr::default();
    e.set(&expiry_attr(slot), item::n(expiry));
    let c = e.eq(&holder_attr(slot), item::s(holder));
    e.when(c);
    e
}

/// Releasing slot `i` of `holder`.
pub fn release(slot: u32, holder: &str) -> Expr {
    let mut e = Expr::default();
    e.remove(&expiry_attr(slot));
    e.remove(&holder_attr(slot));
    let c = e.eq(&holder_attr(slot), item::s(holder));
    e.when(c);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn slots_read_back_within_bounds() {
        let mut it = slots_key("ns", "acme", "gpt-4", "streams");
        for (k, v) in [
            ("x0", item::n(NOW + 1000)),
            ("h0", item::s("a")),
            ("x1", item::n(NOW - 1)),
            ("x2", item::s("soon")),
            ("x3", item::n("1e3")),
            ("x999", item::n(NOW + 5)),
            ("x1000", item::n(NOW + 5)),
            ("x01", item::n(NOW + 5)),
            ("h4", item::s("h".repeat(65))),
            ("x5", item::n(i64::MAX)),
        ] {
            it.insert(k.to_owned(), v);
        }
        let s = Slots::of(&it);
        assert_eq!(
            s.expiry,
            BTreeMap::from([(0, NOW + 1000), (1, NOW - 1), (5, i64::MAX), (999, NOW + 5)])
        );
        assert_eq!(s.holder, BTreeMap::from([(0, "a".to_owned())]));
        // 0 held; 1 past; 2 and 3 not integers; 4 never taken; 5 beyond any hold.
        assert_eq!(s.free(6, NOW), vec![1, 2, 3, 4, 5]);
        assert_eq!(s.next_expiry(6, NOW), Some(NOW + 1000));
        assert_eq!(s.next_expiry(6, NOW + 1001), None);
    }

    #[test]
    fn the_expressions_name_the_slot_and_the_holder() {
        let of = Of {
            ns: "ns",
            entity: "acme",
            resource: "gpt-4",
            limit: "streams",
        };
        let t = take(of, 3, "me", NOW + 30_000, NOW);
        assert_eq!(
            item::key_of(&slots_key("ns", "acme", "gpt-4", "streams")),
            Some(("ns/BUCKET#acme#gpt-4#0", "#SLOTS#streams"))
        );
        let update = t.update_expression().unwrap();
        assert!(update.starts_with("SET "), "{update}");
        let cond = t.condition_expression().unwrap();
        assert!(cond.contains("attribute_not_exists"), "{cond}");
        assert!(cond.contains("attribute_type"), "{cond}");
        let names: Vec<&str> = t.name_pairs().into_iter().map(|(_, a)| a).collect();
        assert!(names.contains(&"x3") && names.contains(&"h3"), "{names:?}");
        let r = release(3, "me");
        assert!(r.update_expression().unwrap().starts_with("REMOVE "));
        let x = extend(3, "me", NOW + 60_000);
        assert!(x.condition_expression().is_some());
        assert!(validate(MAX_SLOTS, MAX_HOLD_MS).is_ok());
        assert!(validate(1, MAX_HOLD_MS + 1).is_err());
    }

    proptest! {
        /// A slot is free exactly when its expiry is past or beyond the longest hold, and the
        /// free slots and the next expiry partition the slots that are asked about.
        #[test]
        fn free_and_held_partition_the_slots(
            expiries in proptest::collection::btree_map(0u32..64, any::<i64>(), 0..64),
            max in 1u32..=64,
            now in any::<i64>(),
        ) {
            let s = Slots { expiry: expiries.clone(), holder: BTreeMap::new() };
            let free = s.free(max, now);
            for i in 0..max {
                let held = expiries.get(&i).is_some_and(|&x| x >= now && x <= now.saturating_add(MAX_HOLD_MS + CLOCK_MARGIN_MS));
                prop_assert_eq!(free.contains(&i), !held);
            }
            let next = s.next_expiry(max, now);
            prop_assert_eq!(next.is_some(), free.len() < max as usize);
            if let Some(x) = next {
                prop_assert!(x >= now);
            }
        }
    }
}
