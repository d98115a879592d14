//! The output of `limits plan|diff|apply --file F`: the change set of `dynalimit_manifest`.

pub(crate) use dynalimit_manifest::{Action, ManifestReport};

/// The text form: one line per level (`+` create, `~` update, `-` delete), one per
/// attribute under it, and a summary.
pub(crate) fn text(report: &ManifestReport, verb: &str) -> String {
    let mut out = Vec::new();
    for c in &report.changes {
        let sign = match c.action {
            Action::Create => '+',
            Action::Update => '~',
            Action::Delete => '-',
        };
        out.push(format!("{sign} {}", super::escape(&c.level)));
        for a in &c.attributes {
            let side = |v: &Option<String>| {
                v.as_deref()
                    .map_or_else(|| "(none)".to_owned(), |s| super::escape(s).into_owned())
            };
            out.push(format!(
                "    {}: {} -> {}",
                super::escape(&a.attribute),
                side(&a.before),
                side(&a.after)
            ));
        }
    }
    let count = |action| report.changes.iter().filter(|c| c.action == action).count();
    let (created, updated, deleted) = (
        count(Action::Create),
        count(Action::Update),
        count(Action::Delete),
    );
    let unchanged = report.unchanged;
    let summary = if report.changes.is_empty() {
        format!("No changes: the table matches the manifest ({unchanged} unchanged).")
    } else if report.applied {
        format!(
            "Applied: {created} created, {updated} updated, {deleted} deleted, \
             {unchanged} unchanged."
        )
    } else {
        format!(
            "{verb}: {created} to create, {updated} to update, {deleted} to delete, \
             {unchanged} unchanged."
        )
    };
    if !out.is_empty() {
        out.push(String::new());
    }
    out.push(summary);
    out.join("\n")
}
