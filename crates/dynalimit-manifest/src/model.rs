//! The manifest: what a namespace's configuration levels should hold, read from YAML and
//! checked whole before anything is read from or written to the table.
//!
//! The format is zae-limiter 0.17's (`namespace`, `system`, `resources`, `entities` with
//! their `resources`), with two additions: a limit may also be written in the command line's
//! text or YAML form (`rpm: 100/min`, `{rate: 100, per: min}`), and an entity may name its
//! `parent`. `docs/limits-as-code.md` describes it.

use std::collections::BTreeMap;

use dynalimit_core::concurrency::validate_set;
use dynalimit_core::ids::{self, DEFAULT_RESOURCE};
use dynalimit_core::schedule::{Cron, Entry, ResetSchedule, Schedule, Zone};
use dynalimit_core::{Concurrency, CoreError, Limit};
use dynalimit_format::attr;
use dynalimit_repository::{DisabledFlag, OnUnavailable};
use serde_yaml_ng::{Mapping, Value};

use crate::error::{ManifestError, Place};
use crate::lines::{self, Seg};
use crate::spec::{
    cascade_value, disabled_value, on_unavailable_value, parse_concurrency, parse_limits_yaml,
};

/// A parsed manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    /// The namespace it is written for, when it names one.
    pub namespace: Option<String>,
    /// The system level, when declared.
    pub system: Option<Level>,
    /// Resource levels by resource.
    pub resources: BTreeMap<String, Level>,
    /// Entities by id.
    pub entities: BTreeMap<String, EntityDecl>,
}

/// What one configuration level should hold. A declared level is owned whole: what it does
/// not name (a limit, a flag) is removed from the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Level {
    /// The limits, sorted by name.
    pub limits: Vec<Limit>,
    /// The `disabled` value; `None` inherits.
    pub disabled: Option<DisabledFlag>,
    /// The cascade policy; `None` inherits (never set on the system level).
    pub cascade: Option<bool>,
    /// System level only: what acquires do when DynamoDB is unavailable.
    pub on_unavailable: Option<OnUnavailable>,
    /// The concurrency limits (dynalimit's own), sorted by name.
    pub concurrency: Vec<Concurrency>,
}

impl Level {
    /// Whether the level holds nothing at all (the table should have no item for it).
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
            && self.concurrency.is_empty()
            && self.disabled.is_none()
            && self.cascade.is_none()
            && self.on_unavailable.is_none()
    }
}

/// One entity of the manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntityDecl {
    /// `Some(parent)` when the manifest names the parent (`Some(None)`: no parent); `None`
    /// leaves the entity's parent as the table has it.
    pub parent: Option<Option<String>>,
    /// Its levels by resource (`_default_`: every resource).
    pub resources: BTreeMap<String, Level>,
}

/// A refusal before its line is known: its kind, message and path.
struct Refusal {
    path: Vec<Seg>,
    kind: Kind,
}

