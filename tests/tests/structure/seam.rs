//! The acquire's seam: the limiter of the `dynalimit` crate reaches the table's algorithm only
//! through the repository's `acquire` module (the engine), never through `bucket`, and no crate
//! but the repository itself names `bucket::decide`, the pure planning of the bucket writes
//! (the test kit reaches it through the feature `test-support`).

use std::collections::BTreeSet;

use syn::visit::Visit;
use syn::{UseTree, visit};

use crate::source;

/// Every path a file names: `use` trees, flattened, and paths in code.
#[derive(Default)]
struct Paths(BTreeSet<String>);

fn flatten(tree: &UseTree, prefix: &mut Vec<String>, out: &mut BTreeSet<String>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.insert(path.join("::"));
        }
        UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.insert(path.join("::"));
        }
        UseTree::Glob(_) => {
            out.insert(format!("{}::*", prefix.join("::")));
        }
        UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        flatten(&u.tree, &mut Vec::new(), &mut self.0);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let joined: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.0.insert(joined.join("::"));
        visit::visit_path(self, p);
    }
}

/// The paths each library and binary of `package` names outside its tests, with the file.
fn named_by(package: &str) -> Vec<(String, String)> {
    let mut named = Vec::new();
    for unit in source::units().iter().filter(|u| u.package == package) {
        for module in source::modules(unit) {
            let mut paths = Paths::default();
            paths.visit_file(&module.ast);
            let file = module.file.display().to_string();
            named.extend(paths.0.into_iter().map(|p| (file.clone(), p)));
        }
    }
    named
}

/// Whether `path` names `prefix` or something below it.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{prefix}::"))
}

#[test]
fn the_limiter_reaches_the_table_only_through_the_engine() {
    let bucket: Vec<_> = named_by("crates/dynalimit")
        .into_iter()
        .filter(|(_, p)| under(p, "dynalimit_repository::bucket"))
        .collect();
    assert!(
        bucket.is_empty(),
        "dynalimit names the repository's bucket module (its seam is `acquire`): {bucket:#?}"
    );
    let engine = named_by("crates/dynalimit")
        .into_iter()
        .filter(|(_, p)| under(p, "dynalimit_repository::acquire"))
        .count();
    assert!(engine > 0, "dynalimit reaches the engine through `acquire`");
}

#[test]
fn no_crate_but_the_repository_plans_bucket_writes() {
    let mut wrong = Vec::new();
    for package in source::PACKAGES
        .iter()
        .filter(|p| !["crates/dynalimit-repository", "tests"].contains(p))
    {
        wrong.extend(
            named_by(package)
                .into_iter()
                .filter(|(_, p)| under(p, "dynalimit_repository::bucket::decide")),
        );
    }
    assert!(wrong.is_empty(), "bucket::decide named by {wrong:#?}");
}

#[test]
fn the_checker_sees_use_trees_and_paths_in_code() {
    let ast = source::parse_str(
        "use dynalimit_repository::bucket::{decide::{Plan, plan_create}, BucketKey};\n\
         fn f() { let _ = dynalimit_repository::acquire::Engine::new; }",
    )
    .expect("parses");
    let mut paths = Paths::default();
    paths.visit_file(&ast);
    assert!(
        paths
            .0
            .contains("dynalimit_repository::bucket::decide::plan_create")
    );
    assert!(paths.0.contains("dynalimit_repository::bucket::BucketKey"));
    assert!(
        paths
            .0
            .contains("dynalimit_repository::acquire::Engine::new")
    );
    assert!(under("a::b::c", "a::b") && !under("a::bc", "a::b"));
}

/// Calls `f` on each of `items` and on the items of inline modules below them.
fn each_item(items: &[syn::Item], f: &mut impl FnMut(&syn::Item)) {
    for item in items {
        f(item);
        if let syn::Item::Mod(syn::ItemMod {
            content: Some((_, inner)),
            ..
        }) = item
        {
            each_item(inner, f);
        }
    }
}

