//! The integration suite: every module runs against a real DynamoDB endpoint provided by the
//! test kit (`dynalimit_tests`), one fresh table per test.

mod access;
mod alerts;
mod ambiguous;
mod audit;
mod blocking;
mod bounds;
mod bucket_limits;
mod bypass;
mod cascade;
mod concurrency;
mod config;
mod engine;
mod entities;
mod fast_path;
mod foreign_items;
mod format;
mod gateway;
mod kit;
mod multi;
mod namespaces;
mod operations;
mod outcomes;
mod quotas;
mod refusals;
mod rejections;
mod schedules;
mod schema;
mod sessions;
mod settings;
mod sharding;
mod slots;
mod soft;
mod throttle;
mod version;