enum Kind {
    Unknown(String, &'static str),
    Value(String),
    Reserved(String),
    Schedule(String),
    Limit(String),
    TooMany(usize, usize),
    Cycle(String),
}

type Parsed<T> = Result<T, Refusal>;

fn refuse(path: &[Seg], kind: Kind) -> Refusal {
    Refusal {
        path: path.to_vec(),
        kind,
    }
}

fn value_error(path: &[Seg], message: impl Into<String>) -> Refusal {
    refuse(path, Kind::Value(message.into()))
}

fn at(path: &[Seg], key: &str) -> Vec<Seg> {
    let mut p = path.to_vec();
    p.push(Seg::Key(key.to_owned()));
    p
}

impl Refusal {
    fn locate(self, text: &str) -> ManifestError {
        let at = Place {
            line: lines::line_of(text, &self.path),
            path: lines::render(&self.path),
        };
        match self.kind {
            Kind::Unknown(key, expected) => ManifestError::UnknownKey { at, key, expected },
            Kind::Value(message) => ManifestError::InvalidValue { at, message },
            Kind::Reserved(message) => ManifestError::ReservedName { at, message },
            Kind::Schedule(message) => ManifestError::Schedule { at, message },
            Kind::Limit(message) => ManifestError::InvalidLimit { at, message },
            Kind::TooMany(count, max) => ManifestError::TooManyLimits { at, count, max },
            Kind::Cycle(cycle) => ManifestError::ParentCycle { at, cycle },
        }
    }
}

/// The kind of refusal a limit's error is: a reserved name, a schedule that does not parse,
/// too many limits, or another limit error.
fn classify(path: &[Seg], error: &ManifestError) -> Refusal {
    let message = error.to_string();
    match error {
        ManifestError::LimitForm {
            core: Some(core), ..
        } => classify_core(path, core, message),
        _ => refuse(path, Kind::Limit(message)),
    }
}

fn classify_core(path: &[Seg], core: &CoreError, message: String) -> Refusal {
    let kind = match core {
        CoreError::ReservedLimitName { .. } => Kind::Reserved(message),
        CoreError::TooManyLimits { given, max, .. } => Kind::TooMany(*given, *max),
        CoreError::InvalidValue { field, .. }
            if matches!(
                *field,
                "cron expression"
                    | "time zone"
                    | "scale"
                    | "schedule entry"
                    | "schedule"
                    | "reset schedule"
                    | "schedule zones"
            ) =>
        {
            Kind::Schedule(message)
        }
        _ => Kind::Limit(message),
    };
    refuse(path, kind)
}

/// Parses and checks a manifest. Nothing is read or written: every refusal comes before.
///
/// # Errors
/// The first thing wrong, with its line and path.
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| ManifestError::Syntax {
        at: Place {
            line: e.location().map(|l| l.line()),
            path: String::new(),
        },
        message: e.to_string(),
    })?;
    manifest(&doc).map_err(|r| r.locate(text))
}

/// Checks a manifest already read into a YAML value (from JSON, or from a custom
/// resource's properties): refusals name the path, with no line.
///
/// # Errors
/// The first thing wrong, with its path.
pub fn from_value(doc: &Value) -> Result<Manifest, ManifestError> {
    manifest(doc).map_err(|r| r.locate(""))
}

fn mapping<'a>(value: &'a Value, path: &[Seg], what: &str) -> Parsed<Option<&'a Mapping>> {
    match value {
        Value::Null => Ok(None),
        Value::Mapping(m) => Ok(Some(m)),
        _ => Err(value_error(path, format!("{what} must be a mapping"))),
    }
}

/// The entries of a mapping as (key, value), keys text; a key not in `allowed` is refused.
fn entries<'a>(
    m: &'a Mapping,
    path: &[Seg],
    allowed: Option<(&[&str], &'static str)>,
) -> Parsed<Vec<(&'a str, &'a Value)>> {
    let mut out = Vec::with_capacity(m.len());
    for (k, v) in m {
        let Some(key) = k.as_str() else {
            return Err(value_error(path, format!("key {k:?} must be text")));
        };
        if let Some((allowed, expected)) = allowed
            && !allowed.contains(&key)
        {
            return Err(refuse(
                &at(path, key),
                Kind::Unknown(key.to_owned(), expected),
            ));
        }
        out.push((key, v));
    }
    Ok(out)
}