/// Public type and variant names of `items` (and of inline modules below them).
fn public_names(items: &[syn::Item], out: &mut Vec<String>) {
    let public = |v: &syn::Visibility| matches!(v, syn::Visibility::Public(_));
    each_item(items, &mut |item| match item {
        syn::Item::Enum(e) if public(&e.vis) => {
            out.push(e.ident.to_string());
            out.extend(
                e.variants
                    .iter()
                    .map(|v| format!("{}::{}", e.ident, v.ident)),
            );
        }
        syn::Item::Struct(s) if public(&s.vis) => out.push(s.ident.to_string()),
        syn::Item::Type(t) if public(&t.vis) => out.push(t.ident.to_string()),
        syn::Item::Trait(t) if public(&t.vis) => out.push(t.ident.to_string()),
        _ => {}
    });
}

/// A refusal has one name a service meets: `Rejection` (and `Error::Rejected`, `Reason`, a
/// backing's `Outcome::Rejected`). No public type or variant of `dynalimit` spells it
/// otherwise.
#[test]
fn a_refusal_has_one_name_in_what_a_service_uses() {
    let mut names = Vec::new();
    for unit in source::units()
        .iter()
        .filter(|u| u.package == "crates/dynalimit")
    {
        for module in source::modules(unit) {
            public_names(&module.ast.items, &mut names);
        }
    }
    assert!(
        names.iter().any(|n| n == "Rejection"),
        "the names were read"
    );
    let forked: Vec<_> = names.iter().filter(|n| n.contains("Refus")).collect();
    assert!(forked.is_empty(), "a refusal spelled otherwise: {forked:?}");
}

/// The public methods of inherent impls in `items` (and in inline modules below them), with
/// their types.
fn public_methods(items: &[syn::Item], out: &mut Vec<String>) {
    each_item(items, &mut |item| {
        let syn::Item::Impl(block) = item else {
            return;
        };
        if block.trait_.is_some() {
            return;
        }
        let ty = match &*block.self_ty {
            syn::Type::Path(p) => p
                .path
                .segments
                .last()
                .map_or_else(String::new, |s| s.ident.to_string()),
            _ => String::new(),
        };
        for inner in &block.items {
            if let syn::ImplItem::Fn(f) = inner
                && matches!(f.vis, syn::Visibility::Public(_))
            {
                out.push(format!("{ty}::{}", f.sig.ident));
            }
        }
    });
}

/// One way to block: the blocking form of a type is the type of the same name in
/// `dynalimit::blocking`, with the same method names. No public method elsewhere says in its
/// name that it blocks (`acquire_blocking`, `blocking_acquire`), and each type with a
/// blocking form has it there.
#[test]
fn a_thread_blocks_only_through_the_blocking_module() {
    let mut methods = Vec::new();
    let mut blocking_types = Vec::new();
    for unit in source::units()
        .iter()
        .filter(|u| u.package == "crates/dynalimit")
    {
        for module in source::modules(unit) {
            if module.path.first().map(String::as_str) == Some("blocking") {
                public_names(&module.ast.items, &mut blocking_types);
            } else {
                public_methods(&module.ast.items, &mut methods);
            }
        }
    }
    assert!(
        methods.iter().any(|m| m.ends_with("::try_acquire")),
        "the methods were read: {methods:?}"
    );
    let named: Vec<_> = methods
        .iter()
        .filter(|m| m.to_lowercase().contains("blocking"))
        .collect();
    assert!(named.is_empty(), "blocking outside `blocking`: {named:?}");
    for ty in [
        "LimitSet",
        "LimitPool",
        "Repository",
        "RateLimiter",
        "Lease",
    ] {
        assert!(
            blocking_types.iter().any(|t| t == ty),
            "`dynalimit::blocking` has no {ty}: {blocking_types:?}"
        );
    }
}
