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
    /// The caller's AWS settings for [`Target::client`], whose endpoint is always `url`.
    settings: AwsSettings,
}

impl Target {
    /// The endpoint `settings` configure ([`aws::configured_endpoint`]: explicitly, in the
    /// environment or the profile), otherwise a fresh private DynamoDB Local; its clients have
    /// the region and profile of `settings`.
    ///
    /// # Errors
    /// [`Error::Local`] when DynamoDB Local cannot be installed or started.
    pub async fn from_settings(settings: &AwsSettings) -> Result<Target, Error> {
        let endpoint = aws::configured_endpoint(settings).await;
        Ok(Target::resolve(endpoint).await?.with_settings(settings))
    }

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
            settings: AwsSettings::new(),
        })
    }

    /// An endpoint this process did not start.
    pub fn external(url: String) -> Target {
        Target {
            url,
            local: None,
            settings: AwsSettings::new(),
        }
    }

    /// With the region and profile of `settings` for [`Target::client`] (its endpoint is
    /// this target's, whatever `settings` names).
    #[must_use]
    pub(crate) fn with_settings(mut self, settings: &AwsSettings) -> Target {
        self.settings.clone_from(settings);
        self
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
    /// AWS settings of `dynalimit_repository::aws` and the region and profile of the settings
    /// the target was made with ([`Target::from_settings`]; on loopback: static credentials and
    /// us-east-1 unless configured).
    ///
    /// # Errors
    /// What loading the AWS settings reports (no region for an endpoint off loopback).
    pub async fn client(&self, counter: Option<RequestCounter>) -> Result<Client, RepositoryError> {
        let settings = self.settings.clone().endpoint_url(Some(&self.url));
        let sdk = aws::load(&settings).await?;
        let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk).endpoint_url(&self.url);
        if let Some(counter) = counter {
            config = config.interceptor(counter);
        }
        Ok(Client::from_conf(config.build()))
    }
}

#[cfg(test)]
mod tests {
    use super::Target;
    use dynalimit_repository::aws::AwsSettings;

    #[tokio::test]
    async fn the_client_has_the_region_it_was_given() {
        let settings = AwsSettings::new()
            .endpoint_url(Some("http://127.0.0.1:9"))
            .region(Some("eu-west-3"));
        let target = Target::external("http://127.0.0.1:1".into()).with_settings(&settings);
        let client = target.client(None).await.unwrap();
        let config = client.config();
        assert_eq!(config.region().map(|r| r.as_ref()), Some("eu-west-3"));
        // The target's endpoint, not the one the settings name.
        let plain = Target::external("http://127.0.0.1:1".into());
        let plain = plain.client(None).await.unwrap();
        assert_eq!(
            plain.config().region().map(|r| r.as_ref()),
            Some("us-east-1")
        );
    }
}
