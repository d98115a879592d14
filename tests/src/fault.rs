//! A fault-injecting HTTP proxy in front of the test endpoint, for the failures no emulator
//! produces on demand (throttling, transaction conflicts, denied access, server errors).
//!
//! Every request is forwarded unchanged, except that the next `n` requests of a chosen
//! operation (optionally only those whose body contains a given text, such as one bucket's
//! key) are answered by the proxy itself with the service's error shape: status 400 (or
//! the given 5xx), `content-type: application/x-amz-json-1.0`, and a JSON body with
//! `__type` `com.amazonaws.dynamodb.v20120810#<Code>` and `message`. A faulted request never
//! reaches DynamoDB, as a real throttle or conflict applies nothing. A request can also be
//! forwarded, applied, and then answered with another status and body of the test's choice
//! ([`FaultProxy::replace_answer`], [`FaultProxy::lose_next_answer`]), never answered
//! ([`FaultProxy::hang_after_applying`]) or answered with a body cut short
//! ([`FaultProxy::cut_answer_body`]): an answer that does not say what the write did.
//!
//! The proxy also records every request as it arrived on the wire (its `X-Amz-Target`
//! operation and JSON body), including those of the acquire's fast path, which no SDK
//! interceptor sees.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;
use axum::body::Body;
use bytes::Bytes;
use dynalimit_core::{Clock, SystemClock};
use dynalimit_local::proxy::{self, Served};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};

/// One planned fault.
#[derive(Debug, Clone)]
struct Plan {
    operation: String,
    /// Only requests whose body contains this text (a key, say) are faulted.
    matching: Option<String>,
    reply: Reply,
    remaining: Arc<AtomicUsize>,
}

/// The body of a 500 answer standing for a lost one.
const LOST_500: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected by the test proxy"}"#;

/// How a faulted request is answered.
#[derive(Debug, Clone)]
enum Reply {
    /// An answer of the service refusing the request (an error body); the request never
    /// reaches DynamoDB.
    Error {
        status: StatusCode,
        body: Bytes,
        /// The answer's `Date` is this far from now (milliseconds).
        date_offset_ms: i64,
    },
    /// The request is forwarded and applied; its answer is replaced by this one.
    Replace { status: StatusCode, body: Bytes },
    /// The request is forwarded and applied; then its answer is lost this way.
    After(Lost),
    /// The request is held, never forwarded, never answered (a half-open connection).
    Hold,
}

impl Reply {
    /// DynamoDB's error shape for `code`, answered with `status` and a `Date` `offset_ms`
    /// from now.
    fn error(code: &str, status: StatusCode, date_offset_ms: i64) -> Reply {
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected by the test proxy"}}"#
        );
        Reply::Error {
            status,
            body: Bytes::from(body),
            date_offset_ms,
        }
    }
}

/// How the answer of a request the proxy forwarded (and DynamoDB applied) is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// `InternalServerError` (status 500) instead of DynamoDB's answer.
    Answer500,
    /// No answer ever comes; the connection stays open.
    Hang,
    /// The connection closes before a status is sent.
    Reset,
    /// DynamoDB's status and headers are passed on, then the connection fails halfway
    /// through the body.
    CutBody,
    /// DynamoDB's status, headers and half the body are passed on, then nothing more.
    StallBody,
    /// Not lost: DynamoDB's answer, 300 ms late.
    Delay,
}

/// One request as the proxy received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The operation (`GetItem`, …) from `X-Amz-Target`.
    pub operation: String,
    /// The JSON body (`Null` when it is not JSON).
    pub body: serde_json::Value,
    /// The access key id and region of the SigV4 `Authorization` header's credential scope
    /// (empty when unsigned).
    pub signed_by: (String, String),
}

#[derive(Debug, Default)]
struct State {
    plans: Mutex<Vec<Plan>>,
    seen: Mutex<Vec<String>>,
    requests: Mutex<Vec<Recorded>>,
    /// `x-amz-date` of every request, in order.
    dates: Mutex<Vec<String>>,
    /// Access key ids whose requests are refused as unknown.
    refused_keys: Mutex<Vec<String>>,
    /// Faults drawn at random, when set.
    chaos: Mutex<Option<Chaos>>,
}

