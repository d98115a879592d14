//! Every published crate builds from its own package: a file it embeds (`include_str!`,
//! `include_bytes!`) lies inside the crate's directory, where `cargo package` takes it from.

use std::path::Path;

use super::source::{PACKAGES, root};

/// `(file, embedded path)` of every `include_str!` / `include_bytes!` below `dir`.
fn embeds(dir: &Path, out: &mut Vec<(std::path::PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            embeds(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            for macro_name in ["include_str!(\"", "include_bytes!(\""] {
                for (at, _) in text.match_indices(macro_name) {
                    let rest = &text[at + macro_name.len()..];
                    let embedded = rest.split('"').next().unwrap_or_default();
                    out.push((path.clone(), embedded.to_owned()));
                }
            }
        }
    }
}

/// `path` with `.` and `..` resolved without following links.
pub(crate) fn lexical(path: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn embedded_files_lie_inside_their_crate() {
    let root = root();
    let mut outside = Vec::new();
    let mut seen = 0;
    for package in PACKAGES.iter().filter(|p| **p != "tests") {
        let crate_dir = root.join(package).canonicalize().expect("the crate");
        let mut found = Vec::new();
        embeds(&crate_dir.join("src"), &mut found);
        for (file, embedded) in found {
            seen += 1;
            let target = file.parent().expect("a directory").join(&embedded);
            let Ok(real) = target.canonicalize() else {
                outside.push(format!("{}: {embedded} does not exist", file.display()));
                continue;
            };
            // A path that leaves the crate, even through a link back into it, is not in the
            // package: check the path as written and where it leads.
            let lexical_inside = lexical(&target).starts_with(&crate_dir);
            if !real.starts_with(&crate_dir) || !lexical_inside {
                outside.push(format!("{}: {embedded}", file.display()));
            }
        }
    }
    assert!(
        seen >= 3,
        "the template and the LocalStack files are embedded"
    );
    assert!(
        outside.is_empty(),
        "embedded from outside the crate:\n{}",
        outside.join("\n")
    );
}
