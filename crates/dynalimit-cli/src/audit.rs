//! `audit`: the audit log of an entity, a resource or the namespace.

use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue;
use clap::Args;
use dynalimit_format::audit::{SYSTEM_AUDIT_ID, resource_audit_id};
use serde_json::Value;

use crate::context::Global;
use crate::output::audit::Event;

/// Options of `audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Entity whose events to show.
    #[arg(long, short = 'e', conflicts_with_all = ["resource", "system"], required_unless_present_any = ["resource", "system"])]
    pub(crate) entity: Option<String>,
    /// Resource whose default-limit changes to show.
    #[arg(long, short = 'r', conflicts_with = "system")]
    pub(crate) resource: Option<String>,
    /// Namespace-wide changes (system defaults).
    #[arg(long)]
    pub(crate) system: bool,
    /// At most this many events (1-1000), newest first.
    #[arg(long, short = 'l', default_value_t = 100)]
    pub(crate) limit: usize,
    /// Continue after this event id.
    #[arg(long, value_name = "EVENT_ID")]
    pub(crate) after: Option<String>,
}

/// A stored attribute value as JSON: numbers as numbers (integers when they are), sets as
/// arrays, and anything else as its debug text.
fn attr_json(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => Value::from(s.as_str()),
        AttributeValue::N(n) => n
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| n.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::from(n.as_str())),
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::L(l) => Value::Array(l.iter().map(attr_json).collect()),
        AttributeValue::M(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), attr_json(v))).collect())
        }
        AttributeValue::Ss(s) => Value::from(s.clone()),
        AttributeValue::Ns(n) => Value::from(n.clone()),
        other => Value::from(format!("{other:?}")),
    }
}

/// Runs `audit`.
pub(crate) async fn run(global: &Global, args: &AuditArgs) -> Result<()> {
    let id = match (&args.entity, &args.resource, args.system) {
        (Some(e), _, _) => e.clone(),
        (None, Some(r), _) => resource_audit_id(r),
        _ => SYSTEM_AUDIT_ID.to_string(),
    };
    let repo = global.reader().await?;
    let page = repo
        .audit_events(&id, args.limit, args.after.as_deref())
        .await?;
    let rows: Vec<Event> = page
        .events
        .iter()
        .map(|e| Event {
            event_id: e.event_id.clone(),
            timestamp: e.timestamp.clone(),
            action: e.action.clone(),
            entity: e.entity_id.clone(),
            resource: e.resource.clone(),
            principal: e.principal.clone(),
            details: e
                .details
                .iter()
                .map(|(k, v)| (k.clone(), attr_json(v)))
                .collect(),
        })
        .collect();
    global.print(&rows);
    if let Some(next) = page.next {
        eprintln!("more: --after {}", crate::output::escape(&next));
    }
    Ok(())
}
