//! The installed zae-limiter 0.17 of `DYNALIMIT_PYTHON`: the interpreter, and files of the
//! package as installed in its site-packages (its CloudFormation template), for the suites that
//! check dynalimit against zae-limiter's own code and stack.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The interpreter named by `DYNALIMIT_PYTHON`, resolved against the workspace root when
/// relative. `None` (after printing that the caller is skipped and why) when it is unset
/// outside CI.
///
/// # Panics
/// When it is unset and `CI` is set, or when it names no file.
pub fn interpreter() -> Option<PathBuf> {
    let Some(python) = std::env::var_os("DYNALIMIT_PYTHON").filter(|p| !p.is_empty()) else {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "DYNALIMIT_PYTHON is not set: this test needs a Python with zae-limiter 0.17.0; run \
             ./scripts/test (which sets it up) or DYNALIMIT_PYTHON=\"$(./scripts/python-env | \
             tail -1)\" cargo test -p dynalimit-tests"
        );
        eprintln!(
            "skipped: DYNALIMIT_PYTHON is not set (./scripts/python-env prints the interpreter \
             to use)"
        );
        return None;
    };
    let mut path = PathBuf::from(python);
    if path.is_relative() {
        path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path);
    }
    assert!(
        path.is_file(),
        "DYNALIMIT_PYTHON={} is not a file; run ./scripts/python-env",
        path.display()
    );
    Some(path)
}

/// The directory of the `zae_limiter` package `python` imports (found without importing it).
///
/// # Panics
/// When the interpreter cannot run or has no `zae_limiter`.
pub fn package_dir(python: &std::path::Path) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.util as u; print(u.find_spec('zae_limiter').submodule_search_locations[0])",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "{} has no zae_limiter: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// zae-limiter's own CloudFormation template (`zae_limiter/infra/cfn_template.yaml` of the
/// installed package) as JSON, in the form of [`crate::template::template`]; `None` (after
/// printing why) as [`interpreter`].
///
/// # Panics
/// As [`interpreter`] and [`package_dir`], and when the file is missing or not YAML.
pub fn template() -> Option<Value> {
    let python = interpreter()?;
    let path = package_dir(&python).join("infra").join("cfn_template.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    Some(crate::template::parse(&text))
}
