//! `RateLimiterLayer` in front of a real axum server on 127.0.0.1, over DynamoDB.

use std::net::SocketAddr;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::get;
use dynalimit::time::Clock as _;
use dynalimit::tower::{Charge, RateLimiterLayer};
use dynalimit::{Limit, NewEntity, RateLimiter};
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

/// Serves `app` on a loopback port.
async fn serve_app(app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, server)
}

/// `/llm`, whose answer says it used 137 tokens (`x-tokens-used`).
fn llm() -> Router {
    Router::new().route(
        "/llm",
        get(|| async { ([("x-tokens-used", "137")], "answer") }),
    )
}

/// The `tpm` an answer's `x-tokens-used` header reports (the layer's `usage`).
fn tokens_used(headers: &http::HeaderMap) -> Vec<(String, i64)> {
    let used = headers
        .get("x-tokens-used")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    used.map(|n| vec![("tpm".to_owned(), n)])
        .unwrap_or_default()
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
    serve_app(app).await
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
    .usage(tokens_used);
    let app = llm()
        .route("/silent", get(|| async { "no usage reported" }))
        .layer(layer);
    let (addr, server) = serve_app(app).await;

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

/// Serves `/llm` behind a layer charging `rpm=1, tpm=500` on `search` to the key in
/// `x-api-key` (limits from the stored configuration), corrected to the answer's
/// `x-tokens-used` (137).
async fn serve_gateway(limiter: RateLimiter) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let layer = RateLimiterLayer::new(limiter, |req: &http::Request<Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(
            Charge::new(key, "search")
                .consume("rpm", 1)
                .consume("tpm", 500),
        )
    })
    .usage(tokens_used);
    serve_app(llm().layer(layer)).await
}

#[tokio::test]
async fn a_key_s_usage_reaches_its_project_s_token_budget_and_the_headers_name_both() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository(NS).await;
    // The gateway's shape: per-key rpm on the key, a tpm budget on the project.
    repo.create_entity(NewEntity::new("proj")).await.unwrap();
    repo.create_entity(NewEntity::new("k1").parent("proj").cascade(true))
        .await
        .unwrap();
    repo.set_limits("k1", "search", &[Limit::per_minute("rpm", 100)])
        .await
        .unwrap();
    repo.set_limits("proj", "search", &[Limit::per_minute("tpm", 100_000)])
        .await
        .unwrap();
    let (limiter, _clock) = limiter(&table, NS).await;
    let (addr, server) = serve_gateway(limiter).await;
    let answer = get_raw(addr, "/llm", Some("k1")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // rpm from the key's bucket, tpm from the project's, at the real count.
    assert_eq!(
        ratelimit_headers(&answer),
        (
            Some("\"rpm\";q=100;w=60, \"tpm\";q=100000;w=60".to_owned()),
            Some("\"rpm\";r=99;t=1, \"tpm\";r=99863;t=1".to_owned())
        )
    );
    get_raw(addr, "/llm", Some("k1")).await;
    let (_, _, counted) = balances_of(&bucket_item(&table, "proj", "search").await, "tpm");
    assert_eq!(
        counted, 274_000,
        "the project's tpm committed at the real counts"
    );
    let (_, _, requests) = balances(&bucket_item(&table, "k1", "search").await);
    assert_eq!(requests, 2000);
    server.abort();
}

