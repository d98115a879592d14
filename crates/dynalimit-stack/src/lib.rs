//! Internal to dynalimit, no stable API: services depend on `dynalimit`.
//!
//! The CloudFormation stack: the template of `infra/`, embedded, and a [`StackManager`] that
//! creates, updates, inspects and deletes it.
//!
//! The stack is named like the table it holds. Until its code is uploaded, an aggregator stack
//! has only the code bucket: no function, event source mapping, dead-letter queue or
//! aggregator alarms. [`StackManager::deploy`] uploads the zip to the code bucket once the
//! stack exists and sets `AggregatorCodeKey` with a second update, which creates them.
//!
//! The table is retained when the stack is deleted (and has deletion protection and
//! point-in-time recovery by default): deleting the stack never deletes limits, usage or
//! audit records.
//!
//! The manager takes the AWS settings it is given (the CLI loads them with
//! `dynalimit_repository::aws`, as it does for DynamoDB); this crate loads none itself.
//!
//! ```no_run
//! # async fn demo(config: aws_config::SdkConfig) -> Result<(), dynalimit_stack::StackError> {
//! use dynalimit_stack::{StackManager, StackOptions};
//!
//! let manager = StackManager::from_sdk_config("limits-prod", &config);
//! let options = StackOptions::default();
//! let zip = std::fs::read("aggregator.zip").ok();
//! let info = manager
//!     .deploy(&options, zip.as_deref(), &mut |event| println!("{event}"))
//!     .await?;
//! println!("{} is {}", info.name, info.status);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

mod error;

use aws_config::SdkConfig;
use aws_sdk_cloudformation::error::ProvideErrorMetadata;
use aws_sdk_cloudformation::types::{Capability, Parameter, Tag};
use dynalimit_core::{CoreError, ids};
use dynalimit_format::version::SCHEMA_VERSION;

pub use crate::error::StackError;
use crate::error::classify;

/// The CloudFormation template (`infra/template.yaml`).
pub const TEMPLATE: &str = include_str!("../template.yaml");

/// Log retention periods CloudWatch Logs accepts, in days.
pub const LOG_RETENTION_DAYS: &[u32] = &[
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
    3288, 3653,
];

/// Aggregator log levels, as the template's `LogLevel` (the function's `ApplicationLogLevel`)
/// spells them. [`StackOptions::log_level`] accepts them in any case.
pub const LOG_LEVELS: &[&str] = &["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];

/// The longest point-in-time recovery period DynamoDB keeps, and the default, in days.
pub const MAX_PITR_RECOVERY_DAYS: u32 = 35;

/// Everything a deployment can choose; [`StackOptions::default`] matches the template's
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackOptions {
    /// Create the aggregator Lambda, its code bucket, dead-letter queue and alarms.
    pub aggregator: bool,
    /// Create the limits provisioner Lambda (from the aggregator's package, so it needs
    /// `aggregator`).
    pub provisioner: bool,
    /// `arm64` or `x86_64`.
    pub architecture: String,
    /// Aggregator memory, 128–10240 MB.
    pub lambda_memory_mb: u32,
    /// Aggregator timeout, 1–900 s.
    pub lambda_timeout_seconds: u32,
    /// Aggregator log level (one of [`LOG_LEVELS`], any case).
    pub log_level: String,
    /// Log group retention (one of [`LOG_RETENTION_DAYS`]).
    pub log_retention_days: u32,
    /// Usage snapshot windows, e.g. `hourly,daily`.
    pub snapshot_windows: String,
    /// Days usage snapshots are kept.
    pub snapshot_retention_days: u32,
    /// Stream records per invocation, 1–10000.
    pub stream_batch_size: u32,
    /// Batching window of the event source mapping, 0–300 s.
    pub stream_batching_window_seconds: u32,
    /// Retries of a failing batch before it goes to the dead-letter queue, 0–10000.
    pub stream_max_retries: u32,
    /// Point-in-time recovery period, 1–35 days (default 35); `None` disables PITR.
    pub pitr_recovery_days: Option<u32>,
    /// DynamoDB deletion protection of the table (default on). The stack retains the table
    /// when it is deleted either way.
    pub deletion_protection: bool,
    /// ARN of a customer managed KMS key (`arn:aws:kms:REGION:ACCOUNT:key/ID`, symmetric, in
    /// the stack's region) that encrypts the table, its indexes, stream and backups, and the
    /// aggregator's log group. `None` keeps the AWS owned keys. The code bucket and the
    /// dead-letter queue hold no table data and keep their AWS managed encryption.
    ///
    /// With a key, the managed policy `TableKeyPolicy` (output `TableKeyPolicyArn`) grants
    /// `kms:Decrypt` on it for this table's encryption context only: DynamoDB decrypts the
    /// table key on behalf of whoever reads or writes an item. The roles the stack creates
    /// carry it; a principal given one of the six policies, or an existing role given as
    /// `aggregator_role_name`, needs it attached too. The key policy must let the account's IAM
    /// policies grant its use (as the default key policy does) and let
    /// `logs.REGION.amazonaws.com` use it; the principal that deploys needs
    /// `kms:CreateGrant`, `kms:DescribeKey`, `kms:Encrypt`, `kms:Decrypt`, `kms:ReEncrypt*` and
    /// `kms:GenerateDataKey*` on it.
    pub kms_key_arn: Option<String>,
    /// CloudWatch alarms.
    pub alarms: bool,
    /// SNS topic the alarms notify.
    pub alarm_topic_arn: Option<String>,
    /// Stream iterator age (ms) that raises the alarm.
    pub iterator_age_threshold_ms: u32,
    /// Share of the aggregator's timeout, 1–100 %, above which its duration alarm fires
    /// (template parameter `LambdaDurationThresholdMs`, the share in milliseconds).
    pub duration_alarm_percent: u32,
    /// Active X-Ray tracing of the aggregator; a created aggregator role may then write trace
    /// segments.
    pub tracing: bool,
    /// Archive audit events that expire from the table to an S3 bucket the stack creates
    /// (output `AuditArchiveBucketName`, kept when the stack is deleted). Needs the
    /// aggregator; an existing aggregator role then needs `s3:PutObject` on the bucket's
    /// `audit/*`.
    pub audit_archival: bool,
    /// Days after which archived audit events move to S3 Glacier Instant Retrieval, 1–3650.
    pub audit_archive_glacier_days: u32,
    /// The aggregator writes each batch's usage per namespace, entity and resource as
    /// CloudWatch embedded-metric log lines (each tenant is a billed custom metric).
    pub tenant_metrics: bool,
    /// The EventBridge bus (a name in the stack's account and region) the aggregator publishes
    /// quota threshold crossings and refusal alerts to; `None` evaluates no threshold. An
    /// existing aggregator role then needs `events:PutEvents` on the bus and
    /// `dynamodb:DeleteItem` on the table.
    pub alert_event_bus: Option<String>,
    /// The six managed policies.
    pub iam: bool,
    /// Application, admin and read-only roles.
    pub iam_roles: bool,
    /// Permission boundary ARN for every role the stack creates.
    pub permission_boundary: Option<String>,
    /// Role name format with `{}` for the role's own name.
    pub role_name_format: Option<String>,
    /// Managed policy name format with `{}` for the policy's own name ([`POLICY_NAMES`]).
    /// Policy names are unique in an account, so a format should carry the stack's name.
    pub policy_name_format: Option<String>,
    /// An existing role (name with path) for the aggregator instead of a created one.
    pub aggregator_role_name: Option<String>,
    /// An existing role, by its ARN, for the aggregator instead of a created one (another way
    /// to name it than `aggregator_role_name`; at most one of the two).
    pub aggregator_role_arn: Option<String>,
    /// An existing role (name with path) for the limits provisioner instead of a created one.
    pub provisioner_role_name: Option<String>,
    /// Extra stack tags. `Application=dynalimit` and `ManagedBy=dynalimit` are always set,
    /// over a tag given here with either key.
    pub tags: Vec<(String, String)>,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            aggregator: true,
            provisioner: false,
            architecture: "arm64".into(),
            lambda_memory_mb: 256,
            lambda_timeout_seconds: 60,
            log_level: "INFO".into(),
            log_retention_days: 30,
            snapshot_windows: "hourly,daily".into(),
            snapshot_retention_days: 90,
            stream_batch_size: 100,
            stream_batching_window_seconds: 1,
            stream_max_retries: 3,
            pitr_recovery_days: Some(MAX_PITR_RECOVERY_DAYS),
            deletion_protection: true,
            kms_key_arn: None,
            alarms: true,
            alarm_topic_arn: None,
            iterator_age_threshold_ms: 60_000,
            duration_alarm_percent: 80,
            tracing: false,
            audit_archival: false,
            audit_archive_glacier_days: 90,
            tenant_metrics: false,
            alert_event_bus: None,
            iam: true,
            iam_roles: false,
            permission_boundary: None,
            role_name_format: None,
            policy_name_format: None,
            aggregator_role_name: None,
            aggregator_role_arn: None,
            provisioner_role_name: None,
            tags: Vec::new(),
        }
    }
}

