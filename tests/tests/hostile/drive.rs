//! One case: the world stored and mutated, every read path driven under a time bound, then
//! the admissions of a minute counted against what the stored limits allow.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use dynalimit::time::ManualClock;
use dynalimit::{OnUnavailable, OperationOptions, RateLimiter, Repository, UsageQuery};
use dynalimit_aggregator::Aggregator;
use dynalimit_aggregator::config::Settings;
use dynalimit_aggregator::processor;
use dynalimit_aggregator::record::StreamRecord;
use dynalimit_format::item::Item;
use dynalimit_memory::Store;
use dynalimit_tests::hostile::strategy::Case;
use dynalimit_tests::hostile::world::{self, Role};
use dynalimit_tests::hostile::{self, CHILD, NAMESPACE, PARENT, RESOURCE, T0};

use crate::known;
use crate::oracle::{self, Allowance};

/// How long one read path may take, in real time: a liveness bound, far above what any path
/// needs on the in-memory backend (milliseconds).
pub(crate) const PATH_BOUND: Duration = Duration::from_secs(5);

/// How long a whole case may take before it is reported as stuck (a path that never yields
/// to the runtime is not stopped by [`PATH_BOUND`]).
const CASE_BOUND: Duration = Duration::from_secs(120);

/// Acquires counted after the hour, one every [`STEP`].
const COUNTED: u32 = 16;

/// The time between two counted acquires.
const STEP: Duration = Duration::from_secs(4);

/// How far after the case's start the counted acquires begin: past every stamp's lifetime
/// (a minute) and any clock-skew allowance.
const LATER: Duration = Duration::from_secs(3_600);

/// Outcomes seen across cases, per path: how often each ended well or with which error.
#[derive(Debug, Default)]
pub(crate) struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    fn note(&self, path: &str, outcome: &str) {
        let mut seen = self.0.lock().expect("tally");
        *seen.entry(format!("{path}: {outcome}")).or_default() += 1;
    }

    /// One line per path and outcome.
    pub(crate) fn summary(&self) -> String {
        let seen = self.0.lock().expect("tally");
        let mut out = String::from("outcomes by path:");
        for (what, n) in seen.iter() {
            let _ = write!(out, "\n  {what}: {n}");
        }
        out
    }
}

/// Runs one case on a thread of its own (so that a path spinning without yielding is caught
/// by [`CASE_BOUND`] and left behind); `Err` says what failed, with the stored items.
pub(crate) fn run(case: &Case, tally: &Arc<Tally>) -> Result<(), String> {
    let (send, receive) = std::sync::mpsc::channel();
    let progress = Arc::new(Progress::default());
    let (case, at) = (case.clone(), progress.clone());
    let tally_of_case = tally.clone();
    std::thread::Builder::new()
        .name("hostile-case".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let _ = send.send(runtime.block_on(body(&case, &tally_of_case, &at)));
        })
        .expect("a thread");
    match receive.recv_timeout(CASE_BOUND) {
        Ok(result) => result,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let failure = format!(
                "the case did not end within {CASE_BOUND:?}; last path: {}",
                progress.path.lock().expect("progress"),
            );
            let (ns, items) = &*progress.items.lock().expect("progress");
            match known::explain(items, ns, &failure) {
                Some(what) => {
                    tally.note("known", what);
                    Ok(())
                }
                None => Err(format!("{failure}\nstored items:\n{}", describe(items))),
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(format!(
            "the case's harness panicked at: {}",
            progress.path.lock().expect("progress")
        )),
    }
}

/// Where a case is, for a report when it does not end: the path running, the items stored.
#[derive(Debug, Default)]
struct Progress {
    path: Mutex<String>,
    /// The namespace id and the stored items.
    items: Mutex<(String, Vec<Item>)>,
}

/// The paths' failures, and what they saw.
struct Paths<'a> {
    failures: Vec<String>,
    tally: &'a Tally,
    progress: &'a Progress,
}

