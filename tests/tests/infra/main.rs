//! Infrastructure: the CloudFormation template checked statically against the table schema,
//! the aggregator's environment contract read from both sides, and the stack deployed, updated and
//! deleted on a private moto server.

mod deploy;
mod lambda_env;
mod template;
mod zae_names;
mod zae_update;
