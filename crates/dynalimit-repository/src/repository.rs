//! The [`Repository`]: one table, one namespace, shared clients and caches.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_config::{Region, SdkConfig};
use aws_sdk_dynamodb::Client;
use dynalimit_core::bounded::BoundedMap;
use dynalimit_core::{Clock, SystemClock, ids};
use dynalimit_format::expr::{Expr, WithExpr};
use dynalimit_format::version::{self, VersionRecord};
use dynalimit_format::{attr, keys};

use crate::aws::{self, AwsSettings};
use crate::config::ConfigCache;
use crate::error::classify;
use crate::metrics::RequestCounter;
use crate::wire::{EndpointCapture, FastPath, Reporting};
use crate::{RepositoryError, schema};

/// The default stack (and table) name.
pub const DEFAULT_STACK: &str = "dynalimit";
/// The default namespace.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The default config cache time-to-live.
pub const DEFAULT_CONFIG_CACHE_TTL: Duration = Duration::from_secs(60);
/// The default bucket TTL multiplier (reference §2.6).
pub const DEFAULT_BUCKET_TTL_MULTIPLIER: u32 = 7;

/// The ids of at most this many namespaces are remembered per repository.
pub(crate) const MAX_NAMESPACE_IDS: usize = 1_024;
/// A namespace id not looked up for this long may be forgotten.
const NAMESPACE_ID_IDLE: Duration = Duration::from_secs(3600);

/// State shared by every namespace scope of one repository.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config_cache_ttl: Duration,
    pub(crate) bucket_ttl_multiplier: u32,
    /// Who is named as the principal of audit events.
    pub(crate) principal: Option<String>,
    /// name → id of registered namespaces seen by this process (at most
    /// [`MAX_NAMESPACE_IDS`]; a forgotten one costs a read of its registry record).
    pub(crate) namespace_ids: Mutex<BoundedMap<String, String>>,
    /// Whether the fast path may carry `UpdateItem`s.
    pub(crate) fast_path: bool,
    /// Handed to the fast path, which counts its requests there.
    pub(crate) counter: Option<RequestCounter>,
    /// The fast path, once a request of the client showed where it goes.
    pub(crate) wire: OnceLock<Arc<FastPath>>,
    /// The retry quota of bucket writes, fast path and SDK path alike.
    pub(crate) budget: Arc<crate::retry::Budget>,
    /// The last state seen of each concurrency limit's slots (see `slots`).
    pub(crate) slots: crate::slots::SlotCache,
}

/// One namespace of the table.
pub(crate) struct Scope {
    pub(crate) name: String,
    pub(crate) id: String,
    pub(crate) config: ConfigCache,
}

/// The DynamoDB data plane for one namespace of one table.
///
/// Cheap to clone; clones share the client and caches. [`Repository::namespace`] gives another
/// namespace of the same table with the same client.
///
/// ```no_run
/// # async fn demo() -> Result<(), dynalimit::RepositoryError> {
/// use dynalimit::Repository;
///
/// // Stack from DYNALIMIT_STACK (default "dynalimit"); the table is created when missing.
/// let repo = Repository::open("tenant-alpha").await?;
/// let other = repo.namespace("tenant-beta").await?;
/// assert_eq!(other.namespace_name(), "tenant-beta");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Repository {
    pub(crate) shared: Arc<Shared>,
    pub(crate) scope: Arc<Scope>,
}

impl fmt::Debug for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Repository")
            .field("table", &self.shared.table)
            .field("namespace", &self.scope.name)
            .field("namespace_id", &self.scope.id)
            .finish()
    }
}

impl Repository {
    /// Opens namespace `namespace` (empty: `$DYNALIMIT_NAMESPACE`, else `default`) of the stack
    /// named by `$DYNALIMIT_STACK` (else `dynalimit`), with AWS settings from the environment.
    /// Provisions the table when it is missing (see [`RepositoryBuilder::open`]), registers the
    /// namespace when it is missing, and checks the version record. Opening an existing
    /// namespace only reads.
    ///
    /// # Errors
    /// [`RepositoryError::Validation`] for a bad name (before any request),
    /// [`RepositoryError::IncompatibleVersion`] when the table requires a newer client, and the
    /// classified DynamoDB failures.
    pub async fn open(namespace: &str) -> Result<Repository, RepositoryError> {
        let mut builder = Repository::builder();
        if !namespace.is_empty() {
            builder = builder.namespace(namespace);
        }
        builder.open().await
    }