/// CloudFormation's tags of `(key, value)` pairs.
fn tag_list(pairs: impl Iterator<Item = (String, String)>) -> Vec<Tag> {
    pairs
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn invalid(field: &'static str, value: impl ToString, reason: &str) -> StackError {
    CoreError::invalid_value(field, value, reason).into()
}

fn in_range(field: &'static str, value: u32, min: u32, max: u32) -> Result<(), StackError> {
    if value < min || value > max {
        return Err(invalid(
            field,
            value,
            &format!("must be between {min} and {max}"),
        ));
    }
    Ok(())
}

impl StackOptions {
    /// Checks every option against what the template accepts.
    ///
    /// # Errors
    /// [`StackError::Validation`] naming the first bad option.
    pub fn validate(&self) -> Result<(), StackError> {
        if self.provisioner && !self.aggregator {
            return Err(invalid(
                "provisioner",
                "enabled",
                "runs from the aggregator's package: enable the aggregator too",
            ));
        }
        if !["arm64", "x86_64"].contains(&self.architecture.as_str()) {
            return Err(invalid(
                "architecture",
                &self.architecture,
                "must be arm64 or x86_64",
            ));
        }
        in_range("lambda memory", self.lambda_memory_mb, 128, 10_240)?;
        in_range("lambda timeout", self.lambda_timeout_seconds, 1, 900)?;
        if !LOG_LEVELS.contains(&self.log_level.to_ascii_uppercase().as_str()) {
            return Err(invalid(
                "log level",
                &self.log_level,
                "must be error, warn, info, debug or trace",
            ));
        }
        if !LOG_RETENTION_DAYS.contains(&self.log_retention_days) {
            return Err(invalid(
                "log retention days",
                self.log_retention_days,
                "must be a CloudWatch Logs retention (1, 3, 5, 7, 14, 30, 60, 90, …, 3653)",
            ));
        }
        let windows_ok = !self.snapshot_windows.is_empty()
            && self
                .snapshot_windows
                .split(',')
                .all(|w| ["hourly", "daily", "monthly"].contains(&w));
        if !windows_ok {
            return Err(invalid(
                "snapshot windows",
                &self.snapshot_windows,
                "must be a comma-separated list of hourly, daily, monthly",
            ));
        }
        in_range(
            "snapshot retention days",
            self.snapshot_retention_days,
            1,
            36_500,
        )?;
        in_range("stream batch size", self.stream_batch_size, 1, 10_000)?;
        in_range(
            "stream batching window",
            self.stream_batching_window_seconds,
            0,
            300,
        )?;
        in_range("stream retries", self.stream_max_retries, 0, 10_000)?;
        in_range(
            "audit archive glacier days",
            self.audit_archive_glacier_days,
            1,
            3650,
        )?;
        if self.audit_archival && !self.aggregator {
            return Err(invalid(
                "audit archival",
                "enabled",
                "the aggregator writes the archive: enable the aggregator too",
            ));
        }
        if let Some(bus) = &self.alert_event_bus {
            let name_ok = (1..=256).contains(&bus.len())
                && bus
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
            if !name_ok {
                return Err(invalid(
                    "alert event bus",
                    bus,
                    "must be the name of an EventBridge bus of the stack's account and region \
                     (1-256 letters, digits, . _ / -; `default` for the default bus)",
                ));
            }
            if !self.aggregator {
                return Err(invalid(
                    "alert event bus",
                    bus,
                    "the aggregator publishes the alerts: enable the aggregator too",
                ));
            }
        }
        if let Some(days) = self.pitr_recovery_days {
            in_range("PITR recovery days", days, 1, MAX_PITR_RECOVERY_DAYS)?;
        }
        in_range(
            "iterator age threshold",
            self.iterator_age_threshold_ms,
            1000,
            u32::MAX,
        )?;
        if let Some(format) = &self.role_name_format
            && format.matches("{}").count() != 1
        {
            return Err(invalid(
                "role name format",
                format,
                "must contain {} exactly once",
            ));
        }
        in_range(
            "duration alarm percent",
            self.duration_alarm_percent,
            1,
            100,
        )?;
        if let Some(format) = &self.policy_name_format {
            validate_policy_name_format(format)?;
        }
        if let Some(arn) = &self.aggregator_role_arn {
            if self.aggregator_role_name.is_some() {
                return Err(invalid(
                    "aggregator role",
                    arn,
                    "give the existing role by its name or by its ARN, not both",
                ));
            }
            if !is_role_arn(arn) {
                return Err(invalid(
                    "aggregator role ARN",
                    arn,
                    "must be the ARN of an IAM role (arn:aws:iam::ACCOUNT:role/NAME)",
                ));
            }
        }
        for (field, arn) in [
            ("alarm topic", &self.alarm_topic_arn),
            ("permission boundary", &self.permission_boundary),
        ] {
            if let Some(arn) = arn
                && !arn.starts_with("arn:")
            {
                return Err(invalid(field, arn, "must be an ARN"));
            }
        }
        if let Some(arn) = &self.kms_key_arn
            && !is_kms_key_arn(arn)
        {
            return Err(invalid(
                "kms key",
                arn,
                "must be the ARN of a KMS key (arn:aws:kms:REGION:ACCOUNT:key/ID), not an alias",
            ));
        }
        Ok(())
    }

    /// The template parameters these options set (all but `AggregatorCodeKey`).
    pub fn parameters(&self) -> Vec<(&'static str, String)> {
        let flag = |b: bool| if b { "true" } else { "false" }.to_string();
        let opt = |o: &Option<String>| o.clone().unwrap_or_default();
        vec![
            ("SchemaVersion", SCHEMA_VERSION.to_string()),
            (
                "EnablePointInTimeRecovery",
                flag(self.pitr_recovery_days.is_some()),
            ),
            (
                "PITRRecoveryPeriodDays",
                self.pitr_recovery_days
                    .unwrap_or(MAX_PITR_RECOVERY_DAYS)
                    .to_string(),
            ),
            ("EnableDeletionProtection", flag(self.deletion_protection)),
            ("KmsKeyArn", opt(&self.kms_key_arn)),
            ("EnableAggregator", flag(self.aggregator)),
            ("EnableProvisioner", flag(self.provisioner)),
            ("AggregatorArchitecture", self.architecture.clone()),
            ("LambdaMemorySize", self.lambda_memory_mb.to_string()),
            ("LambdaTimeout", self.lambda_timeout_seconds.to_string()),
            ("LogLevel", self.log_level.to_ascii_uppercase()),
            ("LogRetentionDays", self.log_retention_days.to_string()),
            ("SnapshotWindows", self.snapshot_windows.clone()),
            (
                "SnapshotRetentionDays",
                self.snapshot_retention_days.to_string(),
            ),
            ("StreamBatchSize", self.stream_batch_size.to_string()),
            (
                "StreamBatchingWindowSeconds",
                self.stream_batching_window_seconds.to_string(),
            ),
            (
                "StreamMaximumRetryAttempts",
                self.stream_max_retries.to_string(),
            ),
            ("AggregatorRoleName", opt(&self.aggregator_role_name)),
            ("AggregatorRoleArn", opt(&self.aggregator_role_arn)),
            ("EnableTracing", flag(self.tracing)),
            ("EnableAuditArchival", flag(self.audit_archival)),
            ("EnableTenantMetrics", flag(self.tenant_metrics)),
            ("AlertEventBusName", opt(&self.alert_event_bus)),
            (
                "AuditArchiveGlacierTransitionDays",
                self.audit_archive_glacier_days.to_string(),
            ),
            ("ProvisionerRoleName", opt(&self.provisioner_role_name)),
            ("EnableAlarms", flag(self.alarms)),
            ("AlarmSNSTopicArn", opt(&self.alarm_topic_arn)),
            (
                "IteratorAgeThresholdMs",
                self.iterator_age_threshold_ms.to_string(),
            ),
            (
                "LambdaDurationThresholdMs",
                self.duration_alarm_threshold_ms().to_string(),
            ),
            ("EnableIAM", flag(self.iam)),
            ("EnableIAMRoles", flag(self.iam_roles)),
            ("PermissionBoundary", opt(&self.permission_boundary)),
            ("RoleNameFormat", opt(&self.role_name_format)),
            ("PolicyNameFormat", opt(&self.policy_name_format)),
        ]
    }

    /// The aggregator duration (ms) above which the duration alarm fires:
    /// `duration_alarm_percent` of the timeout, floored.
    pub fn duration_alarm_threshold_ms(&self) -> u64 {
        u64::from(self.lambda_timeout_seconds) * 1000 * u64::from(self.duration_alarm_percent) / 100
    }
}

/// The own names of the managed policies, which `{}` of
/// [`StackOptions::policy_name_format`] stands for.
pub const POLICY_NAMES: [&str; 7] = [
    "acquire-only",
    "full-access",
    "read-only",
    "namespace-acquire",
    "namespace-full-access",
    "namespace-read-only",
    "table-key",
];

/// The longest IAM managed policy name.
const MAX_POLICY_NAME: usize = 128;

/// A policy name format holds `{}` once, only characters IAM allows in a policy name
/// (`[A-Za-z0-9+=,.@_-]`), and makes names of at most 128 characters.
fn validate_policy_name_format(format: &str) -> Result<(), StackError> {
    let refuse = |reason: &str| Err(invalid("policy name format", format, reason));
    if format.matches("{}").count() != 1 {
        return refuse("must contain {} exactly once");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c);
    if !format.replace("{}", "").chars().all(allowed) {
        return refuse("may hold only letters, digits and + = , . @ _ - besides {}");
    }
    let longest = POLICY_NAMES.iter().map(|n| n.len()).max().unwrap_or(0);
    if format.len() - 2 + longest > MAX_POLICY_NAME {
        return refuse("makes policy names longer than 128 characters");
    }
    Ok(())
}

/// Whether `arn` is what the template's `AggregatorRoleArn` accepts:
/// `arn:aws[a-z-]*:iam::[0-9]{12}:role/[a-zA-Z0-9+=,.@_/-]+`.
fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [scheme, partition, service, region, account, resource] = parts.as_slice() else {
        return false;
    };
    let name = resource.strip_prefix("role/").unwrap_or_default();
    *scheme == "arn"
        && partition
            .strip_prefix("aws")
            .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'))
        && *service == "iam"
        && region.is_empty()
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_/-".contains(c))
}

