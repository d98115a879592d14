//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! Limits as code: a manifest of what a namespace's configuration levels hold, the change
//! set between it and the table, and its apply with the repository's writers.
//!
//! The same code serves `dynalimit limits plan|diff|apply --file F` and the provisioner
//! Lambda ([`provisioner`]), which applies a manifest when invoked directly or as a
//! CloudFormation custom resource ([`cfn`] reads its properties and writes the template
//! `dynalimit limits cfn-template` prints). `docs/limits-as-code.md` is the guide.
//!
//! A manifest is checked whole before the table is read ([`parse`]); [`run`] plans and, when
//! asked, applies.
//!
//! ```
//! let manifest = dynalimit_manifest::parse(
//!     "namespace: default\nresources:\n  gpt-4:\n    limits:\n      rpm: 100/min\n",
//! )
//! .unwrap();
//! assert_eq!(manifest.resources["gpt-4"].limits.len(), 1);
//! ```

pub mod apply;
pub mod cfn;
mod error;
mod lines;
pub mod model;
pub mod plan;
pub mod provisioner;
pub mod report;
pub mod spec;

pub use error::{ManifestError, Place};
pub use model::{EntityDecl, Level, Manifest, parse};
pub use report::{Action, AttributeChange, LevelChange, ManifestReport};

use dynalimit_repository::Repository;

/// Parses and checks a manifest for `namespace`: one that names another namespace is
/// refused ([`ManifestError::Namespace`]).
///
/// # Errors
/// The first thing wrong, with its line and path.
pub fn parse_for(text: &str, namespace: &str) -> Result<Manifest, ManifestError> {
    let manifest = parse(text)?;
    if let Some(ns) = &manifest.namespace
        && ns != namespace
    {
        let at = Place {
            line: lines::line_of(text, &[lines::Seg::Key("namespace".into())]),
            path: "namespace".into(),
        };
        return Err(ManifestError::Namespace {
            at,
            manifest: ns.clone(),
            command: namespace.to_owned(),
        });
    }
    Ok(manifest)
}

/// Plans `manifest` against the table of `repo` (with `full`, also removing the levels it
/// does not name) and, with `apply`, writes the change set.
///
/// What happens when an answer is lost: see [`apply::apply`]. Every writer is safe to run
/// again and each run plans afresh from the table, so running the same manifest again
/// finishes what a failed run left and otherwise changes nothing.
///
/// # Errors
/// A failed read or write ([`ManifestError::Repository`], naming the step).
pub async fn run(
    repo: &Repository,
    manifest: &Manifest,
    full: bool,
    apply: bool,
) -> Result<ManifestReport, ManifestError> {
    let planned = plan::plan(repo, manifest, full).await?;
    if apply {
        apply::apply(repo, &planned.steps).await?;
    }
    Ok(ManifestReport {
        namespace: repo.namespace_name().to_owned(),
        full,
        applied: apply && !planned.steps.is_empty(),
        changes: planned.steps.into_iter().map(|s| s.change).collect(),
        unchanged: planned.unchanged,
    })
}