    /// A builder for every setting.
    pub fn builder() -> RepositoryBuilder {
        RepositoryBuilder::default()
    }

    /// The same table and client, scoped to another namespace (registered when missing, see
    /// [`Repository::ensure_namespace`]), with its own config cache.
    ///
    /// # Errors
    /// As [`Repository::register_namespace`].
    pub async fn namespace(&self, name: &str) -> Result<Repository, RepositoryError> {
        let id = self.ensure_namespace(name).await?;
        Ok(self.scoped(name, id))
    }

    /// The same table and client, scoped to an existing namespace without registering it.
    ///
    /// # Errors
    /// [`RepositoryError::NamespaceNotFound`] when it is not registered.
    pub async fn connect_namespace(&self, name: &str) -> Result<Repository, RepositoryError> {
        let id = self.namespace_id_of(name).await?;
        Ok(self.scoped(name, id))
    }

    pub(crate) fn scoped(&self, name: &str, id: String) -> Repository {
        Repository {
            shared: Arc::clone(&self.shared),
            scope: Arc::new(Scope {
                name: name.to_string(),
                id,
                config: ConfigCache::new(self.shared.config_cache_ttl),
            }),
        }
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.shared.table
    }

    /// The namespace name.
    pub fn namespace_name(&self) -> &str {
        &self.scope.name
    }

    /// The opaque namespace id that prefixes every key of this namespace.
    pub fn namespace_id(&self) -> &str {
        &self.scope.id
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    /// The clock this repository reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The time-to-live of this namespace's limit configuration cache (zero: disabled).
    pub fn config_cache_ttl(&self) -> Duration {
        self.scope.config.ttl()
    }

    /// The bucket TTL multiplier (reference §2.6; 0 disables bucket TTLs).
    pub(crate) fn bucket_ttl_multiplier(&self) -> u32 {
        self.shared.bucket_ttl_multiplier
    }

    /// Checks that the table answers: one eventually consistent `GetItem` of the version
    /// record (whether or not it exists), which every policy of either library's stack
    /// grants; no `DescribeTable`.
    ///
    /// # Errors
    /// [`RepositoryError::TableNotFound`] or the classified failure.
    pub async fn ping(&self) -> Result<(), RepositoryError> {
        self.shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(version::record_key()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| match classify("GetItem", e) {
                RepositoryError::TableNotFound { .. } => RepositoryError::TableNotFound {
                    table: self.shared.table.clone(),
                },
                other => other,
            })
    }

    /// Reads the version record (`None` when the table has none yet).
    ///
    /// # Errors
    /// The classified DynamoDB failure, or [`FormatError::Corrupt`](dynalimit_format::FormatError::Corrupt).
    pub async fn version_record(&self) -> Result<Option<VersionRecord>, RepositoryError> {
        let capture = EndpointCapture::default();
        let out = self
            .shared
            .client
            .get_item()
            .table_name(&self.shared.table)
            .set_key(Some(version::record_key()))
            .consistent_read(true)
            .customize()
            .interceptor(capture.clone())
            .send()
            .await
            .map_err(|e| classify("GetItem", e))?;
        self.start_fast_path(&capture);
        Ok(out.item.as_ref().map(VersionRecord::from_item))
    }

    /// Sets up the fast path from a request the client sent (once; nothing happens when it is
    /// switched off or the client is not eligible).
    fn start_fast_path(&self, capture: &EndpointCapture) {
        let shared = &self.shared;
        if !shared.fast_path || shared.wire.get().is_some() {
            return;
        }
        let reporting = Arc::new(Reporting {
            counter: shared.counter.clone(),
        });
        match FastPath::for_client(
            &shared.client,
            capture,
            reporting,
            Arc::clone(&shared.budget),
        ) {
            Ok(wire) => {
                tracing::debug!(uri = %wire.uri(), "UpdateItem takes the fast path");
                let _ = shared.wire.set(Arc::new(wire));
                metrics::gauge!(crate::metrics::FAST_PATH).set(1.0);
            }
            Err(why) => {
                tracing::info!(
                    ?why,
                    "bucket writes stay on the SDK: the fast path would bypass the client's setting"
                );
                metrics::gauge!(crate::metrics::FAST_PATH).set(0.0);
            }
        }
    }

    /// The fast path that carries this repository's `UpdateItem`s, when it is in use: it is
    /// chosen when nothing the client is configured with would be bypassed (see
    /// [`RepositoryBuilder::fast_path`]).
    #[doc(hidden)] // for dynalimit's limiter, benchmarks and tests: not part of the API
    pub fn fast_path(&self) -> Option<&FastPath> {
        self.shared.wire.get().map(Arc::as_ref)
    }

    /// Writes the version record: creates it when missing (`client_min_version = 0.0.0`,
    /// `lambda_version` NULL unless given), otherwise refreshes the schema, writer and, when
    /// given, the Lambda version. Never lowers `client_min_version`.
    ///
    /// # Errors
    /// The classified DynamoDB failure.
    // Written by `dynalimit deploy` and `upgrade`, never by a service: hidden from the API.
    #[doc(hidden)]
    pub async fn write_version_record(
        &self,
        lambda_version: Option<&str>,
    ) -> Result<(), RepositoryError> {
        let now = dynalimit_core::time::iso_seconds(self.shared.clock.epoch_millis());
        let mut absent = Expr::default();
        let c = absent.not_exists(attr::PK);
        absent.when(c);
        let created = self
            .shared
            .client
            .put_item()
            .table_name(&self.shared.table)
            .set_item(Some(version::new_record(&now, lambda_version)))
            .with_expr(&absent)
            .send()
            .await;
        match created {
            Ok(_) => return Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) => {}
            Err(e) => return Err(classify("PutItem", e)),
        }
        let refresh = version::refresh(&now, lambda_version);
        self.shared
            .client
            .update_item()
            .table_name(&self.shared.table)
            .set_key(Some(version::record_key()))
            .with_expr(&refresh)
            .send()
            .await
            .map_err(|e| classify("UpdateItem", e))?;
        Ok(())
    }

