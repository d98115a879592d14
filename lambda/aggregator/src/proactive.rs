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
//!
//! Items the core profile cannot interpret (schedules, quotas, a `vu` boundary) are left
//! alone, as are disabled ones.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use dynalimit_core::bucket::{ShardParams, doubled_shard_count, refill};
use dynalimit_core::decide::{BucketImage, doubling_donations};
use dynalimit_repository::bucket::{BucketKey, BucketStore, image_from_item};
use dynalimit_repository::error::classify;
use dynalimit_repository::item::{Item, key, n};

use crate::processor::{BucketActivity, BucketRef};
use crate::sink::Aggregator;
use crate::writes::Expr;

/// What the proactive passes did.
#[derive(Debug, Default)]
pub(crate) struct ProactiveReport {
    pub(crate) refills: usize,
    pub(crate) shards_stamped: usize,
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
        if settings.proactive_sharding
            && bucket.shard == 0
            && let Some((from, to)) = plan_doubling(&img, now)
        {
            let store = BucketStore::new(
                agg.client().clone(),
                settings.table_name.clone(),
                bucket.namespace_id.clone(),
            );
            let key = BucketKey::new(bucket.entity_id.clone(), bucket.resource.clone(), 0);
            match store
                .double_shards(&key, from, to, &doubling_donations(&img, to))
                .await
            {
                Ok(count) if count == to => report.shards_stamped += 1,
                Ok(_) => {}
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
