//! `deploy`, `status`, `template`, `version`, `lambda-export`: the stack and the table
//! (`delete`, and `list`, `check` and `upgrade`, have modules of their own).

use std::path::PathBuf;

use crate::context::Global;
use crate::output::infra::{
    LambdaPackage, Stack, Status, TableCompatibility, TableVersion, Version,
};
use crate::package;
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use dynalimit_format::version;
use dynalimit_repository::Repository;
use dynalimit_stack::{self as stack, StackError, StackOptions};

/// Where the aggregator's code comes from (`deploy`, `upgrade`, `lambda-export`).
#[derive(Debug, Args)]
pub(crate) struct CodeArgs {
    /// Aggregator Lambda zip (its `bootstrap` built for provided.al2023). Without this or
    /// --aggregator-binary, the zip `scripts/build-lambda --arch ARCH` writes
    /// (target/lambda/ARCH/dynalimit-aggregator/bootstrap.zip, under the current directory) is
    /// used when present.
    #[arg(long, value_name = "ZIP", conflicts_with = "aggregator_binary")]
    pub(crate) aggregator_zip: Option<PathBuf>,
    /// Built aggregator binary (Linux, for the aggregator's architecture) to package as
    /// `bootstrap`.
    #[arg(long, value_name = "FILE")]
    pub(crate) aggregator_binary: Option<PathBuf>,
}

impl CodeArgs {
    /// The zip to upload: the one given, the binary given packaged, else the one
    /// `scripts/build-lambda --arch architecture` wrote ([`Code::Missing`] when there is none).
    pub(crate) fn read(&self, architecture: &str) -> Result<Code> {
        if let Some(path) = &self.aggregator_zip {
            return read_zip(path).map(|bytes| Code::Zip(bytes, path.clone()));
        }
        if let Some(path) = &self.aggregator_binary {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            return Ok(Code::Zip(package::bootstrap_zip(&bytes)?, path.clone()));
        }
        let built = built_zip(architecture);
        if !built.exists() {
            return Ok(Code::Missing(built));
        }
        eprintln!("packaging the aggregator from {}", built.display());
        read_zip(&built).map(|bytes| Code::Zip(bytes, built))
    }
}

/// The bytes of the zip archive at `path`.
fn read_zip(path: &std::path::Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !bytes.starts_with(b"PK") {
        bail!("{} is not a zip archive", path.display());
    }
    Ok(bytes)
}

