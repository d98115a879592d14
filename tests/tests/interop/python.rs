//! The Python side: runs `tests/python/zae_driver.py` with the interpreter named by
//! `DYNALIMIT_PYTHON` against the same endpoint and table as the Rust side.

use std::path::PathBuf;
use std::process::Stdio;

use dynalimit_tests::TestTable;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

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

    /// Runs `ops` in one Python process connected to namespace `namespace`; one outcome per
    /// operation that ran (the run stops at the first error unless the op says `continue`).
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
        let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/python/zae_driver.py");
        let mut child = tokio::process::Command::new(&self.interpreter)
            .arg(driver)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.interpreter.display()));
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(request.to_string().as_bytes())
            .await
            .expect("write the driver's request");
        drop(stdin);
        let out = child.wait_with_output().await.expect("driver output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "the Python driver did not answer ({}, {e}); stderr:\n{stderr}",
                out.status
            )
        });
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
