//! The operations of the DynamoDB API the store answers, each one request body in and one
//! response body (or a [`Fault`]) out, applied to the store's state under its lock.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Map, Value, json};

use super::eval;
use super::expr::{self, Cmp, Cond, Operand, Path, Placeholders, Step, Update};
use super::fault::{Fault, Item, Reason};
use super::json as codec;
use super::table::{Index, KeyPart, Keys, PrimaryKey, Projection, Table};

/// Everything the store holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Tables by name.
    pub(crate) tables: BTreeMap<String, Table>,
    /// `ClientRequestToken` → the transaction it committed.
    tokens: HashMap<String, String>,
    /// Seconds since the epoch, as the store's clock reads them, for creation times.
    pub(crate) now_seconds: f64,
}

/// Answers one request of `operation`.
pub(crate) fn handle(state: &mut State, operation: &str, body: &Value) -> Result<Value, Fault> {
    let request = Request::new(operation, body)?;
    match operation {
        "CreateTable" => create_table(state, &request),
        "DescribeTable" => {
            request.allow(&["TableName"])?;
            Ok(json!({"Table": table(state, &request)?.describe("ACTIVE")}))
        }
        "DeleteTable" => {
            request.allow(&["TableName"])?;
            let name = request.string("TableName")?;
            let removed = state
                .tables
                .remove(name)
                .ok_or_else(|| Fault::no_table(name))?;
            Ok(json!({"TableDescription": removed.describe("DELETING")}))
        }
        "ListTables" => list_tables(state, &request),
        "UpdateTimeToLive" => update_ttl(state, &request),
        "DescribeTimeToLive" => {
            request.allow(&["TableName"])?;
            let description = match &table(state, &request)?.ttl {
                Some(a) => json!({"TimeToLiveStatus": "ENABLED", "AttributeName": a}),
                None => json!({"TimeToLiveStatus": "DISABLED"}),
            };
            Ok(json!({"TimeToLiveDescription": description}))
        }
        "GetItem" => get_item(state, &request),
        "PutItem" => put_or_delete(state, &request, true),
        "UpdateItem" => update_item(state, &request),
        "DeleteItem" => put_or_delete(state, &request, false),
        "Query" => read_many(state, &request, true),
        "Scan" => read_many(state, &request, false),
        "BatchGetItem" => batch_get(state, &request),
        "BatchWriteItem" => batch_write(state, &request),
        "TransactWriteItems" => transact_write(state, &request),
        "TransactGetItems" => transact_get(state, &request),
        other => Err(Fault::unsupported(format!("the operation {other}"))),
    }
}

/// A request's JSON object with the operation it belongs to, for messages.
struct Request<'a> {
    operation: &'a str,
    body: &'a Map<String, Value>,
}

impl<'a> Request<'a> {
    fn new(operation: &'a str, body: &'a Value) -> Result<Request<'a>, Fault> {
        let body = body.as_object().ok_or_else(|| {
            Fault::new(
                "SerializationException",
                "The request body is not a JSON object",
            )
        })?;
        Ok(Request { operation, body })
    }

    /// Refuses every parameter not in `allowed` (the store implements those only).
    fn allow(&self, allowed: &[&str]) -> Result<(), Fault> {
        for key in self.body.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(Fault::unsupported(format!(
                    "the parameter {key} of {}",
                    self.operation
                )));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.body.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<&'a str, Fault> {
        self.optional_string(key)?.ok_or_else(|| {
            Fault::validation(format!(
                "1 validation error detected: Value null at '{}' failed to satisfy constraint: Member must not be null",
                lower_first(key)
            ))
        })
    }

    fn optional_string(&self, key: &str) -> Result<Option<&'a str>, Fault> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Fault::new(
                "SerializationException",
                format!("{key} must be a string"),
            )),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, Fault> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(Fault::new(
                "SerializationException",
                format!("{key} must be a boolean"),
            )),
        }
    }

    fn item(&self, key: &str) -> Result<Item, Fault> {
        let value = self.get(key).ok_or_else(|| {
            Fault::validation(format!(
                "1 validation error detected: Value null at '{}' failed to satisfy constraint: Member must not be null",
                lower_first(key)
            ))
        })?;
        codec::item(value)
    }

    /// `ExpressionAttributeNames` and `ExpressionAttributeValues`.
    fn placeholders(&self) -> Result<Placeholders, Fault> {
        let names = match self.get("ExpressionAttributeNames") {
            None => HashMap::new(),
            Some(v) => v
                .as_object()
                .ok_or_else(|| Fault::new("SerializationException", "ExpressionAttributeNames"))?
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.clone(), s.to_owned()))
                        .ok_or_else(|| {
                            Fault::new("SerializationException", "ExpressionAttributeNames")
                        })
                })
                .collect::<Result<_, _>>()?,
        };
        let values = match self.get("ExpressionAttributeValues") {
            None => HashMap::new(),
            Some(v) => codec::item(v)?,
        };
        if self.body.contains_key("ExpressionAttributeNames") && names.is_empty() {
            return Err(Fault::validation(
                "ExpressionAttributeNames must not be empty",
            ));
        }
        if self.body.contains_key("ExpressionAttributeValues") && values.is_empty() {
            return Err(Fault::validation(
                "ExpressionAttributeValues must not be empty",
            ));
        }
        Ok(Placeholders::new(names, values))
    }

    /// `ConditionExpression`, parsed.
    fn condition(&self, placeholders: &mut Placeholders) -> Result<Option<Cond>, Fault> {
        self.optional_string("ConditionExpression")?
            .map(|text| expr::bounded_condition("ConditionExpression", text, placeholders))
            .transpose()
    }

    /// `ProjectionExpression`, parsed.
    fn projection(&self, placeholders: &mut Placeholders) -> Result<Option<Vec<Path>>, Fault> {
        self.optional_string("ProjectionExpression")?
            .map(|text| expr::projection(text, placeholders))
            .transpose()
    }

    /// `ReturnValues`, one of `allowed` (`NONE` by default).
    fn return_values(&self, allowed: &[&str]) -> Result<&'a str, Fault> {
        let given = self.optional_string("ReturnValues")?.unwrap_or("NONE");
        if allowed.contains(&given) {
            Ok(given)
        } else {
            Err(Fault::validation(format!(
                "Return values set to invalid value: {given}"
            )))
        }
    }

    /// Whether the old item is returned when the condition fails.
    fn old_on_failure(&self) -> Result<bool, Fault> {
        match self.optional_string("ReturnValuesOnConditionCheckFailure")? {
            None | Some("NONE") => Ok(false),
            Some("ALL_OLD") => Ok(true),
            Some(other) => Err(Fault::validation(format!(
                "ReturnValuesOnConditionCheckFailure set to invalid value: {other}"
            ))),
        }
    }

    /// Accepts `ReturnConsumedCapacity` and `ReturnItemCollectionMetrics` only as `NONE`:
    /// the store measures neither.
    fn no_metrics(&self) -> Result<(), Fault> {
        for key in ["ReturnConsumedCapacity", "ReturnItemCollectionMetrics"] {
            if let Some(v) = self.optional_string(key)?
                && v != "NONE"
            {
                return Err(Fault::unsupported(format!("{key} = {v}")));
            }
        }
        Ok(())
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_lowercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn table<'s>(state: &'s State, request: &Request<'_>) -> Result<&'s Table, Fault> {
    let name = request.string("TableName")?;
    state.tables.get(name).ok_or_else(|| Fault::no_table(name))
}

fn table_mut<'s>(state: &'s mut State, name: &str) -> Result<&'s mut Table, Fault> {
    state
        .tables
        .get_mut(name)
        .ok_or_else(|| Fault::no_table(name))
}

