//! Attribute names (reference §1.2–§1.4), and the limit-name rule they impose.
//!
//! Every attribute the format gives an item is a constant here, and [`ALL`] lists them with
//! the items that carry them. Per-limit attributes are built by [`bucket_limit`] and
//! [`config_limit`]; a snapshot's overdraw counter by [`overdraw`].
//!
//! A limit's consumption is stored on usage snapshot items as a counter attribute named
//! exactly after the limit (§1.4.10), so a limit named `ttl`, `window` or `PK` would
//! overwrite (or be refused as) an attribute the format gives that item, and every
//! aggregator transaction for the bucket would fail. [`validate_limit_name`] therefore
//! refuses every name of [`ALL`], for every item kind, not only snapshots, so that no future
//! use of limit names as attribute names can collide either. Comparison is exact: DynamoDB
//! attribute names are case-sensitive, so `pk` or `TTL` stay allowed.
//!
//! zae-limiter 0.17 refuses only `wcu` (`zae_limiter.models.RESERVED_LIMIT_NAMES`); a
//! configuration it stored with one of these names is reported by dynalimit's reader instead
//! of being read.

use dynalimit_core::{CoreError, Limit, ids};

/// Partition key of every item.
pub const PK: &str = "PK";
/// Sort key of every item.
pub const SK: &str = "SK";
/// GSI1 partition key (a parent's children).
pub const GSI1PK: &str = "GSI1PK";
/// GSI1 sort key.
pub const GSI1SK: &str = "GSI1SK";
/// GSI2 partition key (per resource: buckets, usage).
pub const GSI2PK: &str = "GSI2PK";
/// GSI2 sort key.
pub const GSI2SK: &str = "GSI2SK";
/// GSI3 partition key (entity-config listing, bucket discovery per entity).
pub const GSI3PK: &str = "GSI3PK";
/// GSI3 sort key.
pub const GSI3SK: &str = "GSI3SK";
/// GSI4 partition key (every item of a namespace).
pub const GSI4PK: &str = "GSI4PK";
/// GSI4 sort key.
pub const GSI4SK: &str = "GSI4SK";
/// Sort key of the reserved local secondary index 1 (nothing writes the LSIs).
pub const LSI1SK: &str = "LSI1SK";
/// Sort key of the reserved local secondary index 2.
pub const LSI2SK: &str = "LSI2SK";
/// Sort key of the reserved local secondary index 3.
pub const LSI3SK: &str = "LSI3SK";
/// Sort key of the reserved local secondary index 4.
pub const LSI4SK: &str = "LSI4SK";
/// Sort key of the reserved local secondary index 5.
pub const LSI5SK: &str = "LSI5SK";
/// The table's TTL attribute (N, epoch seconds).
pub const TTL: &str = "ttl";

/// Namespace registry: the opaque id.
pub const NAMESPACE_ID: &str = "namespace_id";
/// Namespace registry: the name.
pub const NAMESPACE_NAME: &str = "namespace_name";
/// Namespace registry: `active`, `deleted` or `purging`.
pub const STATUS: &str = "status";
/// Namespace registry and entities: creation time (`YYYY-MM-DDTHH:MM:SSZ`).
pub const CREATED_AT: &str = "created_at";
/// Namespace registry: soft-deletion time.
pub const DELETED_AT: &str = "deleted_at";

/// Version record: the key-layout version.
pub const SCHEMA_VERSION: &str = "schema_version";
/// Version record: the aggregator code deployed (S or NULL).
pub(crate) const LAMBDA_VERSION: &str = "lambda_version";
/// Version record: the oldest client allowed to use the table.
pub(crate) const CLIENT_MIN_VERSION: &str = "client_min_version";
/// Version record: when it was last written.
pub(crate) const UPDATED_AT: &str = "updated_at";
/// Version record: who wrote it last.
pub(crate) const UPDATED_BY: &str = "updated_by";
/// Version record: an older name readers tolerate.
pub(crate) const TEMPLATE_VERSION: &str = "template_version";

