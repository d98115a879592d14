//! The HTTP client of the kit's clients on the memory backend: requests to the store's
//! endpoint are answered by the store in the process; requests to any other endpoint (a fault
//! proxy a test put in front, which forwards to the store) go over the network.

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use dynalimit_repository::memory::{ENDPOINT, Store};

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
