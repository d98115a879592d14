//! The stack's IAM policies against the requests dynalimit sends: every DynamoDB request of a
//! service's path, of the CLI's read commands and of a namespace purge, recorded on the wire by
//! the test kit's proxy, is evaluated against the policy statements of `infra/template.yaml`.

mod paths;
mod provisioner;