impl Paths<'_> {
    /// Runs `work` as a task of its own under [`PATH_BOUND`]; `None` when it panicked or
    /// overran (recorded as a failure).
    async fn bounded<T, F>(&mut self, path: &str, work: F) -> Option<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        path.clone_into(&mut self.progress.path.lock().expect("progress"));
        let task = tokio::spawn(work);
        let abort = task.abort_handle();
        match tokio::time::timeout(PATH_BOUND, task).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(e)) if e.is_panic() => {
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                self.tally.note(path, "panic");
                self.failures.push(format!("{path}: panicked: {message}"));
                None
            }
            Ok(Err(e)) => {
                self.failures.push(format!("{path}: task failed: {e}"));
                None
            }
            Err(_) => {
                abort.abort();
                self.tally.note(path, "overran");
                self.failures
                    .push(format!("{path}: no answer within {PATH_BOUND:?}"));
                None
            }
        }
    }

    /// As [`Paths::bounded`] for a fallible path, noting whether it ended well or with which
    /// error.
    async fn result<T, E, F>(&mut self, path: &str, work: F) -> Option<T>
    where
        T: Send + 'static,
        E: std::fmt::Debug + Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        match self.bounded(path, work).await? {
            Ok(value) => {
                self.tally.note(path, "ok");
                Some(value)
            }
            Err(e) => {
                self.tally.note(path, &variant(&e));
                None
            }
        }
    }
}

/// The variant name of an error's `Debug` form.
fn variant(e: &impl std::fmt::Debug) -> String {
    let text = format!("{e:?}");
    let end = text.find([' ', '(', '{']).unwrap_or(text.len());
    text[..end].to_owned()
}

