//! The global options every command shares, and the connections built from them.

use anyhow::Result;
use aws_config::SdkConfig;
use clap::Args;
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_repository::{DEFAULT_NAMESPACE, DEFAULT_STACK, Repository, RepositoryBuilder};
use dynalimit_stack::StackManager;
use serde::Serialize;

use crate::output::{self, Format};

/// Options accepted by every command.
///
/// The AWS settings follow the AWS CLI (see `dynalimit_repository::aws`): the endpoint, region,
/// profile and credentials come from the usual environment variables and the shared config
/// and credentials files unless given here.
#[derive(Debug, Clone, Args)]
pub(crate) struct Global {
    /// Endpoint of DynamoDB (and CloudFormation, S3), e.g. DynamoDB Local or LocalStack
    /// [default: $AWS_ENDPOINT_URL_DYNAMODB, $AWS_ENDPOINT_URL, the profile's endpoint_url,
    /// else AWS]. On an endpoint other than AWS a missing table is created directly.
    #[arg(
        long,
        global = true,
        env = "DYNALIMIT_ENDPOINT_URL",
        value_name = "URL"
    )]
    pub(crate) endpoint_url: Option<String>,

    /// AWS region [default: $AWS_REGION, $AWS_DEFAULT_REGION, the profile's region; us-east-1
    /// on a loopback endpoint]. Without one, commands fail before sending anything.
    #[arg(long, global = true, value_name = "REGION")]
    pub(crate) region: Option<String>,

    /// AWS profile of the shared config and credentials files [default: $AWS_PROFILE, else
    /// default].
    #[arg(long, global = true, value_name = "PROFILE")]
    pub(crate) profile: Option<String>,

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
    /// The explicit AWS settings of the command line.
    pub(crate) fn aws_settings(&self) -> AwsSettings {
        AwsSettings::new()
            .endpoint_url(self.endpoint_url.clone())
            .region(self.region.clone())
            .profile(self.profile.clone())
    }

    /// The AWS settings: the command line's over the environment's.
    pub(crate) async fn sdk_config(&self) -> Result<SdkConfig> {
        Ok(aws::load(&self.aws_settings()).await?)
    }

    /// The DynamoDB endpoint other than AWS in use (`--endpoint-url`, the environment, the
    /// profile), if any.
    pub(crate) fn endpoint(&self, config: &SdkConfig) -> Option<String> {
        aws::dynamodb_endpoint(config, self.endpoint_url.as_deref())
    }

    /// A repository builder on the loaded settings, and the endpoint it talks to when not AWS.
    async fn builder(&self) -> Result<(RepositoryBuilder, Option<String>)> {
        let config = self.sdk_config().await?;
        let endpoint = self.endpoint(&config);
        let mut b = Repository::builder()
            .sdk_config(config)
            .stack(self.stack.clone())
            .namespace(self.namespace.clone())
            .principal("dynalimit-cli");
        if let Some(url) = &endpoint {
            b = b.endpoint_url(url.clone());
        }
        Ok((b, endpoint))
    }

    /// A repository for commands that write: registers the namespace when needed. A missing
    /// table is created only on an endpoint other than AWS (an emulator); on AWS, deploy the
    /// stack first.
    pub(crate) async fn writer(&self) -> Result<Repository> {
        let (builder, endpoint) = self.builder().await?;
        Ok(builder.create_table(endpoint.is_some()).open().await?)
    }

    /// A repository for commands that only read: the table and namespace must exist.
    pub(crate) async fn reader(&self) -> Result<Repository> {
        Ok(self.builder().await?.0.connect().await?)
    }

    /// As [`Global::reader`], counting every request it sends in `counter`.
    pub(crate) async fn counted_reader(
        &self,
        counter: dynalimit_repository::RequestCounter,
    ) -> Result<Repository> {
        Ok(self
            .builder()
            .await?
            .0
            .request_counter(counter)
            .connect()
            .await?)
    }

    /// The stack manager for `--stack`.
    pub(crate) async fn stacks(&self) -> Result<StackManager> {
        Ok(self.stacks_with(&self.sdk_config().await?))
    }

    /// The stack manager for `--stack` on AWS settings already loaded.
    pub(crate) fn stacks_with(&self, config: &SdkConfig) -> StackManager {
        StackManager::from_sdk_config(&self.stack, config)
    }

    /// Prints `value` in the chosen format.
    pub(crate) fn print<T: Serialize>(&self, value: &T) {
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
pub(crate) fn bad_input(error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(BadInput(format!("{:#}", error.into())))
}
