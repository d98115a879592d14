//! The DynamoDB data plane of dynalimit.
