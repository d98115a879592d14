//! `RateLimiterLayer` in front of a real axum server on 127.0.0.1, over DynamoDB.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::get;
use dynalimit::tower::{Charge, RateLimiterLayer};
use dynalimit::{Limit, RateLimiter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{balances, balances_of, bucket_item, limiter};

const NS: &str = "pause-layer";

/// An answer: status and the `Retry-After` header, if any.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    retry_after: Option<u64>,
}

/// An answer's `RateLimit-Policy` and `RateLimit` header values.
fn ratelimit_headers(raw: &str) -> (Option<String>, Option<String>) {
    let header = |name: &str| {
        raw.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    (header("ratelimit-policy"), header("ratelimit"))
}

fn answer(status: u16, retry_after: Option<u64>) -> Answer {
    Answer {
        status,
        retry_after,
    }
}

/// `GET path` with an optional `x-api-key` over a fresh connection: the raw answer.
async fn get_raw(addr: SocketAddr, path: &str, key: Option<&str>) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let header = key.map_or(String::new(), |k| format!("x-api-key: {k}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{header}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    raw
}

/// `GET path` with an optional `x-api-key` over a fresh connection.
async fn get_with(addr: SocketAddr, path: &str, key: Option<&str>) -> Answer {
    let raw = get_raw(addr, path, key).await;
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let retry_after = raw
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_owned)
        })
        .map(|v| v.trim().parse().unwrap());
    Answer {
        status,
        retry_after,
    }
}

/// Serves `/ok` (200) and `/fail` (500) behind the layer: the `x-api-key` header names the
/// entity, the resource is `search`, each request costs one `rpm` of a 2-per-minute limit;
/// requests without a key are not limited.
async fn serve(limiter: RateLimiter) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let layer = RateLimiterLayer::new(limiter, |req: &http::Request<Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(Charge::new(key, "search").consume("rpm", 1))
    })
    .limits([Limit::per_minute("rpm", 2)]);
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/fail", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, server)
}

#[tokio::test]
async fn the_layer_answers_429_with_retry_after_once_the_bucket_is_spent() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    let (addr, server) = serve(limiter).await;
    assert_eq!(get_with(addr, "/ok", Some("k1")).await, answer(200, None));
    assert_eq!(get_with(addr, "/ok", Some("k1")).await, answer(200, None));
    // One token of a 2-per-minute limit comes back in 30 s: Retry-After = int(30) + 1.
    assert_eq!(
        get_with(addr, "/ok", Some("k1")).await,
        answer(429, Some(31))
    );
    // Other keys and unkeyed requests are not affected.
    assert_eq!(get_with(addr, "/ok", Some("k2")).await, answer(200, None));
    assert_eq!(get_with(addr, "/ok", None).await, answer(200, None));
    let (_, _, counted) = balances(&bucket_item(&table, "k1", "search").await);
    assert_eq!(counted, 2000, "two committed requests");
    server.abort();
}

#[tokio::test]
async fn failed_requests_are_rolled_back_and_successes_committed() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    let (addr, server) = serve(limiter).await;
    for _ in 0..4 {
        // A failure gives its token back, so four failures never exhaust two tokens.
        assert_eq!(get_with(addr, "/fail", Some("k1")).await, answer(500, None));
    }
    let (tk, _, counted) = balances(&bucket_item(&table, "k1", "search").await);
    assert_eq!(
        (tk, counted),
        (2000, 0),
        "every failed request was rolled back"
    );
    assert_eq!(get_with(addr, "/ok", Some("k1")).await, answer(200, None));
    let (tk, _, counted) = balances(&bucket_item(&table, "k1", "search").await);
    assert_eq!((tk, counted), (1000, 1000), "the success was committed");
    server.abort();
}

#[tokio::test]
async fn a_paused_bucket_answers_429_with_the_pause_as_retry_after() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    let (addr, server) = serve(limiter.clone()).await;
    assert_eq!(get_with(addr, "/ok", Some("k1")).await, answer(200, None));
    limiter
        .pause("k1", "search", Duration::from_millis(12_500))
        .await
        .unwrap();
    assert_eq!(
        get_with(addr, "/ok", Some("k1")).await,
        answer(429, Some(13))
    );
    clock.advance(Duration::from_millis(12_500));
    assert_eq!(get_with(addr, "/ok", Some("k1")).await, answer(200, None));
    server.abort();
}

#[tokio::test]
async fn answers_carry_the_ratelimit_headers_of_the_entitys_bucket() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    let (addr, server) = serve(limiter).await;
    let policy = Some("\"rpm\";q=2;w=60".to_owned());
    let first = get_raw(addr, "/ok", Some("k1")).await;
    assert_eq!(
        ratelimit_headers(&first),
        (policy.clone(), Some("\"rpm\";r=1;t=30".to_owned()))
    );
    let second = get_raw(addr, "/ok", Some("k1")).await;
    assert_eq!(
        ratelimit_headers(&second),
        (policy.clone(), Some("\"rpm\";r=0;t=60".to_owned()))
    );
    // Refused: nothing left, and the limit that did not fit resets with Retry-After.
    let refused = get_raw(addr, "/ok", Some("k1")).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert_eq!(
        ratelimit_headers(&refused),
        (policy, Some("\"rpm\";r=0;t=31".to_owned()))
    );
    // An unkeyed request is not limited and carries none.
    let free = get_raw(addr, "/ok", None).await;
    assert_eq!(ratelimit_headers(&free), (None, None));
    server.abort();
}

#[tokio::test]
async fn the_answer_adjusts_the_lease_to_what_the_request_really_used() {
    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = limiter(&table, NS).await;
    // Each request is charged an estimate of 500 tokens; the handler says what it used.
    let layer = RateLimiterLayer::new(limiter, |req: &http::Request<Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(Charge::new(key, "search").consume("tpm", 500))
    })
    .limits([Limit::per_minute("tpm", 10_000)])
    .usage(|headers| {
        let used = headers
            .get("x-tokens-used")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        used.map(|n| vec![("tpm".to_owned(), n)])
            .unwrap_or_default()
    });
    let app = Router::new()
        .route(
            "/llm",
            get(|| async { ([("x-tokens-used", "137")], "answer") }),
        )
        .route("/silent", get(|| async { "no usage reported" }))
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let answer = get_raw(addr, "/llm", Some("k1")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The headers already count the real usage: 10 000 - 137.
    assert_eq!(
        ratelimit_headers(&answer).1.as_deref(),
        Some("\"tpm\";r=9863;t=1")
    );
    let (tk, _, counted) = balances_of(&bucket_item(&table, "k1", "search").await, "tpm");
    assert_eq!(
        (tk, counted),
        (9_863_000, 137_000),
        "committed at the real count"
    );
    // No usage header: the estimate stands.
    get_raw(addr, "/silent", Some("k1")).await;
    let (_, _, counted) = balances_of(&bucket_item(&table, "k1", "search").await, "tpm");
    assert_eq!(counted, 637_000);
    server.abort();
}
