//! The error type of the `dynalimit` crate.

use std::time::Duration;

use thiserror::Error;

use crate::Rejection;

/// Everything that can go wrong in this crate.
///
/// A refusal is a value: [`Error::Rejected`] carries the [`Rejection`] (why, and when to
/// retry), so `?` propagates it while callers that want to answer `429` match on it (or call
/// [`Error::rejection`]). Every other variant is an input or infrastructure failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad input, detected before any I/O.
    #[error(transparent)]
    Invalid(#[from] dynalimit_core::CoreError),

    /// A limit definition is invalid (capacity, window, algorithm).
    #[error("invalid limit {key:?}: {reason}")]
    InvalidLimit {
        /// The limit's key.
        key: String,
        /// What is wrong.
        reason: String,
    },

    /// Two limits of one LimitSet share a key (two call limits always do).
    #[error("duplicate limit key {key:?}: keys must be unique within a LimitSet")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },

    /// A LimitSet holds more limits than it supports.
    #[error("a LimitSet holds at most {max} limits, {given} were given")]
    TooManyLimits {
        /// The maximum.
        max: usize,
        /// How many were given.
        given: usize,
    },

    /// An empty request was made to a LimitSet that has plain rate limits, whose amounts cannot
    /// be guessed.
    #[error(
        "an explicit amount is required for rate limit {key:?}: an empty request only takes call and resource limits"
    )]
    AmountRequired {
        /// The first plain rate limit of the set.
        key: String,
    },

    /// A requested amount is larger than the limit's capacity, so no amount of waiting helps.
    #[error(
        "requested {requested} of {key:?} exceeds capacity {capacity}: this request can never be fulfilled"
    )]
    ExceedsCapacity {
        /// The limit.
        key: String,
        /// The amount requested (after defaults).
        requested: f64,
        /// The limit's capacity.
        capacity: f64,
    },

    /// An amount or a usage is negative, not a number, infinite, or fractional where only whole
    /// amounts are counted.
    #[error("invalid amount {amount} for {key:?}: {reason}")]
    InvalidAmount {
        /// The limit.
        key: String,
        /// The amount given.
        amount: f64,
        /// What is wrong.
        reason: String,
    },

    /// An implicitly taken call (amount 1) was updated with a usage other than 1.
    #[error("{key:?} was acquired implicitly with amount 1; its usage can only be 1, got {used}")]
    ImplicitCallUsage {
        /// The call limit's key.
        key: String,
        /// The usage given.
        used: f64,
    },

    /// `update` was called on an acquisition that was already released.
    #[error("the acquisition was already released")]
    AlreadyReleased,

    /// An acquisition was released without the usage of some limits; those limits were charged
    /// the full requested amount and everything else was given back.
    #[error(
        "released without a usage update for {keys:?}; they were charged in full. Missing: {keys:?}"
    )]
    MissingUpdate {
        /// The keys lacking an update, sorted.
        keys: Vec<String>,
    },

    /// A limit or an amount cannot be kept in the shared DynamoDB bucket of a distributed
    /// LimitSet (a resource limit, a counting algorithm, a fractional capacity or window).
    #[error("limit {key:?} cannot be distributed: {reason}")]
    NotDistributable {
        /// The limit's key.
        key: String,
        /// Why not.
        reason: String,
    },

    /// A waiting acquire did not succeed within its timeout.
    #[error("could not acquire the limits within {}s", timeout.as_secs_f64())]
    Timeout {
        /// The timeout given.
        timeout: Duration,
    },

    /// No limit has this key.
    #[error("no limit with key {key:?}")]
    UnknownLimit {
        /// The key asked for.
        key: String,
    },

    /// A LimitPool was built without any LimitSet.
    #[error("a LimitPool requires at least one LimitSet")]
    EmptyPool,

    /// An unknown load-balancing name.
    #[error("unknown load balancing {name:?}; supported: round_robin, random")]
    UnknownBalancing {
        /// The name given.
        name: String,
    },
    /// The shared pause store (see [`crate::backoff::PauseStore`]) failed.
    #[error("pause store: {0}")]
    PauseStore(#[source] Box<dyn std::error::Error + Send + Sync>),

    /// The request was refused; nothing was taken, except what
    /// [`Rejection::unsettled`] names.
    #[error("{0}")]
    Rejected(#[from] Rejection),

    /// Access to the resource is disabled for this entity (or its cascade parent). Never
    /// retried.
    #[error("resource {resource} is disabled for {entity_id}")]
    ResourceDisabled {
        /// The entity whose bucket is disabled (the parent when the parent's is).
        entity_id: String,
        /// The resource.
        resource: String,
    },

    /// No limits were given and none are configured for the pair.
    #[error("no limits configured for {entity_id}/{resource}")]
    NoLimits {
        /// The entity.
        entity_id: String,
        /// The resource.
        resource: String,
    },

    /// AWS refused the credentials or a permission. Raised under every `on_unavailable` mode:
    /// a permission problem is a deployment error, not an outage.
    #[cfg(feature = "dynamodb")]
    #[error("permission denied: {0}")]
    PermissionDenied(#[source] dynalimit_repository::RepositoryError),

    /// The request cannot be served as asked, now or later: DynamoDB refused it as invalid (a
    /// `ValidationException`, such as an expression over its 4 KB limit, or another 4xx that
    /// is not throttling, a permission or a failed condition), or the stored configuration
    /// names more limits than one bucket carries
    /// ([`MAX_LIMITS_PER_BUCKET`](dynalimit_format::attr::MAX_LIMITS_PER_BUCKET)). Raised
    /// under every `on_unavailable` mode: sending the request again fails the same way, so it
    /// is no outage, and `allow` does not admit it.
    #[cfg(feature = "dynamodb")]
    #[error("request refused as invalid: {0}")]
    InvalidRequest(#[source] dynalimit_repository::RepositoryError),

    /// An item read for the acquire holds a value out of bounds (a shard count above 32, a
    /// stamp further ahead than it lives, a time or amount out of range): another writer
    /// stored it. The source names the item and the attribute. Raised under every
    /// `on_unavailable` mode: the item is not an outage, and `allow` never admits past a
    /// value nobody can read.
    #[cfg(feature = "dynamodb")]
    #[error("corrupt item: {0}")]
    Corrupt(#[source] dynalimit_repository::RepositoryError),

    /// The limiter could not decide — DynamoDB failed, or a bucket or configuration carries a
    /// feature this client does not implement (it fails closed rather than guess) — and
    /// `on_unavailable` is `block`.
    #[error("rate limiter unavailable for {entity_id}/{resource}: {message}")]
    Unavailable {
        /// The entity.
        entity_id: String,
        /// The resource.
        resource: String,
        /// What failed.
        message: String,
    },

    /// A heartbeat found a [`Slot`](crate::Slot) taken by another holder: its hold had
    /// expired. The request no longer counts against the limit.
    #[error("slot {slot} of concurrency limit {limit:?} was lost: its hold expired")]
    SlotLost {
        /// The concurrency limit.
        limit: String,
        /// The slot.
        slot: u32,
    },

    /// A lease's commit or rollback could not be written completely.
    #[cfg(feature = "dynamodb")]
    #[error("lease write failed: {0}")]
    LeaseWrite(#[source] dynalimit_repository::RepositoryError),
}

impl Error {
    /// The rejection, when this is one.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Error::Rejected(r) => Some(r),
            _ => None,
        }
    }

    /// Whether this is a refusal (nothing was taken but what [`Rejection::unsettled`] names;
    /// retrying later may succeed).
    pub fn is_rejected(&self) -> bool {
        matches!(self, Error::Rejected(_))
    }
}