/// Faults drawn at random for the data-plane operations (see [`FaultProxy::chaos`]).
#[derive(Debug)]
struct Chaos {
    rate: f64,
    rng: rand::rngs::StdRng,
    served: std::collections::BTreeMap<String, usize>,
}

/// The operations [`FaultProxy::chaos`] faults.
const CHAOS_OPERATIONS: &[&str] = &[
    "UpdateItem",
    "TransactWriteItems",
    "GetItem",
    "BatchGetItem",
    "Query",
];

impl Chaos {
    /// The fault for one request of `operation`, if one is drawn.
    fn draw(&mut self, operation: &str) -> Option<(&'static str, Reply)> {
        use rand::Rng;
        if !CHAOS_OPERATIONS.contains(&operation) || !self.rng.random_bool(self.rate) {
            return None;
        }
        let error = |code: &str, status| Reply::error(code, status, 0);
        let (name, reply) = match self.rng.random_range(0..8) {
            0 => (
                "throttled",
                error("ThrottlingException", StatusCode::BAD_REQUEST),
            ),
            1 => (
                "500, not applied",
                error("InternalServerError", StatusCode::INTERNAL_SERVER_ERROR),
            ),
            2 => ("500 after applying", Reply::After(Lost::Answer500)),
            3 => ("no answer after applying", Reply::After(Lost::Hang)),
            4 => ("reset after applying", Reply::After(Lost::Reset)),
            5 => ("body cut after applying", Reply::After(Lost::CutBody)),
            6 => ("late answer", Reply::After(Lost::Delay)),
            _ => ("held, never forwarded", Reply::Hold),
        };
        *self.served.entry(name.to_string()).or_default() += 1;
        Some((name, reply))
    }
}

/// Where the proxy forwards: the test endpoint over HTTP, or the in-process table store.
#[derive(Debug, Clone)]
enum Upstream {
    Http(http::Uri),
    Memory(dynalimit_memory::Store),
}

/// The proxy; stops with the test's runtime.
#[derive(Debug, Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
}

impl FaultProxy {
    /// Starts a proxy forwarding to the test endpoint.
    ///
    /// # Panics
    /// When no local port can be bound.
    pub async fn start() -> FaultProxy {
        let upstream = match crate::endpoint().memory() {
            Some(store) => Upstream::Memory(store.clone()),
            None => Upstream::Http(crate::endpoint().url().parse().expect("endpoint URI")),
        };
        let state = Arc::new(State::default());
        let client = proxy::upstream();
        let shared = state.clone();
        let addr = Served::start(move |request: Request<Body>| {
            let (client, state, upstream) = (client.clone(), shared.clone(), upstream.clone());
            async move { forward(&client, &state, &upstream, request).await }
        })
        .await
        .expect("bind the fault proxy")
        .detach();
        FaultProxy { addr, state }
    }

    /// The proxy's endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The test kit's client sending through this proxy, making at most `attempts` attempts
    /// a millisecond apart, each bounded by `attempt_timeout` when given.
    pub async fn client(
        &self,
        attempts: u32,
        attempt_timeout: Option<std::time::Duration>,
    ) -> aws_sdk_dynamodb::Client {
        let base = crate::client().await;
        let mut timeouts = aws_smithy_types::timeout::TimeoutConfig::builder();
        if let Some(limit) = attempt_timeout {
            timeouts = timeouts.operation_attempt_timeout(limit);
        }
        aws_sdk_dynamodb::Client::from_conf(
            base.config()
                .to_builder()
                .endpoint_url(self.url())
                .retry_config(
                    aws_smithy_types::retry::RetryConfig::standard()
                        .with_max_attempts(attempts)
                        .with_initial_backoff(std::time::Duration::from_millis(1)),
                )
                .timeout_config(timeouts.build())
                .build(),
        )
    }

    /// Namespace `ns` of `table` opened through this proxy: three attempts, each bounded by
    /// 1 s (a held or hanging request is an unknown outcome within a second).
    ///
    /// # Panics
    /// When the namespace cannot be opened.
    pub async fn repository(
        &self,
        table: &crate::TestTable,
        ns: &str,
    ) -> dynalimit_repository::Repository {
        let client = self
            .client(3, Some(std::time::Duration::from_secs(1)))
            .await;
        table
            .builder()
            .client(client)
            .namespace(ns)
            .open()
            .await
            .expect("open through the proxy")
    }

