//! `resource disable|enable|clear-disabled` and `entity disable|enable|clear-disabled`: the
//! `disabled` flag of a level, stamped on every bucket it decides.

use anyhow::Result;
use clap::Subcommand;
use dynalimit_repository::DisabledFlag;
use serde_json::{Value, json};

use crate::context::Global;

/// Resource commands.
#[derive(Debug, Subcommand)]
pub(crate) enum ResourceCommand {
    /// Refuse every acquire on a resource (entities with their own value keep it).
    #[command(after_help = "Example:\n  dynalimit resource disable gpt-4")]
    Disable {
        /// Resource name.
        resource: String,
    },
    /// Enforce limits on a resource explicitly (outranks nothing above it; use
    /// clear-disabled to go back to inherit).
    #[command(after_help = "Example:\n  dynalimit resource enable gpt-4")]
    Enable {
        /// Resource name.
        resource: String,
    },
    /// Remove the resource's disabled/enabled value (back to inherit).
    #[command(
        name = "clear-disabled",
        after_help = "Example:\n  dynalimit resource clear-disabled gpt-4"
    )]
    ClearDisabled {
        /// Resource name.
        resource: String,
    },
}

/// What an entity's `disable`/`enable`/`clear-disabled` addresses.
#[derive(Debug, clap::Args)]
pub(crate) struct EntityTarget {
    /// Entity id.
    pub(crate) id: String,
    /// Only this resource (default: every resource, the entity's `_default_` level).
    #[arg(long, short = 'r')]
    pub(crate) resource: Option<String>,
}

/// The JSON value of a flag: `true`, `false`, or null for a clear.
fn flag_json(flag: Option<DisabledFlag>) -> Value {
    match flag {
        Some(DisabledFlag::Disabled) => json!(true),
        Some(DisabledFlag::Enabled) => json!(false),
        Some(DisabledFlag::Bypass) => json!(DisabledFlag::Bypass.name()),
        None => Value::Null,
    }
}

/// Runs a resource command.
pub(crate) async fn run_resource(global: &Global, command: &ResourceCommand) -> Result<()> {
    let (resource, flag) = match command {
        ResourceCommand::Disable { resource } => (resource, Some(DisabledFlag::Disabled)),
        ResourceCommand::Enable { resource } => (resource, Some(DisabledFlag::Enabled)),
        ResourceCommand::ClearDisabled { resource } => (resource, None),
    };
    let repo = global.writer().await?;
    let stamped = repo.set_resource_disabled(resource, flag).await?;
    global.print(&json!({
        "resource": resource,
        "disabled": flag_json(flag),
        "buckets_stamped": stamped,
    }));
    Ok(())
}

/// Runs an entity's `disable` (`Some(Disabled)`), `enable` or `clear-disabled` (`None`).
pub(crate) async fn run_entity(
    global: &Global,
    target: &EntityTarget,
    flag: Option<DisabledFlag>,
) -> Result<()> {
    let repo = global.writer().await?;
    let stamped = repo
        .set_entity_disabled(&target.id, target.resource.as_deref(), flag)
        .await?;
    global.print(&json!({
        "id": target.id,
        "resource": target.resource,
        "disabled": flag_json(flag),
        "buckets_stamped": stamped,
    }));
    Ok(())
}
