//! The crate graph: each crate depends only on crates of lower layers (so the graph has no
//! cycle and the layers in ARCHITECTURE.md hold), `dynalimit-core` compiles no async runtime,
//! and every crate a service should not depend on says so in its manifest and its docs.

use std::collections::BTreeMap;

use crate::source;

/// The workspace's crates, lowest layer first. A crate may depend (normal and build
/// dependencies) on crates of lower layers only.
const LAYERS: &[&[&str]] = &[
    &["dynalimit-core"],
    &["dynalimit-format", "dynalimit-memory", "dynalimit-local"],
    &["dynalimit-wire", "dynalimit-stack"],
    &["dynalimit-repository"],
    &["dynalimit", "dynalimit-manifest"],
    &["dynalimit-demo", "dynalimit-aggregator"],
    &["dynalimit-cli", "dynalimit-tests"],
];

/// The crates a service or an operator uses directly; every other crate is internal.
/// `dynalimit-memory` is test support a service adds as a dev-dependency.
const PUBLIC: &[&str] = &[
    "dynalimit",
    "dynalimit-memory",
    "dynalimit-cli",
    "dynalimit-demo",
    "dynalimit-tests",
];

/// What an internal crate's description and crate documentation begin with.
const INTERNAL: &str = "Internal to dynalimit, no stable API";

struct Package {
    manifest: std::path::PathBuf,
    description: String,
    lib: Option<std::path::PathBuf>,
    /// Our crates it depends on, normal or build, with the kind (`normal`, `build`, `dev`).
    ours: Vec<(String, String)>,
    /// Every dependency, with the kind.
    all: Vec<(String, String)>,
}

fn packages() -> BTreeMap<String, Package> {
    let metadata = source::metadata();
    let mut packages = BTreeMap::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a name").to_owned();
        let mut ours = Vec::new();
        let mut all = Vec::new();
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().expect("a name").to_owned();
            let kind = dep["kind"].as_str().unwrap_or("normal").to_owned();
            if dep["path"].is_string() {
                ours.push((dep_name.clone(), kind.clone()));
            }
            all.push((dep_name, kind));
        }
        let lib = package["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "lib"))
            })
            .map(|t| std::path::PathBuf::from(t["src_path"].as_str().expect("a root")));
        packages.insert(
            name,
            Package {
                manifest: package["manifest_path"].as_str().expect("a path").into(),
                description: package["description"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                lib,
                ours,
                all,
            },
        );
    }
    packages
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&name))
}

#[test]
fn each_crate_depends_only_on_lower_layers() {
    let packages = packages();
    let mut wrong = Vec::new();
    for (name, package) in &packages {
        let Some(layer) = layer_of(name) else {
            wrong.push(format!("{name} is in no layer of LAYERS"));
            continue;
        };
        for (dep, kind) in &package.ours {
            if kind == "dev" {
                continue;
            }
            match layer_of(dep) {
                Some(below) if below < layer => {}
                _ => wrong.push(format!("{name} (layer {layer}) depends on {dep}")),
            }
        }
    }
    for layer in LAYERS {
        for name in *layer {
            if !packages.contains_key(*name) {
                wrong.push(format!("LAYERS names {name}, which is no workspace crate"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_transport_knows_no_data_plane() {
    let packages = packages();
    let wire = &packages["dynalimit-wire"];
    let ours: Vec<&str> = wire
        .ours
        .iter()
        .filter(|(_, kind)| kind != "dev")
        .map(|(d, _)| d.as_str())
        .collect();
    assert_eq!(ours, ["dynalimit-core", "dynalimit-format"]);
}

#[test]
fn core_depends_on_no_async_runtime() {
    let packages = packages();
    let core = &packages["dynalimit-core"];
    let runtime: Vec<_> = core
        .all
        .iter()
        .filter(|(dep, kind)| kind != "dev" && dep.starts_with("tokio"))
        .collect();
    assert!(
        runtime.is_empty(),
        "{} depends on {runtime:?}",
        core.manifest.display()
    );
}

/// The first line of a crate root's documentation (`//!`).
fn first_doc_line(root: &std::path::Path) -> String {
    let text = std::fs::read_to_string(root).expect("a crate root");
    text.lines()
        .find_map(|l| l.strip_prefix("//!"))
        .map(|l| l.trim().to_owned())
        .unwrap_or_default()
}

#[test]
fn internal_crates_say_so_and_public_ones_do_not() {
    let packages = packages();
    let mut wrong = Vec::new();
    for (name, package) in &packages {
        let public = PUBLIC.contains(&name.as_str());
        let described = package.description.starts_with(INTERNAL)
            && package
                .description
                .contains("Services depend on `dynalimit`");
        let documented = package
            .lib
            .as_deref()
            .is_some_and(|root| first_doc_line(root).starts_with(INTERNAL));
        if public && (package.description.contains(INTERNAL) || documented) {
            wrong.push(format!("{name} is public but says it is internal"));
        }
        if !public && !described {
            wrong.push(format!(
                "{name}: the description must begin \"{INTERNAL}\" and say \"Services depend on `dynalimit`\""
            ));
        }
        if !public && package.lib.is_some() && !documented {
            wrong.push(format!(
                "{name}: the crate documentation must begin \"{INTERNAL}\""
            ));
        }
    }
    for name in PUBLIC {
        if !packages.contains_key(*name) {
            wrong.push(format!("PUBLIC names {name}, which is no workspace crate"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