/// Owner entity of entity, config, bucket, operation, audit and snapshot items.
pub const ENTITY_ID: &str = "entity_id";
/// Entity: display name.
pub const NAME: &str = "name";
/// Entity and bucket: the parent (S, NULL when none on entities).
pub const PARENT_ID: &str = "parent_id";
/// Entity, config and bucket: the cascade flag or policy (BOOL).
pub const CASCADE: &str = "cascade";
/// Entity and bucket: parent generation (N).
pub const PGEN: &str = "pgen";
/// Entity and bucket: incarnation (S).
pub const PINC: &str = "pinc";
/// Entity: free-form string metadata (M).
pub const METADATA: &str = "metadata";

/// Config: always written as 1.
pub(crate) const CONFIG_VERSION: &str = "config_version";
/// System config: `allow` or `block`.
pub const ON_UNAVAILABLE: &str = "on_unavailable";
/// System config: audit retention in days.
pub(crate) const AUDIT_RETENTION_DAYS: &str = "audit_retention_days";
/// The resource of config, bucket, operation, audit and snapshot items.
pub const RESOURCE: &str = "resource";
/// Config (BOOL or `"bypass"`) and bucket (BOOL true) disable stamp.
pub const DISABLED: &str = "disabled";
/// Config and bucket: the IANA zone of every schedule on the item.
pub const SCHED_TZ: &str = "sched_tz";
/// Resource registry: the resources with defaults (SS).
pub const RESOURCES: &str = "resources";

/// Bucket: the shared last-refill timestamp (epoch ms), the optimistic lock.
pub const RF: &str = "rf";
/// Bucket: the shard count (shard 0 holds the truth).
pub const SHARD_COUNT: &str = "shard_count";
/// Bucket: a bypass deadline (epoch ms).
pub const BYPASS: &str = "bypass";
/// Bucket: "valid until" (epoch ms); `0` forces one slow pass.
pub const VU: &str = "vu";
/// Bucket: the item-level parameter schedule.
pub const SCHED: &str = "sched";
/// Bucket: the item-level reset schedule.
pub(crate) const RSCHED: &str = "rsched";
/// Bucket: a shared pause deadline (N, epoch ms) before which no acquire may spend the
/// bucket's tokens. Written by dynalimit's backoff gate; its name has none of the `b_` / `l_`
/// / `w_` prefixes that bucket readers parse, so readers that do not know it ignore it.
pub const PAUSE_UNTIL: &str = "dl_pause_until";

/// Operation record: `reset` or `top_up`.
pub const OPERATION: &str = "operation";
/// Operation record: the writer's nonce.
pub const WRITER: &str = "writer";
/// Operation record: the entity incarnation.
pub(crate) const ENT: &str = "ent";
/// Operation record: the shard count.
pub const SHARDS: &str = "shards";
/// Operation record: the amounts (M).
pub const AMOUNTS: &str = "amounts";

/// Audit: the event id (ULID).
pub const EVENT_ID: &str = "event_id";
/// Audit: when (`YYYY-MM-DDTHH:MM:SSZ`).
pub const TIMESTAMP: &str = "timestamp";
/// Audit: the action name.
pub const ACTION: &str = "action";
/// Audit: who made the change (S or NULL).
pub const PRINCIPAL: &str = "principal";
/// Audit: action-specific details (M).
pub const DETAILS: &str = "details";

/// Usage snapshot: `hourly`, `daily` or `monthly`.
pub const WINDOW: &str = "window";
/// Usage snapshot: the window key.
pub const WINDOW_START: &str = "window_start";
/// Usage snapshot: consumption events counted.
pub(crate) const TOTAL_EVENTS: &str = "total_events";

