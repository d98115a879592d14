//! `delete`: the stack, only when it carries dynalimit's mark; on a loopback emulator without
//! a stack, the table; then what is left, read back.
//!
//! What `delete` proves before it deletes anything:
//! - a stack is dynalimit's only with the template's output or the stack tag
//!   `Application=dynalimit` ([`StackInfo::is_dynalimit`]); any other stack of that name (a
//!   zae-limiter stack, say) is refused and left as it is;
//! - the answer "stack does not exist" is the only one that means no stack. Every other
//!   refusal of `DescribeStacks` (`AccessDenied`, throttling, an outage) is an error, except
//!   an emulator on a loopback address that answers CloudFormation with a server error, as
//!   DynamoDB Local does;
//! - `DeleteTable` is sent only to a loopback endpoint ([`aws::is_loopback`]: localhost,
//!   127.0.0.0/8, `[::1]`), never to AWS, whatever endpoint override is set.
//!
//! Afterwards it reads back the stack and the table and prints what it found.

use anyhow::{Result, bail};
use aws_config::SdkConfig;
use clap::Args;
use dynalimit_repository::RepositoryError;
use dynalimit_repository::aws;
use dynalimit_stack::{StackError, StackEvent, StackInfo, StackManager};

use crate::context::Global;
use crate::output::infra::StackDeleted;

/// Options of `delete`.
#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// Confirm: delete the stack (only a dynalimit stack; its table is retained), or on a
    /// loopback emulator without a stack, the table.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Return once CloudFormation accepted the stack's deletion (`status` shows the rest).
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// How often to poll CloudFormation while waiting, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000, hide = true)]
    pub(crate) poll_ms: u64,
}

/// The DynamoDB endpoint `delete` may drop a table on: the one in use, when it is a loopback
/// address. `None`: AWS, or an endpoint elsewhere (a VPC or FIPS endpoint, a remote host).
fn loopback_endpoint(endpoint: Option<String>) -> Option<String> {
    endpoint.filter(|url| aws::is_loopback(url))
}

/// Whether a failed `DescribeStacks` means "no CloudFormation here": only on a loopback
/// emulator, and only for a server error (DynamoDB Local's answer to another service). A
/// refusal (permissions, throttling, an invalid request) is never read as "no stack".
fn emulator_without_stacks(error: &StackError, loopback: bool) -> bool {
    loopback && matches!(error, StackError::Unavailable { .. })
}

/// The stack named by `manager`, `None` when CloudFormation says it does not exist (or, on a
/// loopback emulator, serves no stacks). Shared with `status`.
pub(crate) async fn read_stack(
    global: &Global,
    config: &SdkConfig,
    manager: &StackManager,
) -> Result<Option<StackInfo>> {
    let loopback = loopback_endpoint(global.endpoint(config)).is_some();
    match manager.status().await {
        Ok(info) => Ok(info),
        Err(e) if emulator_without_stacks(&e, loopback) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The table as read back: DynamoDB's status and deletion protection, `None` when it does not
/// exist.
async fn read_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Option<(String, bool)>> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table.map(|t| {
            let status = t
                .table_status()
                .map_or_else(|| "UNKNOWN".to_owned(), |s| s.as_str().to_owned());
            (status, t.deletion_protection_enabled().unwrap_or(false))
        })),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(RepositoryError::from_sdk("DescribeTable", e).into()),
    }
}

/// What `delete` prints: `status` is what it did; the rest is read back.
fn report(stack: &str, status: &str, table: Option<(String, bool)>) -> StackDeleted {
    StackDeleted {
        stack: stack.to_owned(),
        status: status.to_owned(),
        table: stack.to_owned(),
        table_status: table
            .as_ref()
            .map_or_else(|| "MISSING".to_owned(), |(s, _)| s.clone()),
        deletion_protection: table.map(|(_, protected)| protected),
    }
}

/// Prints one stack event of a deployment or deletion (also `deploy`'s).
pub(crate) fn progress(event: &StackEvent) {
    eprintln!("  {event}");
}