    /// The reader gate of a writer of a feature that older readers would misread (reference
    /// §10): reads the version record strongly consistently and refuses unless the stack's
    /// aggregator (`lambda_version`) reads the feature (its minimum reader is `minimum`), then
    /// raises `client_min_version` to `minimum` (never lowering it) with a conditional write
    /// on the value read, read again after a concurrent raise (3 attempts). Called before
    /// anything of the feature is written. The raise sets an absolute value under a pin on
    /// the value read, so a raise whose answer was lost is read back on the next attempt and
    /// found done.
    ///
    /// # Errors
    /// [`RepositoryError::ReadersTooOld`]; [`RepositoryError::IncompatibleVersion`] when the
    /// record is missing; the classified failure.
    pub(crate) async fn require_readers(
        &self,
        minimum: &str,
        feature: &str,
    ) -> Result<(), RepositoryError> {
        for _ in 0..3 {
            let Some(record) = self.version_record().await? else {
                return Err(RepositoryError::IncompatibleVersion {
                    required: minimum.to_owned(),
                    implemented: version::COMPATIBILITY_VERSION.to_owned(),
                    message: "the table has no version record; open it with \
                              `Repository::open` or deploy it with `dynalimit deploy`"
                        .into(),
                });
            };
            if !version::reads(record.lambda_version.as_deref(), minimum) {
                return Err(RepositoryError::ReadersTooOld {
                    feature: feature.to_owned(),
                    minimum: minimum.to_owned(),
                    lambda_version: record.lambda_version,
                });
            }
            let stored = Some(record.client_min_version.as_str());
            let Some(new) = version::ratcheted(stored, minimum) else {
                return Ok(());
            };
            let raised = self
                .shared
                .client
                .update_item()
                .table_name(&self.shared.table)
                .set_key(Some(version::record_key()))
                .with_expr(&version::ratchet(stored, &new))
                .send()
                .await;
            match raised {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_conditional_check_failed_exception()) => {}
                Err(e) => return Err(classify("UpdateItem", e)),
            }
        }
        Err(RepositoryError::Contended {
            operation: "UpdateItem",
            attempts: 3,
        })
    }

    /// Refuses to run when the table's `client_min_version` is above what dynalimit implements
    /// or the schema major differs.
    ///
    /// # Errors
    /// [`RepositoryError::IncompatibleVersion`].
    pub fn check_compatibility(record: &VersionRecord) -> Result<(), RepositoryError> {
        if !version::satisfies(version::COMPATIBILITY_VERSION, &record.client_min_version) {
            return Err(RepositoryError::IncompatibleVersion {
                required: record.client_min_version.clone(),
                implemented: version::COMPATIBILITY_VERSION.to_string(),
                message: version::ratchet_explanation(&record.client_min_version),
            });
        }
        let major = |v: &str| v.split('.').next().map(str::to_string);
        if major(&record.schema_version) != major(version::SCHEMA_VERSION) {
            return Err(RepositoryError::IncompatibleVersion {
                required: record.schema_version.clone(),
                implemented: version::SCHEMA_VERSION.to_string(),
                message: "the table's schema major version differs".into(),
            });
        }
        Ok(())
    }
}

