//! A small evaluator of a template's DynamoDB policy statements (dynalimit's, or zae-limiter
//! 0.17's): `Allow` statements, action and resource wildcards, and the conditions on
//! `dynamodb:LeadingKeys`, `ForAllValues:StringLike` (with the principal tag
//! `zael_namespace_id` substituted) and `Null`. Anything else in a statement fails the test,
//! so the evaluator never grants by ignoring.
//!
//! A recorded request becomes one or more [`Access`]es the way DynamoDB authorises it: an item
//! operation on the table ARN with its partition key; a `Query` on the table or on
//! `…/index/NAME` with the partition key value of that index; a batch with every partition key
//! it touches; a transaction as one access per item, with that item's own action.

use serde_json::Value;

use crate::fault::Recorded;

/// The account and region of the ARNs the evaluator builds.
const ARN_PREFIX: &str = "arn:aws:dynamodb:eu-west-1:123456789012:table/";
/// The policy variable of the namespace policies.
const NAMESPACE_TAG: &str = "${aws:PrincipalTag/zael_namespace_id}";

/// One authorisation DynamoDB makes for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// `dynamodb:GetItem`, …
    pub action: String,
    /// The table or index ARN.
    pub resource: String,
    /// The partition key values (`dynamodb:LeadingKeys`).
    pub leading_keys: Vec<String>,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resource = self.resource.trim_start_matches(ARN_PREFIX);
        write!(f, "{} on {resource} {:?}", self.action, self.leading_keys)
    }
}

/// The partition key attribute of the table (`None`) or of index `index`, from the template.
fn partition_attribute(template: &Value, index: Option<&str>) -> String {
    let table = &template["Resources"]["RateLimitsTable"]["Properties"];
    let hash = |schema: &Value| {
        schema
            .as_array()
            .expect("KeySchema")
            .iter()
            .find(|k| k["KeyType"] == "HASH")
            .and_then(|k| k["AttributeName"].as_str())
            .expect("a HASH key")
            .to_string()
    };
    let Some(index) = index else {
        return hash(&table["KeySchema"]);
    };
    for kind in ["GlobalSecondaryIndexes", "LocalSecondaryIndexes"] {
        if let Some(found) = table[kind]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["IndexName"] == index)
        {
            return hash(&found["KeySchema"]);
        }
    }
    panic!("index {index} is not in the template");
}

fn s_of(value: &Value) -> String {
    value["S"]
        .as_str()
        .unwrap_or_else(|| panic!("a string key, not {value}"))
        .to_string()
}

fn pk_of(key: &Value, attribute: &str) -> String {
    s_of(&key[attribute])
}

/// The value a `KeyConditionExpression` binds to `attribute` with `=`.
fn key_condition_value(body: &Value, attribute: &str) -> String {
    let expression = body["KeyConditionExpression"]
        .as_str()
        .expect("KeyConditionExpression");
    for clause in expression.split(" AND ") {
        let Some((left, right)) = clause.split_once('=') else {
            continue;
        };
        let left = left.trim().trim_start_matches('(');
        let name = if left.starts_with('#') {
            body["ExpressionAttributeNames"][left]
                .as_str()
                .expect("attribute name")
        } else {
            left
        };
        if name == attribute {
            let placeholder = right.trim().trim_end_matches(')');
            return s_of(&body["ExpressionAttributeValues"][placeholder]);
        }
    }
    panic!("no `{attribute} = :v` in {expression:?}");
}

