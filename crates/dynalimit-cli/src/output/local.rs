//! The output of `local up|down|status|env|logs`.

use std::collections::BTreeMap;

use serde::Serialize;

/// The local environment's state, by `status`. `local status` prints `pid`, `endpoint` and
/// `answering` while DynamoDB Local runs; `local up` prints `pid`, `endpoint` and `table`
/// (LocalStack: `endpoint` only); `local down` prints the `pid` it stopped, if any.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Local {
    /// Running.
    Running {
        /// DynamoDB Local's process id; absent for LocalStack.
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// The endpoint URL to point the CLI and services at.
        endpoint: String,
        /// `local status`: whether it answers on its port now; absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        answering: Option<bool>,
        /// `local up`: the table it created (or found); absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        table: Option<String>,
    },
    /// Not running.
    Stopped {
        /// `local down`: the process id it stopped; absent when nothing was running.
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
}

/// `local env` with `--output json` (the table form prints `export NAME=VALUE` lines).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LocalEnv {
    /// The endpoint of the running environment.
    pub(crate) endpoint: String,
    /// The variables, by name: `DYNALIMIT_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`
    /// (LocalStack: `AWS_ENDPOINT_URL`), `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub(crate) variables: BTreeMap<String, String>,
}

/// `local logs` with `--output json` (the table form prints the lines).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LocalLog {
    /// The log file of DynamoDB Local.
    pub(crate) file: String,
    /// Its last lines, oldest first.
    pub(crate) lines: Vec<String>,
}
