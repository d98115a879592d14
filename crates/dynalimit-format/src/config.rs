//! Limit configuration items (reference §1.4.5) and their registries (§1.4.6).
//!
//! | level | key | answers for |
//! |---|---|---|
//! | entity | `{ns}/ENTITY#{e}` / `#CONFIG#{r}` | one entity on one resource |
//! | entity default | `{ns}/ENTITY#{e}` / `#CONFIG#_default_` | one entity on every resource |
//! | resource | `{ns}/RESOURCE#{r}` / `#CONFIG` | every entity on one resource |
//! | system | `{ns}/SYSTEM#` / `#CONFIG` | everything; also carries `on_unavailable` |
//!
//! Limits are stored in whole tokens and seconds as `l_{name}_cp`, `l_{name}_ra` and
//! `l_{name}_rp`. A writer replaces the whole item of its level (override, not merge),
//! carrying the stored `disabled` and `cascade` flags over.

use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit_core::Limit;
use dynalimit_core::concurrency::{self as concurrency, Concurrency};
use dynalimit_core::ids::DEFAULT_RESOURCE;

use dynalimit_core::schedule::Zone;

use crate::FormatError;
use crate::attr::{
    self, ConcurrencyField, ConfigField, ConfigPrefix, config_concurrency,
    config_concurrency_names, config_limit, config_limit_names, is_config_concurrency,
};
use crate::expr::Expr;
use crate::item::{self, Item};
use crate::keys;
use crate::schedule;

/// The level a configuration lives at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigLevel {
    /// One entity on one resource.
    Entity,
    /// One entity on every resource (`_default_`).
    EntityDefault,
    /// Every entity on one resource.
    Resource,
    /// The namespace-wide default.
    System,
}

impl ConfigLevel {
    /// The label the reference uses (`entity`, `entity_default`, `resource`, `system`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigLevel::Entity => "entity",
            ConfigLevel::EntityDefault => "entity_default",
            ConfigLevel::Resource => "resource",
            ConfigLevel::System => "system",
        }
    }
}

/// What an acquire does when DynamoDB cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnUnavailable {
    /// Admit without limiting (a no-op lease), and log it.
    Allow,
    /// Refuse with an unavailable error.
    Block,
}

impl OnUnavailable {
    /// `allow` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnavailable::Allow => "allow",
            OnUnavailable::Block => "block",
        }
    }

    /// Parses `allow` / `block`.
    pub fn parse(text: &str) -> Option<OnUnavailable> {
        match text {
            "allow" => Some(OnUnavailable::Allow),
            "block" => Some(OnUnavailable::Block),
            _ => None,
        }
    }
}

/// The `disabled` flag of a config item (absent = inherit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisabledFlag {
    /// `true`: access refused.
    Disabled,
    /// `false`: explicitly enforced (overrides a disabled level below).
    Enabled,
    /// `"bypass"`: limits not enforced (zae-limiter 0.17): every request is admitted and
    /// counted, and no balance is debited.
    Bypass,
}

/// The stored value of [`DisabledFlag::Bypass`].
const BYPASS: &str = "bypass";

impl DisabledFlag {
    /// The stored value as text: `true`, `false` or `bypass`.
    pub const fn name(self) -> &'static str {
        match self {
            DisabledFlag::Disabled => "true",
            DisabledFlag::Enabled => "false",
            DisabledFlag::Bypass => BYPASS,
        }
    }

    /// The stored value: `true`, `false` or `"bypass"`.
    pub fn encode(self) -> AttributeValue {
        match self {
            DisabledFlag::Disabled => AttributeValue::Bool(true),
            DisabledFlag::Enabled => AttributeValue::Bool(false),
            DisabledFlag::Bypass => AttributeValue::S(BYPASS.into()),
        }
    }
}

/// What a bucket's access stamp says: the outcome of the walk of reference §4.1 over the
/// entity, entity-default and resource levels (the system level is never consulted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Access {
    /// Limits are enforced (no stamp).
    #[default]
    Enforced,
    /// Every acquire is refused (`disabled = true`).
    Disabled,
    /// Limits are not enforced (`bypass` with a deadline).
    Bypass,
}

/// The access walk and the cascade-policy walk of reference §4.1 over `levels`, in
/// precedence order (entity, entity default, resource, system): the first explicit
/// `disabled` value decides access and the first explicit `cascade` decides the policy, each
/// independently of which level supplies the limits; the system level is skipped.
pub fn walk<'a>(
    levels: impl IntoIterator<Item = (ConfigLevel, Option<&'a LimitConfig>)>,
) -> (Access, Option<bool>) {
    let mut access = None;
    let mut cascade = None;
    for (level, config) in levels {
        let Some(config) = config else { continue };
        if level == ConfigLevel::System {
            continue;
        }
        if access.is_none() {
            access = config.disabled.map(|flag| match flag {
                DisabledFlag::Disabled => Access::Disabled,
                DisabledFlag::Enabled => Access::Enforced,
                DisabledFlag::Bypass => Access::Bypass,
            });
        }
        if cascade.is_none() {
            cascade = config.cascade;
        }
    }
    (access.unwrap_or_default(), cascade)
}

/// The write of one level's `disabled` flag alone (reference §12.1): `Some` sets it and fills
/// in the item's owner and index attributes where missing (so a level that has no limits can
/// still carry a flag), `None` removes it from an existing item (`attribute_exists(PK)`; a
/// missing item already inherits). Writing it twice leaves the same item.
pub fn flag_write(ns: &str, slot: &Slot, flag: Option<DisabledFlag>) -> Expr {
    level_flag_write(ns, slot, attr::DISABLED, flag.map(DisabledFlag::encode))
}

