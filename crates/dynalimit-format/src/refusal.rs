//! Refusal minutes: dynalimit's item recording that a limit refused acquires in one minute,
//! which zae-limiter 0.17 neither writes nor reads. The aggregator reads them for alerts of
//! the kind "a limit has refused for N minutes" ([`crate::alert`] has the thresholds).
//!
//! One item per (entity, resource, limit, minute), in the partition of the bucket's shard 0
//! (so the acquire-only policies of either library's stack, which let a service write bucket
//! partitions only, allow it): `PK = {ns}/BUCKET#{entity}#{resource}#0`,
//! `SK = #REFUSED#{limit}#{minute}`, where `minute` is the epoch minute (epoch ms / 60 000)
//! written with [`MINUTE_DIGITS`] digits, so the sort keys of one limit order by time. It
//! carries `entity_id`, `resource`, `limit`, a count `n` (added by each report; a report sent
//! again after a lost answer may count twice, and nothing reads the count but people), a
//! `ttl` [`TTL_AFTER_MINUTE_S`] past the minute, GSI3 keys under the entity
//! (`REFUSED#{resource}#{limit}#{minute}`: an entity's deletion finds it) and GSI4 keys
//! (`REFUSED#{entity}#{resource}#{limit}#{minute}`: a namespace purge removes it).
//!
//! Each process writes it at most once per minute per (entity, resource, limit), with an
//! `UpdateItem` and no condition: the first write of a minute creates the item (a stream
//! INSERT, which the aggregator evaluates), later ones only add to `n`.
//!
//! zae-limiter 0.17 reads a bucket partition's `#STATE` item and its `#OP#` records, and its
//! entity's buckets on GSI3 under `BUCKET#`; this item is none of them. Its `delete_entity`
//! deletes everything GSI3 lists under the entity, this item included.

use crate::expr::Expr;
use crate::item::{self, Item};
use crate::{alert, attr, keys};

/// Digits of the minute in a sort key (epoch minutes stay below 10¹⁰ until the year 20 000).
pub const MINUTE_DIGITS: usize = 10;
/// One minute, ms.
pub const MINUTE_MS: i64 = 60_000;
/// How long a refusal minute is kept past its minute, seconds: two hours, twice the longest
/// run of minutes an alert waits for ([`alert::MAX_REFUSING_MINUTES`]).
pub const TTL_AFTER_MINUTE_S: i64 = 7_200;
/// The count of reports of a minute.
pub const COUNT: &str = "n";
/// The prefix of the refusal items' GSI3 and GSI4 sort keys.
pub const REFUSED_INDEX_SK_PREFIX: &str = "REFUSED#";

/// The epoch minute of `at_ms` (floored; 0 before the epoch).
pub fn minute_of(at_ms: i64) -> i64 {
    at_ms.max(0).div_euclid(MINUTE_MS)
}

/// `#REFUSED#{limit}#`: the sort-key prefix of one limit's refusal minutes.
pub fn refused_sk_prefix(limit: &str) -> String {
    format!("{}{limit}#", keys::REFUSED_SK_PREFIX)
}

/// An epoch minute as keys write it: zero-padded to [`MINUTE_DIGITS`] digits (0 for a
/// minute before the epoch).
pub fn padded(minute: i64) -> String {
    format!("{:0width$}", minute.max(0), width = MINUTE_DIGITS)
}

/// `#REFUSED#{limit}#{minute}`, the minute [`padded`].
pub fn refused_sk(limit: &str, minute: i64) -> String {
    let mut sk = refused_sk_prefix(limit);
    sk.push_str(&padded(minute));
    sk
}

/// `REFUSED#{resource}#{limit}#{minute}`: the GSI3 sort key, under the entity.
pub fn refused_gsi3sk(resource: &str, limit: &str, minute: &str) -> String {
    format!("{REFUSED_INDEX_SK_PREFIX}{resource}#{limit}#{minute}")
}