/// `delete`: see the module documentation.
pub(crate) async fn run(global: &Global, args: &DeleteArgs) -> Result<()> {
    if !args.yes {
        bail!(
            "this deletes stack {} if it is a dynalimit stack (its table is kept); rerun with --yes",
            global.stack
        );
    }
    let config = global.sdk_config().await?;
    let manager = global
        .stacks_with(&config)
        .poll_interval(std::time::Duration::from_millis(args.poll_ms))
        .wait_for_completion(!args.no_wait);
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    if let Some(info) = read_stack(global, &config, &manager).await? {
        if !info.is_dynalimit() {
            return Err(StackError::Foreign {
                stack: global.stack.clone(),
                tags: info.tags.into_iter().collect(),
            }
            .into());
        }
        eprintln!("deleting stack {} …", global.stack);
        manager.delete(&mut progress).await?;
        if args.no_wait {
            let status = manager.status().await?;
            let status = status.map_or_else(|| "DELETE_COMPLETE".to_owned(), |s| s.status);
            eprintln!(
                "note: deletion of stack {} accepted; not waited for",
                global.stack
            );
            let table = read_table(&dynamodb, &global.stack).await?;
            global.print(&report(&global.stack, &status, table));
            return Ok(());
        }
        if let Some(left) = manager.status().await? {
            bail!(
                "stack {} is still there after its deletion, in {}",
                global.stack,
                left.status
            );
        }
        let table = read_table(&dynamodb, &global.stack).await?;
        if table.is_some() {
            eprintln!("{}", retained_table_note(&global.stack));
        }
        global.print(&report(&global.stack, "DELETE_COMPLETE", table));
        return Ok(());
    }
    let Some(url) = loopback_endpoint(global.endpoint(&config)) else {
        // Not an emulator of this machine: a table is never dropped here.
        return match read_table(&dynamodb, &global.stack).await? {
            Some(_) => bail!(
                "stack {0} does not exist; table {0} exists and was not deleted: delete drops a \
                 table only on a loopback emulator. To drop it for good (this cannot be \
                 undone): aws dynamodb delete-table --table-name {0}",
                global.stack
            ),
            None => Err(StackError::NotFound {
                stack: global.stack.clone(),
            }
            .into()),
        };
    };
    // The client is bound to the endpoint checked above, whatever else the settings say.
    let local = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&config)
            .endpoint_url(url)
            .build(),
    );
    match local.delete_table().table_name(&global.stack).send().await {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            return Err(StackError::NotFound {
                stack: global.stack.clone(),
            }
            .into());
        }
        Err(e) => return Err(RepositoryError::from_sdk("DeleteTable", e).into()),
    }
    let table = read_table(&local, &global.stack).await?;
    global.print(&report(&global.stack, "TABLE_DELETED", table));
    Ok(())
}

/// What to run to drop a table the stack retained.
fn retained_table_note(table: &str) -> String {
    format!(
        "the table {table} is retained with its limits, usage and audit records. To drop it \
         for good (this cannot be undone):\n  \
         aws dynamodb update-table --table-name {table} --no-deletion-protection-enabled\n  \
         aws dynamodb delete-table --table-name {table}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_endpoint_may_lose_a_table() {
        for url in [
            "http://127.0.0.1:8000",
            "http://localhost:4566",
            "http://[::1]:8000",
        ] {
            assert_eq!(loopback_endpoint(Some(url.into())).as_deref(), Some(url));
        }
        for url in [
            "https://vpce-0a1b-c2d3.dynamodb.eu-west-1.vpce.amazonaws.com",
            "https://dynamodb-fips.us-gov-west-1.amazonaws.com",
            "http://127.attacker.example",
            "http://10.1.2.3:8000",
        ] {
            assert_eq!(loopback_endpoint(Some(url.into())), None, "{url}");
        }
        assert_eq!(loopback_endpoint(None), None, "AWS itself");
    }

    #[test]
    fn only_an_emulator_without_cloudformation_counts_as_no_stack() {
        let unavailable = StackError::Unavailable {
            operation: "DescribeStacks",
            message: "500".into(),
        };
        let denied = StackError::PermissionDenied {
            operation: "DescribeStacks",
            message: "AccessDenied".into(),
        };
        let throttled = StackError::Throttled {
            operation: "DescribeStacks",
            message: "Throttling".into(),
        };
        let rejected = StackError::Rejected {
            operation: "DescribeStacks",
            code: "Unknown".into(),
            message: String::new(),
        };
        assert!(emulator_without_stacks(&unavailable, true));
        assert!(!emulator_without_stacks(&unavailable, false));
        for refused in [denied, throttled, rejected] {
            assert!(!emulator_without_stacks(&refused, true), "{refused}");
        }
    }
}
