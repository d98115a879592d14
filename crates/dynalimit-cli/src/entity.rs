//! `entity create|get|delete|children|disable|enable|clear-disabled|reset|top-up`.

use crate::access::{self, EntityTarget};
use crate::context::{Global, bad_input};
use crate::output::access::EntityCascade;
use crate::output::entity::{self as out, Balance, Comeback};
use crate::output::namespace::ItemsDeleted;
use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use dynalimit_repository::{DisabledFlag, NewEntity, OperationOptions, RepositoryError};

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
    /// Admit every acquire of an entity without debiting its balances (each still counted),
    /// on one resource or on all; raises the table's minimum client version to 0.17.0.
    #[command(after_help = "Example:\n  dynalimit entity bypass key-1 --resource gpt-4")]
    Bypass(EntityTarget),
    /// Remove an entity's disabled/enabled value (back to inherit).
    #[command(
        name = "clear-disabled",
        after_help = "Example:\n  dynalimit entity clear-disabled key-1"
    )]
    ClearDisabled(EntityTarget),
    /// Move an entity under another parent (or, with --none, to no parent) and restamp its
    /// buckets; raises the table's minimum client version to 0.17.0.
    #[command(
        name = "set-parent",
        after_help = "Examples:\n  dynalimit entity set-parent key-1 proj-2\n  dynalimit entity set-parent key-1 --none"
    )]
    SetParent {
        /// Entity id.
        id: String,
        /// The new parent.
        #[arg(required_unless_present = "none", conflicts_with = "none")]
        parent: Option<String>,
        /// Detach the entity from its parent.
        #[arg(long)]
        none: bool,
    },
    /// Set whether an entity's acquires also debit its parent (on one resource, or on every
    /// resource without a policy of its own); `inherit` clears it. Raises the table's
    /// minimum client version to 0.16.0.
    #[command(
        name = "set-cascade",
        after_help = "Examples:\n  dynalimit entity set-cascade key-1 on --resource gpt-4\n  dynalimit entity set-cascade key-1 inherit"
    )]
    SetCascade {
        /// Entity id.
        id: String,
        /// `on`, `off` or `inherit`.
        policy: crate::access::Policy,
        /// Only this resource (default: every resource, the entity's `_default_` level).
        #[arg(long, short = 'r')]
        resource: Option<String>,
    },
    /// List the children of an entity.
    #[command(after_help = "Example:\n  dynalimit entity children proj-1")]
    Children {
        /// Parent entity id.
        id: String,
    },
    /// Show what an entity may spend on a resource now, per limit, across every shard: the
    /// tokens available, the capacity in force (a schedule's window applied), and how the
    /// limit comes back: its refill, or a quota's next reset.
    #[command(after_help = "Example:\n  dynalimit entity available key-1 gpt-4 --output json")]
    Available {
        /// Entity id.
        id: String,
        /// Resource.
        resource: String,
    },
    /// Give an entity its whole allowance on one resource back, now: every limit of every
    /// shard back to its capacity (debt forgiven). Consumption counters, configuration and
    /// the parent's buckets are left alone; a bucket that does not exist yet is left alone
    /// too.
    #[command(
        after_help = "Examples:\n  dynalimit entity reset key-1 gpt-4\n  dynalimit entity reset key-1 gpt-4 --idempotency-key ticket-881"
    )]
    Reset {
        /// Entity id.
        id: String,
        /// Resource.
        resource: String,
        /// Names the operation (1-64 of letters, digits, . _ : -): a retry with the same key
        /// within three days returns the first result and applies nothing.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Add whole tokens to limits of an entity on one resource, now. A limit gains at most
    /// the room below its capacity (the amount granted is printed).
    #[command(
        name = "top-up",
        after_help = "Examples:\n  dynalimit entity top-up key-1 gpt-4 tpm=5000\n  dynalimit entity top-up key-1 gpt-4 rpm=10 tpm=2000 --idempotency-key refund-7731"
    )]
    TopUp {
        /// Entity id.
        id: String,
        /// Resource.
        resource: String,
        /// Tokens to add per limit (repeatable).
        #[arg(value_name = "NAME=AMOUNT", required = true)]
        amounts: Vec<String>,
        /// Names the operation (1-64 of letters, digits, . _ : -): a retry with the same key
        /// within three days returns the first result and applies nothing.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
}

/// Parses `NAME=AMOUNT` (whole tokens; `_` may group digits).
fn parse_amount(text: &str) -> Result<(String, i64)> {
    let (name, amount) = text
        .split_once('=')
        .ok_or_else(|| anyhow!("{text:?} must look like NAME=AMOUNT (e.g. tpm=5000)"))?;
    let tokens = amount
        .replace('_', "")
        .parse::<i64>()
        .map_err(|_| anyhow!("{amount:?} in {text:?} is not a whole number of tokens"))?;
    Ok((name.to_owned(), tokens))
}

