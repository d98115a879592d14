//! Reading the workspace's crates: their roots, their module files (found by following `mod`
//! declarations, so a file no crate declares is not read) and what is compiled only for tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use syn::{Attribute, ImplItem, Item};

/// The workspace's root directory.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test kit lives one level below the workspace root")
        .to_path_buf()
}

/// `cargo metadata` of the workspace's packages (`--no-deps`, as locked).
pub(crate) fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// One compilation unit: a library or a binary.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    /// `package` or `package (bin)`.
    pub(crate) name: String,
    /// The package's directory, relative to the workspace root.
    pub(crate) package: &'static str,
    /// Its root file (`src/lib.rs`, `src/main.rs`, `src/bin/….rs`).
    pub(crate) root: PathBuf,
}

/// The workspace's packages.
pub(crate) const PACKAGES: &[&str] = &[
    "crates/dynalimit-core",
    "crates/dynalimit-format",
    "crates/dynalimit-wire",
    "crates/dynalimit-repository",
    "crates/dynalimit-stack",
    "crates/dynalimit-local",
    "crates/dynalimit-memory",
    "crates/dynalimit",
    "crates/dynalimit-manifest",
    "crates/dynalimit-cli",
    "crates/dynalimit-demo",
    "lambda/aggregator",
    "tests",
];

/// Every library and binary of the workspace.
pub(crate) fn units() -> Vec<Unit> {
    let root = root();
    let mut units = Vec::new();
    for package in PACKAGES {
        let src = root.join(package).join("src");
        for (file, kind) in [("lib.rs", "lib"), ("main.rs", "bin")] {
            if src.join(file).is_file() {
                units.push(Unit {
                    name: format!("{package} ({kind})"),
                    package,
                    root: src.join(file),
                });
            }
        }
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            for bin in bins.flatten() {
                units.push(Unit {
                    name: format!("{package} ({})", bin.file_name().to_string_lossy()),
                    package,
                    root: bin.path(),
                });
            }
        }
    }
    assert!(
        units.len() > PACKAGES.len(),
        "every package was found under {}",
        root.display()
    );
    units
}

/// One module file of a unit.
pub(crate) struct ModuleFile {
    /// Module path inside the unit (`[]` for the root).
    pub(crate) path: Vec<String>,
    pub(crate) file: PathBuf,
    /// The file's items, test-only ones removed.
    pub(crate) ast: syn::File,
}

/// Parses `file`, leaving out test-only items.
pub(crate) fn parse(file: &Path) -> syn::File {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    parse_str(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()))
}

/// Parses Rust source, leaving out test-only items.
pub(crate) fn parse_str(text: &str) -> syn::Result<syn::File> {
    let mut ast = syn::parse_file(text)?;
    strip_tests(&mut ast.items);
    Ok(ast)
}

fn strip_tests(items: &mut Vec<Item>) {
    items.retain(|i| !test_only(item_attrs(i)));
    for item in items {
        match item {
            Item::Mod(m) => {
                if let Some((_, inner)) = &mut m.content {
                    strip_tests(inner);
                }
            }
            Item::Impl(i) => i
                .items
                .retain(|f| !matches!(f, ImplItem::Fn(f) if test_only(&f.attrs))),
            _ => {}
        }
    }
}

/// The unit's module files outside test-only code, from its root down its `mod` declarations.
pub(crate) fn modules(unit: &Unit) -> Vec<ModuleFile> {
    let mut out = Vec::new();
    let mut pending = vec![(Vec::new(), unit.root.clone())];
    while let Some((path, file)) = pending.pop() {
        let ast = parse(&file);
        // Where this file's child modules live: beside a root or `mod.rs`, else in a directory
        // named after the module.
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => file.parent().map(Path::to_path_buf),
            _ if path.is_empty() => file.parent().map(Path::to_path_buf),
            _ => Some(file.with_extension("")),
        }
        .expect("a source file has a directory");
        for item in &ast.items {
            if let Item::Mod(m) = item
                && m.content.is_none()
            {
                let name = m.ident.to_string();
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                let child = if flat.is_file() { flat } else { nested };
                assert!(
                    child.is_file(),
                    "module {name} of {} has no file",
                    file.display()
                );
                let mut child_path = path.clone();
                child_path.push(name);
                pending.push((child_path, child));
            }
        }
        out.push(ModuleFile { path, file, ast });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Whether an item is compiled only for tests: `#[cfg(test)]`, `#[test]`, `#[tokio::test]`.
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        if path.is_ident("test") || path.segments.last().is_some_and(|s| s.ident == "test") {
            return true;
        }
        if path.is_ident("cfg")
            && let Ok(list) = a.meta.require_list()
        {
            return list.tokens.to_string().trim() == "test";
        }
        false
    })
}

/// The attributes of an item.
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The path of `file` relative to the workspace root, for messages.
pub(crate) fn relative(file: &Path) -> String {
    file.strip_prefix(root())
        .unwrap_or(file)
        .display()
        .to_string()
}