async fn body(case: &Case, tally: &Tally, progress: &Progress) -> Result<(), String> {
    let clock = ManualClock::new(world::WRITTEN_AT - 1_000);
    let store = Store::with_clock(Arc::new(clock.clone()));
    let table = dynalimit_tests::unique_table_name();
    let builder_of = |table: &str| {
        Repository::builder()
            .in_memory_store(&store)
            .clock(Arc::new(clock.clone()))
            .stack(table.to_owned())
            .namespace(NAMESPACE)
            .fast_path(case.fast_path)
    };
    let repo = builder_of(&table)
        .open()
        .await
        .expect("the case's table opens");
    let ns = repo.namespace_id().to_owned();
    let client = store.client();
    let built = hostile::store_case(&client, &table, &ns, case).await;
    tally.note(
        "put",
        if built.refused == 0 {
            "all stored"
        } else {
            "some refused"
        },
    );
    let stored = dynalimit_tests::scan_table(&client, &table).await;
    *progress.items.lock().expect("progress") = (ns.clone(), stored.clone());
    // An untouched copy of the table, for the count at the end.
    let pristine = dynalimit_tests::unique_table_name();
    dynalimit_repository::create_table(&client, &pristine)
        .await
        .expect("the copy's table");
    for item in &stored {
        client
            .put_item()
            .table_name(&pristine)
            .set_item(Some(item.clone()))
            .send()
            .await
            .expect("a stored item is stored again");
    }
    clock.set_epoch_millis(T0);

    let mut paths = Paths {
        failures: Vec::new(),
        tally,
        progress,
    };
    let limiter = RateLimiter::with_on_unavailable(repo.clone(), OnUnavailable::Block);
    let consumed = case.world.consumed().to_owned();
    let limits = case.world.limits();

    let reopen = builder_of(&table);
    paths
        .result("open again", async move { reopen.open().await })
        .await;
    for path in ["acquire", "acquire again", "acquire a third time"] {
        let (l, c) = (limiter.clone(), consumed.clone());
        paths
            .result(path, async move {
                let lease = l.acquire(CHILD, RESOURCE, [(c, 1)]).await?;
                lease.commit().await
            })
            .await;
        clock.advance(Duration::from_millis(700));
    }
    let (l, c, explicit) = (limiter.clone(), consumed.clone(), limits.clone());
    paths
        .result("acquire with explicit limits", async move {
            let lease = l
                .acquire(CHILD, RESOURCE, [(c, 1)])
                .limits(explicit)
                .await?;
            lease.rollback().await
        })
        .await;
    let (l, c) = (limiter.clone(), consumed.clone());
    paths
        .result("acquire on the parent", async move {
            let lease = l.acquire(PARENT, RESOURCE, [(c, 1)]).await?;
            lease.commit().await
        })
        .await;
    let l = limiter.clone();
    paths
        .result("available", async move {
            l.available(CHILD, RESOURCE, &[]).await
        })
        .await;
    let (l, explicit) = (limiter.clone(), limits.clone());
    paths
        .result("balances", async move {
            l.balances(CHILD, RESOURCE, &explicit).await
        })
        .await;
    let (l, c) = (limiter.clone(), consumed.clone());
    paths
        .result("time until available", async move {
            l.time_until_available(CHILD, RESOURCE, [(c, 1)], &[]).await
        })
        .await;
    let l = limiter.clone();
    paths
        .result("pause", async move {
            l.pause(CHILD, RESOURCE, Duration::from_secs(1)).await
        })
        .await;
    let l = limiter.clone();
    paths
        .result("paused until", async move {
            l.paused_until(CHILD, RESOURCE).await
        })
        .await;
    clock.advance(Duration::from_secs(2));
    let r = repo.clone();
    paths
        .result("reset", async move {
            r.reset_bucket(CHILD, RESOURCE, &OperationOptions::new())
                .await
        })
        .await;
    let (r, c) = (repo.clone(), consumed.clone());
    paths
        .result("top-up", async move {
            r.top_up(CHILD, RESOURCE, [(c, 1)], &OperationOptions::new())
                .await
        })
        .await;
    reads(&mut paths, &repo, &ns, &stored).await;
    aggregate(&mut paths, &client, &table, &clock, &built.world, &stored).await;

    // An hour later: every stamp written before has lapsed; count what a minute admits, on
    // the items as the paths left them and on an untouched copy (a reset or a proactive refill
    // of the paths may have repaired what the changes broke).
    clock.advance(LATER);
    let before = oracle::allowance(&stored, &ns, &consumed, STEP * COUNTED);
    let after = oracle::allowance(
        &dynalimit_tests::scan_table(&client, &table).await,
        &ns,
        &consumed,
        STEP * COUNTED,
    );
    count(
        &mut paths,
        "after the paths",
        &limiter,
        &consumed,
        &clock,
        before.max(after),
    )
    .await;
    // The copy opens as the table did, unless the changes broke what opening reads (the
    // version record, the namespace registry): a typed error the paths saw already.
    if let Ok(copy) = builder_of(&pristine).open().await {
        let limiter = RateLimiter::with_on_unavailable(copy, OnUnavailable::Block);
        let allowed = oracle::allowance(&stored, &ns, &consumed, STEP * COUNTED);
        count(
            &mut paths,
            "untouched",
            &limiter,
            &consumed,
            &clock,
            allowed,
        )
        .await;
    }
    paths
        .failures
        .retain(|failure| match known::explain(&stored, &ns, failure) {
            Some(what) => {
                tally.note("known", what);
                false
            }
            None => true,
        });
    if paths.failures.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}\nstored items:\n{}",
        paths.failures.join("\n"),
        describe(&stored)
    ))
}

