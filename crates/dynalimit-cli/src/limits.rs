//! `limits set|get|delete|list` at the entity, entity-default, resource and system levels.

use std::path::PathBuf;

use crate::context::{Global, bad_input};
use crate::limit_spec::{format_limit, parse_limits, parse_limits_yaml};
use crate::output::access::Disabled;
use crate::output::limits::{
    Configured, CustomLimits, LevelConfig, LevelDeleted, LevelKind, Resolved, Unavailable,
};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use dynalimit_repository::{LimitConfig, OnUnavailable, Repository};

/// The `_default_` resource: an entity's limits on every resource.
const DEFAULT_RESOURCE: &str = "_default_";

/// Which configuration level a command addresses.
#[derive(Debug, Args)]
pub(crate) struct Level {
    /// Entity id: the entity's limits on --resource, or on every resource without it.
    #[arg(long, short = 'e')]
    pub(crate) entity: Option<String>,
    /// Resource: with --entity that entity's limits on it, alone the resource's defaults.
    #[arg(long, short = 'r')]
    pub(crate) resource: Option<String>,
    /// The namespace-wide defaults.
    #[arg(long, conflicts_with_all = ["entity", "resource"])]
    pub(crate) system: bool,
}

enum Target<'a> {
    Entity(&'a str, &'a str),
    Resource(&'a str),
    System,
}

impl Level {
    fn target(&self) -> Result<Target<'_>> {
        match (&self.entity, &self.resource, self.system) {
            (_, _, true) => Ok(Target::System),
            (Some(e), r, false) => Ok(Target::Entity(e, r.as_deref().unwrap_or(DEFAULT_RESOURCE))),
            (None, Some(r), false) => Ok(Target::Resource(r)),
            (None, None, false) => {
                bail!("choose a level: --entity ID [--resource R], --resource R, or --system")
            }
        }
    }
}

/// Limit configuration commands.
#[derive(Debug, Subcommand)]
pub(crate) enum LimitsCommand {
    /// Set limits at one level (a full replace of that level).
    #[command(
        after_help = "Examples:\n  dynalimit limits set --system rpm=1000/min\n  dynalimit limits set --resource gpt-4 'rpm=100/min,tpm=10000/min:burst=20000'\n  dynalimit limits set --entity key-1 --resource gpt-4 rpm=500/min\n  dynalimit limits set --entity key-1 --file limits.yaml\n\nLimit syntax: NAME=RATE[/PERIOD][:burst=N][:soft], PERIOD sec|min|hour|day|<N>s (default min); :soft marks a soft limit (debited, never refusing).\nYAML file: a mapping of names to that text (`rpm: 100/min:soft`) or to {rate, per, burst, soft}."
    )]
    Set {
        /// Which level.
        #[command(flatten)]
        level: Level,
        /// Comma-separated limits, e.g. `rpm=100/min,tpm=10000/min:burst=20000`.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        limits: Option<String>,
        /// Read the limits from a YAML file.
        #[arg(long, short = 'f', value_name = "FILE")]
        file: Option<PathBuf>,
        /// With --system: what acquires do when DynamoDB is unavailable.
        #[arg(long, value_parser = ["allow", "block"], requires = "system")]
        on_unavailable: Option<String>,
    },
    /// Show the limits stored at one level, or with --resolved those that apply to an entity.
    #[command(
        after_help = "Examples:\n  dynalimit limits get --resource gpt-4\n  dynalimit limits get --entity key-1 --resource gpt-4 --resolved"
    )]
    Get {
        /// Which level.
        #[command(flatten)]
        level: Level,
        /// Resolve entity → entity default → resource → system, as an acquire does.
        #[arg(long, requires = "entity")]
        resolved: bool,
    },
    /// Delete the limits stored at one level.
    #[command(after_help = "Example:\n  dynalimit limits delete --entity key-1 --resource gpt-4")]
    Delete {
        /// Which level.
        #[command(flatten)]
        level: Level,
    },
    /// List where limits are configured; with --resource, the entities with their own limits on it.
    #[command(
        after_help = "Examples:\n  dynalimit limits list\n  dynalimit limits list --resource gpt-4"
    )]
    List {
        /// Resource whose entities with custom limits to list (`_default_` for entity defaults).
        #[arg(long, short = 'r')]
        resource: Option<String>,
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this cursor (printed by the previous page).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show what `limits apply` would change to make the table match a manifest.
    #[command(
        after_help = "Examples:\n  dynalimit limits plan --file limits.yaml\n  dynalimit limits plan --file limits.yaml --full --output json\n\nThe manifest format: docs/limits-as-code.md."
    )]
    Plan(crate::manifest::ManifestArgs),
    /// Compare a manifest with the table: exit 0 when they match, 2 when they differ, 1 on
    /// error.
    #[command(
        after_help = "Example, a CI check:\n  dynalimit limits diff --file limits.yaml --full || exit 1"
    )]
    Diff(crate::manifest::ManifestArgs),
    /// Make the table match a manifest: create and change levels, and with --full remove the
    /// levels it does not name.
    #[command(
        after_help = "Examples:\n  dynalimit limits apply --file limits.yaml\n  dynalimit limits apply --file limits.yaml --full"
    )]
    Apply(crate::manifest::ManifestArgs),
    /// Print a CloudFormation template whose custom resource has the stack's provisioner
    /// apply a manifest (to the namespace -N, on the table of --stack).
    #[command(
        name = "cfn-template",
        after_help = "Example:\n  dynalimit limits cfn-template --file limits.yaml > limits.cfn.yaml\n\nThe stack needs the provisioner: dynalimit deploy --provisioner. Guide: docs/limits-as-code.md."
    )]
    CfnTemplate(crate::manifest::TemplateArgs),
}

