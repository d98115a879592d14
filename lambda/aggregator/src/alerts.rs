//! Budget alerts: thresholds on quotas, evaluated from the stream, each crossing published
//! once per period to an EventBridge bus.
//!
//! An operator sets thresholds on a quota of an (entity, resource): percentages of the
//! period's grant (`dynalimit alerts set acme gpt-4 tpd 80,100`; items in
//! [`dynalimit_format::alert`]). For every bucket item a batch changed whose last image
//! carries a quota, the aggregator reads the thresholds of its (entity, resource) (cached for
//! [`THRESHOLD_CACHE_MS`] per process) and computes, per quota, the share of its grant the
//! shard has consumed ([`crossings`], no I/O): a calendar quota's period is the one its last
//! refill (`rf`) lies in, starting at the reset edge before it; a session quota's is its open
//! window. On a sharded bucket each shard holds its share of the grant, and a threshold is
//! crossed when one shard crosses it.
//!
//! # At most once per threshold and period
//! Before publishing, the aggregator puts the crossing's marker
//! (`#ALERTED#{resource}#{limit}#{level}#{period}`) with `attribute_not_exists(PK)`, naming
//! itself with a fresh token. Only the writer whose put created the marker publishes:
//! * a redelivered batch, a second aggregator, a second shard: the marker exists under another
//!   token, nothing is published;
//! * a put whose answer was lost and which the SDK sent again: the condition fails, but the
//!   marker holds this write's token, so it publishes;
//! * `PutEvents` refused (the service answered with an error, or the connection was never
//!   made, or it reported the entry failed): the marker is deleted (if it still holds the
//!   token) and the bucket's last record is reported failed, so the redelivery tries again;
//! * `PutEvents` whose answer was lost, or the function ending between the put and the
//!   publication: the marker stays and the alert may be lost. It is never published twice.
//!
//! The marker's `ttl` is a day after the period ends (at most 400 days ahead).
//!
//! Refusal alerts ("a limit has refused for N minutes") go through the same marker and
//! publication; [`crate::refusing`] finds them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use dynalimit_core::image::{BucketImage, quota_params};
use dynalimit_format::alert::{self, Crossing};
use dynalimit_format::bucket::image_from_item;
use dynalimit_format::item::{self, Item};
use dynalimit_repository::batch_get_items;
use futures::StreamExt;
use serde_json::json;

use crate::processor::{BucketActivity, BucketRef, GroupKey};
use crate::record::SequenceNumber;

/// The `source` of every alert event.
pub const EVENT_SOURCE: &str = "dynalimit";
/// The `detail-type` of a crossed quota threshold.
pub const DETAIL_TYPE: &str = "Quota threshold crossed";
/// The IAM actions the alert pass needs: the thresholds' read, the refusal minutes' query,
/// the marker's put and undo, and the publication (the stack grants the last two only with an
/// alert bus).
pub const IAM_ACTIONS: [&str; 5] = [
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:DeleteItem",
    "events:PutEvents",
];
/// How long the thresholds of an (entity, resource) are used before they are read again.
pub const THRESHOLD_CACHE_MS: i64 = 60_000;
/// Most (entity, resource) thresholds and published crossings remembered per process.
const CACHE_ENTRIES: usize = 10_000;
/// Crossings published at once.
const CONCURRENCY: usize = 8;
const DAY_MS: i64 = 86_400_000;

/// One threshold crossed, as one shard's image showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The threshold and period.
    pub crossing: Crossing,
    /// Millitokens of the shard's grant consumed (the grant less the balance).
    pub consumed_milli: i128,
    /// The shard's grant this period, millitokens (`cp // gc + tu`).
    pub grant_milli: i64,
    /// When the period ends, epoch ms, if known.
    pub period_end_ms: Option<i64>,
}

