//! Proactive refill and sharding (reference §7.3), run after the snapshots of a batch.
//!
//! * **Refill**: for each bucket item seen in the batch (its last image), each limit is
//!   projected to now with the core's refill. A positive delta is written only when the
//!   projected balance is below what the batch saw consumed — the bucket is busy and the next
//!   acquire would otherwise take the slow path — and a trim (a balance above a lowered
//!   ceiling) is always written. One `UpdateItem` per item: `ADD` the deltas, `SET rf`, under
//!   the `rf` lock with pins on `vu`, `shard_count` and each raised balance. A lost condition
//!   means a client moved first; it is skipped silently.
//! * **Doubling**: on shard 0, when `wcu` projected to now is below 20 % of its capacity, the
//!   shard count doubles (cap 32) through the same conditional writes and donations the
//!   acquire path uses.
//! * **Propagation**: when a record raised `shard_count` on shard 0 from `old` to `new` (a
//!   client's doubling, another aggregator's, or this one's), the new count is set on shards
//!   `1..old` under `shard_count < :new`, with the doubling's donations, as the doubling
//!   writer itself does: a writer whose propagation failed, or whose doubling answer was
//!   lost, leaves no shard on the old count and the old share. Every shard is tried; the
//!   failures are reported. Then shards `old..new` are pre-created as clones of shard 0's new
//!   image ([`clone_for_shard`]) under `attribute_not_exists(PK)`; a clone that finds its
//!   shard already created is left to the client that created it.
//!
//! Items the core profile cannot interpret (schedules, quotas, a `vu` boundary) are left
//! alone, as are disabled ones.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use dynalimit_core::bucket::{ShardParams, doubled_shard_count, refill};
use dynalimit_core::decide::{BucketImage, doubling_donations};
use dynalimit_repository::bucket::{BucketKey, BucketStore, image_from_item};
use dynalimit_repository::error::classify;
use dynalimit_repository::item::{Item, key, n, s};
use dynalimit_repository::keys;

use crate::processor::{BucketActivity, BucketRef};
use crate::sink::Aggregator;
use crate::writes::Expr;

/// What the proactive passes did.
#[derive(Debug, Default)]
pub(crate) struct ProactiveReport {
    pub(crate) refills: usize,
    pub(crate) shards_stamped: usize,
    pub(crate) shards_created: usize,
    pub(crate) errors: Vec<String>,
}

/// One limit's part of a proactive refill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillDelta {
    /// Limit name (`wcu` included).
    pub limit: String,
    /// Millitokens to add (negative: a trim).
    pub delta: i64,
    /// Balance on the image, pinned when the delta is positive.
    pub tk_read: i64,
}

/// A planned proactive refill of one bucket item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillWrite {
    /// `rf` on the image (the lock).
    pub rf_read: i64,
    /// `rf` to stamp: `max(now, rf_read)`.
    pub rf_new: i64,
    /// `vu` on the image, pinned.
    pub vu_read: Option<i64>,
    /// `shard_count` on the image, pinned (the ceilings depend on it).
    pub shard_count: Option<i64>,
    /// Per-limit deltas.
    pub deltas: Vec<RefillDelta>,
}

