//! An in-process DynamoDB table store, for tests and single-process use: a crate a service
//! adds as a dev-dependency (through `dynalimit`'s feature `memory`).
//!
//! A [`Store`] answers the DynamoDB API in the process itself: it is the HTTP client of an
//! ordinary AWS SDK DynamoDB client, so every request the repository and the limiter send,
//! including the acquire's fast path, is built, signed, encoded and decoded exactly as it is
//! for DynamoDB; only the bytes never leave the process. The store reads each request's
//! awsJson 1.0 body, applies it to its tables under one lock (so every request, and every
//! transaction, is atomic and strongly consistent), and answers with DynamoDB's response and
//! error shapes. The decisions are the same code as on DynamoDB, and the test suite of the
//! engine runs against both backends.
//!
//! What it is for, and what it is not:
//!
//! * **Tests and single-process use.** A service's unit tests can check "my handler answers
//!   429 when the key is out of budget" with no JVM and no emulator. The tables live in the
//!   process's memory: they are not shared with any other process, and they are gone when
//!   the last clone of the store is dropped.
//! * **No streams, no aggregator, no expiry.** A table created with a stream specification
//!   records it, but no stream is kept (`DescribeTable` has no `LatestStreamArn`), so usage
//!   snapshots are never written. TTL can be enabled and described; nothing expires (as on
//!   DynamoDB Local).
//! * **What is implemented**: `CreateTable`, `DescribeTable`, `DeleteTable`, `ListTables`,
//!   `UpdateTimeToLive`, `DescribeTimeToLive`, `GetItem`, `PutItem`, `UpdateItem`,
//!   `DeleteItem`, `Query` and `Scan` (on the table and on global and local secondary
//!   indexes), `BatchGetItem`, `BatchWriteItem`, `TransactWriteItems` (with
//!   `ClientRequestToken` idempotency, kept for the store's lifetime) and `TransactGetItems`;
//!   update expressions (`SET` with `+`, `-`, `if_not_exists`, `list_append`; `REMOVE`,
//!   `ADD`, `DELETE`), conditions, filters and key conditions (`=`, `<>`, `<`, `<=`, `>`,
//!   `>=`, `BETWEEN`, `IN`, `AND`, `OR`, `NOT`, `attribute_exists`, `attribute_not_exists`,
//!   `attribute_type`, `begins_with`, `contains`, `size`), projections, nested paths.
//!   Numbers are exact decimals of up to 38 digits; a result DynamoDB could not store is
//!   refused as DynamoDB refuses it.
//! * **Anything else is refused**, never ignored: an operation or parameter the store does
//!   not implement (PartiQL, parallel scans, legacy parameters such as `AttributesToGet`,
//!   consumed-capacity reports, …) is answered with a `ValidationException` that names it.
//!   Attribute names written inline in an expression are not checked against DynamoDB's
//!   reserved words, and pages are not cut at 1 MB.
//!
//! A repository opens on a store with `Repository::builder().in_memory_store(&store)`;
//! repositories (and limiters) opened on one store share its tables, as two services of one
//! test would share a table. Any SDK client works too:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use dynalimit_memory::Store;
//!
//! let store = Store::new();
//! let tables = store.client().list_tables().send().await.unwrap();
//! assert!(tables.table_names().is_empty());
//! assert!(store.table_names().is_empty());
//! # }
//! ```

mod eval;
mod expr;
mod fault;
mod json;
mod number;
mod ops;
mod table;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_config::{BehaviorVersion, Region};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use dynalimit_core::{Clock, SystemClock};
use serde_json::{Value, json};

use fault::Fault;
use ops::State;

/// The JSON protocol's content type.
const CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The namespace of DynamoDB's error codes.
const ERROR_NAMESPACE: &str = "com.amazonaws.dynamodb.v20120810#";
/// The prefix of every `X-Amz-Target`.
const TARGET_PREFIX: &str = "DynamoDB_20120810.";
/// The endpoint the store's clients name (never resolved: no request leaves the process).
pub const ENDPOINT: &str = "http://dynamodb.memory.invalid";
/// The region of the store's clients.
const REGION: &str = "us-east-1";

/// An in-process DynamoDB table store (see the module documentation). Cheap to clone; clones
/// share the tables.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("tables", &self.table_names())
            .finish_non_exhaustive()
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// An empty store whose tables record their creation time from the system clock.
    pub fn new() -> Store {
        Store::with_clock(Arc::new(SystemClock))
    }

    /// An empty store reading `clock` for table creation times.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Store {
        Store {
            state: Arc::new(Mutex::new(State::default())),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held left no half-applied request: each request is
        // applied after it was checked whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The names of the store's tables, in order.
    pub fn table_names(&self) -> Vec<String> {
        self.lock().tables.keys().cloned().collect()
    }

    /// The settings of a DynamoDB client whose requests this store answers (region
    /// `us-east-1`, static credentials, the store as its HTTP client); add interceptors or
    /// change retry and timeout settings before building it.
    pub fn config(&self) -> aws_sdk_dynamodb::config::Builder {
        aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .credentials_provider(aws_credential_types::Credentials::new(
                "dynalimit",
                "local",
                None,
                None,
                "dynalimit-memory",
            ))
            .endpoint_url(ENDPOINT)
            .http_client(self.clone())
    }

    /// A DynamoDB client whose requests this store answers.
    pub fn client(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(self.config().build())
    }

    /// Answers one request of the DynamoDB JSON protocol: `target` is its `X-Amz-Target`
    /// header (`DynamoDB_20120810.GetItem`), `body` its JSON body. The answer has DynamoDB's
    /// status, content type and body: 200 with the operation's output, or 400 with the
    /// error's `__type` and message.
    pub fn serve(&self, target: Option<&str>, body: &[u8]) -> http::Response<Vec<u8>> {
        let (status, value) = match self.answer(target, body) {
            Ok(output) => (http::StatusCode::OK, output),
            Err(fault) => (http::StatusCode::BAD_REQUEST, error_body(&fault)),
        };
        let mut response = http::Response::new(value.to_string().into_bytes());
        *response.status_mut() = status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(CONTENT_TYPE),
        );
        response
    }

    fn answer(&self, target: Option<&str>, body: &[u8]) -> Result<Value, Fault> {
        let operation = target
            .and_then(|t| t.strip_prefix(TARGET_PREFIX))
            .ok_or_else(|| {
                Fault::new(
                    "UnknownOperationException",
                    format!("Unknown X-Amz-Target: {}", target.unwrap_or("(none)")),
                )
            })?;
        let request: Value = serde_json::from_slice(body).map_err(|e| {
            Fault::new(
                "SerializationException",
                format!("The request body is not JSON: {e}"),
            )
        })?;
        let now = self.clock.epoch_millis() as f64 / 1000.0;
        let mut state = self.lock();
        state.now_seconds = now;
        ops::handle(&mut state, operation, &request)
    }
}

