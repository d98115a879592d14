//! The output of `deploy`, `status`, `delete`, `version`, `lambda-export`, `list`, `check` and
//! `upgrade`.

use std::collections::BTreeMap;

use dynalimit_format::version::VersionRecord;
use dynalimit_stack::StackInfo;
use serde::Serialize;

/// A CloudFormation stack: what `deploy` prints once the stack is complete. Its outputs
/// (`TableName`, `TableArn`, `StreamArn`, the policy ARNs, and with the aggregator
/// `AggregatorFunctionName`, `AggregatorFunctionArn`, `CodeBucketName`, …) are keys of their
/// own, next to `stack` and `status`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Stack {
    /// The stack name (also the table's).
    pub(crate) stack: String,
    /// CloudFormation's status, e.g. `CREATE_COMPLETE`, `UPDATE_COMPLETE`.
    pub(crate) status: String,
    /// CloudFormation's status reason; absent when it gives none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// The stack's outputs, each under its own name at the top level: `TableName`,
    /// `TableArn`, `StreamArn`, the policy ARNs, and with the aggregator
    /// `AggregatorFunctionName`, `AggregatorFunctionArn`, `CodeBucketName`, ….
    #[serde(flatten)]
    pub(crate) outputs: BTreeMap<String, String>,
}

impl From<&StackInfo> for Stack {
    fn from(info: &StackInfo) -> Stack {
        Stack {
            stack: info.name.clone(),
            status: info.status.clone(),
            reason: info.reason.clone(),
            outputs: info.outputs.clone(),
        }
    }
}

/// `status`: the stack as `deploy` prints it (its outputs keys of their own), the table, and
/// the table's version record (`schema_version`, `lambda_version`, `client_min_version`:
/// absent when the table has none or it cannot be read).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Status {
    /// The stack; on an endpoint without one, `status` is `NO_STACK (a table without a
    /// stack)` and there are no outputs.
    #[serde(flatten)]
    pub(crate) stack: Stack,
    /// DynamoDB's table status (`ACTIVE`, …), or `MISSING` when the stack has no table;
    /// null when DynamoDB gives none.
    pub(crate) table_status: Option<String>,
    /// DynamoDB's approximate item count (DescribeTable's `ItemCount`); absent when the
    /// table is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) item_count: Option<i64>,
    /// The table's version record; its fields are absent when it has none or it cannot be
    /// read.
    #[serde(flatten)]
    pub(crate) version: Option<TableVersion>,
}

/// A table's version record, as `status` shows it.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct TableVersion {
    /// The key-layout version of the table.
    pub(crate) schema_version: String,
    /// The aggregator code deployed; null when none is.
    pub(crate) lambda_version: Option<String>,
    /// The oldest client allowed to use the table.
    pub(crate) client_min_version: String,
}

impl From<&VersionRecord> for TableVersion {
    fn from(r: &VersionRecord) -> TableVersion {
        TableVersion {
            schema_version: r.schema_version.clone(),
            lambda_version: r.lambda_version.clone(),
            client_min_version: r.client_min_version.clone(),
        }
    }
}

/// `delete`: what was deleted, and the stack's table as read back afterwards.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct StackDeleted {
    /// The stack name.
    pub(crate) stack: String,
    /// What was deleted: `DELETE_COMPLETE` (the dynalimit stack, read back as gone) or
    /// `TABLE_DELETED` (a loopback emulator without the stack: its table).
    pub(crate) status: String,
    /// The table, named like the stack.
    pub(crate) table: String,
    /// The table's status read back after the deletion: DynamoDB's (`ACTIVE` when the stack
    /// retained it, `DELETING`) or `MISSING`.
    pub(crate) table_status: String,
    /// The table's deletion protection read back; null when the table is missing.
    pub(crate) deletion_protection: Option<bool>,
}

/// `version`: this client's versions and, with `--table`, the table's (the `table_*` keys and
/// `compatible`, absent without `--table`).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Version {
    /// This client's version.
    pub(crate) dynalimit: String,
    /// The key-layout version this client writes.
    pub(crate) schema_version: String,
    /// The table format it shares, `zae-limiter X.Y.Z`.
    pub(crate) compatible_with: String,
    /// With `--table`: the table's version record and whether this client may use it;
    /// absent without.
    #[serde(flatten)]
    pub(crate) table: Option<TableCompatibility>,
}

