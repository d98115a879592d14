//! The global options every command shares, and the connections built from them.

use anyhow::Result;
use aws_config::SdkConfig;
use clap::Args;
use dynalimit_repository::stack::{self, StackManager};
use dynalimit_repository::{DEFAULT_NAMESPACE, DEFAULT_STACK, Repository, RepositoryBuilder};
use serde_json::Value;

use crate::output::{self, Format};

/// Options accepted by every command.
#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// Endpoint of DynamoDB (and CloudFormation), e.g. DynamoDB Local or LocalStack.
    #[arg(
        long,
        global = true,
        env = "DYNALIMIT_ENDPOINT_URL",
        value_name = "URL"
    )]
    pub(crate) endpoint_url: Option<String>,

    /// AWS region (default: the AWS configuration's, else us-east-1).
    #[arg(long, global = true, env = "AWS_REGION")]
    pub(crate) region: Option<String>,

    /// Stack name, which is also the table name.
    #[arg(long, global = true, env = "DYNALIMIT_STACK", default_value = DEFAULT_STACK)]
    pub(crate) stack: String,

    /// Namespace the command works in.
    #[arg(short = 'N', long, global = true, env = "DYNALIMIT_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub(crate) namespace: String,

    /// Output format.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub(crate) output: Format,
}

impl Global {
    fn builder(&self) -> RepositoryBuilder {
        let mut b = Repository::builder()
            .stack(self.stack.clone())
            .namespace(self.namespace.clone())
            .principal("dynalimit-cli");
        if let Some(url) = &self.endpoint_url {
            b = b.endpoint_url(url.clone());
        }
        if let Some(region) = &self.region {
            b = b.region(region.clone());
        }
        b
    }

    /// A repository for commands that write: registers the namespace when needed. A missing
    /// table is created only on an emulator (`--endpoint-url`); on AWS, deploy the stack first.
    pub(crate) async fn writer(&self) -> Result<Repository> {
        Ok(self
            .builder()
            .create_table(self.endpoint_url.is_some())
            .open()
            .await?)
    }

    /// A repository for commands that only read: the table and namespace must exist.
    pub(crate) async fn reader(&self) -> Result<Repository> {
        Ok(self.builder().connect().await?)
    }

    /// The AWS settings for `--endpoint-url` and `--region`.
    pub(crate) async fn sdk_config(&self) -> SdkConfig {
        stack::sdk_config(self.endpoint_url.as_deref(), self.region.as_deref()).await
    }

    /// The stack manager for `--stack`.
    pub(crate) async fn stacks(&self) -> StackManager {
        self.stacks_with(&self.sdk_config().await)
    }

    /// The stack manager for `--stack` on AWS settings already loaded.
    pub(crate) fn stacks_with(&self, config: &SdkConfig) -> StackManager {
        StackManager::from_sdk_config(&self.stack, config)
    }

    /// Prints `value` in the chosen format.
    pub(crate) fn print(&self, value: &Value) {
        output::print(self.output, value);
    }
}

/// Bad input found by the CLI itself (exit code 2, like a usage error).
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Marks `error` as bad input, keeping its message.
pub(crate) fn bad_input(error: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(BadInput(format!("{error:#}")))
}