/// Whether `arn` is what the template's `KmsKeyArn` accepts:
/// `arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[a-zA-Z0-9-]+` (a key ARN; CloudWatch Logs
/// takes no alias or bare key id).
fn is_kms_key_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.split(':').collect();
    let [scheme, partition, service, region, account, resource] = parts.as_slice() else {
        return false;
    };
    let id = resource.strip_prefix("key/").unwrap_or_default();
    *scheme == "arn"
        && partition
            .strip_prefix("aws")
            .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'))
        && *service == "kms"
        && !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The key of the mark of a dynalimit stack: the template's output `Application` and the
/// stack tag `deploy` sets both carry [`MARK_VALUE`].
pub const MARK_KEY: &str = "Application";

/// The value of the mark of a dynalimit stack (see [`MARK_KEY`]).
pub const MARK_VALUE: &str = "dynalimit";

/// The stack tag that names the tool managing a stack, zae-limiter's key for it: its stacks
/// carry `ManagedBy=zae-limiter` (which its discovery lists), dynalimit's `deploy` sets
/// `ManagedBy=dynalimit`.
pub const MANAGED_BY_KEY: &str = "ManagedBy";

/// The stack tag `deploy` and `upgrade` set to the dynalimit release that last applied the
/// template (zae-limiter's stacks carry `zae-limiter:version`).
pub const VERSION_TAG_KEY: &str = "dynalimit:version";

/// The dynalimit release of this crate, which [`VERSION_TAG_KEY`] records.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// zae-limiter's stack tags: the managing tool's value, and the keys of its name, type and
/// versions (read by [`discover`]).
pub mod zae_tags {
    /// `ManagedBy`'s value on zae-limiter's stacks.
    pub const MANAGED_BY: &str = "zae-limiter";
    /// The stack name prefix of zae-limiter's untagged older stacks.
    pub const LEGACY_PREFIX: &str = "ZAEL-";
    /// The kind of stack: `limiter`, or `load-test` for its load generator.
    pub const TYPE: &str = "zae-limiter:type";
    /// The client release that deployed the stack.
    pub const VERSION: &str = "zae-limiter:version";
    /// The release of its Lambda code.
    pub const LAMBDA_VERSION: &str = "zae-limiter:lambda-version";
    /// The table's schema version.
    pub const SCHEMA_VERSION: &str = "zae-limiter:schema-version";
}

/// Which tool deployed a stack [`discover`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// dynalimit: the stack carries its mark ([`StackInfo::is_dynalimit`]).
    Dynalimit,
    /// zae-limiter: tagged `ManagedBy=zae-limiter` (or named `ZAEL-…`, its older stacks), and
    /// not its load generator.
    ZaeLimiter,
}

impl Tool {
    /// `dynalimit` or `zae-limiter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Dynalimit => "dynalimit",
            Tool::ZaeLimiter => "zae-limiter",
        }
    }
}

/// A rate limiter stack of the region, as [`discover`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deployed {
    /// The stack's state.
    pub info: StackInfo,
    /// Which tool deployed it.
    pub tool: Tool,
    /// When it was created (ISO 8601).
    pub created: Option<String>,
    /// When it was last updated (ISO 8601), if ever.
    pub updated: Option<String>,
    /// The release that last applied its template: dynalimit's [`VERSION_TAG_KEY`] tag, or
    /// zae-limiter's `zae-limiter:version` tag.
    pub version: Option<String>,
    /// Its schema version: dynalimit's `SchemaVersion` parameter, or zae-limiter's tag.
    pub schema_version: Option<String>,
    /// zae-limiter's `zae-limiter:lambda-version` tag (dynalimit records the aggregator's in
    /// the table's version record only).
    pub lambda_version: Option<String>,
}

impl Deployed {
    /// The table of the stack: its `TableName` output, else the stack's name.
    pub fn table(&self) -> &str {
        self.info
            .outputs
            .get("TableName")
            .map_or(self.info.name.as_str(), String::as_str)
    }
}

