//! `namespace register|list|get|delete|recover|orphans|purge`.

use crate::context::Global;
use crate::output::namespace::{ItemsDeleted, Namespace, NamespaceDeleted, Registered};
use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use dynalimit_repository::{NamespaceInfo, RepositoryError};

/// Namespace commands.
#[derive(Debug, Subcommand)]
pub(crate) enum NamespaceCommand {
    /// Register namespaces (idempotent) and print their ids.
    #[command(after_help = "Example:\n  dynalimit namespace register tenant-a tenant-b")]
    Register {
        /// Namespace names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// List the registered namespaces.
    #[command(after_help = "Example:\n  dynalimit namespace list --output json")]
    List,
    /// Show one namespace.
    #[command(after_help = "Example:\n  dynalimit namespace get tenant-a")]
    Get {
        /// Namespace name.
        name: String,
    },
    /// Soft-delete a namespace (its data stays until purged; `recover` undoes it).
    #[command(after_help = "Example:\n  dynalimit namespace delete tenant-a --yes")]
    Delete {
        /// Namespace name.
        name: String,
        /// Confirm.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Restore a soft-deleted namespace by its id.
    #[command(after_help = "Example:\n  dynalimit namespace recover 01JD4N6W9Q2XK8R3")]
    Recover {
        /// Namespace id (see `namespace orphans`).
        id: String,
    },
    /// List soft-deleted namespaces whose data has not been purged.
    #[command(after_help = "Example:\n  dynalimit namespace orphans")]
    Orphans,
    /// Permanently delete every item of a soft-deleted namespace.
    #[command(after_help = "Example:\n  dynalimit namespace purge 01JD4N6W9Q2XK8R3 --yes")]
    Purge {
        /// Namespace id.
        id: String,
        /// Confirm.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

fn namespaces(list: &[NamespaceInfo]) -> Vec<Namespace> {
    list.iter().map(Namespace::from).collect()
}

/// Runs a namespace command.
pub(crate) async fn run(global: &Global, command: &NamespaceCommand) -> Result<()> {
    match command {
        NamespaceCommand::Register { names } => {
            let repo = global.writer().await?;
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let ids = repo.register_namespaces(&refs).await?;
            let rows = names
                .iter()
                .map(|n| {
                    let id = ids.get(n).cloned();
                    let id = id.ok_or_else(|| anyhow!("namespace {n:?} got no id"))?;
                    Ok(Registered {
                        name: n.clone(),
                        id,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            global.print(&rows);
        }
        NamespaceCommand::List => {
            let repo = global.reader().await?;
            let list = repo.list_namespaces().await?;
            global.print(&namespaces(&list));
        }
        NamespaceCommand::Get { name } => {
            let repo = global.reader().await?;
            match repo.get_namespace(name).await? {
                Some(info) => global.print(&Namespace::from(&info)),
                None => {
                    return Err(RepositoryError::NamespaceNotFound { name: name.clone() }.into());
                }
            }
        }
        NamespaceCommand::Delete { name, yes } => {
            if !yes {
                bail!("this soft-deletes namespace {name:?}; rerun with --yes");
            }
            let repo = global.reader().await?;
            match repo.delete_namespace(name).await? {
                Some(id) => global.print(&NamespaceDeleted {
                    name: name.clone(),
                    id,
                    status: dynalimit_format::namespace::DELETED.to_owned(),
                }),
                None => {
                    return Err(RepositoryError::NamespaceNotFound { name: name.clone() }.into());
                }
            }
        }
        NamespaceCommand::Recover { id } => {
            let repo = global.reader().await?;
            let info = repo.recover_namespace(id).await?;
            global.print(&Namespace::from(&info));
        }
        NamespaceCommand::Orphans => {
            let repo = global.reader().await?;
            let list = repo.list_orphan_namespaces().await?;
            global.print(&namespaces(&list));
        }
        NamespaceCommand::Purge { id, yes } => {
            if !yes {
                bail!("this permanently deletes every item of namespace id {id}; rerun with --yes");
            }
            let repo = global.reader().await?;
            let deleted = repo.purge_namespace(id).await?;
            global.print(&ItemsDeleted {
                id: id.clone(),
                items_deleted: deleted,
            });
        }
    }
    Ok(())
}
