//! Deterministic simulations in virtual time. Each prints its figures and asserts its targets:
//!
//! ```text
//! cargo test -p dynalimit --no-default-features --release --test simulations -- --nocapture
//! ```

mod adaptive_capacity;
mod escalating_remote;
