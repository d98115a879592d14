//! The fast path: one signed `UpdateItem`, sent through the SDK client's own connector.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::auth::AuthSchemeId;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::identity::{ResolveIdentity, SharedIdentityResolver};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{GetIdentityResolver, RuntimeComponents};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::retry::RetryMode;
use bytes::Bytes;
use dynalimit_core::failure::{self, ErrorClass};
use dynalimit_core::{Clock, SystemClock};
use http_body_util::{BodyExt, Collected, LengthLimitError, Limited};

use crate::WireError;
use crate::credentials::{Decision, Lifetime, MIN_RESOLVE_INTERVAL_MS};
use crate::json::{self, ObjectWriter};
use crate::retry::{self, OnThrottle, Resend};
use crate::sigv4::{self, CONTENT_TYPE};
use dynalimit_format::item::Item;

const TARGET_UPDATE_ITEM: &str = "DynamoDB_20120810.UpdateItem";
const OPERATION: &str = "UpdateItem";
/// Error codes of a request whose signing time the service refused.
const SKEW_CODES: &[&str] = &[
    "RequestTimeTooSkewed",
    "RequestExpired",
    "RequestInTheFuture",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "AuthFailure",
];
/// A clock this far from the service's is corrected.
const SKEW_TOLERANCE_MS: i64 = 60_000;
/// The largest response body the fast path reads (4 MiB). An `UpdateItem` answer carries at
/// most one item (400 KB stored, a few times that as JSON at worst); a longer body is not a
/// DynamoDB answer, and reading stops at the limit instead of buffering whatever arrives.
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;
/// Error codes of a request refused for its credentials (unknown, rotated or expired key,
/// or a signature that does not match): the credentials are resolved again and the request
/// signed once more.
const CREDENTIAL_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignatureException",
    "ExpiredTokenException",
    "ExpiredToken",
];
/// How long the fast path waits for the credential provider (the SDK identity cache's
/// default load timeout).
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the SDK client sends DynamoDB requests, as seen on one of its real requests.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// The request URI (`https://dynamodb.eu-west-1.amazonaws.com/`).
    uri: String,
    /// The signing region of the credential scope.
    region: String,
    /// The signing service of the credential scope (`dynamodb`).
    service: String,
}

/// An SDK interceptor that records the endpoint of the requests it sees; add it to one
/// operation with `.customize().interceptor(capture.clone())`.
/// It also keeps the request's runtime components, whose identity resolver and cache give the
/// fast path the very credentials the SDK signs with.
#[derive(Debug, Clone, Default)]
pub struct EndpointCapture {
    seen: Arc<Mutex<Option<(Endpoint, RuntimeComponents)>>>,
}

impl EndpointCapture {
    /// The endpoint of the last request seen, if it was signed with SigV4.
    fn endpoint(&self) -> Option<Endpoint> {
        self.seen
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.0.clone()))
    }

    fn components(&self) -> Option<RuntimeComponents> {
        self.seen
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.1.clone()))
    }
}

/// Reads `Credential=AKID/day/region/service/aws4_request` out of a SigV4 authorization.
fn scope_of(authorization: &str) -> Option<(String, String)> {
    let rest = authorization.strip_prefix("AWS4-HMAC-SHA256 Credential=")?;
    let credential = rest.split(',').next()?;
    let parts: Vec<&str> = credential.split('/').collect();
    match parts.as_slice() {
        [_, _, region, service, "aws4_request"] => Some(((*region).into(), (*service).into())),
        _ => None,
    }
}

impl Intercept for EndpointCapture {
    fn name(&self) -> &'static str {
        "dynalimit::EndpointCapture"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let scope = request.headers().get("authorization").and_then(scope_of);
        if let (Ok(mut seen), Some((region, service))) = (self.seen.lock(), scope) {
            let endpoint = Endpoint {
                uri: request.uri().to_string(),
                region,
                service,
            };
            *seen = Some((endpoint, runtime_components.clone()));
        }
        Ok(())
    }
}

/// What an `UpdateItem` returns.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateOutcome {
    /// Written; the attributes asked for by `ReturnValues` (`None` for `NONE`).
    Updated(Option<Item>),
    /// The condition failed; the item before the attempt when `ALL_OLD` was asked for on
    /// failure and the item exists.
    ConditionFailed(Option<Item>),
}

/// What an `UpdateItem` sent by [`FastPath::update_item_body`] returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// Written; the bytes of the answer, unread.
    Updated(Bytes),
    /// The condition failed; the item before the attempt when `ALL_OLD` was asked for on
    /// failure and the item exists.
    ConditionFailed(Option<Item>),
}

/// The attributes of a successful `UpdateItem`'s answer (`None` when it carries none). An
/// answer that cannot be parsed still reports an applied write: its item is not known.
pub fn read_attributes(answer: &[u8]) -> Option<Item> {
    match serde_json::from_slice::<json::UpdateItemBody>(answer) {
        Ok(parsed) => parsed.attributes.map(|m| m.0),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "an applied UpdateItem's answer is unreadable; its item is not known"
            );
            None
        }
    }
}