/// The authorisations DynamoDB makes for `request`.
pub fn accesses(template: &Value, request: &Recorded) -> Vec<Access> {
    let body = &request.body;
    let pk = partition_attribute(template, None);
    let table_arn = |name: &Value| format!("{ARN_PREFIX}{}", name.as_str().expect("TableName"));
    let access = |action: &str, resource: String, leading_keys: Vec<String>| Access {
        action: format!("dynamodb:{action}"),
        resource,
        leading_keys,
    };
    match request.operation.as_str() {
        op @ ("GetItem" | "UpdateItem" | "DeleteItem") => vec![access(
            op,
            table_arn(&body["TableName"]),
            vec![pk_of(&body["Key"], &pk)],
        )],
        "PutItem" => vec![access(
            "PutItem",
            table_arn(&body["TableName"]),
            vec![pk_of(&body["Item"], &pk)],
        )],
        "Query" => {
            let index = body["IndexName"].as_str();
            let attribute = partition_attribute(template, index);
            let mut resource = table_arn(&body["TableName"]);
            if let Some(index) = index {
                resource = format!("{resource}/index/{index}");
            }
            vec![access(
                "Query",
                resource,
                vec![key_condition_value(body, &attribute)],
            )]
        }
        "BatchGetItem" => body["RequestItems"]
            .as_object()
            .expect("RequestItems")
            .iter()
            .map(|(table, read)| {
                let keys = read["Keys"].as_array().expect("Keys");
                let leading = keys.iter().map(|k| pk_of(k, &pk)).collect();
                access("BatchGetItem", format!("{ARN_PREFIX}{table}"), leading)
            })
            .collect(),
        "BatchWriteItem" => body["RequestItems"]
            .as_object()
            .expect("RequestItems")
            .iter()
            .map(|(table, writes)| {
                let leading = writes
                    .as_array()
                    .expect("write requests")
                    .iter()
                    .map(|w| match (&w["DeleteRequest"], &w["PutRequest"]) {
                        (Value::Object(d), _) => s_of(&d["Key"][&pk]),
                        (_, Value::Object(p)) => s_of(&p["Item"][&pk]),
                        _ => panic!("unknown write request {w}"),
                    })
                    .collect();
                access("BatchWriteItem", format!("{ARN_PREFIX}{table}"), leading)
            })
            .collect(),
        "TransactWriteItems" | "TransactGetItems" => body["TransactItems"]
            .as_array()
            .expect("TransactItems")
            .iter()
            .map(|item| {
                let (kind, part) = item
                    .as_object()
                    .and_then(|o| o.iter().next())
                    .expect("one action per item");
                let (action, key) = match kind.as_str() {
                    "Put" => ("PutItem", &part["Item"]),
                    "Update" => ("UpdateItem", &part["Key"]),
                    "Delete" => ("DeleteItem", &part["Key"]),
                    "ConditionCheck" => ("ConditionCheckItem", &part["Key"]),
                    "Get" => ("GetItem", &part["Key"]),
                    other => panic!("unknown transaction item {other}"),
                };
                access(action, table_arn(&part["TableName"]), vec![pk_of(key, &pk)])
            })
            .collect(),
        op @ ("DescribeTable" | "Scan") => {
            vec![access(op, table_arn(&body["TableName"]), Vec::new())]
        }
        other => panic!("the evaluator does not know {other}"),
    }
}

/// IAM's `StringLike`: `*` matches any run of characters, `?` exactly one; case-sensitive.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // matches[j]: pattern[..i] matches text[..j].
    let mut matches = vec![false; t.len() + 1];
    matches[0] = true;
    for &c in &p {
        let mut next = vec![false; t.len() + 1];
        if c == '*' {
            let mut any = false;
            for j in 0..=t.len() {
                any |= matches[j];
                next[j] = any;
            }
        } else {
            for j in 1..=t.len() {
                next[j] = matches[j - 1] && (c == '?' || c == t[j - 1]);
            }
        }
        matches = next;
    }
    matches[t.len()]
}

fn strings(value: &Value) -> Vec<&Value> {
    match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// A resource of a statement, with the table's ARN for `RateLimitsTable.Arn`.
fn resource_pattern(value: &Value, table: &str) -> String {
    let arn = format!("{ARN_PREFIX}{table}");
    if value["Fn::GetAtt"] == serde_json::json!(["RateLimitsTable", "Arn"]) {
        return arn;
    }
    if let Some(sub) = value["Fn::Sub"].as_str() {
        return sub.replace("${RateLimitsTable.Arn}", &arn);
    }
    panic!("unknown resource {value}");
}

/// The `Allow` statements of one managed policy of the template.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The policy's logical id (with zae-limiter's prefix for its template's).
    pub name: String,
    /// Its statements.
    pub statements: Vec<Value>,
}

impl Policy {
    /// Policy `name` (a logical id of `template`).
    pub fn of(template: &Value, name: &str) -> Policy {
        let statements = template["Resources"][name]["Properties"]["PolicyDocument"]["Statement"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} has statements"))
            .clone();
        Policy {
            name: name.to_string(),
            statements,
        }
    }

    /// The same policy, named as coming from zae-limiter's template in messages.
    pub fn named_as_zae(mut self) -> Policy {
        self.name = format!("zae-limiter's {}", self.name);
        self
    }

    /// The statement `sid` of the inline policy of role `role` (a logical id).
    pub fn inline(template: &Value, role: &str, sid: &str) -> Policy {
        let statements = template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]
            ["Statement"]
            .as_array()
            .unwrap_or_else(|| panic!("{role} has an inline policy"))
            .iter()
            .filter(|s| s["Sid"] == sid)
            .cloned()
            .collect::<Vec<_>>();
        assert_eq!(statements.len(), 1, "{role} has one statement {sid}");
        Policy {
            name: format!("{role}.{sid}"),
            statements,
        }
    }

    /// Every action the policy names.
    pub fn actions(&self) -> std::collections::BTreeSet<String> {
        self.statements
            .iter()
            .flat_map(|s| strings(&s["Action"]))
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect()
    }

    /// The same policy without `action` in any statement.
    pub fn without_action(&self, action: &str) -> Policy {
        let mut less = self.clone();
        for statement in &mut less.statements {
            let kept: Vec<Value> = strings(&statement["Action"])
                .into_iter()
                .filter(|a| a.as_str() != Some(action))
                .cloned()
                .collect();
            statement["Action"] = Value::Array(kept);
        }
        less
    }

    /// The same policy without LeadingKeys pattern `pattern` in any statement.
    pub fn without_leading_key(&self, pattern: &str) -> Policy {
        let mut less = self.clone();
        for statement in &mut less.statements {
            let keys =
                &mut statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"];
            if let Value::Array(patterns) = keys {
                patterns.retain(|p| p.as_str() != Some(pattern));
            }
        }
        less
    }

    /// Whether the policy allows `access` on table `table` for a principal tagged with
    /// namespace id `namespace_id`.
    pub fn allows(&self, access: &Access, table: &str, namespace_id: &str) -> bool {
        self.statements
            .iter()
            .any(|s| statement_allows(s, access, table, namespace_id))
    }
}