fn manifest(doc: &Value) -> Parsed<Manifest> {
    let Some(top) = mapping(doc, &[], "the manifest")? else {
        return Err(value_error(&[], "the manifest is empty"));
    };
    let mut out = Manifest::default();
    let allowed = (
        &["namespace", "system", "resources", "entities"][..],
        "namespace, system, resources, entities",
    );
    for (key, value) in entries(top, &[], Some(allowed))? {
        let path = [Seg::Key(key.to_owned())];
        match key {
            "namespace" => {
                let name = value
                    .as_str()
                    .ok_or_else(|| value_error(&path, "namespace must be text"))?;
                ids::validate_namespace_name(name)
                    .map_err(|e| value_error(&path, e.to_string()))?;
                out.namespace = Some(name.to_owned());
            }
            "system" => {
                let system = level(value, &path, LevelKind::System)?;
                if system.limits.is_empty() && system.on_unavailable.is_some() {
                    return Err(value_error(
                        &path,
                        "on_unavailable is stored with the system level's limits: give it at \
                         least one limit",
                    ));
                }
                out.system = Some(system);
            }
            "resources" => {
                let Some(m) = mapping(value, &path, "resources")? else {
                    continue;
                };
                for (resource, v) in entries(m, &path, None)? {
                    let p = at(&path, resource);
                    ids::validate_resource(resource).map_err(|e| value_error(&p, e.to_string()))?;
                    out.resources
                        .insert(resource.to_owned(), level(v, &p, LevelKind::Resource)?);
                }
            }
            _ => {
                let Some(m) = mapping(value, &path, "entities")? else {
                    continue;
                };
                for (id, v) in entries(m, &path, None)? {
                    let p = at(&path, id);
                    ids::validate_entity_id(id).map_err(|e| value_error(&p, e.to_string()))?;
                    out.entities.insert(id.to_owned(), entity(v, &p)?);
                }
            }
        }
    }
    check_parents(&out)?;
    Ok(out)
}

fn entity(value: &Value, path: &[Seg]) -> Parsed<EntityDecl> {
    let mut out = EntityDecl::default();
    let Some(m) = mapping(value, path, "an entity")? else {
        return Ok(out);
    };
    let allowed = (&["resources", "parent"][..], "resources, parent");
    for (key, v) in entries(m, path, Some(allowed))? {
        let p = at(path, key);
        if key == "parent" {
            out.parent = Some(match v {
                Value::Null => None,
                Value::String(parent) => {
                    ids::validate_entity_id(parent).map_err(|e| value_error(&p, e.to_string()))?;
                    Some(parent.clone())
                }
                _ => return Err(value_error(&p, "parent must be an entity id or null")),
            });
            continue;
        }
        let Some(resources) = mapping(v, &p, "resources")? else {
            continue;
        };
        for (resource, lv) in entries(resources, &p, None)? {
            let rp = at(&p, resource);
            ids::validate_config_resource(resource).map_err(|e| value_error(&rp, e.to_string()))?;
            out.resources
                .insert(resource.to_owned(), level(lv, &rp, LevelKind::Entity)?);
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LevelKind {
    System,
    Resource,
    Entity,
}

fn level(value: &Value, path: &[Seg], kind: LevelKind) -> Parsed<Level> {
    let mut out = Level::default();
    let Some(m) = mapping(value, path, "a level")? else {
        return Ok(out);
    };
    let allowed = match kind {
        LevelKind::System => (
            &["limits", "on_unavailable", "concurrency"][..],
            "limits, on_unavailable, concurrency",
        ),
        _ => (
            &["limits", "disabled", "cascade", "concurrency"][..],
            "limits, disabled, cascade, concurrency",
        ),
    };
    for (key, v) in entries(m, path, Some(allowed))? {
        let p = at(path, key);
        match key {
            "limits" => out.limits = limits(v, &p)?,
            "concurrency" => out.concurrency = concurrency(v, &p)?,
            "on_unavailable" => {
                out.on_unavailable = on_unavailable_value(v).map_err(|e| value_error(&p, e))?;
            }
            "disabled" => out.disabled = disabled_value(v).map_err(|e| value_error(&p, e))?,
            _ => out.cascade = cascade_value(v).map_err(|e| value_error(&p, e))?,
        }
    }
    Ok(out)
}

/// A level's concurrency limits: each name maps to its most requests in flight (a whole
/// number) or to `MAX/HOLD` (`5/30s`).
fn concurrency(value: &Value, path: &[Seg]) -> Parsed<Vec<Concurrency>> {
    let Some(m) = mapping(value, path, "concurrency")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, v) in entries(m, path, None)? {
        let p = at(path, name);
        let text = match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => {
                return Err(value_error(
                    &p,
                    "a concurrency limit is MAX or MAX/HOLD, such as 5 or 5/30s",
                ));
            }
        };
        out.push(
            parse_concurrency(&format!("{name}={text}"))
                .map_err(|e| value_error(&p, e.to_string()))?,
        );
    }
    validate_set(&out).map_err(|e| value_error(path, e.to_string()))?;
    out.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(out)
}

fn limits(value: &Value, path: &[Seg]) -> Parsed<Vec<Limit>> {
    let Some(m) = mapping(value, path, "limits")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, v) in entries(m, path, None)? {
        out.push(limit(name, v, &at(path, name))?);
    }
    if let Err(e) = attr::validate_limits(&out) {
        return Err(classify_core(path, &e, e.to_string()));
    }
    out.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(out)
}

