//! Bucket items (reference §1.4.7): their key, the image the acquire decides on, the item a
//! create puts, the owner stamp, and the shared pause stamp.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::bounds;
use dynalimit_core::bucket::WCU;
use dynalimit_core::image::{
    BucketImage, CreatePlan, LimitState, NewShard, QuotaState, WindowState,
};
use dynalimit_core::schedule::{ResetSchedule, Schedule, Zone};

use crate::FormatError;
use crate::attr::{self, BucketField, QuotaField, bucket_limit, parse_bucket_limit};
use crate::config::Access;
use crate::expr::{Expr, num};
use crate::item::{Item, describe_key, get_i64, get_s as get_str, key as key_map, parse_number};
use crate::keys;
use crate::schedule::{self, UNSCHEDULED};

/// One bucket item's identity: owner entity, resource and shard.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    /// Owner entity.
    pub entity_id: String,
    /// Resource.
    pub resource: String,
    /// Shard id, 0-based.
    pub shard: u32,
}

impl BucketKey {
    /// A key for `shard` of `(entity_id, resource)`.
    pub fn new(entity_id: impl Into<String>, resource: impl Into<String>, shard: u32) -> Self {
        BucketKey {
            entity_id: entity_id.into(),
            resource: resource.into(),
            shard,
        }
    }

    /// The same bucket on another shard.
    #[must_use]
    pub fn with_shard(&self, shard: u32) -> Self {
        BucketKey {
            shard,
            ..self.clone()
        }
    }

    /// `{ns}/BUCKET#{entity}#{resource}#{shard}`.
    pub fn pk(&self, ns: &str) -> String {
        keys::bucket_pk(ns, &self.entity_id, &self.resource, self.shard)
    }

    /// Parses a bucket partition key of namespace `ns`.
    pub fn parse(ns: &str, pk: &str) -> Option<Self> {
        let k = keys::parse_bucket_pk(pk)?;
        (k.namespace_id == ns).then(|| BucketKey::new(k.entity_id, k.resource, k.shard))
    }

    /// The primary key map of the item.
    pub fn key_map(&self, ns: &str) -> Item {
        key_map(self.pk(ns), keys::STATE_SK)
    }
}

/// One attribute value of a bucket item as the image decoder reads it, borrowed from wherever
/// the item was read: an SDK item ([`image_from_item`]) or the bytes of a response
/// ([`image_from_attributes`]). Every type the decoder does not read is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// A number, as its decimal text.
    N(&'a str),
    /// A string.
    S(&'a str),
    /// A boolean.
    Bool(bool),
    /// Any other type (`NULL`, binary, a set, a list or a map).
    Other,
}

impl<'a> Value<'a> {
    /// The borrowed form of an SDK attribute value.
    pub fn of(value: &'a AttributeValue) -> Self {
        match value {
            AttributeValue::N(n) => Value::N(n),
            AttributeValue::S(s) => Value::S(s),
            AttributeValue::Bool(b) => Value::Bool(*b),
            _ => Value::Other,
        }
    }

    /// The integer of a number value, if it is one.
    fn number(self) -> Option<i64> {
        match self {
            Value::N(n) => parse_number(n),
            _ => None,
        }
    }

    /// The text of a string value, if it is one.
    fn string(self) -> Option<&'a str> {
        match self {
            Value::S(s) => Some(s),
            _ => None,
        }
    }
}

/// The item-level attributes of a bucket item that the image carries, gathered in the same
/// pass as its limits (the first of a name counts).
#[derive(Default)]
struct Scalars<'a> {
    rf: Option<Value<'a>>,
    shard_count: Option<Value<'a>>,
    cascade: Option<Value<'a>>,
    parent_id: Option<Value<'a>>,
    pgen: Option<Value<'a>>,
    pinc: Option<Value<'a>>,
    ttl: Option<Value<'a>>,
    vu: Option<Value<'a>>,
    bypass: Option<Value<'a>>,
    disabled: Option<Value<'a>>,
}

impl<'a> Scalars<'a> {
    /// Keeps `value` when `name` is one of the item-level attributes; whether it was.
    fn take(&mut self, name: &str, value: Value<'a>) -> bool {
        let slot = match name {
            attr::RF => &mut self.rf,
            attr::SHARD_COUNT => &mut self.shard_count,
            attr::CASCADE => &mut self.cascade,
            attr::PARENT_ID => &mut self.parent_id,
            attr::PGEN => &mut self.pgen,
            attr::PINC => &mut self.pinc,
            attr::TTL => &mut self.ttl,
            attr::VU => &mut self.vu,
            attr::BYPASS => &mut self.bypass,
            attr::DISABLED => &mut self.disabled,
            _ => return false,
        };
        slot.get_or_insert(value);
        true
    }
}

/// Decodes a bucket item into the image the acquire decides on. Attributes of 0.15–0.17 features
/// dynalimit cannot interpret are listed in `unsupported`; soft and bypass stamps are
/// read (a stamp that is not a number, such as a pre-release `bypass = true`, reads as
/// expired).
///
/// Every value the image carries is bounded ([`dynalimit_core::bounds`]): a limit's fields
/// (present when both its `tk` and its `cp` are) are integers with `tk`, `cp`, `ra` within
/// ±2 × 10^18 and `rp` present and in `1..=10^12`; `rf` and a session window's `ws` and `wa`
/// lie between 1970 and 2500; `shard_count` and a quota's `gc` are in `1..=32`, a quota's
/// `tu` within ±2 × 10^18, a window's `rsa` in `1..=10^9`. Stamps (`bypass`, `vu`, soft stamps) are kept
/// as stored: the decisions judge them against the time.
///
/// # Errors
/// [`FormatError::Corrupt`] naming the item and the attribute whose value is outside them.
pub fn image_from_item(item: &Item) -> Result<BucketImage, FormatError> {
    let attrs = item
        .iter()
        .map(|(name, value)| (name.as_str(), Value::of(value)));
    match decode_image(attrs, Some(item)) {
        Ok(image) => Ok(image.expect("an image decoded with its whole item always decodes")),
        Err(bad) => Err(bad.at(describe_key(item))),
    }
}