fn options(idempotency_key: Option<&String>) -> OperationOptions {
    match idempotency_key {
        Some(key) => OperationOptions::new().idempotency_key(key.clone()),
        None => OperationOptions::new(),
    }
}

/// One limit's balance: available tokens, the capacity in force at `now`, and its refill or,
/// for a quota, the next reset (RFC 3339, UTC).
fn balance(status: &dynalimit::LimitStatus, now: i64) -> Balance {
    let limit = &status.limit;
    let params = limit.params_at(now);
    let comeback = match (limit.window_seconds(), limit.reset()) {
        (Some(window_seconds), _) => Comeback::SessionQuota {
            window_seconds,
            resets_at: status.resets_at_ms.map(rfc3339),
        },
        (None, Some(reset)) => Comeback::Quota {
            resets_at: reset.next_edge(now).map(rfc3339),
        },
        (None, None) => Comeback::Rate {
            refill: format!(
                "{}/{}s",
                params.refill_amount / 1000,
                limit.refill_period_seconds()
            ),
        },
    };
    Balance {
        name: limit.name().to_owned(),
        available: status.available,
        capacity: params.capacity / 1000,
        comeback,
    }
}

/// An epoch-millisecond instant in RFC 3339, UTC.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
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
            global.print(&out::Entity::from(&entity));
        }
        EntityCommand::Get { id } => {
            let repo = global.reader().await?;
            let entity = repo
                .get_entity(id)
                .await?
                .ok_or_else(|| RepositoryError::NotFound {
                    what: format!("entity {id:?}"),
                })?;
            global.print(&out::Entity::from(&entity));
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
            global.print(&ItemsDeleted {
                id: id.clone(),
                items_deleted: items,
            });
        }
        EntityCommand::Disable(target) => {
            access::run_entity(global, target, Some(DisabledFlag::Disabled)).await?;
        }
        EntityCommand::Enable(target) => {
            access::run_entity(global, target, Some(DisabledFlag::Enabled)).await?;
        }
        EntityCommand::Bypass(target) => {
            access::run_entity(global, target, Some(DisabledFlag::Bypass)).await?;
        }
        EntityCommand::ClearDisabled(target) => access::run_entity(global, target, None).await?,
        EntityCommand::SetParent { id, parent, .. } => {
            let repo = global.writer().await?;
            let stamped = repo.set_parent(id, parent.as_deref()).await?;
            global.print(&out::ParentSet {
                id: id.clone(),
                parent_id: parent.clone(),
                buckets_stamped: stamped,
            });
        }
        EntityCommand::SetCascade {
            id,
            policy,
            resource,
        } => {
            let repo = global.writer().await?;
            let value = policy.value();
            let stamped = repo
                .set_cascade_policy(id, resource.as_deref(), value)
                .await?;
            global.print(&EntityCascade {
                id: id.clone(),
                resource: resource.clone(),
                cascade: value,
                buckets_stamped: stamped,
            });
        }
        EntityCommand::Children { id } => {
            let repo = global.reader().await?;
            let children = repo.children(id).await?;
            let children: Vec<out::Entity> = children.iter().map(out::Entity::from).collect();
            global.print(&children);
        }
        EntityCommand::Available { id, resource } => {
            let repo = global.reader().await?;
            let now = dynalimit_core::Clock::epoch_millis(&dynalimit_core::SystemClock);
            let statuses = dynalimit::RateLimiter::new(repo)
                .balances(id, resource, &[])
                .await?;
            global.print(&out::Available {
                entity_id: id.clone(),
                resource: resource.clone(),
                limits: statuses.iter().map(|s| balance(s, now)).collect(),
            });
        }
        EntityCommand::Reset {
            id,
            resource,
            idempotency_key,
        } => {
            let repo = global.reader().await?;
            let done = repo
                .reset_bucket(id, resource, &options(idempotency_key.as_ref()))
                .await?;
            if done.shards == 0 && !done.replayed {
                eprintln!("note: {id:?} has no bucket for {resource:?} yet; nothing to reset");
            }
            global.print(&out::Operation::from(&done));
        }
        EntityCommand::TopUp {
            id,
            resource,
            amounts,
            idempotency_key,
        } => {
            let asked = amounts
                .iter()
                .map(|a| parse_amount(a))
                .collect::<Result<Vec<_>>>()
                .map_err(bad_input)?;
            let repo = global.reader().await?;
            let done = repo
                .top_up(
                    id,
                    resource,
                    asked.iter().cloned(),
                    &options(idempotency_key.as_ref()),
                )
                .await?;
            let short: Vec<&str> = asked
                .iter()
                .filter(|(name, n)| done.amounts.get(name).is_some_and(|g| g < n))
                .map(|(name, _)| name.as_str())
                .collect();
            if !short.is_empty() && !done.replayed {
                eprintln!(
                    "note: {} granted less than asked: a limit is never topped up above its \
                     capacity",
                    short.join(", ")
                );
            }
            global.print(&out::Operation::from(&done));
        }
    }
    Ok(())
}