/// The keys of zae-limiter's form of a limit; `capacity` marks it.
const ZAE_KEYS: &[&str] = &[
    "capacity",
    "burst",
    "refill_amount",
    "refill_period",
    "schedule",
    "reset_schedule",
    "reset_after_seconds",
    "soft",
];

/// One limit in any of the three forms: the text form (`100/min`), the command line's YAML
/// mapping (`{rate, per, burst, tz, schedule}`, `{quota, reset | session}`), or
/// zae-limiter's (`{capacity, refill_amount, refill_period, …}`). `soft: true` marks either
/// mapping soft.
fn limit(name: &str, value: &Value, path: &[Seg]) -> Parsed<Limit> {
    if let Value::Mapping(m) = value
        && m.contains_key("capacity")
    {
        return zae_limit(name, m, path);
    }
    let (value, soft) = match value {
        Value::Mapping(m) => {
            let soft = match m.get("soft") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(value_error(&at(path, "soft"), "soft is true or false")),
            };
            let mut rest = m.clone();
            rest.remove("soft");
            (Value::Mapping(rest), soft)
        }
        other => (other.clone(), false),
    };
    let mut one = Mapping::new();
    one.insert(Value::String(name.to_owned()), value);
    let text = serde_yaml_ng::to_string(&one).map_err(|e| value_error(path, e.to_string()))?;
    let parsed = parse_limits_yaml(&text).map_err(|e| classify(path, &e))?;
    let limit = parsed
        .into_iter()
        .next()
        .ok_or_else(|| value_error(path, "no limit"))?;
    Ok(if soft { limit.with_soft(true) } else { limit })
}

fn whole(value: &Value, path: &[Seg], field: &str) -> Parsed<i64> {
    match value {
        Value::Number(n) if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
        _ => Err(value_error(path, format!("{field} must be a whole number"))),
    }
}

/// zae-limiter's form: `capacity` (or `burst`), `refill_amount` (the capacity, or 0 for a
/// quota), `refill_period` (seconds, 60), `schedule` and `reset_schedule` (entries with
/// `cron` and `tz`), `reset_after_seconds`, `soft`.
fn zae_limit(name: &str, m: &Mapping, path: &[Seg]) -> Parsed<Limit> {
    let mut fields: BTreeMap<&str, (&Value, Vec<Seg>)> = BTreeMap::new();
    let expected = "capacity, burst, refill_amount, refill_period, schedule, reset_schedule, \
                    reset_after_seconds, soft";
    for (key, v) in entries(m, path, Some((ZAE_KEYS, expected)))? {
        fields.insert(key, (v, at(path, key)));
    }
    let int = |key: &str| -> Parsed<Option<i64>> {
        match fields.get(key) {
            None | Some((Value::Null, _)) => Ok(None),
            Some((v, p)) => whole(v, p, key).map(Some),
        }
    };
    let capacity = match int("burst")? {
        Some(burst) => burst,
        None => int("capacity")?.unwrap_or_default(),
    };
    let period = int("refill_period")?.unwrap_or(60);
    let window = int("reset_after_seconds")?;
    let (entries, zone) = match fields.get("schedule") {
        Some((v, p)) => schedule_entries(v, p, false)?,
        None => (Vec::new(), None),
    };
    let (resets, reset_zone) = match fields.get("reset_schedule") {
        Some((v, p)) => schedule_entries(v, p, true)?,
        None => (Vec::new(), None),
    };
    let resets: Vec<Cron> = resets.into_iter().map(|(cron, _)| cron).collect();
    let quota = !resets.is_empty() || window.is_some();
    let refill = int("refill_amount")?.unwrap_or(if quota { 0 } else { capacity });
    let soft = match fields.get("soft") {
        None => false,
        Some((Value::Bool(b), _)) => *b,
        Some((_, p)) => return Err(value_error(p, "soft is true or false")),
    };
    let zone_name = match (&zone, &reset_zone) {
        (Some(a), Some(b)) if a != b => {
            return Err(refuse(
                path,
                Kind::Schedule(format!(
                    "limit {name:?}: schedule and reset_schedule name two time zones ({a}, {b}); \
                     one level's schedules share one"
                )),
            ));
        }
        (Some(z), _) | (None, Some(z)) => z.clone(),
        (None, None) => "UTC".to_owned(),
    };
    let schedule_error =
        |e: CoreError| refuse(path, Kind::Schedule(format!("limit {name:?}: {e}")));
    let zone = Zone::get(&zone_name).map_err(schedule_error)?;
    let mut limit = Limit::custom(name, capacity, refill, period)
        .with_optional_window(window)
        .with_soft(soft);
    if !entries.is_empty() {
        let entries = entries
            .into_iter()
            .filter_map(|(_, e)| e)
            .collect::<Vec<_>>();
        limit = limit.with_schedule(Schedule::new(zone.clone(), entries).map_err(schedule_error)?);
    }
    if !resets.is_empty() {
        limit = limit.with_reset(ResetSchedule::new(zone, resets).map_err(schedule_error)?);
    }
    attr::validate_limit(&limit)
        .map_err(|e| classify_core(path, &e, format!("limit {name:?}: {e}")))?;
    Ok(limit)
}

