//! AWS settings: the one place where dynalimit loads them, for every client it builds
//! (DynamoDB, CloudFormation, S3, DynamoDB Streams), with the AWS CLI's rules.
//!
//! * Endpoint: an explicit one ([`AwsSettings::endpoint_url`]), else `AWS_ENDPOINT_URL_DYNAMODB`,
//!   `AWS_ENDPOINT_URL`, and the profile's `endpoint_url` (per service in its `services`
//!   section), as the SDK resolves them.
//! * Profile: an explicit one ([`AwsSettings::profile`]), else `AWS_PROFILE`, else `default`;
//!   its region, endpoint and credentials apply.
//! * Region: an explicit one, else `AWS_REGION` / `AWS_DEFAULT_REGION`, the profile's
//!   `region`, and on AWS the EC2 instance's (unless `AWS_EC2_METADATA_DISABLED=true`).
//!   An emulator on a loopback endpoint gets `us-east-1` when none is set. Elsewhere a
//!   missing region is [`RepositoryError::MissingRegion`]: there is no silent default.
//! * Credentials: the SDK's default chain; an emulator on a loopback endpoint gets static
//!   local credentials unless `AWS_ACCESS_KEY_ID` or a profile is set. Profiles that sign in
//!   through IAM Identity Center (SSO) or run a `credential_process` need the cargo feature
//!   `sso` (on by default, and in the `dynalimit` crate's defaults); without it the chain has
//!   the environment, static profiles, web identity, assumed roles and the container and
//!   instance metadata providers.

use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::imds::region::ImdsRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::region::ProfileFileRegionProvider;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::service_config::ServiceConfigKey;

use crate::RepositoryError;

/// The region of an emulator on a loopback endpoint when none is configured.
pub(crate) const EMULATOR_REGION: &str = "us-east-1";

/// What a caller chooses explicitly; everything left `None` comes from the environment and
/// the AWS configuration files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AwsSettings {
    /// The endpoint of every service (DynamoDB Local, LocalStack, moto).
    pub endpoint_url: Option<String>,
    /// The region.
    pub region: Option<String>,
    /// The profile of the shared configuration and credentials files.
    pub profile: Option<String>,
}

impl AwsSettings {
    /// Nothing explicit: everything from the environment.
    pub fn new() -> Self {
        AwsSettings::default()
    }

    /// With an explicit endpoint (when `Some`).
    #[must_use]
    pub fn endpoint_url(mut self, url: Option<impl Into<String>>) -> Self {
        self.endpoint_url = url.map(Into::into);
        self
    }

    /// With an explicit region (when `Some`).
    #[must_use]
    pub fn region(mut self, region: Option<impl Into<String>>) -> Self {
        self.region = region.map(Into::into);
        self
    }

    /// With an explicit profile (when `Some`).
    #[must_use]
    pub fn profile(mut self, profile: Option<impl Into<String>>) -> Self {
        self.profile = profile.map(Into::into);
        self
    }
}

/// Loads the AWS settings (see the module documentation for the rules).
///
/// # Errors
/// [`RepositoryError::MissingRegion`] when no region is configured and the endpoint is not a
/// loopback emulator.
pub async fn load(settings: &AwsSettings) -> Result<SdkConfig, RepositoryError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(profile) = &settings.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(url) = &settings.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    // The region without the instance metadata service, which is asked below only for AWS.
    loader = match &settings.region {
        Some(region) => loader.region(Region::new(region.clone())),
        None => {
            let mut profile = ProfileFileRegionProvider::builder();
            if let Some(name) = &settings.profile {
                profile = profile.profile_name(name);
            }
            loader.region(
                RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
                    .or_else(profile.build()),
            )
        }
    };
    let config = loader.load().await;
    let endpoint = dynamodb_endpoint(&config, settings.endpoint_url.as_deref());
    let emulator = endpoint.as_deref().is_some_and(is_loopback);
    let mut builder = config.to_builder();
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    if emulator && settings.profile.is_none() && !set("AWS_ACCESS_KEY_ID") && !set("AWS_PROFILE") {
        builder.set_credentials_provider(Some(SharedCredentialsProvider::new(local_credentials())));
    }
    if config.region().is_none() {
        let region = if emulator {
            Some(Region::new(EMULATOR_REGION))
        } else {
            ImdsRegionProvider::builder().build().region().await
        };
        match region {
            Some(region) => {
                builder.set_region(Some(region));
            }
            None => {
                return Err(RepositoryError::MissingRegion {
                    profile: settings
                        .profile
                        .clone()
                        .or_else(|| std::env::var("AWS_PROFILE").ok())
                        .unwrap_or_else(|| "default".to_string()),
                });
            }
        }
    }
    Ok(builder.build())
}