fn keys_of(value: Option<&Value>, what: &str) -> Result<Keys, Fault> {
    let list = value
        .and_then(Value::as_array)
        .ok_or_else(|| Fault::validation(format!("{what}: KeySchema is missing")))?;
    let mut hash = None;
    let mut range = None;
    for element in list {
        let name = element["AttributeName"].as_str().map(str::to_owned);
        match element["KeyType"].as_str() {
            Some("HASH") if hash.is_none() => hash = name,
            Some("RANGE") if range.is_none() => range = name,
            _ => {
                return Err(Fault::validation(format!(
                    "{what}: Invalid KeySchema: {element}"
                )));
            }
        }
    }
    let hash = hash.ok_or_else(|| {
        Fault::validation(format!("{what}: Invalid KeySchema: No Hash Key specified"))
    })?;
    Ok(Keys { hash, range })
}

fn create_table(state: &mut State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&[
        "TableName",
        "KeySchema",
        "AttributeDefinitions",
        "BillingMode",
        "ProvisionedThroughput",
        "GlobalSecondaryIndexes",
        "LocalSecondaryIndexes",
        "StreamSpecification",
    ])?;
    let name = request.string("TableName")?;
    let valid_name = (3..=255).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid_name {
        return Err(Fault::validation(format!(
            "TableName must be 3 to 255 characters of [a-zA-Z0-9_.-]: {name}"
        )));
    }
    if state.tables.contains_key(name) {
        return Err(Fault::new(
            "ResourceInUseException",
            format!("Table already exists: {name}"),
        ));
    }
    let keys = keys_of(request.get("KeySchema"), "Table")?;
    let mut types = BTreeMap::new();
    for definition in request
        .get("AttributeDefinitions")
        .and_then(Value::as_array)
        .ok_or_else(|| Fault::validation("AttributeDefinitions are missing"))?
    {
        let (Some(n), Some(t @ ("S" | "N" | "B"))) = (
            definition["AttributeName"].as_str(),
            definition["AttributeType"].as_str(),
        ) else {
            return Err(Fault::validation(format!(
                "Invalid AttributeDefinition: {definition}"
            )));
        };
        types.insert(n.to_owned(), t.to_owned());
    }
    let mut indexes = Vec::new();
    for (key, global) in [
        ("GlobalSecondaryIndexes", true),
        ("LocalSecondaryIndexes", false),
    ] {
        for definition in request
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index_name = definition["IndexName"]
                .as_str()
                .ok_or_else(|| Fault::validation("An index has no IndexName"))?;
            let index_keys = keys_of(definition.get("KeySchema"), index_name)?;
            if !global && index_keys.hash != keys.hash {
                return Err(Fault::validation(format!(
                    "Local secondary index {index_name} must have the table's hash key"
                )));
            }
            let projection = match definition["Projection"]["ProjectionType"].as_str() {
                Some("ALL") => Projection::All,
                Some("KEYS_ONLY") => Projection::KeysOnly,
                Some("INCLUDE") => Projection::Include(
                    definition["Projection"]["NonKeyAttributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                ),
                _ => {
                    return Err(Fault::validation(format!(
                        "Index {index_name} has no valid Projection"
                    )));
                }
            };
            if indexes.iter().any(|i: &Index| i.name == index_name) {
                return Err(Fault::validation(format!(
                    "Duplicate index name: {index_name}"
                )));
            }
            indexes.push(Index {
                name: index_name.to_owned(),
                keys: index_keys,
                projection,
                global,
            });
        }
    }
    let used: Vec<&String> = keys
        .names()
        .chain(indexes.iter().flat_map(|i| i.keys.names()))
        .collect();
    if let Some(missing) = used.iter().find(|n| !types.contains_key(**n)) {
        return Err(Fault::validation(format!(
            "One or more parameter values were invalid: Some index key attributes are not defined in AttributeDefinitions. Keys: [{missing}]"
        )));
    }
    if let Some(extra) = types.keys().find(|n| !used.contains(n)) {
        return Err(Fault::validation(format!(
            "One or more parameter values were invalid: Number of attributes in KeySchema does not exactly match number of attributes defined in AttributeDefinitions ({extra} is not a key)"
        )));
    }
    let billing = request
        .optional_string("BillingMode")?
        .unwrap_or("PROVISIONED")
        .to_owned();
    let table = Table {
        name: name.to_owned(),
        keys,
        types,
        indexes,
        stream: request.get("StreamSpecification").cloned(),
        billing,
        ttl: None,
        created: state.now_seconds,
        items: BTreeMap::new(),
    };
    let description = table.describe("ACTIVE");
    state.tables.insert(name.to_owned(), table);
    Ok(json!({"TableDescription": description}))
}