/// Builds a [`Repository`]. Every setting has a default; see each method.
///
/// ```no_run
/// # async fn demo() -> Result<(), dynalimit::RepositoryError> {
/// use std::time::Duration;
/// use dynalimit::Repository;
///
/// let repo = Repository::builder()
///     .endpoint_url("http://127.0.0.1:8000")
///     .stack("limits-dev")
///     .namespace("tenant-alpha")
///     .config_cache_ttl(Duration::from_secs(30))
///     .open()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Default)]
#[must_use]
pub struct RepositoryBuilder {
    endpoint_url: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    stack: Option<String>,
    namespace: Option<String>,
    config_cache_ttl: Option<Duration>,
    bucket_ttl_multiplier: Option<u32>,
    sdk_config: Option<SdkConfig>,
    client: Option<Client>,
    clock: Option<Arc<dyn Clock>>,
    create_table: Option<bool>,
    principal: Option<String>,
    fast_path: Option<bool>,
    counter: Option<RequestCounter>,
    #[cfg(feature = "memory")]
    memory: Option<dynalimit_memory::Store>,
}

impl fmt::Debug for RepositoryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepositoryBuilder")
            .field("endpoint_url", &self.endpoint_url)
            .field("region", &self.region)
            .field("profile", &self.profile)
            .field("stack", &self.stack)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RepositoryBuilder {
    /// DynamoDB endpoint (DynamoDB Local, LocalStack). Default: `$AWS_ENDPOINT_URL_DYNAMODB`,
    /// `$AWS_ENDPOINT_URL`, the profile's `endpoint_url`, else AWS (see [`crate::aws`]). A
    /// loopback endpoint without configured credentials gets static local credentials.
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// AWS region. Default: `$AWS_REGION`, `$AWS_DEFAULT_REGION`, the profile's `region`, the
    /// EC2 instance's; `us-east-1` on a loopback endpoint; otherwise opening fails with
    /// [`RepositoryError::MissingRegion`].
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// AWS profile of the shared config and credentials files. Default: `$AWS_PROFILE`, else
    /// `default`.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// Stack name, which is also the table name. Default: `$DYNALIMIT_STACK`, else `dynalimit`.
    pub fn stack(mut self, stack: impl Into<String>) -> Self {
        self.stack = Some(stack.into());
        self
    }

    /// Namespace name. Default: `$DYNALIMIT_NAMESPACE`, else `default`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Time-to-live of the limit configuration cache; zero disables it. Default 60 s.
    pub fn config_cache_ttl(mut self, ttl: Duration) -> Self {
        self.config_cache_ttl = Some(ttl);
        self
    }

    /// Bucket TTL multiplier (reference §2.6); zero disables bucket TTLs. Default 7.
    pub fn bucket_ttl_multiplier(mut self, multiplier: u32) -> Self {
        self.bucket_ttl_multiplier = Some(multiplier);
        self
    }

    /// Whether `UpdateItem`, the request of every acquire, may bypass the SDK's orchestrator
    /// ([`Repository::fast_path`]); default: yes, unless `$DYNALIMIT_FAST_PATH` is `0`, `false`
    /// or `off`.
    /// The fast path is never used for a client with interceptors other than a
    /// [`RequestCounter`].
    pub fn fast_path(mut self, enabled: bool) -> Self {
        self.fast_path = Some(enabled);
        self
    }

    /// Counts every request in `counter`. The builder attaches it to the client it builds and
    /// hands it to the fast path; with a ready client ([`RepositoryBuilder::client`]) attach it
    /// to that client as an interceptor yourself, and it is handed to the fast path only.
    #[doc(hidden)] // for the benchmarks and tests: a service cannot name `RequestCounter`
    pub fn request_counter(mut self, counter: RequestCounter) -> Self {
        self.counter = Some(counter);
        self
    }

    /// AWS SDK settings to start from (credentials, retry, timeouts, …), for example from
    /// [`crate::aws::load`]. Requests go to their endpoint; a missing table is created
    /// directly (as on an emulator) only when [`RepositoryBuilder::endpoint_url`] is set too,
    /// otherwise through CloudFormation.
    pub fn sdk_config(mut self, config: SdkConfig) -> Self {
        self.sdk_config = Some(config);
        self
    }

    /// A ready DynamoDB client (for example one with interceptors). Overrides the endpoint,
    /// region and SDK settings.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Keeps the table in a new in-process store instead of DynamoDB (cargo feature
    /// `memory`; for tests and single-process use, see `dynalimit_memory`). The table is
    /// created when the repository opens, as on an emulator. Overrides the endpoint, region,
    /// SDK settings and ready client.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dynalimit::RepositoryError> {
    /// use std::sync::Arc;
    /// use dynalimit_core::ManualClock;
    /// use dynalimit::Repository;
    ///
    /// let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    /// let repo = Repository::builder().in_memory().clock(clock).namespace("t").open().await?;
    /// assert_eq!(repo.namespace_name(), "t");
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "memory")]
    pub fn in_memory(self) -> Self {
        self.in_memory_store(&dynalimit_memory::Store::new())
    }

    /// As [`RepositoryBuilder::in_memory`], in `store`, which other repositories (and
    /// limiters) of the process may share.
    #[cfg(feature = "memory")]
    pub fn in_memory_store(mut self, store: &dynalimit_memory::Store) -> Self {
        self.memory = Some(store.clone());
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The principal named in audit events of changes made through this repository (an ARN,
    /// or an id following the entity id rule). Default: none.
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// Whether `open` creates a missing table (default true). When false a missing table is
    /// [`RepositoryError::TableNotFound`].
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = Some(create);
        self
    }

    fn stack_name(&self) -> String {
        self.stack
            .clone()
            .or_else(|| {
                std::env::var("DYNALIMIT_STACK")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_STACK.to_string())
    }

    fn namespace_name(&self) -> String {
        self.namespace
            .clone()
            .or_else(|| {
                std::env::var("DYNALIMIT_NAMESPACE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string())
    }

    /// The DynamoDB client, and the AWS settings and DynamoDB endpoint override it was built
    /// from (both `None` for a ready client).
    async fn build_client(
        &mut self,
    ) -> Result<(Client, Option<SdkConfig>, Option<String>), RepositoryError> {
        #[cfg(feature = "memory")]
        if let Some(store) = self.memory.take() {
            let mut config = store.config();
            if let Some(counter) = &self.counter {
                config = config.interceptor(counter.clone());
            }
            let config = config.interceptor(crate::metrics::RequestMetrics);
            return Ok((Client::from_conf(config.build()), None, None));
        }
        if let Some(client) = self.client.take() {
            let config = client
                .config()
                .to_builder()
                .interceptor(crate::metrics::RequestMetrics);
            return Ok((Client::from_conf(config.build()), None, None));
        }
        let given = self.sdk_config.take();
        let from_caller = given.is_some();
        let base = match given {
            Some(c) => c,
            None => {
                let settings = AwsSettings::new()
                    .endpoint_url(self.endpoint_url.clone())
                    .region(self.region.clone())
                    .profile(self.profile.clone());
                aws::load(&settings).await?
            }
        };
        let resolved = aws::dynamodb_endpoint(&base, self.endpoint_url.as_deref());
        let mut config = aws_sdk_dynamodb::config::Builder::from(&base);
        if let Some(region) = &self.region {
            config = config.region(Region::new(region.clone()));
        } else if base.region().is_none() {
            if !resolved.as_deref().is_some_and(aws::is_loopback) {
                return Err(RepositoryError::MissingRegion {
                    profile: self.profile.clone().unwrap_or_else(|| "default".into()),
                });
            }
            config = config.region(Region::new(aws::EMULATOR_REGION));
        }
        if let Some(url) = &self.endpoint_url {
            if aws::is_loopback(url) && base.credentials_provider().is_none() {
                config = config.credentials_provider(aws::local_credentials());
            }
            config = config.endpoint_url(url);
        }
        if let Some(counter) = &self.counter {
            config = config.interceptor(counter.clone());
        }
        config = config.interceptor(crate::metrics::RequestMetrics);
        // Settings the caller loaded are taken as they are: only `endpoint_url` marks an
        // emulator then.
        let endpoint = if from_caller {
            self.endpoint_url.clone()
        } else {
            resolved
        };
        Ok((Client::from_conf(config.build()), Some(base), endpoint))
    }

    /// Opens the repository: provisions the table when missing (unless disabled), reads or
    /// initialises the version record, refuses an incompatible table, registers the namespace
    /// (and `default`) when missing.
    ///
    /// On a table whose version record and namespaces exist, opening sends only `GetItem`s (of
    /// the version record and the namespace registry), so it works under the acquire-only,
    /// namespace and read-only policies of dynalimit's stack and of zae-limiter 0.17's. It
    /// never sends `DescribeTable`: a missing table is the version record's read answering
    /// `ResourceNotFoundException`, and the schema is checked from the record's
    /// `schema_version` (see [`Repository::check_compatibility`]).
    ///
    /// A missing table is provisioned as the CloudFormation stack of `infra/` (without the
    /// aggregator; `dynalimit deploy` adds it) when the repository talks to AWS itself (no
    /// endpoint override and no ready client) and the cargo feature `provision` is on;
    /// without the feature a missing table on AWS is [`RepositoryError::TableNotFound`]. With
    /// an endpoint override (DynamoDB Local, LocalStack) or a ready client, the table is
    /// created directly with `CreateTable`.
    ///
    /// # Errors
    /// As [`Repository::open`].
    pub async fn open(mut self) -> Result<Repository, RepositoryError> {
        let stack = self.stack_name();
        ids::validate_stack_name(&stack)?;
        let namespace = self.namespace_name();
        ids::validate_namespace_name(&namespace)?;
        if let Some(p) = &self.principal {
            ids::validate_principal(p)?;
        }
        let (repo, base, endpoint) = self.connect_unchecked(&stack).await?;
        // The version record's read also says whether the table exists: no `DescribeTable`,
        // which zae-limiter's acquire-only and namespace policies do not grant.
        let record = match repo.version_record().await {
            Err(RepositoryError::TableNotFound { .. }) => {
                if self.create_table == Some(false) {
                    return Err(RepositoryError::TableNotFound { table: stack });
                }
                // Through CloudFormation on AWS itself; directly on an emulator or a ready
                // client.
                match (base, endpoint) {
                    (Some(config), None) => provision(&repo, &stack, &config).await?,
                    _ => schema::create_table(&repo.shared.client, &stack).await?,
                }
                repo.version_record().await?
            }
            read => read?,
        };
        match record {
            Some(record) => Repository::check_compatibility(&record)?,
            // The first record of a table no client has opened yet: its aggregator, if any,
            // is dynalimit's (`dynalimit deploy` records its own), which reads every feature
            // dynalimit implements.
            None => {
                repo.write_version_record(Some(version::COMPATIBILITY_VERSION))
                    .await?;
            }
        }
        if namespace != DEFAULT_NAMESPACE {
            repo.ensure_namespace(DEFAULT_NAMESPACE).await?;
        }
        repo.namespace(&namespace).await
    }

    /// Connects without writing anything: the table, the version record and the namespace must
    /// already exist.
    ///
    /// # Errors
    /// [`RepositoryError::TableNotFound`], [`RepositoryError::NamespaceNotFound`],
    /// [`RepositoryError::IncompatibleVersion`], or the classified failure.
    pub async fn connect(mut self) -> Result<Repository, RepositoryError> {
        let stack = self.stack_name();
        ids::validate_stack_name(&stack)?;
        let namespace = self.namespace_name();
        ids::validate_namespace_name(&namespace)?;
        let (repo, _, _) = self.connect_unchecked(&stack).await?;
        match repo.version_record().await {
            Ok(Some(record)) => Repository::check_compatibility(&record)?,
            Ok(None) => return Err(RepositoryError::TableNotFound { table: stack }),
            Err(RepositoryError::TableNotFound { .. }) => {
                return Err(RepositoryError::TableNotFound { table: stack });
            }
            Err(e) => return Err(e),
        }
        repo.connect_namespace(&namespace).await
    }

    /// The repository (reserved namespace), with the AWS settings and endpoint override of
    /// [`RepositoryBuilder::build_client`].
    async fn connect_unchecked(
        &mut self,
        stack: &str,
    ) -> Result<(Repository, Option<SdkConfig>, Option<String>), RepositoryError> {
        let (client, base, endpoint) = self.build_client().await?;
        let ttl = self.config_cache_ttl.unwrap_or(DEFAULT_CONFIG_CACHE_TTL);
        let shared = Arc::new(Shared {
            client,
            table: stack.to_string(),
            clock: self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock)),
            config_cache_ttl: ttl,
            bucket_ttl_multiplier: self
                .bucket_ttl_multiplier
                .unwrap_or(DEFAULT_BUCKET_TTL_MULTIPLIER),
            principal: self.principal.clone(),
            namespace_ids: Mutex::new(BoundedMap::new(MAX_NAMESPACE_IDS, NAMESPACE_ID_IDLE)),
            fast_path: self.fast_path.unwrap_or_else(|| {
                !std::env::var("DYNALIMIT_FAST_PATH")
                    .is_ok_and(|v| matches!(v.as_str(), "0" | "false" | "off"))
            }),
            counter: self.counter.clone(),
            wire: OnceLock::new(),
            budget: Arc::default(),
            slots: crate::slots::SlotCache::default(),
        });
        let repo = Repository {
            scope: Arc::new(Scope {
                name: keys::RESERVED_NS.to_string(),
                id: keys::RESERVED_NS.to_string(),
                config: ConfigCache::new(ttl),
            }),
            shared,
        };
        Ok((repo, base, endpoint))
    }
}

/// Provisions the missing table `stack` on AWS as the CloudFormation stack, without the
/// aggregator, and waits until the table is active.
#[cfg(feature = "provision")]
async fn provision(
    repo: &Repository,
    stack: &str,
    config: &SdkConfig,
) -> Result<(), RepositoryError> {
    let mut options = dynalimit_stack::StackOptions::default();
    options.aggregator = false;
    dynalimit_stack::StackManager::from_sdk_config(stack, config)
        .deploy(&options, None, &mut |event| {
            tracing::info!(stack = %stack, "{event}");
        })
        .await?;
    schema::wait_active(&repo.shared.client, stack).await
}

/// Without the `provision` feature a missing table on AWS is not created: it is deployed with
/// `dynalimit deploy`.
#[cfg(not(feature = "provision"))]
async fn provision(
    _repo: &Repository,
    stack: &str,
    _config: &SdkConfig,
) -> Result<(), RepositoryError> {
    Err(RepositoryError::TableNotFound {
        table: stack.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use aws_config::BehaviorVersion;

    use super::*;

    fn no_region() -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .build()
    }

    #[tokio::test]
    async fn settings_without_a_region_are_refused_off_loopback() {
        // The endpoint does not resolve: reaching for it would be another error.
        let err = Repository::builder()
            .sdk_config(no_region())
            .endpoint_url("https://dynamodb.example.invalid")
            .open()
            .await
            .unwrap_err();
        assert!(
            matches!(err, RepositoryError::MissingRegion { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("AWS_REGION"), "{err}");
    }

    #[tokio::test]
    async fn a_loopback_endpoint_gets_the_emulator_region() {
        let mut builder = Repository::builder()
            .sdk_config(no_region())
            .endpoint_url("http://127.0.0.1:9");
        let (client, _, endpoint) = builder.build_client().await.expect("a client");
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(
            client.config().region().map(|r| r.as_ref()),
            Some(aws::EMULATOR_REGION)
        );
    }
}
