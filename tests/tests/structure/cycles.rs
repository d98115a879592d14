//! No import cycles between the files of one crate.
//!
//! File `a` depends on file `b` when `a` names an item that `b` defines or re-exports with a
//! path (`use`, or `crate::…`, `super::…`, `self::…` in code). A `pub use` re-export is followed
//! to the file that defines the item; one that leads out of the crate is no dependency. `mod`
//! declarations are not dependencies, and test-only code is not read. A cycle is a set of
//! files that reach each other along these edges; the test prints the edges inside each one
//! with the paths that create them.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;
use syn::{UseTree, Visibility};

use crate::source::{self, ModuleFile};

type Module = Vec<String>;

/// What one file names.
#[derive(Default)]
struct Names {
    /// Paths of `use` items (flattened, each with the name it binds).
    uses: Vec<(Vec<String>, String, bool)>,
    /// `crate::`, `super::` and `self::` paths in code.
    paths: Vec<Vec<String>>,
}

fn flatten(tree: &UseTree, prefix: &mut Vec<String>, public: bool, out: &mut Names) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, public, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let mut path = prefix.clone();
            let name = n.ident.to_string();
            if name != "self" {
                path.push(name.clone());
            }
            let bound = if name == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.uses.push((path, bound, public));
        }
        UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.uses.push((path, r.rename.to_string(), public));
        }
        UseTree::Glob(_) => out.uses.push((prefix.clone(), "*".to_owned(), public)),
        UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, public, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Names {
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let public = !matches!(u.vis, Visibility::Inherited);
        flatten(&u.tree, &mut Vec::new(), public, self);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if p.leading_colon.is_none()
            && segments.len() > 1
            && matches!(segments[0].as_str(), "crate" | "super" | "self")
        {
            self.paths.push(segments);
        }
        syn::visit::visit_path(self, p);
    }
}

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Internal(Module),
    External,
}

struct Graph {
    modules: BTreeSet<Module>,
    /// Per module: re-exported name → the path it re-exports.
    reexports: BTreeMap<Module, BTreeMap<String, Vec<String>>>,
}

impl Graph {
    /// The module a path written in `from` leads to.
    fn resolve(&self, from: &Module, path: &[String], depth: usize) -> Option<Target> {
        let first = path.first()?;
        if depth > 16 {
            return None;
        }
        let (mut base, rest): (Module, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "super" | "self" => {
                let mut base = from.clone();
                let mut rest = path;
                while let Some(seg) = rest.first() {
                    match seg.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                (base, rest)
            }
            _ => {
                let mut child = from.clone();
                child.push(first.clone());
                if self.modules.contains(&child) {
                    (from.clone(), path)
                } else if self
                    .reexports
                    .get(from)
                    .is_some_and(|r| r.contains_key(first.as_str()))
                {
                    // A name brought in by a `use` of this file (followed below).
                    (from.clone(), path)
                } else {
                    return Some(Target::External);
                }
            }
        };
        let mut i = 0;
        while i < rest.len() {
            let mut child = base.clone();
            child.push(rest[i].clone());
            if !self.modules.contains(&child) {
                break;
            }
            base = child;
            i += 1;
        }
        if let Some(name) = rest.get(i)
            && let Some(target) = self.reexports.get(&base).and_then(|r| r.get(name))
            && &base != from
        {
            return self.resolve(&base, target, depth + 1);
        }
        Some(Target::Internal(base))
    }
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The file-level dependency edges of a unit, each with the paths that create it.
fn edges_of(files: &[ModuleFile]) -> BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> {
    let mut names = BTreeMap::new();
    let mut graph = Graph {
        modules: files.iter().map(|f| f.path.clone()).collect(),
        reexports: BTreeMap::new(),
    };
    for f in files {
        let mut n = Names::default();
        n.visit_file(&f.ast);
        let mut bound = BTreeMap::new();
        for (path, name, _) in &n.uses {
            if name != "*" {
                bound.insert(name.clone(), path.clone());
            }
        }
        graph.reexports.insert(f.path.clone(), bound);
        names.insert(f.path.clone(), n);
    }
    let mut edges: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> = BTreeMap::new();
    for f in files {
        let n = &names[&f.path];
        let from = edges.entry(f.path.clone()).or_default();
        let written = n
            .uses
            .iter()
            .map(|(p, _, _)| p.clone())
            .chain(n.paths.iter().cloned());
        for path in written {
            if let Some(Target::Internal(to)) = graph.resolve(&f.path, &path, 0)
                && to != f.path
            {
                from.entry(to).or_default().insert(path.join("::"));
            }
        }
    }
    edges
}

fn display(module: &Module) -> String {
    std::iter::once("crate")
        .chain(module.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("::")
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let mut report = Vec::new();
    let mut units = 0;
    for unit in source::units() {
        let files = source::modules(&unit);
        let edges = edges_of(&files);
        units += 1;
        let plain: BTreeMap<Module, BTreeSet<Module>> = edges
            .iter()
            .map(|(k, v)| (k.clone(), v.keys().cloned().collect()))
            .collect();
        for cycle in cycles(&plain) {
            report.push(format!("{}:", unit.name));
            for from in &cycle {
                for (to, why) in &edges[from] {
                    if cycle.contains(to) {
                        report.push(format!(
                            "  {} -> {} via {:?}",
                            display(from),
                            display(to),
                            why
                        ));
                    }
                }
            }
        }
    }
    assert!(units >= 10, "only {units} crates were read");
    assert!(
        report.is_empty(),
        "import cycles between files:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_checker_finds_a_cycle_and_follows_re_exports() {
    let file = |path: &[&str], text: &str| ModuleFile {
        path: path.iter().map(|s| (*s).to_owned()).collect(),
        file: std::path::PathBuf::from(path.join("/")),
        ast: source::parse_str(text).expect("parses"),
    };
    let m = |path: &[&str]| -> Module { path.iter().map(|s| (*s).to_owned()).collect() };
    // `a` re-exports `b::B`; `c` uses it through `a` (an edge to `b`, not `a`), and `b`
    // uses `c::C`: a cycle between b and c, while `a` stays out of it.
    let files = [
        file(&[], "mod a; mod c;"),
        file(&["a"], "mod b; pub use b::B; pub use std::fmt::Debug;"),
        file(
            &["a", "b"],
            "pub struct B; fn f() -> crate::c::C { todo!() }",
        ),
        file(
            &["c"],
            "use crate::a::B; use crate::a::Debug; pub struct C(B);",
        ),
    ];
    let edges = edges_of(&files);
    assert!(edges[&m(&["c"])].contains_key(&m(&["a", "b"])));
    assert!(
        !edges[&m(&["c"])].contains_key(&m(&["a"])),
        "a re-export out of the crate is no edge"
    );
    let plain = edges
        .iter()
        .map(|(k, v)| (k.clone(), v.keys().cloned().collect()))
        .collect();
    assert_eq!(cycles(&plain), vec![vec![m(&["a", "b"]), m(&["c"])]]);
    // Test-only code is not read.
    let files = [
        file(&[], "mod a; mod b;"),
        file(&["a"], "use crate::b::B; pub struct A;"),
        file(
            &["b"],
            "pub struct B; #[cfg(test)] mod tests { use crate::a::A; }",
        ),
    ];
    let plain = edges_of(&files)
        .iter()
        .map(|(k, v)| (k.clone(), v.keys().cloned().collect()))
        .collect();
    assert!(cycles(&plain).is_empty());
}
