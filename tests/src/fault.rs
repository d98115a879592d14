//! A fault-injecting HTTP proxy in front of the test endpoint, for the failures no emulator
//! produces on demand (throttling, transaction conflicts, denied access, server errors).
//!
//! Every request is forwarded unchanged, except that the next `n` requests of a chosen
//! operation are answered by the proxy itself with the service's error shape: status 400 (or
//! the given 5xx), `content-type: application/x-amz-json-1.0`, and a JSON body with
//! `__type` `com.amazonaws.dynamodb.v20120810#<Code>` and `message`. A faulted request never
//! reaches DynamoDB, as a real throttle or conflict applies nothing. A lost answer
//! ([`FaultProxy::lose_next_answer`]) is the opposite: the request is applied and its answer
//! replaced by a server error.
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
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// One planned fault.
#[derive(Debug, Clone)]
struct Plan {
    operation: String,
    code: String,
    status: StatusCode,
    remaining: Arc<AtomicUsize>,
    /// The fault answer's `Date` is this far from now (milliseconds).
    date_offset_ms: i64,
    /// Forward the request first and replace only its answer.
    after_applying: bool,
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
        let upstream: http::Uri = crate::endpoint().url().parse().expect("endpoint URI");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(State::default());
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let (client, state, upstream) = (client.clone(), shared.clone(), upstream.clone());
            async move { forward(&client, &state, &upstream, request).await }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultProxy { addr, state }
    }

    /// The proxy's endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
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

    /// Forwards the next `n` requests of `operation`, so DynamoDB applies them, and answers
    /// each with `InternalServerError` (status 500) instead of DynamoDB's answer: a write
    /// whose answer was lost.
    pub fn lose_next_answer(&self, operation: &str, n: usize) {
        self.push(Plan {
            operation: operation.to_string(),
            code: "InternalServerError".to_string(),
            status: StatusCode::INTERNAL_SERVER_ERROR,
            remaining: Arc::new(AtomicUsize::new(n)),
            date_offset_ms: 0,
            after_applying: true,
        });
    }

    fn plan(&self, operation: &str, code: &str, status: StatusCode, n: usize, offset_ms: i64) {
        self.push(Plan {
            operation: operation.to_string(),
            code: code.to_string(),
            status,
            remaining: Arc::new(AtomicUsize::new(n)),
            date_offset_ms: offset_ms,
            after_applying: false,
        });
    }

    fn push(&self, plan: Plan) {
        self.state.plans.lock().expect("plans").push(plan);
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
    client: &Client<HttpConnector, Full<Bytes>>,
    state: &State,
    upstream: &http::Uri,
    request: Request<Body>,
) -> Response<Body> {
    let operation = request
        .headers()
        .get("x-amz-target")
        .and_then(|t| t.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
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
    let fault = state
        .plans
        .lock()
        .expect("plans")
        .iter()
        .find(|p| {
            p.operation == operation
                && p.remaining
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
        })
        .cloned();
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
    state.requests.lock().expect("requests").push(Recorded {
        operation,
        body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        signed_by: (part(0), part(2)),
    });
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{upstream}{}", path.trim_start_matches('/'))
        .parse()
        .expect("upstream URI");
    let upstream_request = Request::from_parts(parts, Full::new(bytes));
    if let Some(plan) = fault {
        if plan.after_applying {
            let answer = client
                .request(upstream_request)
                .await
                .expect("upstream answers");
            let _ = answer.into_body().collect().await.expect("upstream body");
        }
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{}","message":"injected by the test proxy"}}"#,
            plan.code
        );
        let date = DateTime::from_millis(SystemClock.epoch_millis() + plan.date_offset_ms)
            .fmt(Format::HttpDate)
            .expect("HTTP date");
        return Response::builder()
            .status(plan.status)
            .header("date", date)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amzn-requestid", "FAULTPROXY")
            .body(Body::from(body))
            .expect("fault response");
    }
    let response = client
        .request(upstream_request)
        .await
        .expect("upstream answers");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("upstream body").to_bytes();
    Response::from_parts(parts, Body::from(bytes))
}