/// The DynamoDB endpoint clients built from `config` use: `explicit` when given, else what
/// the SDK resolves (`AWS_ENDPOINT_URL_DYNAMODB`, the profile's DynamoDB `endpoint_url`,
/// `AWS_ENDPOINT_URL`, the profile's `endpoint_url`). `None`: AWS itself.
pub fn dynamodb_endpoint(config: &SdkConfig, explicit: Option<&str>) -> Option<String> {
    if let Some(url) = explicit {
        return Some(url.to_string());
    }
    if config.get_origin("endpoint_url").is_client_config() {
        return config.endpoint_url().map(str::to_string);
    }
    let key = ServiceConfigKey::builder()
        .service_id("DynamoDB")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok()?;
    config
        .service_config()
        .and_then(|service| service.load_config(key))
        .or_else(|| config.endpoint_url().map(str::to_string))
}

/// The DynamoDB endpoint other than AWS that `settings` name (the explicit endpoint, else
/// the environment's and the profile's, see [`dynamodb_endpoint`]), for tools that start a
/// private DynamoDB Local when there is none. Settings that cannot be loaded (no region, for
/// instance) name only the explicit endpoint, if any.
pub async fn configured_endpoint(settings: &AwsSettings) -> Option<String> {
    match load(settings).await {
        Ok(config) => dynamodb_endpoint(&config, settings.endpoint_url.as_deref()),
        Err(_) => settings.endpoint_url.clone(),
    }
}

/// True for an endpoint whose host is a loopback address: `localhost` (any case), an IPv4
/// address of 127.0.0.0/8 or `[::1]`. Nothing else is: not a name that merely starts with
/// `127.` (`127.example.com`), not a VPC or FIPS endpoint of AWS, not an IPv4-mapped IPv6
/// address, not a URL whose text does not parse.
pub fn is_loopback(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, port)) if port.is_empty() || port.starts_with(':') => host,
            _ => return false,
        },
        None => authority.split_once(':').map_or(authority, |(h, _)| h),
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Static credentials for local emulators, which accept any.
pub fn local_credentials() -> aws_credential_types::Credentials {
    aws_credential_types::Credentials::new("dynalimit", "local", None, None, "dynalimit-local")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        for url in [
            "http://localhost:4566",
            "http://LOCALHOST:4566",
            "http://localhost",
            "http://127.0.0.1:8000/",
            "http://127.255.0.9",
            "https://127.0.0.1?x=1",
            "http://[::1]:8000",
            "http://[::1]",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://dynamodb.us-east-1.amazonaws.com",
            "https://dynamodb-fips.us-east-1.amazonaws.com",
            "https://vpce-0123-abcd.dynamodb.us-east-1.vpce.amazonaws.com",
            "https://123456789012.ddb.us-east-1.amazonaws.com",
            "http://127.example.com:8000",
            "http://127.0.0.1.nip.io",
            "http://localhost.example.com",
            "http://localhost@dynamodb.us-east-1.amazonaws.com",
            "http://127.0.0.1@dynamodb.us-east-1.amazonaws.com",
            "http://[::ffff:127.0.0.1]:8000",
            "http://[::2]:8000",
            "http://[::1]x",
            "http://10.0.0.1:8000",
            "http://0.0.0.0:8000",
            "localhost:8000",
            "127.0.0.1",
            "",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }
}
