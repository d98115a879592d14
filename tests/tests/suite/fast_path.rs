//! The fast path (`dynalimit_repository::wire`): chosen when nothing would be bypassed, writing
//! exactly what the SDK path writes, and handling the service's errors (through a
//! fault-injecting proxy for throttling, conflicts, denials and server errors).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_async::time::TimeSource;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_types::retry::RetryConfig;
use dynalimit::{Error, Limit, OnUnavailable, RateLimiter};
use dynalimit_core::{Clock, ManualClock, SystemClock};
use dynalimit_format::item::{Item, get_i64, get_s};
use dynalimit_repository::MAX_RESPONSE_BYTES;
use dynalimit_repository::NewEntity;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::bucket::CONFLICT_ATTEMPTS;
use dynalimit_repository::{Repository, RepositoryError};
use dynalimit_tests::TestTable;
use dynalimit_tests::fault::{FaultProxy, Lost};

const NS: &str = "fast";

fn rpm(n: i64) -> Limit {
    Limit::per_minute("rpm", n)
}

fn tpm(n: i64) -> Limit {
    Limit::per_minute("tpm", n)
}

/// The SDK client's time source, moved forward by the test (the identity cache and the fast
/// path's credential lifetimes read it).
#[derive(Debug, Clone, Default)]
struct Shifted(Arc<std::sync::atomic::AtomicU64>);

impl Shifted {
    fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap();
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl TimeSource for Shifted {
    fn now(&self) -> SystemTime {
        let now = u64::try_from(SystemClock.epoch_millis()).unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(now + self.0.load(Ordering::SeqCst))
    }
}

/// A client for `url` retrying twice at most, with a millisecond backoff, and with
/// `credentials` (and `time`) when given.
async fn client_for(
    url: &str,
    counter: &RequestCounter,
    credentials: Option<KeyRing>,
    time: Option<impl TimeSource + 'static>,
) -> Client {
    let base = dynalimit_tests::client_with(Some(counter.clone())).await;
    let mut config = base.config().to_builder().endpoint_url(url).retry_config(
        RetryConfig::standard()
            .with_max_attempts(2)
            .with_initial_backoff(Duration::from_millis(1)),
    );
    if let Some(credentials) = credentials {
        config = config.credentials_provider(credentials);
    }
    if let Some(time) = time {
        config = config.time_source(time);
    }
    Client::from_conf(config.build())
}

/// The SDK client's time source read off a [`ManualClock`] (the identity cache and the fast
/// path's credential lifetimes read it; only the test moves it).
#[derive(Debug, Clone)]
struct Manual(ManualClock);

impl TimeSource for Manual {
    fn now(&self) -> SystemTime {
        let ms = u64::try_from(self.0.epoch_millis()).unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }
}

/// A credential provider whose access key the test rotates, or which the test breaks.
#[derive(Debug, Clone)]
struct KeyRing {
    key: Arc<Mutex<String>>,
    failing: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    /// Each resolution takes this long (milliseconds).
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// The expiry of the credentials handed out (none: static keys).
    expiry: Arc<Mutex<Option<SystemTime>>>,
}

impl KeyRing {
    fn new(key: &str) -> KeyRing {
        KeyRing {
            key: Arc::new(Mutex::new(key.to_string())),
            failing: Arc::new(AtomicBool::new(false)),
            calls: Arc::new(AtomicUsize::new(0)),
            delay_ms: Arc::default(),
            expiry: Arc::default(),
        }
    }

    fn rotate(&self, key: &str) {
        *self.key.lock().unwrap() = key.to_string();
    }
}

impl ProvideCredentials for KeyRing {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return future::ProvideCredentials::ready(Err(CredentialsError::provider_error(
                "the credential service is down",
            )));
        }
        let key = self.key.lock().unwrap().clone();
        let expiry = *self.expiry.lock().unwrap();
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        future::ProvideCredentials::new(async move {
            tokio::time::sleep(delay).await;
            Ok(Credentials::new(key, "secret", None, expiry, "keyring"))
        })
    }
}

/// The state item of `entity`'s only bucket, by scan.
async fn bucket_item(table: &TestTable, ns: &str, entity: &str) -> Item {
    let prefix = format!("{ns}/BUCKET#{entity}#");
    let mut found: Vec<Item> = table
        .scan_all()
        .await
        .into_iter()
        .filter(|i| get_s(i, "PK").is_some_and(|pk| pk.starts_with(&prefix)))
        .filter(|i| get_s(i, "SK") == Some("#STATE"))
        .collect();
    assert_eq!(found.len(), 1, "one bucket of {entity}");
    found.remove(0)
}

