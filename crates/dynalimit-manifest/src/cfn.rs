//! The manifest as a CloudFormation custom resource: its properties read back into a
//! manifest ([`manifest_of`]), and the template `dynalimit limits cfn-template` prints
//! ([`template`]).
//!
//! The properties are zae-limiter 0.17's (`Custom::ZaeLimiterLimits`), so that a template
//! written for it works unchanged: `ServiceToken`, `TableName`, `Namespace` or `NamespaceId`,
//! `FullApply`, and the levels in PascalCase: `System {OnUnavailable, Limits}`,
//! `Resources {R: {Limits, Disabled, Cascade}}`, `Entities {E: {Resources: {…}}}`. A limit is
//! `{Capacity, RefillAmount, RefillPeriod, ResetAfterSeconds, Soft, Schedule,
//! ResetSchedule}`; a schedule entry `{Cron, Tz, Scale, Capacity, RefillAmount,
//! RefillPeriodSeconds}`. dynalimit adds `Parent` to an entity.
//!
//! CloudFormation hands every scalar to the function as a string. Each field is converted by
//! its type: a number from a number or its decimal text, a flag from `true`/`false` (any
//! case) or a boolean and nothing else, `Disabled` also from `bypass`. An empty text is an
//! absent optional number (how a template's empty parameter reads). Anything else is refused
//! with the property's path before any request.

use dynalimit_core::Limit;
use dynalimit_core::schedule::Modifier;
use dynalimit_repository::DisabledFlag;
use serde_json::{Map, Value as Json, json};
use serde_yaml_ng::{Mapping, Value};

use crate::error::{ManifestError, Place};
use crate::model::{self, Level, Manifest};

/// The custom resource type `limits cfn-template` writes. The provisioner serves any type
/// (zae-limiter's `Custom::ZaeLimiterLimits` too): CloudFormation does not pass it on.
pub const RESOURCE_TYPE: &str = "Custom::DynalimitLimits";

/// The properties that say where and how to apply, not what.
const SETTINGS: &[&str] = &[
    "ServiceToken",
    "TableName",
    "Namespace",
    "NamespaceId",
    "FullApply",
];

fn refuse(path: &str, message: impl Into<String>) -> ManifestError {
    ManifestError::InvalidValue {
        at: Place {
            line: None,
            path: path.to_owned(),
        },
        message: message.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A whole number from a number or its decimal text; `None` for an empty text.
///
/// # Errors
/// Anything else, a boolean included.
pub fn whole(value: &Json, path: &str) -> Result<Option<i64>, ManifestError> {
    match value {
        Json::Number(n) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| refuse(path, format!("{path} must be a whole number, got {n}"))),
        Json::String(s) if s.is_empty() => Ok(None),
        Json::String(s) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| refuse(path, format!("{path} must be a whole number, got {s:?}"))),
        other => Err(refuse(
            path,
            format!("{path} must be a whole number, got {other}"),
        )),
    }
}

/// A finite number from a number or its text; `None` for an empty text.
///
/// # Errors
/// Anything else, a boolean, NaN and infinities included.
pub fn number(value: &Json, path: &str) -> Result<Option<f64>, ManifestError> {
    let parsed = match value {
        Json::Number(n) => n.as_f64(),
        Json::String(s) if s.is_empty() => return Ok(None),
        Json::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match parsed {
        Some(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(refuse(
            path,
            format!("{path} must be a finite number, got {value}"),
        )),
    }
}

/// A flag from a boolean or `true`/`false` in any case. `"1"`, `"yes"` and `""` are
/// refused: a wrong guess would silently change who is admitted.
///
/// # Errors
/// Anything else.
pub fn flag(value: &Json, path: &str) -> Result<bool, ManifestError> {
    match value {
        Json::Bool(b) => Ok(*b),
        Json::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Json::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(refuse(
            path,
            format!("{path} must be true or false, got {other}"),
        )),
    }
}

fn text<'a>(value: &'a Json, path: &str) -> Result<&'a str, ManifestError> {
    value
        .as_str()
        .ok_or_else(|| refuse(path, format!("{path} must be text, got {value}")))
}

