//! The error type of the `dynalimit` crate.

use std::time::Duration;

use thiserror::Error;

/// Everything that can go wrong in this crate, other than a rate-limit rejection (a rejection
/// is a value, not an error).
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
}