/// A table, a fault proxy in front of it, and a repository and limiter whose client goes
/// through the proxy.
pub(crate) struct Rig {
    pub(crate) table: TestTable,
    pub(crate) proxy: FaultProxy,
    pub(crate) repo: Repository,
    pub(crate) limiter: RateLimiter,
    pub(crate) counter: RequestCounter,
}

async fn rig() -> Rig {
    rig_with(None, None::<Shifted>).await
}

async fn rig_with(credentials: Option<KeyRing>, time: Option<impl TimeSource + 'static>) -> Rig {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let counter = RequestCounter::default();
    let client = client_for(&proxy.url(), &counter, credentials, time).await;
    let r = rig_on(table, proxy, counter, client, true).await;
    let wire = r.repo.fast_path().expect("the fast path is on by default");
    assert_eq!(wire.uri().to_string(), format!("{}/", r.proxy.url()));
    r
}

/// A rig whose client is the test kit's, through a new proxy, retrying up to 3 times with a
/// millisecond backoff, and changed by `edit`; `fast` chooses the transport of bucket writes.
pub(crate) async fn rig_edited(
    fast: bool,
    edit: impl FnOnce(aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::config::Builder,
) -> Rig {
    let table = dynalimit_tests::table().await;
    let proxy = FaultProxy::start().await;
    let counter = RequestCounter::default();
    let base = dynalimit_tests::client_with(Some(counter.clone())).await;
    let config = base
        .config()
        .to_builder()
        .endpoint_url(proxy.url())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(1)),
        );
    let client = Client::from_conf(edit(config).build());
    rig_on(table, proxy, counter, client, fast).await
}

/// Namespace [`NS`] of `table` opened with `client` (which goes through `proxy` and counts
/// in `counter`), the fast path on or off, with system defaults of 100 rpm and 10 000 tpm.
pub(crate) async fn rig_on(
    table: TestTable,
    proxy: FaultProxy,
    counter: RequestCounter,
    client: Client,
    fast: bool,
) -> Rig {
    let repo = Repository::builder()
        .client(client)
        .request_counter(counter.clone())
        .fast_path(fast)
        .stack(table.name().to_owned())
        .namespace(NS)
        .open()
        .await
        .expect("open through the proxy");
    assert_eq!(repo.fast_path().is_some(), fast);
    repo.set_system_defaults(&[rpm(100), tpm(10_000)], None)
        .await
        .expect("defaults");
    let limiter = RateLimiter::new(repo.clone());
    Rig {
        table,
        proxy,
        repo,
        limiter,
        counter,
    }
}

impl Rig {
    /// One acquire of one request, committed.
    pub(crate) async fn spend(&self, entity: &str) {
        self.limiter
            .acquire(entity, "gpt-4", [("rpm", 1)])
            .await
            .expect("admitted")
            .commit()
            .await
            .expect("commit");
    }

    /// One warm-up acquire so the bucket exists; counts reset afterwards.
    pub(crate) async fn warm(&self, entity: &str) {
        self.spend(entity).await;
        self.counter.reset();
    }