#[tokio::test]
async fn a_sharded_bucket_s_headers_report_the_bucket_and_a_quota_its_period() {
    let table = dynalimit_tests::table().await;
    let (limiter, clock) = limiter(&table, NS).await;
    let day = Limit::quota_per_day("tpd", 1_000, dynalimit::schedule::Zone::utc());
    let layer = RateLimiterLayer::new(limiter, |req: &http::Request<Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(
            Charge::new(key, "search")
                .consume("rpm", 1)
                .consume("tpd", 10),
        )
    })
    .limits([Limit::per_minute("rpm", 100), day]);
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .layer(layer);
    let (addr, server) = serve_app(app).await;
    let until_midnight = |now: i64| (86_400_000 - now.rem_euclid(86_400_000) + 999) / 1000;
    let first = get_raw(addr, "/ok", Some("k1")).await;
    assert_eq!(
        ratelimit_headers(&first),
        (
            Some("\"rpm\";q=100;w=60, \"tpd\";q=1000;w=86400".to_owned()),
            Some(format!(
                "\"rpm\";r=99;t=1, \"tpd\";r=990;t={}",
                until_midnight(clock.epoch_millis())
            ))
        )
    );
    // Split four ways, as a doubling twice leaves it, each shard holding its share: the
    // headers still speak of the bucket, its balance scaled from the shard that answered.
    let pk = bucket_item(&table, "k1", "search").await["PK"]
        .as_s()
        .unwrap()
        .clone();
    let n = |v: &str| AttributeValue::N(v.into());
    table
        .client()
        .update_item()
        .table_name(table.name())
        .key("PK", AttributeValue::S(pk))
        .key("SK", AttributeValue::S("#STATE".into()))
        .update_expression("SET shard_count = :four, b_rpm_tk = :rpm, b_tpd_tk = :tpd")
        .expression_attribute_values(":four", n("4"))
        .expression_attribute_values(":rpm", n("25000"))
        .expression_attribute_values(":tpd", n("240000"))
        .send()
        .await
        .unwrap();
    let split = get_raw(addr, "/ok", Some("k1")).await;
    assert_eq!(
        ratelimit_headers(&split),
        (
            Some("\"rpm\";q=100;w=60, \"tpd\";q=1000;w=86400".to_owned()),
            // rpm: 24 of a 25 share, so 96 of 100, full in 2.4 s; tpd: 230 of 250, so 920.
            Some(format!(
                "\"rpm\";r=96;t=3, \"tpd\";r=920;t={}",
                until_midnight(clock.epoch_millis())
            ))
        )
    );
    server.abort();
}

#[tokio::test]
async fn requests_in_flight_beyond_the_concurrency_limit_are_answered_429_until_one_ends() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let table = dynalimit_tests::table().await;
    let (limiter, _clock) = super::limiter(&table, "pause-in-flight").await;
    let entered = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (e, g) = (Arc::clone(&entered), Arc::clone(&gate));
    let slow = get(move || {
        let (e, g) = (Arc::clone(&e), Arc::clone(&g));
        async move {
            e.fetch_add(1, Ordering::SeqCst);
            // Each permit lets one request through.
            g.acquire().await.unwrap().forget();
            "streamed"
        }
    });
    let layer = RateLimiterLayer::new(limiter, |req: &http::Request<Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        Some(Charge::new(key, "llm").consume("rpm", 1))
    })
    .limits([Limit::per_minute("rpm", 1000)])
    .in_flight(dynalimit::Concurrency::new("streams", 2).unwrap());
    let (addr, _server) = serve_app(Router::new().route("/slow", slow).layer(layer)).await;

    // Two requests of k1 in flight, held in the handler.
    let wait_for = |n: usize| {
        let entered = Arc::clone(&entered);
        async move {
            for _ in 0..300 {
                if entered.load(Ordering::SeqCst) == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!(
                "{} requests in the handler, not {n}",
                entered.load(Ordering::SeqCst)
            );
        }
    };
    let first = tokio::spawn(get_with(addr, "/slow", Some("k1")));
    let second = tokio::spawn(get_with(addr, "/slow", Some("k1")));
    wait_for(2).await;
    // A third is refused without reaching the handler; Retry-After is at most the hold time.
    let third = get_with(addr, "/slow", Some("k1")).await;
    assert_eq!(third.status, 429);
    assert!(
        third.retry_after.is_some_and(|s| (1..=31).contains(&s)),
        "{third:?}"
    );
    assert_eq!(entered.load(Ordering::SeqCst), 2);
    // Another key has slots of its own: it reaches the handler while k1's are all held.
    let other = tokio::spawn(get_with(addr, "/slow", Some("k2")));
    wait_for(3).await;
    gate.add_permits(3);
    for answer in [first, second, other] {
        assert_eq!(answer.await.unwrap().status, 200);
    }
    // The requests ended: k1 has its slots back.
    gate.add_permits(1);
    assert_eq!(get_with(addr, "/slow", Some("k1")).await.status, 200);
}
