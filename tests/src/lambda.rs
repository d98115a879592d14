//! The aggregator's `bootstrap` run the way Lambda runs it, without Docker.
//!
//! [`CargoLambda::build_aggregator`] takes the host build of the `dynalimit-aggregator` binary
//! that `scripts/test`'s workspace build made (named by [`BOOTSTRAP_VAR`]), or else builds it
//! with cargo-lambda (`cargo lambda build`, linking with the zig it bundles, as
//! `scripts/build-lambda` packages it), and
//! [`RuntimeApi::start`] starts cargo-lambda's Lambda Runtime API emulator (`cargo lambda
//! watch --only-lambda-apis`): it serves the Runtime API to a separately started process — the
//! `bootstrap`, see [`Function::spawn`] — and accepts invocations on the Lambda `Invoke` path,
//! answering with what the function returned.
//!
//! cargo-lambda is a Python package; `scripts/test` installs it into
//! `.cache/cargo-lambda-venv` and exports `DYNALIMIT_CARGO_LAMBDA` (the program) and
//! `DYNALIMIT_REQUIRE_CARGO_LAMBDA=1`. [`CargoLambda::find`] looks at `$DYNALIMIT_CARGO_LAMBDA`,
//! then the repository's `.cache/cargo-lambda-venv/bin`, then `PATH`. When it is missing, a bare
//! `cargo test` skips (printing why); with `DYNALIMIT_REQUIRE_CARGO_LAMBDA=1` or `CI` set, it
//! is a failure.
//!
//! The binary is built for the host's architecture, because the emulator runs it here. Built by
//! cargo-lambda, it goes to its own target directory, `target/lambda-test`, which later runs
//! find already built.

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dynalimit_core::{Clock, SystemClock};
use dynalimit_local::free_port;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The variable naming a prebuilt host binary of the aggregator to run instead of building one.
pub const BOOTSTRAP_VAR: &str = "DYNALIMIT_AGGREGATOR_BOOTSTRAP";

/// The emulator's name for the one function it serves to an external process.
pub const FUNCTION_NAME: &str = "_";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test kit lives in the workspace")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .map(|d| {
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        })
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn required() -> bool {
    std::env::var("DYNALIMIT_REQUIRE_CARGO_LAMBDA").is_ok_and(|v| v == "1")
        || std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The cargo-lambda program.
#[derive(Debug, Clone)]
pub struct CargoLambda {
    program: PathBuf,
}

impl CargoLambda {
    /// Finds cargo-lambda, or returns `None` (printing the reason) when it is not installed
    /// and neither `DYNALIMIT_REQUIRE_CARGO_LAMBDA=1` nor `CI` is set.
    ///
    /// # Panics
    /// When cargo-lambda is required but missing.
    pub fn find() -> Option<CargoLambda> {
        let mut candidates = Vec::new();
        if let Some(p) = std::env::var_os("DYNALIMIT_CARGO_LAMBDA").filter(|v| !v.is_empty()) {
            candidates.push(PathBuf::from(p));
        }
        candidates.push(workspace_root().join(".cache/cargo-lambda-venv/bin/cargo-lambda"));
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path).map(|p| p.join("cargo-lambda")));
        }
        if let Some(program) = candidates.into_iter().find(|p| p.is_file()) {
            return Some(CargoLambda { program });
        }
        let message = "cargo-lambda not found: run ./scripts/test (it installs cargo-lambda into \
                       .cache/cargo-lambda-venv) or set DYNALIMIT_CARGO_LAMBDA to the program";
        if required() {
            panic!("{message}");
        }
        eprintln!("skipped: {message}");
        None
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        // cargo-lambda finds the zig of its own virtualenv on PATH.
        let dir = self.program.parent().map(Path::to_path_buf);
        let path = std::env::var_os("PATH").unwrap_or_default();
        let paths = dir.into_iter().chain(std::env::split_paths(&path));
        cmd.env(
            "PATH",
            std::env::join_paths(paths).expect("PATH entries are joinable"),
        );
        cmd.arg("lambda").current_dir(workspace_root());
        cmd
    }

    /// The aggregator's `bootstrap` for the host's architecture: the binary named by
    /// `$DYNALIMIT_AGGREGATOR_BOOTSTRAP` when set (`scripts/test` names the host build of the
    /// `dynalimit-aggregator` binary that its workspace test build has just made, so the
    /// aggregator is not compiled a second time), else built with cargo-lambda (once per
    /// process). Returns its path.
    ///
    /// # Panics
    /// When the named binary does not exist, the host is neither x86_64 nor aarch64, or the
    /// build fails (with its output).
    pub fn build_aggregator(&self) -> PathBuf {
        static BUILT: OnceLock<PathBuf> = OnceLock::new();
        BUILT
            .get_or_init(|| {
                if let Some(given) = std::env::var_os(BOOTSTRAP_VAR).filter(|v| !v.is_empty()) {
                    let given = PathBuf::from(given);
                    assert!(
                        given.is_file(),
                        "{BOOTSTRAP_VAR} names {}, which is not a file",
                        given.display()
                    );
                    return given;
                }
                let arch = match std::env::consts::ARCH {
                    "x86_64" => "--x86-64",
                    "aarch64" => "--arm64",
                    other => panic!("no Lambda architecture for a {other} host"),
                };
                let target = target_dir().join("lambda-test");
                let lambda_dir = target.join("lambda");
                let started = SystemClock.epoch_millis();
                let out = self
                    .command()
                    .args(["build", arch, "--locked", "-p", "dynalimit-aggregator"])
                    .args(["--bin", "dynalimit-aggregator", "--lambda-dir"])
                    .arg(&lambda_dir)
                    .env("CARGO_TARGET_DIR", &target)
                    .stdin(Stdio::null())
                    .output()
                    .expect("cargo-lambda runs");
                assert!(
                    out.status.success(),
                    "cargo lambda build failed ({}):\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                eprintln!(
                    "built the aggregator's bootstrap with cargo-lambda in {:.1} s",
                    (SystemClock.epoch_millis() - started) as f64 / 1000.0
                );
                let bootstrap = lambda_dir.join("dynalimit-aggregator").join("bootstrap");
                assert!(bootstrap.is_file(), "no {}", bootstrap.display());
                bootstrap
            })
            .clone()
    }
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &Path) {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited during start-up ({status}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} did not answer on port {port} within 60 s");
}

