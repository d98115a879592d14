//! The README and the guide name only what exists. In the hand-written Markdown pages (the
//! README, the guide in `docs/`, `BENCHMARKS.md`, and the READMEs of `examples/` and
//! `localstack/`):
//!
//! - a test named in code, `TARGET::module::test` (`suite::engine`, `interop::{a,b}`,
//!   `suite::engine::hard_case_38_…`), or `module::tests::…` for a unit test, resolves: the test
//!   target exists, each module is declared and has its file (or is inline), and a last segment
//!   that is no module is a function (a trailing `…` or `*` makes it a prefix);
//! - a path in code (`tests/tests/permissions`, `scripts/build-lambda`) exists;
//! - a relative link leads to a file, and its `#anchor` to a heading of that file;
//! - a `cargo` command's package (`-p`), example, test target, binary, features and `--path`
//!   exist.
//!
//! Every guide chapter with Rust samples is also a doc test of the test kit (`tests/src/lib.rs`),
//! so the samples compile in the test command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::source::{self, relative, root};

/// The first directories of the repository's own paths: a path in code that starts with one of
/// these names a file of the repository (others, such as `target/` or `.cache/`, are made by a
/// run).
const TOP_DIRS: &[&str] = &[
    "crates",
    "tests",
    "scripts",
    "examples",
    "infra",
    "localstack",
    "docs",
    "lambda",
];

/// Generated pages, checked by their own tests.
const GENERATED: &[&str] = &["docs/cli-output.md"];