/// Decodes a bucket item from its attributes, as [`image_from_item`] does, without an SDK
/// item: the warm acquire reads its image straight from the bytes of DynamoDB's answer.
///
/// `Ok(None)` when the item carries a schedule or a quota (`sched`, `rsched`, a limit's own
/// schedule, a quota's grant, top-ups, reset counter or session window): those are decoded
/// from the whole item by [`image_from_item`].
///
/// # Errors
/// [`FormatError::Corrupt`] as for [`image_from_item`].
pub fn image_from_attributes(
    attrs: &[(&str, Value<'_>)],
) -> Result<Option<BucketImage>, FormatError> {
    decode_image(attrs.iter().copied(), None).map_err(|bad| {
        let text = |name: &str| {
            attrs
                .iter()
                .find_map(|(n, v)| (*n == name).then(|| v.string()).flatten())
                .unwrap_or("?")
        };
        bad.at(format!("{}|{}", text(attr::PK), text(attr::SK)))
    })
}

/// An attribute holding what the decoder does not accept, and why.
#[derive(Debug)]
struct Bad {
    attribute: String,
    message: String,
}

impl Bad {
    fn new(attribute: impl Into<String>, value: Value<'_>, expected: &str) -> Self {
        let attribute = attribute.into();
        let shown = match value {
            Value::N(n) => n.chars().take(48).collect(),
            Value::S(s) => format!("{:?}", s.chars().take(48).collect::<String>()),
            Value::Bool(b) => b.to_string(),
            Value::Other => "a value of another type".to_owned(),
        };
        Bad {
            message: format!("{attribute} = {shown} is not {expected}"),
            attribute,
        }
    }

    /// A required attribute the item does not hold.
    fn missing(attribute: String, expected: &str) -> Self {
        Bad {
            message: format!("{attribute} is missing; it must be {expected}"),
            attribute,
        }
    }

    /// The error of the item whose key is `key`.
    fn at(self, key: String) -> FormatError {
        FormatError::corrupt_attribute(key, self.attribute, self.message)
    }
}

/// A value read for a bounded field: its integer, when it is one inside `range`.
fn bounded(
    attribute: impl FnOnce() -> String,
    value: Value<'_>,
    range: std::ops::RangeInclusive<i64>,
    expected: &str,
) -> Result<i64, Bad> {
    match value.number() {
        Some(n) if range.contains(&n) => Ok(n),
        _ => Err(Bad::new(attribute(), value, expected)),
    }
}

/// What a time read from an item must be.
const A_TIME: &str = "an epoch time in milliseconds from 1970 to 2500";
/// What a millitoken amount read from an item must be.
const AN_AMOUNT: &str = "a whole number of millitokens within ±2 × 10^18";
/// What a limit's refill period must be.
const A_PERIOD: &str = "a refill period from 1 to 10^12 ms";
/// What a shard count or a grant count must be.
const A_SHARD_COUNT: &str = "a shard count from 1 to 32";
const TIMES: std::ops::RangeInclusive<i64> = bounds::EARLIEST_TIME_MS..=bounds::LATEST_TIME_MS;
const AMOUNTS: std::ops::RangeInclusive<i64> = -bounds::MAX_STORED_MILLI..=bounds::MAX_STORED_MILLI;
const SHARD_COUNTS: std::ops::RangeInclusive<i64> = 1..=bounds::MAX_SHARD_COUNT as i64;

/// One limit's stored fields as read: its `tk`, `cp`, `ra`, `rp` and `tc` values (present or
/// not), checked into a [`LimitState`] when the limit exists (both `tk` and `cp` present).
fn limit_state(name: &str, fields: [Option<Value<'_>>; 5]) -> Result<Option<LimitState>, Bad> {
    let [Some(tk), Some(cp), ra, rp, tc] = fields else {
        return Ok(None);
    };
    let attribute = |f| move || bucket_limit(name, f);
    let amount = |f, v| bounded(attribute(f), v, AMOUNTS, AN_AMOUNT);
    Ok(Some(LimitState {
        tk: amount(BucketField::Tk, tk)?,
        cp: amount(BucketField::Cp, cp)?,
        ra: ra.map_or(Ok(0), |v| amount(BucketField::Ra, v))?,
        // A period is required and positive: one missing or at most 0 read as 1 ms would
        // give the whole refill back every millisecond.
        rp: match rp {
            Some(v) => bounded(
                attribute(BucketField::Rp),
                v,
                1..=bounds::MAX_PERIOD_MS,
                A_PERIOD,
            )?,
            None => return Err(Bad::missing(bucket_limit(name, BucketField::Rp), A_PERIOD)),
        },
        tc: tc.map_or(Ok(0), |v| {
            bounded(
                attribute(BucketField::Tc),
                v,
                i64::MIN..=i64::MAX,
                "an integer",
            )
        })?,
    }))
}

/// The image of the attributes `attrs`, in one pass over them; `item` is the whole item, which
/// schedules and quotas are decoded from (`Ok(None)` without it when the item carries them).
fn decode_image<'a>(
    attrs: impl IntoIterator<Item = (&'a str, Value<'a>)>,
    item: Option<&Item>,
) -> Result<Option<BucketImage>, Bad> {
    let mut partial: BTreeMap<&str, [Option<Value<'a>>; 5]> = BTreeMap::new();
    let mut unsupported = Vec::new();
    let mut soft = BTreeMap::new();
    let mut schedules_or_quotas = false;
    let mut scalars = Scalars::default();
    for (attr, value) in attrs {
        if scalars.take(attr, value) {
            continue;
        }
        schedules_or_quotas = schedules_or_quotas || names_a_schedule_or_quota(attr);
        if let Some(name) = attr::parse_bucket_soft(attr) {
            soft.insert(name.to_owned(), value.number().unwrap_or(0));
            continue;
        }
        let Some((name, field)) = parse_bucket_limit(attr) else {
            continue;
        };
        let slot = match field {
            BucketField::Tk => 0,
            BucketField::Cp => 1,
            BucketField::Ra => 2,
            BucketField::Rp => 3,
            BucketField::Tc => 4,
        };
        partial.entry(name).or_default()[slot].get_or_insert(value);
    }
    let rf = match scalars.rf {
        None => 0,
        Some(v) => bounded(|| attr::RF.to_owned(), v, TIMES, A_TIME)?,
    };
    let shard_count = match scalars.shard_count {
        None => 1,
        Some(v) => bounded(
            || attr::SHARD_COUNT.to_owned(),
            v,
            SHARD_COUNTS,
            A_SHARD_COUNT,
        )? as u32,
    };
    let disabled = match scalars.disabled {
        None => false,
        Some(Value::Bool(true)) => true,
        Some(_) => {
            unsupported.push(attr::DISABLED.to_owned());
            true
        }
    };
    let mut limits = BTreeMap::new();
    let mut wcu = None;
    for (name, fields) in partial {
        let Some(state) = limit_state(name, fields)? else {
            continue;
        };
        if name == WCU {
            wcu = Some(state);
        } else {
            limits.insert(name.to_owned(), state);
        }
    }
    // Most items carry no schedule and no quota: their decoding looks no attribute up.
    let (schedules, resets, quotas, windows) = if schedules_or_quotas {
        let Some(item) = item else {
            return Ok(None);
        };
        let schedules = stored_schedules(item, &limits, &mut unsupported);
        // A reset schedule makes a quota of a limit that does not drip; on one that drips it
        // is still decoded (one that does not decode makes the item unavailable) but not used.
        let mut resets = stored_resets(item, &limits, &mut unsupported);
        resets.retain(|name, _| limits.get(name).is_some_and(|l| l.ra == 0));
        let quotas = stored_quotas(item, &limits)?;
        let windows = stored_windows(item, &limits, &mut unsupported)?;
        (schedules, resets, quotas, windows)
    } else {
        Default::default()
    };
    unsupported.sort();
    soft.retain(|name, _| limits.contains_key(name));
    Ok(Some(BucketImage {
        rf,
        shard_count,
        cascade: scalars.cascade == Some(Value::Bool(true)),
        parent_id: scalars.parent_id.and_then(Value::string).map(str::to_owned),
        pgen: scalars.pgen.and_then(Value::number),
        pinc: scalars.pinc.and_then(Value::string).map(str::to_owned),
        ttl: scalars.ttl.and_then(Value::number),
        disabled,
        vu: scalars.vu.and_then(Value::number),
        limits,
        soft,
        bypass: scalars.bypass.map(|v| v.number().unwrap_or(0)),
        wcu,
        unsupported,
        schedules,
        resets,
        quotas,
        windows,
    }))
}

/// The grant counts, top-ups and reset counters of the limits on a bucket item (reference
/// §12.3), per limit that carries any: `gc` in `1..=32`, `tu` within ±2 × 10^18, `rn` any
/// integer (it is only pinned).
fn stored_quotas(
    item: &Item,
    limits: &BTreeMap<String, LimitState>,
) -> Result<BTreeMap<String, QuotaState>, Bad> {
    let mut quotas = BTreeMap::new();
    for name in limits.keys() {
        let read = |f: QuotaField, range, expected| {
            let attribute = attr::bucket_quota(name, f);
            item.get(&attribute)
                .map(|v| bounded(|| attribute.clone(), Value::of(v), range, expected))
                .transpose()
        };
        let q = QuotaState {
            gc: read(QuotaField::Gc, SHARD_COUNTS, A_SHARD_COUNT)?,
            tu: read(QuotaField::Tu, AMOUNTS, AN_AMOUNT)?,
            rn: get_i64(item, &attr::bucket_quota(name, QuotaField::Rn)),
        };
        if q != QuotaState::default() {
            quotas.insert(name.clone(), q);
        }
    }
    Ok(quotas)
}

/// The session windows of the limits on a bucket item (reference §12.3): `b_{name}_rsa`,
/// `_ws`, `_wa`, `_wtc`, per limit that carries any. A value that is not a whole number makes
/// the item unavailable (reported in `unsupported`); a whole number outside the bounds
/// (`rsa` in `1..=10^9`, `ws` and `wa` times) makes it corrupt.
fn stored_windows(
    item: &Item,
    limits: &BTreeMap<String, LimitState>,
    unsupported: &mut Vec<String>,
) -> Result<BTreeMap<String, WindowState>, Bad> {
    let mut windows = BTreeMap::new();
    for name in limits.keys() {
        let mut w = WindowState::default();
        let mut any = false;
        for field in QuotaField::WINDOW {
            let attr_name = attr::bucket_quota(name, field);
            let Some(value) = item.get(&attr_name) else {
                continue;
            };
            any = true;
            let value = Value::of(value);
            let Some(n) = value.number() else {
                unsupported.push(format!("{attr_name} (not a whole number)"));
                continue;
            };
            let check = |range: std::ops::RangeInclusive<i64>, expected| {
                if range.contains(&n) {
                    Ok(Some(n))
                } else {
                    Err(Bad::new(attr_name.clone(), value, expected))
                }
            };
            match field {
                QuotaField::Rsa => {
                    w.rsa = check(
                        1..=bounds::MAX_PERIOD_SECONDS,
                        "a window of 1 to 10^9 seconds",
                    )?;
                }
                QuotaField::Ws => w.ws = check(TIMES, A_TIME)?,
                QuotaField::Wa => w.wa = check(TIMES, A_TIME)?,
                _ => w.wtc = Some(n),
            }
        }
        if any {
            windows.insert(name.clone(), w);
        }
    }
    Ok(windows)
}

/// Whether a bucket item's attribute is a schedule (`sched`, `rsched`, a limit's own) or a
/// quota's grant, top-ups, reset counter or session window, by its name alone.
fn names_a_schedule_or_quota(k: &str) -> bool {
    // None of the suffixes holds an underscore: `k` ends with `_{suffix}` exactly when the
    // text after its last underscore is the suffix.
    k == attr::SCHED
        || k == attr::RSCHED
        || (k.starts_with("b_")
            && matches!(
                k.rsplit_once('_').map(|(_, suffix)| suffix),
                Some("sched" | "rsched" | "gc" | "tu" | "rn" | "rsa" | "ws" | "wa" | "wtc")
            ))
}

/// The parameter schedule of each limit on a bucket item (reference §12.2): its own
/// `b_{name}_sched` (`"-"`: none), else the item's default `sched`, in the item's zone
/// (`sched_tz`, UTC when absent). A schedule that does not decode is reported in
/// `unsupported` (the item is then unavailable, as in the Python library).
fn stored_schedules(
    item: &Item,
    limits: &BTreeMap<String, LimitState>,
    unsupported: &mut Vec<String>,
) -> BTreeMap<String, Schedule> {
    read_stored(
        item,
        limits,
        unsupported,
        attr::SCHED,
        attr::bucket_sched,
        schedule::decode,
    )
}

/// The reset schedule of each calendar quota on a bucket item (reference §12.3), by the same
/// rule as [`stored_schedules`] (`rsched`, `b_{name}_rsched`).
fn stored_resets(
    item: &Item,
    limits: &BTreeMap<String, LimitState>,
    unsupported: &mut Vec<String>,
) -> BTreeMap<String, ResetSchedule> {
    read_stored(
        item,
        limits,
        unsupported,
        attr::RSCHED,
        attr::bucket_rsched,
        schedule::decode_reset,
    )
}

fn read_stored<T: Clone>(
    item: &Item,
    limits: &BTreeMap<String, LimitState>,
    unsupported: &mut Vec<String>,
    default_attr: &str,
    own_attr: fn(&str) -> String,
    decode: fn(&str, &Zone) -> Result<T, crate::FormatError>,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let default = get_str(item, default_attr).unwrap_or("");
    let mut decoded: BTreeMap<&str, Result<T, String>> = BTreeMap::new();
    let zone = || match get_str(item, attr::SCHED_TZ).filter(|z| !z.is_empty()) {
        Some(name) => Zone::get(name).map_err(|e| e.to_string()),
        None => Ok(Zone::utc()),
    };
    for name in limits.keys() {
        let own_name = own_attr(name);
        let (text, source) = match get_str(item, &own_name) {
            Some(UNSCHEDULED) => continue,
            Some(own) if !own.is_empty() => (own, own_name),
            _ => (default, default_attr.to_owned()),
        };
        if text.is_empty() {
            continue;
        }
        let result = decoded
            .entry(text)
            .or_insert_with(|| zone().and_then(|z| decode(text, &z).map_err(|e| e.to_string())));
        match result {
            Ok(s) => {
                out.insert(name.clone(), s.clone());
            }
            Err(e) => unsupported.push(format!("{source} (undecodable: {e})")),
        }
    }
    out
}

/// The owner stamp written on a new bucket item (cascade policy, parent and, when the META
/// carries them, its generation and incarnation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// Effective cascade policy of the owner on this resource.
    pub cascade: bool,
    /// The owner's parent.
    pub parent_id: Option<String>,
    /// Parent generation from the META read (`pgen`).
    pub pgen: Option<i64>,
    /// Incarnation from the META read (`pinc`).
    pub pinc: Option<String>,
}

/// The shard count stamped on a raw bucket item, if any.
///
/// # Errors
/// [`FormatError::Corrupt`] when the item holds one outside `1..=32` (or not an integer).
pub fn shard_count(item: &Item) -> Result<Option<u32>, FormatError> {
    item.get(attr::SHARD_COUNT)
        .map(|v| {
            bounded(
                || attr::SHARD_COUNT.to_owned(),
                Value::of(v),
                SHARD_COUNTS,
                A_SHARD_COUNT,
            )
            .map(|n| n as u32)
            .map_err(|bad| bad.at(describe_key(item)))
        })
        .transpose()
}

/// The `tc` counters of a raw bucket item's limits: limit name → milli-tokens consumed (the
/// `wcu` tracker and limits without a `tc` number are left out).
pub fn consumed(item: &Item) -> impl Iterator<Item = (&str, i64)> {
    item.iter()
        .filter_map(|(attr, value)| match (parse_bucket_limit(attr), value) {
            (Some((name, BucketField::Tc)), AttributeValue::N(n)) if name != WCU => {
                parse_number(n).map(|v| (name, v))
            }
            _ => None,
        })
}

/// The balance (`tk`, milli) of limit `name` on a raw bucket item.
pub fn balance(item: &Item, name: &str) -> Option<i64> {
    get_i64(item, &bucket_limit(name, BucketField::Tk))
}

/// The consumption counter (`tc`, milli) of limit `name` on a raw bucket item.
pub fn counter(item: &Item, name: &str) -> Option<i64> {
    get_i64(item, &bucket_limit(name, BucketField::Tc))
}

/// Whether limit `name` carries a soft stamp (`b_{name}_soft`, a 0.17 soft limit) on a raw
/// bucket item.
pub fn is_soft(item: &Item, name: &str) -> bool {
    item.contains_key(&attr::bucket_soft(name))
}

/// The refill timestamp (`rf`, epoch ms) of a raw bucket item, if any.
///
/// # Errors
/// [`FormatError::Corrupt`] when the item holds one outside 1970 to 2500 (or not an integer).
pub fn refilled_at(item: &Item) -> Result<Option<i64>, FormatError> {
    item.get(attr::RF)
        .map(|v| {
            bounded(|| attr::RF.to_owned(), Value::of(v), TIMES, A_TIME)
                .map_err(|bad| bad.at(describe_key(item)))
        })
        .transpose()
}

/// Whether a raw item is a bucket item (`SK = #STATE`), and its key when it is.
pub fn bucket_pk_of(item: &Item) -> Option<keys::BucketPk> {
    if get_str(item, attr::SK) != Some(keys::STATE_SK) {
        return None;
    }
    keys::parse_bucket_pk(get_str(item, attr::PK)?)
}

/// The full item a create puts (reference §1.4.7 and §3.7.3).
pub fn create_item(ns: &str, key: &BucketKey, plan: &CreatePlan, owner: &Owner) -> Item {
    let (e, r, s) = (&key.entity_id, &key.resource, key.shard);
    let mut item = key.key_map(ns);
    let mut put = |k: &str, v: AttributeValue| {
        item.insert(k.to_owned(), v);
    };
    put(attr::ENTITY_ID, AttributeValue::S(e.clone()));
    put(attr::RESOURCE, AttributeValue::S(r.clone()));
    put(attr::RF, num(plan.rf));
    put(attr::SHARD_COUNT, num(i64::from(plan.shard_count)));
    put(attr::CASCADE, AttributeValue::Bool(owner.cascade));
    if let Some(p) = &owner.parent_id {
        put(attr::PARENT_ID, AttributeValue::S(p.clone()));
    }
    if let Some(g) = owner.pgen {
        put(attr::PGEN, num(g));
    }
    if let Some(i) = &owner.pinc {
        put(attr::PINC, AttributeValue::S(i.clone()));
    }
    if let Some(t) = plan.ttl {
        put(attr::TTL, num(t));
    }
    put(attr::GSI2PK, AttributeValue::S(keys::resource_pk(ns, r)));
    put(attr::GSI2SK, AttributeValue::S(keys::bucket_gsi2sk(e, s)));
    put(attr::GSI3PK, AttributeValue::S(keys::entity_pk(ns, e)));
    put(attr::GSI3SK, AttributeValue::S(keys::bucket_gsi3sk(r, s)));
    put(attr::GSI4PK, AttributeValue::S(ns.to_owned()));
    put(
        attr::GSI4SK,
        AttributeValue::S(keys::bucket_gsi4sk(e, r, s)),
    );
    let wcu = dynalimit_core::image::wcu_seed();
    let rows = plan
        .limits
        .iter()
        .map(|(l, tk, tc)| {
            (
                l.name(),
                [
                    *tk,
                    l.capacity_milli(),
                    l.refill_amount_milli(),
                    l.refill_period_millis(),
                    *tc,
                ],
            )
        })
        .chain([(WCU, [wcu.tk, wcu.cp, wcu.ra, wcu.rp, 0])]);
    for (name, values) in rows {
        for (field, v) in BucketField::ALL.into_iter().zip(values) {
            put(&bucket_limit(name, field), num(v));
        }
    }
    for (name, until) in &plan.soft {
        put(&attr::bucket_soft(name), num(*until));
    }
    let limits: Vec<&dynalimit_core::Limit> = plan.limits.iter().map(|(l, _, _)| l).collect();
    for (name, value) in schedule::item_attributes(&limits) {
        if let Some(v) = value {
            put(&name, AttributeValue::S(v));
        }
    }
    // A quota's grant is sized at the item's shard count (reference §12.3).
    for l in limits.iter().filter(|l| l.is_quota()) {
        put(
            &attr::bucket_quota(l.name(), QuotaField::Gc),
            num(i64::from(plan.shard_count)),
        );
    }
    // A session quota's window: its length, its start, applied (reference §12.3).
    for l in &limits {
        if let (Some(rsa), Some((ws, _))) = (l.window_seconds(), plan.windows.get(l.name())) {
            put(&attr::bucket_quota(l.name(), QuotaField::Rsa), num(rsa));
            put(&attr::bucket_quota(l.name(), QuotaField::Ws), num(*ws));
            put(&attr::bucket_quota(l.name(), QuotaField::Wa), num(*ws));
        }
    }
    if let Some(vu) = plan.vu {
        put(attr::VU, num(vu));
    }
    if let Some(until) = plan.bypass {
        put(attr::BYPASS, num(until));
    }
    item
}

/// What the slow path read of the owner's META, for the create's `ConditionCheck`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCheck {
    /// No META item: the check is `attribute_not_exists(PK)`.
    Absent,
    /// META as read: pinned on `pgen`, and on `pinc` (or `created_at` for pre-0.17 entities).
    Present {
        /// `pgen`, absent on pre-0.17 entities.
        pgen: Option<i64>,
        /// `pinc`, absent on pre-0.17 entities.
        pinc: Option<String>,
        /// `created_at`.
        created_at: Option<String>,
    },
}

/// Entity metadata as the acquire path needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// `parent_id`.
    pub parent_id: Option<String>,
    /// META `cascade` flag.
    pub cascade: bool,
    /// What the create pins.
    pub check: MetaCheck,
}

