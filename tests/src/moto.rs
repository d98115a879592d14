//! A private moto server (an AWS emulator with CloudFormation) for the deploy tests.
//!
//! moto is a Python package; `scripts/test` installs it into the virtualenv `.cache/venv` and
//! exports `DYNALIMIT_PYTHON_VENV` and `DYNALIMIT_REQUIRE_MOTO=1`. [`MotoServer::start`] looks
//! for `moto_server` in `$DYNALIMIT_PYTHON_VENV/bin`, then in the repository's `.cache/venv/bin`,
//! then on `PATH`, and starts it on a free loopback port; dropping the server stops it.
//!
//! When moto is not installed, [`MotoServer::start`] returns `None` after printing why, so a bare
//! `cargo test` skips the deploy tests; under `scripts/test` (`DYNALIMIT_REQUIRE_MOTO=1`) it
//! panics instead, so the gate cannot pass without them.
//!
//! With `DYNALIMIT_TEST_AWS_ENDPOINT` set (LocalStack, see `scripts/localstack`), no moto is
//! started: the deploy tests run against that endpoint, which must serve CloudFormation, S3 and
//! DynamoDB and must not hold the stacks they create.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dynalimit_local::free_port;

/// A running moto server on loopback (dropping it stops the process), or the endpoint of
/// `DYNALIMIT_TEST_AWS_ENDPOINT`.
#[derive(Debug)]
pub struct MotoServer {
    child: Option<Child>,
    url: String,
}

fn find_moto() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(venv) = std::env::var_os("DYNALIMIT_PYTHON_VENV").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(venv).join("bin").join("moto_server"));
    }
    candidates.push(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(".cache/venv/bin/moto_server"),
    );
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|p| p.join("moto_server")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// The events a rule of a moto EventBridge bus delivered to a queue ([`MotoServer::event_sink`]).
#[derive(Debug)]
pub struct EventSink {
    python: PathBuf,
    script: PathBuf,
    endpoint: String,
    queue: String,
}

impl EventSink {
    fn run(&self, command: &str, arg: &str) -> String {
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args([self.endpoint.as_str(), command, arg])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.python.display()));
        assert!(
            out.status.success(),
            "eventbridge_sink.py {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every event delivered since the last call, oldest first as the queue gives them (each
    /// the whole EventBridge envelope: `source`, `detail-type`, `detail`, …).
    ///
    /// # Panics
    /// When the queue cannot be read.
    pub fn drain(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.run("drain", &self.queue)).expect("a JSON array of events")
    }
}

impl MotoServer {
    /// Starts moto on a free loopback port, or returns `None` (printing the reason) when moto
    /// is not installed and `DYNALIMIT_REQUIRE_MOTO` is not set. With
    /// `DYNALIMIT_TEST_AWS_ENDPOINT` set, returns that endpoint and starts nothing.
    ///
    /// # Panics
    /// When moto is required but missing, or does not answer within 60 seconds.
    pub fn start() -> Option<MotoServer> {
        if let Some(url) = std::env::var("DYNALIMIT_TEST_AWS_ENDPOINT")
            .ok()
            .filter(|u| !u.is_empty())
        {
            return Some(MotoServer { child: None, url });
        }
        let program = Self::program()?;
        Some(Self::spawn(&program, &[]))
    }