/// The write of one level's cascade policy (reference §12.5), as [`flag_write`] writes the
/// `disabled` flag: `cascade = true/false` upserted with the level's keys, or removed (back
/// to inherit).
pub fn cascade_write(ns: &str, slot: &Slot, policy: Option<bool>) -> Expr {
    level_flag_write(ns, slot, attr::CASCADE, policy.map(AttributeValue::Bool))
}

fn level_flag_write(ns: &str, slot: &Slot, name: &str, value: Option<AttributeValue>) -> Expr {
    let mut e = Expr::default();
    let Some(value) = value else {
        e.remove(name);
        let c = e.exists(attr::PK);
        e.when(c);
        return e;
    };
    e.set(name, value);
    level_identity(&mut e, ns, slot);
    e
}

/// Fills in a level's owner and index attributes where missing.
fn level_identity(e: &mut Expr, ns: &str, slot: &Slot) {
    let key = slot.key(ns);
    let pk = item::get_s(&key, attr::PK).unwrap_or_default().to_string();
    match slot {
        Slot::Entity(entity, resource) => {
            e.set_if_absent(attr::ENTITY_ID, item::s(entity));
            e.set_if_absent(attr::RESOURCE, item::s(resource));
            e.set_if_absent(
                attr::GSI3PK,
                item::s(keys::entity_config_gsi3pk(ns, resource)),
            );
            e.set_if_absent(attr::GSI3SK, item::s(entity));
        }
        Slot::Resource(resource) => e.set_if_absent(attr::RESOURCE, item::s(resource)),
        Slot::System => {}
    }
    e.set_if_absent(attr::GSI4PK, item::s(ns));
    e.set_if_absent(attr::GSI4SK, item::s(pk));
}

/// The write of one level's concurrency limits, leaving everything else of the item: each of
/// `limits` set, every other concurrency limit of `stored` removed, and the level's owner and
/// index attributes filled in where missing (a level with no rate limits can hold concurrency
/// limits). `None` when there is nothing to write (no limits, and none stored). Sets absolute
/// values: sent twice, it leaves the same item.
pub fn concurrency_write(
    ns: &str,
    slot: &Slot,
    stored: Option<&Item>,
    limits: &[Concurrency],
) -> Option<Expr> {
    let mut wanted = Vec::with_capacity(limits.len() * 2);
    for l in limits {
        wanted.push((
            config_concurrency(l.name(), ConcurrencyField::Max),
            item::n(l.max()),
        ));
        wanted.push((
            config_concurrency(l.name(), ConcurrencyField::Hold),
            item::n(l.hold_ms()),
        ));
    }
    let mut stale: Vec<&String> = stored
        .into_iter()
        .flat_map(|it| it.keys())
        .filter(|k| is_config_concurrency(k) && !wanted.iter().any(|(w, _)| w == *k))
        .collect();
    stale.sort();
    if wanted.is_empty() && stale.is_empty() {
        return None;
    }
    let mut e = Expr::default();
    for (name, value) in wanted {
        e.set(&name, value);
    }
    for name in stale {
        e.remove(name);
    }
    if limits.is_empty() {
        let c = e.exists(attr::PK);
        e.when(c);
    } else {
        level_identity(&mut e, ns, slot);
    }
    Some(e)
}

/// The concurrency limits of a config item, bounded: at most
/// [`concurrency::MAX_CONCURRENCY_LIMITS`], each with a whole `max` and hold (ms) within
/// [`concurrency::validate`]'s bounds, whatever another writer stored.
fn decode_concurrency(found: &Item) -> Result<Vec<Concurrency>, String> {
    let names = config_concurrency_names(found.keys());
    if names.len() > concurrency::MAX_CONCURRENCY_LIMITS {
        return Err(format!(
            "{} concurrency limits, at most {} are read",
            names.len(),
            concurrency::MAX_CONCURRENCY_LIMITS
        ));
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let number = |field| {
            let a = config_concurrency(&name, field);
            item::get_i64(found, &a).ok_or_else(|| format!("{a} is missing or not a whole number"))
        };
        let max = number(ConcurrencyField::Max)?;
        let hold = number(ConcurrencyField::Hold)?;
        let max =
            u32::try_from(max).map_err(|_| format!("concurrency limit {name:?}: max {max}"))?;
        let hold = u64::try_from(hold)
            .map_err(|_| format!("concurrency limit {name:?}: hold {hold} ms"))?;
        let limit = Concurrency::new(name.clone(), max)
            .and_then(|c| c.hold_time(std::time::Duration::from_millis(hold)))
            .map_err(|e| format!("concurrency limit {name:?}: {e}"))?;
        out.push(limit);
    }
    Ok(out)
}

/// One level's stored configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LimitConfig {
    /// The limits, sorted by name.
    pub limits: Vec<Limit>,
    /// The `disabled` flag, when set.
    pub disabled: Option<DisabledFlag>,
    /// The cascade policy, when set (not on system config).
    pub cascade: Option<bool>,
    /// The names of the soft limits (`l_{name}_soft = true`, reference §12.4): debited, never
    /// refusing.
    pub soft: std::collections::BTreeSet<String>,
    /// System level only: behaviour when DynamoDB is unavailable.
    pub on_unavailable: Option<OnUnavailable>,
    /// System level only: audit retention in days.
    pub audit_retention_days: Option<i64>,
    /// The concurrency limits (`c_{name}_max`, `c_{name}_hold`), sorted by name. Resolved on
    /// their own: the first level that has any supplies all of them.
    pub concurrency: Vec<Concurrency>,
    /// Why the level's concurrency limits cannot be read, when they cannot: the rate limits
    /// stay usable (zae-limiter does not read these attributes), an acquire that resolves
    /// concurrency limits through this level fails closed.
    pub concurrency_error: Option<String>,
}

