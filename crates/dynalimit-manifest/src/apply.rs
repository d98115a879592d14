//! Applying a change set with the repository's writers: the limit writers
//! (`set_limits`, `set_resource_defaults`, `set_system_defaults` and their deletes), the
//! flag writers (`set_*_disabled`, `set_*cascade_policy`), `create_entity` and
//! `set_parent`. Each runs its own reader gate, writes its own audit event and stamps the
//! buckets it affects; nothing here writes an item itself.
//!
//! What happens when an answer is lost: every writer is safe to run again (see their
//! docs), and an apply is planned afresh from the table each time. A run that fails half-way
//! (an error, a lost answer the writer reports as unknown) leaves some steps done; the next
//! `apply` plans only what is still different and finishes the job. The suite shows it by
//! applying a manifest over a table that already holds part of it
//! (`manifest::apply_finishes_a_partial_apply`).

use dynalimit_format::config::Slot;
use dynalimit_repository::{LimitConfig, NewEntity, Repository, RepositoryError};

use crate::error::ManifestError;
use crate::model::{Level, is_default};
use crate::plan::{Op, Step, flag_scope, level_name};

type Result<T> = std::result::Result<T, RepositoryError>;

/// Takes `steps` in order; stops at the first failure, naming the step.
///
/// # Errors
/// The first writer that failed, with the level it was writing.
pub async fn apply(repo: &Repository, steps: &[Step]) -> std::result::Result<(), ManifestError> {
    for step in steps {
        let what = match &step.op {
            Op::Write { slot, .. } | Op::Remove { slot, .. } => level_name(slot),
            Op::Parent { id, .. } => format!("entity {id}"),
        };
        run(repo, &step.op)
            .await
            .map_err(|source| ManifestError::Repository {
                step: format!("applying {what}"),
                source,
            })?;
    }
    Ok(())
}

async fn run(repo: &Repository, op: &Op) -> Result<()> {
    match op {
        Op::Parent { id, parent, exists } => {
            if *exists {
                repo.set_parent(id, parent.as_deref()).await?;
            } else {
                let mut new = NewEntity::new(id.clone());
                if let Some(p) = parent {
                    new = new.parent(p.clone());
                }
                repo.create_entity(new).await?;
            }
        }
        Op::Write {
            slot,
            desired,
            stored,
        } => write(repo, slot, desired, stored.as_ref()).await?,
        Op::Remove { slot, stored } => remove(repo, slot, stored).await?,
    }
    Ok(())
}

/// Makes `slot` hold `desired`: its limits with the level's limit writer (which keeps the
/// stored flags and concurrency limits), then its concurrency limits and each flag that
/// differs with their own writers.
async fn write(
    repo: &Repository,
    slot: &Slot,
    desired: &Level,
    stored: Option<&LimitConfig>,
) -> Result<()> {
    let mut held = stored.cloned();
    let limits_differ = held.as_ref().map(|s| &s.limits) != Some(&desired.limits);
    let unavailable_differs =
        held.as_ref().and_then(|s| s.on_unavailable) != desired.on_unavailable;
    if desired.limits.is_empty() {
        if held.as_ref().is_some_and(|s| !s.limits.is_empty()) {
            // No writer removes a level's limits and keeps its flags: the level goes, and
            // its flags are written again below.
            delete_level(repo, slot).await?;
            held = None;
        }
    } else if limits_differ || (matches!(slot, Slot::System) && unavailable_differs) {
        match slot {
            Slot::System => {
                if desired.on_unavailable.is_none()
                    && held.as_ref().is_some_and(|s| s.on_unavailable.is_some())
                {
                    // `set_system_defaults` keeps a stored value it is not given: clearing
                    // it takes the level away first.
                    repo.delete_system_defaults().await?;
                }
                repo.set_system_defaults(&desired.limits, desired.on_unavailable)
                    .await?;
            }
            Slot::Resource(r) => repo.set_resource_defaults(r, &desired.limits).await?,
            Slot::Entity(e, r) => repo.set_limits(e, r, &desired.limits).await?,
        }
    }
    let concurrency = held.as_ref().map_or(&[][..], |s| &s.concurrency[..]);
    if concurrency != desired.concurrency {
        let (entity, resource) = match slot {
            Slot::System => (None, None),
            Slot::Resource(r) => (None, Some(r.as_str())),
            Slot::Entity(e, r) => (Some(e.as_str()), (!is_default(r)).then_some(r.as_str())),
        };
        repo.set_concurrency_limits(entity, resource, &desired.concurrency)
            .await?;
    }
    let disabled = held.as_ref().and_then(|s| s.disabled);
    let cascade = held.as_ref().and_then(|s| s.cascade);
    if disabled != desired.disabled {
        set_disabled(repo, slot, desired.disabled).await?;
    }
    if cascade != desired.cascade {
        set_cascade(repo, slot, desired.cascade).await?;
    }
    Ok(())
}

/// Removes a level: its flags cleared with their writers (which stamp the buckets they
/// decided), then its item deleted with the level's delete.
async fn remove(repo: &Repository, slot: &Slot, stored: &LimitConfig) -> Result<()> {
    if stored.disabled.is_some() {
        set_disabled(repo, slot, None).await?;
    }
    if stored.cascade.is_some() {
        set_cascade(repo, slot, None).await?;
    }
    delete_level(repo, slot).await
}

/// Deletes the level `slot` (its limits and the attributes stored with them).
///
/// # Errors
/// The classified failure of the delete.
pub async fn delete_level(repo: &Repository, slot: &Slot) -> Result<()> {
    match slot {
        Slot::System => repo.delete_system_defaults().await?,
        Slot::Resource(r) => repo.delete_resource_defaults(r).await?,
        Slot::Entity(e, r) => repo.delete_limits(e, r).await?,
    };
    Ok(())
}

/// Writes the level's `disabled` flag (`None` clears it) with the repository's access writer;
/// nothing at system level.
///
/// # Errors
/// The classified failure of the write or its fan-out.
pub async fn set_disabled(
    repo: &Repository,
    slot: &Slot,
    flag: Option<dynalimit_repository::DisabledFlag>,
) -> Result<()> {
    match slot {
        Slot::System => {}
        Slot::Resource(r) => {
            repo.set_resource_disabled(r, flag).await?;
        }
        Slot::Entity(e, r) => {
            repo.set_entity_disabled(e, flag_scope(r), flag).await?;
        }
    }
    Ok(())
}

/// Writes the level's cascade policy (`None` clears it) with the repository's cascade writer;
/// nothing at system level.
///
/// # Errors
/// The classified failure of the write or its fan-out.
pub async fn set_cascade(repo: &Repository, slot: &Slot, policy: Option<bool>) -> Result<()> {
    match slot {
        Slot::System => {}
        Slot::Resource(r) => {
            repo.set_resource_cascade_policy(r, policy).await?;
        }
        Slot::Entity(e, r) => {
            repo.set_cascade_policy(e, flag_scope(r), policy).await?;
        }
    }
    Ok(())
}