impl Meta {
    /// No META item.
    pub fn absent() -> Self {
        Meta {
            parent_id: None,
            cascade: false,
            check: MetaCheck::Absent,
        }
    }

    /// Decodes a META item.
    pub fn from_item(item: &Item) -> Self {
        Meta {
            parent_id: get_str(item, attr::PARENT_ID).map(str::to_owned),
            cascade: matches!(item.get(attr::CASCADE), Some(AttributeValue::Bool(true))),
            check: MetaCheck::Present {
                pgen: get_i64(item, attr::PGEN),
                pinc: get_str(item, attr::PINC).map(str::to_owned),
                created_at: get_str(item, attr::CREATED_AT).map(str::to_owned),
            },
        }
    }

    /// The owner stamp of a new bucket, given the effective cascade policy.
    pub fn owner(&self, cascade: bool) -> Owner {
        let (pgen, pinc) = match &self.check {
            MetaCheck::Present { pgen, pinc, .. } => (*pgen, pinc.clone()),
            MetaCheck::Absent => (None, None),
        };
        Owner {
            cascade: cascade && self.parent_id.is_some(),
            parent_id: self.parent_id.clone(),
            pgen,
            pinc,
        }
    }
}

/// The item of a shard created from a donor shard's item `image` (a split, or an
/// aggregator's pre-creation, §7.3 path 2), as `new` describes it
/// ([`dynalimit_core::image::NewShard`], whose `image` is this item's image): a copy of the
/// donor with the shard's keys (`PK`, `GSI2SK`, `GSI3SK`, `GSI4SK`), `shard_count`, `rf` and
/// `vu` (removed when `None`); every limit holding its balance (`tc = 0`); the `wcu` block
/// full (it is never divided); a quota's grant count the new count and no top-ups; a session
/// quota's window started where `new` says and applied (`wa = ws`), no `wtc`.
///
/// # Errors
/// [`FormatError::Corrupt`] when `image` does not decode ([`image_from_item`]), or when
/// `new`'s shard count is not one of 1 to 32 above the shard created.
pub fn clone_for_shard(
    image: &Item,
    ns: &str,
    key: &BucketKey,
    new: &NewShard,
) -> Result<Item, FormatError> {
    let (entity, resource, shard) = (&key.entity_id, &key.resource, key.shard);
    let count = i64::from(new.shard_count);
    if !SHARD_COUNTS.contains(&count) || i64::from(shard) >= count {
        return Err(FormatError::corrupt_attribute(
            describe_key(image),
            attr::SHARD_COUNT,
            format!("shard {shard} of {count} is not a shard of 1 to 32"),
        ));
    }
    let mut item = image.clone();
    let img = image_from_item(image)?;
    match new.vu {
        Some(vu) => item.insert(attr::VU.to_owned(), num(vu)),
        None => item.remove(attr::VU),
    };
    // A quota's grant on the new shard is sized at the new count; the period's top-ups stay
    // with the shards that hold them.
    for name in img.quota_names() {
        item.insert(attr::bucket_quota(name, QuotaField::Gc), num(count));
        item.remove(&attr::bucket_quota(name, QuotaField::Tu));
    }
    for name in img.windows.keys() {
        if let Some(&start) = new.windows.get(name) {
            item.insert(attr::bucket_quota(name, QuotaField::Ws), num(start));
            item.insert(attr::bucket_quota(name, QuotaField::Wa), num(start));
        }
        item.remove(&attr::bucket_quota(name, QuotaField::Wtc));
    }
    for (name, value) in [
        (attr::PK, keys::bucket_pk(ns, entity, resource, shard)),
        (attr::GSI2SK, keys::bucket_gsi2sk(entity, shard)),
        (attr::GSI3SK, keys::bucket_gsi3sk(resource, shard)),
        (attr::GSI4SK, keys::bucket_gsi4sk(entity, resource, shard)),
    ] {
        item.insert(name.to_owned(), AttributeValue::S(value));
    }
    item.insert(attr::SHARD_COUNT.to_owned(), num(count));
    item.insert(attr::RF.to_owned(), num(new.rf));
    let wcu = img.wcu.map(|w| (WCU.to_owned(), w.cp));
    let balances = img
        .limits
        .keys()
        .map(|name| (name.clone(), new.balances.get(name).copied().unwrap_or(0)));
    for (name, tk) in balances.chain(wcu) {
        item.insert(bucket_limit(&name, BucketField::Tk), num(tk));
        item.insert(bucket_limit(&name, BucketField::Tc), num(0));
    }
    Ok(item)
}