/// `REFUSED#{entity}#{resource}#{limit}#{minute}`: the GSI4 sort key, under the namespace.
pub fn refused_gsi4sk(entity: &str, resource: &str, limit: &str, minute: &str) -> String {
    format!("{REFUSED_INDEX_SK_PREFIX}{entity}#{resource}#{limit}#{minute}")
}

/// The limit and the minute of a refusal item's sort key; `None` for any other sort key (or
/// a minute that is not [`MINUTE_DIGITS`] digits).
///
/// ```
/// use dynalimit_format::refusal::{parse_refused_sk, refused_sk};
/// assert_eq!(parse_refused_sk(&refused_sk("rpm", 29_000_000)), Some(("rpm", 29_000_000)));
/// assert_eq!(parse_refused_sk("#REFUSED#rpm#12"), None);
/// assert_eq!(parse_refused_sk("#STATE"), None);
/// ```
pub fn parse_refused_sk(sk: &str) -> Option<(&str, i64)> {
    let rest = sk.strip_prefix(keys::REFUSED_SK_PREFIX)?;
    let (limit, minute) = rest.rsplit_once('#')?;
    if limit.is_empty()
        || minute.len() != MINUTE_DIGITS
        || !minute.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((limit, minute.parse().ok()?))
}

/// Which limit refused: the namespace, entity, resource and limit name (the slots' type).
pub use crate::slot::Of;

impl Of<'_> {
    /// The key of the refusal item of `minute`.
    pub fn refused_key(&self, minute: i64) -> Item {
        item::key(self.shard_0(), refused_sk(self.limit, minute))
    }

    /// The partition of the refusal items (and of the slots): the bucket's shard 0.
    pub fn shard_0(&self) -> String {
        keys::bucket_pk(self.ns, self.entity, self.resource, 0)
    }
}

/// The report of a refusal in `minute`: `ADD n 1`, and the identity, `ttl` and index keys.
pub fn report(of: Of<'_>, minute: i64) -> Expr {
    let Of {
        ns,
        entity,
        resource,
        limit,
    } = of;
    let at = &padded(minute);
    let mut e = Expr::default();
    e.add(COUNT, 1);
    let ttl = minute
        .saturating_mul(MINUTE_MS / 1000)
        .saturating_add(TTL_AFTER_MINUTE_S);
    for (name, value) in [
        (attr::ENTITY_ID, item::s(entity)),
        (attr::RESOURCE, item::s(resource)),
        (alert::LIMIT, item::s(limit)),
        (attr::TTL, item::n(ttl)),
        (attr::GSI3PK, item::s(keys::entity_pk(ns, entity))),
        (attr::GSI3SK, item::s(refused_gsi3sk(resource, limit, at))),
        (attr::GSI4PK, item::s(ns)),
        (
            attr::GSI4SK,
            item::s(refused_gsi4sk(entity, resource, limit, at)),
        ),
    ] {
        e.set(name, value);
    }
    e
}

/// The key condition of a query of `of`'s refusal minutes `from..=to`.
pub fn minutes_between(of: Of<'_>, from: i64, to: i64) -> Expr {
    let mut e = Expr::default();
    let c = e.eq(attr::PK, item::s(of.shard_0()));
    e.when(c);
    let sk = e.name(attr::SK);
    let lo = e.value(item::s(refused_sk(of.limit, from.max(0))));
    let hi = e.value(item::s(refused_sk(of.limit, to.max(0))));
    e.when(format!("{sk} BETWEEN {lo} AND {hi}"));
    e
}

/// One run of refusal minutes long enough for its threshold: what a refusal alert's marker
/// records.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Episode {
    /// The entity.
    pub entity_id: String,
    /// The resource.
    pub resource: String,
    /// The limit.
    pub limit: String,
    /// The first minute of the run (epoch minutes).
    pub first_minute: i64,
}

