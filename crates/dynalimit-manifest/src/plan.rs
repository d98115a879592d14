//! The change set between a manifest and what the table holds: the levels to create, the
//! levels to change (attribute by attribute), and with `--full` the levels to remove.
//!
//! Reading is strongly consistent and uncached (the repository's `get_*` readers); the
//! comparison itself ([`level_change`]) is pure.

use std::collections::{BTreeMap, BTreeSet};

use dynalimit_core::{Concurrency, Limit};
use dynalimit_format::config::Slot;
use dynalimit_repository::{LimitConfig, Repository};

use crate::error::ManifestError;
use crate::model::{Level, Manifest, entity_levels, is_default};
use crate::report::{Action, AttributeChange, LevelChange};
use crate::spec::{format_concurrency, format_limit};

type Result<T> = std::result::Result<T, ManifestError>;

/// One step of an apply: what to change and what the table held when it was planned.
#[derive(Debug, Clone)]
pub struct Step {
    /// What the step changes, as printed.
    pub change: LevelChange,
    /// What to do.
    pub op: Op,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum Op {
    /// Make a level hold `desired`.
    Write {
        /// The level.
        slot: Slot,
        /// What it should hold.
        desired: Level,
        /// What it held.
        stored: Option<LimitConfig>,
    },
    /// Remove a level (its flags cleared first, so that buckets are stamped again).
    Remove {
        /// The level.
        slot: Slot,
        /// What it held.
        stored: LimitConfig,
    },
    /// Give an entity a parent (or none), creating it when it does not exist.
    Parent {
        /// The entity.
        id: String,
        /// The parent.
        parent: Option<String>,
        /// Whether the entity exists.
        exists: bool,
    },
}

/// The change set: the steps in the order an apply takes them, and how many declared
/// levels already match.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The steps.
    pub steps: Vec<Step>,
    /// Declared levels (and parents) that match the table.
    pub unchanged: usize,
}

/// How a level is named in the output.
pub fn level_name(slot: &Slot) -> String {
    match slot {
        Slot::System => "system".into(),
        Slot::Resource(r) => format!("resource {r}"),
        Slot::Entity(e, r) => format!("entity {e} on {r}"),
    }
}

/// Two limits that differ in what the text form leaves out (a quota's refill period): the
/// numbers, so that the change is visible.
fn limit_detail(limit: &Limit) -> String {
    format!(
        "{} (capacity {}, refill {} per {}s)",
        format_limit(limit),
        limit.capacity(),
        limit.refill_amount(),
        limit.refill_period_seconds()
    )
}

fn attribute(name: String, before: Option<String>, after: Option<String>) -> AttributeChange {
    AttributeChange {
        attribute: name,
        before,
        after,
    }
}

/// The attributes in which a level's desired content differs from what is stored (`None`:
/// no item), in a fixed order: limits by name, concurrency limits by name, then `disabled`,
/// `cascade`, `on_unavailable`.
pub fn level_change(desired: &Level, stored: Option<&LimitConfig>) -> Vec<AttributeChange> {
    let empty = LimitConfig::default();
    let stored = stored.unwrap_or(&empty);
    let mut out = Vec::new();
    let before: BTreeMap<&str, &Limit> = stored.limits.iter().map(|l| (l.name(), l)).collect();
    let after: BTreeMap<&str, &Limit> = desired.limits.iter().map(|l| (l.name(), l)).collect();
    let names: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if b == a {
            continue;
        }
        let (mut bt, mut at) = (b.map(|l| format_limit(l)), a.map(|l| format_limit(l)));
        if bt == at {
            (bt, at) = (b.map(|l| limit_detail(l)), a.map(|l| limit_detail(l)));
        }
        out.push(attribute(format!("limit {name}"), bt, at));
    }
    let before: BTreeMap<&str, &Concurrency> =
        stored.concurrency.iter().map(|c| (c.name(), c)).collect();
    let after: BTreeMap<&str, &Concurrency> =
        desired.concurrency.iter().map(|c| (c.name(), c)).collect();
    let names: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if b != a {
            let text = |c: Option<&&Concurrency>| c.map(|c| format_concurrency(c));
            out.push(attribute(format!("concurrency {name}"), text(b), text(a)));
        }
    }
    if stored.disabled != desired.disabled {
        out.push(attribute(
            "disabled".into(),
            stored.disabled.map(|d| d.name().to_owned()),
            desired.disabled.map(|d| d.name().to_owned()),
        ));
    }
    if stored.cascade != desired.cascade {
        out.push(attribute(
            "cascade".into(),
            stored.cascade.map(|c| c.to_string()),
            desired.cascade.map(|c| c.to_string()),
        ));
    }
    if stored.on_unavailable != desired.on_unavailable {
        out.push(attribute(
            "on_unavailable".into(),
            stored.on_unavailable.map(|o| o.as_str().to_owned()),
            desired.on_unavailable.map(|o| o.as_str().to_owned()),
        ));
    }
    out
}

