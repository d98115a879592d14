//! `list`, `check` and `upgrade`: the rate limiter stacks of a region, whether this client may
//! use a table, and bringing a dynalimit stack to this release.

use anyhow::{Result, anyhow};
use aws_sdk_dynamodb::Client;
use clap::Args;
use dynalimit_format::version::{self, VersionRecord};
use dynalimit_repository::{Repository, RepositoryError};
use dynalimit_stack::{self as stack, StackError, Template, Tool};

use crate::context::Global;
use crate::infra::{Code, CodeArgs};
use crate::output::infra::{Check, Compatibility, ListedStack, Stack, TableVersion, Upgraded};

/// The version record of `table`, read strongly consistently (`None` when it has none).
///
/// # Errors
/// [`RepositoryError::TableNotFound`] for a missing table; DynamoDB's error otherwise.
async fn version_record_of(client: &Client, table: &str) -> Result<Option<VersionRecord>> {
    let out = client
        .get_item()
        .table_name(table)
        .set_key(Some(version::record_key()))
        .consistent_read(true)
        .send()
        .await;
    match out {
        Ok(out) => Ok(out.item.as_ref().map(VersionRecord::from_item)),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Err(RepositoryError::TableNotFound {
                table: table.to_owned(),
            }
            .into())
        }
        Err(e) => Err(anyhow!("GetItem failed: {}", e.into_service_error())),
    }
}

/// `list`: every dynalimit and zae-limiter stack of the region, with the versions its tags,
/// parameters and table's version record give (a record that cannot be read leaves its keys
/// null).
pub(crate) async fn list(global: &Global) -> Result<()> {
    let config = global.sdk_config().await?;
    let client = Client::new(&config);
    let mut shown = Vec::new();
    for deployed in stack::discover(&config).await? {
        let record = version_record_of(&client, deployed.table())
            .await
            .ok()
            .flatten();
        shown.push(ListedStack {
            stack: deployed.info.name.clone(),
            tool: deployed.tool.as_str().to_owned(),
            status: deployed.info.status.clone(),
            table: deployed.table().to_owned(),
            created: deployed.created.clone(),
            updated: deployed.updated.clone(),
            version: deployed.version.clone(),
            schema_version: record
                .as_ref()
                .map(|r| r.schema_version.clone())
                .or_else(|| deployed.schema_version.clone()),
            lambda_version: record
                .as_ref()
                .and_then(|r| r.lambda_version.clone())
                .or_else(|| deployed.lambda_version.clone()),
            client_min_version: record.map(|r| r.client_min_version),
        });
    }
    global.print(&shown);
    Ok(())
}

/// What `check` found when this client may not use the table (exit code 1).
#[derive(Debug, thiserror::Error)]
#[error("table {table} is not usable by this client: {reason}")]
pub(crate) struct NotCompatible {
    table: String,
    reason: String,
}

/// The verdict on a table's version record for this client.
fn judge(record: Option<&VersionRecord>) -> (Compatibility, Option<String>) {
    let Some(record) = record else {
        return (
            Compatibility::NotInitialized,
            Some("the table has no version record: deploy it (or open it once)".into()),
        );
    };
    if let Err(e) = Repository::check_compatibility(record) {
        return (Compatibility::Incompatible, Some(e.to_string()));
    }
    match record.lambda_version.as_deref() {
        Some(lambda)
            if !version::satisfies(lambda, version::COMPATIBILITY_VERSION)
                && version::Version::parse(lambda).is_some() =>
        {
            (
                Compatibility::UpdateAvailable,
                Some(format!(
                    "the aggregator is {lambda}, this client's is {}: `dynalimit upgrade` \
                     brings it up",
                    version::COMPATIBILITY_VERSION
                )),
            )
        }
        _ => (Compatibility::Compatible, None),
    }
}

/// `check`: whether this client may use the table, from its version record; changes nothing.
/// Exits 0 when it may (`compatible`, `update_available`) and 1 when not (`incompatible`,
/// `not_initialized`), having printed the report either way.
pub(crate) async fn check(global: &Global) -> Result<()> {
    let config = global.sdk_config().await?;
    let client = Client::new(&config);
    let record = version_record_of(&client, &global.stack).await?;
    let (result, reason) = judge(record.as_ref());
    let report = Check {
        stack: global.stack.clone(),
        result,
        reason: reason.clone(),
        dynalimit: env!("CARGO_PKG_VERSION").to_owned(),
        implements: version::COMPATIBILITY_VERSION.to_owned(),
        client_schema_version: version::SCHEMA_VERSION.to_owned(),
        table: record.as_ref().map(TableVersion::from),
    };
    global.print(&report);
    match result {
        Compatibility::Compatible | Compatibility::UpdateAvailable => Ok(()),
        Compatibility::Incompatible | Compatibility::NotInitialized => Err(NotCompatible {
            table: global.stack.clone(),
            reason: reason.unwrap_or_default(),
        }
        .into()),
    }
}

/// Options of `upgrade`.
#[derive(Debug, Args)]
pub(crate) struct UpgradeArgs {
    #[command(flatten)]
    pub(crate) code: CodeArgs,
    /// Update the aggregator's code alone: the stack keeps its template, its other parameters
    /// and its tags. Needs the code (built, or --aggregator-zip / --aggregator-binary).
    #[arg(long)]
    pub(crate) lambda_only: bool,
    /// Accepted for zae-limiter's command lines, and always in effect: an upgrade applies the
    /// template and the code it is given whatever versions the table records (code already
    /// running is recognized by its content and left as it is).
    #[arg(long)]
    pub(crate) force: bool,
    /// How often to poll CloudFormation while waiting, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000, hide = true)]
    pub(crate) poll_ms: u64,
}

