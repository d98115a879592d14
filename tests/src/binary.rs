//! Running the workspace's binaries as a user runs them, with nothing inherited from the
//! machine that tells them where to go: each test says it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The environment variables that tell dynalimit's binaries where to go: their own endpoint,
/// table and namespace, and the standard AWS endpoint, profile and region settings.
pub const SETTINGS: [&str; 8] = [
    "DYNALIMIT_ENDPOINT_URL",
    "DYNALIMIT_STACK",
    "DYNALIMIT_NAMESPACE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
];

/// A command for `program` that inherits none of [`SETTINGS`].
pub fn without_settings(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    for var in SETTINGS {
        c.env_remove(var);
    }
    c
}

/// Like [`without_settings`], and also without the environment's AWS credentials, the user's
/// shared config and credentials files (an empty file stands in for both) and the instance
/// metadata service: only what the test sets applies.
pub fn without_aws(program: impl AsRef<OsStr>) -> Command {
    let mut c = without_settings(program);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        c.env_remove(var);
    }
    let none = empty_file();
    c.env("AWS_CONFIG_FILE", none)
        .env("AWS_SHARED_CREDENTIALS_FILE", none)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    c
}

/// An empty file of this process under the system's temporary directory.
fn empty_file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("dynalimit-tests-{}-empty", std::process::id()));
        std::fs::write(&path, "").expect("an empty file in the temporary directory");
        path
    })
}