/// The hand-written Markdown pages checked, relative to the root.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut out = vec![
        PathBuf::from("README.md"),
        PathBuf::from("BENCHMARKS.md"),
        PathBuf::from("localstack/README.md"),
    ];
    for dir in ["docs", "examples"] {
        let mut found = Vec::new();
        markdown_below(&root.join(dir), &mut found);
        for file in found {
            let rel = file
                .strip_prefix(&root)
                .expect("below the root")
                .to_path_buf();
            if !GENERATED.iter().any(|g| Path::new(g) == rel) {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

fn markdown_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_below(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// A Markdown page split into what the checks read.
#[derive(Default)]
struct Page {
    /// Inline code spans, with line breaks read as spaces.
    spans: Vec<String>,
    /// Fenced code blocks: the info string and the lines (continuations joined).
    blocks: Vec<(String, Vec<String>)>,
    /// Link targets outside code.
    links: Vec<String>,
    /// Heading anchors, as GitHub makes them.
    anchors: BTreeSet<String>,
}

fn parse_page(text: &str) -> Page {
    let mut page = Page::default();
    let mut prose = String::new();
    let mut block: Option<(String, Vec<String>)> = None;
    let mut slugs: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match block.take() {
                Some((info, lines)) => page.blocks.push((info, join_continuations(&lines))),
                None => block = Some((info.trim().to_owned(), Vec::new())),
            }
            prose.push('\n');
            continue;
        }
        if let Some((_, lines)) = &mut block {
            lines.push(line.to_owned());
            continue;
        }
        if let Some(heading) = trimmed.strip_prefix('#') {
            let heading = heading.trim_start_matches('#').trim();
            let slug = slug(heading);
            let seen = slugs.entry(slug.clone()).or_insert(0);
            page.anchors.insert(if *seen == 0 {
                slug
            } else {
                format!("{slug}-{seen}")
            });
            *seen += 1;
        }
        prose.push_str(line);
        prose.push('\n');
    }
    // Inline code, then links in what is left.
    let mut rest = String::new();
    let mut parts = prose.split('`');
    rest.push_str(parts.next().unwrap_or_default());
    let mut in_code = true;
    for part in parts {
        if in_code {
            page.spans
                .push(part.split_whitespace().collect::<Vec<_>>().join(" "));
        } else {
            rest.push_str(part);
        }
        in_code = !in_code;
    }
    for (at, _) in rest.match_indices("](") {
        let target = &rest[at + 2..];
        if let Some(end) = target.find(')') {
            page.links.push(target[..end].trim().to_owned());
        }
    }
    page
}

/// Lines of a shell block with `\` continuations joined.
fn join_continuations(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in lines {
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// GitHub's anchor of a heading: the text without markup, lower case, punctuation dropped,
/// spaces as hyphens.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    // Links keep their text.
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The workspace's packages as `cargo metadata` lists them.
struct Package {
    dir: PathBuf,
    /// `(kind, name)` → root file.
    targets: BTreeMap<(String, String), PathBuf>,
    features: BTreeSet<String>,
}

fn workspace() -> BTreeMap<String, Package> {
    let metadata = source::metadata();
    let mut packages = BTreeMap::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let manifest = PathBuf::from(package["manifest_path"].as_str().expect("a manifest"));
        let mut targets = BTreeMap::new();
        for target in package["targets"].as_array().expect("targets") {
            let name = target["name"].as_str().expect("a name").to_owned();
            let root_file = PathBuf::from(target["src_path"].as_str().expect("a root"));
            for kind in target["kind"].as_array().expect("kinds") {
                let kind = kind.as_str().expect("a kind").to_owned();
                targets.insert((kind, name.clone()), root_file.clone());
            }
        }
        let features = package["features"]
            .as_object()
            .expect("features")
            .keys()
            .cloned()
            .collect();
        packages.insert(
            package["name"].as_str().expect("a name").to_owned(),
            Package {
                dir: manifest.parent().expect("a directory").to_path_buf(),
                targets,
                features,
            },
        );
    }
    packages
}

/// The test targets of the workspace by name (`suite` → `tests/tests/suite/main.rs`).
fn test_targets(packages: &BTreeMap<String, Package>) -> BTreeMap<String, PathBuf> {
    packages
        .values()
        .flat_map(|p| &p.targets)
        .filter(|((kind, _), _)| kind == "test")
        .map(|((_, name), file)| (name.clone(), file.clone()))
        .collect()
}

/// The test references a code span holds: `a::b::c` of snake-case segments (braces expanded),
/// whose first segment is a test target or which passes through a `tests` module.
fn test_references(span: &str, targets: &BTreeMap<String, PathBuf>) -> Vec<Vec<String>> {
    if !span.contains("::") || span.contains(' ') {
        return Vec::new();
    }
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    for segment in span.split("::") {
        let alternatives: Vec<&str> = match segment.strip_prefix('{') {
            Some(inner) => inner.trim_end_matches('}').split(',').collect(),
            None => vec![segment],
        };
        let snake = |s: &str| {
            let s = s.trim_end_matches(['…', '*']);
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if !alternatives.iter().all(|a| snake(a.trim())) {
            return Vec::new();
        }
        paths = paths
            .into_iter()
            .flat_map(|p| {
                alternatives.iter().map(move |a| {
                    let mut p = p.clone();
                    p.push(a.trim().to_owned());
                    p
                })
            })
            .collect();
    }
    paths
        .into_iter()
        .filter(|p| targets.contains_key(&p[0]) || p[1..].iter().any(|s| s == "tests"))
        .collect()
}

/// How a module is declared: in a file of its own (`mod name;`) or inline (`mod name {`).
enum Declared {
    File,
    Inline,
}

/// How `text` declares the module `name`, if it does.
fn declared(text: &str, name: &str) -> Option<Declared> {
    text.lines().find_map(|l| {
        let l = l.trim();
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        let rest = l.strip_prefix("mod ")?.strip_prefix(name)?.trim_start();
        match rest.chars().next() {
            Some(';') => Some(Declared::File),
            Some('{') => Some(Declared::Inline),
            _ => None,
        }
    })
}

/// Whether `text` defines a function called `name` (or, for a prefix, starting with it).
fn defines_function(text: &str, name: &str, prefix: bool) -> bool {
    text.match_indices("fn ").any(|(at, _)| {
        let rest = &text[at + 3..];
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let boundary = at == 0 || !text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        boundary
            && if prefix {
                ident.starts_with(name)
            } else {
                ident == name
            }
    })
}

/// Follows `segments` from the module file `file` (`crate_root`: its child modules lie beside
/// it). `Err` says which segment does not resolve.
fn resolve(file: &Path, crate_root: bool, segments: &[String]) -> Result<(), String> {
    let Some((segment, rest)) = segments.split_first() else {
        return Ok(());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", relative(file)))?;
    let prefix = segment.ends_with(['…', '*']);
    let name = segment.trim_end_matches(['…', '*']);
    if !prefix {
        let beside = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("main.rs" | "lib.rs" | "mod.rs")
        ) || crate_root;
        let dir = if beside {
            file.parent().expect("a directory").to_path_buf()
        } else {
            file.with_extension("")
        };
        match declared(&text, name) {
            Some(Declared::File) => {
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(name).join("mod.rs");
                let child = if flat.is_file() { flat } else { nested };
                return resolve(&child, false, rest);
            }
            Some(Declared::Inline) => return resolve(file, crate_root, rest),
            None => {}
        }
    }
    if rest.is_empty() && defines_function(&text, name, prefix) {
        return Ok(());
    }
    Err(format!(
        "{} has no module or function `{segment}`",
        relative(file)
    ))
}

/// Module files named `name` in the workspace's sources (`decide` → `…/decide.rs`).
fn module_files(name: &str, packages: &BTreeMap<String, Package>) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == name) && path.join("mod.rs").is_file() {
                    out.push(path.join("mod.rs"));
                }
                walk(&path, name, out);
            } else if path
                .file_name()
                .is_some_and(|n| *n == *format!("{name}.rs"))
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for package in packages.values() {
        walk(&package.dir.join("src"), name, &mut out);
    }
    out
}

/// Checks one test reference; `Err` says why it does not resolve.
fn check_test(
    reference: &[String],
    targets: &BTreeMap<String, PathBuf>,
    packages: &BTreeMap<String, Package>,
) -> Result<(), String> {
    if let Some(root_file) = targets.get(&reference[0]) {
        return resolve(root_file, true, &reference[1..]);
    }
    let files = module_files(&reference[0], packages);
    if files.is_empty() {
        return Err(format!("no module file named `{}`", reference[0]));
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| resolve(f, false, &reference[1..]).err())
        .collect();
    if failures.len() < files.len() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// The repository paths a piece of code names (`scripts/test`, `./scripts/test`,
/// `tests/tests/interop`); not those a run makes (`target/…`) or placeholders (`<arch>`).
fn paths_in(code: &str) -> Vec<String> {
    let boundary =
        |c: Option<char>| c.is_none_or(|c| matches!(c, ' ' | '"' | '\'' | '(' | '=' | '\t'));
    let mut out = Vec::new();
    for (at, _) in code.char_indices() {
        let before = &code[..at];
        let starts = boundary(before.chars().next_back())
            || before
                .strip_suffix("./")
                .is_some_and(|b| boundary(b.chars().next_back()));
        if !starts {
            continue;
        }
        let rest = &code[at..];
        let Some(top) = TOP_DIRS.iter().find(|d| {
            rest.strip_prefix(*d)
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_alphanumeric()))
        }) else {
            continue;
        };
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
            .collect();
        let next = rest[path.len()..].chars().next();
        let path = path.trim_end_matches(['.', '/']).to_owned();
        if path.len() > top.len() + 1 && !matches!(next, Some('<' | '{' | '*')) {
            out.push(path);
        }
    }
    out
}

