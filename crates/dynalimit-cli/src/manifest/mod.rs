//! Limits as code: `limits plan|diff|apply --file F [--full]` and `limits cfn-template`.
//!
//! The manifest, its change set and its apply are `dynalimit_manifest`'s, the code the
//! provisioner Lambda runs too. `plan` prints the change set; `diff` does the same and exits
//! 2 when there is one; `apply` writes it and prints what it changed. A manifest is checked
//! whole, with the line of anything refused, before the table is opened. `cfn-template`
//! prints the CloudFormation custom resource that has the stack's provisioner apply it.
//! `docs/limits-as-code.md` is the guide.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

pub(crate) use dynalimit_manifest::ManifestError;
pub(crate) use dynalimit_manifest::apply::{delete_level, set_cascade, set_disabled};
use dynalimit_manifest::{Manifest, cfn};

use crate::context::Global;
use crate::output::Format;
use crate::output::manifest::text;

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
fn load(path: &PathBuf, namespace: &str) -> Result<Manifest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(dynalimit_manifest::parse_for(&text, namespace)?)
}

/// A failed read or write as the repository's error under the step's context, where the
/// exit code looks for it.
fn failure(e: ManifestError) -> anyhow::Error {
    match e {
        ManifestError::Repository { step, source } => anyhow::Error::from(source).context(step),
        other => other.into(),
    }
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
    let report = dynalimit_manifest::run(&repo, &manifest, args.full, mode == Mode::Apply)
        .await
        .map_err(failure)?;
    match global.output {
        Format::Json => global.print(&report),
        Format::Table => {
            let verb = if mode == Mode::Diff { "Drift" } else { "Plan" };
            println!("{}", text(&report, verb));
        }
    }
    if mode == Mode::Diff && !report.changes.is_empty() {
        return Err(Drift(report.changes.len()).into());
    }
    Ok(())
}

/// The arguments of `limits cfn-template`.
#[derive(Debug, Args)]
pub(crate) struct TemplateArgs {
    /// The manifest (YAML), as for `limits apply`.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Apply in full on every deploy (`FullApply: true`), as `limits apply --full`.
    #[arg(long)]
    pub(crate) full: bool,
}

/// Prints the CloudFormation template whose custom resource applies the manifest through
/// the provisioner of the stack `--stack` (imported by its export), in namespace `-N`.
/// Reads nothing from AWS.
///
/// # Errors
/// A refused manifest, before anything is printed.
pub(crate) fn cfn_template(global: &Global, args: &TemplateArgs) -> Result<()> {
    let manifest = load(&args.file, &global.namespace)?;
    let template = cfn::template(&manifest, &global.stack, &global.namespace, args.full);
    print!("{}", serde_yaml_ng::to_string(&template)?);
    Ok(())
}
