//! The CloudFormation template of `infra/template.yaml` as JSON, for tests that check another
//! part of the product against it (the aggregator's environment, the IAM policies, the schema).

use std::collections::BTreeMap;

use dynalimit_stack::TEMPLATE;
use serde_json::{Value, json};

/// The template as JSON, short-form tags (`!Ref`, `!If`, …) turned into their long form
/// (`{"Ref": …}`, `{"Fn::If": …}`).
///
/// # Panics
/// When the template is not valid YAML.
pub fn template() -> Value {
    parse(TEMPLATE)
}

/// A CloudFormation template's text as JSON, in the form of [`template`].
///
/// # Panics
/// When the text is not valid YAML.
pub fn parse(text: &str) -> Value {
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).expect("template parses");
    to_json(yaml)
}

fn to_json(v: serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(n).expect("number"),
        Y::String(s) => Value::String(s),
        Y::Sequence(s) => Value::Array(s.into_iter().map(to_json).collect()),
        Y::Mapping(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k.as_str().expect("string key").to_string(), to_json(v)))
                .collect(),
        ),
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            let tag = tag.trim_start_matches('!');
            let value = to_json(t.value);
            match tag {
                "Ref" | "Condition" => json!({ tag: value }),
                "GetAtt" => {
                    let parts: Vec<Value> = value
                        .as_str()
                        .expect("GetAtt string")
                        .split('.')
                        .map(|p| Value::String(p.into()))
                        .collect();
                    json!({ "Fn::GetAtt": parts })
                }
                other => json!({ format!("Fn::{other}"): value }),
            }
        }
    }
}

/// The resources of type `ty` (`AWS::IAM::ManagedPolicy`, …), by logical id.
pub fn resources_of_type<'a>(t: &'a Value, ty: &str) -> Vec<(&'a String, &'a Value)> {
    t["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"] == ty)
        .collect()
}

/// The default of parameter `name` as CloudFormation passes it (numbers as their text).
///
/// # Panics
/// When the template has no such parameter or it has no default.
pub fn parameter_default(t: &Value, name: &str) -> String {
    match &t["Parameters"][name]["Default"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => panic!("parameter {name} has no usable default: {other}"),
    }
}

/// What a template value resolves to with every parameter at its default: a string is itself,
/// `{"Ref": parameter}` is the parameter's default and `{"Ref": resource}` is
/// `resources[resource]` (the physical id the caller stands in for it).
///
/// # Panics
/// As [`resolve_with`].
pub fn resolve_with_defaults(
    t: &Value,
    value: &Value,
    resources: &BTreeMap<&str, String>,
) -> String {
    resolve_with(t, value, resources, &BTreeMap::new())
}

/// As [`resolve_with_defaults`] for the given parameter values (others at their defaults),
/// and reading `Fn::If` as CloudFormation does.
///
/// # Panics
/// On any other intrinsic, or a `Ref` to a resource missing from `resources`.
pub fn resolve_with(
    t: &Value,
    value: &Value,
    resources: &BTreeMap<&str, String>,
    parameters: &BTreeMap<&str, &str>,
) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Object(o) if o.len() == 1 && o.contains_key("Ref") => {
            let name = o["Ref"].as_str().expect("Ref names a string");
            if t["Parameters"][name].is_object() {
                parameters
                    .get(name)
                    .map_or_else(|| parameter_default(t, name), |v| (*v).to_owned())
            } else {
                resources
                    .get(name)
                    .unwrap_or_else(|| panic!("no stand-in for resource {name}"))
                    .clone()
            }
        }
        Value::Object(o) if o.len() == 1 && o.contains_key("Fn::If") => {
            let args = o["Fn::If"].as_array().expect("Fn::If takes a list");
            let condition = args[0].as_str().expect("Fn::If names a condition");
            let branch = if condition_holds(t, condition, parameters) {
                &args[1]
            } else {
                &args[2]
            };
            resolve_with(t, branch, resources, parameters)
        }
        other => panic!("cannot resolve {other} statically"),
    }
}

