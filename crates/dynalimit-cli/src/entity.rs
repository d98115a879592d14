//! `entity create|get|delete|children|disable|enable|clear-disabled`.

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use dynalimit_repository::{DisabledFlag, Entity, NewEntity, RepositoryError};
use serde_json::{Value, json};

use crate::access::{self, EntityTarget};
use crate::context::Global;

/// Entity commands.
#[derive(Debug, Subcommand)]
pub(crate) enum EntityCommand {
    /// Create an entity (an API key, a project, a tenant), optionally under a parent.
    #[command(
        after_help = "Examples:\n  dynalimit entity create proj-1 --name \"Project one\"\n  dynalimit entity create key-1 --parent proj-1 --cascade"
    )]
    Create {
        /// Entity id.
        id: String,
        /// Display name (default: the id).
        #[arg(long)]
        name: Option<String>,
        /// Parent entity id.
        #[arg(long)]
        parent: Option<String>,
        /// Acquires on this entity also spend from its parent.
        #[arg(long, requires = "parent")]
        cascade: bool,
        /// Metadata entry (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        metadata: Vec<String>,
    },
    /// Show an entity.
    #[command(after_help = "Example:\n  dynalimit entity get key-1")]
    Get {
        /// Entity id.
        id: String,
    },
    /// Delete an entity with its limits and buckets.
    #[command(after_help = "Example:\n  dynalimit entity delete key-1 --yes")]
    Delete {
        /// Entity id.
        id: String,
        /// Confirm.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Refuse every acquire of an entity, on one resource or on all.
    #[command(
        after_help = "Examples:\n  dynalimit entity disable key-1\n  dynalimit entity disable key-1 --resource gpt-4"
    )]
    Disable(EntityTarget),
    /// Enforce an entity's limits explicitly (re-admits it to a disabled resource).
    #[command(after_help = "Example:\n  dynalimit entity enable key-1 --resource gpt-4")]
    Enable(EntityTarget),
    /// Remove an entity's disabled/enabled value (back to inherit).
    #[command(
        name = "clear-disabled",
        after_help = "Example:\n  dynalimit entity clear-disabled key-1"
    )]
    ClearDisabled(EntityTarget),
    /// List the children of an entity.
    #[command(after_help = "Example:\n  dynalimit entity children proj-1")]
    Children {
        /// Parent entity id.
        id: String,
    },
}

fn entity_json(e: &Entity) -> Value {
    json!({
        "id": e.id,
        "name": e.name,
        "parent_id": e.parent_id,
        "cascade": e.cascade,
        "metadata": e.metadata,
        "created_at": e.created_at,
    })
}

/// Runs an entity command.
pub(crate) async fn run(global: &Global, command: &EntityCommand) -> Result<()> {
    match command {
        EntityCommand::Create {
            id,
            name,
            parent,
            cascade,
            metadata,
        } => {
            let mut new = NewEntity::new(id.clone()).cascade(*cascade);
            if let Some(n) = name {
                new = new.name(n.clone());
            }
            if let Some(p) = parent {
                new = new.parent(p.clone());
            }
            for m in metadata {
                let (k, v) = m
                    .split_once('=')
                    .ok_or_else(|| anyhow!("metadata {m:?} must look like KEY=VALUE"))?;
                new = new.metadata(k, v);
            }
            let repo = global.writer().await?;
            let entity = repo.create_entity(new).await?;
            global.print(&entity_json(&entity));
        }
        EntityCommand::Get { id } => {
            let repo = global.reader().await?;
            let entity = repo
                .get_entity(id)
                .await?
                .ok_or_else(|| RepositoryError::NotFound {
                    what: format!("entity {id:?}"),
                })?;
            global.print(&entity_json(&entity));
        }
        EntityCommand::Delete { id, yes } => {
            if !yes {
                bail!("this deletes entity {id:?} with its limits and buckets; rerun with --yes");
            }
            let repo = global.reader().await?;
            let items = repo.delete_entity(id).await?;
            if items == 0 {
                return Err(RepositoryError::NotFound {
                    what: format!("entity {id:?}"),
                }
                .into());
            }
            global.print(&json!({ "id": id, "items_deleted": items }));
        }
        EntityCommand::Disable(target) => {
            access::run_entity(global, target, Some(DisabledFlag::Disabled)).await?;
        }
        EntityCommand::Enable(target) => {
            access::run_entity(global, target, Some(DisabledFlag::Enabled)).await?;
        }
        EntityCommand::ClearDisabled(target) => access::run_entity(global, target, None).await?,
        EntityCommand::Children { id } => {
            let repo = global.reader().await?;
            let children = repo.children(id).await?;
            global.print(&Value::Array(children.iter().map(entity_json).collect()));
        }
    }
    Ok(())
}