/// A fresh log file under `target/tmp`, named after `name`, this process and a counter.
fn log_file(name: &str) -> (PathBuf, File) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = target_dir().join("tmp");
    std::fs::create_dir_all(&dir).expect("target/tmp");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{name}-{}-{n}.log", std::process::id()));
    let file = File::create(&path).expect("log file");
    (path, file)
}

/// cargo-lambda's Lambda Runtime API emulator on a loopback port. Dropping it stops it.
#[derive(Debug)]
pub struct RuntimeApi {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl RuntimeApi {
    /// Starts `cargo lambda watch --only-lambda-apis` on a free loopback port.
    ///
    /// # Panics
    /// When it does not start or does not answer within 60 seconds.
    pub fn start(cargo_lambda: &CargoLambda) -> RuntimeApi {
        let port = free_port().expect("free port");
        let (log, file) = log_file("runtime-api");
        let mut child = cargo_lambda
            .command()
            .args([
                "watch",
                "--only-lambda-apis",
                "--invoke-address",
                "127.0.0.1",
            ])
            .args(["--invoke-port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("cargo lambda watch starts");
        wait_for_port(port, &mut child, "cargo lambda watch", &log);
        RuntimeApi { child, port, log }
    }

    /// The variables Lambda gives a function process to find its Runtime API, as the emulator
    /// prints them, with `memory_mb` for the function's memory.
    pub fn runtime_environment(&self, memory_mb: &str) -> Vec<(String, String)> {
        [
            (
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{}/.rt", self.port),
            ),
            ("AWS_LAMBDA_FUNCTION_NAME", FUNCTION_NAME.to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1".to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Invokes the function with `payload` (the Lambda `Invoke` API) and returns the HTTP
    /// status and the JSON it answered.
    ///
    /// # Panics
    /// When the emulator does not answer within two minutes or the answer is not JSON.
    pub async fn invoke(&self, payload: &Value) -> (u16, Value) {
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let request = Request::post(format!(
            "http://127.0.0.1:{}/2015-03-31/functions/{FUNCTION_NAME}/invocations",
            self.port
        ))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(payload.to_string())))
        .expect("request");
        let response = tokio::time::timeout(Duration::from_secs(120), client.request(request))
            .await
            .expect("the invocation answers within two minutes")
            .expect("the emulator answers");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("response body")
            .to_bytes();
        let value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "invocation answer is not JSON ({e}): {}\nemulator log:\n{}",
                String::from_utf8_lossy(&body),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        });
        (status, value)
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A function process (the `bootstrap`) polling a [`RuntimeApi`]. Dropping it stops it.
#[derive(Debug)]
pub struct Function {
    child: Child,
    log: PathBuf,
}

impl Function {
    /// Starts `bootstrap` with exactly `env` (nothing inherited), its standard output and
    /// error going to a log file.
    ///
    /// # Panics
    /// When the program cannot be started.
    pub fn spawn(bootstrap: &Path, env: &[(String, String)]) -> Function {
        let (log, file) = log_file("bootstrap");
        let child = Command::new(bootstrap)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bootstrap.display()));
        Function { child, log }
    }

    /// Everything the process wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status, when the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request a [`ResponseCatcher`] received.
#[derive(Debug, Clone)]
pub struct Caught {
    /// `PUT`, …
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The `Content-Type` header, when sent.
    pub content_type: Option<String>,
    /// The body, as JSON (`Null` when it is not JSON).
    pub body: Value,
    /// The status it was answered with.
    pub status: u16,
}

/// A loopback HTTP server standing in for CloudFormation's pre-signed response URL: it
/// records every request and answers 200, or 500 to the next requests it is told to
/// refuse (an answer the custom resource cannot deliver). Dropping it stops it.
#[derive(Debug)]
pub struct ResponseCatcher {
    port: u16,
    caught: std::sync::Arc<std::sync::Mutex<Vec<Caught>>>,
    refuse: std::sync::Arc<AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl ResponseCatcher {
    /// Starts it on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> ResponseCatcher {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let port = listener.local_addr().expect("address").port();
        let caught = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let refuse = std::sync::Arc::new(AtomicU32::new(0));
        let (c, r) = (caught.clone(), refuse.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (c, r) = (c.clone(), r.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let (head, body_start) = loop {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break (String::from_utf8_lossy(&buf[..at]).into_owned(), at + 4);
                        }
                    };
                    let mut lines = head.lines();
                    let mut first = lines.next().unwrap_or_default().split(' ');
                    let method = first.next().unwrap_or_default().to_owned();
                    let path = first.next().unwrap_or_default().to_owned();
                    let mut length = 0usize;
                    let mut content_type = None;
                    for line in lines {
                        if let Some((k, v)) = line.split_once(':') {
                            match k.trim().to_ascii_lowercase().as_str() {
                                "content-length" => length = v.trim().parse().unwrap_or(0),
                                "content-type" => content_type = Some(v.trim().to_owned()),
                                _ => {}
                            }
                        }
                    }
                    let mut body = buf[body_start..].to_vec();
                    while body.len() < length {
                        let Ok(n) = stream.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            break;
                        }
                        body.extend_from_slice(&chunk[..n]);
                    }
                    let refused = r
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    let status = if refused { 500 } else { 200 };
                    c.lock().expect("caught").push(Caught {
                        method,
                        path,
                        content_type,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                        status,
                    });
                    let reason = if refused {
                        "Internal Server Error"
                    } else {
                        "OK"
                    };
                    let _ = stream
                        .write_all(
                            format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                                .as_bytes(),
                        )
                        .await;
                });
            }
        });
        ResponseCatcher {
            port,
            caught,
            refuse,
            task,
        }
    }

    /// A URL of this server, with `path` (which should start with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers the next `n` requests with 500.
    pub fn refuse_next(&self, n: u32) {
        self.refuse.store(n, Ordering::SeqCst);
    }

    /// Every request received so far.
    pub fn caught(&self) -> Vec<Caught> {
        self.caught.lock().expect("caught").clone()
    }
}

impl Drop for ResponseCatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The variables that point a function process at the test kit's DynamoDB endpoint: the
/// endpoint itself, with the static local credentials on an emulator, or the caller's `AWS_*`
/// settings otherwise.
pub fn endpoint_environment() -> Vec<(String, String)> {
    let url = crate::endpoint().url();
    let mut env = vec![("AWS_ENDPOINT_URL".to_owned(), url.to_owned())];
    if dynalimit_repository::aws::is_loopback(url) {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "dynalimit"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
            ("AWS_REGION", "us-east-1"),
        ] {
            env.push((k.to_owned(), v.to_owned()));
        }
    } else {
        env.extend(
            std::env::vars().filter(|(k, _)| k.starts_with("AWS_") && k != "AWS_ENDPOINT_URL"),
        );
    }
    env
}