fn statement_allows(statement: &Value, access: &Access, table: &str, namespace_id: &str) -> bool {
    assert_eq!(
        statement["Effect"], "Allow",
        "only Allow statements: {statement}"
    );
    for key in statement.as_object().expect("statement").keys() {
        assert!(
            matches!(
                key.as_str(),
                "Sid" | "Effect" | "Action" | "Resource" | "Condition"
            ),
            "the evaluator does not know {key}"
        );
    }
    let action = strings(&statement["Action"])
        .iter()
        .any(|a| glob(a.as_str().expect("action"), &access.action));
    let resource = strings(&statement["Resource"])
        .iter()
        .any(|r| glob(&resource_pattern(r, table), &access.resource));
    if !(action && resource) {
        return false;
    }
    let Some(condition) = statement.get("Condition") else {
        return true;
    };
    let condition = condition.as_object().expect("Condition");
    condition.iter().all(|(operator, tests)| {
        tests
            .as_object()
            .expect("condition keys")
            .iter()
            .all(|(key, patterns)| {
                assert_eq!(key, "dynamodb:LeadingKeys", "unknown condition key");
                if operator == "Null" {
                    // "false": the key must be present; "true": it must be absent.
                    let absent = match patterns.as_str() {
                        Some("true") => true,
                        Some("false") => false,
                        _ => panic!("Null takes \"true\" or \"false\", not {patterns}"),
                    };
                    return access.leading_keys.is_empty() == absent;
                }
                assert_eq!(operator, "ForAllValues:StringLike", "unknown operator");
                let patterns: Vec<String> = strings(patterns)
                    .iter()
                    .map(|p| {
                        p.as_str()
                            .expect("pattern")
                            .replace(NAMESPACE_TAG, namespace_id)
                    })
                    .collect();
                access
                    .leading_keys
                    .iter()
                    .all(|k| patterns.iter().any(|p| glob(p, k)))
            })
    })
}

#[test]
fn null_false_requires_leading_keys() {
    let statement = serde_json::json!({
        "Effect": "Allow",
        "Action": ["dynamodb:PutItem", "dynamodb:DescribeTable"],
        "Resource": {"Fn::GetAtt": ["RateLimitsTable", "Arn"]},
        "Condition": {
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["*/BUCKET#*"]},
            "Null": {"dynamodb:LeadingKeys": "false"},
        },
    });
    let access = |action: &str, keys: &[&str]| Access {
        action: format!("dynamodb:{action}"),
        resource: format!("{ARN_PREFIX}t"),
        leading_keys: keys.iter().map(|k| k.to_string()).collect(),
    };
    assert!(statement_allows(
        &statement,
        &access("PutItem", &["n/BUCKET#e"]),
        "t",
        "n"
    ));
    assert!(!statement_allows(
        &statement,
        &access("PutItem", &["n/ENTITY#e"]),
        "t",
        "n"
    ));
    // ForAllValues alone holds for no keys at all; Null "false" refuses that.
    assert!(!statement_allows(
        &statement,
        &access("DescribeTable", &[]),
        "t",
        "n"
    ));
}

#[test]
fn the_glob_matches_like_string_like() {
    assert!(glob("*/BUCKET#*", "abc/BUCKET#e#r#0"));
    assert!(!glob("*/BUCKET#*", "abc/ENTITY#e"));
    assert!(glob("ns1/*", "ns1/SYSTEM#"));
    assert!(!glob("ns1/*", "ns1"));
    assert!(!glob("ns1/*", "ns12/SYSTEM#"));
    assert!(glob("ns1", "ns1"));
    assert!(glob("a?c", "abc"));
    assert!(!glob("a?c", "ac"));
    assert!(glob("*", ""));
    assert!(!glob("", "x"));
    assert!(glob("arn:*:table/t/index/*", "arn:x:table/t/index/GSI2"));
    assert!(!glob("arn:*:table/t", "arn:x:table/t/index/GSI2"));
}
