//! Where the commands talk to: a given endpoint, or a private DynamoDB Local they started.

use aws_sdk_dynamodb::Client;
use dynalimit_local::DynamoDbLocal;
use dynalimit_repository::aws::{self, AwsSettings};
use dynalimit_repository::{RepositoryError, RequestCounter};

use crate::error::Error;

/// Where the commands talk to: a given endpoint, or a private DynamoDB Local they started
/// (stopped by [`Target::stop`], or when the process ends).
#[derive(Debug)]
pub struct Target {
    url: String,
    local: Option<DynamoDbLocal>,
}

impl Target {
    /// `url` when given (and not empty), otherwise a fresh private DynamoDB Local (installed
    /// on first use).
    ///
    /// # Errors
    /// [`Error::Local`] when DynamoDB Local cannot be installed or started.
    pub async fn resolve(url: Option<String>) -> Result<Target, Error> {
        if let Some(url) = url.filter(|u| !u.is_empty()) {
            return Ok(Target::external(url));
        }
        let local = tokio::task::spawn_blocking(DynamoDbLocal::start)
            .await
            .map_err(|source| Error::Task {
                task: "starting DynamoDB Local",
                source,
            })??;
        Ok(Target {
            url: local.endpoint().to_string(),
            local: Some(local),
        })
    }

    /// An endpoint this process did not start.
    pub fn external(url: String) -> Target {
        Target { url, local: None }
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the endpoint is a DynamoDB Local this process started.
    pub fn is_private(&self) -> bool {
        self.local.is_some()
    }

    /// Stops the private emulator, if any.
    pub async fn stop(self) {
        if let Some(local) = self.local {
            let _ = tokio::task::spawn_blocking(move || local.stop()).await;
        }
    }

    /// A DynamoDB client for the endpoint, counting requests in `counter` when given, with the
    /// AWS settings of `dynalimit_repository::aws` (on loopback: static credentials and
    /// us-east-1 unless configured).
    ///
    /// # Errors
    /// What loading the AWS settings reports (no region for an endpoint off loopback).
    pub async fn client(&self, counter: Option<RequestCounter>) -> Result<Client, RepositoryError> {
        let sdk = aws::load(&AwsSettings::new().endpoint_url(Some(&self.url))).await?;
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk).endpoint_url(&self.url);
        if let Some(counter) = counter {
            config = config.interceptor(counter);
        }
        Ok(Client::from_conf(config.build()))
    }
}
