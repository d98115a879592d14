//! The provisioner Lambda's events: a direct invocation (`limits plan|apply` from a script or
//! a pipeline) and a CloudFormation custom resource. Both plan and apply with [`crate::run`],
//! the code of `dynalimit limits plan|apply`.
//!
//! # Direct invocation
//! `{"action": "plan" | "apply", "manifest": …, "full": false}`, with `manifest` a mapping
//! (the manifest's YAML as JSON) or the YAML text. The namespace is the manifest's
//! `namespace`, else `namespace` (or `namespace_id`) of the event, else `default`;
//! `table_name`, when given, must be the function's table. The answer is the change set,
//! as `limits plan --output json` prints it ([`ManifestReport`]).
//!
//! # Custom resource
//! `Create` and `Update` apply the properties' manifest ([`crate::cfn::manifest_of`]);
//! `FullApply: true` applies in full. `Update` also removes the levels the old properties
//! declared and the new ones do not (same table and namespace). `Delete` removes the levels
//! the properties declare (their limits and flags); entities and their parents stay. The
//! physical id is `{table}/{namespace id}/limits-provisioner`, zae-limiter's, the same for
//! every update of one table and namespace. The answer goes to the event's `ResponseURL`
//! (`SUCCESS` or `FAILED` with the reason); a `Delete` whose properties were never applied
//! (refused, or a namespace that does not exist) succeeds with nothing removed, so that a
//! failed create rolls back.
//!
//! # A lost answer
//! Every apply is planned afresh from the table and each writer is safe to run again, so a
//! redelivered event applies what is still missing and otherwise changes nothing; its
//! answer carries the same physical id. When the answer to CloudFormation cannot be
//! delivered, the invocation fails ([`ManifestError::Response`]): Lambda invokes it again
//! (CloudFormation invokes asynchronously), and the second run finds the table applied and
//! answers again.

use std::time::Duration;

use bytes::Bytes;
use dynalimit_repository::{Repository, RepositoryError};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::cfn;
use crate::error::ManifestError;
use crate::model::{self, Level, Manifest};
use crate::report::ManifestReport;

/// The function's `Handler` in the template: the Lambda package's `bootstrap` (the
/// aggregator's) serves the provisioner when Lambda starts it with this handler (`_HANDLER`).
pub const HANDLER: &str = "provisioner";

/// The variable Lambda sets to the function's `Handler` for a custom runtime.
pub const ENV_HANDLER: &str = "_HANDLER";

/// The table (stack) name: the one variable of the provisioner's environment contract.
pub const ENV_TABLE: &str = "DYNALIMIT_TABLE";

/// The namespace a manifest applies to when nothing names one.
pub const DEFAULT_NAMESPACE: &str = "default";

/// How long the answer to CloudFormation may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The function's settings: its table (the environment variable `DYNALIMIT_TABLE`).
#[derive(Debug, Clone)]
pub struct Provisioner {
    table: String,
    client: aws_sdk_dynamodb::Client,
}

/// A direct invocation.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Direct {
    /// `plan` (the default) or `apply`.
    #[serde(default)]
    pub action: Option<String>,
    /// The manifest: a mapping, or its YAML text.
    #[serde(default)]
    pub manifest: Json,
    /// Also remove the levels the manifest does not name: a boolean, or `"true"`/`"false"`.
    #[serde(default)]
    pub full: Json,
    /// The namespace, when the manifest names none.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The namespace's id (zae-limiter's CLI sends it).
    #[serde(default)]
    pub namespace_id: Option<String>,
    /// The table; must be the function's own.
    #[serde(default)]
    pub table_name: Option<String>,
}

/// A CloudFormation custom resource request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResource {
    /// `Create`, `Update` or `Delete`.
    pub request_type: String,
    /// The pre-signed URL the answer is `PUT` to.
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    /// The stack.
    pub stack_id: String,
    /// The request.
    pub request_id: String,
    /// The resource's logical id.
    pub logical_resource_id: String,
    /// The physical id of an `Update` or `Delete`.
    #[serde(default)]
    pub physical_resource_id: Option<String>,
    /// The properties.
    #[serde(default)]
    pub resource_properties: Json,
    /// The properties before an `Update`.
    #[serde(default)]
    pub old_resource_properties: Option<Json>,
}