/// Provisioner state: whether the system level is managed.
pub(crate) const MANAGED_SYSTEM: &str = "managed_system";
/// Provisioner state: the managed resources.
pub(crate) const MANAGED_RESOURCES: &str = "managed_resources";
/// Provisioner state: the managed entities.
pub(crate) const MANAGED_ENTITIES: &str = "managed_entities";
/// Provisioner state: when it was last applied.
pub(crate) const LAST_APPLIED: &str = "last_applied";
/// Provisioner state: the hash of what was applied.
pub(crate) const APPLIED_HASH: &str = "applied_hash";
/// Provisioner pending items: the owners map.
pub const OWNERS: &str = "owners";

/// Legacy (pre-0.6) consumption counter.
pub(crate) const TOTAL_CONSUMED_MILLI: &str = "total_consumed_milli";
/// Legacy (pre-0.6) balance.
pub(crate) const TOKENS_MILLI: &str = "tokens_milli";
/// Legacy (pre-0.6) nested data.
pub const DATA: &str = "data";

/// Aggregator watermark: the sequence number of the last record counted.
pub const SEQ: &str = "seq";
/// Aggregator watermark: the bucket's shard.
pub const SHARD: &str = "shard";

/// Every attribute name the format gives an item, with the items that carry it; each is
/// refused as a limit name.
pub const ALL: &[(&str, &str)] = &[
    // §1.2: primary key, index keys (GSI1–4, the reserved LSI1–5) and the TTL attribute.
    (PK, "every item (primary key)"),
    (SK, "every item (sort key)"),
    (GSI1PK, "entity items (GSI1 key)"),
    (GSI1SK, "entity items (GSI1 key)"),
    (GSI2PK, "bucket and usage snapshot items (GSI2 key)"),
    (GSI2SK, "bucket and usage snapshot items (GSI2 key)"),
    (GSI3PK, "entity config and bucket items (GSI3 key)"),
    (GSI3SK, "entity config and bucket items (GSI3 key)"),
    (GSI4PK, "every namespaced item (GSI4 key)"),
    (GSI4SK, "every namespaced item (GSI4 key)"),
    (LSI1SK, "the table's reserved LSI1 key"),
    (LSI2SK, "the table's reserved LSI2 key"),
    (LSI3SK, "the table's reserved LSI3 key"),
    (LSI4SK, "the table's reserved LSI4 key"),
    (LSI5SK, "the table's reserved LSI5 key"),
    (
        TTL,
        "bucket, operation, audit and usage snapshot items (the table's TTL)",
    ),
    // §1.4.1–§1.4.2: namespace registry records.
    (NAMESPACE_ID, "namespace registry items"),
    (NAMESPACE_NAME, "namespace registry items"),
    (STATUS, "namespace registry items"),
    (CREATED_AT, "namespace registry and entity items"),
    (DELETED_AT, "namespace registry items"),
    // §1.4.3: the version record (`template_version` is tolerated by readers).
    (SCHEMA_VERSION, "the version record"),
    (LAMBDA_VERSION, "the version record"),
    (CLIENT_MIN_VERSION, "the version record"),
    (UPDATED_AT, "the version record"),
    (UPDATED_BY, "the version record"),
    (TEMPLATE_VERSION, "the version record"),
    // §1.4.4: entity metadata.
    (
        ENTITY_ID,
        "entity, config, bucket, operation, audit and usage snapshot items",
    ),
    (NAME, "entity items"),
    (PARENT_ID, "entity and bucket items"),
    (CASCADE, "entity, config and bucket items"),
    (PGEN, "entity and bucket items"),
    (PINC, "entity and bucket items"),
    (METADATA, "entity items"),
    // §1.4.5–§1.4.6: limit configuration items and registries.
    (CONFIG_VERSION, "config items"),
    (ON_UNAVAILABLE, "the system config item"),
    (AUDIT_RETENTION_DAYS, "the system config item"),
    (
        RESOURCE,
        "config, bucket, operation, audit and usage snapshot items",
    ),
    (DISABLED, "config and bucket items"),
    (SCHED_TZ, "config and bucket items"),
    (RESOURCES, "the resource registry item"),
    // §1.4.7: bucket items (item-level attributes).
    (RF, "bucket items"),
    (SHARD_COUNT, "bucket items"),
    (BYPASS, "bucket items"),
    (VU, "bucket items"),
    (SCHED, "bucket items"),
    (RSCHED, "bucket items"),
    // §1.4.8: reset / top-up operation records.
    (OPERATION, "operation records"),
    (WRITER, "operation records"),
    (ENT, "operation records"),
    (SHARDS, "operation records"),
    (AMOUNTS, "operation records"),
    // §1.4.9: audit events.
    (EVENT_ID, "audit items"),
    (TIMESTAMP, "audit items"),
    (ACTION, "audit items"),
    (PRINCIPAL, "audit items"),
    (DETAILS, "audit items"),
    // §1.4.10: usage snapshots (besides the keys, ids and ttl above).
    (WINDOW, "usage snapshot items"),
    (WINDOW_START, "usage snapshot items"),
    (TOTAL_EVENTS, "usage snapshot items"),
    // §1.4.11: provisioner state.
    (MANAGED_SYSTEM, "the provisioner state item"),
    (MANAGED_RESOURCES, "the provisioner state item"),
    (MANAGED_ENTITIES, "the provisioner state item"),
    (LAST_APPLIED, "the provisioner state item"),
    (APPLIED_HASH, "the provisioner state item"),
    (OWNERS, "provisioner pending items"),
    // §1.4.12: legacy formats readers still recognise.
    (TOTAL_CONSUMED_MILLI, "legacy (pre-0.6) items"),
    (TOKENS_MILLI, "legacy (pre-0.6) items"),
    (DATA, "legacy (pre-0.6) items"),
    // dynalimit's aggregator watermark items (`#AGGREGATOR#…`).
    (SEQ, "aggregator watermark items"),
    (SHARD, "aggregator watermark items"),
];