    /// Answers the next `n` requests of `operation` (`UpdateItem`, …) with error `code`
    /// (`ThrottlingException`, …) and status 400.
    pub fn fail_next(&self, operation: &str, code: &str, n: usize) {
        self.fail_next_with(operation, code, StatusCode::BAD_REQUEST, n);
    }

    /// As [`FaultProxy::fail_next`] with another status (a 5xx for server errors).
    pub fn fail_next_with(&self, operation: &str, code: &str, status: StatusCode, n: usize) {
        self.plan(operation, code, status, n, 0);
    }

    /// As [`FaultProxy::fail_next`], with the answer's `Date` header `offset_ms` away from
    /// now: the service's clock as a client with a skewed clock sees it.
    pub fn fail_next_dated(&self, operation: &str, code: &str, n: usize, offset_ms: i64) {
        self.plan(operation, code, StatusCode::BAD_REQUEST, n, offset_ms);
    }

    /// Refuses every later request signed with `access_key_id` with
    /// `UnrecognizedClientException` (a rotated-out key), until [`FaultProxy::clear`].
    pub fn refuse_key(&self, access_key_id: &str) {
        self.state
            .refused_keys
            .lock()
            .expect("refused keys")
            .push(access_key_id.to_string());
    }

    /// As [`FaultProxy::fail_next`], for requests whose body contains `needle` only (a
    /// bucket's partition key, say); other requests of `operation` pass.
    pub fn fail_matching(&self, operation: &str, needle: &str, code: &str, n: usize) {
        let reply = Reply::error(code, StatusCode::BAD_REQUEST, 0);
        self.push(operation, Some(needle), reply, n);
    }

    /// Answers the next `n` requests of `operation` whose body contains `needle` with
    /// `status` and `body` without forwarding them: a refusal DynamoDB words in the body (a
    /// transaction cancelled for one of its items, say); nothing is applied.
    pub fn refuse_matching(
        &self,
        operation: &str,
        needle: &str,
        status: StatusCode,
        body: impl Into<Bytes>,
        n: usize,
    ) {
        let reply = Reply::Error {
            status,
            body: body.into(),
            date_offset_ms: 0,
        };
        self.push(operation, Some(needle), reply, n);
    }

    /// Forwards the next `n` requests of `operation` whose body contains `needle` (any
    /// request when `None`), so DynamoDB applies them, and answers each with `status` and
    /// `body` instead of DynamoDB's answer.
    pub fn replace_answer(
        &self,
        operation: &str,
        needle: Option<&str>,
        status: StatusCode,
        body: impl Into<Bytes>,
        n: usize,
    ) {
        let reply = Reply::Replace {
            status,
            body: body.into(),
        };
        self.push(operation, needle, reply, n);
    }

    /// Forwards the next `n` requests of `operation`, so DynamoDB applies them, and answers
    /// each with `InternalServerError` (status 500) instead of DynamoDB's answer: a write
    /// whose answer was lost.
    pub fn lose_next_answer(&self, operation: &str, n: usize) {
        self.lose_after_applying(operation, None, Lost::Answer500, n);
    }

    /// Forwards the next `n` requests of `operation`, so DynamoDB applies them, and never
    /// answers them: the client's attempt timeout ends each.
    pub fn hang_after_applying(&self, operation: &str, n: usize) {
        self.lose_after_applying(operation, None, Lost::Hang, n);
    }

    /// Forwards the next `n` requests of `operation`, so DynamoDB applies them, passes on
    /// DynamoDB's status and headers, and fails the connection halfway through the body.
    pub fn cut_answer_body(&self, operation: &str, n: usize) {
        self.lose_after_applying(operation, None, Lost::CutBody, n);
    }

    /// Forwards the next `n` requests of `operation`, so DynamoDB applies them, passes on
    /// DynamoDB's status, headers and half the body, and then stalls with the connection
    /// open.
    pub fn stall_answer_body(&self, operation: &str, n: usize) {
        self.lose_after_applying(operation, None, Lost::StallBody, n);
    }

    /// Forwards the next `n` requests of `operation` whose body contains `needle` (any when
    /// `None`), so DynamoDB applies them, and loses each answer as `how` says.
    pub fn lose_after_applying(&self, operation: &str, needle: Option<&str>, how: Lost, n: usize) {
        self.push(operation, needle, Reply::After(how), n);
    }