/// The environment Lambda gives function `logical_id` when the stack runs with default
/// parameters: its `Environment.Variables`, plus `_HANDLER` (its `Handler`) and
/// `AWS_LAMBDA_LOG_FORMAT` and `AWS_LAMBDA_LOG_LEVEL`, which Lambda sets from the function's
/// `LoggingConfig`.
///
/// # Panics
/// As [`resolve_with_defaults`], or when the resource is not a function.
pub fn function_environment(
    t: &Value,
    logical_id: &str,
    resources: &BTreeMap<&str, String>,
) -> BTreeMap<String, String> {
    function_environment_with(t, logical_id, resources, &BTreeMap::new())
}

/// As [`function_environment`] for the given parameter values (others at their defaults).
///
/// # Panics
/// As [`resolve_with`], or when the resource is not a function.
pub fn function_environment_with(
    t: &Value,
    logical_id: &str,
    resources: &BTreeMap<&str, String>,
    parameters: &BTreeMap<&str, &str>,
) -> BTreeMap<String, String> {
    let f = &t["Resources"][logical_id];
    assert_eq!(f["Type"], "AWS::Lambda::Function", "{logical_id}");
    let p = &f["Properties"];
    let mut env: BTreeMap<String, String> = p["Environment"]["Variables"]
        .as_object()
        .map(|vars| {
            vars.iter()
                .map(|(k, v)| (k.clone(), resolve_with(t, v, resources, parameters)))
                .collect()
        })
        .unwrap_or_default();
    // Lambda hands a custom runtime the function's handler.
    if let Some(handler) = p["Handler"].as_str() {
        env.insert("_HANDLER".to_owned(), handler.to_owned());
    }
    for (var, field) in [
        ("AWS_LAMBDA_LOG_FORMAT", "LogFormat"),
        ("AWS_LAMBDA_LOG_LEVEL", "ApplicationLogLevel"),
    ] {
        let value = &p["LoggingConfig"][field];
        if !value.is_null() {
            env.insert(
                var.to_owned(),
                resolve_with(t, value, resources, parameters),
            );
        }
    }
    env
}

/// The event filter patterns of the aggregator's event source mapping for the given
/// parameter values (others at their defaults).
///
/// # Panics
/// When the mapping has no filters or a pattern is not JSON.
pub fn stream_filters(t: &Value, parameters: &BTreeMap<&str, &str>) -> Vec<Value> {
    let filters =
        &t["Resources"]["AggregatorEventSourceMapping"]["Properties"]["FilterCriteria"]["Filters"];
    resolve_conditions(t, filters, parameters)
        .and_then(|f| f.as_array().cloned())
        .expect("filters")
        .iter()
        .map(|f| serde_json::from_str(f["Pattern"].as_str().expect("pattern")).expect("JSON"))
        .collect()
}

/// Whether `event` passes a Lambda event-filtering `pattern`, for the part of the pattern
/// language the template uses: nested objects whose leaves are arrays of exact values or
/// `{"prefix": text}` (a field matches when it matches one of them; a missing field never
/// matches).
///
/// # Panics
/// On pattern syntax outside that part (other content filters such as `exists`).
pub fn filter_matches(pattern: &Value, event: &Value) -> bool {
    let Some(fields) = pattern.as_object() else {
        panic!("a pattern is an object: {pattern}");
    };
    fields.iter().all(|(k, want)| {
        let got = &event[k.as_str()];
        match want {
            Value::Object(_) => got.is_object() && filter_matches(want, got),
            Value::Array(values) => values.iter().any(|v| match v {
                Value::Object(o) => match o.get("prefix") {
                    Some(Value::String(p)) if o.len() == 1 => {
                        got.as_str().is_some_and(|g| g.starts_with(p.as_str()))
                    }
                    _ => panic!("unsupported content filter {v}"),
                },
                exact => got == exact,
            }),
            other => panic!("unsupported pattern leaf {other}"),
        }
    })
}