/// The problems of the `cargo` commands in `line`.
fn check_cargo(line: &str, packages: &BTreeMap<String, Package>) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    let mut seen = 0;
    let words: Vec<&str> = line.split_whitespace().collect();
    for (at, _) in words.iter().enumerate().filter(|(_, w)| **w == "cargo") {
        let Some(sub) = words.get(at + 1) else {
            continue;
        };
        if !matches!(
            *sub,
            "run" | "test" | "build" | "bench" | "check" | "clippy" | "install"
        ) {
            continue;
        }
        seen += 1;
        let mut args = Vec::new();
        for word in &words[at + 2..] {
            if matches!(*word, "--" | "|" | "&&" | ";" | "#") || word.starts_with('#') {
                break;
            }
            args.push(word.trim_end_matches([')', '`', ';']));
        }
        let value = |flags: &[&str]| -> Vec<&str> {
            args.windows(2)
                .filter(|w| flags.contains(&w[0]))
                .map(|w| w[1])
                .collect()
        };
        let package = value(&["-p", "--package"]).first().copied();
        let in_package = match package {
            Some(name) => match packages.get(name) {
                Some(p) => vec![p],
                None => {
                    problems.push(format!("`{line}`: no package {name}"));
                    continue;
                }
            },
            None => packages.values().collect(),
        };
        for (flag, kind) in [
            ("--example", "example"),
            ("--test", "test"),
            ("--bin", "bin"),
        ] {
            for name in value(&[flag]) {
                let found = in_package
                    .iter()
                    .any(|p| p.targets.contains_key(&(kind.to_owned(), name.to_owned())));
                if !found {
                    problems.push(format!("`{line}`: no {kind} target {name}"));
                }
            }
        }
        if let (Some(name), [p]) = (package, in_package.as_slice()) {
            for list in value(&["--features", "-F"]) {
                for feature in list.trim_matches(['"', '\'']).split(',') {
                    if !p.features.contains(feature) {
                        problems.push(format!("`{line}`: {name} has no feature {feature}"));
                    }
                }
            }
        }
        for path in value(&["--path"]) {
            if !root().join(path).is_dir() {
                problems.push(format!("`{line}`: no directory {path}"));
            }
        }
    }
    (seen, problems)
}

/// What the check found, counted so that it cannot pass by reading nothing.
#[derive(Default, Debug)]
struct Counts {
    tests: usize,
    paths: usize,
    links: usize,
    cargo: usize,
}