/// The entries of a zae-limiter `schedule` (each pattern with its entry) or
/// `reset_schedule` (patterns alone), and the zone they share.
#[allow(clippy::type_complexity)]
fn schedule_entries(
    value: &Value,
    path: &[Seg],
    reset: bool,
) -> Parsed<(Vec<(Cron, Option<Entry>)>, Option<String>)> {
    let list = match value {
        Value::Null => return Ok((Vec::new(), None)),
        Value::Sequence(list) => list,
        _ => return Err(value_error(path, "a schedule is a list of entries")),
    };
    let (allowed, expected): (&[&str], &'static str) = if reset {
        (&["cron", "tz"], "cron, tz")
    } else {
        (
            &[
                "cron",
                "tz",
                "scale",
                "capacity",
                "refill_amount",
                "refill_period_seconds",
            ],
            "cron, tz, scale, capacity, refill_amount, refill_period_seconds",
        )
    };
    let mut out = Vec::new();
    let mut zone: Option<String> = None;
    for (i, item) in list.iter().enumerate() {
        let p = [path, &[Seg::Index(i)]].concat();
        let Some(m) = mapping(item, &p, "a schedule entry")? else {
            return Err(value_error(&p, "a schedule entry is a mapping with cron"));
        };
        let fields: BTreeMap<&str, &Value> = entries(m, &p, Some((allowed, expected)))?
            .into_iter()
            .collect();
        let schedule_error = |e: CoreError| refuse(&p, Kind::Schedule(e.to_string()));
        let cron = fields
            .get("cron")
            .and_then(|v| v.as_str())
            .ok_or_else(|| value_error(&p, "a schedule entry needs cron (text)"))?;
        let tz = match fields.get("tz") {
            None | Some(Value::Null) => "UTC",
            Some(Value::String(z)) => z.as_str(),
            Some(_) => return Err(value_error(&at(&p, "tz"), "tz must be text")),
        };
        match &zone {
            Some(z) if z != tz => {
                return Err(refuse(
                    &at(&p, "tz"),
                    Kind::Schedule(format!(
                        "time zone {tz:?} differs from {z:?}; a limit's entries share one zone"
                    )),
                ));
            }
            _ => zone = Some(tz.to_owned()),
        }
        let parsed = Cron::parse(cron).map_err(schedule_error)?;
        if reset {
            if parsed.matches_always() {
                return Err(refuse(
                    &p,
                    Kind::Schedule(format!(
                        "the reset pattern {cron:?} matches every minute, so it never resets"
                    )),
                ));
            }
            out.push((parsed, None));
            continue;
        }
        let int = |key: &str| -> Parsed<Option<i64>> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => whole(v, &at(&p, key), key).map(Some),
            }
        };
        let absolute = (
            int("capacity")?,
            int("refill_amount")?,
            int("refill_period_seconds")?,
        );
        let entry = match fields.get("scale") {
            Some(Value::Number(n)) => {
                if absolute != (None, None, None) {
                    return Err(refuse(
                        &p,
                        Kind::Schedule(
                            "an entry sets scale or the absolute values, not both".into(),
                        ),
                    ));
                }
                Entry::scaled(cron, n.as_f64().unwrap_or(f64::NAN)).map_err(schedule_error)?
            }
            Some(_) => return Err(value_error(&at(&p, "scale"), "scale must be a number")),
            None if absolute == (None, None, None) => {
                return Err(refuse(
                    &p,
                    Kind::Schedule(
                        "an entry sets scale or any of capacity, refill_amount, \
                         refill_period_seconds"
                            .into(),
                    ),
                ));
            }
            None => {
                Entry::absolute(cron, absolute.0, absolute.1, absolute.2).map_err(schedule_error)?
            }
        };
        out.push((parsed, Some(entry)));
    }
    Ok((out, zone))
}