/// Everything a stored level holds, as attributes to remove.
fn removal(stored: &LimitConfig) -> Vec<AttributeChange> {
    level_change(&Level::default(), Some(stored))
}

async fn stored(repo: &Repository, slot: &Slot) -> Result<Option<LimitConfig>> {
    Ok(match slot {
        Slot::System => repo.get_system_defaults().await?,
        Slot::Resource(r) => repo.get_resource_defaults(r).await?,
        Slot::Entity(e, r) => repo.get_limits(e, r).await?,
    })
}

/// Reads what the table holds for every level the manifest declares (and, with `full`,
/// every level it holds) and computes the change set.
///
/// # Errors
/// A failed read; an item dynalimit cannot read.
pub async fn plan(repo: &Repository, manifest: &Manifest, full: bool) -> Result<Plan> {
    let mut plan = Plan {
        steps: Vec::new(),
        unchanged: 0,
    };
    plan.steps
        .extend(parents(repo, manifest, &mut plan.unchanged).await?);
    let mut declared: Vec<(Slot, &Level)> = Vec::new();
    if let Some(system) = &manifest.system {
        declared.push((Slot::System, system));
    }
    for (r, level) in &manifest.resources {
        declared.push((Slot::Resource(r.clone()), level));
    }
    for (e, r, level) in entity_levels(manifest) {
        declared.push((Slot::Entity(e.into(), r.into()), level));
    }
    for (slot, desired) in &declared {
        let stored = stored(repo, slot).await?;
        let attributes = level_change(desired, stored.as_ref());
        if attributes.is_empty() {
            plan.unchanged += 1;
            continue;
        }
        let change = |action| LevelChange {
            action,
            level: level_name(slot),
            attributes: attributes.clone(),
        };
        let step = match (&stored, desired.is_empty()) {
            (Some(stored), true) => Step {
                change: change(Action::Delete),
                op: Op::Remove {
                    slot: slot.clone(),
                    stored: stored.clone(),
                },
            },
            (stored, _) => Step {
                change: change(if stored.is_some() {
                    Action::Update
                } else {
                    Action::Create
                }),
                op: Op::Write {
                    slot: slot.clone(),
                    desired: (*desired).clone(),
                    stored: stored.clone(),
                },
            },
        };
        plan.steps.push(step);
    }
    if full {
        let named: std::collections::HashSet<&Slot> = declared.iter().map(|(s, _)| s).collect();
        for slot in held(repo).await?.into_iter().rev() {
            if named.contains(&slot) {
                continue;
            }
            let Some(stored) = stored(repo, &slot).await? else {
                continue;
            };
            plan.steps.push(Step {
                change: LevelChange {
                    action: Action::Delete,
                    level: level_name(&slot),
                    attributes: removal(&stored),
                },
                op: Op::Remove { slot, stored },
            });
        }
    }
    Ok(plan)
}