/// Options of `deploy`; unset ones keep the template's defaults.
#[derive(Debug, Args)]
pub(crate) struct DeployArgs {
    #[command(flatten)]
    pub(crate) code: CodeArgs,
    /// Deploy without the aggregator Lambda, its code bucket, dead-letter queue and alarms.
    #[arg(long, conflicts_with_all = ["aggregator_zip", "aggregator_binary", "provisioner"])]
    pub(crate) no_aggregator: bool,
    /// Also deploy the limits provisioner Lambda (it runs from the aggregator's package),
    /// which `limits cfn-template`'s custom resource invokes.
    #[arg(long)]
    pub(crate) provisioner: bool,
    /// Aggregator architecture.
    #[arg(long, value_parser = ["arm64", "x86_64"])]
    pub(crate) architecture: Option<String>,
    /// Aggregator memory in MB (default 256).
    #[arg(long, value_name = "MB")]
    pub(crate) lambda_memory: Option<u32>,
    /// Aggregator timeout in seconds (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) lambda_timeout: Option<u32>,
    /// Aggregator log level.
    #[arg(long, ignore_case = true, value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub(crate) log_level: Option<String>,
    /// Retention of the aggregator's logs in days (default 30).
    #[arg(long, value_name = "DAYS")]
    pub(crate) log_retention_days: Option<u32>,
    /// Usage snapshot windows (default hourly,daily).
    #[arg(long, value_name = "LIST")]
    pub(crate) snapshot_windows: Option<String>,
    /// Days usage snapshots are kept (default 90).
    #[arg(long, value_name = "DAYS", alias = "usage-retention-days")]
    pub(crate) snapshot_retention_days: Option<u32>,
    /// Days audit events stay in the table before they expire (default 90): written to the
    /// namespace's system configuration, followed by events written from then on.
    #[arg(long, value_name = "DAYS")]
    pub(crate) audit_retention_days: Option<i64>,
    /// Archive audit events that expire from the table to an S3 bucket the stack creates and
    /// keeps when it is deleted (off by default; the aggregator writes it, `dynalimit audit
    /// --archive` reads it).
    #[arg(long, conflicts_with = "no_aggregator")]
    pub(crate) enable_audit_archival: bool,
    /// The aggregator writes the tokens each batch counted per namespace, entity and resource
    /// as CloudWatch metrics (embedded-metric log lines, namespace `dynalimit`; each tenant is
    /// a billed custom metric). Off by default.
    #[arg(long, conflicts_with = "no_aggregator")]
    pub(crate) tenant_metrics: bool,
    /// Publish quota threshold crossings and refusal alerts (`dynalimit alerts set`) to this
    /// EventBridge bus of the stack's account and region (`default` is the account's default
    /// bus), at most once per threshold and period, or per run of refusals. Off by default.
    #[arg(long, value_name = "BUS", conflicts_with = "no_aggregator")]
    pub(crate) alert_event_bus: Option<String>,
    /// Days after which archived audit events move to S3 Glacier Instant Retrieval (1-3650,
    /// default 90).
    #[arg(long, value_name = "DAYS", requires = "enable_audit_archival")]
    pub(crate) audit_archive_glacier_days: Option<u32>,
    /// Stream records per aggregator invocation (default 100).
    #[arg(long, value_name = "N")]
    pub(crate) batch_size: Option<u32>,
    /// Seconds the stream mapping gathers records (default 1).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) batching_window: Option<u32>,
    /// Retries of a failing batch before the dead-letter queue (default 3).
    #[arg(long, value_name = "N")]
    pub(crate) max_retries: Option<u32>,
    /// Point-in-time recovery period of the table (1-35 days, default 35).
    #[arg(long, value_name = "DAYS")]
    pub(crate) pitr_days: Option<u32>,
    /// Turn the table's point-in-time recovery off (on by default).
    #[arg(long, conflicts_with = "pitr_days")]
    pub(crate) no_pitr: bool,
    /// Turn the table's deletion protection off (on by default; the stack retains the table
    /// when it is deleted either way).
    #[arg(long)]
    pub(crate) no_deletion_protection: bool,
    /// ARN of a customer managed KMS key for the table (indexes, stream, backups) and the
    /// aggregator's logs. Principals of the table then also need the stack's TableKeyPolicy
    /// (its roles have it). The key policy must allow IAM grants and
    /// logs.REGION.amazonaws.com. Default: AWS owned keys.
    #[arg(long, value_name = "ARN")]
    pub(crate) kms_key: Option<String>,
    /// Do not create CloudWatch alarms.
    #[arg(long)]
    pub(crate) no_alarms: bool,
    /// SNS topic ARN the alarms notify.
    #[arg(long, value_name = "ARN")]
    pub(crate) alarm_topic: Option<String>,
    /// Share of the aggregator's timeout above which its duration alarm fires (1-100,
    /// default 80).
    #[arg(long, value_name = "PERCENT", alias = "lambda-duration-threshold-pct")]
    pub(crate) duration_alarm_percent: Option<u32>,
    /// Active AWS X-Ray tracing of the aggregator (off by default).
    #[arg(long, alias = "enable-tracing")]
    pub(crate) tracing: bool,
    /// Create no IAM resource: no managed policy and no role. The aggregator then needs a
    /// role of its own (--aggregator-role or --aggregator-role-arn); without one it is left
    /// out, with a note. The provisioner needs --provisioner-role.
    #[arg(long)]
    pub(crate) no_iam: bool,
    /// Also create application, admin and read-only roles.
    #[arg(long, conflicts_with = "no_iam")]
    pub(crate) iam_roles: bool,
    /// Permission boundary ARN for every role the stack creates.
    #[arg(long, value_name = "ARN")]
    pub(crate) permission_boundary: Option<String>,
    /// Role name format, `{}` standing for the role (e.g. `team-{}-prod`).
    #[arg(long, value_name = "FORMAT")]
    pub(crate) role_name_format: Option<String>,
    /// Managed policy name format, `{}` standing for the policy (acquire-only, full-access,
    /// read-only, namespace-acquire, namespace-full-access, namespace-read-only, table-key),
    /// e.g. `limits-prod-{}`. Policy names are unique in an account: include the stack.
    #[arg(long, value_name = "FORMAT")]
    pub(crate) policy_name_format: Option<String>,
    /// Existing role (name) for the aggregator instead of a created one.
    #[arg(long, value_name = "NAME")]
    pub(crate) aggregator_role: Option<String>,
    /// Existing role (ARN) for the aggregator instead of a created one.
    #[arg(long, value_name = "ARN", conflicts_with = "aggregator_role")]
    pub(crate) aggregator_role_arn: Option<String>,
    /// Existing role (name) for the limits provisioner instead of a created one.
    #[arg(long, value_name = "NAME", requires = "provisioner")]
    pub(crate) provisioner_role: Option<String>,
    /// Stack tag (repeatable).
    #[arg(long = "tag", value_name = "KEY=VALUE")]
    pub(crate) tags: Vec<String>,
    /// Return once CloudFormation accepted the stack's creation or update. The aggregator's
    /// code, the version record and the namespace come with a deploy that waits: run deploy
    /// again once `status` shows the stack complete.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// How often to poll CloudFormation while waiting, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000, hide = true)]
    pub(crate) poll_ms: u64,
}