fn list_tables(state: &State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&["ExclusiveStartTableName", "Limit"])?;
    let start = request.optional_string("ExclusiveStartTableName")?;
    let limit = limit(request)?.unwrap_or(100).min(100);
    let names: Vec<&String> = state
        .tables
        .keys()
        .filter(|n| start.is_none_or(|s| n.as_str() > s))
        .collect();
    let page: Vec<&String> = names.iter().take(limit).copied().collect();
    let mut out = json!({"TableNames": page});
    if names.len() > limit
        && let Some(last) = page.last()
    {
        out["LastEvaluatedTableName"] = json!(last);
    }
    Ok(out)
}

fn limit(request: &Request<'_>) -> Result<Option<usize>, Fault> {
    match request.get("Limit") {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(Fault::validation(
                "1 validation error detected: Value at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1",
            )),
        },
    }
}

fn update_ttl(state: &mut State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&["TableName", "TimeToLiveSpecification"])?;
    let spec = request
        .get("TimeToLiveSpecification")
        .cloned()
        .ok_or_else(|| Fault::validation("TimeToLiveSpecification is missing"))?;
    let (Some(attribute), Some(enabled)) =
        (spec["AttributeName"].as_str(), spec["Enabled"].as_bool())
    else {
        return Err(Fault::validation("Invalid TimeToLiveSpecification"));
    };
    let table = table_mut(state, request.string("TableName")?)?;
    match (&table.ttl, enabled) {
        (Some(_), true) => return Err(Fault::validation("TimeToLive is already enabled")),
        (None, false) => return Err(Fault::validation("TimeToLive is already disabled")),
        (Some(current), false) if current != attribute => {
            return Err(Fault::validation(format!(
                "TimeToLive is active on a different AttributeName: current AttributeName is {current}"
            )));
        }
        _ => {}
    }
    table.ttl = enabled.then(|| attribute.to_owned());
    Ok(json!({"TimeToLiveSpecification": spec}))
}

fn get_item(state: &State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&[
        "TableName",
        "Key",
        "ConsistentRead",
        "ProjectionExpression",
        "ExpressionAttributeNames",
        "ReturnConsumedCapacity",
    ])?;
    request.no_metrics()?;
    request.bool("ConsistentRead")?;
    let table = table(state, request)?;
    let key = table.key_of(&request.item("Key")?)?;
    let mut placeholders = request.placeholders()?;
    let projection = request.projection(&mut placeholders)?;
    placeholders.check_all_used()?;
    Ok(match table.items.get(&key) {
        Some(item) => json!({"Item": codec::write_item(&projected(item, projection.as_deref()))}),
        None => json!({}),
    })
}

fn projected(item: &Item, projection: Option<&[Path]>) -> Item {
    match projection {
        Some(paths) => eval::project(item, paths),
        None => item.clone(),
    }
}

/// Refuses a condition that fails on `current`.
fn check_condition(
    current: Option<&Item>,
    condition: Option<&Cond>,
    old_on_failure: bool,
) -> Result<(), Fault> {
    let Some(condition) = condition else {
        return Ok(());
    };
    let empty = Item::new();
    if eval::holds(current.unwrap_or(&empty), condition)? {
        Ok(())
    } else {
        Err(Fault::condition_failed(
            current.filter(|_| old_on_failure).cloned(),
        ))
    }
}

fn attributes(item: Option<Item>) -> Value {
    match item {
        Some(item) if !item.is_empty() => json!({"Attributes": codec::write_item(&item)}),
        _ => json!({}),
    }
}

const WRITE_PARAMETERS: &[&str] = &[
    "TableName",
    "ConditionExpression",
    "ExpressionAttributeNames",
    "ExpressionAttributeValues",
    "ReturnValues",
    "ReturnValuesOnConditionCheckFailure",
    "ReturnConsumedCapacity",
    "ReturnItemCollectionMetrics",
];

/// `PutItem` (`put`) and `DeleteItem`: one item written whole or removed, under a condition.
fn put_or_delete(state: &mut State, request: &Request<'_>, put: bool) -> Result<Value, Fault> {
    let subject = if put { "Item" } else { "Key" };
    request.allow(&[WRITE_PARAMETERS, &[subject]].concat())?;
    request.no_metrics()?;
    let returns = request.return_values(&["NONE", "ALL_OLD"])?;
    let old_on_failure = request.old_on_failure()?;
    let table = table_mut(state, request.string("TableName")?)?;
    let given = request.item(subject)?;
    let key = if put {
        table.check_item(&given)?
    } else {
        table.key_of(&given)?
    };
    let mut placeholders = request.placeholders()?;
    let condition = request.condition(&mut placeholders)?;
    placeholders.check_all_used()?;
    check_condition(table.items.get(&key), condition.as_ref(), old_on_failure)?;
    let old = if put {
        table.items.insert(key, given)
    } else {
        table.items.remove(&key)
    };
    Ok(attributes(old.filter(|_| returns == "ALL_OLD")))
}

/// Parses an `UpdateExpression` and refuses one that writes a key attribute.
fn parse_update(
    table: &Table,
    text: Option<&str>,
    placeholders: &mut Placeholders,
) -> Result<Update, Fault> {
    let Some(text) = text else {
        return Ok(Update::default());
    };
    let update = expr::update(text, placeholders)?;
    for path in update.paths() {
        if let Some(Step::Key(name)) = path.first()
            && table.keys.names().any(|k| k == name)
        {
            return Err(Fault::validation(format!(
                "One or more parameter values were invalid: Cannot update attribute {name}. This attribute is part of the key"
            )));
        }
    }
    Ok(update)
}

