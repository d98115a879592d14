//! The dynalimit demo: an LLM gateway in miniature.
//!
//! A project with two API keys (cascading to the project) shares per-key and per-project
//! request and token limits on one resource. Many concurrent tasks play clients: each
//! estimates its tokens before the call, acquires `rpm = 1, tpm = estimate`, "calls the model",
//! then corrects the estimate with the real count (`adjust`) and commits. Rejected tasks wait
//! the retry-after they were given. A progress line shows admitted and rejected counts while it
//! runs; the final bucket states are printed as a table.
//!
//! Without an endpoint it starts a private DynamoDB Local (installed on first use, the same as
//! the test kit) and stops it at the end.
//!
//! The crate depends on the data plane alone (`dynalimit` without provisioning, the
//! repository, DynamoDB Local without its throttling proxy), so its binary `dynalimit-demo`
//! builds without the control plane that the `dynalimit` command carries; `dynalimit demo`
//! runs the same [`run`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), dynalimit_demo::Error> {
//! use dynalimit_repository::aws::AwsSettings;
//!
//! let options = dynalimit_demo::Options::new(10, 16)?;
//! // The environment's endpoint, region and profile; none: a private DynamoDB Local.
//! dynalimit_demo::run(&options, &AwsSettings::new(), "dynalimit", "default").await?;
//! # Ok(())
//! # }
//! ```

mod error;
mod simulation;
mod table;
mod target;

pub use error::Error;
pub use simulation::{Options, run};
pub use table::print_table;
pub use target::Target;