/// The address of one level's item in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The namespace-wide default.
    System,
    /// Every entity on one resource.
    Resource(String),
    /// One entity on one resource, or on every resource (`_default_`).
    Entity(String, String),
}

impl Slot {
    /// The primary key of the level's item.
    pub fn key(&self, ns: &str) -> Item {
        match self {
            Slot::System => item::key(keys::system_pk(ns), keys::CONFIG_SK),
            Slot::Resource(r) => item::key(keys::resource_pk(ns, r), keys::CONFIG_SK),
            Slot::Entity(e, r) => item::key(keys::entity_pk(ns, e), keys::entity_config_sk(r)),
        }
    }
}

/// The levels that answer for `entity` on `resource`, in precedence order, with the slot of
/// each: entity, entity default and resource (the two middle ones only for a resource other
/// than `_default_`), then system (reference §4.1).
///
/// ```
/// use dynalimit_format::config::{ConfigLevel, levels};
/// let order: Vec<ConfigLevel> = levels("k1", "gpt-4").into_iter().map(|(l, _)| l).collect();
/// assert_eq!(order, [ConfigLevel::Entity, ConfigLevel::EntityDefault, ConfigLevel::Resource, ConfigLevel::System]);
/// assert_eq!(levels("k1", "_default_").len(), 2);
/// ```
pub fn levels(entity: &str, resource: &str) -> Vec<(ConfigLevel, Slot)> {
    let mut out = vec![(
        ConfigLevel::Entity,
        Slot::Entity(entity.into(), resource.into()),
    )];
    if resource != DEFAULT_RESOURCE {
        out.push((
            ConfigLevel::EntityDefault,
            Slot::Entity(entity.into(), DEFAULT_RESOURCE.into()),
        ));
        out.push((ConfigLevel::Resource, Slot::Resource(resource.into())));
    }
    out.push((ConfigLevel::System, Slot::System));
    out
}

fn whole(found: &Item, attr: &str) -> Result<i64, FormatError> {
    item::get_i64(found, attr).ok_or_else(|| {
        FormatError::corrupt(
            item::describe_key(found),
            format!("{attr} is not a whole number"),
        )
    })
}

/// Decodes a config item by the reading rules of reference §1.4.5.
///
/// # Errors
/// [`FormatError::ReservedLimitName`] for a limit named after an item attribute,
/// [`FormatError::TooManyLimits`] for more limits than one bucket carries (checked before
/// any limit is decoded), [`FormatError::Corrupt`] for a corrupt item (a stored schedule that does not decode among
/// them: the whole level is then unavailable, as in the Python library). Parameter
/// schedules, calendar quotas (`l_{name}_sched`, `l_{name}_rsched`, `sched_tz`) and session
/// quotas (every field under `w_`, with `w_{name}_rsa`) are read.
pub fn decode(found: &Item) -> Result<LimitConfig, FormatError> {
    let key = item::describe_key(found);
    let (plain, windowed) = config_limit_names(found.keys());
    if let Some(name) = plain
        .iter()
        .chain(&windowed)
        .find(|n| attr::reserved(n).is_some())
    {
        return Err(FormatError::ReservedLimitName {
            key,
            name: name.clone(),
        });
    }
    let given = plain.len() + windowed.len();
    if given > attr::MAX_LIMITS_PER_BUCKET {
        return Err(FormatError::TooManyLimits {
            key,
            given,
            max: attr::MAX_LIMITS_PER_BUCKET,
        });
    }
    if let Some(both) = plain.iter().find(|n| windowed.contains(n)) {
        return Err(FormatError::corrupt(
            key,
            format!("limit {both:?} is stored under both l_ and w_"),
        ));
    }
    if let Some(w) = windowed
        .iter()
        .find(|w| !found.contains_key(&config_limit(ConfigPrefix::Windowed, w, ConfigField::Rsa)))
    {
        let rsa = config_limit(ConfigPrefix::Windowed, w, ConfigField::Rsa);
        return Err(FormatError::corrupt(
            key,
            format!("windowed limit {w:?} has no {rsa}"),
        ));
    }
    // One zone for every schedule of the level (UTC when absent or empty).
    let zone = || match item::get_s(found, attr::SCHED_TZ).filter(|z| !z.is_empty()) {
        Some(name) => Zone::get(name).map_err(|e| FormatError::corrupt(key.clone(), e.to_string())),
        None => Ok(Zone::utc()),
    };
    let mut limits = Vec::with_capacity(plain.len());
    let mut soft = std::collections::BTreeSet::new();
    let named = plain
        .into_iter()
        .map(|n| (ConfigPrefix::Plain, n))
        .chain(windowed.into_iter().map(|n| (ConfigPrefix::Windowed, n)));
    for (prefix, name) in named {
        let field = |f| config_limit(prefix, &name, f);
        let reset = match item::get_s(found, &field(ConfigField::Rsched)).filter(|r| !r.is_empty())
        {
            Some(text) => Some(schedule::decode_reset(text, &zone()?).map_err(|e| {
                FormatError::corrupt(
                    key.clone(),
                    format!("the reset schedule of limit {name:?} does not decode: {e}"),
                )
            })?),
            None => None,
        };
        let sched = match item::get_s(found, &field(ConfigField::Sched)).filter(|s| !s.is_empty()) {
            Some(text) => Some(schedule::decode(text, &zone()?).map_err(|e| {
                FormatError::corrupt(
                    key.clone(),
                    format!("the schedule of limit {name:?} does not decode: {e}"),
                )
            })?),
            None => None,
        };
        let cp = whole(found, &field(ConfigField::Cp))?;
        let ra = whole(found, &field(ConfigField::Ra))?;
        let rp = whole(found, &field(ConfigField::Rp))?;
        let is_soft = matches!(
            found.get(&field(ConfigField::Soft)),
            Some(AttributeValue::Bool(true))
        );
        if is_soft {
            soft.insert(name.clone());
        }
        // A session quota's window length (whole seconds) lives under the `w_` prefix.
        let window = match prefix {
            ConfigPrefix::Windowed => Some(whole(found, &field(ConfigField::Rsa))?),
            ConfigPrefix::Plain => None,
        };
        let limit = Limit::custom(name, cp, ra, rp)
            .with_optional_schedule(sched)
            .with_optional_reset(reset)
            .with_optional_window(window)
            .with_soft(is_soft);
        limit
            .validate()
            .map_err(|e| FormatError::corrupt(key.clone(), e.to_string()))?;
        limits.push(limit);
    }
    limits.sort_by(|a, b| a.name().cmp(b.name()));
    let disabled = match found.get(attr::DISABLED) {
        Some(AttributeValue::Bool(true)) => Some(DisabledFlag::Disabled),
        Some(AttributeValue::Bool(false)) => Some(DisabledFlag::Enabled),
        Some(AttributeValue::S(s)) if s == BYPASS => Some(DisabledFlag::Bypass),
        Some(AttributeValue::S(_)) => Some(DisabledFlag::Enabled),
        _ => None,
    };
    let (concurrency, concurrency_error) = match decode_concurrency(found) {
        Ok(c) => (c, None),
        Err(message) => (Vec::new(), Some(message)),
    };
    Ok(LimitConfig {
        concurrency,
        concurrency_error,
        limits,
        soft,
        disabled,
        cascade: item::get_bool(found, attr::CASCADE),
        on_unavailable: item::get_s(found, attr::ON_UNAVAILABLE).and_then(OnUnavailable::parse),
        audit_retention_days: item::get_i64(found, attr::AUDIT_RETENTION_DAYS),
    })
}