    /// Starts moto enforcing IAM, with one user whose policy allows every action but
    /// `denied` (`cloudformation:DescribeStacks`, …), which AWS then refuses with its own
    /// answer (`AccessDenied`, status 403). Returns the server and the user's access key id
    /// and secret; `None` as [`MotoServer::start`], and also with `DYNALIMIT_TEST_AWS_ENDPOINT`
    /// (an endpoint whose IAM the test does not control).
    ///
    /// The user is made with the Python of moto's virtualenv (boto3) while moto still answers
    /// its first three requests unauthenticated.
    ///
    /// # Panics
    /// As [`MotoServer::start`], and when the user cannot be made.
    pub fn start_denying(denied: &[&str]) -> Option<(MotoServer, (String, String))> {
        if std::env::var("DYNALIMIT_TEST_AWS_ENDPOINT").is_ok_and(|u| !u.is_empty()) {
            eprintln!("skipped: IAM is enforced only on a private moto server");
            return None;
        }
        let program = Self::program()?;
        let python = program.with_file_name("python");
        assert!(python.is_file(), "no python beside {}", program.display());
        let server = Self::spawn(&program, &[("INITIAL_NO_AUTH_ACTION_COUNT", "3")]);
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [
                { "Effect": "Allow", "Action": "*", "Resource": "*" },
                { "Effect": "Deny", "Action": denied, "Resource": "*" },
            ],
        });
        let script = "import boto3, sys\n\
            iam = boto3.client('iam', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
                               aws_access_key_id='setup', aws_secret_access_key='setup')\n\
            iam.create_user(UserName='operator')\n\
            iam.put_user_policy(UserName='operator', PolicyName='p', PolicyDocument=sys.argv[2])\n\
            key = iam.create_access_key(UserName='operator')['AccessKey']\n\
            print(key['AccessKeyId'], key['SecretAccessKey'])\n";
        let out = Command::new(&python)
            .args(["-c", script, server.url(), &policy.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        let mut words = text.split_whitespace();
        match (out.status.success(), words.next(), words.next()) {
            (true, Some(id), Some(secret)) => Some((server, (id.to_owned(), secret.to_owned()))),
            _ => panic!(
                "cannot make the IAM user: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Routes the events of source `dynalimit` on EventBridge bus `bus` (created unless it is
    /// `default`) to a new SQS queue, with the Python of moto's virtualenv (boto3; the
    /// workspace has no SQS client): what a test reads of the alerts the aggregator publishes.
    ///
    /// # Panics
    /// When moto's Python is missing or the bus, queue or rule cannot be made.
    pub fn event_sink(&self, bus: &str) -> EventSink {
        let python = find_moto()
            .map(|p| p.with_file_name("python"))
            .filter(|p| p.is_file())
            .expect("the Python of moto's virtualenv");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/eventbridge_sink.py");
        let sink = EventSink {
            python,
            script,
            endpoint: self.url.clone(),
            queue: String::new(),
        };
        let queue = sink.run("create", bus).trim().to_owned();
        EventSink { queue, ..sink }
    }

    /// `moto_server`, or `None` (printing why) when it is missing and not required.
    fn program() -> Option<PathBuf> {
        let Some(program) = find_moto() else {
            let message = "moto_server not found: run ./scripts/test (it installs moto into \
                           .cache/venv) or set DYNALIMIT_PYTHON_VENV to a virtualenv with \
                           moto[server]";
            if std::env::var("DYNALIMIT_REQUIRE_MOTO").is_ok_and(|v| v == "1") {
                panic!("{message}");
            }
            eprintln!("skipped: {message}");
            return None;
        };
        Some(program)
    }

    /// Starts `program` on a free loopback port with `env` and waits until it answers.
    fn spawn(program: &std::path::Path, env: &[(&str, &str)]) -> MotoServer {
        let port = free_port().expect("free port");
        let child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        // Owned by the server from here on, so a panic below still stops the process.
        let mut server = MotoServer {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..600 {
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                panic!("moto_server exited during start-up ({status})");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("moto_server did not answer on port {port} within 60 s");
    }

    /// The endpoint URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The SDK configuration of this server: its endpoint, static local credentials,
    /// `us-east-1`.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&self.url)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(dynalimit_repository::aws::local_credentials())
            .load()
            .await
    }

    /// A DynamoDB client of this server.
    pub async fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk_config().await)
    }

    /// An S3 client of this server (path-style addressing).
    pub async fn s3(&self) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&self.sdk_config().await)
                .force_path_style(true)
                .build(),
        )
    }

    /// Whether table `name` exists and is protected against deletion; `None` when it does not
    /// exist.
    ///
    /// # Panics
    /// When DynamoDB fails otherwise.
    pub async fn table_protection(&self, name: &str) -> Option<bool> {
        match self
            .dynamodb()
            .await
            .describe_table()
            .table_name(name)
            .send()
            .await
        {
            Ok(out) => Some(
                out.table
                    .and_then(|t| t.deletion_protection_enabled)
                    .unwrap_or(false),
            ),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                None
            }
            Err(e) => panic!("DescribeTable {name}: {e:?}"),
        }
    }

    /// Drops a table a deleted stack retained, the way its owner would: deletion protection
    /// off, then `DeleteTable`.
    ///
    /// # Panics
    /// When either request fails.
    pub async fn drop_retained_table(&self, name: &str) {
        let client = self.dynamodb().await;
        client
            .update_table()
            .table_name(name)
            .deletion_protection_enabled(false)
            .send()
            .await
            .unwrap_or_else(|e| panic!("UpdateTable {name}: {e:?}"));
        client
            .delete_table()
            .table_name(name)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DeleteTable {name}: {e:?}"));
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