/// Refuses parents that form a cycle among the manifest's entities.
fn check_parents(m: &Manifest) -> Parsed<()> {
    let parent_of = |id: &str| -> Option<&str> {
        m.entities
            .get(id)
            .and_then(|e| e.parent.as_ref())
            .and_then(|p| p.as_deref())
    };
    for start in m.entities.keys() {
        let mut chain = vec![start.as_str()];
        let mut cursor = parent_of(start);
        while let Some(next) = cursor {
            if next == start {
                chain.push(next);
                let path = [
                    Seg::Key("entities".into()),
                    Seg::Key(start.clone()),
                    Seg::Key("parent".into()),
                ];
                return Err(refuse(&path, Kind::Cycle(chain.join(" -> "))));
            }
            if chain.contains(&next) || chain.len() > m.entities.len() {
                break;
            }
            chain.push(next);
            cursor = parent_of(next);
        }
    }
    Ok(())
}

/// The entity levels of the manifest, as (entity, resource) pairs with their level.
pub fn entity_levels(m: &Manifest) -> impl Iterator<Item = (&str, &str, &Level)> {
    m.entities.iter().flat_map(|(id, e)| {
        e.resources
            .iter()
            .map(move |(r, l)| (id.as_str(), r.as_str(), l))
    })
}