/// The answer to CloudFormation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// `SUCCESS` or `FAILED`.
    pub status: String,
    /// Why it failed, or what was done.
    pub reason: String,
    /// The resource's physical id.
    pub physical_resource_id: String,
    /// Echoed from the request.
    pub stack_id: String,
    /// Echoed from the request.
    pub request_id: String,
    /// Echoed from the request.
    pub logical_resource_id: String,
    /// `Created`, `Updated`, `Deleted`, `Unchanged`: how many levels (`Fn::GetAtt`).
    pub data: Json,
}

/// An event the function takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A direct invocation.
    Direct(Direct),
    /// A custom resource request.
    CustomResource(CustomResource),
}

impl Event {
    /// Reads an event: a custom resource request has `RequestType`.
    ///
    /// # Errors
    /// [`ManifestError::Event`] for a shape neither takes.
    pub fn parse(event: Json) -> Result<Event, ManifestError> {
        let bad = |e: serde_json::Error| ManifestError::Event(format!("not an event: {e}"));
        if event.get("RequestType").is_some() {
            Ok(Event::CustomResource(
                serde_json::from_value(event).map_err(bad)?,
            ))
        } else {
            Ok(Event::Direct(serde_json::from_value(event).map_err(bad)?))
        }
    }
}

/// The physical id of the custom resource on `table` and namespace id `namespace_id`.
pub fn physical_id(table: &str, namespace_id: &str) -> String {
    format!("{table}/{namespace_id}/limits-provisioner")
}

/// The physical id reported when a create failed before its namespace was known.
pub const FAILED_ID: &str = "failed";

/// `manifest` with each level of `old` it does not declare, declared empty (removed).
fn with_removals(mut manifest: Manifest, old: &Manifest) -> Manifest {
    if let Some(system) = &old.system
        && manifest.system.is_none()
        && !system.is_empty()
    {
        manifest.system = Some(Level::default());
    }
    for r in old.resources.keys() {
        manifest.resources.entry(r.clone()).or_default();
    }
    for (id, e) in &old.entities {
        let entity = manifest.entities.entry(id.clone()).or_default();
        for r in e.resources.keys() {
            entity.resources.entry(r.clone()).or_default();
        }
    }
    manifest
}

/// Every level `manifest` declares, declared empty; parents left as they are.
fn emptied(manifest: &Manifest) -> Manifest {
    with_removals(Manifest::default(), manifest)
}

impl Provisioner {
    /// The provisioner of `table`, sending its requests with `client`.
    pub fn new(table: impl Into<String>, client: aws_sdk_dynamodb::Client) -> Provisioner {
        Provisioner {
            table: table.into(),
            client,
        }
    }

    async fn repository(&self, namespace: &str) -> Result<Repository, ManifestError> {
        Repository::builder()
            .client(self.client.clone())
            .stack(self.table.clone())
            .namespace(namespace)
            .create_table(false)
            .connect()
            .await
            .map_err(|source| ManifestError::Repository {
                step: format!("opening namespace {namespace:?} of table {}", self.table),
                source,
            })
    }

    /// The namespace named by a name and an id (either may be missing).
    async fn namespace(
        &self,
        name: Option<&str>,
        id: Option<&str>,
    ) -> Result<Repository, ManifestError> {
        let name = name.filter(|n| !n.is_empty());
        let Some(id) = id.filter(|i| !i.is_empty()) else {
            return self.repository(name.unwrap_or(DEFAULT_NAMESPACE)).await;
        };
        let any = self.repository(name.unwrap_or(DEFAULT_NAMESPACE)).await?;
        if any.namespace_id() == id {
            return Ok(any);
        }
        let found = any
            .get_namespace_by_id(id)
            .await
            .map_err(ManifestError::from)?
            .ok_or_else(|| ManifestError::Event(format!("no namespace has the id {id:?}")))?;
        if name.is_some_and(|n| n != found.name) {
            return Err(ManifestError::Event(format!(
                "the namespace id {id:?} is namespace {:?}, not {:?}",
                found.name,
                name.unwrap_or_default()
            )));
        }
        self.repository(&found.name).await
    }

    fn check_table(&self, table: Option<&str>) -> Result<(), ManifestError> {
        match table {
            Some(t) if !t.is_empty() && t != self.table => Err(ManifestError::Event(format!(
                "this provisioner applies to table {:?}, not {t:?}",
                self.table
            ))),
            _ => Ok(()),
        }
    }

