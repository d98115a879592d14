//! The Python side: runs `tests/python/zae_driver.py` with the interpreter named by
//! `DYNALIMIT_PYTHON` against the same endpoint and table as the Rust side.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use dynalimit_tests::TestTable;
use serde_json::{Value, json};

/// The interpreter named by `DYNALIMIT_PYTHON` (see [`dynalimit_tests::zae::interpreter`]).
pub(crate) fn interpreter() -> Option<PathBuf> {
    dynalimit_tests::zae::interpreter()
}

/// A fresh table and a zae-limiter client for it, as `(table, python)`; returns from the calling
/// test (before starting any emulator) when no interpreter is configured outside CI.
macro_rules! shared_table {
    () => {
        match $crate::python::interpreter() {
            Some(interpreter) => {
                let table = dynalimit_tests::table().await;
                let python = $crate::python::Python::new(interpreter, &table);
                (table, python)
            }
            None => return,
        }
    };
}
pub(crate) use shared_table;

/// A zae-limiter client for one table.
#[derive(Debug, Clone)]
pub(crate) struct Python {
    interpreter: PathBuf,
    endpoint: String,
    stack: String,
}

/// What one driver operation answered.
pub(crate) type Outcome = Result<Value, DriverError>;

/// A Python exception raised by one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverError {
    /// The exception class name.
    pub(crate) kind: String,
    /// Its message.
    pub(crate) message: String,
}

impl Python {
    pub(crate) fn new(interpreter: PathBuf, table: &TestTable) -> Python {
        Python {
            interpreter,
            endpoint: dynalimit_tests::endpoint().url().to_string(),
            stack: table.name().to_string(),
        }
    }

    /// The same client, sending its requests to `endpoint` instead (a proxy in front of the
    /// table's endpoint).
    pub(crate) fn through(&self, endpoint: &str) -> Python {
        Python {
            endpoint: endpoint.to_owned(),
            ..self.clone()
        }
    }

    /// Runs `ops` in one driver process (an idle one, or a new one) connected to namespace
    /// `namespace`; one outcome per operation that ran (the run stops at the first error
    /// unless the op says `continue`).
    ///
    /// # Panics
    /// When the interpreter cannot run or the driver does not answer with its JSON document.
    pub(crate) async fn run(&self, namespace: &str, ops: Vec<Value>) -> Vec<Outcome> {
        let request = json!({
            "endpoint": self.endpoint,
            "stack": self.stack,
            "namespace": namespace,
            "ops": ops,
        });
        let interpreter = self.interpreter.clone();
        let doc = tokio::task::spawn_blocking(move || {
            let mut driver = Driver::take(&interpreter);
            let doc = driver.ask(&request);
            Driver::give_back(driver);
            doc
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        doc["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| match r.get("error") {
                Some(err) => Err(DriverError {
                    kind: err["type"].as_str().unwrap_or_default().to_string(),
                    message: format!(
                        "{}\n{}",
                        err["message"].as_str().unwrap_or_default(),
                        err["trace"].as_str().unwrap_or_default()
                    ),
                }),
                None => Ok(r["ok"].clone()),
            })
            .collect()
    }

    /// Runs `ops` and returns their values, panicking on the first Python error.
    pub(crate) async fn ok(&self, namespace: &str, ops: Vec<Value>) -> Vec<Value> {
        let wanted = ops.len();
        let outcomes = self.run(namespace, ops).await;
        let values: Vec<Value> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|e| panic!("zae-limiter raised {}: {}", e.kind, e.message)))
            .collect();
        assert_eq!(values.len(), wanted, "the driver stopped early");
        values
    }

    /// Runs one operation and returns its value.
    pub(crate) async fn one(&self, namespace: &str, op: Value) -> Value {
        self.ok(namespace, vec![op]).await.remove(0)
    }
}

/// Idle drivers of this test binary (all of the one interpreter `DYNALIMIT_PYTHON` names):
/// importing zae-limiter takes most of a short run's time, so a run takes an idle driver (or
/// starts one) and gives it back when answered. A driver holds no state between requests.
static IDLE: Mutex<Vec<Driver>> = Mutex::new(Vec::new());

/// One `zae_driver.py` process. It ends when its standard input closes: when this binary
/// exits, or when a driver that failed is dropped.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The last lines of its standard error.
    stderr: Arc<Mutex<VecDeque<String>>>,
}

/// Lines of a driver's standard error kept for a failure's message.
const STDERR_LINES: usize = 200;

impl Driver {
    /// An idle driver, or a new one of `interpreter`.
    fn take(interpreter: &Path) -> Driver {
        let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        idle.unwrap_or_else(|| Driver::start(interpreter))
    }

    fn give_back(driver: Driver) {
        IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(driver);
    }

    fn start(interpreter: &Path) -> Driver {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/zae_driver.py");
        let mut child = Command::new(interpreter)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", interpreter.display()));
        // What the driver writes to standard error (the aggregator's log lines among it): read
        // as it comes, so that a full pipe never stalls the driver; the last lines are kept for
        // a failure's message.
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let keep = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut kept = keep.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == STDERR_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Driver {
            stdin: child.stdin.take().expect("stdin"),
            stdout: BufReader::new(child.stdout.take().expect("stdout")),
            child,
            stderr,
        }
    }

    /// The driver's answer to `request`.
    ///
    /// # Panics
    /// When the driver does not answer with one JSON document on one line (the driver is then
    /// dropped, not given back).
    fn ask(&mut self, request: &Value) -> Value {
        let mut line = request.to_string();
        line.push('\n');
        let mut answer = String::new();
        let read = self
            .stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .and_then(|()| self.stdout.read_line(&mut answer));
        match read.map_err(|e| e.to_string()).and_then(|_| {
            serde_json::from_str::<Value>(&answer).map_err(|e| format!("{e}: {answer:?}"))
        }) {
            Ok(doc) => doc,
            Err(e) => {
                let status = self.child.try_wait().ok().flatten();
                let kept = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
                let stderr: Vec<&str> = kept.iter().map(String::as_str).collect();
                let stderr = stderr.join("\n");
                panic!("the Python driver did not answer ({e}; exit {status:?}); stderr:\n{stderr}")
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