impl Episode {
    /// The key of this episode's marker in namespace `ns`, beside the quota crossings'
    /// markers in the entity's partition:
    /// `#ALERTED#{resource}#{limit}#refusing#{first_minute}` (a quota marker has a
    /// percentage where this one has `refusing`).
    pub fn marker_key(&self, ns: &str) -> Item {
        item::key(
            keys::entity_pk(ns, &self.entity_id),
            keys::refusing_sk(&self.resource, &self.limit, &padded(self.first_minute)),
        )
    }

    /// The marker item: the key, identity, `minutes` (the threshold that was met), `at`,
    /// `token`, GSI4 keys and `ttl` (epoch seconds).
    pub fn marker_item(&self, ns: &str, minutes: u8, at_ms: i64, token: &str, ttl_s: i64) -> Item {
        let mut it = self.marker_key(ns);
        for (name, value) in [
            (attr::ENTITY_ID, item::s(&self.entity_id)),
            (attr::RESOURCE, item::s(&self.resource)),
            (alert::LIMIT, item::s(&self.limit)),
            (alert::MINUTES, item::n(minutes)),
            (alert::AT, item::n(at_ms)),
            (alert::TOKEN, item::s(token)),
            (attr::GSI4PK, item::s(ns)),
            (attr::GSI4SK, item::s(keys::entity_pk(ns, &self.entity_id))),
            (attr::TTL, item::n(ttl_s)),
        ] {
            it.insert(name.to_owned(), value);
        }
        it
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OF: Of<'static> = Of {
        ns: "ns1",
        entity: "acme",
        resource: "gpt-4",
        limit: "rpm",
    };

    #[test]
    fn a_refusal_minute_lives_in_shard_0_and_orders_by_time() {
        assert_eq!(
            item::key_of(&OF.refused_key(29_000_000)),
            Some(("ns1/BUCKET#acme#gpt-4#0", "#REFUSED#rpm#0029000000"))
        );
        assert!(refused_sk("rpm", 999) < refused_sk("rpm", 1000));
        assert_eq!(minute_of(1_740_000_059_999), 29_000_000);
        assert_eq!(minute_of(-5), 0);
        for m in [0, 1, 29_000_000, 9_999_999_999] {
            assert_eq!(parse_refused_sk(&refused_sk("tpm", m)), Some(("tpm", m)));
        }
        assert_eq!(parse_refused_sk("#REFUSED##0029000000"), None);
        assert_eq!(parse_refused_sk("#REFUSED#rpm#002900000x"), None);
        assert_eq!(parse_refused_sk("#SLOTS#rpm"), None);
    }

    #[test]
    fn a_report_adds_one_and_sets_the_index_keys_and_ttl() {
        let e = report(OF, 29_000_000);
        let update = e.update_expression().unwrap();
        assert!(
            update.starts_with("SET ") && update.contains(" ADD "),
            "{update}"
        );
        assert!(e.condition_expression().is_none());
        let values: Vec<_> = e.value_pairs().iter().map(|(_, v)| v.clone()).collect();
        assert!(values.contains(&item::s("REFUSED#gpt-4#rpm#0029000000")));
        assert!(values.contains(&item::s("REFUSED#acme#gpt-4#rpm#0029000000")));
        assert!(values.contains(&item::n(29_000_000 * 60 + TTL_AFTER_MINUTE_S)));
    }

    #[test]
    fn an_episode_marker_is_told_apart_from_a_quota_marker() {
        let ep = Episode {
            entity_id: "acme".into(),
            resource: "gpt-4".into(),
            limit: "rpm".into(),
            first_minute: 29_000_000,
        };
        let it = ep.marker_item("ns1", 5, 1, "t", 2);
        assert_eq!(
            item::key_of(&it),
            Some(("ns1/ENTITY#acme", "#ALERTED#gpt-4#rpm#refusing#0029000000"))
        );
        assert_eq!(item::get_i64(&it, alert::MINUTES), Some(5));
        let q = minutes_between(OF, 28_999_995, 29_000_000);
        assert!(q.key_condition().unwrap().contains("BETWEEN"));
    }
}