/// The `on_unavailable` stored on a system config item, if readable.
pub fn stored_on_unavailable(found: &Item) -> Option<OnUnavailable> {
    item::get_s(found, attr::ON_UNAVAILABLE).and_then(OnUnavailable::parse)
}

/// The update that sets a namespace's `audit_retention_days` on its system item (created
/// when missing, with the GSI4 keys of every config item), leaving every other attribute.
pub fn set_audit_retention(ns: &str, days: i64) -> (Item, Expr) {
    let key = Slot::System.key(ns);
    let pk = item::get_s(&key, attr::PK).unwrap_or_default().to_string();
    let mut e = Expr::default();
    e.set(attr::AUDIT_RETENTION_DAYS, item::n(days));
    e.set_if_absent(attr::GSI4PK, item::s(ns));
    e.set_if_absent(attr::GSI4SK, item::s(pk));
    (key, e)
}

/// What stays of the system item when its defaults are deleted: its key, GSI keys and the
/// stored `audit_retention_days`; `None` when `stored` has no retention (the item goes).
pub fn retention_remainder(ns: &str, stored: &Item) -> Option<Item> {
    let days = stored.get(attr::AUDIT_RETENTION_DAYS)?;
    let mut it = level_item(ns, &Slot::System, &[], None, None);
    it.insert(attr::AUDIT_RETENTION_DAYS.into(), days.clone());
    Some(it)
}