/// The items carrying attribute `name` when it is one of [`ALL`].
///
/// ```
/// use dynalimit_format::attr::reserved;
/// assert!(reserved("ttl").is_some());
/// assert!(reserved("TTL").is_none());
/// ```
pub fn reserved(name: &str) -> Option<&'static str> {
    ALL.iter()
        .find(|(attr, _)| *attr == name)
        .map(|(_, items)| *items)
}

/// Checks a limit name headed for the table: the name rule of
/// [`dynalimit_core::ids::validate_limit_name`] (which refuses `wcu`), and none of the
/// attribute names of [`ALL`].
///
/// ```
/// use dynalimit_core::CoreError;
/// use dynalimit_format::attr::validate_limit_name;
/// assert!(validate_limit_name("rpm.v2").is_ok());
/// assert!(validate_limit_name("wcu").is_err());
/// assert!(matches!(
///     validate_limit_name("total_events"),
///     Err(CoreError::ReservedLimitName { .. })
/// ));
/// ```
///
/// # Errors
/// [`CoreError::InvalidIdentifier`] for a name breaking the rule or `wcu`,
/// [`CoreError::ReservedLimitName`] for an item attribute name.
pub fn validate_limit_name(name: &str) -> Result<(), CoreError> {
    ids::validate_limit_name(name)?;
    match reserved(name) {
        Some(items) => Err(CoreError::ReservedLimitName {
            name: name.to_owned(),
            items,
        }),
        None => Ok(()),
    }
}

/// Checks a limit headed for the table: [`Limit::validate`] (name rule and bounds) and
/// [`validate_limit_name`]. Every path that sends limits to DynamoDB calls it first.
///
/// # Errors
/// As [`Limit::validate`] and [`validate_limit_name`].
pub fn validate_limit(limit: &Limit) -> Result<(), CoreError> {
    limit.validate()?;
    validate_limit_name(limit.name())
}