/// Which tool deployed the stack `info` describes, `None` for any other stack.
pub fn tool_of(info: &StackInfo) -> Option<Tool> {
    if info.is_dynalimit() {
        return Some(Tool::Dynalimit);
    }
    let managed = info.tags.get(MANAGED_BY_KEY).map(String::as_str) == Some(zae_tags::MANAGED_BY);
    let legacy = info.name.starts_with(zae_tags::LEGACY_PREFIX);
    let limiter = info.tags.get(zae_tags::TYPE).is_none_or(|t| t == "limiter");
    ((managed || legacy) && limiter).then_some(Tool::ZaeLimiter)
}

/// Every dynalimit and zae-limiter stack of the region the settings name (stacks being
/// deleted or deleted are left out), by name.
///
/// # Errors
/// The classified CloudFormation failure.
pub async fn discover(config: &SdkConfig) -> Result<Vec<Deployed>, StackError> {
    let cfn = aws_sdk_cloudformation::Client::new(config);
    let mut found = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = cfn
            .describe_stacks()
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| classify("DescribeStacks", e))?;
        for stack in page.stacks() {
            let info = stack_info(stack);
            if info.status == "DELETE_COMPLETE" {
                continue;
            }
            let Some(tool) = tool_of(&info) else {
                continue;
            };
            let time = |t: Option<&aws_sdk_cloudformation::primitives::DateTime>| {
                t.and_then(|t| {
                    t.fmt(aws_sdk_cloudformation::primitives::DateTimeFormat::DateTime)
                        .ok()
                })
            };
            let tag = |k: &str| info.tags.get(k).cloned();
            let (version, schema_version, lambda_version) = match tool {
                Tool::Dynalimit => (
                    tag(VERSION_TAG_KEY),
                    info.parameters.get("SchemaVersion").cloned(),
                    None,
                ),
                Tool::ZaeLimiter => (
                    tag(zae_tags::VERSION),
                    tag(zae_tags::SCHEMA_VERSION),
                    tag(zae_tags::LAMBDA_VERSION),
                ),
            };
            found.push(Deployed {
                created: time(stack.creation_time()),
                updated: time(stack.last_updated_time()),
                info,
                tool,
                version,
                schema_version,
                lambda_version,
            });
        }
        token = page.next_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    found.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    Ok(found)
}

/// The [`StackInfo`] of a described stack.
fn stack_info(stack: &aws_sdk_cloudformation::types::Stack) -> StackInfo {
    StackInfo {
        name: stack.stack_name().unwrap_or_default().to_string(),
        id: stack.stack_id().map(str::to_string),
        status: stack
            .stack_status()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        reason: stack.stack_status_reason().map(str::to_string),
        outputs: stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
            .collect(),
        parameters: stack
            .parameters()
            .iter()
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_string(),
                    p.parameter_value().unwrap_or_default().to_string(),
                ))
            })
            .collect(),
        tags: stack
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
            .collect(),
    }
}

/// The state of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackInfo {
    /// The stack name.
    pub name: String,
    /// CloudFormation's id of the stack (its ARN), which names this stack and no later one
    /// of the same name.
    pub id: Option<String>,
    /// CloudFormation's status, e.g. `CREATE_COMPLETE`.
    pub status: String,
    /// CloudFormation's status reason.
    pub reason: Option<String>,
    /// The outputs (`TableName`, `TableArn`, `StreamArn`, policy ARNs, …).
    pub outputs: BTreeMap<String, String>,
    /// The parameters the stack runs with.
    pub parameters: BTreeMap<String, String>,
    /// The stack's tags.
    pub tags: BTreeMap<String, String>,
}

impl StackInfo {
    /// Whether the stack carries dynalimit's mark: the output `Application` of the template
    /// (`dynalimit template`) or the stack tag `Application` that `deploy` sets, either with
    /// the value `dynalimit`. zae-limiter's stacks carry neither.
    pub fn is_dynalimit(&self) -> bool {
        let marked =
            |map: &BTreeMap<String, String>| map.get(MARK_KEY).is_some_and(|v| v == MARK_VALUE);
        marked(&self.outputs) || marked(&self.tags)
    }

    /// [`StackInfo::is_dynalimit`], or [`StackError::Foreign`] naming stack `name` and its tags.
    fn require_dynalimit(&self, name: &str) -> Result<(), StackError> {
        if self.is_dynalimit() {
            return Ok(());
        }
        Err(StackError::Foreign {
            stack: name.to_owned(),
            tags: self.tags.clone().into_iter().collect(),
        })
    }
}

/// One resource event of a stack operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackEvent {
    /// When it happened (ISO 8601).
    pub timestamp: String,
    /// The resource's logical id (the stack's own name for stack-level events).
    pub logical_id: String,
    /// The resource type.
    pub resource_type: String,
    /// The resource status, e.g. `CREATE_IN_PROGRESS`.
    pub status: String,
    /// CloudFormation's reason, mostly on failures.
    pub reason: Option<String>,
}

impl fmt::Display for StackEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:<24} {:<34} {}",
            self.timestamp, self.status, self.logical_id, self.resource_type
        )?;
        if let Some(reason) = &self.reason {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

/// The template an upgrade applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// This release's template, with the stack's tags marked at this release.
    Current,
    /// The template the stack runs, with its tags as they are: an upgrade of the
    /// aggregator's code alone.
    Kept,
}

/// Creates, updates, inspects and deletes one dynalimit stack.
#[derive(Debug, Clone)]
pub struct StackManager {
    name: String,
    cfn: aws_sdk_cloudformation::Client,
    s3: aws_sdk_s3::Client,
    poll: Duration,
    max_wait: Duration,
    /// Whether deploy and delete wait for CloudFormation to finish.
    wait: bool,
}

impl StackManager {
    /// A manager of stack `name` with the given AWS settings.
    pub fn from_sdk_config(name: &str, config: &SdkConfig) -> StackManager {
        let s3_config = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(config.endpoint_url().is_some())
            .build();
        StackManager {
            name: name.to_string(),
            cfn: aws_sdk_cloudformation::Client::new(config),
            s3: aws_sdk_s3::Client::from_conf(s3_config),
            poll: Duration::from_secs(5),
            max_wait: Duration::from_secs(3600),
            wait: true,
        }
    }

    /// Whether [`StackManager::deploy`] and [`StackManager::delete`] wait for CloudFormation
    /// to finish (default: they do). Without waiting they return once CloudFormation has
    /// accepted the request, with the stack's status at that moment: a deploy then uploads
    /// no aggregator code (the code bucket may not exist yet), and refuses a stack whose
    /// creation failed (deleting it first needs a wait). [`StackManager::upgrade`] always
    /// waits and refuses a manager that does not.
    #[must_use]
    pub fn wait_for_completion(mut self, wait: bool) -> StackManager {
        self.wait = wait;
        self
    }

    /// How often a wait polls CloudFormation (default 5 s).
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> StackManager {
        self.poll = interval.max(Duration::from_millis(10));
        self
    }