    /// Holds the next `n` requests of `operation` whose body contains `needle` (any when
    /// `None`) without forwarding or answering them: a half-open connection; nothing is
    /// applied.
    pub fn hold(&self, operation: &str, needle: Option<&str>, n: usize) {
        self.push(operation, needle, Reply::Hold, n);
    }

    fn plan(&self, operation: &str, code: &str, status: StatusCode, n: usize, offset_ms: i64) {
        let reply = Reply::error(code, status, offset_ms);
        self.push(operation, None, reply, n);
    }

    fn push(&self, operation: &str, needle: Option<&str>, reply: Reply, n: usize) {
        self.state.plans.lock().expect("plans").push(Plan {
            operation: operation.to_string(),
            matching: needle.map(str::to_string),
            reply,
            remaining: Arc::new(AtomicUsize::new(n)),
        });
    }

    /// From now on, each request of a data-plane operation (`UpdateItem`,
    /// `TransactWriteItems`, `GetItem`, `BatchGetItem`, `Query`) is faulted with probability
    /// `rate`, the fault drawn evenly from: throttled, 500 not applied, and applied then
    /// answered 500, never answered, reset before the status, body cut, answered late, and a
    /// request held without forwarding. Draws follow `seed`. Requests are no longer recorded
    /// (a long run would hold them all).
    pub fn chaos(&self, rate: f64, seed: u64) {
        use rand::SeedableRng;
        *self.state.chaos.lock().expect("chaos") = Some(Chaos {
            rate,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            served: std::collections::BTreeMap::new(),
        });
    }

    /// How many faults of each kind [`FaultProxy::chaos`] has served.
    pub fn chaos_served(&self) -> std::collections::BTreeMap<String, usize> {
        self.state
            .chaos
            .lock()
            .expect("chaos")
            .as_ref()
            .map(|c| c.served.clone())
            .unwrap_or_default()
    }

    /// Every planned fault is dropped; requests pass unchanged from now on.
    pub fn clear(&self) {
        self.state.plans.lock().expect("plans").clear();
        self.state
            .refused_keys
            .lock()
            .expect("refused keys")
            .clear();
    }

    /// Every request the proxy received, in order, with its body.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("requests").clone()
    }

    /// Forgets the requests recorded so far ([`FaultProxy::requests`], [`FaultProxy::seen`]).
    pub fn clear_requests(&self) {
        self.state.requests.lock().expect("requests").clear();
        self.state.seen.lock().expect("seen").clear();
    }

    /// The `x-amz-date` header of every request the proxy received, in order.
    pub fn dates(&self) -> Vec<String> {
        self.state.dates.lock().expect("dates").clone()
    }

    /// Faults planned but not yet served.
    pub fn pending(&self) -> usize {
        let plans = self.state.plans.lock().expect("plans");
        plans
            .iter()
            .map(|p| p.remaining.load(Ordering::SeqCst))
            .sum()
    }

    /// The operations of every request the proxy received, in order.
    pub fn seen(&self) -> Vec<String> {
        self.state.seen.lock().expect("seen").clone()
    }
}