    /// Takes a direct invocation: plans, or applies.
    ///
    /// # Errors
    /// A refused event or manifest (before any write), a failed read or write.
    pub async fn direct(&self, event: &Direct) -> Result<ManifestReport, ManifestError> {
        self.check_table(event.table_name.as_deref())?;
        let apply = match event.action.as_deref() {
            None | Some("plan") => false,
            Some("apply") => true,
            Some(other) => {
                return Err(ManifestError::Event(format!(
                    "action is plan or apply, not {other:?}"
                )));
            }
        };
        let full = match &event.full {
            Json::Null => false,
            v => cfn::flag(v, "full")?,
        };
        let manifest = match &event.manifest {
            Json::String(text) => model::parse(text)?,
            Json::Object(_) => {
                let doc = serde_yaml_ng::to_value(&event.manifest)
                    .map_err(|e| ManifestError::Event(format!("manifest: {e}")))?;
                model::from_value(&doc)?
            }
            Json::Null => Manifest::default(),
            _ => {
                return Err(ManifestError::Event(
                    "manifest is a mapping or its YAML text".into(),
                ));
            }
        };
        let name = manifest.namespace.as_deref().or(event.namespace.as_deref());
        let repo = self.namespace(name, event.namespace_id.as_deref()).await?;
        if let Some(ns) = &manifest.namespace
            && ns != repo.namespace_name()
        {
            return Err(ManifestError::Event(format!(
                "the manifest is for namespace {ns:?}, the event names {:?}",
                repo.namespace_name()
            )));
        }
        crate::run(&repo, &manifest, full, apply).await
    }

    /// Takes a custom resource request and says what to answer; sends nothing.
    pub async fn custom_resource(&self, event: &CustomResource) -> Response {
        let answer = |status: &str, reason: String, id: String, data: Json| Response {
            status: status.to_owned(),
            reason,
            physical_resource_id: id,
            stack_id: event.stack_id.clone(),
            request_id: event.request_id.clone(),
            logical_resource_id: event.logical_resource_id.clone(),
            data,
        };
        let fallback = event
            .physical_resource_id
            .clone()
            .unwrap_or_else(|| FAILED_ID.to_owned());
        match self.custom(event).await {
            Ok((id, report)) => {
                let count = |a| report.changes.iter().filter(|c| c.action == a).count();
                let data = json!({
                    "Created": count(crate::Action::Create),
                    "Updated": count(crate::Action::Update),
                    "Deleted": count(crate::Action::Delete),
                    "Unchanged": report.unchanged,
                });
                let reason = format!(
                    "{} level(s) changed, {} unchanged",
                    report.changes.len(),
                    report.unchanged
                );
                answer("SUCCESS", reason, id, data)
            }
            Err(Skip(id)) => answer(
                "SUCCESS",
                "nothing was applied, so nothing is removed".into(),
                id,
                json!({}),
            ),
            Err(Failed(e)) => answer("FAILED", e.chain(), fallback, json!({})),
        }
    }

    async fn custom(&self, event: &CustomResource) -> Result<(String, ManifestReport), Outcome> {
        let props = &event.resource_properties;
        let str_prop = |k: &str| props.get(k).and_then(Json::as_str);
        let delete = event.request_type == "Delete";
        let skip = || Skip(event.physical_resource_id.clone().unwrap_or_default());
        let failed = |e: ManifestError| {
            if delete { skip() } else { Failed(e) }
        };
        if !matches!(event.request_type.as_str(), "Create" | "Update" | "Delete") {
            return Err(Failed(ManifestError::Event(format!(
                "RequestType is Create, Update or Delete, not {:?}",
                event.request_type
            ))));
        }
        if delete && event.physical_resource_id.as_deref() == Some(FAILED_ID) {
            return Err(skip());
        }
        self.check_table(str_prop("TableName")).map_err(failed)?;
        let manifest = cfn::manifest_of(props).map_err(failed)?;
        let full = !delete && cfn::full_apply(props).map_err(Failed)?;
        let repo = match self
            .namespace(str_prop("Namespace"), str_prop("NamespaceId"))
            .await
        {
            Err(ManifestError::Repository {
                source: RepositoryError::NamespaceNotFound { .. },
                ..
            }) if delete => return Err(skip()),
            other => other.map_err(Failed)?,
        };
        let id = physical_id(&self.table, repo.namespace_id());
        let manifest = if delete {
            if event.physical_resource_id.as_deref() != Some(id.as_str()) {
                // Not the resource these properties made: leave the table alone.
                return Err(skip());
            }
            emptied(&manifest)
        } else {
            match (&event.old_resource_properties, &event.physical_resource_id) {
                (Some(old), Some(previous)) if previous == &id => match cfn::manifest_of(old) {
                    Ok(old) => with_removals(manifest, &old),
                    Err(_) => manifest,
                },
                _ => manifest,
            }
        };
        let report = crate::run(&repo, &manifest, full, true)
            .await
            .map_err(Failed)?;
        Ok((id, report))
    }