/// Whether condition `name` of the template holds for the given parameter values (parameters
/// not given take their defaults). Reads `Fn::And`, `Fn::Or`, `Fn::Not`, `Fn::Equals`,
/// `Condition` and `Ref`s of parameters.
///
/// # Panics
/// On an unknown condition or other intrinsics.
pub fn condition_holds(t: &Value, name: &str, parameters: &BTreeMap<&str, &str>) -> bool {
    fn value(t: &Value, v: &Value, parameters: &BTreeMap<&str, &str>) -> String {
        match v {
            Value::Object(o) if o.contains_key("Ref") => {
                let p = o["Ref"].as_str().expect("Ref names a string");
                parameters
                    .get(p)
                    .map_or_else(|| parameter_default(t, p), |v| (*v).to_owned())
            }
            Value::String(s) => s.clone(),
            other => panic!("cannot compare {other}"),
        }
    }
    fn holds(t: &Value, c: &Value, parameters: &BTreeMap<&str, &str>) -> bool {
        let o = c.as_object().unwrap_or_else(|| panic!("condition {c}"));
        let args = |k: &str| {
            o[k].as_array()
                .unwrap_or_else(|| panic!("{k} takes a list"))
        };
        if o.contains_key("Fn::And") {
            args("Fn::And").iter().all(|c| holds(t, c, parameters))
        } else if o.contains_key("Fn::Or") {
            args("Fn::Or").iter().any(|c| holds(t, c, parameters))
        } else if o.contains_key("Fn::Not") {
            !holds(t, &args("Fn::Not")[0], parameters)
        } else if o.contains_key("Fn::Equals") {
            let a = args("Fn::Equals");
            value(t, &a[0], parameters) == value(t, &a[1], parameters)
        } else if let Some(Value::String(other)) = o.get("Condition") {
            holds(t, &t["Conditions"][other.as_str()], parameters)
        } else {
            panic!("unsupported condition {c}")
        }
    }
    let c = &t["Conditions"][name];
    assert!(c.is_object(), "no condition {name}");
    holds(t, c, parameters)
}

/// `value` as CloudFormation reads it for the given parameter values (others at their
/// defaults): every `Fn::If` replaced by the branch its condition picks, and list items and
/// object fields that come out as `AWS::NoValue` left out. `None` when `value` itself does.
///
/// # Panics
/// As [`condition_holds`], or on an `Fn::If` that is not a list of three.
pub fn resolve_conditions(
    t: &Value,
    value: &Value,
    parameters: &BTreeMap<&str, &str>,
) -> Option<Value> {
    match value {
        Value::Object(o) if o.len() == 1 && o.get("Ref") == Some(&json!("AWS::NoValue")) => None,
        Value::Object(o) if o.len() == 1 && o.contains_key("Fn::If") => {
            let args = o["Fn::If"].as_array().expect("Fn::If takes a list");
            assert_eq!(args.len(), 3, "Fn::If takes a condition and two values");
            let condition = args[0].as_str().expect("Fn::If names a condition");
            let branch = if condition_holds(t, condition, parameters) {
                &args[1]
            } else {
                &args[2]
            };
            resolve_conditions(t, branch, parameters)
        }
        Value::Object(o) => Some(Value::Object(
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), resolve_conditions(t, v, parameters)?)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .filter_map(|v| resolve_conditions(t, v, parameters))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

/// The policy statements of resource `logical_id` (a managed policy's document, or the inline
/// policies of a role, in order) for the given parameter values.
///
/// # Panics
/// When the resource has no policy document, or as [`resolve_conditions`].
pub fn policy_statements(
    t: &Value,
    logical_id: &str,
    parameters: &BTreeMap<&str, &str>,
) -> Vec<Value> {
    let p = &t["Resources"][logical_id]["Properties"];
    let documents: Vec<&Value> = if p["PolicyDocument"].is_object() {
        vec![&p["PolicyDocument"]]
    } else {
        p["Policies"]
            .as_array()
            .unwrap_or_else(|| panic!("{logical_id} has no policy"))
            .iter()
            .map(|policy| &policy["PolicyDocument"])
            .collect()
    };
    documents
        .into_iter()
        .flat_map(|d| {
            let statements = resolve_conditions(t, &d["Statement"], parameters);
            match statements {
                Some(Value::Array(s)) => s,
                other => panic!("{logical_id}: statements {other:?}"),
            }
        })
        .collect()
}

/// The logical ids of the resources the template creates for the given parameter values.
pub fn created_resources(t: &Value, parameters: &BTreeMap<&str, &str>) -> Vec<String> {
    t["Resources"]
        .as_object()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| {
            r["Condition"]
                .as_str()
                .is_none_or(|c| condition_holds(t, c, parameters))
        })
        .map(|(id, _)| id.clone())
        .collect()
}
