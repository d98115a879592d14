//! `dynalimit-demo`: the demo of `dynalimit demo`, in a binary that compiles only the data
//! plane.

use std::process::ExitCode;

use clap::Parser;
use dynalimit_demo::{Error, Options};
use dynalimit_repository::aws::AwsSettings;
use dynalimit_repository::{DEFAULT_NAMESPACE, DEFAULT_STACK};

/// An LLM gateway in miniature: a project and two API keys share request and token limits
/// while concurrent clients acquire, adjust and commit; then the bucket states are shown.
/// Runs on a private DynamoDB Local (installed on first use) unless an endpoint is configured.
#[derive(Debug, Parser)]
#[command(
    name = "dynalimit-demo",
    version,
    after_help = "Examples:\n  dynalimit-demo\n  dynalimit-demo --seconds 20 --tasks 64\n  dynalimit-demo --endpoint-url http://127.0.0.1:8000"
)]
struct Cli {
    #[command(flatten)]
    options: Options,

    /// Endpoint of DynamoDB, e.g. a running DynamoDB Local or LocalStack [default:
    /// $AWS_ENDPOINT_URL_DYNAMODB, $AWS_ENDPOINT_URL, the profile's endpoint_url; without one,
    /// a private DynamoDB Local].
    #[arg(long, env = "DYNALIMIT_ENDPOINT_URL", value_name = "URL")]
    endpoint_url: Option<String>,

    /// AWS region, read with the settings that name the endpoint [default: $AWS_REGION,
    /// $AWS_DEFAULT_REGION, the profile's region; us-east-1 on a loopback endpoint].
    #[arg(long, value_name = "REGION")]
    region: Option<String>,

    /// AWS profile of the shared config and credentials files, whose endpoint_url applies
    /// [default: $AWS_PROFILE, else default]. This binary leaves out the SSO and
    /// credential_process providers (to build faster); `dynalimit demo` has them.
    #[arg(long, value_name = "PROFILE")]
    profile: Option<String>,

    /// Stack name, which is also the table name (created when missing).
    #[arg(long, env = "DYNALIMIT_STACK", default_value = DEFAULT_STACK)]
    stack: String,

    /// Namespace the demo's project and keys live in.
    #[arg(short = 'N', long, env = "DYNALIMIT_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    namespace: String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = AwsSettings::new()
        .endpoint_url(cli.endpoint_url)
        .region(cli.region)
        .profile(cli.profile);
    match dynalimit_demo::run(&cli.options, &settings, &cli.stack, &cli.namespace).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(match e {
                Error::InvalidOption { .. } | Error::Invalid(_) => 2,
                _ => 1,
            })
        }
    }
}

/// `error` and its sources on one line.
fn one_line(error: &Error) -> String {
    let mut line = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(s) = source {
        line.push_str(": ");
        line.push_str(&s.to_string());
        source = s.source();
    }
    line.replace('\n', " ")
}