fn level_config(level: String, config: &LimitConfig) -> LevelConfig {
    LevelConfig {
        level,
        limits: config.limits.iter().map(format_limit).collect(),
        disabled: config.disabled.map(Disabled),
        cascade: config.cascade,
        on_unavailable: config.on_unavailable.map(Unavailable::from),
    }
}

fn level_name(target: &Target<'_>) -> String {
    match target {
        Target::Entity(e, r) => format!("entity {e} on {r}"),
        Target::Resource(r) => format!("resource {r}"),
        Target::System => "system".into(),
    }
}

async fn stored(repo: &Repository, target: &Target<'_>) -> Result<Option<LimitConfig>> {
    Ok(match target {
        Target::Entity(e, r) => repo.get_limits(e, r).await?,
        Target::Resource(r) => repo.get_resource_defaults(r).await?,
        Target::System => repo.get_system_defaults().await?,
    })
}

/// Runs a limits command.
pub(crate) async fn run(global: &Global, command: &LimitsCommand) -> Result<()> {
    match command {
        LimitsCommand::Set {
            level,
            limits,
            file,
            on_unavailable,
        } => {
            let target = level.target()?;
            let parsed = match (limits, file) {
                (Some(text), _) => parse_limits(text).map_err(bad_input)?,
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    parse_limits_yaml(&text)
                        .with_context(|| format!("{}", path.display()))
                        .map_err(bad_input)?
                }
                (None, None) => bail!("give limits or --file"),
            };
            let on_unavailable = on_unavailable
                .as_deref()
                .map(|o| OnUnavailable::parse(o).ok_or_else(|| anyhow!("bad --on-unavailable {o}")))
                .transpose()?;
            let repo = global.writer().await?;
            match &target {
                Target::Entity(e, r) => repo.set_limits(e, r, &parsed).await?,
                Target::Resource(r) => repo.set_resource_defaults(r, &parsed).await?,
                Target::System => repo.set_system_defaults(&parsed, on_unavailable).await?,
            }
            let config = stored(&repo, &target)
                .await?
                .ok_or_else(|| anyhow!("the limits were written but cannot be read back"))?;
            global.print(&level_config(level_name(&target), &config));
        }
        LimitsCommand::Get { level, resolved } => {
            let target = level.target()?;
            let repo = global.reader().await?;
            if *resolved {
                let Target::Entity(e, r) = target else {
                    bail!("--resolved needs --entity");
                };
                let res = repo.resolve_limits(e, r).await?;
                global.print(&Resolved {
                    entity: e.to_owned(),
                    resource: r.to_owned(),
                    source: res.source.map(Into::into),
                    limits: res.limits.iter().map(format_limit).collect(),
                    on_unavailable: res.on_unavailable.map(Unavailable::from),
                });
                return Ok(());
            }
            let config = stored(&repo, &target)
                .await?
                .ok_or_else(|| anyhow!("no limits are set at level {}", level_name(&target)))?;
            global.print(&level_config(level_name(&target), &config));
        }
        LimitsCommand::Delete { level } => {
            let target = level.target()?;
            let repo = global.reader().await?;
            let existed = match &target {
                Target::Entity(e, r) => repo.delete_limits(e, r).await?,
                Target::Resource(r) => repo.delete_resource_defaults(r).await?,
                Target::System => repo.delete_system_defaults().await?,
            };
            if !existed {
                bail!("no limits are set at level {}", level_name(&target));
            }
            global.print(&LevelDeleted {
                level: level_name(&target),
                deleted: true,
            });
        }
        LimitsCommand::List {
            resource,
            limit,
            cursor,
        } => {
            let repo = global.reader().await?;
            match resource {
                Some(r) => {
                    let (entities, next) = repo
                        .list_entities_with_custom_limits(r, *limit, cursor.as_deref())
                        .await?;
                    let rows: Vec<CustomLimits> = entities
                        .into_iter()
                        .map(|entity| CustomLimits {
                            entity,
                            resource: r.clone(),
                        })
                        .collect();
                    global.print(&rows);
                    if let Some(next) = next {
                        eprintln!("more: --cursor {}", crate::output::escape(&next));
                    }
                }
                None => {
                    let mut rows = Vec::new();
                    if repo.get_system_defaults().await?.is_some() {
                        rows.push(Configured {
                            level: LevelKind::System,
                            resource: None,
                        });
                    }
                    for r in repo.list_resources_with_defaults().await? {
                        rows.push(Configured {
                            level: LevelKind::Resource,
                            resource: Some(r),
                        });
                    }
                    for r in repo.list_resources_with_entity_configs().await? {
                        rows.push(Configured {
                            level: LevelKind::Entity,
                            resource: Some(r),
                        });
                    }
                    global.print(&rows);
                }
            }
        }
        LimitsCommand::Plan(args) => {
            return crate::manifest::run(global, crate::manifest::Mode::Plan, args).await;
        }
        LimitsCommand::Diff(args) => {
            return crate::manifest::run(global, crate::manifest::Mode::Diff, args).await;
        }
        LimitsCommand::Apply(args) => {
            return crate::manifest::run(global, crate::manifest::Mode::Apply, args).await;
        }
        LimitsCommand::CfnTemplate(args) => return crate::manifest::cfn_template(global, args),
    }
    Ok(())
}
