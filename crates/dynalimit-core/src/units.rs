//! The units and bounds of reference §2.1, shared by limits and schedules.

/// Millitokens per token.
pub const MILLI: i64 = 1000;
/// Largest capacity or refill amount a limit may declare, in whole tokens (10^15).
pub const MAX_TOKENS: i64 = 1_000_000_000_000_000;
/// Largest refill period a limit may declare, in seconds (10^9).
pub const MAX_PERIOD_SECONDS: i64 = 1_000_000_000;