/// The most limits one bucket carries (besides the write-capacity tracker `wcu`): every
/// request dynalimit sends for a bucket fits DynamoDB's expression limits with this many,
/// whatever the limits are (schedules, quotas, session windows, soft limits) and however
/// long their names are.
///
/// DynamoDB refuses, with a `ValidationException`, an expression longer than 4 KB or with
/// more than 300 operators and functions. The conditions grow by about 12 to 16 operators
/// per limit: at 16 limits a lease's credit has 261 and the consume of every acquire 218
/// (2981 bytes); they overflow at 19 and 23 limits.
///
/// [`validate_limits`] refuses more before anything is stored or sent. The repository's
/// tests render every request shape at this count (with 64-character names) and check it
/// against DynamoDB's limits; `docs/limits-per-bucket.md` lists the measured sizes.
pub const MAX_LIMITS_PER_BUCKET: usize = 16;

/// Checks how many limits one bucket's requests would carry: at most
/// [`MAX_LIMITS_PER_BUCKET`]. `field` names what was counted (`limits`, `consume`).
///
/// ```
/// use dynalimit_format::attr::{MAX_LIMITS_PER_BUCKET, validate_limit_count};
/// assert!(validate_limit_count("limits", MAX_LIMITS_PER_BUCKET).is_ok());
/// assert!(validate_limit_count("limits", MAX_LIMITS_PER_BUCKET + 1).is_err());
/// ```
///
/// # Errors
/// [`CoreError::TooManyLimits`] beyond the maximum.
pub fn validate_limit_count(field: &'static str, given: usize) -> Result<(), CoreError> {
    if given > MAX_LIMITS_PER_BUCKET {
        return Err(CoreError::TooManyLimits {
            field,
            given,
            max: MAX_LIMITS_PER_BUCKET,
        });
    }
    Ok(())
}

/// Checks the limits of one bucket: at most [`MAX_LIMITS_PER_BUCKET`]
/// ([`validate_limit_count`]), each valid for the table ([`validate_limit`]), no name twice,
/// and one time zone for every schedule among them (an item holds one). An empty list
/// passes; a configuration level asks for at least one limit on its own.
///
/// # Errors
/// [`CoreError::TooManyLimits`], the errors of [`validate_limit`], and
/// [`CoreError::InvalidIdentifier`] for a name given twice or [`CoreError::InvalidValue`]
/// for schedules in two zones.
pub fn validate_limits(limits: &[Limit]) -> Result<(), CoreError> {
    validate_limit_count("limits", limits.len())?;
    for (i, l) in limits.iter().enumerate() {
        validate_limit(l)?;
        if limits[..i].iter().any(|o| o.name() == l.name()) {
            return Err(CoreError::invalid_identifier(
                "limit name",
                l.name(),
                "appears twice in one set of limits",
            ));
        }
    }
    dynalimit_core::schedule::one_zone(limits.iter().flat_map(Limit::zones))?;
    Ok(())
}

/// A per-limit field of a bucket item, `b_{name}_{field}` (§1.4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketField {
    /// Current tokens of the shard, milli.
    Tk,
    /// Capacity, milli, undivided.
    Cp,
    /// Refill amount, milli, undivided.
    Ra,
    /// Refill period, ms.
    Rp,
    /// Total consumed, milli.
    Tc,
}

impl BucketField {
    /// Every field, in the order the format lists them.
    pub const ALL: [BucketField; 5] = [
        BucketField::Tk,
        BucketField::Cp,
        BucketField::Ra,
        BucketField::Rp,
        BucketField::Tc,
    ];

    /// The stored suffix.
    pub fn as_str(self) -> &'static str {
        match self {
            BucketField::Tk => "tk",
            BucketField::Cp => "cp",
            BucketField::Ra => "ra",
            BucketField::Rp => "rp",
            BucketField::Tc => "tc",
        }
    }

    fn parse(text: &str) -> Option<BucketField> {
        BucketField::ALL.into_iter().find(|f| f.as_str() == text)
    }
}