/// One `UpdateItem` request.
#[derive(Debug, Clone, Copy)]
pub struct UpdateItem<'a> {
    /// The table.
    pub table: &'a str,
    /// The primary key.
    pub key: &'a Item,
    /// `UpdateExpression`.
    pub update_expression: Option<&'a str>,
    /// `ConditionExpression`.
    pub condition_expression: Option<&'a str>,
    /// `ExpressionAttributeNames` as (placeholder, attribute) pairs.
    pub names: &'a [(&'a str, &'a str)],
    /// `ExpressionAttributeValues` as (placeholder, value) pairs.
    pub values: &'a [(String, AttributeValue)],
    /// `ReturnValues = ALL_NEW` (otherwise `NONE`).
    pub return_all_new: bool,
    /// `ReturnValuesOnConditionCheckFailure = ALL_OLD`.
    pub return_old_on_failure: bool,
    /// Whether the request may be sent again after an attempt that may have been applied.
    pub resend: Resend,
}

impl UpdateItem<'_> {
    /// The request's JSON body.
    pub fn body(&self) -> Vec<u8> {
        let mut w = ObjectWriter::new();
        w.string("TableName", self.table).item("Key", self.key);
        if let Some(e) = self.update_expression {
            w.string("UpdateExpression", e);
        }
        if let Some(e) = self.condition_expression {
            w.string("ConditionExpression", e);
        }
        if !self.names.is_empty() {
            w.strings("ExpressionAttributeNames", self.names.iter().copied());
        }
        if !self.values.is_empty() {
            w.item(
                "ExpressionAttributeValues",
                self.values.iter().map(|(k, v)| (k, v)),
            );
        }
        if self.return_all_new {
            w.string("ReturnValues", "ALL_NEW");
        }
        if self.return_old_on_failure {
            w.string("ReturnValuesOnConditionCheckFailure", "ALL_OLD");
        }
        w.finish()
    }
}

/// Why the provider gave no credentials to sign with.
#[derive(Debug, Clone)]
enum NoCredentials {
    /// It failed, or did not answer in time: the service is unreachable for now.
    Failed(String),
    /// What it gave is not an access key.
    NotAnAccessKey,
}

impl NoCredentials {
    /// The provider's last credentials have expired and it may not be asked yet.
    #[cold]
    fn expired(wait_ms: i64) -> WireError {
        NoCredentials::Failed("the credentials the provider gave have expired".into())
            .error(Some(wait_ms))
    }

    /// The error of a request without credentials; `wait_ms`, when the provider is asked
    /// again only in that time.
    #[cold]
    fn error(&self, wait_ms: Option<i64>) -> WireError {
        let later = wait_ms.map_or_else(String::new, |ms| {
            format!(
                "; the provider is asked again in {ms} ms (at most once every \
                 {MIN_RESOLVE_INTERVAL_MS} ms)"
            )
        });
        match self {
            NoCredentials::Failed(why) => WireError::Unavailable {
                message: format!("no credentials: {why}{later}"),
            },
            NoCredentials::NotAnAccessKey => WireError::PermissionDenied {
                message: format!("no credentials: the identity is not an access key{later}"),
            },
        }
    }
}

#[derive(Debug)]
struct Signing {
    credentials: Credentials,
    key: sigv4::SigningKey,
    lifetime: Lifetime,
}

fn epoch_millis(t: std::time::SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The fast-path transport of one repository (see the module documentation).
pub struct FastPath {
    /// The SDK client's own HTTP connector (its proxy, TLS and connect/read timeouts).
    connector: SharedHttpConnector,
    uri: http::Uri,
    host: http::HeaderValue,
    region: String,
    service: String,
    components: RuntimeComponents,
    resolver: SharedIdentityResolver,
    signing: RwLock<Option<Arc<Signing>>>,
    refresh: tokio::sync::Mutex<()>,
    /// No resolution starts before this instant ([`MIN_RESOLVE_INTERVAL_MS`] after the last).
    next_resolve_ms: AtomicI64,
    /// No resolution for refused credentials starts before this instant.
    next_forced_ms: AtomicI64,
    /// Why the last resolution failed, while no credentials are held.
    last_failure: Mutex<Option<NoCredentials>>,
    retry: retry::RetryBackoff,
    max_attempts: u32,
    budget: Arc<retry::Budget>,
    attempt_timeout: Option<Duration>,
    operation_timeout: Option<Duration>,
    /// The stalled-stream grace period, when the client's protection covers downloads.
    stall_grace: Option<Duration>,
    observer: Arc<dyn Observer>,
    /// The service's clock minus ours, once a refused signature showed they differ.
    skew_ms: AtomicI64,
}

impl std::fmt::Debug for FastPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastPath")
            .field("uri", &self.uri)
            .field("region", &self.region)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// What the fast path reports of the requests it sends, in place of the client's
/// interceptors it bypasses.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// Whether the client's interceptor `name` does nothing but what this observer does: the
    /// fast path then carries the client's requests without it. Any other interceptor keeps
    /// them on the SDK.
    fn covers(&self, name: &str) -> bool;
    /// An attempt of `operation` goes on the wire.
    fn started(&self, operation: &'static str);
    /// That attempt ended, however (answer, failure, timeout or the caller dropping it).
    fn finished(&self);
}

/// Why the fast path is not used for a client (the SDK carries every request then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ineligible {
    /// The client has an interceptor the fast path would bypass (its name).
    Interceptor(String),
    /// The client has no SigV4 identity resolver.
    NoCredentials,
    /// No SigV4-signed request was seen, or its URI is not plain `http(s)://host[:port]/`.
    UnknownEndpoint,
    /// The client has no HTTP client to send with.
    NoHttpClient,
    /// The client's retry mode is adaptive (client-side rate limiting the fast path does not
    /// implement).
    AdaptiveRetry,
}

