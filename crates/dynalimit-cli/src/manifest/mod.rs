//! Limits as code: `limits plan|diff|apply --file F [--full]`.
//!
//! A manifest (`model`) says what a namespace's configuration levels hold. `plan` reads the
//! table and computes the change set (`plan`); `diff` does the same and exits 2 when there
//! is one; `apply` writes it with the repository's writers (`apply`) and prints what it
//! changed. A manifest is checked whole, with the line of anything refused, before the table
//! is opened. `docs/limits-as-code.md` is the guide.

mod apply;
mod lines;
mod model;
mod plan;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

pub(crate) use apply::{delete_level, set_cascade, set_disabled};
pub(crate) use model::ManifestError;

use crate::context::Global;
use crate::output::Format;
use crate::output::manifest::ManifestReport;

/// The arguments of `limits plan|diff|apply`.
#[derive(Debug, Args)]
pub(crate) struct ManifestArgs {
    /// The manifest (YAML): system, resource and entity levels, in dynalimit's or
    /// zae-limiter's form.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Also remove the levels the table holds that the manifest does not name.
    #[arg(long)]
    pub(crate) full: bool,
}

/// Which of the three commands runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Print the change set.
    Plan,
    /// Print it and exit 2 when there is one.
    Diff,
    /// Write it.
    Apply,
}

/// `limits diff` found the table different from the manifest (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("drift: {0} level(s) of the table differ from the manifest")]
pub(crate) struct Drift(pub(crate) usize);

/// Marks any failure of `limits diff` (exit code 1, so that 2 means drift alone).
#[derive(Debug, thiserror::Error)]
#[error("limits diff")]
pub(crate) struct DiffFailed;

/// Reads and checks the manifest at `path` for the namespace `namespace`.
fn load(path: &PathBuf, namespace: &str) -> Result<model::Manifest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let manifest = model::parse(&text)?;
    if let Some(ns) = &manifest.namespace
        && ns != namespace
    {
        let at = model::Place {
            line: lines::line_of(&text, &[lines::Seg::Key("namespace".into())]),
            path: "namespace".into(),
        };
        return Err(ManifestError::Namespace {
            at,
            manifest: ns.clone(),
            command: namespace.to_owned(),
        }
        .into());
    }
    Ok(manifest)
}

/// Runs `limits plan|diff|apply`.
///
/// # Errors
/// A refused manifest ([`ManifestError`], before the table is opened), a failed read or
/// write, [`Drift`] for `diff` when the table differs; under `diff` every failure other
/// than drift is wrapped in [`DiffFailed`].
pub(crate) async fn run(global: &Global, mode: Mode, args: &ManifestArgs) -> Result<()> {
    let result = run_mode(global, mode, args).await;
    match (mode, result) {
        (Mode::Diff, Err(e)) if !e.is::<Drift>() => Err(e.context(DiffFailed)),
        (_, result) => result,
    }
}

async fn run_mode(global: &Global, mode: Mode, args: &ManifestArgs) -> Result<()> {
    let manifest = load(&args.file, &global.namespace)?;
    let repo = match mode {
        Mode::Apply => global.writer().await?,
        Mode::Plan | Mode::Diff => global.reader().await?,
    };
    let planned = plan::plan(&repo, &manifest, args.full).await?;
    if mode == Mode::Apply {
        apply::apply(&repo, &planned.steps).await?;
    }
    let report = ManifestReport {
        namespace: global.namespace.clone(),
        full: args.full,
        applied: mode == Mode::Apply && !planned.steps.is_empty(),
        changes: planned.steps.into_iter().map(|s| s.change).collect(),
        unchanged: planned.unchanged,
    };
    match global.output {
        Format::Json => global.print(&report),
        Format::Table => {
            let verb = if mode == Mode::Diff { "Drift" } else { "Plan" };
            println!("{}", report.text(verb));
        }
    }
    if mode == Mode::Diff && !report.changes.is_empty() {
        return Err(Drift(report.changes.len()).into());
    }
    Ok(())
}