/// `b_{name}_{field}`.
///
/// ```
/// use dynalimit_format::attr::{BucketField, bucket_limit};
/// assert_eq!(bucket_limit("rpm", BucketField::Tk), "b_rpm_tk");
/// ```
pub fn bucket_limit(name: &str, field: BucketField) -> String {
    let suffix = field.as_str();
    let mut out = String::with_capacity(name.len() + suffix.len() + 3);
    out.push_str(BUCKET_LIMIT_PREFIX);
    out.push_str(name);
    out.push('_');
    out.push_str(suffix);
    out
}

/// `b_{name}_soft`: the soft stamp of limit `name` on a bucket item (0.17 soft limits).
pub fn bucket_soft(name: &str) -> String {
    format!("{BUCKET_LIMIT_PREFIX}{name}_soft")
}

/// `b_{name}_sched`: a limit's own parameter schedule on a bucket item, overriding the item's
/// default `sched` (`"-"`: explicitly none).
pub fn bucket_sched(name: &str) -> String {
    format!("{BUCKET_LIMIT_PREFIX}{name}_{SCHED}")
}

/// `b_{name}_rsched`: a limit's own reset schedule on a bucket item (`"-"`: explicitly none).
pub fn bucket_rsched(name: &str) -> String {
    format!("{BUCKET_LIMIT_PREFIX}{name}_{RSCHED}")
}

/// A calendar quota's per-shard field on a bucket item (reference §12.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaField {
    /// `gc`: the shard count the period's grant was sized at.
    Gc,
    /// `tu`: operator top-ups of the period, millitokens.
    Tu,
    /// `rn`: the operator reset counter.
    Rn,
    /// `rsa`: a session quota's window length, seconds.
    Rsa,
    /// `ws`: the start of the entity's current session window, epoch ms.
    Ws,
    /// `wa`: the window start the shard's balance reflects.
    Wa,
    /// `wtc`: the shard's `tc` when a sibling's new window reached it.
    Wtc,
}

impl QuotaField {
    /// A session quota's window fields.
    pub const WINDOW: [QuotaField; 4] = [
        QuotaField::Rsa,
        QuotaField::Ws,
        QuotaField::Wa,
        QuotaField::Wtc,
    ];
}

/// `b_{name}_gc`, `b_{name}_tu`, `b_{name}_rn` or a session window's `b_{name}_rsa`, `_ws`,
/// `_wa`, `_wtc`.
pub fn bucket_quota(name: &str, field: QuotaField) -> String {
    let f = match field {
        QuotaField::Gc => "gc",
        QuotaField::Tu => "tu",
        QuotaField::Rn => "rn",
        QuotaField::Rsa => "rsa",
        QuotaField::Ws => "ws",
        QuotaField::Wa => "wa",
        QuotaField::Wtc => "wtc",
    };
    format!("{BUCKET_LIMIT_PREFIX}{name}_{f}")
}

/// The limit name and field of a `b_{name}_{field}` attribute of the core fields; `None` for
/// any other attribute (a limit name may itself contain `_`: the field follows the last one).
///
/// ```
/// use dynalimit_format::attr::{BucketField, parse_bucket_limit};
/// assert_eq!(parse_bucket_limit("b_tpm_in_tc"), Some(("tpm_in", BucketField::Tc)));
/// assert_eq!(parse_bucket_limit("b_rpm_gc"), None);
/// ```
pub fn parse_bucket_limit(attr: &str) -> Option<(&str, BucketField)> {
    let (name, field) = attr.strip_prefix(BUCKET_LIMIT_PREFIX)?.rsplit_once('_')?;
    if name.is_empty() {
        return None;
    }
    Some((name, BucketField::parse(field)?))
}

/// Prefix of per-limit bucket attributes.
const BUCKET_LIMIT_PREFIX: &str = "b_";

/// The limit name of a soft stamp attribute `b_{name}_soft` (reference §12.4).
///
/// ```
/// use dynalimit_format::attr::{bucket_soft, parse_bucket_soft};
/// assert_eq!(parse_bucket_soft(&bucket_soft("rpm.v2")), Some("rpm.v2"));
/// assert_eq!(parse_bucket_soft("b_rpm_tk"), None);
/// ```
pub fn parse_bucket_soft(attr: &str) -> Option<&str> {
    attr.strip_prefix(BUCKET_LIMIT_PREFIX)?
        .strip_suffix("_soft")
        .filter(|name| !name.is_empty())
}