fn object<'a>(value: &'a Json, path: &str) -> Result<&'a Map<String, Json>, ManifestError> {
    value
        .as_object()
        .ok_or_else(|| refuse(path, format!("{path} must be a mapping")))
}

fn unknown(path: &str, key: &str, expected: &'static str) -> ManifestError {
    ManifestError::UnknownKey {
        at: Place {
            line: None,
            path: join(path, key),
        },
        key: key.to_owned(),
        expected,
    }
}

fn key(k: &str) -> Value {
    Value::String(k.to_owned())
}

/// The manifest the properties of a custom resource declare (the settings `ServiceToken`,
/// `TableName`, `Namespace`, `NamespaceId` and `FullApply` aside).
///
/// # Errors
/// A property of the wrong type or unknown, and every refusal of [`model::parse`], named by
/// the property's path.
pub fn manifest_of(properties: &Json) -> Result<Manifest, ManifestError> {
    let props = object(properties, "ResourceProperties")?;
    let mut top = Mapping::new();
    for (k, v) in props {
        match k.as_str() {
            s if SETTINGS.contains(&s) => {}
            "System" => {
                top.insert(key("system"), system(v)?);
            }
            "Resources" => {
                let mut out = Mapping::new();
                for (r, level) in object(v, "Resources")? {
                    out.insert(key(r), self::level(level, &join("Resources", r))?);
                }
                top.insert(key("resources"), Value::Mapping(out));
            }
            "Entities" => {
                let mut out = Mapping::new();
                for (e, entity) in object(v, "Entities")? {
                    out.insert(key(e), self::entity(entity, &join("Entities", e))?);
                }
                top.insert(key("entities"), Value::Mapping(out));
            }
            other => {
                return Err(unknown(
                    "",
                    other,
                    "ServiceToken, TableName, Namespace, NamespaceId, FullApply, System, \
                     Resources, Entities",
                ));
            }
        }
    }
    model::from_value(&Value::Mapping(top))
}

/// Whether the properties ask for a full apply (`FullApply`).
///
/// # Errors
/// A `FullApply` that is not a flag.
pub fn full_apply(properties: &Json) -> Result<bool, ManifestError> {
    match properties.get("FullApply") {
        None | Some(Json::Null) => Ok(false),
        Some(v) => flag(v, "FullApply"),
    }
}

fn system(value: &Json) -> Result<Value, ManifestError> {
    let mut out = Mapping::new();
    for (k, v) in object(value, "System")? {
        let path = join("System", k);
        match k.as_str() {
            "OnUnavailable" => {
                out.insert(key("on_unavailable"), key(text(v, &path)?));
            }
            "Limits" => {
                out.insert(key("limits"), limits(v, &path)?);
            }
            other => return Err(unknown("System", other, "OnUnavailable, Limits")),
        }
    }
    Ok(Value::Mapping(out))
}

/// The `Disabled` value of a bypassed level, in a custom resource as in the table.
const BYPASS: &str = DisabledFlag::Bypass.name();

fn level(value: &Json, path: &str) -> Result<Value, ManifestError> {
    let mut out = Mapping::new();
    for (k, v) in object(value, path)? {
        let p = join(path, k);
        match k.as_str() {
            "Limits" => {
                out.insert(key("limits"), limits(v, &p)?);
            }
            "Disabled" => {
                let d = match v {
                    Json::Null => Value::Null,
                    Json::String(s) if s.eq_ignore_ascii_case(BYPASS) => key(BYPASS),
                    other => Value::Bool(flag(other, &p)?),
                };
                out.insert(key("disabled"), d);
            }
            "Cascade" => {
                let c = match v {
                    Json::Null => Value::Null,
                    other => Value::Bool(flag(other, &p)?),
                };
                out.insert(key("cascade"), c);
            }
            other => return Err(unknown(path, other, "Limits, Disabled, Cascade")),
        }
    }
    Ok(Value::Mapping(out))
}