/// The thresholds `levels` (percentages by limit) crossed on a bucket image of `entity` and
/// `resource`: for each quota with thresholds, every percentage `p` with
/// `consumed × 100 ≥ p × grant`. Limits that refill, a grant of zero or less, and a session
/// window that is not open at the image's refill time cross nothing.
pub fn crossings(
    image: &BucketImage,
    entity: &str,
    resource: &str,
    levels: &BTreeMap<String, Vec<u8>>,
) -> Vec<Observed> {
    let mut out = Vec::new();
    let rf = image.rf;
    for (name, levels) in levels {
        let Some(state) = image.limits.get(name) else {
            continue;
        };
        let (period_start_ms, period_end_ms) = if let Some(rsa) = image.window_length(name) {
            let w = image.windows.get(name).copied().unwrap_or_default();
            match (w.ws, w.end(rsa)) {
                // The balance is this window's only when no newer window reached the shard.
                (Some(ws), Some(end)) if ws <= rf && rf < end && !w.rolled(rf) => (ws, Some(end)),
                _ => continue,
            }
        } else if let Some(reset) = image.resets.get(name) {
            (reset.prev_edge(rf).unwrap_or(0), reset.next_edge(rf))
        } else {
            continue;
        };
        let (gc, tu) = image.grant(name);
        let grant = quota_params(state, image.schedule(name), gc, tu, rf).ceiling;
        if grant <= 0 {
            continue;
        }
        let consumed = i128::from(grant) - i128::from(state.tk);
        for &level in levels {
            if consumed * 100 >= i128::from(level) * i128::from(grant) {
                out.push(Observed {
                    crossing: Crossing {
                        entity_id: entity.to_owned(),
                        resource: resource.to_owned(),
                        limit: name.clone(),
                        level,
                        period_start_ms,
                    },
                    consumed_milli: consumed,
                    grant_milli: grant,
                    period_end_ms,
                });
            }
        }
    }
    out
}

/// The marker's `ttl`: a day after the period ends, at most 400 days after `now_ms`.
pub fn marker_ttl_s(period_end_ms: Option<i64>, now_ms: i64) -> i64 {
    let latest = now_ms.saturating_add(400 * DAY_MS);
    let end = period_end_ms.map_or(latest, |e| e.saturating_add(DAY_MS).min(latest));
    end.max(now_ms).div_euclid(1000)
}

/// What the alert pass of one batch did.
#[derive(Debug, Default)]
pub(crate) struct AlertOutcome {
    pub published: usize,
    pub failed: Vec<SequenceNumber>,
    pub errors: Vec<String>,
}

/// The thresholds of one (entity, resource) as read (none when it has no item).
pub(crate) type Levels = Arc<alert::Thresholds>;

/// The alert publisher of one aggregator: the bus, and what this process remembers.
#[derive(Debug, Clone)]
pub struct Alerts {
    events: aws_sdk_eventbridge::Client,
    bus: String,
    thresholds: Arc<Mutex<HashMap<GroupKey, (i64, Levels)>>>,
    published: Arc<Mutex<HashSet<(String, Crossing)>>>,
}

/// One alert to publish once: its marker, and the event.
pub(crate) struct Marked {
    /// What it is, for messages.
    pub what: String,
    /// The marker item, with `token`.
    pub marker: Item,
    /// The marker's key.
    pub key: Item,
    /// The token the marker was written with.
    pub token: String,
    /// The event's `detail-type`.
    pub detail_type: &'static str,
    /// The event's detail.
    pub detail: serde_json::Value,
}

/// A fresh marker token.
pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

enum Publish {
    Done,
    /// Refused: nothing was published.
    Refused(String),
    /// May have been published.
    Unknown(String),
}