/// The prefix of a config item's limit attributes: `l_` for plain limits, `w_` for limits
/// with a duration window (§1.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigPrefix {
    /// `l_{name}_{field}`.
    Plain,
    /// `w_{name}_{field}`.
    Windowed,
}

impl ConfigPrefix {
    fn as_str(self) -> &'static str {
        match self {
            ConfigPrefix::Plain => "l_",
            ConfigPrefix::Windowed => "w_",
        }
    }
}

/// A per-limit field of a config item (§1.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigField {
    /// Capacity, whole tokens.
    Cp,
    /// Refill amount, whole tokens.
    Ra,
    /// Refill period, seconds.
    Rp,
    /// Parameter schedule.
    Sched,
    /// Reset schedule.
    Rsched,
    /// Soft flag.
    Soft,
    /// Duration-window length, seconds.
    Rsa,
}

impl ConfigField {
    fn as_str(self) -> &'static str {
        match self {
            ConfigField::Cp => "cp",
            ConfigField::Ra => "ra",
            ConfigField::Rp => "rp",
            ConfigField::Sched => "sched",
            ConfigField::Rsched => "rsched",
            ConfigField::Soft => "soft",
            ConfigField::Rsa => "rsa",
        }
    }
}

/// `l_{name}_{field}` or `w_{name}_{field}`.
///
/// ```
/// use dynalimit_format::attr::{ConfigField, ConfigPrefix, config_limit};
/// assert_eq!(config_limit(ConfigPrefix::Plain, "rpm", ConfigField::Cp), "l_rpm_cp");
/// ```
pub fn config_limit(prefix: ConfigPrefix, name: &str, field: ConfigField) -> String {
    format!("{}{name}_{}", prefix.as_str(), field.as_str())
}

/// The prefix of a config item's concurrency limits (dynalimit's own: zae-limiter 0.17
/// discovers limits by `l_` and `w_` only, so it neither reads nor counts these).
pub const CONCURRENCY_PREFIX: &str = "c_";

/// A field of a config item's concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConcurrencyField {
    /// `c_{name}_max`: the most requests in flight.
    Max,
    /// `c_{name}_hold`: the hold time, ms.
    Hold,
}

impl ConcurrencyField {
    fn as_str(self) -> &'static str {
        match self {
            ConcurrencyField::Max => "max",
            ConcurrencyField::Hold => "hold",
        }
    }
}

/// `c_{name}_{field}`.
///
/// ```
/// use dynalimit_format::attr::{ConcurrencyField, config_concurrency};
/// assert_eq!(config_concurrency("streams", ConcurrencyField::Max), "c_streams_max");
/// ```
pub fn config_concurrency(name: &str, field: ConcurrencyField) -> String {
    format!("{CONCURRENCY_PREFIX}{name}_{}", field.as_str())
}

/// Whether `attr` is a concurrency limit's field (`c_{name}_max` or `c_{name}_hold`).
pub(crate) fn is_config_concurrency(attr: &str) -> bool {
    attr.strip_prefix(CONCURRENCY_PREFIX).is_some_and(|rest| {
        [ConcurrencyField::Max, ConcurrencyField::Hold]
            .iter()
            .any(|f| {
                rest.strip_suffix(f.as_str())
                    .is_some_and(|r| r.len() > 1 && r.ends_with('_'))
            })
    })
}