/// `upgrade`: refuses a stack that is not dynalimit's and a table whose version record this
/// client may not use (a newer client raised its `client_min_version`; it is never lowered)
/// before changing anything; then updates the stack with this release's template (keeping its
/// parameters), uploads the aggregator code when the stack has the aggregator and code is
/// given or built, and refreshes the version record (`lambda_version` with the code). With
/// `--lambda-only` only the code changes (the stack keeps its template, parameters and tags),
/// and code is required.
///
/// An answer lost after a step was applied leaves a state a second `upgrade` completes: the
/// stack update is found done (CloudFormation has nothing to update), the code is uploaded
/// under the same key, and the version record's refresh sets the same values again.
pub(crate) async fn upgrade(global: &Global, args: &UpgradeArgs) -> Result<()> {
    let config = global.sdk_config().await?;
    let manager = global
        .stacks_with(&config)
        .poll_interval(std::time::Duration::from_millis(args.poll_ms));
    let info = manager
        .status()
        .await?
        .ok_or_else(|| StackError::NotFound {
            stack: global.stack.clone(),
        })?;
    let ours = stack::tool_of(&info) == Some(Tool::Dynalimit);
    if ours {
        let client = Client::new(&config);
        if let Some(record) = version_record_of(&client, &global.stack).await? {
            Repository::check_compatibility(&record)?;
        }
    }
    let with_aggregator =
        info.parameters.get("EnableAggregator").map(String::as_str) == Some("true");
    let code = if ours && with_aggregator {
        let architecture = info
            .parameters
            .get("AggregatorArchitecture")
            .map_or("arm64", String::as_str);
        match args.code.read(architecture)? {
            Code::Zip(zip, _) => Some(zip),
            Code::Missing(path) => {
                eprintln!(
                    "note: the aggregator code is left as it is: {} does not exist (build it \
                     with `scripts/build-lambda --arch {architecture}`, or pass \
                     --aggregator-zip)",
                    path.display()
                );
                None
            }
            Code::NotWanted => None,
        }
    } else {
        None
    };
    if ours
        && !with_aggregator
        && (args.lambda_only
            || args.code.aggregator_zip.is_some()
            || args.code.aggregator_binary.is_some())
    {
        return Err(crate::context::bad_input(anyhow!(
            "stack {} runs without the aggregator: deploy it with the aggregator to add code",
            global.stack
        )));
    }
    if ours && args.lambda_only && code.is_none() {
        return Err(crate::context::bad_input(anyhow!(
            "--lambda-only updates the aggregator's code, and there is none: build it with \
             `scripts/build-lambda`, or pass --aggregator-zip or --aggregator-binary"
        )));
    }
    if args.force {
        eprintln!(
            "note: --force is always in effect: the template and the code given are applied \
             whatever versions the table records"
        );
    }
    let template = if args.lambda_only {
        Template::Kept
    } else {
        Template::Current
    };
    eprintln!(
        "upgrading {} of stack {} …",
        if args.lambda_only {
            "the aggregator's code"
        } else {
            "the template and the code"
        },
        global.stack
    );
    let upgraded = manager
        .upgrade(code.as_deref(), template, &mut crate::delete::progress)
        .await?;
    let repo = global.writer().await?;
    let lambda = code.as_ref().map(|_| version::COMPATIBILITY_VERSION);
    repo.write_version_record(lambda).await?;
    let record = repo
        .version_record()
        .await?
        .ok_or_else(|| anyhow!("the version record was not written"))?;
    global.print(&Upgraded {
        stack: Stack::from(&upgraded),
        dynalimit_version: upgraded.tags.get(stack::VERSION_TAG_KEY).cloned(),
        code_updated: code.is_some(),
        version: TableVersion::from(&record),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(client_min: &str, lambda: Option<&str>, schema: &str) -> VersionRecord {
        VersionRecord {
            schema_version: schema.into(),
            lambda_version: lambda.map(str::to_owned),
            client_min_version: client_min.into(),
            updated_at: String::new(),
            updated_by: None,
        }
    }

    #[test]
    fn the_verdict_follows_the_version_record() {
        let schema = version::SCHEMA_VERSION;
        let ours = version::COMPATIBILITY_VERSION;
        assert_eq!(judge(None).0, Compatibility::NotInitialized);
        assert_eq!(
            judge(Some(&record("0.0.0", Some(ours), schema))).0,
            Compatibility::Compatible
        );
        assert_eq!(
            judge(Some(&record("0.0.0", None, schema))).0,
            Compatibility::Compatible,
            "no aggregator, nothing to update"
        );
        let (verdict, reason) = judge(Some(&record("0.0.0", Some("0.15.0"), schema)));
        assert_eq!(verdict, Compatibility::UpdateAvailable);
        assert!(reason.unwrap().contains("dynalimit upgrade"));
        assert_eq!(
            judge(Some(&record("99.0.0", Some(ours), schema))).0,
            Compatibility::Incompatible,
            "a newer client ratcheted the table"
        );
        assert_eq!(
            judge(Some(&record("0.0.0", Some(ours), "9.0.0"))).0,
            Compatibility::Incompatible,
            "another schema major"
        );
        assert_eq!(
            judge(Some(&record("0.0.0", Some("not a version"), schema))).0,
            Compatibility::Compatible,
            "an unreadable aggregator version proves nothing"
        );
    }
}