async fn forward(
    client: &proxy::Upstream,
    state: &State,
    upstream: &Upstream,
    request: Request<Body>,
) -> Response<Body> {
    let operation = proxy::operation(request.headers())
        .unwrap_or("unknown")
        .to_string();
    state.seen.lock().expect("seen").push(operation.clone());
    let date = request
        .headers()
        .get("x-amz-date")
        .and_then(|d| d.to_str().ok())
        .unwrap_or_default()
        .to_string();
    state.dates.lock().expect("dates").push(date);
    let (mut parts, body) = request.into_parts();
    let bytes = body.collect().await.expect("request body").to_bytes();
    let scope = parts
        .headers
        .get("authorization")
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split('/').map(str::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    let part = |i: usize| scope.get(i).cloned().unwrap_or_default();
    if state.chaos.lock().expect("chaos").is_none() {
        state.requests.lock().expect("requests").push(Recorded {
            operation: operation.clone(),
            body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
            signed_by: (part(0), part(2)),
        });
    }
    let text = String::from_utf8_lossy(&bytes);
    let refused = state
        .refused_keys
        .lock()
        .expect("refused keys")
        .contains(&part(0));
    let fault = state
        .plans
        .lock()
        .expect("plans")
        .iter()
        .find(|p| {
            p.operation == operation
                && p.matching
                    .as_ref()
                    .is_none_or(|m| text.contains(m.as_str()))
                && p.remaining
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
        })
        .cloned()
        .or_else(|| {
            let drawn = state
                .chaos
                .lock()
                .expect("chaos")
                .as_mut()
                .and_then(|c| c.draw(&operation));
            drawn.map(|(_, reply)| Plan {
                operation: operation.clone(),
                matching: None,
                reply,
                remaining: Arc::new(AtomicUsize::new(0)),
            })
        })
        .or_else(|| {
            refused.then(|| Plan {
                operation: operation.clone(),
                matching: None,
                reply: Reply::error("UnrecognizedClientException", StatusCode::BAD_REQUEST, 0),
                remaining: Arc::new(AtomicUsize::new(0)),
            })
        });
    if let Some(Plan {
        reply:
            Reply::Error {
                status,
                body,
                date_offset_ms,
            },
        ..
    }) = &fault
    {
        let date = DateTime::from_millis(SystemClock.epoch_millis() + date_offset_ms)
            .fmt(Format::HttpDate)
            .expect("HTTP date");
        return Response::builder()
            .status(*status)
            .header("date", date)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amzn-requestid", "FAULTPROXY")
            .body(Body::from(body.clone()))
            .expect("fault response");
    }
    if matches!(
        fault,
        Some(Plan {
            reply: Reply::Hold,
            ..
        })
    ) {
        return std::future::pending().await;
    }
    let upstream = match upstream {
        Upstream::Http(uri) => uri,
        Upstream::Memory(store) => {
            let target = parts
                .headers
                .get("x-amz-target")
                .and_then(|t| t.to_str().ok());
            let (parts, body) = store.serve(target, &bytes).into_parts();
            return answer(fault, parts, Bytes::from(body)).await;
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{upstream}{}", path.trim_start_matches('/'))
        .parse()
        .expect("upstream URI");
    // An upstream that fails (an emulator being restarted) fails the client's connection
    // the same way.
    let Ok(response) = client
        .request(Request::from_parts(parts, Full::new(bytes)))
        .await
    else {
        return reset();
    };
    let (parts, body) = response.into_parts();
    let Ok(bytes) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return reset();
    };
    answer(fault, parts, bytes).await
}

/// The upstream's answer, passed on or replaced or lost as the fault planned.
async fn answer(fault: Option<Plan>, parts: http::response::Parts, bytes: Bytes) -> Response<Body> {
    match fault.map(|p| p.reply) {
        Some(Reply::Replace { status, body }) => replaced(parts, status, body),
        Some(Reply::After(how)) => lose(how, parts, bytes).await,
        _ => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// DynamoDB's answer (`parts`, `bytes`) lost as `how` says.
async fn lose(how: Lost, parts: http::response::Parts, bytes: Bytes) -> Response<Body> {
    use futures::StreamExt;
    let half = bytes.slice(..bytes.len() / 2);
    match how {
        Lost::Answer500 => replaced(parts, StatusCode::INTERNAL_SERVER_ERROR, LOST_500.into()),
        Lost::Hang => std::future::pending().await,
        Lost::Reset => reset(),
        // The status, headers and half the body reach the client before the cut.
        Lost::CutBody => {
            let cut = futures::stream::once(async move { Ok::<_, std::io::Error>(half) }).chain(
                futures::stream::once(async {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    Err(std::io::Error::other("connection cut by the test proxy"))
                }),
            );
            Response::from_parts(parts, Body::from_stream(cut))
        }
        Lost::StallBody => {
            let stall = futures::stream::once(async move { Ok::<_, std::io::Error>(half) })
                .chain(futures::stream::pending());
            Response::from_parts(parts, Body::from_stream(stall))
        }
        Lost::Delay => {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            Response::from_parts(parts, Body::from(bytes))
        }
    }
}

/// DynamoDB's answer with its status and body replaced.
fn replaced(mut parts: http::response::Parts, status: StatusCode, body: Bytes) -> Response<Body> {
    parts.status = status;
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.remove("x-amz-crc32");
    Response::from_parts(parts, Body::from(body))
}

/// A response whose body fails before anything is flushed: the connection closes without a
/// status.
fn reset() -> Response<Body> {
    let fail = futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::other("connection reset by the test proxy"))
    });
    Response::new(Body::from_stream(fail))
}