/// The item `update` makes of the item at `key` (absent: the key alone).
fn updated(
    table: &Table,
    key: &Item,
    update: &Update,
    current: Option<&Item>,
) -> Result<(Item, PrimaryKey), Fault> {
    let base = current.cloned().unwrap_or_else(|| key.clone());
    let new = eval::apply(&base, update)?;
    let primary = table.check_item(&new)?;
    Ok((new, primary))
}

fn update_item(state: &mut State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&[WRITE_PARAMETERS, &["Key", "UpdateExpression"]].concat())?;
    request.no_metrics()?;
    let returns =
        request.return_values(&["NONE", "ALL_OLD", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"])?;
    let old_on_failure = request.old_on_failure()?;
    let table = table_mut(state, request.string("TableName")?)?;
    let key_item = request.item("Key")?;
    let key = table.key_of(&key_item)?;
    let mut placeholders = request.placeholders()?;
    let update = parse_update(
        table,
        request.optional_string("UpdateExpression")?,
        &mut placeholders,
    )?;
    let condition = request.condition(&mut placeholders)?;
    placeholders.check_all_used()?;
    let current = table.items.get(&key);
    check_condition(current, condition.as_ref(), old_on_failure)?;
    let (new, _) = updated(table, &key_item, &update, current)?;
    let touched: Vec<Path> = update.paths().cloned().collect();
    let answer = match returns {
        "ALL_OLD" => current.cloned(),
        "ALL_NEW" => Some(new.clone()),
        "UPDATED_OLD" => current.map(|c| eval::project(c, &touched)),
        "UPDATED_NEW" => Some(eval::project(&new, &touched)),
        _ => None,
    };
    table.items.insert(key, new);
    Ok(attributes(answer))
}

/// The parts of a key condition: the partition key's value and the sort key's condition.
struct KeyCondition {
    hash: AttributeValue,
    range: Option<Cond>,
}

fn key_condition(cond: Cond, keys: &Keys) -> Result<KeyCondition, Fault> {
    let unsupported = || Fault::validation("Query key condition not supported");
    let mut parts = Vec::new();
    let mut stack = vec![cond];
    while let Some(c) = stack.pop() {
        match c {
            Cond::And(a, b) => {
                stack.push(*b);
                stack.push(*a);
            }
            other => parts.push(other),
        }
    }
    let attribute_of = |c: &Cond| -> Option<String> {
        let path = match c {
            Cond::Compare(Operand::Path(p), _, Operand::Value(_))
            | Cond::Between(Operand::Path(p), Operand::Value(_), Operand::Value(_))
            | Cond::BeginsWith(Operand::Path(p), Operand::Value(_)) => p,
            _ => return None,
        };
        match path.as_slice() {
            [Step::Key(name)] => Some(name.clone()),
            _ => None,
        }
    };
    let mut hash = None;
    let mut range = None;
    for part in parts {
        let name = attribute_of(&part).ok_or_else(unsupported)?;
        if name == keys.hash && hash.is_none() {
            let Cond::Compare(_, Cmp::Eq, Operand::Value(v)) = part else {
                return Err(Fault::validation(
                    "Query key condition not supported: the partition key needs an equality condition",
                ));
            };
            hash = Some(v);
        } else if keys.range.as_deref() == Some(name.as_str()) && range.is_none() {
            if matches!(part, Cond::Compare(_, Cmp::Ne, _)) {
                return Err(Fault::validation(
                    "Unsupported operator on KeyConditionExpression: operator: <>",
                ));
            }
            range = Some(part);
        } else {
            return Err(Fault::validation(format!(
                "Query condition missed key schema element or names a non-key attribute: {name}"
            )));
        }
    }
    let hash = hash.ok_or_else(|| {
        Fault::validation(format!(
            "Query condition missed key schema element: {}",
            keys.hash
        ))
    })?;
    Ok(KeyCondition { hash, range })
}

/// `Query` (`keyed`) and `Scan`.
fn read_many(state: &State, request: &Request<'_>, keyed: bool) -> Result<Value, Fault> {
    let mut allowed = vec![
        "TableName",
        "IndexName",
        "FilterExpression",
        "ProjectionExpression",
        "ExpressionAttributeNames",
        "ExpressionAttributeValues",
        "Limit",
        "ExclusiveStartKey",
        "Select",
        "ConsistentRead",
        "ReturnConsumedCapacity",
    ];
    if keyed {
        allowed.extend(["KeyConditionExpression", "ScanIndexForward"]);
    }
    request.allow(&allowed)?;
    request.no_metrics()?;
    let table = table(state, request)?;
    let index = request
        .optional_string("IndexName")?
        .map(|n| table.index(n))
        .transpose()?;
    let consistent = request.bool("ConsistentRead")?;
    if consistent && index.is_some_and(|i| i.global) {
        return Err(Fault::validation(
            "Consistent reads are not supported on global secondary indexes",
        ));
    }
    let mut placeholders = request.placeholders()?;
    let keys = index.map_or(&table.keys, |i| &i.keys);
    let condition = if keyed {
        let text = request.string("KeyConditionExpression")?;
        Some(key_condition(
            expr::bounded_condition("KeyConditionExpression", text, &mut placeholders)?,
            keys,
        )?)
    } else {
        None
    };
    let filter = request
        .optional_string("FilterExpression")?
        .map(|text| expr::bounded_condition("FilterExpression", text, &mut placeholders))
        .transpose()?;
    let projection = request.projection(&mut placeholders)?;
    placeholders.check_all_used()?;
    let select = request.optional_string("Select")?;
    match (select, &projection) {
        (Some("SPECIFIC_ATTRIBUTES"), None)
        | (Some("ALL_ATTRIBUTES" | "COUNT" | "ALL_PROJECTED_ATTRIBUTES"), Some(_)) => {
            return Err(Fault::validation(
                "Select and ProjectionExpression do not agree",
            ));
        }
        (Some("ALL_ATTRIBUTES"), None)
            if index.is_some_and(|i| i.projection != Projection::All) =>
        {
            return Err(Fault::validation(
                "One or more parameter values were invalid: Select type ALL_ATTRIBUTES is not supported for global secondary index that does not project all attributes",
            ));
        }
        (Some("ALL_PROJECTED_ATTRIBUTES"), _) if index.is_none() => {
            return Err(Fault::validation(
                "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an IndexName",
            ));
        }
        (
            None
            | Some("ALL_ATTRIBUTES" | "ALL_PROJECTED_ATTRIBUTES" | "SPECIFIC_ATTRIBUTES" | "COUNT"),
            _,
        ) => {}
        (Some(other), _) => {
            return Err(Fault::validation(format!("Invalid Select: {other}")));
        }
    }
    // Every item the index (or table) holds that the key condition selects, in order.
    let mut rows: Vec<(Vec<Option<KeyPart>>, Item)> = Vec::new();
    for item in table.items.values() {
        let held = match index {
            Some(i) => match table.indexed(item, i) {
                Some(held) => held,
                None => continue,
            },
            None => item.clone(),
        };
        if let Some(c) = &condition {
            let hash_matches = held.get(&keys.hash).is_some_and(|v| {
                eval::equal(v, &c.hash) && eval::type_name(v) == eval::type_name(&c.hash)
            });
            if !hash_matches {
                continue;
            }
            if let Some(range) = &c.range
                && !eval::holds(&held, range)?
            {
                continue;
            }
        }
        rows.push((table.position(item, index), held));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let forward = !keyed || request.get("ScanIndexForward").and_then(Value::as_bool) != Some(false);
    if !forward {
        rows.reverse();
    }
    if let Some(start) = request.get("ExclusiveStartKey") {
        let start = codec::item(start)?;
        table.primary_key(&start)?;
        let from = table.position(&start, index);
        rows.retain(|(position, _)| {
            if forward {
                *position > from
            } else {
                *position < from
            }
        });
    }
    let limit = limit(request)?;
    let mut evaluated = 0;
    let mut items = Vec::new();
    let mut last = None;
    for (_, held) in rows {
        if limit.is_some_and(|l| evaluated >= l) {
            break;
        }
        evaluated += 1;
        if limit.is_some_and(|l| evaluated == l) {
            last = Some(table.key_attributes(&held, index));
        }
        if let Some(f) = &filter
            && !eval::holds(&held, f)?
        {
            continue;
        }
        items.push(projected(&held, projection.as_deref()));
    }
    let mut out = json!({"Count": items.len(), "ScannedCount": evaluated});
    if select != Some("COUNT") {
        out["Items"] = Value::Array(items.iter().map(codec::write_item).collect());
    }
    if let Some(last) = last {
        out["LastEvaluatedKey"] = codec::write_item(&last);
    }
    Ok(out)
}

fn request_items<'a>(request: &Request<'a>) -> Result<&'a Map<String, Value>, Fault> {
    request
        .get("RequestItems")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Fault::validation("RequestItems must not be empty"))
}