impl DeployArgs {
    /// Whether the aggregator is deployed: asked for, and under `--no-iam` with a role of
    /// its own.
    fn with_aggregator(&self) -> bool {
        !self.no_aggregator
            && (!self.no_iam
                || self.aggregator_role.is_some()
                || self.aggregator_role_arn.is_some())
    }

    /// Refuses, before any request, what `--no-iam` cannot create: code given for an
    /// aggregator without a role, a provisioner without one.
    fn check_iam(&self) -> Result<()> {
        if !self.no_iam {
            return Ok(());
        }
        let code_given =
            self.code.aggregator_zip.is_some() || self.code.aggregator_binary.is_some();
        if code_given && !self.with_aggregator() {
            return Err(crate::context::bad_input(anyhow!(
                "--no-iam creates no role for the aggregator: give --aggregator-role or \
                 --aggregator-role-arn, or deploy with --no-aggregator"
            )));
        }
        if self.provisioner && self.provisioner_role.is_none() {
            return Err(crate::context::bad_input(anyhow!(
                "--no-iam creates no role for the provisioner: give --provisioner-role"
            )));
        }
        Ok(())
    }

    fn options(&self) -> Result<StackOptions> {
        self.check_iam()?;
        if let Some(days) = self.audit_retention_days
            && !(1..=36_500).contains(&days)
        {
            return Err(crate::context::bad_input(anyhow!(
                "--audit-retention-days must be between 1 and 36500, got {days}"
            )));
        }
        let mut o = StackOptions::default();
        o.aggregator = self.with_aggregator();
        o.provisioner = self.provisioner;
        macro_rules! set {
            ($($field:ident => $target:ident),* $(,)?) => {
                $(if let Some(v) = &self.$field { o.$target = v.clone(); })*
            };
        }
        set!(
            architecture => architecture,
            lambda_memory => lambda_memory_mb,
            lambda_timeout => lambda_timeout_seconds,
            log_level => log_level,
            log_retention_days => log_retention_days,
            snapshot_windows => snapshot_windows,
            snapshot_retention_days => snapshot_retention_days,
            batch_size => stream_batch_size,
            batching_window => stream_batching_window_seconds,
            max_retries => stream_max_retries,
            duration_alarm_percent => duration_alarm_percent,
        );
        if self.no_pitr {
            o.pitr_recovery_days = None;
        } else if let Some(days) = self.pitr_days {
            o.pitr_recovery_days = Some(days);
        }
        o.deletion_protection = !self.no_deletion_protection;
        o.kms_key_arn = self.kms_key.clone();
        o.alarms = !self.no_alarms;
        o.alarm_topic_arn = self.alarm_topic.clone();
        o.tracing = self.tracing;
        o.audit_archival = self.enable_audit_archival && o.aggregator;
        o.tenant_metrics = self.tenant_metrics;
        o.alert_event_bus = self.alert_event_bus.clone();
        if let Some(days) = self.audit_archive_glacier_days {
            o.audit_archive_glacier_days = days;
        }
        o.policy_name_format = self.policy_name_format.clone();
        o.aggregator_role_arn = self.aggregator_role_arn.clone();
        o.iam = !self.no_iam;
        o.iam_roles = self.iam_roles;
        o.permission_boundary = self.permission_boundary.clone();
        o.role_name_format = self.role_name_format.clone();
        o.aggregator_role_name = self.aggregator_role.clone();
        o.provisioner_role_name = self.provisioner_role.clone();
        for tag in &self.tags {
            let (k, v) = tag
                .split_once('=')
                .ok_or_else(|| anyhow!("tag {tag:?} must look like KEY=VALUE"))?;
            o.tags.push((k.to_string(), v.to_string()));
        }
        o.validate()?;
        Ok(o)
    }

