//! The output of `entity create|get|children|delete|set-parent|available|reset|top-up`.

use std::collections::BTreeMap;

use dynalimit_repository::{BucketOperation, OperationKind};
use serde::Serialize;

/// An entity: `entity create` and `entity get` print one, `entity children` an array.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Entity {
    /// Its id.
    pub(crate) id: String,
    /// Display name (the id unless one was given).
    pub(crate) name: String,
    /// The parent; null for none.
    pub(crate) parent_id: Option<String>,
    /// Whether its acquires also debit the parent, where no cascade policy says otherwise.
    pub(crate) cascade: bool,
    /// Free-form metadata (`--meta KEY=VALUE`); empty for none.
    pub(crate) metadata: BTreeMap<String, String>,
    /// When it was created, `YYYY-MM-DDTHH:MM:SSZ` (UTC).
    pub(crate) created_at: String,
}

impl From<&dynalimit_repository::Entity> for Entity {
    fn from(e: &dynalimit_repository::Entity) -> Entity {
        Entity {
            id: e.id.clone(),
            name: e.name.clone(),
            parent_id: e.parent_id.clone(),
            cascade: e.cascade,
            metadata: e.metadata.clone(),
            created_at: e.created_at.clone(),
        }
    }
}

/// `entity set-parent`: the entity's new parent.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ParentSet {
    /// The entity.
    pub(crate) id: String,
    /// The new parent; null after `--none` (no parent).
    pub(crate) parent_id: Option<String>,
    /// Existing buckets of the entity stamped with the new parent.
    pub(crate) buckets_stamped: usize,
}

/// `entity available`: what an entity may spend on a resource now, per limit, across every
/// shard.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Available {
    /// The entity.
    pub(crate) entity_id: String,
    /// The resource.
    pub(crate) resource: String,
    /// One balance per limit that applies, by name.
    pub(crate) limits: Vec<Balance>,
}

/// One limit's balance, in whole tokens.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Balance {
    /// The limit's name.
    pub(crate) name: String,
    /// Whole tokens available now, refill included (negative in debt); the whole capacity
    /// when the bucket does not exist yet.
    pub(crate) available: i64,
    /// Whole tokens the limit holds at most now (a schedule's window applied).
    pub(crate) capacity: i64,
    /// How the limit comes back, with `kind` saying which.
    #[serde(flatten)]
    pub(crate) comeback: Comeback,
}

/// How a limit's tokens come back, by `kind`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(tag = "kind")]
pub(crate) enum Comeback {
    /// A rate limit: refilled continuously.
    #[serde(rename = "rate")]
    Rate {
        /// Whole tokens refilled per period, `AMOUNT/PERIODs` (e.g. `100/60s`).
        refill: String,
    },
    /// A quota: its whole allowance comes back at calendar edges.
    #[serde(rename = "quota")]
    Quota {
        /// The next reset, RFC 3339 (UTC); null when the schedule has none.
        resets_at: Option<String>,
    },
    /// A session quota: its allowance comes back whole when the window its first acquire
    /// opened ends.
    #[serde(rename = "session quota")]
    SessionQuota {
        /// The window's length in seconds.
        window_seconds: i64,
        /// The live window's end, RFC 3339 (UTC); null when no window is open.
        resets_at: Option<String>,
    },
}

/// `entity reset` and `entity top-up`: what the operation did.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Operation {
    /// The entity.
    pub(crate) entity_id: String,
    /// The resource.
    pub(crate) resource: String,
    /// `reset` or `top_up`.
    pub(crate) operation: OperationName,
    /// The idempotency key given, or the id generated for the call (a 26-character ULID).
    pub(crate) operation_id: String,
    /// Bucket items (shards) written; 0 when the entity has no bucket on the resource yet
    /// (its first acquire creates it full).
    pub(crate) shards: u32,
    /// Whole tokens per limit: for a top-up what was granted (at most the room below each
    /// capacity, summed over the shards); for a reset what was restored beyond the refill.
    pub(crate) amounts: BTreeMap<String, i64>,
    /// Whether this is the stored result of an earlier call with the same idempotency key
    /// (this call applied nothing).
    pub(crate) replayed: bool,
}

/// Which operation.
#[derive(Debug, Clone, Copy, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum OperationName {
    /// Every limit of every shard back to its capacity.
    Reset,
    /// Whole tokens added to limits.
    TopUp,
}

impl From<&BucketOperation> for Operation {
    fn from(done: &BucketOperation) -> Operation {
        Operation {
            entity_id: done.entity_id.clone(),
            resource: done.resource.clone(),
            operation: match done.kind {
                OperationKind::Reset => OperationName::Reset,
                OperationKind::TopUp => OperationName::TopUp,
            },
            operation_id: done.operation_id.clone(),
            shards: done.shards,
            amounts: done.amounts.clone(),
            replayed: done.replayed,
        }
    }
}