fn entity(value: &Json, path: &str) -> Result<Value, ManifestError> {
    let mut out = Mapping::new();
    for (k, v) in object(value, path)? {
        let p = join(path, k);
        match k.as_str() {
            "Resources" => {
                let mut resources = Mapping::new();
                for (r, l) in object(v, &p)? {
                    resources.insert(key(r), level(l, &join(&p, r))?);
                }
                out.insert(key("resources"), Value::Mapping(resources));
            }
            "Parent" => {
                let parent = match v {
                    Json::Null => Value::Null,
                    Json::String(s) if s.is_empty() => Value::Null,
                    other => key(text(other, &p)?),
                };
                out.insert(key("parent"), parent);
            }
            other => return Err(unknown(path, other, "Resources, Parent")),
        }
    }
    Ok(Value::Mapping(out))
}

fn int_value(v: &Json, path: &str) -> Result<Option<Value>, ManifestError> {
    Ok(whole(v, path)?.map(|n| Value::Number(n.into())))
}

fn limits(value: &Json, path: &str) -> Result<Value, ManifestError> {
    let mut out = Mapping::new();
    if value.is_null() {
        return Ok(Value::Mapping(out));
    }
    for (name, limit) in object(value, path)? {
        let lp = join(path, name);
        let mut fields = Mapping::new();
        for (k, v) in object(limit, &lp)? {
            let p = join(&lp, k);
            let (field, value) = match k.as_str() {
                "Capacity" => ("capacity", int_value(v, &p)?),
                "RefillAmount" => ("refill_amount", int_value(v, &p)?),
                "RefillPeriod" => ("refill_period", int_value(v, &p)?),
                "ResetAfterSeconds" => ("reset_after_seconds", int_value(v, &p)?),
                "Soft" => ("soft", Some(Value::Bool(flag(v, &p)?))),
                "Schedule" => ("schedule", Some(entries(v, &p, false)?)),
                "ResetSchedule" => ("reset_schedule", Some(entries(v, &p, true)?)),
                other => {
                    return Err(unknown(
                        &lp,
                        other,
                        "Capacity, RefillAmount, RefillPeriod, ResetAfterSeconds, Soft, \
                         Schedule, ResetSchedule",
                    ));
                }
            };
            if let Some(value) = value {
                fields.insert(key(field), value);
            }
        }
        if !fields.contains_key("capacity") {
            return Err(refuse(&lp, format!("{lp} needs Capacity")));
        }
        out.insert(key(name), Value::Mapping(fields));
    }
    Ok(Value::Mapping(out))
}

fn entries(value: &Json, path: &str, reset: bool) -> Result<Value, ManifestError> {
    let list = match value {
        Json::Null => return Ok(Value::Null),
        Json::Array(list) => list,
        _ => return Err(refuse(path, format!("{path} must be a list of entries"))),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let ep = format!("{path}[{i}]");
        let mut fields = Mapping::new();
        for (k, v) in object(entry, &ep)? {
            let p = join(&ep, k);
            let (field, value) = match (k.as_str(), reset) {
                ("Cron", _) => ("cron", Some(key(text(v, &p)?))),
                ("Tz", _) => ("tz", Some(key(text(v, &p)?))),
                ("Scale", false) => (
                    "scale",
                    number(v, &p)?.map(|x| Value::Number(serde_yaml_ng::Number::from(x))),
                ),
                ("Capacity", false) => ("capacity", int_value(v, &p)?),
                ("RefillAmount", false) => ("refill_amount", int_value(v, &p)?),
                ("RefillPeriodSeconds", false) => ("refill_period_seconds", int_value(v, &p)?),
                (other, true) => return Err(unknown(&ep, other, "Cron, Tz")),
                (other, false) => {
                    return Err(unknown(
                        &ep,
                        other,
                        "Cron, Tz, Scale, Capacity, RefillAmount, RefillPeriodSeconds",
                    ));
                }
            };
            if let Some(value) = value {
                fields.insert(key(field), value);
            }
        }
        out.push(Value::Mapping(fields));
    }
    Ok(Value::Sequence(out))
}

