//! The skeleton of a proxy in front of an emulator: a loopback port serving every request
//! through one handler, and the HTTP client that forwards them. The throttling proxy
//! ([`crate::throttle`]) and the test kit's fault proxy are built on it.

use std::future::Future;
use std::net::SocketAddr;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The client a proxy forwards requests with (plain HTTP, to a local emulator).
pub type Upstream = Client<HttpConnector, Full<Bytes>>;

/// A new [`Upstream`] client.
pub fn upstream() -> Upstream {
    Client::builder(TokioExecutor::new()).build_http()
}

/// The DynamoDB operation a request names in its `X-Amz-Target` header (`UpdateItem` of
/// `DynamoDB_20120810.UpdateItem`).
pub fn operation(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-amz-target")
        .and_then(|t| t.to_str().ok())
        .and_then(|t| t.rsplit('.').next())
}

/// A proxy serving on a loopback port; the server stops when this is dropped, unless it was
/// detached ([`Served::detach`]).
#[derive(Debug)]
pub struct Served {
    addr: SocketAddr,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// Binds a free loopback port and answers every request with `handle`, on a task of the
    /// current tokio runtime.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start<H, F>(handle: H) -> std::io::Result<Served>
    where
        H: Fn(Request<Body>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(move |request: Request<Body>| handle(request));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Served {
            addr,
            server: Some(server),
        })
    }

    /// The address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Lets the server run until its runtime stops; its address.
    pub fn detach(mut self) -> SocketAddr {
        self.server = None;
        self.addr
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operation_is_the_target_s_last_segment() {
        let mut headers = HeaderMap::new();
        assert_eq!(operation(&headers), None);
        headers.insert(
            "x-amz-target",
            http::HeaderValue::from_static("DynamoDB_20120810.UpdateItem"),
        );
        assert_eq!(operation(&headers), Some("UpdateItem"));
    }
}