/// Plans the proactive refill of an item from its image and the batch's consumption per limit
/// (millitokens). `None` when nothing needs writing or the item must be left alone.
pub fn plan_refill(
    img: &BucketImage,
    shard_count_attr: Option<i64>,
    consumed: &BTreeMap<String, i64>,
    now: i64,
) -> Option<RefillWrite> {
    if img.disabled || img.unsupported_reason().is_some() {
        return None;
    }
    let shards = img.shards();
    let mut deltas = Vec::new();
    for (name, st) in &img.limits {
        let (projected, _) = refill(st.tk, img.rf, now, st.params(shards));
        let delta = projected - st.tk;
        let busy = projected < consumed.get(name).copied().unwrap_or(0).max(0);
        if delta < 0 || (delta > 0 && busy) {
            deltas.push(RefillDelta {
                limit: name.clone(),
                delta,
                tk_read: st.tk,
            });
        }
    }
    if deltas.is_empty() {
        return None;
    }
    if let Some(w) = img.wcu {
        let (projected, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
        if projected != w.tk {
            deltas.push(RefillDelta {
                limit: dynalimit_core::bucket::WCU.to_owned(),
                delta: projected - w.tk,
                tk_read: w.tk,
            });
        }
    }
    Some(RefillWrite {
        rf_read: img.rf,
        rf_new: now.max(img.rf),
        vu_read: img.vu,
        shard_count: shard_count_attr,
        deltas,
    })
}

/// Whether shard 0 should double: its `wcu` projected to `now` is below 20 % of capacity and
/// the count is below the cap. Returns `(from, to)`.
pub fn plan_doubling(img: &BucketImage, now: i64) -> Option<(u32, u32)> {
    if img.disabled || img.unsupported_reason().is_some() {
        return None;
    }
    let w = img.wcu?;
    let (projected, _) = refill(w.tk, img.rf, now, ShardParams::wcu());
    if i128::from(projected) * 5 >= i128::from(w.cp) {
        return None;
    }
    doubled_shard_count(img.shards()).map(|to| (img.shards(), to))
}

/// Shard `shard` of a bucket whose shard 0 now holds `image` with `count` shards, as the
/// reference's aggregator pre-creates it (§7.3, path 2): a copy of the image with the
/// shard's keys (`PK`, `GSI2SK`, `GSI3SK`, `GSI4SK`), `shard_count = count`, every limit
/// funded with its per-shard share `cp // count` (the `wcu` block full, it is never divided),
/// `tc = 0`, `rf = now`, and no `vu` (the new shard holds exactly its share: nothing to trim).
pub fn clone_for_shard(image: &Item, bucket: &BucketRef, shard: u32, count: u32, now: i64) -> Item {
    let (ns, entity, resource) = (
        bucket.namespace_id.as_str(),
        bucket.entity_id.as_str(),
        bucket.resource.as_str(),
    );
    let mut item = image.clone();
    item.remove("vu");
    for (attr, value) in [
        ("PK", keys::bucket_pk(ns, entity, resource, shard)),
        ("GSI2SK", keys::bucket_gsi2sk(entity, shard)),
        ("GSI3SK", keys::bucket_gsi3sk(resource, shard)),
        ("GSI4SK", keys::bucket_gsi4sk(entity, resource, shard)),
    ] {
        item.insert(attr.to_owned(), s(value));
    }
    item.insert("shard_count".to_owned(), n(i64::from(count)));
    item.insert("rf".to_owned(), n(now));
    let img = image_from_item(image);
    let wcu = img
        .wcu
        .map(|w| (dynalimit_core::bucket::WCU.to_owned(), w.cp));
    let shares = img
        .limits
        .iter()
        .map(|(name, st)| (name.clone(), st.cp.div_euclid(i64::from(count.max(1)))));
    for (name, tk) in shares.chain(wcu) {
        item.insert(format!("b_{name}_tk"), n(tk));
        item.insert(format!("b_{name}_tc"), n(0));
    }
    item
}

/// The propagation pass for a count raised on shard 0 from `old` to `new` (see the module
/// docs).
async fn propagate(
    agg: &Aggregator,
    store: &BucketStore,
    bucket: &BucketRef,
    image: &Item,
    (old, new): (u32, u32),
    report: &mut ProactiveReport,
) {
    let img = image_from_item(image);
    let key = BucketKey::new(bucket.entity_id.clone(), bucket.resource.clone(), 0);
    let done = store
        .propagate_shard_count(&key, old, new, &doubling_donations(&img, new))
        .await;
    report.shards_stamped += done.updated.len();
    for (shard, e) in done.failed {
        report.errors.push(format!(
            "propagation of shard_count {new} to shard {shard} of {bucket:?}: {e}"
        ));
    }
    if img.disabled || img.unsupported_reason().is_some() {
        return;
    }
    let now = agg.clock().epoch_millis();
    for shard in old..new {
        let item = clone_for_shard(image, bucket, shard, new, now);
        let sent = agg
            .client()
            .put_item()
            .table_name(&agg.settings().table_name)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await;
        match sent {
            Ok(_) => report.shards_created += 1,
            Err(err) if err.code() == Some("ConditionalCheckFailedException") => {}
            Err(err) => report.errors.push(format!(
                "pre-creation of shard {shard} of {bucket:?}: {}",
                classify("PutItem", err)
            )),
        }
    }
}

fn refill_request(
    agg: &Aggregator,
    bucket: &BucketRef,
    plan: &RefillWrite,
) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
    let mut e = Expr::default();
    let rf = e.name("rf");
    let rf_new = e.value(n(plan.rf_new));
    let rf_read = e.value(n(plan.rf_read));
    let mut adds = Vec::new();
    let mut conditions = vec![format!("{rf} = {rf_read}")];
    for d in &plan.deltas {
        let attr = e.name(&format!("b_{}_tk", d.limit));
        let v = e.value(n(d.delta));
        adds.push(format!("{attr} {v}"));
        if d.delta > 0 {
            let pin = e.value(n(d.tk_read));
            conditions.push(format!("{attr} <= {pin}"));
        }
    }
    // The attribute must still hold what was read, or still be absent.
    for (attr, read) in [("vu", plan.vu_read), ("shard_count", plan.shard_count)] {
        let name = e.name(attr);
        conditions.push(match read {
            Some(v) => {
                let v = e.value(n(v));
                format!("{name} = {v}")
            }
            None => format!("attribute_not_exists({name})"),
        });
    }
    let (pk, sk) = bucket.bucket_key();
    agg.client()
        .update_item()
        .table_name(&agg.settings().table_name)
        .set_key(Some(key(pk, sk)))
        .update_expression(format!("SET {rf} = {rf_new} ADD {}", adds.join(", ")))
        .condition_expression(conditions.join(" AND "))
        .set_expression_attribute_names(Some(e.names))
        .set_expression_attribute_values(Some(e.values))
}