impl Alerts {
    /// Publishes to event bus `bus` (a name or an ARN) with the settings of `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, bus: impl Into<String>) -> Self {
        Alerts {
            events: aws_sdk_eventbridge::Client::new(sdk),
            bus: bus.into(),
            thresholds: Arc::default(),
            published: Arc::default(),
        }
    }

    /// The event bus.
    pub fn bus(&self) -> &str {
        &self.bus
    }

    /// Evaluates the batch's bucket images and publishes what crossed.
    pub(crate) async fn run(
        &self,
        client: &Client,
        table: &str,
        now_ms: i64,
        activity: &BTreeMap<BucketRef, BucketActivity>,
    ) -> AlertOutcome {
        let mut outcome = AlertOutcome::default();
        let mut images = Vec::new();
        for (bucket, a) in activity {
            // Items without a quota need no thresholds: most batches read nothing.
            match image_from_item(&a.image) {
                Ok(image) if image.quota_names().next().is_some() => {
                    images.push((bucket, a, image));
                }
                Ok(_) => {}
                Err(e) => outcome.errors.push(format!("alerts: {e}")),
            }
        }
        if images.is_empty() {
            return outcome;
        }
        let groups: Vec<GroupKey> = images.iter().map(|(b, _, _)| b.group()).collect();
        let thresholds = match self.thresholds(client, table, now_ms, groups).await {
            Ok(t) => t,
            Err(e) => {
                outcome
                    .errors
                    .push(format!("alerts: reading thresholds: {e}"));
                outcome
                    .failed
                    .extend(images.iter().map(|(_, a, _)| a.sequence_number.clone()));
                return outcome;
            }
        };
        let mut due: BTreeMap<(String, Crossing), (Observed, BucketRef, SequenceNumber)> =
            BTreeMap::new();
        for (bucket, a, image) in &images {
            let Some(t) = thresholds.get(&bucket.group()) else {
                continue;
            };
            for o in crossings(image, &bucket.entity_id, &bucket.resource, &t.levels) {
                let key = (bucket.namespace_id.clone(), o.crossing.clone());
                due.entry(key)
                    .or_insert_with(|| (o, (*bucket).clone(), a.sequence_number.clone()));
            }
        }
        {
            let published = self.published.lock().expect("alert cache");
            due.retain(|key, _| !published.contains(key));
        }
        let results: Vec<_> = futures::stream::iter(due)
            .map(|((ns, crossing), (observed, bucket, seq))| async move {
                let result = self
                    .publish_once(client, table, now_ms, &ns, &bucket, &observed)
                    .await;
                (ns, crossing, seq, result)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (ns, crossing, seq, result) in results {
            match result {
                Ok(published) => {
                    outcome.published += usize::from(published);
                    let mut cache = self.published.lock().expect("alert cache");
                    if cache.len() >= CACHE_ENTRIES {
                        cache.clear();
                    }
                    cache.insert((ns, crossing));
                }
                Err((message, retry)) => {
                    outcome.errors.push(message);
                    if retry {
                        outcome.failed.push(seq);
                    }
                }
            }
        }
        outcome
    }

    /// The thresholds of `groups`, from the cache or read (eventually consistent).
    pub(crate) async fn thresholds(
        &self,
        client: &Client,
        table: &str,
        now_ms: i64,
        groups: Vec<GroupKey>,
    ) -> Result<HashMap<GroupKey, Levels>, dynalimit_repository::RepositoryError> {
        let mut out = HashMap::new();
        let mut missing: Vec<GroupKey> = Vec::new();
        {
            let cache = self.thresholds.lock().expect("threshold cache");
            let mut seen = HashSet::new();
            for g in groups {
                if !seen.insert(g.clone()) {
                    continue;
                }
                match cache.get(&g) {
                    Some((at, levels)) if now_ms.saturating_sub(*at) < THRESHOLD_CACHE_MS => {
                        out.insert(g, levels.clone());
                    }
                    _ => missing.push(g),
                }
            }
        }
        for chunk in missing.chunks(100) {
            let keys: Vec<Item> = chunk
                .iter()
                .map(|g| alert::thresholds_key(&g.namespace_id, &g.entity_id, &g.resource))
                .collect();
            // Every group read, with no thresholds until its item says otherwise.
            let by_key: HashMap<(String, String), &GroupKey> = keys
                .iter()
                .zip(chunk)
                .filter_map(|(k, g)| {
                    let (pk, sk) = item::key_of(k)?;
                    Some(((pk.to_owned(), sk.to_owned()), g))
                })
                .collect();
            let found = batch_get_items(client, table, keys, false).await?;
            let mut read: HashMap<GroupKey, Levels> = chunk
                .iter()
                .map(|g| (g.clone(), Levels::default()))
                .collect();
            for it in &found {
                let Some(g) = item::key_of(it)
                    .and_then(|(pk, sk)| by_key.get(&(pk.to_owned(), sk.to_owned())))
                else {
                    continue;
                };
                if let Some(t) = alert::thresholds_of(&g.namespace_id, it) {
                    for bad in &t.unreadable {
                        tracing::warn!(error = %bad, "alert thresholds not used");
                    }
                    read.insert((*g).clone(), Arc::new(t));
                }
            }
            let mut cache = self.thresholds.lock().expect("threshold cache");
            if cache.len() + read.len() > CACHE_ENTRIES {
                cache.clear();
            }
            for (g, levels) in read {
                cache.insert(g.clone(), (now_ms, levels.clone()));
                out.insert(g, levels);
            }
        }
        Ok(out)
    }

    /// Puts the crossing's marker, then publishes. `Ok(true)` published, `Ok(false)` another
    /// write owns the crossing; `Err((message, deliver again))`.
    async fn publish_once(
        &self,
        client: &Client,
        table: &str,
        now_ms: i64,
        ns: &str,
        bucket: &BucketRef,
        o: &Observed,
    ) -> Result<bool, (String, bool)> {
        let token = new_token();
        let ttl = marker_ttl_s(o.period_end_ms, now_ms);
        let c = &o.crossing;
        let detail = json!({
            "namespace_id": ns,
            "entity_id": c.entity_id,
            "resource": c.resource,
            "limit": c.limit,
            "threshold_percent": c.level,
            "consumed": i64::try_from(o.consumed_milli.div_euclid(1000)).unwrap_or(i64::MAX),
            "grant": o.grant_milli.div_euclid(1000),
            "period_start_ms": c.period_start_ms,
            "period_end_ms": o.period_end_ms,
            "shard": bucket.shard,
            "observed_at_ms": now_ms,
        });
        let marked = Marked {
            what: format!(
                "alert {}/{}/{} {}% of period {}",
                c.entity_id, c.resource, c.limit, c.level, c.period_start_ms
            ),
            marker: c.marker_item(ns, now_ms, &token, ttl),
            key: c.marker_key(ns),
            token,
            detail_type: DETAIL_TYPE,
            detail,
        };
        self.publish_marked(client, table, marked).await
    }

    /// Puts `m`'s marker with `attribute_not_exists(PK)`, then publishes its event (see the
    /// module documentation). `Ok(true)` published, `Ok(false)` another write owns the
    /// marker; `Err((message, deliver again))`.
    pub(crate) async fn publish_marked(
        &self,
        client: &Client,
        table: &str,
        m: Marked,
    ) -> Result<bool, (String, bool)> {
        let Marked {
            what,
            marker,
            key,
            token,
            detail_type,
            detail,
        } = m;
        let is_new = alert::marker_is_new();
        match client
            .put_item()
            .table_name(table)
            .set_item(Some(marker))
            .set_condition_expression(is_new.condition_expression())
            .set_expression_attribute_names(is_new.names())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await
        {
            Ok(_) => {}
            Err(SdkError::ServiceError(e)) => match e.err() {
                PutItemError::ConditionalCheckFailedException(c) => {
                    let ours = c
                        .item()
                        .and_then(|it| item::get_s(it, alert::TOKEN))
                        .is_some_and(|t| t == token);
                    if !ours {
                        return Ok(false);
                    }
                }
                other => return Err((format!("{what}: marker write refused: {other}"), true)),
            },
            Err(e) => {
                let e = dynalimit_repository::RepositoryError::from_sdk("PutItem", e);
                return Err((format!("{what}: marker write failed: {e}"), true));
            }
        }
        match self.publish(detail_type, &detail).await {
            Publish::Done => Ok(true),
            Publish::Unknown(e) => Err((
                format!("{what}: may not have been published (answer lost; not sent again): {e}"),
                false,
            )),
            Publish::Refused(e) => {
                let ours = alert::marker_written_with(&token);
                let undo = client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(key))
                    .set_condition_expression(ours.condition_expression())
                    .set_expression_attribute_names(ours.names())
                    .set_expression_attribute_values(ours.values())
                    .send()
                    .await;
                let undone = match undo {
                    Ok(_) => String::new(),
                    Err(d) => format!(
                        "; the marker stays ({}), so this alert is not published",
                        dynalimit_repository::RepositoryError::from_sdk("DeleteItem", d)
                    ),
                };
                Err((format!("{what}: refused by EventBridge: {e}{undone}"), true))
            }
        }
    }

    async fn publish(&self, detail_type: &str, detail: &serde_json::Value) -> Publish {
        let entry = PutEventsRequestEntry::builder()
            .source(EVENT_SOURCE)
            .detail_type(detail_type)
            .detail(detail.to_string())
            .event_bus_name(&self.bus)
            .build();
        match self.events.put_events().entries(entry).send().await {
            Ok(out) if out.failed_entry_count() == 0 => Publish::Done,
            Ok(out) => Publish::Refused(
                out.entries()
                    .iter()
                    .filter_map(|e| {
                        e.error_code()
                            .map(|c| format!("{c}: {}", e.error_message().unwrap_or("")))
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(e) => {
                let refused = match &e {
                    SdkError::ServiceError(s) => s.raw().status().as_u16() < 500,
                    SdkError::ConstructionFailure(_) => true,
                    SdkError::DispatchFailure(d) => d
                        .as_connector_error()
                        .is_some_and(|c| dynalimit_wire::retry::never_connected(c)),
                    _ => false,
                };
                let message = aws_sdk_eventbridge::error::DisplayErrorContext(&e).to_string();
                if refused {
                    Publish::Refused(message)
                } else {
                    Publish::Unknown(message)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_core::image::{LimitState, QuotaState, WindowState};
    use dynalimit_core::schedule::{ResetSchedule, Zone};
    use proptest::prelude::*;

    const NOV_1: i64 = 1_793_491_200_000;
    const NOV_15: i64 = 1_794_700_800_000;
    const DEC_1: i64 = 1_796_083_200_000;

    /// A monthly quota `tpd` of `cp` milli with balance `tk`, last refilled mid-November.
    fn monthly(tk: i64, cp: i64, shards: u32) -> BucketImage {
        let mut image = BucketImage {
            rf: NOV_15,
            shard_count: shards,
            ..BucketImage::default()
        };
        image.limits.insert(
            "tpd".into(),
            LimitState {
                tk,
                cp,
                ra: 0,
                rp: 1000,
                tc: 0,
            },
        );
        image.resets.insert(
            "tpd".into(),
            ResetSchedule::parse("0 0 1 * *", Zone::utc()).unwrap(),
        );
        image
    }

    fn levels(limit: &str, levels: &[u8]) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(limit.to_owned(), levels.to_vec())])
    }

    fn crossed(image: &BucketImage, l: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
        crossings(image, "acme", "gpt-4", l)
            .iter()
            .map(|o| o.crossing.level)
            .collect()
    }

    #[test]
    fn a_monthly_quota_crosses_each_percentage_it_has_consumed() {
        let l = levels("tpd", &[50, 80, 100]);
        assert_eq!(
            crossed(&monthly(1_000_000, 1_000_000, 1), &l),
            Vec::<u8>::new()
        );
        assert_eq!(crossed(&monthly(250_000, 1_000_000, 1), &l), vec![50]);
        assert_eq!(crossed(&monthly(200_001, 1_000_000, 1), &l), vec![50]);
        assert_eq!(crossed(&monthly(200_000, 1_000_000, 1), &l), vec![50, 80]);
        assert_eq!(crossed(&monthly(0, 1_000_000, 1), &l), vec![50, 80, 100]);
        assert_eq!(
            crossed(&monthly(-5_000, 1_000_000, 1), &l),
            vec![50, 80, 100]
        );
        let o = &crossings(&monthly(0, 1_000_000, 1), "acme", "gpt-4", &l)[0];
        assert_eq!(o.crossing.period_start_ms, NOV_1);
        assert_eq!(o.period_end_ms, Some(DEC_1));
        assert_eq!((o.consumed_milli, o.grant_milli), (1_000_000, 1_000_000));
        // Other limits and limits without thresholds cross nothing.
        assert!(crossed(&monthly(0, 1_000_000, 1), &levels("rpm", &[1])).is_empty());
    }

    #[test]
    fn a_shard_is_judged_against_its_share_and_the_top_ups() {
        let l = levels("tpd", &[80]);
        // Four shards: each holds 250 of the 1000 tokens.
        assert_eq!(crossed(&monthly(50_000, 1_000_000, 4), &l), vec![80]);
        assert!(crossed(&monthly(51_000, 1_000_000, 4), &l).is_empty());
        // A top-up of 250 tokens this period doubles the shard's grant: 150 left of 500 is
        // 70 % consumed.
        let mut topped = monthly(150_000, 1_000_000, 4);
        topped.quotas.insert(
            "tpd".into(),
            QuotaState {
                gc: Some(4),
                tu: Some(250_000),
                rn: None,
            },
        );
        assert!(crossed(&topped, &l).is_empty());
        topped.limits.get_mut("tpd").unwrap().tk = 100_000;
        let o = crossings(&topped, "a", "r", &l);
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].consumed_milli, o[0].grant_milli), (400_000, 500_000));
    }

    #[test]
    fn limits_that_refill_and_closed_windows_cross_nothing() {
        let mut image = monthly(0, 1_000_000, 1);
        image.resets.clear();
        assert!(crossed(&image, &levels("tpd", &[1])).is_empty());
        // A session quota of one hour, opened at NOV_15 - 10 min.
        let ws = NOV_15 - 600_000;
        image.windows.insert(
            "tpd".into(),
            WindowState {
                rsa: Some(3600),
                ws: Some(ws),
                wa: Some(ws),
                wtc: None,
            },
        );
        let o = crossings(&image, "a", "r", &levels("tpd", &[100]));
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].crossing.period_start_ms, ws);
        assert_eq!(o[0].period_end_ms, Some(ws + 3_600_000));
        // The window ended before the image's refill: its balance is not this period's.
        image.rf = ws + 3_600_000;
        assert!(crossed(&image, &levels("tpd", &[100])).is_empty());
        // A newer window reached the shard, whose balance is still the old window's.
        image.rf = NOV_15;
        image.windows.get_mut("tpd").unwrap().wa = Some(ws - 1);
        assert!(crossed(&image, &levels("tpd", &[100])).is_empty());
    }

    #[test]
    fn the_marker_lives_a_day_past_the_period_and_never_beyond_400_days() {
        assert_eq!(marker_ttl_s(Some(DEC_1), NOV_15), (DEC_1 + DAY_MS) / 1000);
        assert_eq!(
            marker_ttl_s(Some(i64::MAX), NOV_15),
            (NOV_15 + 400 * DAY_MS) / 1000
        );
        assert_eq!(marker_ttl_s(None, NOV_15), (NOV_15 + 400 * DAY_MS) / 1000);
        assert_eq!(marker_ttl_s(Some(0), NOV_15), NOV_15 / 1000);
    }

    proptest! {
        /// Any balance and grant the bounds allow: a percentage is crossed exactly when that
        /// share of the grant is consumed, a crossed percentage implies every lower one, and
        /// nothing panics.
        #[test]
        fn crossings_follow_the_consumed_share(
            tk in -2_000_000_000_000_000_000i64..=2_000_000_000_000_000_000,
            cp in -2_000_000_000_000_000_000i64..=2_000_000_000_000_000_000,
            shards in 1u32..=32,
            mut l in proptest::collection::btree_set(1u8..=100, 1..=10),
        ) {
            let l: Vec<u8> = std::mem::take(&mut l).into_iter().collect();
            let image = monthly(tk, cp, shards);
            let got = crossed(&image, &levels("tpd", &l));
            let grant = i128::from(cp.div_euclid(i64::from(shards)));
            let want: Vec<u8> = l
                .iter()
                .copied()
                .filter(|p| grant > 0 && (grant - i128::from(tk)) * 100 >= i128::from(*p) * grant)
                .collect();
            prop_assert_eq!(&got, &want);
            if let Some(top) = got.last() {
                prop_assert!(l.iter().filter(|p| *p <= top).count() == got.len());
            }
        }
    }
}