/// Whether `resource` is an entity's every-resource level.
pub fn is_default(resource: &str) -> bool {
    resource == DEFAULT_RESOURCE
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest as zae-limiter's documentation writes them: every limit field, schedules
    /// with their zone, a session window, a soft limit, flags at each level.
    const ZAE: &str = r#"namespace: default
system:
  on_unavailable: block
  limits:
    rpm: {capacity: 1000}
resources:
  gpt-4:
    cascade: true
    limits:
      rpm: {capacity: 100, refill_amount: 100, refill_period: 60}
      tpm:
        capacity: 20000
        refill_amount: 10000
        schedule:
          - {cron: "* 9-17 * * MON-FRI", tz: Europe/Berlin, scale: 0.5}
          - {cron: "* 0-6 * * *", tz: Europe/Berlin, capacity: 2000}
      tokens:
        capacity: 1000000
        reset_schedule:
          - {cron: "0 0 1 * *", tz: Europe/Berlin}
  gpt-3:
    disabled: bypass
entities:
  key-1:
    resources:
      gpt-4:
        disabled: false
        limits:
          requests: {capacity: 100, reset_after_seconds: 86400}
          watched: {burst: 50, capacity: 10, soft: true}
      _default_:
        cascade: false
"#;

    #[test]
    fn a_zae_limiter_manifest_is_read_as_it_is() {
        let m = parse(ZAE).unwrap();
        assert_eq!(m.namespace.as_deref(), Some("default"));
        let system = m.system.as_ref().unwrap();
        assert_eq!(system.on_unavailable, Some(OnUnavailable::Block));
        assert_eq!(system.limits, [Limit::per_minute("rpm", 1000)]);
        let gpt4 = &m.resources["gpt-4"];
        assert_eq!(gpt4.cascade, Some(true));
        let names: Vec<_> = gpt4.limits.iter().map(Limit::name).collect();
        assert_eq!(names, ["rpm", "tokens", "tpm"]);
        let tpm = &gpt4.limits[2];
        assert_eq!((tpm.capacity(), tpm.refill_amount()), (20_000, 10_000));
        let s = tpm.schedule().unwrap();
        assert_eq!((s.zone().name(), s.entries().len()), ("Europe/Berlin", 2));
        let tokens = &gpt4.limits[1];
        assert!(tokens.reset().is_some());
        assert_eq!(
            (tokens.refill_amount(), tokens.refill_period_seconds()),
            (0, 60)
        );
        assert_eq!(m.resources["gpt-3"].disabled, Some(DisabledFlag::Bypass));
        let key = &m.entities["key-1"];
        assert_eq!(key.parent, None);
        let level = &key.resources["gpt-4"];
        assert_eq!(level.disabled, Some(DisabledFlag::Enabled));
        assert_eq!(level.limits[0].window_seconds(), Some(86_400));
        assert!(level.limits[1].is_soft());
        assert_eq!(level.limits[1].capacity(), 50, "burst stands for capacity");
        assert_eq!(key.resources["_default_"].cascade, Some(false));
    }

    #[test]
    fn concurrency_limits_are_read_at_every_level_and_bad_ones_refused_with_their_line() {
        let m = parse(
            "system:\n  concurrency: {jobs: 10}\nresources:\n  gpt-4:\n    concurrency:\n      streams: 5/2m\n      jobs: 3\nentities:\n  k:\n    resources:\n      _default_:\n        concurrency: {streams: \"1/1500ms\"}\n",
        )
        .unwrap();
        let text = |l: &Level| -> Vec<String> {
            l.concurrency
                .iter()
                .map(crate::spec::format_concurrency)
                .collect()
        };
        assert_eq!(text(m.system.as_ref().unwrap()), ["jobs=10/30s"]);
        assert_eq!(text(&m.resources["gpt-4"]), ["jobs=3/30s", "streams=5/2m"]);
        assert_eq!(
            text(&m.entities["k"].resources["_default_"]),
            ["streams=1/1500ms"]
        );
        assert!(!m.resources["gpt-4"].is_empty());
        for (bad, line) in [
            (
                "resources:\n  gpt-4:\n    concurrency:\n      streams: 0\n",
                4,
            ),
            (
                "resources:\n  gpt-4:\n    concurrency:\n      streams: 5/1d\n",
                4,
            ),
            (
                "resources:\n  gpt-4:\n    concurrency:\n      streams: [5]\n",
                4,
            ),
            (
                "resources:\n  gpt-4:\n    concurrency:\n      a: 1\n      b: 1\n      c: 1\n      d: 1\n      e: 1\n",
                3,
            ),
        ] {
            let e = refused(bad);
            assert_eq!(super::tests::line(&e), Some(line), "{bad}: {e}");
        }
    }

    #[test]
    fn the_command_line_forms_and_parents_are_read_too() {
        let m = parse(
            "resources:\n  gpt-4:\n    limits:\n      rpm: 100/min\n      tpm: {rate: 10000, per: min, burst: 20000, soft: true}\n      q: {quota: 5, session: day}\nentities:\n  key-1: {parent: proj-1}\n  proj-1: {parent: null}\n",
        )
        .unwrap();
        let limits = &m.resources["gpt-4"].limits;
        assert_eq!(limits[0], Limit::session_quota("q", 5, 86_400));
        assert_eq!(limits[1], Limit::per_minute("rpm", 100));
        assert_eq!(
            limits[2],
            Limit::per_minute("tpm", 10_000).with_burst(20_000).soft()
        );
        assert_eq!(m.entities["key-1"].parent, Some(Some("proj-1".into())));
        assert_eq!(m.entities["proj-1"].parent, Some(None));
    }

    fn refused(text: &str) -> ManifestError {
        parse(text).expect_err(text)
    }

    fn line(e: &ManifestError) -> Option<usize> {
        match e {
            ManifestError::Syntax { at, .. }
            | ManifestError::UnknownKey { at, .. }
            | ManifestError::InvalidValue { at, .. }
            | ManifestError::ReservedName { at, .. }
            | ManifestError::Schedule { at, .. }
            | ManifestError::InvalidLimit { at, .. }
            | ManifestError::TooManyLimits { at, .. }
            | ManifestError::ParentCycle { at, .. }
            | ManifestError::Namespace { at, .. } => at.line,
            _ => None,
        }
    }

    #[test]
    fn bad_manifests_are_refused_with_their_line_and_kind() {
        let e = refused("resources:\n  gpt-4:\n    limts: {}\n");
        assert!(
            matches!(&e, ManifestError::UnknownKey { key, .. } if key == "limts"),
            "{e}"
        );
        assert_eq!(line(&e), Some(3));
        assert!(
            e.to_string().starts_with("line 3 (resources.gpt-4.limts)"),
            "{e}"
        );

        let e =
            refused("namespace: default\nresources:\n  gpt-4:\n    limits:\n      ttl: 5/min\n");
        assert!(matches!(e, ManifestError::ReservedName { .. }), "{e}");
        assert_eq!(line(&e), Some(5));

        let e = refused(
            "resources:\n  r:\n    limits:\n      tpm:\n        capacity: 5\n        schedule:\n          - {cron: \"* 99 * * *\", scale: 2}\n",
        );
        assert!(matches!(e, ManifestError::Schedule { .. }), "{e}");
        assert_eq!(line(&e), Some(7));

        let e = refused(
            "resources:\n  r:\n    limits:\n      tpm: 5/min@Nowhere/Town[* * * * *=scale 2]\n",
        );
        assert!(matches!(e, ManifestError::Schedule { .. }), "{e}");
        assert_eq!(line(&e), Some(4));

        let e = refused(
            "entities:\n  a: {parent: b}\n  b:\n    parent: c\n  c: {parent: a}\n  d: {parent: a}\n",
        );
        assert!(
            matches!(&e, ManifestError::ParentCycle { cycle, .. } if cycle == "a -> b -> c -> a"),
            "{e}"
        );
        assert_eq!(line(&e), Some(2));
        let e = refused("entities:\n  a: {parent: a}\n");
        assert!(matches!(e, ManifestError::ParentCycle { .. }), "{e}");

        let many: String = (0..17).map(|i| format!("      l{i}: 1/min\n")).collect();
        let e = refused(&format!("resources:\n  r:\n    limits:\n{many}"));
        assert!(
            matches!(
                e,
                ManifestError::TooManyLimits {
                    count: 17,
                    max: 16,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(line(&e), Some(3));

        let e = refused("resources:\n  r:\n    disabled: yes\n");
        assert!(matches!(e, ManifestError::InvalidValue { .. }), "{e}");
        assert_eq!(line(&e), Some(3));

        let e = refused("system:\n  cascade: true\n");
        assert!(matches!(e, ManifestError::UnknownKey { .. }), "{e}");
        assert_eq!(line(&e), Some(2));

        let e = refused(
            "resources:\n  r:\n    limits:\n      rpm: {capacity: 5, refill_amount: 5, reset_after_seconds: 60}\n",
        );
        assert!(matches!(e, ManifestError::InvalidLimit { .. }), "{e}");
        assert_eq!(line(&e), Some(4));

        let e = refused("resources:\n  r:\n    limits:\n      rpm: {capacity: 5, colour: red}\n");
        assert!(
            matches!(&e, ManifestError::UnknownKey { key, .. } if key == "colour"),
            "{e}"
        );

        let e = refused("resources: [\n");
        assert!(matches!(e, ManifestError::Syntax { .. }), "{e}");
        assert!(line(&e).is_some());

        let e = refused("system:\n  on_unavailable: allow\n");
        assert!(matches!(e, ManifestError::InvalidValue { .. }), "{e}");
    }
}