    /// The stack name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stack's state, `None` when it does not exist.
    ///
    /// # Errors
    /// The classified CloudFormation failure.
    pub async fn status(&self) -> Result<Option<StackInfo>, StackError> {
        let out = match self
            .cfn
            .describe_stacks()
            .stack_name(&self.name)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if is_missing_stack(&e) => return Ok(None),
            Err(e) => return Err(classify("DescribeStacks", e)),
        };
        let Some(stack) = out.stacks().first() else {
            return Ok(None);
        };
        let info = StackInfo {
            name: self.name.clone(),
            ..stack_info(stack)
        };
        if info.status == "DELETE_COMPLETE" {
            return Ok(None);
        }
        Ok(Some(info))
    }

    /// Creates the stack, or updates it when it exists (a stack whose creation failed is
    /// deleted and created again), and waits (unless [`StackManager::wait_for_completion`]
    /// says not to). With `aggregator_zip`, the code is then uploaded to the stack's code
    /// bucket and the function switched to it. Every resource event is passed to
    /// `progress`.
    ///
    /// An existing stack is updated only when it carries dynalimit's mark
    /// ([`StackInfo::is_dynalimit`]: the template's output, or the stack tag of a stack an
    /// older template made); the update names the stack by the id read with the mark, so a
    /// stack of the same name created in between is not touched.
    ///
    /// # Errors
    /// [`StackError::Validation`] for bad options (before any request),
    /// [`StackError::Foreign`] (nothing changed) for an existing stack without the mark,
    /// [`StackError::Failed`] when CloudFormation rolls back, and the classified
    /// failures.
    pub async fn deploy(
        &self,
        options: &StackOptions,
        aggregator_zip: Option<&[u8]>,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<StackInfo, StackError> {
        ids::validate_stack_name(&self.name)?;
        options.validate()?;
        if aggregator_zip.is_some() && !options.aggregator {
            return Err(invalid(
                "aggregator",
                "disabled",
                "aggregator code was given but the aggregator is disabled",
            ));
        }
        let mut existing = self.status().await?;
        if let Some(info) = &existing {
            info.require_dynalimit(&self.name)?;
            if info.status.ends_with("_IN_PROGRESS") {
                return Err(StackError::Failed {
                    stack: self.name.clone(),
                    status: info.status.clone(),
                    reason: "another operation is in progress; wait for it and retry".into(),
                });
            }
            if info.status == "ROLLBACK_COMPLETE" || info.status == "ROLLBACK_FAILED" {
                if !self.wait {
                    return Err(StackError::Failed {
                        stack: self.name.clone(),
                        status: info.status.clone(),
                        reason: "its creation failed: a deploy that waits deletes it and \
                                 creates it again"
                            .into(),
                    });
                }
                self.delete(progress).await?;
                existing = None;
            }
        }
        let mut info = match existing {
            None => {
                self.create(options, progress).await?;
                self.expect_status().await?
            }
            Some(info) => {
                let key = info.parameters.get("AggregatorCodeKey").cloned();
                let key = key.filter(|_| options.aggregator).unwrap_or_default();
                let update = (Self::cfn_parameters(options, &key), Self::tags(options));
                self.update(&info, update, Template::Current, progress)
                    .await?;
                self.expect_status().await?
            }
        };
        if let Some(zip) = aggregator_zip.filter(|_| self.wait) {
            let key = self.upload(&info, zip).await?;
            if info.parameters.get("AggregatorCodeKey") != Some(&key) {
                let update = (Self::cfn_parameters(options, &key), Self::tags(options));
                self.update(&info, update, Template::Current, progress)
                    .await?;
                info = self.expect_status().await?;
            }
        }
        Ok(info)
    }

    /// Uploads `zip` to the code bucket of the stack `info` describes; returns its key.
    async fn upload(&self, info: &StackInfo, zip: &[u8]) -> Result<String, StackError> {
        let bucket =
            info.outputs
                .get("CodeBucketName")
                .cloned()
                .ok_or_else(|| StackError::Failed {
                    stack: self.name.clone(),
                    status: info.status.clone(),
                    reason: "the stack has no CodeBucketName output".into(),
                })?;
        let key = code_key(zip);
        self.s3
            .put_object()
            .bucket(&bucket)
            .key(&key)
            .body(zip.to_vec().into())
            .send()
            .await
            .map_err(|e| classify("PutObject", e))?;
        Ok(key)
    }

    /// Brings a dynalimit stack to this release, keeping what it was deployed with: updates
    /// it with this crate's template, every parameter the stack has at its previous value
    /// (`SchemaVersion` at this release's; a parameter the template added takes its default,
    /// the duration alarm's threshold the default share of the stack's timeout), its own tags
    /// with [`VERSION_TAG_KEY`] at [`RELEASE`]; then, with `aggregator_zip`, uploads the code
    /// and switches the function to it, as [`StackManager::deploy`] does. With
    /// [`Template::Kept`] (the CLI's `upgrade --lambda-only`) only the code changes: the
    /// switch keeps the stack's template, its other parameters and its tags. Every resource
    /// event is passed to `progress`. The updates name the stack by the id read with its mark.
    ///
    /// An answer lost after an update was accepted leaves the update running or done; the
    /// next `upgrade` waits for nothing and finds it (CloudFormation reports an in-progress
    /// stack as [`StackError::Failed`], a finished one as updated, and an unchanged one as
    /// nothing to do).
    ///
    /// # Errors
    /// [`StackError::NotFound`] without a stack; [`StackError::Foreign`] (nothing changed)
    /// for a stack without dynalimit's mark; [`StackError::Validation`] for code given to a
    /// stack without the aggregator, and for [`Template::Kept`] without code (nothing to
    /// do); [`StackError::Failed`] for a stack busy or never created, or when CloudFormation
    /// rolls back; the classified failures.
    pub async fn upgrade(
        &self,
        aggregator_zip: Option<&[u8]>,
        template: Template,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<StackInfo, StackError> {
        ids::validate_stack_name(&self.name)?;
        if !self.wait {
            return Err(invalid(
                "wait",
                "off",
                "an upgrade updates the stack in steps and waits for each",
            ));
        }
        if template == Template::Kept && aggregator_zip.is_none() {
            return Err(invalid(
                "lambda-only",
                "no code",
                "an upgrade of the code alone needs the aggregator's code",
            ));
        }
        let mut info = self.expect_status().await?;
        info.require_dynalimit(&self.name)?;
        let busy = info.status.ends_with("_IN_PROGRESS");
        if busy || info.status == "ROLLBACK_COMPLETE" || info.status == "ROLLBACK_FAILED" {
            return Err(StackError::Failed {
                stack: self.name.clone(),
                status: info.status.clone(),
                reason: if busy {
                    "another operation is in progress; wait for it and retry".into()
                } else {
                    "its creation failed; run deploy to create it again".into()
                },
            });
        }
        let aggregator = info.parameters.get("EnableAggregator").map(String::as_str);
        if aggregator_zip.is_some() && aggregator != Some("true") {
            return Err(invalid(
                "aggregator",
                "disabled",
                "the stack runs without the aggregator: deploy it with the aggregator first",
            ));
        }
        let tags = match template {
            Template::Current => Self::marked_tags(info.tags.clone().into_iter()),
            Template::Kept => tag_list(info.tags.clone().into_iter()),
        };
        if template == Template::Current {
            let update = (Self::kept_parameters(&info, None, template), tags.clone());
            self.update(&info, update, template, progress).await?;
            info = self.expect_status().await?;
        }
        if let Some(zip) = aggregator_zip {
            let key = self.upload(&info, zip).await?;
            if info.parameters.get("AggregatorCodeKey") != Some(&key) {
                let parameters = Self::kept_parameters(&info, Some(&key), template);
                self.update(&info, (parameters, tags), template, progress)
                    .await?;
                info = self.expect_status().await?;
            }
        }
        Ok(info)
    }

    /// The parameters of an upgrade of the stack `info` describes (see
    /// [`StackManager::upgrade`]), with `code_key` when the code changes. Under
    /// [`Template::Kept`] every parameter the stack has (whatever its template declares)
    /// keeps its value, `SchemaVersion` included, and no other is sent.
    fn kept_parameters(
        info: &StackInfo,
        code_key: Option<&str>,
        template: Template,
    ) -> Vec<Parameter> {
        if template == Template::Kept {
            return info
                .parameters
                .keys()
                .map(|name| {
                    let p = Parameter::builder().parameter_key(name);
                    match code_key {
                        Some(key) if name == "AggregatorCodeKey" => p.parameter_value(key),
                        _ => p.use_previous_value(true),
                    }
                    .build()
                })
                .collect();
        }
        let defaults = StackOptions::default();
        let names = defaults
            .parameters()
            .into_iter()
            .map(|(name, _)| name)
            .chain(["AggregatorCodeKey"]);
        names
            .filter_map(|name| {
                let p = Parameter::builder().parameter_key(name);
                let value = match (name, code_key) {
                    ("SchemaVersion", _) => Some(SCHEMA_VERSION.to_owned()),
                    ("AggregatorCodeKey", Some(key)) => Some(key.to_owned()),
                    _ if info.parameters.contains_key(name) => {
                        return Some(p.use_previous_value(true).build());
                    }
                    ("LambdaDurationThresholdMs", _) => {
                        let mut o = StackOptions::default();
                        if let Some(t) = info.parameters.get("LambdaTimeout")
                            && let Ok(t) = t.parse()
                        {
                            o.lambda_timeout_seconds = t;
                        }
                        Some(o.duration_alarm_threshold_ms().to_string())
                    }
                    _ => None,
                };
                value.map(|v| p.parameter_value(v).build())
            })
            .collect()
    }

    /// Deletes the stack (emptying its code bucket first) and waits until it is gone (unless
    /// [`StackManager::wait_for_completion`] says not to). Returns false when there was no
    /// stack.
    ///
    /// Only a stack with dynalimit's mark ([`StackInfo::is_dynalimit`]) is deleted; the
    /// request names the stack by the id read with the mark, so a stack of the same name
    /// created in between is not touched. The table is retained (`DeletionPolicy: Retain`)
    /// with everything in it; drop it explicitly, after turning its deletion protection off,
    /// when it is no longer needed.
    ///
    /// # Errors
    /// [`StackError::Foreign`] (nothing deleted) for a stack without the mark,
    /// [`StackError::Failed`] when the deletion fails, and the classified failures.
    pub async fn delete(
        &self,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<bool, StackError> {
        let Some(info) = self.status().await? else {
            return Ok(false);
        };
        info.require_dynalimit(&self.name)?;
        if let Some(bucket) = info.outputs.get("CodeBucketName") {
            self.empty_bucket(bucket).await?;
        }
        let seen = self.event_ids().await?;
        self.cfn
            .delete_stack()
            .stack_name(info.id.as_deref().unwrap_or(&self.name))
            .send()
            .await
            .map_err(|e| classify("DeleteStack", e))?;
        self.finish("DELETE_COMPLETE", seen, progress).await?;
        Ok(true)
    }

    /// Deletes every object of `bucket`. The code bucket keeps versions, so each version and
    /// delete marker is deleted by its id (an object of an unversioned bucket has the version
    /// `null`); CloudFormation deletes only an empty bucket.
    async fn empty_bucket(&self, bucket: &str) -> Result<(), StackError> {
        let mut key_marker = None;
        let mut version_marker = None;
        loop {
            let page = match self
                .s3
                .list_object_versions()
                .bucket(bucket)
                .set_key_marker(key_marker)
                .set_version_id_marker(version_marker)
                .send()
                .await
            {
                Ok(page) => page,
                Err(e) if e.code() == Some("NoSuchBucket") => return Ok(()),
                Err(e) => return Err(classify("ListObjectVersions", e)),
            };
            let versions = page.versions().iter().map(|v| (v.key(), v.version_id()));
            let markers = page
                .delete_markers()
                .iter()
                .map(|m| (m.key(), m.version_id()));
            for (key, version) in versions.chain(markers) {
                let Some(key) = key else { continue };
                self.s3
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .set_version_id(version.map(str::to_string))
                    .send()
                    .await
                    .map_err(|e| classify("DeleteObject", e))?;
            }
            if page.is_truncated() != Some(true) {
                return Ok(());
            }
            key_marker = page.next_key_marker().map(str::to_string);
            version_marker = page.next_version_id_marker().map(str::to_string);
        }
    }

    async fn expect_status(&self) -> Result<StackInfo, StackError> {
        self.status().await?.ok_or_else(|| StackError::NotFound {
            stack: self.name.clone(),
        })
    }

    fn cfn_parameters(options: &StackOptions, code_key: &str) -> Vec<Parameter> {
        options
            .parameters()
            .into_iter()
            .chain([("AggregatorCodeKey", code_key.to_string())])
            .map(|(k, v)| {
                Parameter::builder()
                    .parameter_key(k)
                    .parameter_value(v)
                    .build()
            })
            .collect()
    }

    fn tags(options: &StackOptions) -> Vec<Tag> {
        Self::marked_tags(options.tags.iter().cloned())
    }

    /// dynalimit's mark, `ManagedBy=dynalimit` and [`VERSION_TAG_KEY`], then `others` but
    /// those of the same keys.
    fn marked_tags(others: impl Iterator<Item = (String, String)>) -> Vec<Tag> {
        let managed = [
            (MARK_KEY, MARK_VALUE),
            (MANAGED_BY_KEY, MARK_VALUE),
            (VERSION_TAG_KEY, RELEASE),
        ];
        tag_list(
            managed
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .chain(others.filter(|(k, _)| !managed.iter().any(|(m, _)| m == k))),
        )
    }

    async fn create(
        &self,
        options: &StackOptions,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<(), StackError> {
        self.cfn
            .create_stack()
            .stack_name(&self.name)
            .template_body(TEMPLATE)
            .set_parameters(Some(Self::cfn_parameters(options, "")))
            .capabilities(Capability::CapabilityNamedIam)
            .set_tags(Some(Self::tags(options)))
            .send()
            .await
            .map_err(|e| classify("CreateStack", e))?;
        self.finish("CREATE_COMPLETE", HashSet::new(), progress)
            .await
    }

    /// Waits for `target` as [`StackManager::wait_for_completion`] says.
    async fn finish(
        &self,
        target: &str,
        seen: HashSet<String>,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<(), StackError> {
        if self.wait {
            self.wait(target, seen, progress).await
        } else {
            Ok(())
        }
    }

    /// Updates the stack `info` describes, named by its id, with this release's template, or
    /// with the template it runs when `template` is [`Template::Kept`], and waits for the
    /// update.
    async fn update(
        &self,
        info: &StackInfo,
        (parameters, tags): (Vec<Parameter>, Vec<Tag>),
        template: Template,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<(), StackError> {
        let seen = self.event_ids().await?;
        let request = self
            .cfn
            .update_stack()
            .stack_name(info.id.as_deref().unwrap_or(&self.name));
        let request = match template {
            Template::Current => request.template_body(TEMPLATE),
            Template::Kept => request.use_previous_template(true),
        };
        let result = request
            .set_parameters(Some(parameters))
            .capabilities(Capability::CapabilityNamedIam)
            .set_tags(Some(tags))
            .send()
            .await;
        match result {
            Ok(_) => self.finish("UPDATE_COMPLETE", seen, progress).await,
            Err(e)
                if e.message()
                    .is_some_and(|m| m.contains("No updates are to be performed")) =>
            {
                Ok(())
            }
            Err(e) => Err(classify("UpdateStack", e)),
        }
    }

    async fn event_ids(&self) -> Result<HashSet<String>, StackError> {
        Ok(self.events().await?.into_iter().map(|(id, _)| id).collect())
    }

    /// The newest page of events, oldest first, with their ids.
    async fn events(&self) -> Result<Vec<(String, StackEvent)>, StackError> {
        let out = match self
            .cfn
            .describe_stack_events()
            .stack_name(&self.name)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if is_missing_stack(&e) => return Ok(Vec::new()),
            Err(e) => return Err(classify("DescribeStackEvents", e)),
        };
        let mut events: Vec<_> = out
            .stack_events()
            .iter()
            .map(|e| {
                let id = e.event_id().unwrap_or_default().to_string();
                let event = StackEvent {
                    timestamp: e
                        .timestamp()
                        .and_then(|t| {
                            t.fmt(aws_sdk_cloudformation::primitives::DateTimeFormat::DateTime)
                                .ok()
                        })
                        .unwrap_or_default(),
                    logical_id: e.logical_resource_id().unwrap_or_default().to_string(),
                    resource_type: e.resource_type().unwrap_or_default().to_string(),
                    status: e
                        .resource_status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                    reason: e
                        .resource_status_reason()
                        .filter(|r| !r.is_empty())
                        .map(str::to_string),
                };
                (id, event)
            })
            .collect();
        events.reverse();
        Ok(events)
    }

    /// Hands every event not in `seen` to `progress`, oldest first, and keeps the reason of the
    /// first failure.
    async fn report_new_events(
        &self,
        seen: &mut HashSet<String>,
        first_failure: &mut Option<String>,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<(), StackError> {
        for (id, event) in self.events().await? {
            if seen.insert(id) {
                if event.status.ends_with("_FAILED")
                    && first_failure.is_none()
                    && let Some(reason) = &event.reason
                {
                    *first_failure = Some(format!("{}: {reason}", event.logical_id));
                }
                progress(&event);
            }
        }
        Ok(())
    }

    async fn wait(
        &self,
        goal: &str,
        mut seen: HashSet<String>,
        progress: &mut (dyn FnMut(&StackEvent) + Send),
    ) -> Result<(), StackError> {
        let polls = (self.max_wait.as_millis() / self.poll.as_millis().max(1)).max(1);
        let mut first_failure: Option<String> = None;
        for _ in 0..polls {
            self.report_new_events(&mut seen, &mut first_failure, progress)
                .await?;
            let status = self.status().await?;
            let current = status
                .as_ref()
                .map_or_else(|| "DELETE_COMPLETE".to_string(), |s| s.status.clone());
            if !current.ends_with("_IN_PROGRESS") {
                // The stack may have finished after the events above were read: its last
                // events (the stack's own final one among them) are reported before returning.
                self.report_new_events(&mut seen, &mut first_failure, progress)
                    .await?;
            }
            if current == goal {
                return Ok(());
            }
            if !current.ends_with("_IN_PROGRESS") {
                let reason = first_failure
                    .or_else(|| status.and_then(|s| s.reason))
                    .unwrap_or_else(|| format!("expected {goal}"));
                return Err(StackError::Failed {
                    stack: self.name.clone(),
                    status: current,
                    reason,
                });
            }
            tokio::time::sleep(self.poll).await;
        }
        Err(StackError::Failed {
            stack: self.name.clone(),
            status: "TIMEOUT".into(),
            reason: format!("did not reach {goal} within {} s", self.max_wait.as_secs()),
        })
    }
}

fn is_missing_stack<E: ProvideErrorMetadata>(e: &E) -> bool {
    e.message().is_some_and(|m| m.contains("does not exist"))
}

/// The object key of an aggregator zip: `aggregator/{fnv1a-64 of the bytes}.zip`, so a new
/// build gets a new key and CloudFormation updates the function.
pub fn code_key(zip: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in zip {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("aggregator/{hash:016x}-{}.zip", zip.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_name_every_parameter_but_the_code_key() {
        let options = StackOptions::default();
        options.validate().unwrap();
        let names: Vec<_> = options.parameters().iter().map(|(k, _)| *k).collect();
        for name in &names {
            assert!(TEMPLATE.contains(&format!("\n  {name}:\n")), "{name}");
        }
        assert!(!names.contains(&"AggregatorCodeKey"));
    }

    #[test]
    fn bad_options_are_refused() {
        let cases: [fn(&mut StackOptions); 24] = [
            |o| o.alert_event_bus = Some(String::new()),
            |o| {
                o.alert_event_bus = Some("arn:aws:events:eu-west-1:123456789012:event-bus/b".into())
            },
            |o| {
                o.aggregator = false;
                o.alert_event_bus = Some("default".into());
            },
            |o| o.architecture = "mips".into(),
            |o| o.lambda_memory_mb = 64,
            |o| o.lambda_timeout_seconds = 901,
            |o| o.log_level = "loud".into(),
            |o| o.log_retention_days = 2,
            |o| o.snapshot_windows = "weekly".into(),
            |o| o.pitr_recovery_days = Some(36),
            |o| o.role_name_format = Some("no-placeholder".into()),
            |o| o.alarm_topic_arn = Some("topic".into()),
            |o| o.kms_key_arn = Some("alias/dynalimit".into()),
            |o| o.kms_key_arn = Some("arn:aws:kms:eu-west-1:123456789012:alias/dynalimit".into()),
            |o| o.kms_key_arn = Some(String::new()),
            |o| {
                o.aggregator = false;
                o.provisioner = true;
            },
            |o| o.duration_alarm_percent = 0,
            |o| o.duration_alarm_percent = 101,
            |o| o.policy_name_format = Some("no-placeholder".into()),
            |o| o.policy_name_format = Some("a-{}-{}".into()),
            |o| o.policy_name_format = Some("team/{}".into()),
            |o| o.policy_name_format = Some(format!("{}{{}}", "p".repeat(110))),
            |o| o.aggregator_role_arn = Some("my-role".into()),
            |o| {
                o.aggregator_role_name = Some("my-role".into());
                o.aggregator_role_arn = Some("arn:aws:iam::123456789012:role/my-role".into());
            },
        ];
        for change in cases {
            let mut o = StackOptions::default();
            change(&mut o);
            assert!(matches!(o.validate(), Err(StackError::Validation(_))));
        }
    }

    #[test]
    fn role_arns_name_an_iam_role_of_an_account() {
        for good in [
            "arn:aws:iam::123456789012:role/dynalimit-aggregator",
            "arn:aws-cn:iam::123456789012:role/service/team+lim@x.y_z-1",
        ] {
            assert!(is_role_arn(good), "{good}");
        }
        for bad in [
            "",
            "dynalimit-aggregator",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:user/someone",
            "arn:aws:iam:eu-west-1:123456789012:role/r",
            "arn:aws:iam::12345678901:role/r",
            "arn:aws:sts::123456789012:role/r",
            "arn:aws:iam::123456789012:role/r:x",
            "arn:aws:iam::123456789012:role/r x",
        ] {
            assert!(!is_role_arn(bad), "{bad}");
        }
    }

    #[test]
    fn the_duration_alarm_fires_at_a_share_of_the_timeout() {
        let mut o = StackOptions::default();
        assert_eq!(o.duration_alarm_threshold_ms(), 48_000);
        o.lambda_timeout_seconds = 900;
        o.duration_alarm_percent = 100;
        assert_eq!(o.duration_alarm_threshold_ms(), 900_000);
        o.lambda_timeout_seconds = 1;
        o.duration_alarm_percent = 1;
        assert_eq!(o.duration_alarm_threshold_ms(), 10);
        assert!(
            o.parameters()
                .contains(&("LambdaDurationThresholdMs", "10".to_owned()))
        );
    }

    #[test]
    fn policy_name_formats_make_valid_iam_names() {
        let longest = format!("{}{{}}", "p".repeat(128 - 21));
        for good in [
            "limits-prod-{}",
            "{}",
            "team+x=y,z.a@b_c-{}",
            longest.as_str(),
        ] {
            validate_policy_name_format(good).unwrap();
        }
    }

    #[test]
    fn kms_keys_are_key_arns_of_any_partition() {
        for good in [
            "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
            "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab",
            "arn:aws-cn:kms:cn-north-1:123456789012:key/k",
        ] {
            assert!(is_kms_key_arn(good), "{good}");
            let o = StackOptions {
                kms_key_arn: Some(good.into()),
                ..StackOptions::default()
            };
            o.validate().unwrap();
            assert!(o.parameters().contains(&("KmsKeyArn", good.to_string())));
        }
        for bad in [
            "",
            "1234abcd-12ab-34cd-56ef-1234567890ab",
            "alias/dynalimit",
            "arn:aws:kms:eu-west-1:123456789012:alias/dynalimit",
            "arn:aws:kms:eu-west-1:12345678901:key/k",
            "arn:aws:kms:eu-west-1:123456789012:key/",
            "arn:aws:kms:eu-west-1:123456789012:key/k/extra",
            "arn:aws:kms:eu-west-1:123456789012:key/k:x",
            "arn:aws:s3:eu-west-1:123456789012:key/k",
            "arn:gcp:kms:eu-west-1:123456789012:key/k",
            "arn:aws:kms::123456789012:key/k",
            "arn:aws:kms:EU-WEST-1:123456789012:key/k",
        ] {
            assert!(!is_kms_key_arn(bad), "{bad}");
        }
        // None leaves the parameter empty: the template then changes nothing.
        assert!(
            StackOptions::default()
                .parameters()
                .contains(&("KmsKeyArn", String::new()))
        );
    }

    #[test]
    fn the_mark_is_the_output_or_the_stack_tag_and_nothing_else() {
        let info = |outputs: &[(&str, &str)], tags: &[(&str, &str)]| StackInfo {
            name: "limits".into(),
            id: None,
            status: "CREATE_COMPLETE".into(),
            reason: None,
            outputs: outputs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            parameters: BTreeMap::new(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert!(info(&[("Application", "dynalimit")], &[]).is_dynalimit());
        assert!(info(&[], &[("Application", "dynalimit")]).is_dynalimit());
        // zae-limiter's stack: tagged as its own, outputs of the same names as ours.
        let zae = info(
            &[("TableName", "limits"), ("TableArn", "arn:aws:dynamodb:x")],
            &[("ManagedBy", "zae-limiter"), ("zae-limiter:name", "limits")],
        );
        assert!(!zae.is_dynalimit());
        for (k, v) in [
            ("Application", "zae-limiter"),
            ("Application", "Dynalimit"),
            ("application", "dynalimit"),
            ("ManagedBy", "dynalimit"),
            ("SchemaVersion", "1.0.0"),
        ] {
            assert!(!info(&[(k, v)], &[]).is_dynalimit(), "output {k}={v}");
            assert!(!info(&[], &[(k, v)]).is_dynalimit(), "tag {k}={v}");
        }
    }

    #[test]
    fn deploy_tags_the_stack_as_dynalimits_over_a_given_tag_of_the_same_key() {
        let options = StackOptions {
            tags: vec![
                ("team".into(), "payments".into()),
                ("ManagedBy".into(), "zae-limiter".into()),
                ("Application".into(), "other".into()),
            ],
            ..StackOptions::default()
        };
        let tags: Vec<(String, String)> = StackManager::tags(&options)
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            tags,
            [
                ("Application".to_owned(), "dynalimit".to_owned()),
                ("ManagedBy".to_owned(), "dynalimit".to_owned()),
                ("dynalimit:version".to_owned(), RELEASE.to_owned()),
                ("team".to_owned(), "payments".to_owned()),
            ]
        );
    }

    #[test]
    fn discovery_knows_both_tools_stacks_and_no_other() {
        let info = |name: &str, outputs: &[(&str, &str)], tags: &[(&str, &str)]| StackInfo {
            name: name.into(),
            id: None,
            status: "CREATE_COMPLETE".into(),
            reason: None,
            outputs: outputs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            parameters: BTreeMap::new(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let ours = info("a", &[("Application", "dynalimit")], &[]);
        assert_eq!(tool_of(&ours), Some(Tool::Dynalimit));
        let zae = info("b", &[], &[("ManagedBy", "zae-limiter")]);
        assert_eq!(tool_of(&zae), Some(Tool::ZaeLimiter));
        let legacy = info("ZAEL-old", &[], &[]);
        assert_eq!(tool_of(&legacy), Some(Tool::ZaeLimiter));
        let limiter = info(
            "c",
            &[],
            &[
                ("ManagedBy", "zae-limiter"),
                ("zae-limiter:type", "limiter"),
            ],
        );
        assert_eq!(tool_of(&limiter), Some(Tool::ZaeLimiter));
        let load_test = info(
            "d",
            &[],
            &[
                ("ManagedBy", "zae-limiter"),
                ("zae-limiter:type", "load-test"),
            ],
        );
        assert_eq!(
            tool_of(&load_test),
            None,
            "its load generator is no limiter"
        );
        for other in [
            info("e", &[], &[]),
            info("f", &[], &[("ManagedBy", "terraform")]),
            info("zael-lower", &[], &[]),
        ] {
            assert_eq!(tool_of(&other), None, "{}", other.name);
        }
    }

    #[test]
    fn an_upgrade_keeps_every_parameter_but_the_schema_and_the_new_ones() {
        let mut stack = StackInfo {
            name: "limits".into(),
            id: None,
            status: "UPDATE_COMPLETE".into(),
            reason: None,
            outputs: BTreeMap::new(),
            parameters: StackOptions::default()
                .parameters()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .chain([(
                    "AggregatorCodeKey".to_owned(),
                    "aggregator/old.zip".to_owned(),
                )])
                .collect(),
            tags: BTreeMap::new(),
        };
        // As an older template left it: without the duration alarm's threshold.
        stack.parameters.remove("LambdaDurationThresholdMs");
        stack
            .parameters
            .insert("LambdaTimeout".into(), "300".into());
        let shown = |p: &Parameter| {
            (
                p.parameter_key().unwrap_or_default().to_owned(),
                p.use_previous_value(),
                p.parameter_value().map(str::to_owned),
            )
        };
        let kept: Vec<_> =
            StackManager::kept_parameters(&stack, Some("aggregator/k.zip"), Template::Current)
                .iter()
                .map(shown)
                .collect();
        for (name, previous, value) in &kept {
            match name.as_str() {
                "SchemaVersion" => assert_eq!(value.as_deref(), Some(SCHEMA_VERSION)),
                "AggregatorCodeKey" => assert_eq!(value.as_deref(), Some("aggregator/k.zip")),
                "LambdaDurationThresholdMs" => assert_eq!(value.as_deref(), Some("240000")),
                _ => assert_eq!((*previous, value), (Some(true), &None), "{name}"),
            }
        }
        assert_eq!(kept.len(), StackOptions::default().parameters().len() + 1);
        // Without new code, the code key stays as it was.
        let kept = StackManager::kept_parameters(&stack, None, Template::Current);
        let key = kept
            .iter()
            .find(|p| p.parameter_key() == Some("AggregatorCodeKey"))
            .unwrap();
        assert_eq!(key.use_previous_value(), Some(true));
        // The code alone: its key changes, every parameter the stack has keeps its value
        // (the schema version, and one this release's template no longer declares,
        // included), and none the stack lacks is sent.
        stack
            .parameters
            .insert("RetiredParameter".into(), "x".into());
        let kept: Vec<_> =
            StackManager::kept_parameters(&stack, Some("aggregator/k.zip"), Template::Kept)
                .iter()
                .map(shown)
                .collect();
        for (name, previous, value) in &kept {
            match name.as_str() {
                "AggregatorCodeKey" => assert_eq!(value.as_deref(), Some("aggregator/k.zip")),
                _ => assert_eq!((*previous, value), (Some(true), &None), "{name}"),
            }
        }
        assert_eq!(kept.len(), stack.parameters.len());
    }

    #[test]
    fn a_refused_foreign_stack_names_its_tags() {
        let e = StackError::Foreign {
            stack: "limits".into(),
            tags: vec![("ManagedBy".into(), "zae-limiter".into())],
        };
        let text = e.to_string();
        assert!(text.contains("not a dynalimit stack"), "{text}");
        assert!(text.contains("ManagedBy=zae-limiter"), "{text}");
        assert!(text.contains("left as it is"), "{text}");
    }

    #[test]
    fn code_keys_differ_by_content() {
        assert_ne!(code_key(b"a"), code_key(b"b"));
        assert_eq!(code_key(b"a"), code_key(b"a"));
        assert!(code_key(b"abc").starts_with("aggregator/"));
    }
}