/// Acquires of one token of `limit` on the child's bucket, [`COUNTED`] of them [`STEP`]
/// apart; more admitted than `allowed` is a failure.
async fn count(
    paths: &mut Paths<'_>,
    copy: &str,
    limiter: &RateLimiter,
    limit: &str,
    clock: &ManualClock,
    allowed: Allowance,
) {
    let mut admitted = 0u32;
    for _ in 0..COUNTED {
        let (l, c) = (limiter.clone(), limit.to_owned());
        let outcome = paths
            .bounded("counted acquire", async move {
                match l.acquire(CHILD, RESOURCE, [(c, 1)]).await {
                    Ok(lease) => {
                        let _ = lease.commit().await;
                        true
                    }
                    Err(_) => false,
                }
            })
            .await;
        admitted += u32::from(outcome == Some(true));
        clock.advance(STEP);
    }
    paths.tally.note(
        "counted acquires",
        match allowed {
            Allowance::Unbounded(_) => "unbounded by the stored limits",
            Allowance::Bounded(_) if admitted == 0 => "none admitted",
            Allowance::Bounded(_) => "some admitted",
        },
    );
    if let Allowance::Bounded(max) = allowed
        && u64::from(admitted) > max
    {
        paths.failures.push(format!(
            "{admitted} of {COUNTED} acquires admitted in {:?} ({copy}); the stored limits \
             allow {max}",
            STEP * COUNTED
        ));
    }
}

/// How many items of namespace `ns`'s partition among `stored` a listing may report: those
/// whose sort key `sk` accepts, and those carrying the key of the `index` it reads (a writer
/// of the namespace may give any of its items index keys; another namespace's items must not
/// be reported).
fn own(stored: &[Item], ns: &str, sk: impl Fn(&str) -> bool, index: &str) -> usize {
    let prefix = format!("{ns}/");
    stored
        .iter()
        .filter(|item| {
            let text = |name| match item.get(name) {
                Some(AttributeValue::S(s)) => s.as_str(),
                _ => "",
            };
            text("PK").starts_with(&prefix) && (sk(text("SK")) || item.contains_key(index))
        })
        .count()
}

/// Every read of entities, configuration, usage, audit, namespaces and the version record;
/// a listing read through an index holds no more than the namespace's own items (`stored`).
async fn reads(paths: &mut Paths<'_>, repo: &Repository, ns: &str, stored: &[Item]) {
    let r = repo.clone();
    paths
        .result("entity", async move { r.get_entity(CHILD).await })
        .await;
    let r = repo.clone();
    paths
        .result("parent", async move { r.parent(CHILD).await })
        .await;
    let r = repo.clone();
    let children = paths
        .result("children", async move { r.children(PARENT).await })
        .await;
    let metas = own(stored, ns, |sk| sk == "#META", "GSI1PK");
    if let Some(found) = children.filter(|c| c.len() > metas) {
        paths.failures.push(format!(
            "children: {} entities listed, the namespace holds {metas} META items",
            found.len()
        ));
    }
    let r = repo.clone();
    paths
        .result("limits", async move { r.get_limits(CHILD, RESOURCE).await })
        .await;
    let r = repo.clone();
    paths
        .result("resolved limits", async move {
            r.resolve_limits(CHILD, RESOURCE).await
        })
        .await;
    let r = repo.clone();
    paths
        .result(
            "access",
            async move { r.resolve_access(CHILD, RESOURCE).await },
        )
        .await;
    let r = repo.clone();
    paths
        .result("resource defaults", async move {
            r.get_resource_defaults(RESOURCE).await
        })
        .await;
    let r = repo.clone();
    paths
        .result(
            "system defaults",
            async move { r.get_system_defaults().await },
        )
        .await;
    let r = repo.clone();
    paths
        .result("resources with defaults", async move {
            r.list_resources_with_defaults().await
        })
        .await;
    let r = repo.clone();
    paths
        .result("resources with entity limits", async move {
            r.list_resources_with_entity_configs().await
        })
        .await;
    let r = repo.clone();
    let listed = paths
        .result("entities with limits", async move {
            r.list_entities_with_custom_limits(RESOURCE, 100, None)
                .await
        })
        .await;
    let configs = own(stored, ns, |sk| sk.starts_with("#CONFIG#"), "GSI3PK");
    if let Some((found, _)) = listed.filter(|(l, _)| l.len() > configs) {
        paths.failures.push(format!(
            "entities with limits: {} listed, the namespace holds {configs} entity configurations",
            found.len()
        ));
    }
    for (path, query) in [
        ("usage of the entity", UsageQuery::entity(CHILD)),
        (
            "usage of the entity on the resource",
            UsageQuery::entity(CHILD).with_resource(RESOURCE),
        ),
        ("usage of the resource", UsageQuery::resource(RESOURCE)),
    ] {
        let (r, q) = (repo.clone(), query.clone());
        let page = paths
            .result(path, async move { r.usage_snapshots(&q, 100, None).await })
            .await;
        let snapshots = own(stored, ns, |sk| sk.starts_with("#USAGE#"), "GSI2PK");
        if let Some(page) = page.filter(|p| p.snapshots.len() > snapshots) {
            paths.failures.push(format!(
                "{path}: {} snapshots reported, the namespace holds {snapshots}",
                page.snapshots.len()
            ));
        }
        let r = repo.clone();
        paths
            .result(
                "usage summary",
                async move { r.usage_summary(&query).await },
            )
            .await;
    }
    for entity in [CHILD, "$SYSTEM"] {
        let r = repo.clone();
        paths
            .result(
                "audit",
                async move { r.audit_events(entity, 100, None).await },
            )
            .await;
    }
    let r = repo.clone();
    paths
        .result("namespaces", async move { r.list_namespaces().await })
        .await;
    let r = repo.clone();
    paths
        .result("version record", async move { r.version_record().await })
        .await;
}