impl FastPath {
    /// A transport for the requests `client` sends, as `capture` saw one of them, reporting
    /// them to `observer` and paying its retries from `budget`.
    ///
    /// # Errors
    /// [`Ineligible`] when the fast path would change what the client does.
    pub fn for_client(
        client: &aws_sdk_dynamodb::Client,
        capture: &EndpointCapture,
        observer: Arc<dyn Observer>,
        budget: Arc<retry::Budget>,
    ) -> Result<FastPath, Ineligible> {
        let config = client.config();
        for interceptor in config.interceptors() {
            let name = interceptor.name();
            if !observer.covers(name) {
                return Err(Ineligible::Interceptor(name.to_string()));
            }
        }
        let endpoint = capture.endpoint().ok_or(Ineligible::UnknownEndpoint)?;
        let components = capture.components().ok_or(Ineligible::UnknownEndpoint)?;
        let resolver = components
            .identity_resolver(AuthSchemeId::new("sigv4"))
            .ok_or(Ineligible::NoCredentials)?;
        let uri: http::Uri = endpoint
            .uri
            .parse()
            .map_err(|_| Ineligible::UnknownEndpoint)?;
        if !matches!(uri.scheme_str(), Some("https" | "http")) {
            return Err(Ineligible::UnknownEndpoint);
        }
        if uri.path() != "/" || uri.query().is_some() {
            return Err(Ineligible::UnknownEndpoint);
        }
        let host = uri
            .authority()
            .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
            .ok_or(Ineligible::UnknownEndpoint)?;
        if config
            .retry_config()
            .is_some_and(|r| r.mode() == RetryMode::Adaptive)
        {
            return Err(Ineligible::AdaptiveRetry);
        }
        let timeouts = config.timeout_config();
        let mut settings = HttpConnectorSettings::builder();
        settings
            .set_connect_timeout(timeouts.and_then(|t| t.connect_timeout()))
            .set_read_timeout(timeouts.and_then(|t| t.read_timeout()));
        let connector = components
            .http_client()
            .ok_or(Ineligible::NoHttpClient)?
            .http_connector(&settings.build(), &components);
        let stall_grace = config
            .stalled_stream_protection()
            .filter(|p| p.is_enabled() && p.download_enabled())
            .map(|p| p.grace_period());
        Ok(FastPath {
            connector,
            uri,
            host,
            region: endpoint.region,
            service: endpoint.service,
            components,
            resolver,
            signing: RwLock::new(None),
            refresh: tokio::sync::Mutex::new(()),
            next_resolve_ms: AtomicI64::new(i64::MIN),
            next_forced_ms: AtomicI64::new(i64::MIN),
            last_failure: Mutex::new(None),
            retry: retry::RetryBackoff::of_client(config.retry_config()),
            max_attempts: retry::max_attempts(config.retry_config()),
            budget,
            attempt_timeout: timeouts.and_then(|t| t.operation_attempt_timeout()),
            operation_timeout: timeouts.and_then(|t| t.operation_timeout()),
            stall_grace,
            observer,
            skew_ms: AtomicI64::new(0),
        })
    }

    /// The endpoint requests go to.
    pub fn uri(&self) -> &http::Uri {
        &self.uri
    }

    /// Sends one `UpdateItem`.
    ///
    /// Sent again only while earlier attempts are known not to have been applied (see
    /// [`crate::retry`]). A 2xx answer whose body cannot be read or parsed is an applied
    /// write: [`UpdateOutcome::Updated`] without the item.
    ///
    /// # Errors
    /// [`WireError::OutcomeUnknown`] when an attempt may have been applied and its answer
    /// was lost (the request is not sent again unless it is [`Resend::Harmless`]); otherwise
    /// the service's refusal once the retries are spent ([`WireError::Refused`]; a
    /// transaction conflict is never retried here).
    pub async fn update_item(&self, request: &UpdateItem<'_>) -> Result<UpdateOutcome, WireError> {
        self.update_item_on_throttle(request, OnThrottle::Retry)
            .await
    }

