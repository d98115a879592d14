//! `audit`: the audit log of an entity, a resource or the namespace.

use anyhow::{Result, anyhow};
use clap::Args;
use dynalimit_aggregator::archive::{self, Archive, ArchivedEvent, attribute_json};
use dynalimit_format::audit::{SYSTEM_AUDIT_ID, resource_audit_id};

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
    #[arg(long, value_name = "EVENT_ID", conflicts_with = "archive")]
    pub(crate) after: Option<String>,
    /// Read the events that expired from the table, from the stack's audit archive (deployed
    /// with --enable-audit-archival) instead of the table.
    #[arg(long)]
    pub(crate) archive: bool,
    /// The archive's bucket, when the stack cannot be read (implies --archive).
    #[arg(long, value_name = "BUCKET")]
    pub(crate) archive_bucket: Option<String>,
    /// With --archive: only events of this day or later (YYYY-MM-DD, UTC).
    #[arg(long, value_name = "DATE", value_parser = parse_day)]
    pub(crate) since: Option<String>,
}

/// A `YYYY-MM-DD` day, as `--since` takes it.
fn parse_day(text: &str) -> Result<String, String> {
    jiff::civil::Date::strptime("%Y-%m-%d", text)
        .map(|d| d.to_string())
        .map_err(|_| format!("{text:?} is not a day (YYYY-MM-DD)"))
}

/// The archive bucket: `--archive-bucket`, else the stack's `AuditArchiveBucketName` output.
async fn archive_of(global: &Global, args: &AuditArgs) -> Result<Archive> {
    let config = global.sdk_config().await?;
    let bucket = match &args.archive_bucket {
        Some(b) => b.clone(),
        None => {
            let manager = global.stacks_with(&config);
            let info = crate::delete::read_stack(global, &config, &manager).await?;
            info.and_then(|i| i.outputs.get("AuditArchiveBucketName").cloned())
                .ok_or_else(|| {
                    anyhow!(
                        "stack {} has no audit archive: deploy it with --enable-audit-archival, \
                         or name the bucket with --archive-bucket",
                        global.stack
                    )
                })?
        }
    };
    Ok(Archive::new(&config, bucket))
}

/// The archived events of `id` in this namespace, newest first, at most `limit`.
async fn archived(global: &Global, args: &AuditArgs, id: &str) -> Result<Vec<Event>> {
    let archive = archive_of(global, args).await?;
    let repo = global.reader().await?;
    let events = archive
        .events(repo.namespace_id(), Some(id), archive::PREFIX)
        .await?;
    let since = args.since.as_deref().unwrap_or("");
    Ok(events
        .into_iter()
        .rev()
        .filter(|e| e.entity_id == id && e.timestamp.as_str() >= since)
        .take(args.limit)
        .map(|e: ArchivedEvent| Event {
            event_id: e.event_id,
            timestamp: e.timestamp,
            action: e.action,
            entity: e.entity_id,
            resource: e.resource,
            principal: e.principal,
            details: e.details,
        })
        .collect())
}

/// Runs `audit`.
pub(crate) async fn run(global: &Global, args: &AuditArgs) -> Result<()> {
    let id = match (&args.entity, &args.resource, args.system) {
        (Some(e), _, _) => e.clone(),
        (None, Some(r), _) => resource_audit_id(r),
        _ => SYSTEM_AUDIT_ID.to_string(),
    };
    if !(1..=1000).contains(&args.limit) {
        return Err(crate::context::bad_input(anyhow!(
            "--limit must be between 1 and 1000, got {}",
            args.limit
        )));
    }
    if args.archive || args.archive_bucket.is_some() {
        let rows = archived(global, args, &id).await?;
        global.print(&rows);
        return Ok(());
    }
    if args.since.is_some() {
        return Err(crate::context::bad_input(anyhow!(
            "--since reads the archive: add --archive"
        )));
    }
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
                .map(|(k, v)| (k.clone(), attribute_json(v)))
                .collect(),
        })
        .collect();
    global.print(&rows);
    if let Some(next) = page.next {
        eprintln!("more: --after {}", crate::output::escape(&next));
    }
    Ok(())
}