    fn code(&self, architecture: &str) -> Result<Code> {
        if !self.with_aggregator() {
            return Ok(Code::NotWanted);
        }
        self.code.read(architecture)
    }
}

/// Where `scripts/build-lambda --arch ARCH` writes the aggregator zip (`--print-path`),
/// relative to the current directory.
fn built_zip(architecture: &str) -> PathBuf {
    [
        "target",
        "lambda",
        architecture,
        "dynalimit-aggregator",
        "bootstrap.zip",
    ]
    .iter()
    .collect()
}

/// The aggregator code of a deployment.
pub(crate) enum Code {
    /// Upload this zip, read or packaged from this file.
    Zip(Vec<u8>, PathBuf),
    /// `--no-aggregator`.
    NotWanted,
    /// Wanted, but no zip was given and none is built at this path.
    Missing(PathBuf),
}

/// `deploy`: creates or updates the stack, uploads the aggregator, writes the version record
/// and registers the namespace. A stack of that name without dynalimit's mark (a zae-limiter
/// stack, say) is refused with [`StackError::Foreign`] before anything is changed.
pub(crate) async fn deploy(global: &Global, args: &DeployArgs) -> Result<()> {
    let options = args.options()?;
    if !args.no_aggregator && !options.aggregator {
        eprintln!(
            "note: --no-iam leaves the usage aggregator out (it would need a role): give \
             --aggregator-role or --aggregator-role-arn to deploy it"
        );
    }
    let code = args.code(&options.architecture)?;
    let zip = match &code {
        Code::Zip(bytes, _) => Some(bytes.as_slice()),
        Code::NotWanted | Code::Missing(_) => None,
    };
    let manager = global
        .stacks()
        .await?
        .poll_interval(std::time::Duration::from_millis(args.poll_ms))
        .wait_for_completion(!args.no_wait);
    eprintln!("deploying stack {} …", global.stack);
    let info = manager
        .deploy(&options, zip, &mut crate::delete::progress)
        .await?;
    if args.no_wait {
        eprintln!(
            "note: stack {} accepted ({}); not waited for. The aggregator's code, the version \
             record and the namespace come with a deploy that waits: run `dynalimit deploy` \
             again once `dynalimit status` shows the stack complete.",
            global.stack, info.status
        );
        global.print(&Stack::from(&info));
        return Ok(());
    }
    let repo = global.writer().await?;
    repo.write_version_record(zip.map(|_| dynalimit_format::version::COMPATIBILITY_VERSION))
        .await?;
    if let Some(days) = args.audit_retention_days {
        repo.set_audit_retention_days(days).await?;
    }
    if args.enable_audit_archival && !options.audit_archival {
        eprintln!("note: the audit archive needs the aggregator, which is left out: no archive");
    }
    if let Code::Missing(path) = &code
        && !info.outputs.contains_key("AggregatorFunctionName")
    {
        eprintln!(
            "note: the stack has no aggregator yet, so no usage snapshots are written: \
             {} does not exist. Build it with `scripts/build-lambda --arch {}` and run \
             deploy again (or pass --aggregator-zip); --no-aggregator silences this.",
            path.display(),
            options.architecture
        );
    }
    global.print(&Stack::from(&info));
    Ok(())
}

/// `status`: the stack, the table and its version record.
pub(crate) async fn status(global: &Global) -> Result<()> {
    let config = global.sdk_config().await?;
    let stack = crate::delete::read_stack(global, &config, &global.stacks_with(&config)).await?;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let table = match client
        .describe_table()
        .table_name(&global.stack)
        .send()
        .await
    {
        Ok(out) => out.table,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            None
        }
        Err(e) => return Err(anyhow!("DescribeTable failed: {}", e.into_service_error())),
    };
    if stack.is_none() && table.is_none() {
        return Err(StackError::NotFound {
            stack: global.stack.clone(),
        }
        .into());
    }
    let stack = match &stack {
        Some(info) => Stack::from(info),
        None => Stack {
            stack: global.stack.clone(),
            status: "NO_STACK (a table without a stack)".to_owned(),
            reason: None,
            outputs: Default::default(),
        },
    };
    let mut shown = Status {
        stack,
        table_status: Some("MISSING".to_owned()),
        item_count: None,
        version: None,
    };
    if let Some(t) = &table {
        shown.table_status = t.table_status().map(|s| s.as_str().to_owned());
        shown.item_count = t.item_count();
        let repo = Repository::builder()
            .client(client.clone())
            .stack(global.stack.clone())
            .connect()
            .await;
        if let Ok(repo) = repo
            && let Ok(Some(record)) = repo.version_record().await
        {
            shown.version = Some(TableVersion::from(&record));
        }
    }
    global.print(&shown);
    Ok(())
}

