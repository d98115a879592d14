//! `resource disable|enable|bypass|clear-disabled` and `entity
//! disable|enable|bypass|clear-disabled`: the `disabled` flag of a level, stamped on every
//! bucket it decides.

use crate::context::Global;
use crate::output::access::{Disabled, EntityAccess, ResourceAccess, ResourceCascade};
use anyhow::Result;
use clap::Subcommand;
use dynalimit_repository::DisabledFlag;

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
    /// Admit every acquire on a resource without debiting balances (each still counted);
    /// raises the table's minimum client version to 0.17.0.
    #[command(after_help = "Example:\n  dynalimit resource bypass gpt-4")]
    Bypass {
        /// Resource name.
        resource: String,
    },
    /// Set whether acquires on a resource also debit the acquiring entity's parent, for
    /// every entity without a policy of its own; `inherit` clears it. Raises the table's
    /// minimum client version to 0.16.0.
    #[command(
        name = "set-cascade",
        after_help = "Example:\n  dynalimit resource set-cascade gpt-4 off"
    )]
    SetCascade {
        /// Resource name.
        resource: String,
        /// `on`, `off` or `inherit`.
        policy: Policy,
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

/// A cascade policy on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum Policy {
    /// Debit the parent.
    On,
    /// Do not debit the parent.
    Off,
    /// No policy of its own: the next level (or the entity's own flag) decides.
    Inherit,
}

impl Policy {
    /// The stored value (`None`: cleared).
    pub(crate) fn value(self) -> Option<bool> {
        match self {
            Policy::On => Some(true),
            Policy::Off => Some(false),
            Policy::Inherit => None,
        }
    }
}

/// Runs a resource command.
pub(crate) async fn run_resource(global: &Global, command: &ResourceCommand) -> Result<()> {
    if let ResourceCommand::SetCascade { resource, policy } = command {
        let repo = global.writer().await?;
        let stamped = repo
            .set_resource_cascade_policy(resource, policy.value())
            .await?;
        global.print(&ResourceCascade {
            resource: resource.clone(),
            cascade: policy.value(),
            buckets_stamped: stamped,
        });
        return Ok(());
    }
    let (resource, flag) = match command {
        ResourceCommand::Disable { resource } => (resource, Some(DisabledFlag::Disabled)),
        ResourceCommand::Enable { resource } => (resource, Some(DisabledFlag::Enabled)),
        ResourceCommand::Bypass { resource } => (resource, Some(DisabledFlag::Bypass)),
        ResourceCommand::ClearDisabled { resource } => (resource, None),
        ResourceCommand::SetCascade { .. } => unreachable!("handled above"),
    };
    let repo = global.writer().await?;
    let stamped = repo.set_resource_disabled(resource, flag).await?;
    global.print(&ResourceAccess {
        resource: resource.clone(),
        disabled: flag.map(Disabled),
        buckets_stamped: stamped,
    });
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
    global.print(&EntityAccess {
        id: target.id.clone(),
        resource: target.resource.clone(),
        disabled: flag.map(Disabled),
        buckets_stamped: stamped,
    });
    Ok(())
}