/// One limit as properties: the canonical long form, whatever form the manifest used.
pub fn limit_properties(limit: &Limit) -> Json {
    let mut out = Map::new();
    out.insert("Capacity".into(), json!(limit.capacity()));
    out.insert("RefillAmount".into(), json!(limit.refill_amount()));
    out.insert("RefillPeriod".into(), json!(limit.refill_period_seconds()));
    if let Some(window) = limit.window_seconds() {
        out.insert("ResetAfterSeconds".into(), json!(window));
    }
    if limit.is_soft() {
        out.insert("Soft".into(), json!(true));
    }
    if let Some(schedule) = limit.schedule() {
        let tz = schedule.zone().name();
        let entries: Vec<Json> = schedule
            .entries()
            .iter()
            .map(|e| {
                let mut entry = Map::new();
                entry.insert("Cron".into(), json!(e.cron().to_string()));
                entry.insert("Tz".into(), json!(tz));
                match e.modifier() {
                    Modifier::Scale { per_mille } => {
                        entry.insert("Scale".into(), json!(f64::from(per_mille) / 1000.0));
                    }
                    Modifier::Absolute {
                        capacity,
                        refill_amount,
                        refill_period_seconds,
                    } => {
                        for (k, v) in [
                            ("Capacity", capacity),
                            ("RefillAmount", refill_amount),
                            ("RefillPeriodSeconds", refill_period_seconds),
                        ] {
                            if let Some(v) = v {
                                entry.insert(k.into(), json!(v));
                            }
                        }
                    }
                }
                Json::Object(entry)
            })
            .collect();
        out.insert("Schedule".into(), Json::Array(entries));
    }
    if let Some(reset) = limit.reset() {
        let tz = reset.zone().name();
        let entries: Vec<Json> = reset
            .crons()
            .iter()
            .map(|c| json!({"Cron": c.to_string(), "Tz": tz}))
            .collect();
        out.insert("ResetSchedule".into(), Json::Array(entries));
    }
    Json::Object(out)
}

fn level_properties(level: &Level, system: bool) -> Json {
    let mut out = Map::new();
    let limits: Map<String, Json> = level
        .limits
        .iter()
        .map(|l| (l.name().to_owned(), limit_properties(l)))
        .collect();
    out.insert("Limits".into(), Json::Object(limits));
    if system {
        if let Some(o) = level.on_unavailable {
            out.insert("OnUnavailable".into(), json!(o.as_str()));
        }
        return Json::Object(out);
    }
    match level.disabled {
        Some(DisabledFlag::Bypass) => {
            out.insert("Disabled".into(), json!(BYPASS));
        }
        Some(DisabledFlag::Disabled) => {
            out.insert("Disabled".into(), json!(true));
        }
        Some(DisabledFlag::Enabled) => {
            out.insert("Disabled".into(), json!(false));
        }
        None => {}
    }
    if let Some(c) = level.cascade {
        out.insert("Cascade".into(), json!(c));
    }
    Json::Object(out)
}

/// The levels of `manifest` as properties (no settings).
pub fn properties(manifest: &Manifest) -> Map<String, Json> {
    let mut out = Map::new();
    if let Some(system) = &manifest.system {
        out.insert("System".into(), level_properties(system, true));
    }
    if !manifest.resources.is_empty() {
        let resources: Map<String, Json> = manifest
            .resources
            .iter()
            .map(|(r, l)| (r.clone(), level_properties(l, false)))
            .collect();
        out.insert("Resources".into(), Json::Object(resources));
    }
    if !manifest.entities.is_empty() {
        let entities: Map<String, Json> = manifest
            .entities
            .iter()
            .map(|(id, e)| {
                let mut entity = Map::new();
                let resources: Map<String, Json> = e
                    .resources
                    .iter()
                    .map(|(r, l)| (r.clone(), level_properties(l, false)))
                    .collect();
                entity.insert("Resources".into(), Json::Object(resources));
                if let Some(parent) = &e.parent {
                    entity.insert("Parent".into(), json!(parent));
                }
                (id.clone(), Json::Object(entity))
            })
            .collect();
        out.insert("Entities".into(), Json::Object(entities));
    }
    out
}