fn batch_get(state: &State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&["RequestItems", "ReturnConsumedCapacity"])?;
    request.no_metrics()?;
    let mut responses = Map::new();
    let mut total = 0;
    for (name, entry) in request_items(request)? {
        let wanted = Request::new("BatchGetItem", entry)?;
        wanted.allow(&[
            "Keys",
            "ConsistentRead",
            "ProjectionExpression",
            "ExpressionAttributeNames",
        ])?;
        wanted.bool("ConsistentRead")?;
        let table = state
            .tables
            .get(name)
            .ok_or_else(|| Fault::no_table(name))?;
        let mut placeholders = wanted.placeholders()?;
        let projection = wanted.projection(&mut placeholders)?;
        placeholders.check_all_used()?;
        let keys = wanted
            .get("Keys")
            .and_then(Value::as_array)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| Fault::validation("Keys must not be empty"))?;
        let mut seen = Vec::new();
        let mut found = Vec::new();
        for key in keys {
            let key = table.key_of(&codec::item(key)?)?;
            if seen.contains(&key) {
                return Err(Fault::validation(
                    "Provided list of item keys contains duplicates",
                ));
            }
            if let Some(item) = table.items.get(&key) {
                found.push(codec::write_item(&projected(item, projection.as_deref())));
            }
            seen.push(key);
        }
        total += seen.len();
        responses.insert(name.clone(), Value::Array(found));
    }
    if total > 100 {
        return Err(Fault::validation(
            "Too many items requested for the BatchGetItem call",
        ));
    }
    Ok(json!({"Responses": responses, "UnprocessedKeys": {}}))
}

fn batch_write(state: &mut State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&[
        "RequestItems",
        "ReturnConsumedCapacity",
        "ReturnItemCollectionMetrics",
    ])?;
    request.no_metrics()?;
    // Checked whole before anything is written.
    let mut writes: Vec<(String, PrimaryKey, Option<Item>)> = Vec::new();
    for (name, list) in request_items(request)? {
        let table = state
            .tables
            .get(name)
            .ok_or_else(|| Fault::no_table(name))?;
        for write in list
            .as_array()
            .ok_or_else(|| Fault::validation("A table's write requests must be a list"))?
        {
            let write = Request::new("BatchWriteItem", write)?;
            write.allow(&["PutRequest", "DeleteRequest"])?;
            let (key, item) = match (write.get("PutRequest"), write.get("DeleteRequest")) {
                (Some(put), None) => {
                    let item = codec::item(&put["Item"])?;
                    (table.check_item(&item)?, Some(item))
                }
                (None, Some(delete)) => (table.key_of(&codec::item(&delete["Key"])?)?, None),
                _ => {
                    return Err(Fault::validation(
                        "A write request needs exactly one of PutRequest and DeleteRequest",
                    ));
                }
            };
            if writes.iter().any(|(t, k, _)| t == name && *k == key) {
                return Err(Fault::validation(
                    "Provided list of item keys contains duplicates",
                ));
            }
            writes.push((name.clone(), key, item));
        }
    }
    if writes.len() > 25 {
        return Err(Fault::validation(
            "Too many items requested for the BatchWriteItem call",
        ));
    }
    for (name, key, item) in writes {
        let table = table_mut(state, &name)?;
        match item {
            Some(item) => {
                table.items.insert(key, item);
            }
            None => {
                table.items.remove(&key);
            }
        }
    }
    Ok(json!({"UnprocessedItems": {}}))
}