/// The full-replace item of a level: its key, `config_version`, GSI keys, owner attributes,
/// the `disabled` and `cascade` flags of `stored` (not on system level), the concurrency
/// limits of `stored`, the limits, and on system level `on_unavailable` when given and the
/// stored `audit_retention_days` (kept, where zae-limiter 0.17 drops it).
pub fn level_item(
    ns: &str,
    slot: &Slot,
    limits: &[Limit],
    stored: Option<&Item>,
    on_unavailable: Option<OnUnavailable>,
) -> Item {
    let mut it = slot.key(ns);
    let pk = item::get_s(&it, attr::PK).unwrap_or_default().to_string();
    it.insert(attr::CONFIG_VERSION.into(), item::n(1));
    it.insert(attr::GSI4PK.into(), item::s(ns));
    it.insert(attr::GSI4SK.into(), item::s(pk));
    match slot {
        Slot::Entity(e, r) => {
            it.insert(attr::ENTITY_ID.into(), item::s(e));
            it.insert(attr::RESOURCE.into(), item::s(r));
            it.insert(
                attr::GSI3PK.into(),
                item::s(keys::entity_config_gsi3pk(ns, r)),
            );
            it.insert(attr::GSI3SK.into(), item::s(e));
        }
        Slot::Resource(r) => {
            it.insert(attr::RESOURCE.into(), item::s(r));
        }
        Slot::System => {
            if let Some(o) = on_unavailable {
                it.insert(attr::ON_UNAVAILABLE.into(), item::s(o.as_str()));
            }
        }
    }
    let carried: &[&str] = match slot {
        Slot::System => &[attr::AUDIT_RETENTION_DAYS],
        _ => &[attr::DISABLED, attr::CASCADE],
    };
    if let Some(old) = stored {
        for flag in carried.iter().copied() {
            if let Some(v) = old.get(flag) {
                it.insert(flag.into(), v.clone());
            }
        }
        // The level's concurrency limits are written on their own ([`concurrency_write`]).
        for (name, v) in old.iter().filter(|(k, _)| is_config_concurrency(k)) {
            it.insert(name.clone(), v.clone());
        }
    }
    let mut zone = None;
    for l in limits {
        let n = l.name();
        // A session quota is stored under `w_`, which readers older than the session quotas
        // do not scan (reference §12.3).
        let prefix = match l.window_seconds() {
            Some(_) => ConfigPrefix::Windowed,
            None => ConfigPrefix::Plain,
        };
        let field = |f| config_limit(prefix, n, f);
        if let Some(rsa) = l.window_seconds() {
            it.insert(field(ConfigField::Rsa), item::n(rsa));
        }
        if l.is_soft() {
            it.insert(field(ConfigField::Soft), AttributeValue::Bool(true));
        }
        it.insert(field(ConfigField::Cp), item::n(l.capacity()));
        it.insert(field(ConfigField::Ra), item::n(l.refill_amount()));
        it.insert(field(ConfigField::Rp), item::n(l.refill_period_seconds()));
        if let Some(s) = l.schedule() {
            it.insert(field(ConfigField::Sched), item::s(schedule::encode(s)));
            zone.get_or_insert_with(|| s.zone().name().to_owned());
        }
        if let Some(r) = l.reset()
            && let Ok(text) = schedule::encode_reset(r)
        {
            it.insert(field(ConfigField::Rsched), item::s(text));
            zone.get_or_insert_with(|| r.zone().name().to_owned());
        }
    }
    // Every schedule of the level shares this zone (checked before the write).
    if let Some(zone) = zone {
        it.insert(attr::SCHED_TZ.into(), item::s(zone));
    }
    it
}

/// A feature of dynalimit's own that costs every process a request when in use, and none in a
/// namespace that never used it: the namespace's features item says which are in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Some level stores concurrency limits: acquires resolve them.
    Concurrency,
    /// Some entity has a refusal alert: limiters report the minutes they refuse in.
    RefusalAlerts,
}

impl Feature {
    /// The features item's attribute: the epoch ms of the feature's first use.
    fn attr(self) -> &'static str {
        match self {
            Feature::Concurrency => "concurrency",
            Feature::RefusalAlerts => "refusal_alerts",
        }
    }
}

/// Which features a namespace uses, as its features item says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// [`Feature::Concurrency`].
    pub concurrency: bool,
    /// [`Feature::RefusalAlerts`].
    pub refusal_alerts: bool,
}

impl Features {
    /// The features `found` (the features item, or none) marks in use.
    pub fn of(found: Option<&Item>) -> Features {
        let has = |f: Feature| found.is_some_and(|it| it.contains_key(f.attr()));
        Features {
            concurrency: has(Feature::Concurrency),
            refusal_alerts: has(Feature::RefusalAlerts),
        }
    }

    /// Whether `feature` is in use.
    pub fn uses(self, feature: Feature) -> bool {
        match feature {
            Feature::Concurrency => self.concurrency,
            Feature::RefusalAlerts => self.refusal_alerts,
        }
    }

    /// These features and `feature`.
    pub fn with(mut self, feature: Feature) -> Features {
        match feature {
            Feature::Concurrency => self.concurrency = true,
            Feature::RefusalAlerts => self.refusal_alerts = true,
        }
        self
    }
}

/// The key of the namespace's features item.
pub fn features_key(ns: &str) -> Item {
    item::key(keys::system_pk(ns), keys::FEATURES_SK)
}

/// The write that marks `feature` in use: the features item's index keys (a namespace purge
/// removes it) and the feature's first use. Sent twice, it leaves the same item; a feature is
/// never unmarked.
pub fn feature_write(ns: &str, feature: Feature, now_ms: i64) -> Expr {
    let mut e = Expr::default();
    e.set_if_absent(attr::GSI4PK, item::s(ns));
    e.set_if_absent(attr::GSI4SK, item::s(keys::system_pk(ns)));
    e.set_if_absent(feature.attr(), item::n(now_ms));
    e
}

/// The key of the registry of resources with defaults (`resources`, a string set).
pub fn resources_registry_key(ns: &str) -> Item {
    item::key(keys::system_pk(ns), keys::RESOURCES_SK)
}

/// The key of the registry of resources with entity configs (one reference count per
/// resource, named after it).
pub fn entity_config_registry_key(ns: &str) -> Item {
    item::key(keys::system_pk(ns), keys::ENTITY_CONFIG_RESOURCES_SK)
}

/// The resources of the registry of resources with defaults.
pub fn registered_resources(found: &Item) -> Vec<String> {
    match found.get(attr::RESOURCES) {
        Some(AttributeValue::Ss(v)) => v.clone(),
        _ => Vec::new(),
    }
}