/// The aggregator on stream records of the bucket items: each stored item inserted, and
/// modified from the world's item of the same key.
async fn aggregate(
    paths: &mut Paths<'_>,
    client: &Client,
    table: &str,
    clock: &ManualClock,
    world: &[(Role, Item)],
    stored: &[Item],
) {
    let mut records = Vec::new();
    for (i, new) in stored.iter().enumerate() {
        let key = dynalimit_format::item::key_of(new);
        let old = world
            .iter()
            .map(|(_, item)| item)
            .find(|item| dynalimit_format::item::key_of(item) == key);
        let seq = format!("{:021}", 1_000 + 2 * i);
        let insert = StreamRecord::assemble(
            format!("insert-{i}"),
            "INSERT",
            Some(&seq),
            None,
            Some(new.clone()),
        );
        records.extend(insert.ok());
        if let Some(old) = old {
            let seq = format!("{:021}", 1_001 + 2 * i);
            let modify = StreamRecord::assemble(
                format!("modify-{i}"),
                "MODIFY",
                Some(&seq),
                Some(old.clone()),
                Some(new.clone()),
            );
            records.extend(modify.ok());
        }
    }
    let pure = records.clone();
    paths
        .bounded("aggregator's extract", async move {
            processor::extract(&pure);
        })
        .await;
    let aggregator = Aggregator::with_clock(
        client.clone(),
        Settings::new(table),
        Arc::new(clock.clone()),
    );
    let report = paths
        .bounded(
            "aggregator",
            async move { aggregator.process(&records).await },
        )
        .await;
    if let Some(report) = report {
        paths.tally.note(
            "aggregator",
            if report.errors.is_empty() {
                "ok"
            } else {
                "errors reported"
            },
        );
    }
}

/// The items, one per line, long values cut.
fn describe(items: &[Item]) -> String {
    let mut out = String::new();
    for item in items {
        let mut attrs: Vec<(&String, &AttributeValue)> = item.iter().collect();
        attrs.sort_by_key(|(k, _)| *k);
        let fields: Vec<String> = attrs
            .iter()
            .map(|(k, v)| {
                let mut text = format!("{v:?}");
                if text.len() > 120 {
                    let cut = (0..=120)
                        .rev()
                        .find(|i| text.is_char_boundary(*i))
                        .unwrap_or(0);
                    text.truncate(cut);
                    text.push('…');
                }
                format!("{k}={text}")
            })
            .collect();
        let _ = writeln!(out, "  {{{}}}", fields.join(", "));
    }
    out
}