/// Options of `template`.
#[derive(Debug, Args)]
pub(crate) struct TemplateArgs {
    /// Write the template to this file instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(crate) output_file: Option<PathBuf>,
}

/// `template`: prints the CloudFormation template.
pub(crate) fn template(args: &TemplateArgs) -> Result<()> {
    match &args.output_file {
        Some(path) => std::fs::write(path, stack::TEMPLATE)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{}", stack::TEMPLATE),
    }
    Ok(())
}

/// Options of `version`.
#[derive(Debug, Args)]
pub(crate) struct VersionArgs {
    /// Also read the table's version record and check compatibility.
    #[arg(long)]
    pub(crate) table: bool,
}

/// `version`: this client's versions and, with `--table`, the table's.
pub(crate) async fn version(global: &Global, args: &VersionArgs) -> Result<()> {
    let mut shown = Version {
        dynalimit: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version: version::SCHEMA_VERSION.to_owned(),
        compatible_with: format!("zae-limiter {}", version::COMPATIBILITY_VERSION),
        table: None,
    };
    if args.table {
        let repo = global.reader().await?;
        let record = repo
            .version_record()
            .await?
            .ok_or_else(|| anyhow!("table {} has no version record", global.stack))?;
        let compatible = Repository::check_compatibility(&record).is_ok();
        shown.table = Some(TableCompatibility::new(&record, compatible));
    }
    global.print(&shown);
    Ok(())
}

/// Options of `lambda-export`.
#[derive(Debug, Args)]
pub(crate) struct LambdaExportArgs {
    #[command(flatten)]
    pub(crate) code: CodeArgs,
    /// Architecture of the zip `scripts/build-lambda` wrote, when neither --aggregator-zip nor
    /// --aggregator-binary is given.
    #[arg(long, value_parser = ["arm64", "x86_64"], default_value = "arm64")]
    pub(crate) architecture: String,
    /// The zip to write.
    #[arg(
        long,
        short = 'o',
        value_name = "FILE",
        default_value = "aggregator.zip"
    )]
    pub(crate) output_file: PathBuf,
    /// Overwrite the file when it exists.
    #[arg(long, short = 'f')]
    pub(crate) force: bool,
    /// Describe the package without writing it.
    #[arg(long)]
    pub(crate) info: bool,
}

/// `lambda-export`: writes the aggregator's zip, as `deploy` would upload it, for a team's own
/// pipeline (with the template of `cfn-template`, whose `AggregatorCodeKey` names it in the
/// stack's code bucket). An existing file is kept unless `--force`.
pub(crate) fn lambda_export(global: &Global, args: &LambdaExportArgs) -> Result<()> {
    let (zip, source) = match args.code.read(&args.architecture)? {
        Code::Zip(zip, source) => (zip, source),
        Code::NotWanted => bail!("no aggregator code was asked for"),
        Code::Missing(path) => bail!(
            "no aggregator package: {} does not exist. Build it with `scripts/build-lambda \
             --arch {}`, or pass --aggregator-binary or --aggregator-zip",
            path.display(),
            args.architecture
        ),
    };
    let path = &args.output_file;
    let written = !args.info;
    if written {
        if path.exists() && !args.force {
            return Err(crate::context::bad_input(anyhow!(
                "{} exists; --force overwrites it",
                path.display()
            )));
        }
        std::fs::write(path, &zip).with_context(|| format!("cannot write {}", path.display()))?;
    }
    global.print(&LambdaPackage {
        file: path.display().to_string(),
        written,
        source: source.display().to_string(),
        bytes: zip.len() as u64,
        code_key: stack::code_key(&zip),
        lambda_version: version::COMPATIBILITY_VERSION.to_owned(),
    });
    Ok(())
}