    /// An acquire under `on_unavailable = block`, which must fail as unavailable; its message.
    async fn refused_as_unavailable(&self, entity: &str) -> String {
        let refused = self
            .limiter
            .acquire(entity, "gpt-4", [("rpm", 1)])
            .on_unavailable(OnUnavailable::Block)
            .await;
        match refused {
            Err(Error::Unavailable { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    pub(crate) async fn bucket(&self, entity: &str) -> Item {
        bucket_item(&self.table, self.repo.namespace_id(), entity).await
    }

    /// One acquire of `entity`, committed, the answer to the first `UpdateItem` whose body
    /// holds `needle` lost after it landed: the bodies of every `UpdateItem` sent.
    pub(crate) async fn spend_losing(&self, entity: &str, needle: &str) -> Vec<String> {
        self.proxy
            .lose_after_applying("UpdateItem", Some(needle), Lost::Answer500, 1);
        self.proxy.clear_requests();
        self.spend(entity).await;
        self.proxy
            .requests()
            .iter()
            .filter(|q| q.operation == "UpdateItem")
            .map(|q| q.body.to_string())
            .collect()
    }

    /// Sets one number attribute of `item`, as another writer would (straight to the table).
    pub(crate) async fn raw_set(&self, item: &Item, attribute: &str, value: i64) {
        self.table
            .client()
            .update_item()
            .table_name(self.table.name())
            .key("PK", item["PK"].clone())
            .key("SK", item["SK"].clone())
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attribute)
            .expression_attribute_values(
                ":v",
                aws_sdk_dynamodb::types::AttributeValue::N(value.to_string()),
            )
            .send()
            .await
            .expect("the raw write");
    }
}

#[tokio::test]
async fn a_warm_acquire_is_one_fast_path_update_item() {
    let r = rig().await;
    r.warm("a").await;
    let before = r.proxy.seen().len();
    r.spend("a").await;
    assert_eq!(r.counter.count("UpdateItem"), 1);
    assert_eq!(r.counter.total(), 1);
    assert_eq!(r.proxy.seen()[before..], ["UpdateItem".to_string()]);
}

#[tokio::test]
async fn throttled_update_items_are_retried_within_the_clients_retry_budget() {
    let r = rig().await;
    r.warm("a").await;
    let tc_before = get_i64(&r.bucket("a").await, "b_rpm_tc").unwrap();
    r.proxy.fail_next("UpdateItem", "ThrottlingException", 1);
    r.limiter
        .acquire("a", "gpt-4", [("rpm", 1)])
        .await
        .expect("admitted after one retry")
        .commit()
        .await
        .unwrap();
    assert_eq!(r.proxy.pending(), 0);
    assert_eq!(
        r.counter.count("UpdateItem"),
        2,
        "{:?}",
        r.counter.snapshot()
    );
    let tc_after = get_i64(&r.bucket("a").await, "b_rpm_tc").unwrap();
    assert_eq!(tc_after - tc_before, 1000, "debited exactly once");
}

#[tokio::test]
async fn exhausted_retries_are_unavailable_and_write_nothing() {
    let r = rig().await;
    r.warm("a").await;
    let before = r.bucket("a").await;
    r.proxy
        .fail_next("UpdateItem", "ProvisionedThroughputExceededException", 2);
    r.refused_as_unavailable("a").await;
    assert_eq!(
        r.counter.count("UpdateItem"),
        2,
        "max_attempts of the client"
    );
    let after = r.bucket("a").await;
    assert_eq!(get_i64(&after, "b_rpm_tc"), get_i64(&before, "b_rpm_tc"));
    assert_eq!(get_i64(&after, "b_rpm_tk"), get_i64(&before, "b_rpm_tk"));
}

/// A 5xx "may or may not have succeeded": the consume is not sent again, and the acquire is
/// unavailable (here the proxy answered without forwarding, so nothing was debited).
#[tokio::test]
async fn a_server_error_is_an_unknown_outcome_and_not_sent_again() {
    let r = rig().await;
    r.warm("a").await;
    let before = get_i64(&r.bucket("a").await, "b_rpm_tc");
    r.proxy.fail_next_with(
        "UpdateItem",
        "InternalServerError",
        http::StatusCode::INTERNAL_SERVER_ERROR,
        1,
    );
    let message = r.refused_as_unavailable("a").await;
    assert!(
        message.contains("may or may not have been applied"),
        "{message}"
    );
    assert_eq!(r.counter.count("UpdateItem"), 1);
    assert_eq!(get_i64(&r.bucket("a").await, "b_rpm_tc"), before);
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_by_the_store() {
    let r = rig().await;
    r.warm("a").await;
    r.proxy
        .fail_next("UpdateItem", "TransactionConflictException", 1);
    let lease = r.limiter.acquire("a", "gpt-4", [("rpm", 1)]).await;
    assert!(lease.is_ok(), "{lease:?}");
    assert_eq!(r.proxy.pending(), 0);
    assert_eq!(r.counter.count("UpdateItem"), 2);
}

/// `20261122T071502Z` to epoch seconds.
fn amz_date_secs(stamp: &str) -> i64 {
    let parsed = aws_smithy_types::DateTime::from_str(
        &format!(
            "{}-{}-{}T{}:{}:{}Z",
            &stamp[0..4],
            &stamp[4..6],
            &stamp[6..8],
            &stamp[9..11],
            &stamp[11..13],
            &stamp[13..15]
        ),
        aws_smithy_types::date_time::Format::DateTime,
    )
    .expect("x-amz-date");
    parsed.secs()
}

#[tokio::test]
async fn a_signature_refused_for_its_time_is_signed_again_with_the_services_clock() {
    let r = rig().await;
    r.warm("a").await;
    let skew_ms = 20 * 60 * 1000;
    r.proxy
        .fail_next_dated("UpdateItem", "InvalidSignatureException", 1, skew_ms);
    let first = r.proxy.dates().len();
    let lease = r.limiter.acquire("a", "gpt-4", [("rpm", 1)]).await;
    assert!(lease.is_ok(), "{lease:?}");
    let dates = r.proxy.dates()[first..].to_vec();
    assert_eq!(
        dates.len(),
        2,
        "the refused request and its re-signed copy: {dates:?}"
    );
    let (refused, resigned) = (amz_date_secs(&dates[0]), amz_date_secs(&dates[1]));
    let shift = resigned - refused;
    assert!(
        (skew_ms / 1000 - 5..=skew_ms / 1000 + 5).contains(&shift),
        "re-signed {shift} s later, expected about {} s",
        skew_ms / 1000
    );
    // Later requests keep the correction.
    r.spend("a").await;
    let later = amz_date_secs(r.proxy.dates().last().unwrap());
    assert!(later - refused >= skew_ms / 1000 - 5);
}

#[tokio::test]
async fn denied_access_is_a_typed_permission_error_and_not_retried() {
    let r = rig().await;
    r.warm("a").await;
    r.proxy.fail_next("UpdateItem", "AccessDeniedException", 1);
    let refused = r.limiter.acquire("a", "gpt-4", [("rpm", 1)]).await;
    assert!(
        matches!(refused, Err(Error::PermissionDenied(_))),
        "{refused:?}"
    );
    assert_eq!(r.counter.count("UpdateItem"), 1);
}

#[tokio::test]
async fn after_a_key_rotation_the_refused_old_key_is_replaced_at_the_next_acquire() {
    let keys = KeyRing::new("AKIDOLD");
    let r = rig_with(Some(keys.clone()), None::<Shifted>).await;
    r.warm("a").await;
    let last_key = |r: &Rig| r.proxy.requests().last().unwrap().signed_by.0.clone();
    assert_eq!(last_key(&r), "AKIDOLD");
    // The key is rotated: the provider hands out the new one and the service refuses the old
    // one, while the fast path still holds the old one (static keys have no expiry).
    keys.rotate("AKIDNEW");
    r.proxy.refuse_key("AKIDOLD");
    let before = r.proxy.requests().len();
    for _ in 0..3 {
        r.spend("a").await;
    }
    let keys_used: Vec<String> = r.proxy.requests()[before..]
        .iter()
        .filter(|q| q.operation == "UpdateItem")
        .map(|q| q.signed_by.0.clone())
        .collect();
    assert_eq!(
        keys_used,
        ["AKIDOLD", "AKIDNEW", "AKIDNEW", "AKIDNEW"],
        "one refused request, then the new key"
    );
    assert_eq!(get_i64(&r.bucket("a").await, "b_rpm_tc"), Some(4000));
}

#[tokio::test]
async fn a_static_key_is_resolved_again_after_the_sdks_fifteen_minutes() {
    let keys = KeyRing::new("AKIDFIRST");
    let time = Shifted::default();
    let r = rig_with(Some(keys.clone()), Some(time.clone())).await;
    r.warm("a").await;
    let last_key = |r: &Rig| r.proxy.requests().last().unwrap().signed_by.0.clone();
    assert_eq!(last_key(&r), "AKIDFIRST");
    keys.rotate("AKIDSECOND");
    time.advance(Duration::from_secs(14 * 60));
    r.spend("a").await;
    assert_eq!(last_key(&r), "AKIDFIRST", "still within the 15 minutes");
    time.advance(Duration::from_secs(61));
    r.spend("a").await;
    assert_eq!(
        last_key(&r),
        "AKIDSECOND",
        "resolved again after 15 minutes"
    );
}

#[tokio::test]
async fn one_request_refreshes_the_credentials_while_the_others_sign_with_the_current_ones() {
    let keys = KeyRing::new("AKIDEARLY");
    let time = Shifted::default();
    let r = rig_with(Some(keys.clone()), Some(time.clone())).await;
    r.warm("a").await;
    // Into the refresh window (the static key's 15 minutes are over, its 5 more are not):
    // the provider takes a second, and the acquires meanwhile go on with the current key.
    keys.rotate("AKIDLATE");
    keys.delay_ms.store(1_000, Ordering::SeqCst);
    time.advance(Duration::from_secs(16 * 60));
    let calls = keys.calls.load(Ordering::SeqCst);
    let before = r.proxy.requests().len();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let limiter = r.limiter.clone();
        tasks.spawn(async move {
            limiter
                .acquire("a", "gpt-4", [("rpm", 1)])
                .await
                .expect("admitted")
                .commit()
                .await
                .expect("commit");
        });
    }
    tasks.join_all().await;
    assert_eq!(
        keys.calls.load(Ordering::SeqCst) - calls,
        1,
        "one refresh for all requests"
    );
    let signed: Vec<String> = r.proxy.requests()[before..]
        .iter()
        .map(|q| q.signed_by.0.clone())
        .collect();
    // The refreshing request signs with the new key once its second is over; the others did
    // not wait for it.
    assert!(signed.contains(&"AKIDEARLY".to_string()), "{signed:?}");
    assert_eq!(signed.last().map(String::as_str), Some("AKIDLATE"));
}

#[tokio::test]
async fn a_key_refused_again_after_the_new_resolution_is_reported_not_looped() {
    let keys = KeyRing::new("AKIDONLY");
    let r = rig_with(Some(keys.clone()), None::<Shifted>).await;
    r.warm("a").await;
    r.proxy.refuse_key("AKIDONLY");
    let before = r.proxy.requests().len();
    let refused = r.limiter.acquire("a", "gpt-4", [("rpm", 1)]).await;
    assert!(
        matches!(refused, Err(Error::PermissionDenied(_))),
        "{refused:?}"
    );
    assert_eq!(
        r.proxy.requests().len() - before,
        2,
        "the refused request and one retry with credentials resolved again"
    );
}

#[tokio::test]
async fn a_failing_credential_provider_is_unavailable_and_admitted_degraded_under_allow() {
    let keys = KeyRing::new("AKIDDOWN");
    let clock = ManualClock::new(SystemClock.epoch_millis());
    let r = rig_with(Some(keys.clone()), Some(Manual(clock.clone()))).await;
    keys.failing.store(true, Ordering::SeqCst);
    let before = r.proxy.requests().len();
    let calls = keys.calls.load(Ordering::SeqCst);
    let lease = r
        .limiter
        .acquire("a", "gpt-4", [("rpm", 1)])
        .on_unavailable(OnUnavailable::Allow)
        .await
        .expect("admitted degraded while the provider is down");
    assert!(lease.is_degraded());
    // Within the interval the provider is not asked again: the acquires fail at once.
    for _ in 0..10 {
        let message = r.refused_as_unavailable("a").await;
        assert!(message.contains("no credentials"), "{message}");
        assert!(message.contains("asked again in"), "{message}");
    }
    assert_eq!(
        keys.calls.load(Ordering::SeqCst) - calls,
        1,
        "one resolution"
    );
    assert!(
        r.proxy.requests()[before..]
            .iter()
            .all(|q| q.operation != "UpdateItem"),
        "nothing was sent unsigned"
    );
    // The provider recovers: so does the fast path, once the interval is over.
    keys.failing.store(false, Ordering::SeqCst);
    clock.advance(Duration::from_secs(5));
    r.spend("a").await;
    assert_eq!(r.proxy.requests().last().unwrap().signed_by.0, "AKIDDOWN");
    assert_eq!(keys.calls.load(Ordering::SeqCst) - calls, 2);
}

#[tokio::test]
async fn credentials_handed_out_short_lived_are_resolved_once_per_interval() {
    // Every resolution gives credentials with four minutes left: inside the five-minute
    // refresh window from the start.
    let keys = KeyRing::new("AKIDSHORT");
    let clock = ManualClock::new(SystemClock.epoch_millis());
    let expiry = SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(clock.epoch_millis()).unwrap())
        + Duration::from_secs(4 * 60);
    *keys.expiry.lock().unwrap() = Some(expiry);
    let r = rig_with(Some(keys.clone()), Some(Manual(clock.clone()))).await;
    let spend = || async {
        r.limiter
            .acquire("a", "gpt-4", [("rpm", 1)])
            .limits([rpm(100_000)])
            .await
            .expect("admitted")
            .commit()
            .await
            .expect("commit");
    };
    spend().await;
    let calls = keys.calls.load(Ordering::SeqCst);
    let before = r.proxy.requests().len();
    // 400 acquires, 100 ms apart: 40 seconds.
    for _ in 0..400 {
        clock.advance(Duration::from_millis(100));
        spend().await;
    }
    let resolutions = keys.calls.load(Ordering::SeqCst) - calls;
    assert!(
        (7..=9).contains(&resolutions),
        "one resolution per five seconds, not one per acquire: {resolutions}"
    );
    assert!(
        r.proxy.requests()[before..]
            .iter()
            .all(|q| q.signed_by.0 == "AKIDSHORT"),
        "every acquire signed"
    );
}

#[tokio::test]
async fn a_rejection_reads_the_old_item_returned_with_the_failed_condition() {
    let r = rig().await;
    r.warm("a").await;
    // 99 tokens left of 100; asking 100 fails the speculative condition, and the refusal
    // comes from the image DynamoDB returned with the failure.
    let refused = r.limiter.acquire("a", "gpt-4", [("rpm", 100)]).await;
    let Err(Error::Rejected(rejection)) = refused else {
        panic!("expected a rejection, got {refused:?}");
    };
    let status = rejection.status("rpm").expect("rpm status");
    assert!(status.available < 100, "{status:?}");
}

/// An interceptor the fast path must not bypass.
#[derive(Debug)]
struct Tracing;

impl Intercept for Tracing {
    fn name(&self) -> &'static str {
        "tests::Tracing"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        Ok(())
    }
}

#[tokio::test]
async fn the_fast_path_stays_off_when_it_would_bypass_something() {
    let table = dynalimit_tests::table().await;
    let counter = RequestCounter::default();
    let open = |client: Client, counter: Option<RequestCounter>, on: bool| {
        let mut builder = Repository::builder()
            .client(client)
            .stack(table.name().to_owned())
            .fast_path(on);
        if let Some(c) = counter {
            builder = builder.request_counter(c);
        }
        builder.open()
    };
    let plain = dynalimit_tests::client().await;
    assert!(
        open(plain.clone(), None, true)
            .await
            .unwrap()
            .fast_path()
            .is_some()
    );
    assert!(
        open(plain.clone(), None, false)
            .await
            .unwrap()
            .fast_path()
            .is_none()
    );
    let counted = dynalimit_tests::client_with(Some(counter.clone())).await;
    // A counting client whose counter the repository was not given: requests would go
    // uncounted, so the SDK keeps them.
    assert!(
        open(counted.clone(), None, true)
            .await
            .unwrap()
            .fast_path()
            .is_none()
    );
    assert!(
        open(counted, Some(counter), true)
            .await
            .unwrap()
            .fast_path()
            .is_some()
    );
    let traced = Client::from_conf(plain.config().to_builder().interceptor(Tracing).build());
    assert!(
        open(traced, None, true)
            .await
            .unwrap()
            .fast_path()
            .is_none()
    );
}

/// Runs the same acquires with the fast path on and off and compares every bucket attribute.
#[tokio::test]
async fn the_fast_path_writes_exactly_what_the_sdk_path_writes() {
    let table = dynalimit_tests::table().await;
    let clock = ManualClock::new(SystemClock.epoch_millis());
    let mut items = Vec::new();
    for (namespace, on) in [("via-wire", true), ("via-sdk", false)] {
        let repo = Repository::builder()
            .client(dynalimit_tests::client().await)
            .stack(table.name().to_owned())
            .namespace(namespace)
            .clock(Arc::new(clock.clone()))
            .fast_path(on)
            .open()
            .await
            .unwrap();
        assert_eq!(repo.fast_path().is_some(), on);
        let limiter = RateLimiter::new(repo.clone());
        let limits = [rpm(100), tpm(10_000)];
        for step in 0..6 {
            let lease = limiter
                .acquire("e", "gpt-4", [("rpm", 1), ("tpm", 100 + step)])
                .limits(limits.clone())
                .await
                .unwrap();
            lease.commit().await.unwrap();
        }
        let lease = limiter
            .acquire("e", "gpt-4", [("rpm", 1), ("tpm", 500)])
            .limits(limits.clone())
            .await
            .unwrap();
        lease.adjust("tpm", -200).unwrap();
        lease.commit().await.unwrap();
        let refused = limiter
            .acquire("e", "gpt-4", [("rpm", 1000)])
            .limits(limits.clone())
            .await;
        assert!(matches!(refused, Err(Error::Rejected(_))));
        let item = bucket_item(&table, repo.namespace_id(), "e").await;
        items.push((repo.namespace_id().to_owned(), item));
    }
    let normalise = |(ns, item): &(String, Item)| -> Vec<(String, String)> {
        let mut out: Vec<_> = item
            .iter()
            .map(|(k, v)| (k.clone(), format!("{v:?}").replace(ns.as_str(), "<ns>")))
            .collect();
        out.sort();
        out
    };
    assert_eq!(normalise(&items[0]), normalise(&items[1]));
    assert!(get_s(&items[0].1, "PK").is_some());
}

/// A bucket another client keeps in transactions: the proxy answers every write of it with a
/// `TransactionConflictException` (and forwards nothing), however often it is tried.
#[tokio::test]
async fn writes_on_a_bucket_that_never_stops_conflicting_end_with_a_typed_error() {
    let r = rig().await;
    r.warm("held").await;
    let committed = r
        .limiter
        .acquire("held", "gpt-4", [("rpm", 1), ("tpm", 100)])
        .await
        .unwrap();
    committed.adjust("tpm", 50).unwrap();
    let rolled_back = r
        .limiter
        .acquire("held", "gpt-4", [("rpm", 2)])
        .await
        .unwrap();
    let dropped = r
        .limiter
        .acquire("held", "gpt-4", [("rpm", 3)])
        .await
        .unwrap();
    let before = r.bucket("held").await;
    r.counter.reset();
    r.proxy.fail_matching(
        "UpdateItem",
        "/BUCKET#held#",
        "TransactionConflictException",
        usize::MAX,
    );
    let started = SystemClock.epoch_millis();
    let contended = |e: &RepositoryError| matches!(e, RepositoryError::Contended { attempts, .. } if *attempts == CONFLICT_ATTEMPTS);
    // Each write must end on its own; the 10 s bound only turns a hang into a failure.
    let bound = Duration::from_secs(10);
    let commit = tokio::time::timeout(bound, committed.commit()).await;
    match commit.expect("the commit gives up within the bound") {
        Err(Error::LeaseWrite(e)) => assert!(contended(&e), "{e}"),
        other => panic!("commit: {other:?}"),
    }
    let rollback = tokio::time::timeout(bound, rolled_back.rollback()).await;
    match rollback.expect("the rollback gives up within the bound") {
        Err(Error::LeaseWrite(e)) => assert!(contended(&e), "{e}"),
        other => panic!("rollback: {other:?}"),
    }
    let pause = r.limiter.pause("held", "gpt-4", Duration::from_secs(60));
    let paused = tokio::time::timeout(bound, pause)
        .await
        .expect("the pause stamp gives up within the bound");
    assert!(
        matches!(paused, Err(Error::Unavailable { .. })),
        "{paused:?}"
    );
    drop(dropped);
    tokio::time::timeout(bound, r.limiter.settle())
        .await
        .expect("settle returns once the dropped lease's rollback gave up");
    let elapsed = SystemClock.epoch_millis() - started;
    // Four writes (commit, rollback, pause stamp, drop rollback), each tried CONFLICT_ATTEMPTS
    // times with jitter below 25 + 50 + 100 ms in all.
    assert_eq!(
        r.counter.count("UpdateItem"),
        4 * u64::from(CONFLICT_ATTEMPTS),
        "{:?}",
        r.counter.snapshot()
    );
    assert!(elapsed < 5000, "{elapsed} ms");
    assert_eq!(
        r.bucket("held").await,
        before,
        "a conflicted write applies nothing"
    );
    // Once the other client lets go, the bucket takes writes again.
    r.proxy.clear();
    r.spend("held").await;
}

/// A consume that DynamoDB applied but whose answer lacks `Attributes` still learns that the
/// child cascades, and debits the parent.
#[tokio::test]
async fn a_consume_answered_without_attributes_still_debits_the_cascade_parent() {
    let r = rig().await;
    r.repo.create_entity(NewEntity::new("org")).await.unwrap();
    r.repo
        .create_entity(NewEntity::new("org-key").parent("org").cascade(true))
        .await
        .unwrap();
    r.spend("org-key").await;
    let tc = |item: &Item| get_i64(item, "b_rpm_tc").unwrap();
    let (child, parent) = (tc(&r.bucket("org-key").await), tc(&r.bucket("org").await));
    assert_eq!((child, parent), (1000, 1000), "the first acquire cascades");
    // A fresh limiter: nothing cached, the cascade is learned from the answer.
    let limiter = RateLimiter::new(r.repo.clone());
    r.proxy.replace_answer(
        "UpdateItem",
        Some("/BUCKET#org-key#"),
        http::StatusCode::OK,
        "{}",
        1,
    );
    let lease = limiter
        .acquire("org-key", "gpt-4", [("rpm", 1)])
        .await
        .unwrap();
    assert_eq!(r.proxy.pending(), 0, "the child's answer was replaced");
    assert_eq!(lease.entities(), ["org-key", "org"]);
    lease.commit().await.unwrap();
    assert_eq!(tc(&r.bucket("org-key").await), 2000);
    assert_eq!(tc(&r.bucket("org").await), 2000, "the parent was debited");
}

/// An answer longer than any DynamoDB answer is read no further than the limit and not sent
/// again; its 2xx status says the write was applied, so the item is read back instead.
#[tokio::test]
async fn an_oversized_answer_is_not_an_unbounded_read() {
    let r = rig().await;
    r.warm("big").await;
    let before = get_i64(&r.bucket("big").await, "b_rpm_tc").unwrap();
    let body = vec![b' '; MAX_RESPONSE_BYTES + 1];
    r.proxy
        .replace_answer("UpdateItem", None, http::StatusCode::OK, body, 1);
    r.spend("big").await;
    assert_eq!(r.counter.count("UpdateItem"), 1, "not sent again");
    assert_eq!(r.counter.count("GetItem"), 1, "the item is read back");
    // The write was applied before its answer was lost: debited once, never twice.
    let after = get_i64(&r.bucket("big").await, "b_rpm_tc").unwrap();
    assert_eq!(after - before, 1000);
}

/// A balance another writer left far above the ceiling: the fast path's debit of it is given
/// back and the request decided on the slow path, which trims the balance to the ceiling. The
/// refund's answer is lost after it landed: it is not sent again, so it lands once (sent twice,
/// it would lift the balance and take the count below what was admitted).
#[tokio::test]
async fn a_debit_of_a_balance_above_the_ceiling_is_given_back_once_when_its_answer_is_lost() {
    let r = rig().await;
    r.warm("inflated").await;
    let item = r.bucket("inflated").await;
    r.raw_set(&item, "b_rpm_tk", 1_000_000_000_000).await;
    // The refund is the only write whose whole condition is that the item exists.
    let refund = "\"(attribute_exists(#a0))\"";
    let updates = r.spend_losing("inflated", refund).await;
    let refunds = updates.iter().filter(|body| body.contains(refund)).count();
    assert_eq!(refunds, 1, "the refund, sent once: {updates:#?}");
    let after = r.bucket("inflated").await;
    assert_eq!(
        get_i64(&after, "b_rpm_tc"),
        Some(2_000),
        "two requests admitted, the debit given back once"
    );
    let tk = get_i64(&after, "b_rpm_tk").unwrap();
    assert!(
        tk <= 99_000,
        "trimmed to the ceiling of 100 and debited: {tk}"
    );
}

/// A bucket that sat full longer than it takes to refill, then a burst: the first fast debit
/// materialises the bucket (its `rf` moved to now, the balance clamped as it was), so the refill
/// wasted while it was full is not credited by the slow pass that follows. Exactly the
/// capacity is admitted (both backends); without the materialise, 19 where 10 are allowed. The
/// materialise costs one request, on the first acquire after the idle time only.
#[tokio::test]
async fn a_burst_after_an_idle_full_bucket_is_admitted_at_most_its_capacity() {
    let r = crate::engine::rig().await;
    r.repo
        .set_limits("acme", "gpt-4", &[dynalimit::Limit::per_minute("rpm", 10)])
        .await
        .unwrap();
    let once = r.limiter.acquire("acme", "gpt-4", [("rpm", 1)]).await;
    once.unwrap().commit().await.unwrap();
    r.clock.advance(std::time::Duration::from_secs(600));
    let mut admitted = 0;
    let mut updates = Vec::new();
    for _ in 0..40 {
        r.counter.reset();
        if let Ok(lease) = r.limiter.acquire("acme", "gpt-4", [("rpm", 1)]).await {
            updates.push(r.counter.count("UpdateItem"));
            lease.commit().await.unwrap();
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 10,
        "one burst after ten idle minutes; the capacity is 10"
    );
    assert_eq!(
        updates,
        [2, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        "the debit and the materialise, then one request per acquire"
    );
}

/// The materialise after a fast debit is sent once: an answer lost after it landed is not sent
/// again, the acquire is admitted all the same, and the bucket is materialised (it landed). The
/// stale `rf` is what another writer's fast debits leave after ten idle minutes.
#[tokio::test]
async fn a_lost_answer_to_a_materialising_write_is_not_sent_again() {
    let r = rig().await;
    r.warm("idle").await;
    let item = r.bucket("idle").await;
    let rf = get_i64(&item, "rf").unwrap();
    r.raw_set(&item, "rf", rf - 600_000).await;
    // The materialise is the only write that moves `rf`.
    let materialise = "\"rf\"";
    let updates = r.spend_losing("idle", materialise).await;
    assert_eq!(
        updates.len(),
        2,
        "the debit and the materialise: {updates:#?}"
    );
    assert_eq!(
        updates.iter().filter(|b| b.contains(materialise)).count(),
        1,
        "the materialise, sent once: {updates:#?}"
    );
    let after = r.bucket("idle").await;
    let moved = get_i64(&after, "rf").unwrap();
    assert!(moved > rf, "the materialise landed: rf {moved} after {rf}");
    assert_eq!(
        get_i64(&after, "b_rpm_tk"),
        Some(99_000),
        "clamped at the ceiling of 100 before the debit, then debited"
    );
    assert_eq!(get_i64(&after, "b_rpm_tc"), Some(2_000));
}