/// The resources of the registry of entity configs whose count is above zero (the key
/// attributes and anything not a number are skipped).
pub fn counted_resources(found: &Item) -> Vec<String> {
    found
        .iter()
        .filter(|(k, _)| ![attr::PK, attr::SK, attr::GSI4PK, attr::GSI4SK].contains(&k.as_str()))
        .filter(|(_, v)| {
            v.as_n()
                .ok()
                .and_then(|n| item::parse_number(n))
                .is_some_and(|c| c > 0)
        })
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(pairs: &[(&str, AttributeValue)]) -> Item {
        let mut m = item::key("ns/SYSTEM#", "#CONFIG");
        for (k, v) in pairs {
            m.insert(k.to_string(), v.clone());
        }
        m
    }

    #[test]
    fn concurrency_limits_are_read_beside_the_rate_limits_and_bounded() {
        let c = decode(&it(&[
            ("l_rpm_cp", item::n(10)),
            ("l_rpm_ra", item::n(10)),
            ("l_rpm_rp", item::n(60)),
            ("c_streams_max", item::n(5)),
            ("c_streams_hold", item::n(30_000)),
            ("c_a_max_max", item::n(2)),
            ("c_a_max_hold", item::n(1_000)),
        ]))
        .unwrap();
        assert_eq!(c.limits.len(), 1);
        let names: Vec<_> = c
            .concurrency
            .iter()
            .map(|l| (l.name(), l.max(), l.hold_ms()))
            .collect();
        assert_eq!(names, [("a_max", 2, 1_000), ("streams", 5, 30_000)]);
        assert_eq!(c.concurrency_error, None);
        // A value out of bounds, a missing hold, a fraction, or too many: the rate limits stay,
        // the concurrency limits are reported unreadable.
        let pair = |k: &str, v: AttributeValue| (k.to_owned(), v);
        let too_many: Vec<_> = (0..5)
            .flat_map(|i| {
                [
                    (format!("c_{i}_max"), item::n(1)),
                    (format!("c_{i}_hold"), item::n(1_000)),
                ]
            })
            .collect();
        for bad in [
            vec![
                pair("c_s_max", item::n(0)),
                pair("c_s_hold", item::n(30_000)),
            ],
            vec![
                pair("c_s_max", item::n(1001)),
                pair("c_s_hold", item::n(30_000)),
            ],
            vec![pair("c_s_max", item::n(5)), pair("c_s_hold", item::n(999))],
            vec![
                pair("c_s_max", item::n(5)),
                pair("c_s_hold", item::n(i64::MAX)),
            ],
            vec![pair("c_s_max", item::n(5))],
            vec![
                pair("c_s_max", item::s("5")),
                pair("c_s_hold", item::n(30_000)),
            ],
            vec![
                pair("c_s_max", AttributeValue::N("2.5".into())),
                pair("c_s_hold", item::n(30_000)),
            ],
            vec![
                pair("c_s_max", AttributeValue::N("99999999999999999999".into())),
                pair("c_s_hold", item::n(30_000)),
            ],
            too_many,
        ] {
            let mut found = it(&[
                ("l_rpm_cp", item::n(10)),
                ("l_rpm_ra", item::n(10)),
                ("l_rpm_rp", item::n(60)),
            ]);
            found.extend(bad.iter().cloned());
            let c = decode(&found).unwrap();
            assert_eq!(c.limits.len(), 1, "{bad:?}");
            assert!(c.concurrency.is_empty(), "{bad:?}");
            assert!(c.concurrency_error.is_some(), "{bad:?}");
        }
    }

    #[test]
    fn a_full_replace_keeps_the_concurrency_limits_and_their_write_keeps_the_rest() {
        let slot = Slot::Entity("k1".into(), "gpt-4".into());
        let stored = level_item("ns", &slot, &[Limit::per_minute("rpm", 10)], None, None);
        let streams = Concurrency::new("streams", 5).unwrap();
        let e =
            concurrency_write("ns", &slot, Some(&stored), std::slice::from_ref(&streams)).unwrap();
        let text = format!("{e:?}");
        assert!(
            text.contains("c_streams_max") && text.contains("c_streams_hold"),
            "{text}"
        );
        let mut with = stored.clone();
        with.insert("c_streams_max".into(), item::n(5));
        with.insert("c_streams_hold".into(), item::n(30_000));
        with.insert("c_old_max".into(), item::n(1));
        with.insert("c_old_hold".into(), item::n(1_000));
        // A rate-limit write carries every concurrency attribute over.
        let replaced = level_item(
            "ns",
            &slot,
            &[Limit::per_minute("tpm", 100)],
            Some(&with),
            None,
        );
        for a in ["c_streams_max", "c_streams_hold", "c_old_max", "c_old_hold"] {
            assert_eq!(replaced.get(a), with.get(a), "{a}");
        }
        assert_eq!(decode(&replaced).unwrap().concurrency.len(), 2);
        // A concurrency write removes the names it no longer has, and only those.
        let e =
            concurrency_write("ns", &slot, Some(&with), std::slice::from_ref(&streams)).unwrap();
        let text = format!("{e:?}");
        assert!(
            text.contains("c_old_max") && text.contains("c_old_hold"),
            "{text}"
        );
        assert!(!text.contains("l_rpm"), "{text}");
        // Nothing stored and nothing wanted: nothing to send.
        assert!(concurrency_write("ns", &slot, Some(&stored), &[]).is_none());
        assert!(concurrency_write("ns", &slot, None, &[]).is_none());
    }

    #[test]
    fn limit_names_may_contain_underscores() {
        let c = decode(&it(&[
            ("l_tpm_input_cp", item::n(10)),
            ("l_tpm_input_ra", item::n(10)),
            ("l_tpm_input_rp", item::n(60)),
        ]))
        .unwrap();
        assert_eq!(c.limits, [Limit::custom("tpm_input", 10, 10, 60)]);
    }

    #[test]
    fn a_name_under_both_prefixes_is_corrupt() {
        let e = decode(&it(&[
            ("l_x_cp", item::n(1)),
            ("l_x_ra", item::n(1)),
            ("l_x_rp", item::n(1)),
            ("w_x_cp", item::n(1)),
            ("w_x_rsa", item::n(1)),
        ]))
        .unwrap_err();
        assert!(matches!(e, FormatError::Corrupt { .. }));
    }

    #[test]
    fn a_session_quota_is_read_from_w_and_written_back_alike() {
        let found = it(&[
            ("w_q_cp", item::n(5)),
            ("w_q_ra", item::n(0)),
            ("w_q_rp", item::n(1)),
            ("w_q_rsa", item::n(3600)),
        ]);
        let c = decode(&found).unwrap();
        assert_eq!(c.limits, [Limit::session_quota("q", 5, 3600)]);
        let back = level_item("ns", &Slot::System, &c.limits, None, None);
        for (name, value) in found.iter().filter(|(k, _)| k.starts_with("w_")) {
            assert_eq!(back.get(name), Some(value), "{name}");
        }
        assert!(!back.keys().any(|k| k.starts_with("l_q")));
        // A length that is not a positive whole number of seconds is corrupt.
        for bad in [item::n(0), item::s("1h")] {
            let mut f = found.clone();
            f.insert("w_q_rsa".into(), bad);
            assert!(matches!(decode(&f), Err(FormatError::Corrupt { .. })));
        }
        // A window beside a drip is corrupt.
        let mut f = found.clone();
        f.insert("w_q_ra".into(), item::n(5));
        assert!(matches!(decode(&f), Err(FormatError::Corrupt { .. })));
        // A w_ limit without its length is corrupt.
        let e = decode(&it(&[("w_q_cp", item::n(5)), ("w_q_ra", item::n(0))])).unwrap_err();
        assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    }

    #[test]
    fn a_limit_that_cannot_refill_is_refused_not_misread() {
        // No refill and no reset: unreadable, as in the Python library.
        let e = decode(&it(&[
            ("l_q_cp", item::n(5)),
            ("l_q_ra", item::n(0)),
            ("l_q_rp", item::n(1)),
        ]))
        .unwrap_err();
        assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    }

    #[test]
    fn a_calendar_quota_is_read_and_written_back_alike() {
        let found = it(&[
            ("l_q_cp", item::n(10_000)),
            ("l_q_ra", item::n(0)),
            ("l_q_rp", item::n(1)),
            ("l_q_rsched", item::s("1m0h0D1")),
            ("sched_tz", item::s("America/New_York")),
        ]);
        let c = decode(&found).unwrap();
        let q = &c.limits[0];
        assert!(q.is_quota());
        assert_eq!(q.reset().unwrap().zone().name(), "America/New_York");
        let written = level_item("ns", &Slot::System, &c.limits, None, None);
        for a in ["l_q_cp", "l_q_ra", "l_q_rp", "l_q_rsched", "sched_tz"] {
            assert_eq!(written.get(a), found.get(a), "{a}");
        }
    }

    #[test]
    fn a_scheduled_limit_is_read_in_the_level_zone_and_written_back_alike() {
        let found = it(&[
            ("l_tpm_cp", item::n(10_000)),
            ("l_tpm_ra", item::n(10_000)),
            ("l_tpm_rp", item::n(60)),
            ("l_tpm_sched", item::s("1h9-17w1-5s500")),
            ("l_rpm_cp", item::n(100)),
            ("l_rpm_ra", item::n(100)),
            ("l_rpm_rp", item::n(60)),
            ("sched_tz", item::s("Europe/Paris")),
        ]);
        let c = decode(&found).unwrap();
        let tpm = c.limits.iter().find(|l| l.name() == "tpm").unwrap();
        let s = tpm.schedule().unwrap();
        assert_eq!(s.zone().name(), "Europe/Paris");
        assert_eq!(crate::schedule::encode(s), "1h9-17w1-5s500");
        assert!(
            c.limits
                .iter()
                .find(|l| l.name() == "rpm")
                .unwrap()
                .schedule()
                .is_none()
        );
        let written = level_item("ns", &Slot::System, &c.limits, None, None);
        for a in ["l_tpm_sched", "sched_tz"] {
            assert_eq!(written.get(a), found.get(a), "{a}");
        }
        assert!(!written.contains_key("l_rpm_sched"));
        // No schedule: no zone either.
        let plain = level_item("ns", &Slot::System, &c.limits[..1], None, None);
        assert!(!plain.contains_key("sched_tz"));
    }

    #[test]
    fn an_undecodable_schedule_makes_the_level_unavailable() {
        for (sched, tz) in [("x", "UTC"), ("2h9s500", "UTC"), ("1h9s500", "Mars/Base")] {
            let e = decode(&it(&[
                ("l_r_cp", item::n(5)),
                ("l_r_ra", item::n(5)),
                ("l_r_rp", item::n(1)),
                ("l_r_sched", item::s(sched)),
                ("sched_tz", item::s(tz)),
            ]))
            .unwrap_err();
            assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
        }
    }

    #[test]
    fn flags_read_as_the_reference_says() {
        let c = decode(&it(&[
            ("disabled", item::s("nonsense")),
            ("cascade", AttributeValue::Bool(true)),
            ("on_unavailable", item::s("allow")),
        ]))
        .unwrap();
        assert_eq!(c.disabled, Some(DisabledFlag::Enabled));
        assert_eq!(c.cascade, Some(true));
        assert_eq!(c.on_unavailable, Some(OnUnavailable::Allow));
        assert!(c.limits.is_empty());
    }

    #[test]
    fn a_limit_named_after_an_item_attribute_is_reported_with_item_and_name() {
        for name in ["ttl", "total_events", "GSI2PK", "window"] {
            for prefix in ["l", "w"] {
                let attrs: Vec<(String, AttributeValue)> = ["cp", "ra", "rp", "rsa"]
                    .iter()
                    .map(|f| (format!("{prefix}_{name}_{f}"), item::n(10)))
                    .chain(
                        ["cp", "ra", "rp"]
                            .iter()
                            .map(|f| (format!("l_rpm_{f}"), item::n(10))),
                    )
                    .collect();
                let pairs: Vec<(&str, AttributeValue)> =
                    attrs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                let e = decode(&it(&pairs)).unwrap_err();
                match &e {
                    FormatError::ReservedLimitName { key, name: n } => {
                        assert_eq!(n, name);
                        assert_eq!(key, "ns/SYSTEM#|#CONFIG");
                    }
                    other => panic!("{name}: {other:?}"),
                }
                assert!(e.to_string().contains(name), "{e}");
            }
        }
    }

    #[test]
    fn a_level_item_round_trips_and_keeps_the_stored_flags() {
        let limits = [Limit::per_minute("rpm", 100), Limit::per_minute("tpm", 10)];
        let stored = it(&[
            ("disabled", AttributeValue::Bool(true)),
            ("cascade", AttributeValue::Bool(true)),
        ]);
        let slot = Slot::Entity("u1".into(), "gpt-4".into());
        let written = level_item("ns", &slot, &limits, Some(&stored), None);
        assert_eq!(item::get_s(&written, "PK"), Some("ns/ENTITY#u1"));
        assert_eq!(item::get_s(&written, "SK"), Some("#CONFIG#gpt-4"));
        assert_eq!(
            item::get_s(&written, "GSI3PK"),
            Some("ns/ENTITY_CONFIG#gpt-4")
        );
        let back = decode(&written).unwrap();
        assert_eq!(back.limits, limits.to_vec());
        assert_eq!(back.disabled, Some(DisabledFlag::Disabled));
        assert_eq!(back.cascade, Some(true));
        let system = level_item(
            "ns",
            &Slot::System,
            &limits,
            Some(&stored),
            Some(OnUnavailable::Allow),
        );
        let back = decode(&system).unwrap();
        assert_eq!((back.disabled, back.cascade), (None, None));
        assert_eq!(back.on_unavailable, Some(OnUnavailable::Allow));
    }

    fn with_flags(
        disabled: Option<DisabledFlag>,
        cascade: Option<bool>,
        limits: bool,
    ) -> LimitConfig {
        LimitConfig {
            limits: if limits {
                vec![Limit::per_minute("rpm", 1)]
            } else {
                Vec::new()
            },
            disabled,
            cascade,
            ..LimitConfig::default()
        }
    }

    #[test]
    fn the_walk_takes_the_first_explicit_flag_of_each_kind() {
        use ConfigLevel::*;
        let entity = with_flags(Some(DisabledFlag::Enabled), None, false);
        let default = with_flags(None, Some(true), true);
        let resource = with_flags(Some(DisabledFlag::Disabled), Some(false), true);
        let system = with_flags(Some(DisabledFlag::Disabled), Some(false), true);
        assert_eq!(
            walk([
                (Entity, Some(&entity)),
                (EntityDefault, Some(&default)),
                (Resource, Some(&resource))
            ]),
            (Access::Enforced, Some(true))
        );
        assert_eq!(
            walk([
                (Entity, None),
                (EntityDefault, None),
                (Resource, Some(&resource))
            ]),
            (Access::Disabled, Some(false))
        );
        let bypass = with_flags(Some(DisabledFlag::Bypass), None, false);
        assert_eq!(
            walk([(EntityDefault, Some(&bypass)), (Resource, Some(&resource))]).0,
            Access::Bypass
        );
        assert_eq!(walk([(System, Some(&system))]), (Access::Enforced, None));
    }

    #[test]
    fn a_flag_write_creates_a_well_formed_level_or_removes_only_the_flag() {
        let slot = Slot::Entity("u1".into(), "gpt".into());
        let set = flag_write("ns", &slot, Some(DisabledFlag::Disabled));
        let update = set.update_expression().unwrap();
        assert!(update.starts_with("SET "), "{update}");
        assert!(!update.contains("REMOVE"), "{update}");
        assert_eq!(set.condition_expression(), None);
        let names: Vec<String> = set.names().unwrap().into_values().collect();
        for attr in [
            attr::DISABLED,
            attr::ENTITY_ID,
            attr::RESOURCE,
            attr::GSI3PK,
            attr::GSI3SK,
            attr::GSI4PK,
            attr::GSI4SK,
        ] {
            assert!(
                names.iter().any(|n| n == attr),
                "{attr} missing from {names:?}"
            );
        }
        let values: Vec<AttributeValue> = set.values().unwrap().into_values().collect();
        assert!(values.contains(&AttributeValue::Bool(true)));
        assert!(values.contains(&item::s(keys::entity_config_gsi3pk("ns", "gpt"))));
        let clear = flag_write("ns", &Slot::Resource("gpt".into()), None);
        assert_eq!(clear.update_expression().unwrap(), "REMOVE #a0");
        assert_eq!(
            clear.condition_expression().unwrap(),
            "(attribute_exists(#a1))"
        );
        assert_eq!(DisabledFlag::Bypass.encode(), item::s("bypass"));
    }
}
