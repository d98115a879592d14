//! The integration suite: every module runs against a real DynamoDB endpoint provided by the
//! test kit (`dynalimit_tests`), one fresh table per test.

mod engine;
mod kit;
mod schema;