/// The table's side of `version --table`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct TableCompatibility {
    /// The table's key-layout version.
    pub(crate) table_schema_version: String,
    /// The aggregator code deployed; null when none is.
    pub(crate) table_lambda_version: Option<String>,
    /// The oldest client allowed to use the table.
    pub(crate) table_client_min_version: String,
    /// Who last wrote the version record (`dynalimit:X.Y.Z`, …); null when unknown.
    pub(crate) table_updated_by: Option<String>,
    /// Whether this client may use the table.
    pub(crate) compatible: bool,
}

impl TableCompatibility {
    /// The table's record and the verdict on it.
    pub(crate) fn new(record: &VersionRecord, compatible: bool) -> TableCompatibility {
        TableCompatibility {
            table_schema_version: record.schema_version.clone(),
            table_lambda_version: record.lambda_version.clone(),
            table_client_min_version: record.client_min_version.clone(),
            table_updated_by: record.updated_by.clone(),
            compatible,
        }
    }
}

/// `lambda-export`: the aggregator package written (or, with `--info`, described).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct LambdaPackage {
    /// The zip file.
    pub(crate) file: String,
    /// Whether it was written (false with `--info`).
    pub(crate) written: bool,
    /// What it was made from: the zip or binary given, or the zip `scripts/build-lambda` wrote.
    pub(crate) source: String,
    /// Its size in bytes.
    pub(crate) bytes: u64,
    /// The object key `deploy` uploads it under in the stack's code bucket (the template's
    /// `AggregatorCodeKey`), from a hash of its bytes.
    pub(crate) code_key: String,
    /// The `lambda_version` `deploy` records for it in the version record.
    pub(crate) lambda_version: String,
}

/// One stack of `list`: a dynalimit or zae-limiter stack of the region.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ListedStack {
    /// The stack name.
    pub(crate) stack: String,
    /// The tool that deployed it: `dynalimit` (its mark) or `zae-limiter` (`ManagedBy` tag,
    /// or a `ZAEL-` name).
    pub(crate) tool: String,
    /// CloudFormation's status.
    pub(crate) status: String,
    /// Its table (the `TableName` output, else the stack's name).
    pub(crate) table: String,
    /// When it was created (ISO 8601); null when CloudFormation gives no time.
    pub(crate) created: Option<String>,
    /// When it was last updated (ISO 8601); null when never.
    pub(crate) updated: Option<String>,
    /// The release that last applied its template: the tag `dynalimit:version` or
    /// `zae-limiter:version`; null without one (a dynalimit stack deployed before the tag).
    pub(crate) version: Option<String>,
    /// The table's schema version: its version record's, else the stack's parameter or tag;
    /// null when neither is readable.
    pub(crate) schema_version: Option<String>,
    /// The aggregator's release: the version record's `lambda_version`, else zae-limiter's
    /// `zae-limiter:lambda-version` tag; null when none is known.
    pub(crate) lambda_version: Option<String>,
    /// The version record's `client_min_version`; null when the record cannot be read.
    pub(crate) client_min_version: Option<String>,
}

/// The verdict of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum Compatibility {
    /// This client may use the table, and its aggregator is current.
    Compatible,
    /// This client may use the table; its aggregator is older than this client's
    /// (`dynalimit upgrade` brings it up).
    UpdateAvailable,
    /// This client may not: the table's `client_min_version` is above what it implements, or
    /// the schema's major version differs.
    Incompatible,
    /// The table has no version record.
    NotInitialized,
}

/// `check`: whether this client may use the table (exit code 0 for `compatible` and
/// `update_available`, 1 otherwise).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Check {
    /// The stack (the table's name).
    pub(crate) stack: String,
    /// The verdict.
    pub(crate) result: Compatibility,
    /// Why, unless `compatible`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// This client's release.
    pub(crate) dynalimit: String,
    /// The zae-limiter version whose table format this client implements.
    pub(crate) implements: String,
    /// The schema version this client writes.
    pub(crate) client_schema_version: String,
    /// The table's version record; its keys are absent when it has none.
    #[serde(flatten)]
    pub(crate) table: Option<TableVersion>,
}

/// `upgrade`: the stack as `deploy` prints it, and what changed.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Upgraded {
    /// The stack, its outputs keys of their own.
    #[serde(flatten)]
    pub(crate) stack: Stack,
    /// The release now recorded on the stack (its `dynalimit:version` tag).
    pub(crate) dynalimit_version: Option<String>,
    /// Whether new aggregator code was uploaded (false: the template only).
    pub(crate) code_updated: bool,
    /// The table's version record as read back.
    #[serde(flatten)]
    pub(crate) version: TableVersion,
}