/// Every level the namespace holds: the system level, each resource's, each entity's (from
/// the registries), in the order system, resources, entities.
async fn held(repo: &Repository) -> Result<Vec<Slot>> {
    let mut out = Vec::new();
    if repo.get_system_defaults().await?.is_some() {
        out.push(Slot::System);
    }
    for r in repo.list_resources_with_defaults().await? {
        out.push(Slot::Resource(r));
    }
    for r in repo.list_resources_with_entity_configs().await? {
        let mut cursor: Option<String> = None;
        loop {
            let (entities, next) = repo
                .list_entities_with_custom_limits(&r, 100, cursor.as_deref())
                .await?;
            out.extend(entities.into_iter().map(|e| Slot::Entity(e, r.clone())));
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    Ok(out)
}

/// The parent steps, parents before their children: an entity whose declared parent is
/// created or moved in the same apply comes after it.
async fn parents(
    repo: &Repository,
    manifest: &Manifest,
    unchanged: &mut usize,
) -> Result<Vec<Step>> {
    let mut pending: Vec<Step> = Vec::new();
    for (id, decl) in &manifest.entities {
        let Some(parent) = &decl.parent else {
            continue;
        };
        let found = repo.get_entity(id).await?;
        let before = found.as_ref().and_then(|e| e.parent_id.clone());
        if found.is_some() && &before == parent {
            *unchanged += 1;
            continue;
        }
        pending.push(Step {
            change: LevelChange {
                action: if found.is_some() {
                    Action::Update
                } else {
                    Action::Create
                },
                level: format!("entity {id}"),
                attributes: vec![attribute("parent".into(), before, parent.clone())],
            },
            op: Op::Parent {
                id: id.clone(),
                parent: parent.clone(),
                exists: found.is_some(),
            },
        });
    }
    // Order: a step whose parent is still pending waits for it (the manifest has no cycle).
    let mut ordered = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let waiting: BTreeSet<String> = pending
            .iter()
            .filter_map(|s| match &s.op {
                Op::Parent { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        let (ready, rest): (Vec<Step>, Vec<Step>) = pending.into_iter().partition(
            |s| !matches!(&s.op, Op::Parent { parent: Some(p), .. } if waiting.contains(p)),
        );
        if ready.is_empty() {
            ordered.extend(rest);
            break;
        }
        ordered.extend(ready);
        pending = rest;
    }
    Ok(ordered)
}

/// Whether an entity level is the entity's every-resource level, given as `None` to the
/// flag writers.
pub fn flag_scope(resource: &str) -> Option<&str> {
    (!is_default(resource)).then_some(resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynalimit_repository::{DisabledFlag, OnUnavailable};

    fn level(limits: Vec<Limit>) -> Level {
        Level {
            limits,
            ..Level::default()
        }
    }

    fn stored(limits: Vec<Limit>) -> LimitConfig {
        LimitConfig {
            limits,
            ..LimitConfig::default()
        }
    }

    type Triple = (String, Option<String>, Option<String>);

    fn triples(l: &Level, s: &LimitConfig) -> Vec<Triple> {
        level_change(l, Some(s))
            .into_iter()
            .map(|a| (a.attribute, a.before, a.after))
            .collect()
    }

    #[test]
    fn concurrency_limits_differ_name_by_name_beside_the_rate_limits() {
        let c = |n: &str, max| dynalimit_core::Concurrency::new(n, max).unwrap();
        let mut l = level(vec![Limit::per_minute("rpm", 100)]);
        l.concurrency = vec![c("jobs", 2), c("streams", 5)];
        let mut s = stored(vec![Limit::per_minute("rpm", 100)]);
        s.concurrency = vec![c("old", 1), c("streams", 4)];
        assert_eq!(
            triples(&l, &s),
            [
                ("concurrency jobs".into(), None, Some("jobs=2/30s".into())),
                ("concurrency old".into(), Some("old=1/30s".into()), None),
                (
                    "concurrency streams".into(),
                    Some("streams=4/30s".into()),
                    Some("streams=5/30s".into())
                ),
            ]
        );
        s.concurrency = l.concurrency.clone();
        assert!(triples(&l, &s).is_empty());
    }

    #[test]
    fn a_level_that_matches_has_no_change() {
        let l = level(vec![Limit::per_minute("rpm", 100)]);
        let s = stored(vec![Limit::per_minute("rpm", 100)]);
        assert!(level_change(&l, Some(&s)).is_empty());
        assert!(level_change(&Level::default(), None).is_empty());
    }

    #[test]
    fn limits_differ_name_by_name() {
        let l = level(vec![
            Limit::per_minute("rpm", 200),
            Limit::per_minute("tpm", 5),
        ]);
        let s = stored(vec![
            Limit::per_minute("old", 1),
            Limit::per_minute("rpm", 100),
        ]);
        let got = triples(&l, &s);
        assert_eq!(
            got,
            [
                ("limit old".into(), Some("old=1/min".into()), None),
                (
                    "limit rpm".into(),
                    Some("rpm=100/min".into()),
                    Some("rpm=200/min".into())
                ),
                ("limit tpm".into(), None, Some("tpm=5/min".into())),
            ]
        );
    }

    #[test]
    fn soft_flags_and_system_settings_are_attributes() {
        let mut l = level(vec![Limit::per_minute("rpm", 100).soft()]);
        l.disabled = Some(DisabledFlag::Bypass);
        l.cascade = Some(false);
        l.on_unavailable = Some(OnUnavailable::Block);
        let mut s = stored(vec![Limit::per_minute("rpm", 100)]);
        s.cascade = Some(true);
        let got = triples(&l, &s);
        assert_eq!(
            got,
            [
                (
                    "limit rpm".into(),
                    Some("rpm=100/min".into()),
                    Some("rpm=100/min:soft".into())
                ),
                ("disabled".into(), None, Some("bypass".into())),
                ("cascade".into(), Some("true".into()), Some("false".into())),
                ("on_unavailable".into(), None, Some("block".into())),
            ]
        );
    }

    #[test]
    fn a_difference_the_text_form_hides_is_shown_in_numbers() {
        let a = Limit::custom("q", 10, 0, 1).with_window(60);
        let b = Limit::custom("q", 10, 0, 60).with_window(60);
        let got = level_change(&level(vec![a]), Some(&stored(vec![b])));
        assert_eq!(got.len(), 1);
        assert_ne!(got[0].before, got[0].after);
        assert!(
            got[0].after.as_deref().unwrap().contains("per 1s"),
            "{got:?}"
        );
    }
}