/// One checked item of a `TransactWriteItems`.
struct Write {
    table: String,
    key: PrimaryKey,
    key_item: Item,
    kind: WriteKind,
    condition: Option<Cond>,
    old_on_failure: bool,
}

enum WriteKind {
    Check,
    Put(Item),
    Update(Update),
    Delete,
}

fn transact_write(state: &mut State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&[
        "TransactItems",
        "ClientRequestToken",
        "ReturnConsumedCapacity",
        "ReturnItemCollectionMetrics",
    ])?;
    request.no_metrics()?;
    let items = request
        .get("TransactItems")
        .and_then(Value::as_array)
        .filter(|i| !i.is_empty())
        .ok_or_else(|| Fault::validation("TransactItems must not be empty"))?;
    if items.len() > 100 {
        return Err(Fault::validation(
            "Member must have length less than or equal to 100: TransactItems",
        ));
    }
    let token = request.optional_string("ClientRequestToken")?;
    let fingerprint = Value::Array(items.clone()).to_string();
    if let Some(token) = token
        && let Some(previous) = state.tokens.get(token)
    {
        return if *previous == fingerprint {
            Ok(json!({}))
        } else {
            Err(Fault::new(
                "IdempotentParameterMismatchException",
                "The request uses the same client token as a previous, but non-identical request.",
            ))
        };
    }
    let mut writes: Vec<Write> = Vec::new();
    for entry in items {
        let entry = Request::new("TransactWriteItems", entry)?;
        entry.allow(&["ConditionCheck", "Put", "Update", "Delete"])?;
        if entry.body.len() != 1 {
            return Err(Fault::validation(
                "A transaction item needs exactly one of ConditionCheck, Put, Update and Delete",
            ));
        }
        let (kind, inner) = entry.body.iter().next().expect("one entry");
        let inner = Request::new("TransactWriteItems", inner)?;
        let common = [
            "TableName",
            "ConditionExpression",
            "ExpressionAttributeNames",
            "ExpressionAttributeValues",
            "ReturnValuesOnConditionCheckFailure",
        ];
        let extra: &[&str] = match kind.as_str() {
            "Put" => &["Item"],
            "Update" => &["Key", "UpdateExpression"],
            _ => &["Key"],
        };
        inner.allow(&[&common[..], extra].concat())?;
        let name = inner.string("TableName")?.to_owned();
        let table = state
            .tables
            .get(&name)
            .ok_or_else(|| Fault::no_table(&name))?;
        let mut placeholders = inner.placeholders()?;
        let (key, key_item, write_kind) = match kind.as_str() {
            "Put" => {
                let item = inner.item("Item")?;
                let key = table.check_item(&item)?;
                let key_item = table.key_attributes(&item, None);
                (key, key_item, WriteKind::Put(item))
            }
            "Update" => {
                let key_item = inner.item("Key")?;
                let update = parse_update(
                    table,
                    Some(inner.string("UpdateExpression")?),
                    &mut placeholders,
                )?;
                (
                    table.key_of(&key_item)?,
                    key_item,
                    WriteKind::Update(update),
                )
            }
            other => {
                let key_item = inner.item("Key")?;
                let kind = if other == "Delete" {
                    WriteKind::Delete
                } else {
                    WriteKind::Check
                };
                (table.key_of(&key_item)?, key_item, kind)
            }
        };
        let condition = inner.condition(&mut placeholders)?;
        if matches!(write_kind, WriteKind::Check) && condition.is_none() {
            return Err(Fault::validation(
                "A ConditionCheck needs a ConditionExpression",
            ));
        }
        placeholders.check_all_used()?;
        if writes.iter().any(|w| w.table == name && w.key == key) {
            return Err(Fault::validation(
                "Transaction request cannot include multiple operations on one item",
            ));
        }
        writes.push(Write {
            table: name,
            key,
            key_item,
            kind: write_kind,
            condition,
            old_on_failure: inner.old_on_failure()?,
        });
    }
    // Every condition against the items as they are, then every write, or nothing.
    let mut reasons = Vec::with_capacity(writes.len());
    let mut results: Vec<Option<Item>> = Vec::with_capacity(writes.len());
    for write in &writes {
        let table = state
            .tables
            .get(&write.table)
            .ok_or_else(|| Fault::no_table(&write.table))?;
        let current = table.items.get(&write.key);
        let reason = match check_condition(current, write.condition.as_ref(), write.old_on_failure)
        {
            Ok(()) => None,
            Err(fault) if fault.code == "ConditionalCheckFailedException" => Some(Reason {
                code: "ConditionalCheckFailed",
                message: Some(fault.message),
                item: fault.item,
            }),
            Err(fault) => return Err(fault),
        };
        let result = match (&write.kind, reason.is_some()) {
            (_, true) | (WriteKind::Check, _) => current.cloned(),
            (WriteKind::Put(item), _) => Some(item.clone()),
            (WriteKind::Delete, _) => None,
            (WriteKind::Update(update), _) => {
                Some(updated(table, &write.key_item, update, current)?.0)
            }
        };
        results.push(result);
        reasons.push(reason);
    }
    if reasons.iter().any(Option::is_some) {
        let codes: Vec<&str> = reasons
            .iter()
            .map(|r| r.as_ref().map_or("None", |r| r.code))
            .collect();
        let mut fault = Fault::new(
            "TransactionCanceledException",
            format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
                codes.join(", ")
            ),
        );
        fault.reasons = Some(
            reasons
                .into_iter()
                .map(|r| {
                    r.unwrap_or(Reason {
                        code: "None",
                        message: None,
                        item: None,
                    })
                })
                .collect(),
        );
        return Err(fault);
    }
    for (write, result) in writes.into_iter().zip(results) {
        if matches!(write.kind, WriteKind::Check) {
            continue;
        }
        let table = table_mut(state, &write.table)?;
        match result {
            Some(item) => {
                table.items.insert(write.key, item);
            }
            None => {
                table.items.remove(&write.key);
            }
        }
    }
    if let Some(token) = token {
        state.tokens.insert(token.to_owned(), fingerprint);
    }
    Ok(json!({}))
}

