//! `limits set|get|delete|list` at the entity, entity-default, resource and system levels.

use std::path::PathBuf;

use crate::context::Global;
use crate::level_spec::{LevelError, LevelInput, parse_file, parse_text};
use crate::limit_spec::format_limit;
use crate::manifest::{delete_level, set_cascade, set_disabled};
use crate::output::access::Disabled;
use crate::output::limits::{
    Configured, CustomLimits, LevelConfig, LevelDeleted, LevelKind, Resolved, Unavailable,
};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use dynalimit_format::config::Slot;
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

impl Target<'_> {
    /// The level's item.
    fn slot(&self) -> Slot {
        match self {
            Target::Entity(e, r) => Slot::Entity((*e).to_owned(), (*r).to_owned()),
            Target::Resource(r) => Slot::Resource((*r).to_owned()),
            Target::System => Slot::System,
        }
    }
}

impl Level {
    /// The level as the repository's concurrency calls address it: the entity (its every
    /// resource without a resource), the resource alone, or neither for the system level;
    /// with the level's name.
    pub(crate) fn address(&self) -> Result<(Option<&str>, Option<&str>, String)> {
        let target = self.target()?;
        let name = level_name(&target);
        Ok(match target {
            Target::Entity(e, r) if r == DEFAULT_RESOURCE => (Some(e), None, name),
            Target::Entity(e, r) => (Some(e), Some(r), name),
            Target::Resource(r) => (None, Some(r), name),
            Target::System => (None, None, name),
        })
    }

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
    /// Set the limits and attributes of one level: the limits given replace the level's
    /// limits, each attribute given its value; what is not given is kept.
    #[command(
        after_help = "Examples:\n  dynalimit limits set --system rpm=1000/min,on_unavailable=block\n  dynalimit limits set --resource gpt-4 'rpm=100/min,tpm=10000/min:burst=20000'\n  dynalimit limits set --resource gpt-4 disabled=bypass,cascade=false\n  dynalimit limits set --entity key-1 --resource gpt-4 rpm=500/min\n  dynalimit limits set --entity key-1 --file limits.yaml\n  dynalimit limits get --resource gpt-4 --output json > level.json\n  dynalimit limits set --resource gpt-4 --file level.json\n\nLimit syntax: NAME=RATE[/PERIOD][:burst=N][:soft], PERIOD sec|min|hour|day|<N>s (default min); :soft marks a soft limit (debited, never refusing).\nAttributes, beside the limits: disabled=true|false|bypass and cascade=true|false (entity and resource levels), on_unavailable=allow|block (system level); =null clears one. Attributes alone keep the limits.\nYAML file: a mapping of names to that text (`rpm: 100/min:soft`) or to {rate, per, burst, soft}, and the attributes (`disabled: bypass`).\nJSON file: the document `limits get --output json` prints, the whole level: what it leaves out or sets to null is cleared, an empty `limits` removes the limits; its `level` must be the level set."
    )]
    Set {
        /// Which level.
        #[command(flatten)]
        level: Level,
        /// Comma-separated limits and attributes, e.g.
        /// `rpm=100/min,tpm=10000/min:burst=20000,cascade=true`.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        limits: Option<String>,
        /// Read the level from a file: the YAML form, or the JSON document `limits get
        /// --output json` prints.
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

/// Makes the level at `slot` hold what `input` gives, with the repository's writers: the
/// limits with the level's limit writer (which keeps the stored flags; an empty list deletes
/// the level first), then each attribute given with its own writer, which stamps the buckets
/// it decides. `held` is what the level held before.
///
/// Each writer is safe to run again, and the limits and every attribute given a value are
/// written even when the level already holds them. So a run cut short (an error, an answer
/// lost after a write landed) leaves some writes done, and running the same command again
/// finishes the job (`cli::level_forms::limits_set_run_again_finishes_an_interrupted_set`). A
/// cleared cascade policy is written only when the level holds one: clearing it raises the
/// table's reader gate to cascade policies, which a level that never had one does not need.
async fn write_level(
    repo: &Repository,
    slot: &Slot,
    input: &LevelInput,
    held: Option<&LimitConfig>,
) -> Result<()> {
    let held_limits = held.map_or(&[][..], |h| h.limits.as_slice());
    let limits = match &input.limits {
        Some(limits) if limits.is_empty() => {
            if !held_limits.is_empty() {
                delete_level(repo, slot).await?;
            }
            None
        }
        Some(limits) => Some(limits.as_slice()),
        None => None,
    };
    match slot {
        Slot::System if limits.is_some() || input.on_unavailable.is_some() => {
            let limits = limits.unwrap_or(held_limits);
            if limits.is_empty() {
                return Err(LevelError::UnavailableWithoutLimits.into());
            }
            let kept = held.and_then(|h| h.on_unavailable);
            let wanted = input.on_unavailable.unwrap_or(kept);
            if wanted.is_none() && kept.is_some() {
                // `set_system_defaults` keeps a stored value it is not given: clearing it
                // takes the level away first.
                repo.delete_system_defaults().await?;
            }
            repo.set_system_defaults(limits, wanted).await?;
        }
        Slot::System => {}
        Slot::Resource(r) => {
            if let Some(limits) = limits {
                repo.set_resource_defaults(r, limits).await?;
            }
        }
        Slot::Entity(e, r) => {
            if let Some(limits) = limits {
                repo.set_limits(e, r, limits).await?;
            }
        }
    }
    if let Some(disabled) = input.disabled {
        set_disabled(repo, slot, disabled).await?;
    }
    let held_cascade = held.and_then(|h| h.cascade);
    if let Some(cascade) = input.cascade
        && (cascade.is_some() || held_cascade.is_some())
    {
        set_cascade(repo, slot, cascade).await?;
    }
    Ok(())
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
            let input = match (limits, file) {
                (Some(text), _) => parse_text(text)?,
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    parse_file(&text).with_context(|| format!("{}", path.display()))?
                }
                (None, None) => bail!("give limits or --file"),
            };
            let on_unavailable = on_unavailable
                .as_deref()
                .map(|o| OnUnavailable::parse(o).ok_or_else(|| anyhow!("bad --on-unavailable {o}")))
                .transpose()?;
            let input = input
                .with_on_unavailable(on_unavailable)?
                .for_level(&level_name(&target), matches!(target, Target::System))?;
            let repo = global.writer().await?;
            let held = stored(&repo, &target).await?;
            write_level(&repo, &target.slot(), &input, held.as_ref()).await?;
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
