//! The Lambda function (`bootstrap` on `provided.al2023`).

use dynalimit_aggregator::{Aggregator, Settings, handler};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .without_time()
        .init();
    // Built once per container and shared by every invocation.
    let settings = Settings::from_env()?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let aggregator = Aggregator::new(aws_sdk_dynamodb::Client::new(&sdk), settings);
    let aggregator = &aggregator;
    run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::dynamodb::Event>| async move {
            Ok::<_, Error>(handler::handle(aggregator, event.payload).await)
        },
    ))
    .await
}