fn transact_get(state: &State, request: &Request<'_>) -> Result<Value, Fault> {
    request.allow(&["TransactItems", "ReturnConsumedCapacity"])?;
    request.no_metrics()?;
    let items = request
        .get("TransactItems")
        .and_then(Value::as_array)
        .filter(|i| !i.is_empty() && i.len() <= 100)
        .ok_or_else(|| Fault::validation("TransactItems must hold 1 to 100 items"))?;
    let mut responses = Vec::with_capacity(items.len());
    for entry in items {
        let entry = Request::new("TransactGetItems", entry)?;
        entry.allow(&["Get"])?;
        let get = Request::new(
            "TransactGetItems",
            entry
                .get("Get")
                .ok_or_else(|| Fault::validation("A transaction item needs Get"))?,
        )?;
        get.allow(&[
            "TableName",
            "Key",
            "ProjectionExpression",
            "ExpressionAttributeNames",
        ])?;
        let table = table(state, &get)?;
        let key = table.key_of(&get.item("Key")?)?;
        let mut placeholders = get.placeholders()?;
        let projection = get.projection(&mut placeholders)?;
        placeholders.check_all_used()?;
        responses.push(match table.items.get(&key) {
            Some(item) => {
                json!({"Item": codec::write_item(&projected(item, projection.as_deref()))})
            }
            None => json!({}),
        });
    }
    Ok(json!({"Responses": responses}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(state: &mut State, operation: &str, body: Value) -> Result<Value, Fault> {
        handle(state, operation, &body)
    }

    fn with_table() -> State {
        let mut state = State::default();
        call(
            &mut state,
            "CreateTable",
            json!({
                "TableName": "tab",
                "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                "AttributeDefinitions": [
                    {"AttributeName": "PK", "AttributeType": "S"}, {"AttributeName": "SK", "AttributeType": "S"},
                    {"AttributeName": "G", "AttributeType": "S"}, {"AttributeName": "GS", "AttributeType": "N"}
                ],
                "GlobalSecondaryIndexes": [{
                    "IndexName": "I", "KeySchema": [{"AttributeName": "G", "KeyType": "HASH"}, {"AttributeName": "GS", "KeyType": "RANGE"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"}
                }],
                "BillingMode": "PAY_PER_REQUEST"
            }),
        )
        .unwrap();
        state
    }

    fn put(state: &mut State, pk: &str, sk: &str, extra: Value) {
        let mut item = json!({"PK": {"S": pk}, "SK": {"S": sk}});
        for (k, v) in extra.as_object().unwrap() {
            item[k] = v.clone();
        }
        call(state, "PutItem", json!({"TableName": "tab", "Item": item})).unwrap();
    }

    #[test]
    fn queries_follow_sort_key_order_pages_and_filters() {
        let mut state = with_table();
        for sk in ["b", "a", "c", "ab"] {
            put(&mut state, "p", sk, json!({"v": {"N": "1"}}));
        }
        put(&mut state, "q", "a", json!({}));
        let q = |state: &mut State, extra: Value| {
            let mut body = json!({
                "TableName": "tab", "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": {"S": "p"}}
            });
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            call(state, "Query", body).unwrap()
        };
        let sks = |out: &Value| -> Vec<String> {
            out["Items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["SK"]["S"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(sks(&q(&mut state, json!({}))), ["a", "ab", "b", "c"]);
        assert_eq!(
            sks(&q(&mut state, json!({"ScanIndexForward": false}))),
            ["c", "b", "ab", "a"]
        );
        let page = q(&mut state, json!({"Limit": 2}));
        assert_eq!(sks(&page), ["a", "ab"]);
        let next = q(
            &mut state,
            json!({"Limit": 2, "ExclusiveStartKey": page["LastEvaluatedKey"]}),
        );
        assert_eq!(sks(&next), ["b", "c"]);
        let count = q(&mut state, json!({"Select": "COUNT"}));
        assert_eq!(count["Count"], 4);
        assert!(count.get("Items").is_none());
        let between = call(
            &mut state,
            "Query",
            json!({
                "TableName": "tab", "KeyConditionExpression": "PK = :p AND SK BETWEEN :a AND :b",
                "ExpressionAttributeValues": {":p": {"S": "p"}, ":a": {"S": "ab"}, ":b": {"S": "b"}}
            }),
        )
        .unwrap();
        assert_eq!(sks(&between), ["ab", "b"]);
        let prefix = call(&mut state, "Query", json!({
            "TableName": "tab", "KeyConditionExpression": "begins_with(SK, :a) AND PK = :p",
            "FilterExpression": "SK <> :ab",
            "ExpressionAttributeValues": {":p": {"S": "p"}, ":a": {"S": "a"}, ":ab": {"S": "ab"}}
        })).unwrap();
        assert_eq!(sks(&prefix), ["a"]);
        assert_eq!(prefix["ScannedCount"], 2);
    }

    #[test]
    fn an_index_holds_only_items_with_its_keys_in_numeric_order() {
        let mut state = with_table();
        put(
            &mut state,
            "p",
            "1",
            json!({"G": {"S": "g"}, "GS": {"N": "10"}, "x": {"S": "hidden"}}),
        );
        put(
            &mut state,
            "p",
            "2",
            json!({"G": {"S": "g"}, "GS": {"N": "9"}}),
        );
        put(&mut state, "p", "3", json!({"G": {"S": "g"}}));
        let out = call(
            &mut state,
            "Query",
            json!({
                "TableName": "tab", "IndexName": "I", "KeyConditionExpression": "G = :g",
                "ExpressionAttributeValues": {":g": {"S": "g"}}
            }),
        )
        .unwrap();
        let items = out["Items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["SK"]["S"], "2");
        assert!(items[1].get("x").is_none(), "KEYS_ONLY: {}", items[1]);
        let consistent = call(
            &mut state,
            "Query",
            json!({
                "TableName": "tab", "IndexName": "I", "KeyConditionExpression": "G = :g",
                "ExpressionAttributeValues": {":g": {"S": "g"}}, "ConsistentRead": true
            }),
        );
        assert!(consistent.is_err());
        let wrong_type = call(
            &mut state,
            "PutItem",
            json!({
                "TableName": "tab", "Item": {"PK": {"S": "p"}, "SK": {"S": "4"}, "GS": {"S": "x"}}
            }),
        );
        assert!(
            wrong_type
                .unwrap_err()
                .message
                .contains("Type mismatch for Index Key")
        );
    }

    #[test]
    fn conditional_writes_answer_with_the_old_item_when_asked() {
        let mut state = with_table();
        put(&mut state, "p", "a", json!({"n": {"N": "5"}}));
        let update = |state: &mut State, by: &str| {
            call(
                state,
                "UpdateItem",
                json!({
                    "TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}},
                    "UpdateExpression": "ADD #n :by", "ConditionExpression": "#n >= :need",
                    "ExpressionAttributeNames": {"#n": "n"},
                    "ExpressionAttributeValues": {":by": {"N": by}, ":need": {"N": "3"}},
                    "ReturnValues": "UPDATED_NEW", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"
                }),
            )
        };
        let out = update(&mut state, "-3").unwrap();
        assert_eq!(out["Attributes"], json!({"n": {"N": "2"}}));
        let refused = update(&mut state, "-3").unwrap_err();
        assert_eq!(refused.code, "ConditionalCheckFailedException");
        assert_eq!(refused.item.unwrap()["n"], AttributeValue::N("2".into()));
        let key_change = call(
            &mut state,
            "UpdateItem",
            json!({
                "TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}},
                "UpdateExpression": "SET SK = :v", "ExpressionAttributeValues": {":v": {"S": "b"}}
            }),
        );
        assert!(key_change.unwrap_err().message.contains("part of the key"));
        let unused = call(
            &mut state,
            "PutItem",
            json!({
                "TableName": "tab", "Item": {"PK": {"S": "p"}, "SK": {"S": "z"}},
                "ExpressionAttributeValues": {":v": {"S": "b"}}
            }),
        );
        assert!(unused.unwrap_err().message.contains("unused"));
    }

    #[test]
    fn transactions_apply_all_or_nothing_once_per_token() {
        let mut state = with_table();
        put(&mut state, "p", "a", json!({"n": {"N": "1"}}));
        let transaction = |need: &str| {
            json!({
                "ClientRequestToken": format!("token-{need}"),
                "TransactItems": [
                    {"Update": {"TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}},
                        "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}},
                    {"ConditionCheck": {"TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}},
                        "ConditionExpression": "n = :need", "ExpressionAttributeValues": {":need": {"N": need}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}
                ]
            })
        };
        // Two operations on one item are refused before anything is evaluated.
        assert!(
            call(&mut state, "TransactWriteItems", transaction("1"))
                .unwrap_err()
                .message
                .contains("multiple operations")
        );
        let two_items = |need: &str, token: &str| {
            json!({
                "ClientRequestToken": token,
                "TransactItems": [
                    {"Update": {"TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "b"}},
                        "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}},
                    {"ConditionCheck": {"TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}},
                        "ConditionExpression": "n = :need", "ExpressionAttributeValues": {":need": {"N": need}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}
                ]
            })
        };
        let cancelled = call(&mut state, "TransactWriteItems", two_items("2", "x")).unwrap_err();
        assert_eq!(cancelled.code, "TransactionCanceledException");
        let reasons = cancelled.reasons.unwrap();
        assert_eq!(reasons[0].code, "None");
        assert_eq!(reasons[1].code, "ConditionalCheckFailed");
        assert!(reasons[1].item.is_some());
        assert_eq!(state.tables["tab"].items.len(), 1, "nothing written");
        call(&mut state, "TransactWriteItems", two_items("1", "y")).unwrap();
        call(&mut state, "TransactWriteItems", two_items("1", "y")).unwrap();
        let b = call(
            &mut state,
            "GetItem",
            json!({"TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "b"}}}),
        )
        .unwrap();
        assert_eq!(
            b["Item"]["n"],
            json!({"N": "1"}),
            "the resend under one token applied nothing"
        );
        let mismatch = call(&mut state, "TransactWriteItems", two_items("5", "y")).unwrap_err();
        assert_eq!(mismatch.code, "IdempotentParameterMismatchException");
    }

    #[test]
    fn unsupported_parameters_are_named() {
        let mut state = with_table();
        let refused = call(
            &mut state,
            "Scan",
            json!({"TableName": "tab", "Segment": 0, "TotalSegments": 2}),
        )
        .unwrap_err();
        assert_eq!(refused.code, "ValidationException");
        assert!(refused.message.contains("Segment"), "{}", refused.message);
        let refused = call(&mut state, "GetItem", json!({
            "TableName": "tab", "Key": {"PK": {"S": "p"}, "SK": {"S": "a"}}, "AttributesToGet": ["x"]
        })).unwrap_err();
        assert!(refused.message.contains("AttributesToGet"));
        let refused = call(&mut state, "ExecuteStatement", json!({})).unwrap_err();
        assert!(refused.message.contains("ExecuteStatement"));
        let missing = call(
            &mut state,
            "GetItem",
            json!({"TableName": "nope", "Key": {}}),
        )
        .unwrap_err();
        assert_eq!(missing.code, "ResourceNotFoundException");
    }
}
