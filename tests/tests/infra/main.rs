//! Infrastructure: the CloudFormation template checked statically against the table schema,
//! and the stack deployed, updated and deleted on a private moto server.

mod deploy;
mod template;