#[test]
fn the_readme_and_the_guide_name_only_what_exists() {
    let root = root();
    let packages = workspace();
    let targets = test_targets(&packages);
    let mut problems = Vec::new();
    let mut counts = Counts::default();
    let mut pages = BTreeMap::new();
    for document in documents() {
        let text = std::fs::read_to_string(root.join(&document)).expect("a page");
        pages.insert(document, parse_page(&text));
    }
    for (document, page) in &pages {
        let name = document.display();
        for span in &page.spans {
            for reference in test_references(span, &targets) {
                counts.tests += 1;
                if let Err(why) = check_test(&reference, &targets, &packages) {
                    problems.push(format!("{name}: test `{}`: {why}", reference.join("::")));
                }
            }
        }
        let code = page.spans.iter().cloned().chain(
            page.blocks
                .iter()
                .flat_map(|(_, lines)| lines.iter().cloned()),
        );
        for code in code {
            for path in paths_in(&code) {
                counts.paths += 1;
                if !root.join(&path).exists() {
                    problems.push(format!("{name}: `{path}` does not exist"));
                }
            }
            let (seen, found) = check_cargo(&code, &packages);
            counts.cargo += seen;
            problems.extend(found.into_iter().map(|p| format!("{name}: {p}")));
        }
        let dir = document.parent().unwrap_or(Path::new(""));
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            counts.links += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                document.clone()
            } else {
                super::packaging::lexical(&dir.join(file))
            };
            if !root.join(&target).exists() {
                problems.push(format!("{name}: link {link}: no {}", target.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let anchors = match pages.get(&target) {
                Some(page) => page.anchors.clone(),
                None if target.extension().is_some_and(|e| e == "md") => {
                    parse_page(&std::fs::read_to_string(root.join(&target)).expect("a page"))
                        .anchors
                }
                None => continue,
            };
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{name}: link {link}: {} has no heading #{anchor}",
                    target.display()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the docs name what does not exist (write tests as TARGET::module::test, items with \
         their crate, e.g. `dynalimit::tower::Charge`):\n{}",
        problems.join("\n")
    );
    assert!(
        counts.tests >= 50 && counts.paths >= 20 && counts.links >= 20 && counts.cargo >= 10,
        "the check reads the references: {counts:?}"
    );
}

#[test]
fn a_renamed_test_or_module_is_caught() {
    let packages = workspace();
    let targets = test_targets(&packages);
    let check = |span: &str| {
        let references = test_references(span, &targets);
        assert!(!references.is_empty(), "{span} is read as a test reference");
        references
            .iter()
            .map(|r| check_test(r, &targets, &packages))
            .collect::<Result<Vec<()>, String>>()
    };
    // The real names resolve…
    check("suite::operations::a_lost_answer_of_a_reset_is_applied_once").expect("a test");
    check("suite::engine::hard_case_38_…").expect("a prefix");
    check("interop::{buckets,config}").expect("modules");
    check("decide::tests::quotas").expect("a unit-test module");
    // …and names one letter off do not.
    for wrong in [
        "suite::operation",
        "suite::operations::a_lost_answer_of_a_reset_is_applied_twice",
        "suite::engine::hard_case_99_…",
        "interop::{buckets,configs}",
        "decide::tests::quota",
    ] {
        assert!(check(wrong).is_err(), "{wrong} resolves");
    }
    // A first segment that is no test target is no test reference.
    assert!(test_references("suites::engine", &targets).is_empty());
    // Items are not tests: a type, a path with a crate in front.
    assert!(test_references("tower::Charge", &targets).is_empty());
    assert!(test_references("dynalimit::metrics", &targets).is_empty());
    // Paths and commands.
    assert_eq!(
        paths_in("DYNALIMIT_PYTHON=\"$(./scripts/python-env | tail -1)\" target/lambda/x"),
        ["scripts/python-env"]
    );
    let (seen, problems) = check_cargo(
        "cargo run -p dynalimit --features tower,nope --example llm_gateways -- --seconds 3",
        &packages,
    );
    assert_eq!(seen, 1);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(
        slug("Side by side with zae-limiter 0.17"),
        "side-by-side-with-zae-limiter-017"
    );
    assert_eq!(slug("A service's own tests"), "a-services-own-tests");
}

#[test]
fn the_guide_s_rust_samples_are_doc_tests() {
    let root = root();
    let kit = std::fs::read_to_string(root.join("tests/src/lib.rs")).expect("the test kit");
    let mut samples = 0;
    for document in documents() {
        let text = std::fs::read_to_string(root.join(&document)).expect("a page");
        let page = parse_page(&text);
        let included = kit.contains(&format!("include_str!(\"../../{}\")", document.display()));
        for (info, _) in &page.blocks {
            let rust = info.split([',', ' ']).next() == Some("rust");
            samples += usize::from(rust);
            assert!(
                !rust || included,
                "{} has Rust samples: include it as a doc test in tests/src/lib.rs",
                document.display()
            );
            // rustdoc compiles a block without a language as Rust.
            assert!(
                !included || !info.is_empty(),
                "{}: a code block without a language",
                document.display()
            );
        }
    }
    assert!(samples >= 5, "the guide has Rust samples: {samples}");
}
