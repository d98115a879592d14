//! The Lambda package's `bootstrap` on `provided.al2023`: the aggregator, and the limits
//! provisioner when the function's handler is `provisioner`.
//!
//! One package serves both functions of the stack, so one build and one upload deploy them;
//! Lambda passes the function's `Handler` to the process as `_HANDLER`. The aggregator reads
//! the environment contract of [`dynalimit_aggregator::config`]; the provisioner reads
//! `DYNALIMIT_TABLE` alone (`dynalimit_manifest::provisioner`). Logs go through
//! `lambda_runtime`'s tracing set-up, so the function's logging configuration applies:
//! `AWS_LAMBDA_LOG_FORMAT=JSON` writes one JSON object per line and `AWS_LAMBDA_LOG_LEVEL`
//! sets the level (both set by Lambda from the template's `LoggingConfig`).

use dynalimit_aggregator::{Aggregator, Settings, handler};
use dynalimit_manifest::provisioner::{ENV_HANDLER, ENV_TABLE, HANDLER, Provisioner};
use lambda_runtime::{Error, LambdaEvent, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    if std::env::var(ENV_HANDLER).is_ok_and(|h| h == HANDLER) {
        return Box::pin(provisioner()).await;
    }
    // Built once per container and shared by every invocation.
    let settings = Settings::from_env().inspect_err(|e| {
        lambda_runtime::tracing::error!(error = %e, "cannot start the aggregator");
    })?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let archive = settings
        .archive_bucket
        .as_ref()
        .map(|bucket| dynalimit_aggregator::archive::Archive::new(&sdk, bucket.clone()));
    let alerts = settings
        .alert_event_bus
        .as_ref()
        .map(|bus| dynalimit_aggregator::alerts::Alerts::new(&sdk, bus.clone()));
    let mut aggregator = Aggregator::new(aws_sdk_dynamodb::Client::new(&sdk), settings);
    if let Some(archive) = archive {
        aggregator = aggregator.with_archive(archive);
    }
    if let Some(alerts) = alerts {
        aggregator = aggregator.with_alerts(alerts);
    }
    let aggregator = &aggregator;
    run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::dynamodb::Event>| async move {
            Ok::<_, Error>(handler::handle(aggregator, event.payload).await)
        },
    ))
    .await
}

/// The provisioner: a direct invocation answers with its change set or fails; a custom
/// resource request is answered at its `ResponseURL`, and the invocation fails only when
/// that answer could not be delivered (so that Lambda invokes it again).
async fn provisioner() -> Result<(), Error> {
    let table = std::env::var(ENV_TABLE)
        .ok()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            lambda_runtime::tracing::error!("cannot start the provisioner: {ENV_TABLE} is unset");
            format!("{ENV_TABLE} is unset")
        })?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let provisioner = Provisioner::new(table, aws_sdk_dynamodb::Client::new(&sdk));
    let provisioner = &provisioner;
    run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            // Boxed: the apply's future is too deep to lay out inline.
            Box::pin(provisioner.handle(event.payload))
                .await
                .map_err(|e| {
                    let message = e.chain();
                    lambda_runtime::tracing::error!(error = %message, "provisioner");
                    Error::from(message)
                })
        },
    ))
    .await
}
