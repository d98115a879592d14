//! The HTTP client of the kit's clients on the memory backend: requests to the store's
//! endpoint are answered by the store in the process; requests to any other endpoint (a fault
//! proxy a test put in front, which forwards to the store) go over the network.

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use dynalimit_memory::{ENDPOINT, Store};

/// Routes each request to the store or to the network by its endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    store: Store,
    network: SharedHttpClient,
}

impl Routed {
    pub(crate) fn new(store: &Store, network: SharedHttpClient) -> Routed {
        Routed {
            store: store.clone(),
            network,
        }
    }
}

#[derive(Debug)]
struct RoutedConnector {
    store: SharedHttpConnector,
    network: SharedHttpConnector,
}

impl HttpConnector for RoutedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        if request.uri().starts_with(ENDPOINT) {
            self.store.call(request)
        } else {
            self.network.call(request)
        }
    }
}

impl HttpClient for Routed {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(RoutedConnector {
            store: self.store.http_connector(settings, components),
            network: self.network.http_connector(settings, components),
        })
    }
}

/// Serves `store` over HTTP on a free loopback port, for a process of its own (the CLI) to
/// reach: every request's `X-Amz-Target` and body are answered by [`Store::serve`]. Returns
/// the endpoint URL; the server stops with the runtime.
///
/// # Panics
/// When no loopback port can be bound.
pub async fn serve(store: &Store) -> String {
    use axum::body::{Body, to_bytes};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("the bound address");
    let store = store.clone();
    let app = axum::Router::new().fallback(move |request: http::Request<Body>| {
        let store = store.clone();
        async move {
            let target = request
                .headers()
                .get("x-amz-target")
                .and_then(|t| t.to_str().ok())
                .map(str::to_owned);
            let body = to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap_or_default();
            store.serve(target.as_deref(), &body).map(Body::from)
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}