/// The JSON body of an error answer, as DynamoDB shapes it.
fn error_body(fault: &Fault) -> Value {
    let mut out = json!({ "__type": format!("{ERROR_NAMESPACE}{}", fault.code) });
    if let Some(item) = &fault.item {
        out["Item"] = json::write_item(item);
    }
    match &fault.reasons {
        Some(reasons) => {
            out["Message"] = json!(fault.message);
            out["CancellationReasons"] = reasons
                .iter()
                .map(|r| {
                    let mut reason = json!({ "Code": r.code });
                    if let Some(m) = &r.message {
                        reason["Message"] = json!(m);
                    }
                    if let Some(item) = &r.item {
                        reason["Item"] = json::write_item(item);
                    }
                    reason
                })
                .collect();
        }
        None => out["message"] = json!(fault.message),
    }
    out
}

/// The connector the SDK sends through: each request answered by the store.
#[derive(Debug, Clone)]
struct Connector {
    store: Store,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request.headers().get("x-amz-target").map(str::to_owned);
        let answer = match request.body().bytes() {
            Some(body) => self.store.serve(target.as_deref(), body),
            None => self
                .store
                .serve(None, b"streaming bodies are not supported"),
        };
        HttpConnectorFuture::new(async move {
            // Another task runs before the answer arrives, as it would while a request is
            // on the wire.
            tokio::task::yield_now().await;
            let (parts, body) = answer.into_parts();
            let mut response = HttpResponse::new(
                parts.status.as_u16().try_into().map_err(|e| {
                    aws_smithy_runtime_api::client::result::ConnectorError::other(Box::new(e), None)
                })?,
                SdkBody::from(body),
            );
            response.headers_mut().insert("content-type", CONTENT_TYPE);
            Ok(response)
        })
    }
}

impl HttpClient for Store {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(Connector {
            store: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_dynamodb_s_shape() {
        let store = Store::new();
        let answer = store.serve(
            Some("DynamoDB_20120810.GetItem"),
            br#"{"TableName":"nope","Key":{}}"#,
        );
        assert_eq!(answer.status(), http::StatusCode::BAD_REQUEST);
        let body: Value = serde_json::from_slice(answer.body()).unwrap();
        assert_eq!(
            body["__type"],
            "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"
        );
        let answer = store.serve(Some("Other.GetItem"), b"{}");
        let body: Value = serde_json::from_slice(answer.body()).unwrap();
        assert!(
            body["__type"]
                .as_str()
                .unwrap()
                .ends_with("#UnknownOperationException")
        );
        let answer = store.serve(Some("DynamoDB_20120810.ListTables"), b"not json");
        assert_eq!(answer.status(), http::StatusCode::BAD_REQUEST);
    }

    fn key_element(
        name: &str,
        kind: aws_sdk_dynamodb::types::KeyType,
    ) -> aws_sdk_dynamodb::types::KeySchemaElement {
        aws_sdk_dynamodb::types::KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    }

    fn string_attribute(name: &str) -> aws_sdk_dynamodb::types::AttributeDefinition {
        aws_sdk_dynamodb::types::AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn the_sdk_reads_the_store_s_answers() {
        use aws_sdk_dynamodb::types::AttributeValue;
        let store = Store::new();
        let client = store.client();
        client
            .create_table()
            .table_name("memory-table")
            .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
            .set_key_schema(Some(vec![
                key_element("PK", aws_sdk_dynamodb::types::KeyType::Hash),
                key_element("SK", aws_sdk_dynamodb::types::KeyType::Range),
            ]))
            .set_attribute_definitions(Some(vec![string_attribute("PK"), string_attribute("SK")]))
            .send()
            .await
            .unwrap();
        let key = |sk: &str| {
            [
                ("PK".to_owned(), AttributeValue::S("p".into())),
                ("SK".to_owned(), AttributeValue::S(sk.into())),
            ]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>()
        };
        client
            .put_item()
            .table_name("memory-table")
            .set_item(Some(key("a")))
            .send()
            .await
            .unwrap();
        let refused = client
            .put_item()
            .table_name("memory-table")
            .set_item(Some(key("a")))
            .condition_expression("attribute_not_exists(PK)")
            .send()
            .await
            .unwrap_err();
        assert!(
            refused
                .as_service_error()
                .is_some_and(|e| e.is_conditional_check_failed_exception())
        );
        let listed = client.list_tables().send().await.unwrap();
        assert_eq!(listed.table_names(), ["memory-table"]);
    }
}