    /// [`FastPath::update_item`], sending a throttled attempt again or not as `on_throttle`
    /// says.
    ///
    /// # Errors
    /// As [`FastPath::update_item`].
    pub async fn update_item_on_throttle(
        &self,
        request: &UpdateItem<'_>,
        on_throttle: OnThrottle,
    ) -> Result<UpdateOutcome, WireError> {
        Ok(
            match self
                .update_item_body(Bytes::from(request.body()), request.resend, on_throttle)
                .await?
            {
                Written::Updated(answer) => UpdateOutcome::Updated(read_attributes(&answer)),
                Written::ConditionFailed(old) => UpdateOutcome::ConditionFailed(old),
            },
        )
    }

    /// Sends one `UpdateItem` whose body is already written, as [`FastPath::update_item`]
    /// does, and hands back the bytes of a successful answer unread (an acquire reads its
    /// image straight from them). With [`OnThrottle::Return`] a throttled attempt is not
    /// sent again: its refusal is the answer.
    ///
    /// # Errors
    /// As [`FastPath::update_item`].
    pub async fn update_item_body(
        &self,
        body: Bytes,
        resend: Resend,
        on_throttle: OnThrottle,
    ) -> Result<Written, WireError> {
        match self
            .send(TARGET_UPDATE_ITEM, body, resend, on_throttle)
            .await?
        {
            Answer::Success(bytes) => Ok(Written::Updated(bytes)),
            Answer::Failure(_, error) if error.code() == "ConditionalCheckFailedException" => {
                Ok(Written::ConditionFailed(error.item.map(|m| m.0)))
            }
            Answer::Failure(status, error) => Err(refused(status, &error)),
        }
    }

    /// The credentials' clock: the SDK client's time source, as its identity cache reads it.
    fn credential_now_ms(&self) -> i64 {
        self.components
            .time_source()
            .map_or_else(|| SystemClock.epoch_millis(), |t| epoch_millis(t.now()))
    }

    fn current(&self) -> Option<Arc<Signing>> {
        self.signing.read().ok().and_then(|s| s.clone())
    }

    /// The signing state for a request at `stamp` (see the `credentials` module).
    async fn signing(&self, stamp: &sigv4::Stamp) -> Result<Arc<Signing>, WireError> {
        let now = self.credential_now_ms();
        let next = self.next_resolve_ms.load(Ordering::Relaxed);
        if let Some(current) = self.current() {
            match current.lifetime.decide(now, next) {
                Decision::Use => return Ok(self.for_day(current, stamp)),
                Decision::UseAndRefresh => {
                    // One request refreshes; the others sign with the still-valid credentials.
                    if let Ok(_one_refresh) = self.refresh.try_lock() {
                        let unchanged = self
                            .current()
                            .is_some_and(|latest| Arc::ptr_eq(&latest, &current));
                        if unchanged {
                            match self.resolve(stamp).await {
                                Ok(fresh) => return Ok(fresh),
                                Err(e) => tracing::warn!(
                                    error = %e,
                                    "refreshing the fast path's credentials failed; \
                                     signing with the current ones until they end"
                                ),
                            }
                        }
                    }
                    let latest = self.current().unwrap_or(current);
                    return Ok(self.for_day(latest, stamp));
                }
                Decision::Spent => return Err(NoCredentials::expired(next - now)),
                Decision::Wait => {}
            }
        }
        let _one_refresh = self.refresh.lock().await;
        let now = self.credential_now_ms();
        let next = self.next_resolve_ms.load(Ordering::Relaxed);
        match self.current().map(|s| (s.lifetime.decide(now, next), s)) {
            Some((Decision::Use | Decision::UseAndRefresh, current)) => {
                Ok(self.for_day(current, stamp))
            }
            Some((Decision::Spent, _)) => Err(NoCredentials::expired(next - now)),
            Some((Decision::Wait, _)) => self.resolve(stamp).await,
            None if now >= next => self.resolve(stamp).await,
            None => {
                let why = self.last_failure.lock().ok().and_then(|f| f.clone());
                Err(why
                    .unwrap_or(NoCredentials::Failed("the service refused them".into()))
                    .error(Some(next - now)))
            }
        }
    }

