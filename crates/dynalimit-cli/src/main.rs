//! The `dynalimit` command.
fn main() {}