    /// Takes any event: a custom resource request is answered at its `ResponseURL` and the
    /// answer returned; a direct invocation returns its change set.
    ///
    /// # Errors
    /// A refused or failed direct invocation; an answer to CloudFormation not delivered.
    pub async fn handle(&self, event: Json) -> Result<Json, ManifestError> {
        match Event::parse(event)? {
            Event::Direct(d) => {
                let report = self.direct(&d).await?;
                serde_json::to_value(report).map_err(|e| ManifestError::Event(e.to_string()))
            }
            Event::CustomResource(c) => {
                let response = self.custom_resource(&c).await;
                send(&c.response_url, &response).await?;
                serde_json::to_value(response).map_err(|e| ManifestError::Event(e.to_string()))
            }
        }
    }
}

/// Why a custom resource request did not apply.
enum Outcome {
    /// A delete with nothing to remove: succeeds under this physical id.
    Skip(String),
    /// Failed.
    Failed(ManifestError),
}

use Outcome::{Failed, Skip};

/// `PUT`s `response` to `url` (CloudFormation's pre-signed S3 URL, or any `http` URL),
/// without a content type, as the pre-signed URL requires.
///
/// # Errors
/// [`ManifestError::Response`] when the request fails, times out or is not answered with
/// a 2xx status.
pub async fn send(url: &str, response: &Response) -> Result<(), ManifestError> {
    let failed = |m: String| ManifestError::Response(m);
    let body = serde_json::to_vec(response).map_err(|e| failed(e.to_string()))?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
        .map_err(|e| failed(format!("no TLS roots: {e}")))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let request = http::Request::put(url)
        .header(http::header::CONTENT_TYPE, "")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| failed(format!("bad ResponseURL: {e}")))?;
    let answer = tokio::time::timeout(RESPONSE_TIMEOUT, async {
        let r = client
            .request(request)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = r.status();
        let _ = r.into_body().collect().await;
        Ok::<_, ManifestError>(status)
    })
    .await
    .map_err(|_| failed(format!("no answer within {RESPONSE_TIMEOUT:?}")))??;
    if !answer.is_success() {
        return Err(failed(format!("answered {answer}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_told_apart_by_request_type() {
        let direct = Event::parse(json!({"action": "apply", "manifest": {}, "full": "true"}));
        assert!(matches!(direct, Ok(Event::Direct(d)) if d.action.as_deref() == Some("apply")));
        let custom = Event::parse(json!({
            "RequestType": "Create", "ResponseURL": "http://127.0.0.1:1/r",
            "StackId": "s", "RequestId": "r", "LogicalResourceId": "Limits",
            "ResourceProperties": {"ServiceToken": "x"}
        }));
        assert!(matches!(custom, Ok(Event::CustomResource(c)) if c.request_type == "Create"));
        assert!(matches!(
            Event::parse(json!({"RequestType": "Create"})),
            Err(ManifestError::Event(_))
        ));
    }

    #[test]
    fn removals_declare_the_old_levels_empty() {
        let old = crate::parse(
            "system: {limits: {rpm: 1/min}}\nresources: {a: {limits: {rpm: 1/min}}, b: {}}\nentities: {k: {parent: p, resources: {a: {cascade: true}}}}\n",
        )
        .unwrap();
        let new = crate::parse("resources: {a: {limits: {rpm: 2/min}}}\n").unwrap();
        let m = with_removals(new, &old);
        assert_eq!(m.system, Some(Level::default()));
        assert_eq!(m.resources["a"].limits.len(), 1, "kept as declared");
        assert!(m.resources["b"].is_empty());
        assert!(m.entities["k"].resources["a"].is_empty());
        assert_eq!(m.entities["k"].parent, None, "parents stay as they are");
        let gone = emptied(&old);
        assert!(gone.resources.values().all(Level::is_empty));
        assert_eq!(gone.system, Some(Level::default()));
    }
}
