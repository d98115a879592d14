use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::get;
use dynalimit::Rejection;
use dynalimit::adaptive::AdaptiveLimiter;
use dynalimit::tower::{AdaptiveLimiterLayer, BoxError, OverloadClassifier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceBuilder;

/// Sends `GET path` over a fresh connection and returns the status code and body.
async fn get_status(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::task::yield_now().await;
    }
}

fn overloaded(err: BoxError) -> (StatusCode, String) {
    match err.downcast::<Rejection>() {
        Ok(rejected) => (StatusCode::SERVICE_UNAVAILABLE, rejected.to_string()),
        Err(other) => (StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// Serves `/slow` (finishes when the test adds a permit to the returned semaphore), `/fast`
/// and `/busy` (always 429) behind `layer` on 127.0.0.1, mapping a refused permit to 503.
async fn serve<C>(
    layer: AdaptiveLimiterLayer<C>,
) -> (
    std::net::SocketAddr,
    Arc<Semaphore>,
    tokio::task::JoinHandle<()>,
)
where
    C: OverloadClassifier<axum::response::Response> + Clone + Send + Sync + 'static,
{
    let release = Arc::new(Semaphore::new(0));
    let gate = Arc::clone(&release);
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let gate = Arc::clone(&gate);
                async move {
                    gate.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .route("/fast", get(|| async { "fast" }))
        .route("/busy", get(|| async { StatusCode::TOO_MANY_REQUESTS }))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(
                    |e: BoxError| async move { overloaded(e) },
                ))
                .layer(layer),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, release, server)
}

#[tokio::test]
async fn the_layer_limits_a_real_axum_server_and_answers_503_when_full() {
    let limiter = AdaptiveLimiter::builder()
        .limits(1, 2)
        .initial_limit(2)
        .build()
        .unwrap();
    let (addr, release, server) =
        serve(AdaptiveLimiterLayer::new(limiter.clone()).max_wait(Duration::ZERO)).await;

    let first = tokio::spawn(get_status(addr, "/slow"));
    let second = tokio::spawn(get_status(addr, "/slow"));
    until(|| limiter.inflight() == 2).await;

    let (status, body) = get_status(addr, "/fast").await;
    assert_eq!(status, 503);
    assert!(body.contains("limit 2"), "{body}");

    release.add_permits(2);
    assert_eq!(first.await.unwrap(), (200, "done".to_owned()));
    assert_eq!(second.await.unwrap(), (200, "done".to_owned()));
    until(|| limiter.inflight() == 0).await;
    assert_eq!(get_status(addr, "/fast").await, (200, "fast".to_owned()));
    assert_eq!(limiter.metrics().max_inflight, 2);
    server.abort();
}

#[tokio::test]
async fn queued_requests_are_served_when_a_permit_comes_back() {
    let limiter = AdaptiveLimiter::builder()
        .limits(1, 1)
        .initial_limit(1)
        .build()
        .unwrap();
    let (addr, release, server) = serve(AdaptiveLimiterLayer::new(limiter.clone())).await;

    let first = tokio::spawn(get_status(addr, "/slow"));
    until(|| limiter.inflight() == 1).await;
    let second = tokio::spawn(get_status(addr, "/slow"));
    until(|| limiter.queued() == 1).await;
    release.add_permits(2);
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(second.await.unwrap().0, 200);
    until(|| limiter.inflight() == 0).await;
    server.abort();
}

#[tokio::test]
async fn responses_classified_as_overload_shrink_the_limit() {
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(40)
        .build()
        .unwrap();
    let layer = AdaptiveLimiterLayer::new(limiter.clone())
        .overload_when(|r: &axum::response::Response| r.status() == StatusCode::TOO_MANY_REQUESTS);
    let (addr, _release, server) = serve(layer).await;
    assert_eq!(get_status(addr, "/fast").await.0, 200);
    assert_eq!(limiter.limit(), 40, "a success is a sample, not a change");
    assert_eq!(get_status(addr, "/busy").await.0, 429);
    until(|| limiter.inflight() == 0).await;
    assert_eq!(limiter.limit(), 36);
    server.abort();
}

/// A request's priority reaches the limiter: with a calibrated prioritizer shedding the low
/// bands, a batch request is refused for its priority at once while an interactive one
/// queues (and here times out).
#[tokio::test(start_paused = true)]
async fn a_request_waits_with_the_priority_the_layer_gives_it() {
    use dynalimit::Overload;
    use dynalimit::adaptive::{Level, Prioritizer, Priority};
    use dynalimit::time::TokioClock;
    use tower::{Layer, Service, ServiceExt};
    let prioritizer = Prioritizer::new();
    let limiter = AdaptiveLimiter::builder()
        .initial_limit(2)
        .prioritizer(&prioritizer)
        .seed(1)
        .clock(TokioClock::new(0))
        .build()
        .unwrap();
    let _held = (
        limiter.try_acquire().unwrap(),
        limiter.try_acquire().unwrap(),
    );
    let mut waiting = Vec::new();
    for level in [50u16, 150, 250, 350, 450] {
        let limiter = limiter.clone();
        waiting.push(tokio::spawn(async move {
            let _ = limiter
                .acquire_with_level(Level::new(level).unwrap(), None)
                .await;
        }));
    }
    // Bounded: five callers fit the queue of a limit of 2.
    for _ in 0..1000 {
        if limiter.queued() == 5 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(limiter.queued(), 5);
    assert!(prioritizer.calibrate() > Level::new(150).unwrap());
    let layer = AdaptiveLimiterLayer::new(limiter.clone())
        .max_wait(Duration::from_millis(1))
        .priority_by(|req: &http::Request<()>| {
            match req.headers().get("x-priority")?.to_str().ok()? {
                "batch" => Some(Priority::Low),
                "interactive" => Some(Priority::VeryHigh),
                _ => None,
            }
        });
    let mut service = layer.layer(tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, std::convert::Infallible>(())
    }));
    let overload_of = |err: BoxError| err.downcast::<Rejection>().unwrap().overload();
    let request = |priority: &str| {
        http::Request::builder()
            .header("x-priority", priority)
            .body(())
            .unwrap()
    };
    let batch = service.ready().await.unwrap().call(request("batch")).await;
    assert_eq!(overload_of(batch.unwrap_err()), Some(Overload::Priority));
    let interactive = service
        .ready()
        .await
        .unwrap()
        .call(request("interactive"))
        .await;
    assert_eq!(
        overload_of(interactive.unwrap_err()),
        Some(Overload::Timeout)
    );
    for t in waiting {
        t.abort();
    }
}
