//! Internal to dynalimit, no stable API: services depend on `dynalimit`. The DynamoDB
//! transport of the acquire path: `UpdateItem`, the request of every acquire, sent without
//! the SDK's orchestrator.
//!
//! The SDK spends around 200 µs of client CPU on one `UpdateItem` (interceptor and config-bag
//! machinery, endpoint rules, header maps, per-request allocations). The acquire path sends one
//! request shape only, so [`FastPath`] sends it directly: the body is written into one buffer, the
//! request is signed with a signing key derived once per day, and it is handed to
//! the SDK client's own HTTP connector, so the client's HTTP client (proxy, private CA, mTLS,
//! FIPS TLS), its connect and read timeouts and its connection pool all apply.
//!
//! Nothing is guessed: the endpoint, signing region and service are read off a real request
//! the SDK client sends when the repository opens ([`EndpointCapture`]), so custom endpoints,
//! FIPS or dual-stack endpoints and DynamoDB Local all resolve exactly as the SDK resolves
//! them. Credentials come from the client's own credential provider, kept with the lifetimes
//! of the SDK's identity cache (credentials without an expiry are resolved again after 15
//! minutes); one request refreshes them five minutes before their end while the others keep
//! signing, resolutions are at least five seconds apart whatever they returned, a provider
//! failure is [`WireError::Unavailable`], and a
//! request refused for its credentials is signed once more with newly resolved ones. Retries
//! follow the client's retry configuration (attempts, exponential backoff with full jitter),
//! paid from the retry budget the caller hands over ([`retry::Budget`]), within its attempt and
//! operation timeouts, under the rules of [`retry`]: a request is sent again after a
//! refused connection or a 4xx refusal, never after an attempt that may have been applied
//! (unless the write says a second application is harmless). With stalled-stream protection
//! on, an answer whose body does not arrive within the grace period is treated as a body that
//! failed. A request refused for its signing time is signed again with the service's clock
//! (from its `Date` header), as the SDK corrects clock skew.
//!
//! A client carrying interceptors other than those the caller's [`Observer`] stands for, or
//! in the adaptive retry mode (whose client-side rate limiting the fast path does not
//! implement), keeps every request on the SDK, so nothing the user configured is bypassed;
//! [`Ineligible`] names the reason.
//!
//! The crate knows nothing of the table format: a caller hands it a request body, or the
//! parts of one ([`UpdateItem`]), and reads the answer's attributes ([`plain_attributes`],
//! [`read_attributes`]). What a failure means for the data plane (`RepositoryError`) is the
//! caller's to say.

mod credentials;
mod error;
mod json;
pub mod retry;
mod sigv4;
mod transport;

pub use error::WireError;
pub use json::{Fields, ObjectWriter, PlainAttributes, number_openings, plain_attributes};
pub use transport::{
    EndpointCapture, FastPath, Ineligible, MAX_RESPONSE_BYTES, Observer, UpdateItem, UpdateOutcome,
    Written, read_attributes,
};