/// The export of the provisioner's ARN by a stack named `stack`: the template's output
/// `ProvisionerServiceToken` exports it under this name (zae-limiter's name too).
pub fn provisioner_export(stack: &str) -> String {
    format!("{stack}-ProvisionerArn")
}

/// A template whose one resource, `Limits`, applies `manifest` to namespace `namespace` of
/// the table of stack `stack` through the stack's provisioner (found by its export).
/// Deploying it applies the manifest; updating it applies the new one and removes the
/// levels the old one declared and the new one does not; deleting it removes the levels it
/// declares.
pub fn template(manifest: &Manifest, stack: &str, namespace: &str, full: bool) -> Json {
    let mut props = Map::new();
    props.insert(
        "ServiceToken".into(),
        json!({ "Fn::ImportValue": provisioner_export(stack) }),
    );
    props.insert("TableName".into(), json!(stack));
    props.insert("Namespace".into(), json!(namespace));
    if full {
        props.insert("FullApply".into(), json!(true));
    }
    props.extend(properties(manifest));
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": format!("dynalimit limits of namespace {namespace} (stack {stack})"),
        "Resources": {
            "Limits": {
                "Type": RESOURCE_TYPE,
                "Properties": Json::Object(props),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(props: Json) -> ManifestError {
        manifest_of(&props).expect_err("refused")
    }

    #[test]
    fn strings_are_read_by_the_field_type() {
        let props = json!({
            "ServiceToken": "arn:aws:lambda:eu-west-1:1:function:x",
            "TableName": "limits",
            "Namespace": "default",
            "FullApply": "false",
            "System": {"OnUnavailable": "block", "Limits": {"rpm": {"Capacity": "1000"}}},
            "Resources": {
                "gpt-4": {
                    "Disabled": "false",
                    "Cascade": "TRUE",
                    "Limits": {
                        "tpm": {
                            "Capacity": "20000", "RefillAmount": "10000", "RefillPeriod": "60",
                            "Soft": "False",
                            "Schedule": [{"Cron": "* 9-17 * * MON-FRI", "Tz": "Europe/Berlin", "Scale": "0.5"}]
                        },
                        "day": {"Capacity": "100", "ResetAfterSeconds": "86400", "Soft": "true"},
                        "month": {"Capacity": "5", "ResetSchedule": [{"Cron": "0 0 1 * *", "Tz": "Europe/Berlin"}]}
                    }
                },
                "gpt-3": {"Disabled": "Bypass"}
            },
            "Entities": {"key-1": {"Parent": "proj", "Resources": {"_default_": {"Disabled": "true"}}}}
        });
        let m = manifest_of(&props).unwrap();
        assert!(!full_apply(&props).unwrap(), "'false' is false");
        let system = m.system.as_ref().unwrap();
        assert_eq!(system.limits, [Limit::per_minute("rpm", 1000)]);
        let gpt4 = &m.resources["gpt-4"];
        assert_eq!(
            gpt4.disabled,
            Some(DisabledFlag::Enabled),
            "'false' is not true"
        );
        assert_eq!(gpt4.cascade, Some(true));
        let by_name = |n: &str| gpt4.limits.iter().find(|l| l.name() == n).unwrap();
        assert!(!by_name("tpm").is_soft(), "'False' is not true");
        assert_eq!(by_name("tpm").refill_amount(), 10_000);
        assert!(by_name("tpm").schedule().is_some());
        assert!(by_name("day").is_soft());
        assert_eq!(by_name("day").window_seconds(), Some(86_400));
        assert!(by_name("month").reset().is_some());
        assert_eq!(m.resources["gpt-3"].disabled, Some(DisabledFlag::Bypass));
        let key = &m.entities["key-1"];
        assert_eq!(key.parent, Some(Some("proj".into())));
        assert_eq!(
            key.resources["_default_"].disabled,
            Some(DisabledFlag::Disabled)
        );
    }

    #[test]
    fn what_is_not_its_type_is_refused_with_its_path() {
        for (props, path) in [
            (json!({"FullApply": "yes"}), "FullApply"),
            (
                json!({"Resources": {"r": {"Disabled": "1"}}}),
                "Resources.r.Disabled",
            ),
            (
                json!({"Resources": {"r": {"Cascade": ""}}}),
                "Resources.r.Cascade",
            ),
            (
                json!({"Resources": {"r": {"Limits": {"x": {"Capacity": "ten"}}}}}),
                "Resources.r.Limits.x.Capacity",
            ),
            (
                json!({"Resources": {"r": {"Limits": {"x": {"Capacity": true}}}}}),
                "Resources.r.Limits.x.Capacity",
            ),
            (
                json!({"Resources": {"r": {"Limits": {"x": {"Capacity": "5", "Soft": "1"}}}}}),
                "Resources.r.Limits.x.Soft",
            ),
            (
                json!({"Resources": {"r": {"Limits": {"x": {"Capacity": "5",
                    "Schedule": [{"Cron": "* * * * *", "Scale": "NaN"}]}}}}}),
                "Resources.r.Limits.x.Schedule[0].Scale",
            ),
            (
                json!({"Resources": {"r": {"Limits": {"x": {"RefillAmount": "5"}}}}}),
                "Resources.r.Limits.x",
            ),
        ] {
            let e = match path {
                "FullApply" => full_apply(&props).unwrap_err(),
                _ => refused(props),
            };
            assert!(
                matches!(&e, ManifestError::InvalidValue { at, .. } if at.path == path),
                "{path}: {e}"
            );
        }
        let e = refused(json!({"Resources": {"r": {"Colour": "red"}}}));
        assert!(
            matches!(&e, ManifestError::UnknownKey { key, .. } if key == "Colour"),
            "{e}"
        );
        let e = refused(json!({"Resources": {"r": {"Limits": {"ttl": {"Capacity": 5}}}}}));
        assert!(matches!(e, ManifestError::ReservedName { .. }), "{e}");
    }

    #[test]
    fn a_manifest_survives_the_trip_through_properties() {
        let text = r#"
system:
  on_unavailable: allow
  limits: {rpm: 1000/min}
resources:
  gpt-4:
    cascade: false
    disabled: bypass
    limits:
      tpm: "10000/min:burst=20000:soft@Europe/Berlin[* 9-17 * * MON-FRI=scale 0.5][* 0-6 * * *=burst 2000]"
      tokens: "10000000/quota@Europe/Berlin[0 0 1 * *]"
      requests: 100/session:day
entities:
  key-1:
    parent: proj
    resources:
      gpt-4: {disabled: false, limits: {rpm: 50/min}}
  proj: {parent: null}
"#;
        let m = crate::parse(text).unwrap();
        let t = template(&m, "limits", "default", false);
        let props = &t["Resources"]["Limits"]["Properties"];
        // As CloudFormation delivers them: every scalar a string.
        fn stringify(v: &Json) -> Json {
            match v {
                Json::Object(o) => {
                    Json::Object(o.iter().map(|(k, v)| (k.clone(), stringify(v))).collect())
                }
                Json::Array(a) => Json::Array(a.iter().map(stringify).collect()),
                Json::Bool(b) => json!(b.to_string()),
                Json::Number(n) => json!(n.to_string()),
                other => other.clone(),
            }
        }
        assert_eq!(
            manifest_of(props).unwrap(),
            Manifest {
                namespace: None,
                ..m.clone()
            }
        );
        assert_eq!(
            manifest_of(&stringify(props)).unwrap(),
            Manifest {
                namespace: None,
                ..m
            }
        );
    }
}