/// The access stamp of one bucket (reference §4.3, §12.1): `disabled = true` and no
/// `bypass`; `bypass = deadline` and no `disabled`; or neither. Conditioned on
/// `attribute_exists(PK)` so a swept or deleted bucket is never recreated as a stub. It sets
/// absolute values, so applying it twice leaves the same item.
pub fn access_stamp(access: Access, bypass_until: i64) -> Expr {
    let mut e = Expr::default();
    match access {
        Access::Disabled => {
            e.set(attr::DISABLED, AttributeValue::Bool(true));
            e.remove(attr::BYPASS);
        }
        Access::Bypass => {
            e.set(attr::BYPASS, num(bypass_until));
            e.remove(attr::DISABLED);
        }
        Access::Enforced => {
            e.remove(attr::DISABLED);
            e.remove(attr::BYPASS);
        }
    }
    let c = e.exists(attr::PK);
    e.when(c);
    e
}

/// The pause deadline stamped on a raw bucket item ([`attr::PAUSE_UNTIL`]), if any.
pub fn pause_stamp(item: &Item) -> Option<i64> {
    get_i64(item, attr::PAUSE_UNTIL)
}

/// The deadline of a pause in force at `now` on a raw bucket item: later than `now` and no
/// further ahead than a pause lasts ([`bounds::Stamp::Pause`]: a day, plus the clock-skew
/// allowance). A stamp further ahead is not in force.
pub fn live_pause(item: &Item, now: i64) -> Option<i64> {
    pause_stamp(item).filter(|&until| bounds::Stamp::Pause.live(until, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{key, n};
    use std::collections::HashMap;

    const T0: i64 = 1_700_000_000_000;

    proptest::proptest! {
        /// The suffix test reads the text after the last underscore; it agrees with testing
        /// every suffix in turn, on names built from the pieces that matter.
        #[test]
        fn schedule_and_quota_names_by_their_last_underscore(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "b", "_", "b_", "sched", "rsched", "gc", "tu", "rn", "rsa", "ws", "wa",
                    "wtc", "tk", "x", "soft",
                ]),
                0..6,
            )
        ) {
            let k = parts.concat();
            let by_every_suffix = k == attr::SCHED
                || k == attr::RSCHED
                || (k.starts_with("b_")
                    && ["_sched", "_rsched", "_gc", "_tu", "_rn", "_rsa", "_ws", "_wa", "_wtc"]
                        .iter()
                        .any(|suffix| k.ends_with(suffix)));
            proptest::prop_assert_eq!(names_a_schedule_or_quota(&k), by_every_suffix, "{}", k);
        }
    }

    #[test]
    fn keys_match_the_worked_example_and_parse_back() {
        let key = BucketKey::new("u1", "openai/gpt-4:x", 3);
        assert_eq!(key.pk("a7x3kq"), "a7x3kq/BUCKET#u1#openai/gpt-4:x#3");
        assert_eq!(BucketKey::parse("a7x3kq", &key.pk("a7x3kq")), Some(key));
        assert_eq!(BucketKey::parse("other", "a7x3kq/BUCKET#u1#r#0"), None);
    }

    #[test]
    fn decoding_ignores_bare_tk_and_flags_unsupported_features() {
        let item = HashMap::from([
            ("rf".to_owned(), num(5)),
            ("b_x_tk".to_owned(), num(-3)),
            ("b_y_tk".to_owned(), num(1)),
            ("b_y_cp".to_owned(), num(2)),
            ("b_y_rp".to_owned(), num(1000)),
            ("b_y_sched".to_owned(), AttributeValue::S("-".into())),
            ("b_y_soft".to_owned(), num(99)),
            ("b_y_ws".to_owned(), AttributeValue::S("soon".into())),
            ("disabled".to_owned(), AttributeValue::Bool(true)),
            ("vu".to_owned(), num(0)),
            ("parent_id".to_owned(), AttributeValue::Null(true)),
        ]);
        let img = image_from_item(&item).unwrap();
        assert!(!img.limits.contains_key("x"));
        assert_eq!(img.limits["y"].cp, 2);
        assert_eq!(
            img.unsupported,
            vec!["b_y_ws (not a whole number)".to_owned()]
        );
        assert!(img.disabled);
        assert_eq!(img.vu, Some(0));
        assert_eq!(img.parent_id, None);
        assert_eq!(img.shard_count, 1);
    }

    /// A valid bucket item of one limit, `rpm`, at the bounds' edges where given.
    fn bounded_item(changes: &[(&str, AttributeValue)]) -> Item {
        let mut item = key(keys::bucket_pk("ns1", "u1", "gpt-4", 0), keys::STATE_SK);
        for (k, v) in [
            ("rf", n(T0)),
            ("shard_count", n(1)),
            ("b_rpm_tk", n(1000)),
            ("b_rpm_cp", n(100_000)),
            ("b_rpm_ra", n(100_000)),
            ("b_rpm_rp", n(60_000)),
            ("b_rpm_tc", n(0)),
        ] {
            item.insert(k.to_owned(), v);
        }
        for (k, v) in changes {
            item.insert((*k).to_owned(), v.clone());
        }
        item
    }

    /// Decodes `item` both ways (the whole item, and its attributes as the fast path reads
    /// them, falling back to the whole item), which must agree.
    fn decode_both(item: &Item) -> Result<BucketImage, FormatError> {
        let whole = image_from_item(item);
        let attrs: Vec<(&str, Value<'_>)> = item
            .iter()
            .map(|(k, v)| (k.as_str(), Value::of(v)))
            .collect();
        match image_from_attributes(&attrs) {
            Ok(None) => {}
            in_place => assert_eq!(in_place, whole.clone().map(Some)),
        }
        whole
    }

    #[test]
    fn values_out_of_bounds_make_the_item_corrupt_naming_the_attribute() {
        let max = bounds::MAX_STORED_MILLI;
        let s = |v: &str| AttributeValue::S(v.to_owned());
        for (attribute, value) in [
            ("shard_count", n(0)),
            ("shard_count", n(33)),
            ("shard_count", n(4_294_967_295_i64)),
            ("shard_count", n(-1)),
            ("shard_count", s("4")),
            ("rf", n(-1)),
            ("rf", n(bounds::LATEST_TIME_MS + 1)),
            ("rf", n(i64::MAX)),
            ("rf", AttributeValue::N("1e30".into())),
            ("b_rpm_tk", n(max + 1)),
            ("b_rpm_tk", n(-max - 1)),
            ("b_rpm_tk", AttributeValue::N("99999999999999999999".into())),
            ("b_rpm_tk", AttributeValue::N("1.5".into())),
            ("b_rpm_cp", s("100")),
            ("b_rpm_ra", n(i64::MIN)),
            ("b_rpm_rp", n(bounds::MAX_PERIOD_MS + 1)),
            ("b_rpm_rp", n(0)),
            ("b_rpm_rp", n(-5)),
            ("b_rpm_tc", AttributeValue::Bool(true)),
            ("b_wcu_tk", n(max + 1)),
            ("b_rpm_gc", n(33)),
            ("b_rpm_gc", n(0)),
            ("b_rpm_tu", n(max + 1)),
            ("b_rpm_rsa", n(0)),
            ("b_rpm_rsa", n(bounds::MAX_PERIOD_SECONDS + 1)),
            ("b_rpm_ws", n(-1)),
            ("b_rpm_wa", n(i64::MAX)),
        ] {
            let mut item = bounded_item(&[(attribute, value.clone())]);
            if attribute == "b_wcu_tk" {
                item.insert("b_wcu_cp".into(), n(1_000_000));
            }
            match decode_both(&item) {
                Err(FormatError::Corrupt {
                    key,
                    attribute: Some(named),
                    message,
                }) => {
                    assert_eq!(named, attribute, "{value:?}");
                    assert_eq!(key, "ns1/BUCKET#u1#gpt-4#0|#STATE");
                    assert!(message.starts_with(attribute), "{message}");
                }
                other => panic!("{attribute} = {value:?}: {other:?}"),
            }
        }
        // At the bounds, and a bare `tk` (no limit) or a stamp anywhere: accepted.
        for (attribute, value) in [
            ("shard_count", n(32)),
            ("rf", n(bounds::LATEST_TIME_MS)),
            ("rf", n(0)),
            ("b_rpm_tk", n(-max)),
            ("b_rpm_cp", n(max)),
            ("b_rpm_rp", n(bounds::MAX_PERIOD_MS)),
            ("b_rpm_rp", n(1)),
            ("b_rpm_tc", n(i64::MIN)),
            ("b_x_tk", n(i64::MAX)),
            ("bypass", n(i64::MAX)),
            ("vu", n(i64::MIN)),
            ("b_rpm_soft", n(i64::MAX)),
            ("b_rpm_gc", n(32)),
            ("b_rpm_rsa", n(bounds::MAX_PERIOD_SECONDS)),
            ("b_rpm_wtc", n(i64::MIN)),
        ] {
            let item = bounded_item(&[(attribute, value.clone())]);
            assert!(decode_both(&item).is_ok(), "{attribute} = {value:?}");
        }
        // A limit without its refill period is corrupt: read as 1 ms, it would give its
        // whole refill back every millisecond.
        let mut item = bounded_item(&[]);
        item.remove("b_rpm_rp");
        assert!(matches!(
            decode_both(&item),
            Err(FormatError::Corrupt { attribute: Some(a), .. }) if a == "b_rpm_rp"
        ));
        let item = bounded_item(&[("shard_count", n(33))]);
        assert!(matches!(
            shard_count(&item),
            Err(FormatError::Corrupt { attribute: Some(a), .. }) if a == "shard_count"
        ));
        assert_eq!(shard_count(&bounded_item(&[])), Ok(Some(1)));
        let item = bounded_item(&[("rf", n(-1))]);
        assert!(refilled_at(&item).is_err());
        let key1 = BucketKey::new("u1", "gpt-4", 1);
        let new = |shard_count| NewShard {
            shard: 1,
            shard_count,
            rf: T0,
            balances: BTreeMap::new(),
            windows: BTreeMap::new(),
            vu: None,
        };
        assert!(
            clone_for_shard(&item, "ns1", &key1, &new(2)).is_err(),
            "corrupt image"
        );
        let valid = bounded_item(&[]);
        for count in [0, 1, 33] {
            assert!(
                clone_for_shard(&valid, "ns1", &key1, &new(count)).is_err(),
                "{count}"
            );
        }
        assert!(clone_for_shard(&valid, "ns1", &key1, &new(32)).is_ok());
    }

    #[test]
    fn a_pause_is_in_force_up_to_a_day_and_the_skew_ahead() {
        let item = |until: i64| bounded_item(&[(attr::PAUSE_UNTIL, n(until))]);
        let horizon = T0 + bounds::MAX_PAUSE_MS + bounds::CLOCK_SKEW_MS;
        assert_eq!(live_pause(&item(T0 + 1), T0), Some(T0 + 1));
        assert_eq!(live_pause(&item(horizon), T0), Some(horizon));
        assert_eq!(live_pause(&item(horizon + 1), T0), None);
        assert_eq!(live_pause(&item(T0), T0), None);
        assert_eq!(
            pause_stamp(&item(i64::MAX)),
            Some(i64::MAX),
            "read as stored"
        );
    }

    #[test]
    fn a_clone_holds_its_balances_a_full_wcu_and_its_own_keys() {
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
            ("b_tpm_tk", n(9_000)),
            ("b_tpm_cp", n(100_000)),
            ("b_tpm_ra", n(100_000)),
            ("b_tpm_rp", n(60_000)),
            ("b_tpm_tc", n(1_000)),
            ("b_wcu_tk", n(10_000)),
            ("b_wcu_cp", n(1_000_000)),
            ("b_wcu_ra", n(1_000_000)),
            ("b_wcu_rp", n(1000)),
            ("b_wcu_tc", n(5)),
        ] {
            shard0.insert(k.to_owned(), v);
        }
        let key3 = BucketKey::new("hot", "gpt-4", 3);
        let new = NewShard {
            shard: 3,
            shard_count: 4,
            rf: 2_000_000,
            balances: [("rpm".to_owned(), 1_000)].into(),
            windows: Default::default(),
            vu: None,
        };
        let clone = clone_for_shard(&shard0, "ns1", &key3, &new).unwrap();
        let num = |k: &str| get_i64(&clone, k);
        let text = |k: &str| get_str(&clone, k).map(str::to_owned);
        assert_eq!(text("PK"), Some(keys::bucket_pk("ns1", "hot", "gpt-4", 3)));
        assert_eq!(text("GSI2SK"), Some(keys::bucket_gsi2sk("hot", 3)));
        assert_eq!(text("GSI3SK"), Some(keys::bucket_gsi3sk("gpt-4", 3)));
        assert_eq!(text("GSI4SK"), Some(keys::bucket_gsi4sk("hot", "gpt-4", 3)));
        assert_eq!(num("shard_count"), Some(4));
        assert_eq!(num("rf"), Some(2_000_000));
        assert_eq!(num("vu"), None);
        assert_eq!(num("ttl"), Some(99));
        assert_eq!((num("b_rpm_tk"), num("b_rpm_tc")), (Some(1_000), Some(0)));
        assert_eq!((num("b_tpm_tk"), num("b_tpm_tc")), (Some(0), Some(0)));
        assert_eq!(num("b_rpm_cp"), Some(100_000), "capacity stays undivided");
        assert_eq!(
            (num("b_wcu_tk"), num("b_wcu_tc")),
            (Some(1_000_000), Some(0))
        );
        assert_eq!(bucket_pk_of(&clone).map(|k| k.shard), Some(3));
        assert_eq!(
            consumed(&shard0).collect::<BTreeMap<_, _>>(),
            BTreeMap::from([("rpm", 77_000), ("tpm", 1_000)])
        );
        assert_eq!(
            image_from_item(&clone).unwrap(),
            new.image(&image_from_item(&shard0).unwrap())
        );
    }

    #[test]
    fn access_stamps_set_one_mode_and_remove_the_other() {
        let cases = [
            (
                Access::Disabled,
                "SET #a0 = :v0 REMOVE #a1",
                attr::DISABLED,
                attr::BYPASS,
            ),
            (
                Access::Bypass,
                "SET #a0 = :v0 REMOVE #a1",
                attr::BYPASS,
                attr::DISABLED,
            ),
        ];
        for (access, update, set, removed) in cases {
            let e = access_stamp(access, 42);
            assert_eq!(e.update_expression().unwrap(), update, "{access:?}");
            let names = e.names().unwrap();
            assert_eq!(names["#a0"], set);
            assert_eq!(names["#a1"], removed);
            assert_eq!(e.condition_expression().unwrap(), "(attribute_exists(#a2))");
        }
        let bypass = access_stamp(Access::Bypass, 42).values().unwrap();
        assert_eq!(bypass[":v0"], num(42));
        let enforced = access_stamp(Access::Enforced, 42);
        assert_eq!(enforced.update_expression().unwrap(), "REMOVE #a0, #a1");
        assert!(enforced.values().is_none());
    }

    #[test]
    fn hard_case_30_a_limit_beside_a_schedule_is_marked_and_an_unversioned_schedule_refused() {
        let mut item = HashMap::from([
            ("rf".to_owned(), num(5)),
            ("sched".to_owned(), AttributeValue::S("1h9-17s500".into())),
            ("b_rpm_tk".to_owned(), num(1)),
            ("b_rpm_cp".to_owned(), num(2)),
            ("b_rpm_rp".to_owned(), num(1000)),
            ("b_tpm_tk".to_owned(), num(1)),
            ("b_tpm_cp".to_owned(), num(2)),
            ("b_tpm_rp".to_owned(), num(1000)),
            ("b_tpm_sched".to_owned(), AttributeValue::S("-".into())),
        ]);
        let img = image_from_item(&item).unwrap();
        assert!(img.schedules.contains_key("rpm"), "the default applies");
        assert!(
            !img.schedules.contains_key("tpm"),
            "the marker keeps tpm unscheduled"
        );
        assert!(img.unsupported.is_empty());
        item.insert("sched".to_owned(), AttributeValue::S("h9-17s500".into()));
        let img = image_from_item(&item).unwrap();
        assert!(
            img.unsupported_reason().is_some(),
            "no version marker: unavailable"
        );
    }
}
