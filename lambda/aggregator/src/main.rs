//! The Lambda function (`bootstrap` on `provided.al2023`).
//!
//! Settings come from the environment contract of [`dynalimit_aggregator::config`]. Logs go
//! through `lambda_runtime`'s tracing set-up, so the function's logging configuration applies:
//! `AWS_LAMBDA_LOG_FORMAT=JSON` writes one JSON object per line and `AWS_LAMBDA_LOG_LEVEL`
//! sets the level (both set by Lambda from the template's `LoggingConfig`).

use dynalimit_aggregator::{Aggregator, Settings, handler};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // Built once per container and shared by every invocation.
    let settings = Settings::from_env().inspect_err(|e| {
        lambda_runtime::tracing::error!(error = %e, "cannot start the aggregator");
    })?;
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