/// The concurrency limit names a config item declares: attributes `c_{name}_max`, the name
/// being the middle part (it may itself contain `_`), sorted.
pub(crate) fn config_concurrency_names<'a>(
    attrs: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let max = ConcurrencyField::Max.as_str();
    let mut names: Vec<String> = attrs
        .into_iter()
        .filter_map(|a| {
            a.strip_prefix(CONCURRENCY_PREFIX)?
                .strip_suffix(max)?
                .strip_suffix('_')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The limit names a config item declares, by prefix: attributes ending `_cp` that start with
/// `l_` or `w_`, the name being the middle part (it may itself contain `_`).
pub(crate) fn config_limit_names<'a>(
    attrs: impl IntoIterator<Item = &'a String>,
) -> (Vec<String>, Vec<String>) {
    let mut plain = Vec::new();
    let mut windowed = Vec::new();
    let cp = ConfigField::Cp.as_str();
    for attr in attrs {
        let Some(middle) = attr
            .strip_suffix(cp)
            .and_then(|rest| rest.strip_suffix('_'))
        else {
            continue;
        };
        if let Some(name) = middle.strip_prefix(ConfigPrefix::Plain.as_str()) {
            plain.push(name.to_owned());
        } else if let Some(name) = middle.strip_prefix(ConfigPrefix::Windowed.as_str()) {
            windowed.push(name.to_owned());
        }
    }
    (plain, windowed)
}

/// `{limit}#od`: a snapshot's count of soft-limit overdraws of `limit` (§1.4.10).
pub fn overdraw(limit: &str) -> String {
    format!("{limit}{OVERDRAW_SUFFIX}")
}

const OVERDRAW_SUFFIX: &str = "#od";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_attribute_name_is_refused_as_a_limit_name() {
        for (name, items) in ALL {
            // Each would pass the name rule: the refusal is the reservation.
            assert!(name.chars().next().unwrap().is_ascii_alphabetic(), "{name}");
            match validate_limit_name(name) {
                Err(CoreError::ReservedLimitName { name: n, items: i }) => {
                    assert_eq!((n.as_str(), i), (*name, *items));
                }
                other => panic!("{name}: {other:?}"),
            }
            let message = validate_limit_name(name).unwrap_err().to_string();
            assert!(
                message.contains(name) && message.contains(items),
                "{message}"
            );
            assert!(
                validate_limit(&Limit::per_minute(*name, 1)).is_err(),
                "{name}"
            );
        }
        let mut names: Vec<&str> = ALL.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "listed twice");
    }

    #[test]
    fn near_misses_of_reserved_names_stay_allowed() {
        for ok in [
            "pk",
            "Pk",
            "sk",
            "TTL",
            "Ttl",
            "ttl2",
            "ttl_s",
            "ttls",
            "Window",
            "window2",
            "windows",
            "window-start",
            "window.start",
            "total",
            "total_events2",
            "events",
            "gsi2pk",
            "GSI5PK",
            "GSI2PK1",
            "LSI6SK",
            "entity",
            "entity_ids",
            "Resource",
            "resource2",
            "res",
            "rpm",
            "tpm",
            "requests",
            "tokens",
            "status_code",
            "names",
            "sched2",
            "rf2",
            "shard_counts",
            "datas",
            "dat",
        ] {
            assert!(validate_limit_name(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn bucket_limit_attributes_round_trip() {
        for name in ["rpm", "tpm_input", "rpm.v2", "a-b"] {
            for field in BucketField::ALL {
                let attr = bucket_limit(name, field);
                assert_eq!(parse_bucket_limit(&attr), Some((name, field)));
            }
        }
        assert_eq!(parse_bucket_limit("b_rpm_soft"), None);
        assert_eq!(parse_bucket_limit("rf"), None);
    }

    #[test]
    fn config_limit_names_split_by_prefix() {
        let attrs = [
            "l_tpm_input_cp".to_owned(),
            "l_tpm_input_ra".to_owned(),
            "w_q_cp".to_owned(),
            "w_q_rsa".to_owned(),
            "cp".to_owned(),
            "l_cp".to_owned(),
        ];
        let (plain, windowed) = config_limit_names(&attrs);
        assert_eq!(plain, ["tpm_input"]);
        assert_eq!(windowed, ["q"]);
    }
}
