//! The CloudFormation template of `infra/template.yaml` as JSON, for tests that check another
//! part of the product against it (the aggregator's environment, the IAM policies, the schema).

use dynalimit_repository::stack::TEMPLATE;
use serde_json::{Value, json};

/// The template as JSON, short-form tags (`!Ref`, `!If`, …) turned into their long form
/// (`{"Ref": …}`, `{"Fn::If": …}`).
///
/// # Panics
/// When the template is not valid YAML.
pub fn template() -> Value {
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(TEMPLATE).expect("template parses");
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
