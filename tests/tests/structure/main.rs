//! The workspace's shape, checked from its sources and its dependency graph: a service that
//! turns provisioning off compiles no control-plane SDK, the table format is spelled only in
//! `dynalimit-format`, no two files of one crate import each other, directly or through
//! others, the limiter reaches the table's algorithm only through the repository's engine, and
//! the README and the guide name only tests, files and commands that exist.

mod crates;
mod cycles;
mod docs;
mod features;
mod format_strings;
mod packaging;
mod seam;
mod source;
