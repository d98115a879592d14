//! An LLM gateway in miniature: every API key has its own budget on a model and spends from
//! its project's as well (the key cascades to the project); a request is charged an estimate
//! of its tokens and committed at the count the model reports; refusals are `429` with
//! `Retry-After` and the IETF `RateLimit` headers; the limiter's metrics are on `/metrics`.
//! Each key has at most 5 requests in flight across every gateway process sharing the table
//! (a fleet-wide concurrency limit): `/v1/chat` holds a slot while the model answers, and
//! `/v1/stream` holds one until its last chunk is sent.
//!
//! ```sh
//! dynalimit local up && export DYNALIMIT_ENDPOINT_URL=http://127.0.0.1:8000
//! AWS_ENDPOINT_URL=$DYNALIMIT_ENDPOINT_URL cargo run -p dynalimit --features tower --example llm_gateway
//! curl -i -X POST -H 'x-api-key: key-1' -H 'x-max-tokens: 800' localhost:3000/v1/chat
//! curl -N -H 'x-api-key: key-1' localhost:3000/v1/stream
//! curl localhost:3000/metrics
//! ```

use std::convert::Infallible;
use std::error::Error;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use dynalimit::tower::{Charge, RateLimiterLayer};
use dynalimit::{Concurrency, Limit, NewEntity, RateLimiter, Repository, RepositoryError};
use metrics_exporter_prometheus::PrometheusBuilder;

const MODEL: &str = "gpt-4";

/// The budgets: 60 requests and 20 000 tokens a minute per key by default, 600 requests and
/// 100 000 tokens a minute for the project, and two keys in the project.
async fn configure(repo: &Repository) -> Result<(), RepositoryError> {
    repo.set_resource_defaults(
        MODEL,
        &[
            Limit::per_minute("rpm", 60),
            Limit::per_minute("tpm", 20_000),
        ],
    )
    .await?;
    let entities = [
        NewEntity::new("proj-1"),
        NewEntity::new("key-1").parent("proj-1").cascade(true),
        NewEntity::new("key-2").parent("proj-1").cascade(true),
    ];
    for entity in entities {
        match repo.create_entity(entity).await {
            Ok(_) | Err(RepositoryError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    repo.set_limits(
        "proj-1",
        MODEL,
        &[
            Limit::per_minute("rpm", 600),
            Limit::per_minute("tpm", 100_000),
        ],
    )
    .await
}

/// What a request is charged: one request and the tokens it may use at most.
fn charge(request: &Request<Body>) -> Option<Charge> {
    let key = request.headers().get("x-api-key")?.to_str().ok()?;
    let estimate = request
        .headers()
        .get("x-max-tokens")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1000);
    Some(
        Charge::new(key, MODEL)
            .consume("rpm", 1)
            .consume("tpm", estimate),
    )
}

/// What the request really used, as the handler reports it.
fn usage(headers: &HeaderMap) -> Vec<(String, i64)> {
    headers
        .get("x-tokens-used")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .map(|used| vec![("tpm".to_owned(), used)])
        .unwrap_or_default()
}

/// The model, simulated: it uses about half of what the caller allowed.
async fn chat(headers: HeaderMap) -> ([(&'static str, String); 1], &'static str) {
    let allowed: i64 = headers
        .get("x-max-tokens")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1000);
    (
        [("x-tokens-used", (allowed / 2).to_string())],
        "a generated answer\n",
    )
}

/// At most 5 requests of a key in flight, across the fleet; a crashed gateway's slots come
/// back within 30 s.
fn streams() -> Concurrency {
    Concurrency::new("streams", 5).expect("a valid limit")
}

/// A streamed answer: the key holds one of its stream slots until the last chunk is sent (or
/// the client goes away and the stream is dropped), extended while it runs.
async fn stream(State(limiter): State<RateLimiter>, headers: HeaderMap) -> Response {
    let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let mut slot = match limiter.hold(key, MODEL, &streams()).await {
        Ok(slot) => slot,
        Err(e) => {
            let retry = e
                .rejection()
                .and_then(dynalimit::Rejection::retry_after_header);
            let mut refused = StatusCode::TOO_MANY_REQUESTS.into_response();
            if let Some(seconds) = retry {
                refused.headers_mut().insert("retry-after", seconds.into());
            }
            return refused;
        }
    };
    slot.keep_alive();
    let chunks = futures::stream::unfold((Some(slot), 0), |(slot, i)| async move {
        let slot = slot?;
        if i == 5 {
            let _ = slot.release().await;
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Some((
            Ok::<_, Infallible>(format!("chunk {i}\n")),
            (Some(slot), i + 1),
        ))
    });
    Body::from_stream(chunks).into_response()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let repo = Repository::open("gateway").await?;
    configure(&repo).await?;
    let limiter = RateLimiter::new(repo);
    let limited = Router::new().route("/v1/chat", post(chat)).layer(
        RateLimiterLayer::new(limiter.clone(), charge)
            .usage(usage)
            .in_flight(streams()),
    );
    let app = limited
        .route("/v1/stream", get(stream).with_state(limiter))
        .route("/metrics", get(move || async move { prometheus.render() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