    /// `signing`, with the key of `stamp`'s day (derived once a day, then shared).
    fn for_day(&self, signing: Arc<Signing>, stamp: &sigv4::Stamp) -> Arc<Signing> {
        if signing.key.is_for_day(&stamp.day) {
            return signing;
        }
        let next = Arc::new(Signing {
            credentials: signing.credentials.clone(),
            key: self.derive(&signing.credentials, stamp),
            lifetime: signing.lifetime,
        });
        if let Ok(mut slot) = self.signing.write()
            && slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &signing))
        {
            *slot = Some(next.clone());
        }
        next
    }

    fn derive(&self, credentials: &Credentials, stamp: &sigv4::Stamp) -> sigv4::SigningKey {
        sigv4::SigningKey::derive(
            credentials.secret_access_key(),
            stamp,
            &self.region,
            &self.service,
        )
    }

    /// Resolves new credentials and makes them the signing state; the next resolution may
    /// start [`MIN_RESOLVE_INTERVAL_MS`] after this one ends, whatever it returned.
    async fn resolve(&self, stamp: &sigv4::Stamp) -> Result<Arc<Signing>, WireError> {
        let resolved = self.resolve_credentials().await;
        let now = self.credential_now_ms();
        self.next_resolve_ms.store(
            now.saturating_add(MIN_RESOLVE_INTERVAL_MS),
            Ordering::Relaxed,
        );
        let credentials = match resolved {
            Ok(credentials) => credentials,
            Err(why) => {
                let error = why.error(None);
                if let Ok(mut last) = self.last_failure.lock() {
                    *last = Some(why);
                }
                return Err(error);
            }
        };
        if let Ok(mut last) = self.last_failure.lock() {
            *last = None;
        }
        let expiry_ms = credentials.expiry().map(epoch_millis);
        let signing = Arc::new(Signing {
            key: self.derive(&credentials, stamp),
            credentials,
            lifetime: Lifetime::of(now, expiry_ms),
        });
        if let Ok(mut slot) = self.signing.write() {
            *slot = Some(signing.clone());
        }
        Ok(signing)
    }

    /// After the service refused `used`, forgets it (unless it was replaced already) so that
    /// the next request resolves credentials at once; false when a refusal did so less than
    /// [`MIN_RESOLVE_INTERVAL_MS`] ago (the refusal then stands).
    fn forget_refused(&self, used: &Arc<Signing>) -> bool {
        let now = self.credential_now_ms();
        let allowed = self.next_forced_ms.load(Ordering::Relaxed);
        if now < allowed
            || self
                .next_forced_ms
                .compare_exchange(
                    allowed,
                    now.saturating_add(MIN_RESOLVE_INTERVAL_MS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        if let Ok(mut slot) = self.signing.write()
            && slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, used))
        {
            *slot = None;
        }
        self.next_resolve_ms.store(i64::MIN, Ordering::Relaxed);
        true
    }

    /// The credentials of the client's own provider. A provider that fails or does not answer
    /// within [`CREDENTIALS_TIMEOUT`] leaves the service unreachable for now: the failure is
    /// [`WireError::Unavailable`], so the limiter's `on_unavailable` policy applies.
    async fn resolve_credentials(&self) -> Result<Credentials, NoCredentials> {
        let bag = ConfigBag::base();
        let identity = tokio::time::timeout(
            CREDENTIALS_TIMEOUT,
            self.resolver.resolve_identity(&self.components, &bag),
        )
        .await
        .map_err(|_| {
            NoCredentials::Failed(format!(
                "the provider gave none within {CREDENTIALS_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| NoCredentials::Failed(e.to_string()))?;
        identity
            .data::<Credentials>()
            .cloned()
            .ok_or(NoCredentials::NotAnAccessKey)
    }

    fn request(
        &self,
        target: &str,
        body: Bytes,
        signing: &Signing,
        stamp: sigv4::Stamp,
    ) -> HttpRequest {
        let credentials = &signing.credentials;
        let token = credentials.session_token();
        let authorization = signing.key.authorization(
            credentials.access_key_id(),
            token,
            &stamp.amz_date,
            &sigv4::Request {
                host: self.host.to_str().unwrap_or_default(),
                target,
                body: &body,
            },
        );
        let mut builder = http::Request::post(self.uri.clone())
            .header(http::header::HOST, self.host.clone())
            .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
            .header("x-amz-date", stamp.amz_date)
            .header("x-amz-target", target)
            .header(http::header::AUTHORIZATION, authorization);
        if let Some(token) = token {
            builder = builder.header("x-amz-security-token", token);
        }
        builder
            .body(SdkBody::from(body))
            .ok()
            .and_then(|r| HttpRequest::try_from(r).ok())
            .unwrap_or_else(|| HttpRequest::new(SdkBody::empty()))
    }

    /// Sends with retries within the client's operation timeout; returns the final answer
    /// (see [`crate::retry`] for what is sent again).
    async fn send(
        &self,
        target: &str,
        body: Bytes,
        resend: Resend,
        on_throttle: OnThrottle,
    ) -> Result<Answer, WireError> {
        let policy = (resend, on_throttle);
        let Some(limit) = self.operation_timeout else {
            return self
                .attempts(target, body, policy, &AtomicBool::new(false))
                .await;
        };
        let maybe_applied = AtomicBool::new(false);
        match tokio::time::timeout(limit, self.attempts(target, body, policy, &maybe_applied)).await
        {
            Ok(answer) => answer,
            Err(_) if maybe_applied.load(Ordering::Relaxed) => Err(WireError::OutcomeUnknown {
                message: format!(
                    "{}: no answer within the operation timeout {limit:?}",
                    self.uri
                ),
            }),
            Err(_) => Err(WireError::Unavailable {
                message: format!(
                    "{}: not sent within the operation timeout {limit:?}",
                    self.uri
                ),
            }),
        }
    }

    /// The attempts of [`FastPath::send`]; `maybe_applied` says, whenever the operation timeout
    /// cuts this short, whether an attempt may have been applied.
    async fn attempts(
        &self,
        target: &str,
        body: Bytes,
        (resend, on_throttle): (Resend, OnThrottle),
        maybe_applied: &AtomicBool,
    ) -> Result<Answer, WireError> {
        let mut attempt = 0;
        let mut paid = 0;
        let mut reauthenticated = false;
        // Whether an earlier attempt may have been applied (only a harmless write goes on).
        let mut unknown_before = false;
        if on_throttle == OnThrottle::Resume {
            // The first attempt was refused for throughput before this call: the first retry.
            if self.max_attempts <= 1 || !self.budget.pay(retry::THROTTLING_RETRY_COST) {
                return Err(WireError::Throttled {
                    message: "throttled, and no retry left to send it again".to_owned(),
                });
            }
            paid += retry::THROTTLING_RETRY_COST;
            attempt = 1;
            self.retry.pause(attempt).await;
        }
        loop {
            attempt += 1;
            let last = attempt >= self.max_attempts;
            let now = SystemClock.epoch_millis() + self.skew_ms.load(Ordering::Relaxed);
            let stamp = sigv4::Stamp::at(now);
            let signing = self.signing(&stamp).await?;
            self.observer.started(OPERATION);
            let _on_the_wire = Finished(self.observer.as_ref());
            let request = self.request(target, body.clone(), &signing, stamp);
            maybe_applied.store(true, Ordering::Relaxed);
            let sent = async {
                let response = self.connector.call(request).await.map_err(Failed::from)?;
                let status = http::StatusCode::from_u16(response.status().as_u16())
                    .unwrap_or(http::StatusCode::BAD_GATEWAY);
                let server = server_millis(response.headers().get("date"));
                let read = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect();
                let read = match self.stall_grace {
                    Some(grace) => tokio::time::timeout(grace, read).await.map_err(|_| {
                        Failed::Unread(status, format!("the answer stalled for {grace:?}"))
                    })?,
                    None => read.await,
                };
                match body_bytes(read.map(Collected::to_bytes)) {
                    Ok(bytes) => Ok((status, bytes, server)),
                    Err(why) => Err(Failed::Unread(status, why)),
                }
            };
            let result = match self.attempt_timeout {
                Some(limit) => tokio::time::timeout(limit, sent)
                    .await
                    .unwrap_or_else(|_| Err(Failed::Lost(format!("no answer within {limit:?}")))),
                None => sent.await,
            };
            // The answer, or why the attempt may have been applied without one.
            let reply = match result {
                Ok((status, bytes, server)) => Ok((answer(status, bytes), server)),
                // The request never left: sent again like a throttled one.
                Err(Failed::NotSent(message)) => {
                    maybe_applied.store(unknown_before, Ordering::Relaxed);
                    if last || !self.budget.pay(retry::RETRY_COST) {
                        return Err(WireError::Unavailable {
                            message: format!("{}: {message}", self.uri),
                        });
                    }
                    paid += retry::RETRY_COST;
                    self.retry.pause(attempt).await;
                    continue;
                }
                // A 2xx status: DynamoDB applied the write; only its item is unknown.
                Err(Failed::Unread(status, why)) if status.is_success() => {
                    tracing::warn!(%why, "an applied UpdateItem's answer is unreadable");
                    self.budget.succeeded(paid);
                    return Ok(Answer::Success(Bytes::new()));
                }
                // A 4xx status: refused, nothing applied.
                Err(Failed::Unread(status, why)) if status.is_client_error() => {
                    maybe_applied.store(unknown_before, Ordering::Relaxed);
                    return Err(WireError::Unavailable {
                        message: format!("{}: answer {status} unreadable: {why}", self.uri),
                    });
                }
                Err(Failed::Unread(status, why)) => {
                    Err(format!("answer {status} unreadable: {why}"))
                }
                Err(Failed::Lost(message)) => Err(message),
            };
            // A 5xx "may or may not have succeeded".
            let reply = match reply {
                Ok((Answer::Failure(status, error), _)) if status.is_server_error() => {
                    Err(format!(
                        "{status} {}: {}",
                        error.code(),
                        error.message.as_deref().unwrap_or_default()
                    ))
                }
                other => other,
            };
            let (answer, server) = match reply {
                Ok(answered) => answered,
                Err(message) => {
                    let harmless = !last && resend == Resend::Harmless;
                    if !harmless || !self.budget.pay(retry::RETRY_COST) {
                        return Err(WireError::OutcomeUnknown {
                            message: format!("{}: {message}", self.uri),
                        });
                    }
                    paid += retry::RETRY_COST;
                    unknown_before = true;
                    self.retry.pause(attempt).await;
                    continue;
                }
            };
            match answer {
                Answer::Success(_) => {
                    self.budget.succeeded(paid);
                    return Ok(answer);
                }
                answer if self.corrects_skew(&answer, server) => {
                    maybe_applied.store(unknown_before, Ordering::Relaxed);
                    if last {
                        return Ok(answer);
                    }
                    // Signed again at once with the corrected time.
                }
                // Refused for its credentials, not its time: new credentials, one more try (the
                // request was refused before anything was applied), unless a refusal had them
                // resolved less than the interval ago.
                answer
                    if !reauthenticated
                        && refuses_credentials(&answer)
                        && self.forget_refused(&signing) =>
                {
                    maybe_applied.store(unknown_before, Ordering::Relaxed);
                    reauthenticated = true;
                    tracing::warn!(
                        code = answer_code(&answer),
                        "the service refused the fast path's credentials; resolving them again"
                    );
                }
                answer
                    if !last
                        && retryable(&answer)
                        && (on_throttle.retries() || !throttled(&answer))
                        && self.budget.pay(retry::THROTTLING_RETRY_COST) =>
                {
                    maybe_applied.store(unknown_before, Ordering::Relaxed);
                    paid += retry::THROTTLING_RETRY_COST;
                    self.retry.pause(attempt).await;
                }
                answer => {
                    if unknown_before {
                        // The answer to a harmless resend; the first attempt's fate is part
                        // of it (its condition reports a landed first attempt).
                        maybe_applied.store(true, Ordering::Relaxed);
                    }
                    return Ok(answer);
                }
            }
        }
    }

    /// After a refusal of the request's time (a clock more than a minute away from the
    /// service's), adopts the difference to the service's `Date` for every later signature, as
    /// the SDK does; true when the correction changed.
    fn corrects_skew(&self, answer: &Answer, server: Option<i64>) -> bool {
        let (Answer::Failure(status, error), Some(server)) = (answer, server) else {
            return false;
        };
        if !status.is_client_error() || !SKEW_CODES.contains(&error.code()) {
            return false;
        }
        let skew = server - SystemClock.epoch_millis();
        let old = self.skew_ms.load(Ordering::Relaxed);
        if skew.abs() < SKEW_TOLERANCE_MS || (skew - old).abs() < SKEW_TOLERANCE_MS {
            return false;
        }
        self.skew_ms.store(skew, Ordering::Relaxed);
        tracing::warn!(
            skew_ms = skew,
            "the local clock is off; signing with the service's time"
        );
        true
    }
}

/// Why an attempt got no answer.
#[derive(Debug, PartialEq)]
enum Failed {
    /// The connection was never established: the request did not leave.
    NotSent(String),
    /// The request may have reached the service: the connection failed after it was
    /// written, or the attempt timed out.
    Lost(String),
    /// The status arrived, the body could not be read (failed, or longer than
    /// [`MAX_RESPONSE_BYTES`]).
    Unread(http::StatusCode, String),
}

impl From<ConnectorError> for Failed {
    fn from(e: ConnectorError) -> Self {
        if retry::never_connected(&e) {
            Failed::NotSent(e.to_string())
        } else {
            Failed::Lost(e.to_string())
        }
    }
}

/// The body read through [`Limited`], or why it could not be read.
fn body_bytes(read: Result<Bytes, BoxError>) -> Result<Bytes, String> {
    read.map_err(|e| {
        if e.downcast_ref::<LengthLimitError>().is_some() {
            format!("response body longer than {MAX_RESPONSE_BYTES} bytes")
        } else {
            e.to_string()
        }
    })
}

/// Reports the end of a counted request, however the attempt ends (answer, failure, timeout
/// or the caller dropping the future).
struct Finished<'a>(&'a dyn Observer);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// The service's `Date` header, in epoch milliseconds.
fn server_millis(date: Option<&str>) -> Option<i64> {
    let date = date?;
    let parsed =
        aws_smithy_types::DateTime::from_str(date, aws_smithy_types::date_time::Format::HttpDate)
            .ok()?;
    parsed.to_millis().ok()
}

/// One response: the body of a success, or the error of a failure, parsed once.
enum Answer {
    Success(Bytes),
    Failure(http::StatusCode, json::ErrorBody),
}

fn answer(status: http::StatusCode, bytes: Bytes) -> Answer {
    if status.is_success() {
        Answer::Success(bytes)
    } else {
        Answer::Failure(status, parse_error(status, &bytes))
    }
}

fn parse_error(status: http::StatusCode, bytes: &[u8]) -> json::ErrorBody {
    serde_json::from_slice(bytes).unwrap_or_else(|_| json::ErrorBody {
        kind: Some(if status.is_server_error() {
            "InternalServerError".to_string()
        } else {
            format!("HTTP{}", status.as_u16())
        }),
        message: Some(String::from_utf8_lossy(bytes).into_owned()),
        item: None,
    })
}

/// The service's refusal, once no retry is left.
fn refused(status: http::StatusCode, error: &json::ErrorBody) -> WireError {
    WireError::Refused {
        status: status.as_u16(),
        code: error.code().to_owned(),
        message: error.message.clone().unwrap_or_default(),
    }
}

/// What the service's error answer means (`dynalimit_core::failure`).
fn class(status: http::StatusCode, error: &json::ErrorBody) -> ErrorClass {
    failure::classify(Some(status.as_u16()), error.code())
}

/// Whether the service refused the request's credentials.
fn refuses_credentials(answer: &Answer) -> bool {
    matches!(answer, Answer::Failure(status, error)
        if status.is_client_error() && CREDENTIAL_CODES.contains(&error.code()))
}

fn answer_code(answer: &Answer) -> &str {
    match answer {
        Answer::Success(_) => "",
        Answer::Failure(_, error) => error.code(),
    }
}

/// Whether the service refused the request for throughput.
fn throttled(answer: &Answer) -> bool {
    matches!(answer, Answer::Failure(status, error)
        if class(*status, error) == ErrorClass::Throttled)
}

/// Throttling and server errors are retried; everything else is an answer.
fn retryable(answer: &Answer) -> bool {
    let Answer::Failure(status, error) = answer else {
        return false;
    };
    status.is_server_error()
        || matches!(
            class(*status, error),
            ErrorClass::Throttled | ErrorClass::Unavailable
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_read_off_an_authorization_header() {
        let header = "AWS4-HMAC-SHA256 Credential=AKID/20261122/eu-west-1/dynamodb/aws4_request, SignedHeaders=host, Signature=abc";
        assert_eq!(
            scope_of(header),
            Some(("eu-west-1".to_string(), "dynamodb".to_string()))
        );
        assert_eq!(
            scope_of("AWS4-ECDSA-P256-SHA256 Credential=AKID/x/dynamodb/aws4_request"),
            None
        );
        assert_eq!(
            scope_of("AWS4-HMAC-SHA256 Credential=AKID/20261122/dynamodb"),
            None
        );
    }

    #[test]
    fn throttling_and_server_errors_are_retried_and_the_rest_is_not() {
        let throttle = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow"}"#;
        assert!(retryable(&answer(
            http::StatusCode::BAD_REQUEST,
            Bytes::from_static(throttle)
        )));
        assert!(retryable(&answer(
            http::StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(b"<html>")
        )));
        let failed =
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#;
        assert!(!retryable(&answer(
            http::StatusCode::BAD_REQUEST,
            Bytes::from_static(failed)
        )));
        let validation =
            br#"{"__type":"com.amazon.coral.validate#ValidationException","message":"bad"}"#;
        assert!(!retryable(&answer(
            http::StatusCode::BAD_REQUEST,
            Bytes::from_static(validation)
        )));
        assert!(!retryable(&answer(
            http::StatusCode::OK,
            Bytes::from_static(b"{}")
        )));
    }

    #[test]
    fn a_response_body_is_read_up_to_the_limit_and_no_further() {
        let read = |len: usize| {
            let body = http_body_util::Full::new(Bytes::from(vec![b' '; len]));
            futures::executor::block_on(Limited::new(body, MAX_RESPONSE_BYTES).collect())
                .map(Collected::to_bytes)
        };
        assert_eq!(
            body_bytes(read(MAX_RESPONSE_BYTES)).map(|b| b.len()),
            Ok(MAX_RESPONSE_BYTES)
        );
        assert_eq!(
            body_bytes(read(MAX_RESPONSE_BYTES + 1)),
            Err(format!(
                "response body longer than {MAX_RESPONSE_BYTES} bytes"
            ))
        );
        assert_eq!(
            body_bytes(Err("reset by peer".into())),
            Err("reset by peer".to_string())
        );
    }

    #[test]
    fn error_answers_are_classified() {
        let conflict = parse_error(
            http::StatusCode::BAD_REQUEST,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"busy"}"#,
        );
        assert_eq!(
            class(http::StatusCode::BAD_REQUEST, &conflict),
            ErrorClass::Conflict
        );
        assert_eq!(
            refused(http::StatusCode::BAD_REQUEST, &conflict),
            WireError::Refused {
                status: 400,
                code: "TransactionConflictException".into(),
                message: "busy".into(),
            }
        );
        let missing = parse_error(
            http::StatusCode::BAD_REQUEST,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
        );
        assert_eq!(
            class(http::StatusCode::BAD_REQUEST, &missing),
            ErrorClass::NotFound
        );
        let gateway = parse_error(http::StatusCode::BAD_GATEWAY, b"upstream");
        assert_eq!(
            class(http::StatusCode::BAD_GATEWAY, &gateway),
            ErrorClass::Unavailable
        );
    }

    #[test]
    fn a_request_body_has_only_the_fields_given() {
        let key: Item = [("PK".to_string(), AttributeValue::S("a".into()))].into();
        let values = [(":v0".to_string(), AttributeValue::N("1".into()))];
        let request = UpdateItem {
            table: "t",
            key: &key,
            update_expression: Some("ADD #a0 :v0"),
            condition_expression: None,
            names: &[("#a0", "n")],
            values: &values,
            return_all_new: true,
            return_old_on_failure: false,
            resend: Resend::Never,
        };
        let body: serde_json::Value = serde_json::from_slice(&request.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "TableName": "t",
                "Key": {"PK": {"S": "a"}},
                "UpdateExpression": "ADD #a0 :v0",
                "ExpressionAttributeNames": {"#a0": "n"},
                "ExpressionAttributeValues": {":v0": {"N": "1"}},
                "ReturnValues": "ALL_NEW"
            })
        );
    }
}