fn shard_count_attr(image: &Item) -> Option<i64> {
    dynalimit_repository::item::get_i64(image, "shard_count")
}

pub(crate) async fn run(
    agg: &Aggregator,
    activity: &BTreeMap<BucketRef, BucketActivity>,
) -> ProactiveReport {
    let mut report = ProactiveReport::default();
    let settings = agg.settings();
    for (bucket, act) in activity {
        let img = image_from_item(&act.image);
        let now = agg.clock().epoch_millis();
        if settings.proactive_refill
            && let Some(plan) = plan_refill(&img, shard_count_attr(&act.image), &act.consumed, now)
        {
            match refill_request(agg, bucket, &plan).send().await {
                Ok(_) => report.refills += 1,
                Err(err) if err.code() == Some("ConditionalCheckFailedException") => {}
                Err(err) => report.errors.push(format!(
                    "refill of {bucket:?}: {}",
                    classify("UpdateItem", err)
                )),
            }
        }
        if !settings.proactive_sharding || bucket.shard != 0 {
            continue;
        }
        let store = BucketStore::new(
            agg.client().clone(),
            settings.table_name.clone(),
            bucket.namespace_id.clone(),
        );
        if let Some(raised) = act.shard_count_raised {
            propagate(agg, &store, bucket, &act.image, raised, &mut report).await;
        }
        if let Some((from, to)) = plan_doubling(&img, now) {
            let key = BucketKey::new(bucket.entity_id.clone(), bucket.resource.clone(), 0);
            match store
                .double_shards(&key, from, to, &doubling_donations(&img, to))
                .await
            {
                Ok(doubling) => {
                    if doubling.count == to {
                        report.shards_stamped += 1;
                    }
                    for (shard, e) in doubling.failed {
                        report.errors.push(format!(
                            "propagation of shard_count {} to shard {shard} of {bucket:?}: {e}",
                            doubling.count
                        ));
                    }
                }
                Err(e) => report.errors.push(format!("doubling of {bucket:?}: {e}")),
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use dynalimit_core::decide::LimitState;

    use super::*;

    fn image(rpm_tk: i64, wcu_tk: i64, shards: u32) -> BucketImage {
        let mut img = BucketImage {
            rf: 1_000_000,
            shard_count: shards,
            ..BucketImage::default()
        };
        img.limits.insert(
            "rpm".into(),
            LimitState {
                tk: rpm_tk,
                cp: 100_000,
                ra: 100_000,
                rp: 60_000,
                tc: 0,
            },
        );
        img.wcu = Some(LimitState {
            tk: wcu_tk,
            cp: 1_000_000,
            ra: 1_000_000,
            rp: 1000,
            tc: 0,
        });
        img
    }

    #[test]
    fn refill_is_written_only_for_busy_buckets_and_trims_always() {
        let consumed = BTreeMap::from([("rpm".to_owned(), 30_000)]);
        // 6 s later: +10 tokens; projected 20 tokens is below the 30 consumed: refill.
        let plan = plan_refill(&image(10_000, 500_000, 1), Some(1), &consumed, 1_006_000).unwrap();
        assert_eq!(plan.rf_new, 1_006_000);
        assert_eq!(
            plan.deltas,
            vec![
                RefillDelta {
                    limit: "rpm".into(),
                    delta: 10_000,
                    tk_read: 10_000
                },
                RefillDelta {
                    limit: "wcu".into(),
                    delta: 500_000,
                    tk_read: 500_000
                },
            ]
        );
        // Projected 80 tokens is plenty: nothing to write.
        assert!(plan_refill(&image(70_000, 1_000_000, 1), Some(1), &consumed, 1_006_000).is_none());
        // Above the ceiling of 2 shards (50 tokens): trimmed even without consumption.
        let plan = plan_refill(
            &image(90_000, 1_000_000, 2),
            Some(2),
            &BTreeMap::new(),
            1_000_000,
        )
        .unwrap();
        assert_eq!(plan.deltas[0].delta, -40_000);
        // A clock behind rf never moves rf backward.
        let plan = plan_refill(&image(90_000, 1_000_000, 2), Some(2), &BTreeMap::new(), 5).unwrap();
        assert_eq!(plan.rf_new, 1_000_000);
    }

    #[test]
    fn items_the_core_profile_cannot_read_are_left_alone() {
        let mut img = image(0, 0, 1);
        img.vu = Some(2_000_000);
        let consumed = BTreeMap::from([("rpm".to_owned(), 30_000)]);
        assert!(plan_refill(&img, Some(1), &consumed, 1_006_000).is_none());
        assert!(plan_doubling(&img, 1_000_000).is_none());
        let mut img = image(0, 0, 1);
        img.disabled = true;
        assert!(plan_refill(&img, Some(1), &consumed, 1_006_000).is_none());
    }

    #[test]
    fn a_clone_holds_one_share_per_limit_a_full_wcu_and_its_own_keys() {
        let bucket = BucketRef {
            namespace_id: "ns1".into(),
            entity_id: "hot".into(),
            resource: "gpt-4".into(),
            shard: 0,
        };
        let mut shard0 = key(keys::bucket_pk("ns1", "hot", "gpt-4", 0), keys::STATE_SK);
        for (k, v) in [
            ("rf", n(1_000_000)),
            ("shard_count", n(4)),
            ("vu", n(0)),
            ("ttl", n(99)),
            ("b_rpm_tk", n(3_000)),
            ("b_rpm_cp", n(100_000)),
            ("b_rpm_ra", n(100_000)),
            ("b_rpm_rp", n(60_000)),
            ("b_rpm_tc", n(77_000)),
            ("b_wcu_tk", n(10_000)),
            ("b_wcu_cp", n(1_000_000)),
            ("b_wcu_ra", n(1_000_000)),
            ("b_wcu_rp", n(1000)),
            ("b_wcu_tc", n(5)),
        ] {
            shard0.insert(k.to_owned(), v);
        }
        let clone = clone_for_shard(&shard0, &bucket, 3, 4, 2_000_000);
        let num = |k: &str| dynalimit_repository::item::get_i64(&clone, k);
        let text = |k: &str| dynalimit_repository::item::get_s(&clone, k).map(str::to_owned);
        assert_eq!(text("PK"), Some(keys::bucket_pk("ns1", "hot", "gpt-4", 3)));
        assert_eq!(text("GSI2SK"), Some(keys::bucket_gsi2sk("hot", 3)));
        assert_eq!(text("GSI3SK"), Some(keys::bucket_gsi3sk("gpt-4", 3)));
        assert_eq!(text("GSI4SK"), Some(keys::bucket_gsi4sk("hot", "gpt-4", 3)));
        assert_eq!(num("shard_count"), Some(4));
        assert_eq!(num("rf"), Some(2_000_000));
        assert_eq!(num("vu"), None);
        assert_eq!(num("ttl"), Some(99));
        assert_eq!((num("b_rpm_tk"), num("b_rpm_tc")), (Some(25_000), Some(0)));
        assert_eq!(num("b_rpm_cp"), Some(100_000), "capacity stays undivided");
        assert_eq!(
            (num("b_wcu_tk"), num("b_wcu_tc")),
            (Some(1_000_000), Some(0))
        );
    }

    #[test]
    fn doubling_when_wcu_projects_below_a_fifth_and_below_the_cap() {
        assert_eq!(
            plan_doubling(&image(0, 100_000, 1), 1_000_000),
            Some((1, 2))
        );
        // 100 ms later the wcu has refilled to 200 tokens: 20 %, no doubling.
        assert_eq!(plan_doubling(&image(0, 100_000, 1), 1_100_000), None);
        assert_eq!(plan_doubling(&image(0, 0, 32), 1_000_000), None);
        assert_eq!(plan_doubling(&image(0, 0, 16), 1_000_000), Some((16, 32)));
    }
}
