//! `dynalimit bench --hot-key`: admitted acquires per second on one hot entity whose bucket
//! starts as one shard and splits on its own, under DynamoDB's per-partition write limit.
//!
//! DynamoDB Local accepts any rate on one key, so the run puts a
//! [`ThrottleProxy`] in front of it: each partition
//! key (each shard of a bucket is its own key) sustains `--partition-rate` writes per second
//! and the proxy answers `ProvisionedThroughputExceededException` beyond that, as DynamoDB
//! does at about 1000. The default rate is lower than DynamoDB's so that the curve stays
//! below what the client machine can drive for longer; the proportions are DynamoDB's.
//!
//! `--tasks` concurrent tasks acquire `rpm=1` and commit on one fresh entity, without a
//! pause, through the proxy. Nothing else touches the hot bucket: it is created by the first
//! acquire, as one shard, and every split is the library's own (sustained throttling of
//! shard 0, or its write capacity). Shard 0's count is read every 100 ms straight from the
//! emulator; each count the bucket holds is measured from a quarter second after it was
//! reached until the next split. The run ends once a count has held for `--hot-key-seconds`
//! (or at `--max-shards`), or after five minutes. The limits are far above what a run spends,
//! so only the partitions bind. At the end every shard is read back: the consumption the
//! table recorded must equal the acquires the client counted as admitted (nothing admitted
//! without being debited, nothing debited twice). The same load on another entity split to
//! each count beforehand, through a second proxy that refuses nothing, gives what the client
//! machine, the proxy and the emulator drive at that count (the ceiling).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::output::bench::{HotKeyPoint, HotKeyReport};
use anyhow::Context as _;
use clap::Args;
use dynalimit::{Limit, RateLimiter};
use dynalimit_core::{Clock as _, SystemClock};
use dynalimit_demo::Target;
use dynalimit_format::bucket::BucketKey;
use dynalimit_local::throttle::{PartitionLimits, ThrottleProxy};
use dynalimit_repository::Repository;
use dynalimit_repository::aws::AwsSettings;

/// Options of the hot-key curve (`dynalimit bench --hot-key`).
#[derive(Debug, Args)]
pub(crate) struct HotKeyArgs {
    /// Measure admitted acquires per second on one hot entity as its bucket doubles from 1 to
    /// 32 shards, each shard limited to `--partition-rate` writes per second (instead of the
    /// latency cases).
    #[arg(long)]
    pub(crate) hot_key: bool,
    /// Writes per second one partition key sustains in the hot-key curve and the mixed run
    /// (DynamoDB: 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) partition_rate: u32,
    /// The shard count at which the hot-key run ends (a power of two up to 32).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=32))]
    max_shards: u32,
    /// Seconds a shard count must hold, measured, for the hot-key run to end there (also the
    /// measured seconds of each ceiling).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    hot_key_seconds: u64,
    /// Concurrent acquiring tasks in the hot-key run.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    tasks: u64,
    /// Write the curve as an SVG plot to this file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

const RESOURCE: &str = "model";

/// One shard count the hot bucket held.
#[derive(Debug, Clone)]
struct Point {
    shards: u32,
    /// Measured seconds at this count.
    seconds: f64,
    admitted_per_s: f64,
    /// The same load with no throttling, on another entity split to as many shards.
    ceiling_per_s: f64,
    /// Acquires that failed (throttled past the client's retries).
    failed: u64,
    /// Requests the proxy refused while measured.
    throttled: u64,
    /// Requests the proxy forwarded while measured.
    forwarded: u64,
}

impl Point {
    /// 0.8 x shards x the partition rate.
    fn target(&self, rate: f64) -> f64 {
        0.8 * rate * f64::from(self.shards)
    }

    /// Whether the target is reached, or the ceiling when the target is above it.
    fn met(&self, rate: f64) -> bool {
        self.admitted_per_s >= self.target(rate).min(self.ceiling_per_s)
    }
}

/// What the hot entity's run gave.
struct Run {
    points: Vec<Point>,
    /// Every admitted acquire of the hot entity.
    admitted: u64,
    /// The consumption its shards recorded, in acquires.
    recorded: f64,
}

impl Run {
    fn conserved(&self) -> bool {
        (self.recorded - self.admitted as f64).abs() < f64::EPSILON
    }
}

/// Runs the curve.
pub(crate) async fn run(
    args: &HotKeyArgs,
    settings: &AwsSettings,
    stack: &str,
    json_out: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.max_shards.is_power_of_two(),
        "--max-shards takes a power of two between 1 and 32"
    );
    if !json_out {
        eprintln!("Starting the endpoint...");
    }
    let target = Target::from_settings(settings).await?;
    let outcome = curve(args, &target, stack, json_out).await;
    target.stop().await;
    let run = outcome?;
    let rate = f64::from(args.partition_rate);
    let splits = u32::try_from(run.points.len().saturating_sub(1)).unwrap_or(u32::MAX);
    if json_out {
        let report = HotKeyReport {
            machine: crate::output::bench::Machine::this_host(),
            partition_writes_per_s: args.partition_rate,
            tasks: args.tasks,
            steady_seconds: args.hot_key_seconds,
            splits,
            points: run
                .points
                .iter()
                .map(|p| HotKeyPoint {
                    shards: p.shards,
                    seconds: (p.seconds * 10.0).round() / 10.0,
                    admitted_per_s: p.admitted_per_s.round(),
                    target_per_s: p.target(rate).round(),
                    ceiling_per_s: p.ceiling_per_s.round(),
                    met: p.met(rate),
                    failed: p.failed,
                    throttled_requests: p.throttled,
                    forwarded_requests: p.forwarded,
                })
                .collect(),
            admitted: run.admitted,
            recorded: run.recorded,
            conserved: run.conserved(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "\nhot key: one entity from one shard, {} tasks, each shard {} writes/s, {splits} \
             splits by the library\n",
            args.tasks, args.partition_rate
        );
        println!(
            "| shards | seconds | admitted/s | shards x rate | target (0.8x) | ceiling (no throttling) | met | failed acquires | throttled requests |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---|---:|---:|");
        for p in &run.points {
            println!(
                "| {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} |",
                p.shards,
                p.seconds,
                p.admitted_per_s,
                rate * f64::from(p.shards),
                p.target(rate),
                p.ceiling_per_s,
                if p.met(rate) { "yes" } else { "no" },
                p.failed,
                p.throttled,
            );
        }
        println!(
            "\nrecorded = admitted: {}",
            if run.conserved() {
                format!("yes ({})", run.admitted)
            } else {
                format!("NO: {} admitted, {} recorded", run.admitted, run.recorded)
            }
        );
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, plot(&run.points, rate))
            .with_context(|| format!("writing {}", path.display()))?;
        if !json_out {
            eprintln!("plot written to {}", path.display());
        }
    }
    anyhow::ensure!(
        run.conserved(),
        "the recorded consumption differs from the admitted acquires"
    );
    Ok(())
}

/// How long after a split its count is measured from: the split's own transaction and the
/// first slow passes on the new shards are not the count's steady state.
const SETTLE: Duration = Duration::from_millis(250);

/// How often shard 0's count is read.
const SAMPLE: Duration = Duration::from_millis(100);

/// The longest hot-key run.
const LONGEST: Duration = Duration::from_secs(300);

async fn curve(
    args: &HotKeyArgs,
    target: &Target,
    stack: &str,
    json_out: bool,
) -> anyhow::Result<Run> {
    let direct = open(target.client(None).await?, stack).await?;
    let proxy = ThrottleProxy::start(
        target.url(),
        PartitionLimits::new(dynalimit_format::attr::PK, args.partition_rate),
    )
    .await?;
    let throttled_target = Target::external(proxy.url());
    let throttled = open(throttled_target.client(None).await?, stack).await?;
    let seconds = Duration::from_secs(args.hot_key_seconds);
    let warm_up = Duration::from_secs(2);

    // The emulator's JIT warms on a load nobody measures.
    let warm = Step::new(&direct, "warm-up", 4).await?;
    warm.start(args.tasks)
        .stop_after(Duration::from_secs(3))
        .await;

    // What the client machine, the proxy and the emulator drive at each count, with no
    // throttling: the same path, through a proxy that refuses nothing.
    let open_proxy = ThrottleProxy::start(
        target.url(),
        PartitionLimits::new(dynalimit_format::attr::PK, u32::MAX),
    )
    .await?;
    let unthrottled = open(
        Target::external(open_proxy.url()).client(None).await?,
        stack,
    )
    .await?;
    let mut ceilings = std::collections::BTreeMap::new();
    let mut count = 1;
    while count <= args.max_shards {
        let step = Step::new(&unthrottled, &format!("free-{count}"), count).await?;
        let load = step.start(args.tasks);
        tokio::time::sleep(warm_up).await;
        let before = load.mark(|| (0, 0));
        tokio::time::sleep(seconds).await;
        let after = load.mark(|| (0, 0));
        load.stop().await;
        let ceiling = after.rate_since(&before);
        if !json_out {
            eprintln!("  ceiling at {count:>2} shards: {ceiling:.0} admitted/s");
        }
        ceilings.insert(count, ceiling);
        count *= 2;
    }

    // The hot entity: one shard, and the library alone from there.
    let entity = "hot";
    let step = Step::new(&throttled, entity, 1).await?;
    let load = step.start(args.tasks);
    let probe = || (proxy.throttled(), proxy.forwarded());
    let store = direct.buckets();
    let key = BucketKey::new(entity, RESOURCE, 0);
    let started = SystemClock.monotonic();
    // (count, the first sample at it)
    let mut samples: Vec<(u32, Mark)> = vec![(1, load.mark(probe))];
    loop {
        tokio::time::sleep(SAMPLE).await;
        let count = store.read(&key).await?.map_or(1, |img| img.shards());
        let mark = load.mark(probe);
        let at = mark.at;
        if !json_out && samples.last().is_some_and(|(last, _)| *last != count) {
            eprintln!(
                "  split to {count:>2} shards after {:.1} s",
                (at - started).as_secs_f64()
            );
        }
        samples.push((count, mark));
        let since = samples
            .iter()
            .rev()
            .take_while(|(c, _)| *c == count)
            .last()
            .map_or(at, |(_, m)| m.at);
        if at - since >= SETTLE + seconds || at - started >= LONGEST {
            break;
        }
    }
    load.stop().await;
    let points = stages(&samples, &ceilings);
    for p in &points {
        if !json_out {
            eprintln!(
                "  {:>2} shards: {:>6.0} admitted/s over {:.1} s (no throttling: {:.0}), {} \
                 failed, {} throttled requests",
                p.shards, p.admitted_per_s, p.seconds, p.ceiling_per_s, p.failed, p.throttled
            );
        }
    }
    let last = samples.last().map_or(1, |(c, _)| *c);
    // Read back through the emulator directly: the proxy would charge the reads.
    let recorded = recorded(&direct, entity, last).await?;
    Ok(Run {
        points,
        admitted: step.admitted.load(Ordering::Relaxed),
        recorded,
    })
}

/// The counts the samples went through, each measured from [`SETTLE`] after its first sample
/// to the first sample of the next count (the whole stage when it was shorter).
fn stages(samples: &[(u32, Mark)], ceilings: &std::collections::BTreeMap<u32, f64>) -> Vec<Point> {
    let mut points = Vec::new();
    let mut i = 0;
    while i < samples.len() {
        let count = samples[i].0;
        let end = samples[i..]
            .iter()
            .position(|(c, _)| *c != count)
            .map_or(samples.len() - 1, |n| i + n);
        let first = &samples[i].1;
        let last = &samples[end].1;
        let from = samples[i..=end]
            .iter()
            .map(|(_, m)| m)
            .find(|m| m.at >= first.at + SETTLE && m.at < last.at)
            .unwrap_or(first);
        if last.at > from.at {
            points.push(Point {
                shards: count,
                seconds: (last.at - from.at).as_secs_f64(),
                admitted_per_s: last.rate_since(from),
                ceiling_per_s: ceilings.get(&count).copied().unwrap_or(f64::INFINITY),
                failed: last.failed - from.failed,
                throttled: last.probe.0 - from.probe.0,
                forwarded: last.probe.1 - from.probe.1,
            });
        }
        if end == samples.len() - 1 {
            break;
        }
        i = end;
    }
    points
}

async fn open(client: aws_sdk_dynamodb::Client, stack: &str) -> anyhow::Result<Repository> {
    Repository::builder()
        .client(client)
        .stack(stack)
        .namespace("hot-key")
        .open()
        .await
        .context("opening the benchmark table")
}

/// Limits no run spends, hourly so that no bucket's TTL ends mid-run.
fn limits() -> [Limit; 1] {
    [Limit::per_hour("rpm", 1_000_000_000_000)]
}

/// One entity's bucket under load.
struct Step {
    limiter: RateLimiter,
    entity: String,
    admitted: Arc<AtomicU64>,
}

/// The counters of a load at one moment.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Duration,
    ok: u64,
    failed: u64,
    /// The proxy's refused and forwarded requests.
    probe: (u64, u64),
}

impl Mark {
    /// Admitted acquires per second from `earlier` to this mark.
    fn rate_since(&self, earlier: &Mark) -> f64 {
        let seconds = (self.at - earlier.at).as_secs_f64();
        if seconds > 0.0 {
            (self.ok - earlier.ok) as f64 / seconds
        } else {
            0.0
        }
    }
}

/// Tasks acquiring on one entity until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    first_error: Arc<std::sync::Mutex<Option<String>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    admitted: Arc<AtomicU64>,
}

impl Step {
    /// Creates the entity's bucket with one acquire, and splits it to `shards` (the ceiling's
    /// entities only: the hot entity starts at one).
    async fn new(repo: &Repository, entity: &str, shards: u32) -> anyhow::Result<Step> {
        let limiter = RateLimiter::new(repo.clone());
        limiter
            .acquire(entity, RESOURCE, [("rpm", 1)])
            .limits(limits())
            .await?
            .commit()
            .await?;
        let store = repo.buckets();
        let key = BucketKey::new(entity, RESOURCE, 0);
        let mut count = 1;
        while count < shards {
            let now = SystemClock.epoch_millis();
            let doubled = store.double_shards(&key, count, count * 2, now).await?;
            anyhow::ensure!(
                doubled.count == count * 2 && doubled.failed.is_empty(),
                "doubling {entity}'s bucket to {} shards failed",
                count * 2
            );
            count *= 2;
        }
        Ok(Step {
            limiter,
            entity: entity.to_string(),
            admitted: Arc::new(AtomicU64::new(1)),
        })
    }

    /// Starts `tasks` tasks acquiring and committing without a pause.
    fn start(&self, tasks: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
        let workers = (0..tasks)
            .map(|_| {
                let (limiter, entity) = (self.limiter.clone(), self.entity.clone());
                let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
                let first_error = first_error.clone();
                let fail = move |e: dynalimit::Error| {
                    failed.fetch_add(1, Ordering::Relaxed);
                    let mut first = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert_with(|| e.to_string());
                };
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let acquired = limiter
                            .acquire(&entity, RESOURCE, [("rpm", 1)])
                            .limits(limits())
                            .await;
                        match acquired {
                            Ok(lease) => match lease.commit().await {
                                Ok(()) => {
                                    ok.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => fail(e),
                            },
                            Err(e) => fail(e),
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            first_error,
            workers,
            admitted: self.admitted.clone(),
        }
    }
}

impl Load {
    /// The counters now, with `probe`'s reading.
    fn mark<P: Fn() -> (u64, u64)>(&self, probe: P) -> Mark {
        Mark {
            at: SystemClock.monotonic(),
            ok: self.ok.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            probe: probe(),
        }
    }

    /// Runs for `length`, then stops.
    async fn stop_after(self, length: Duration) {
        tokio::time::sleep(length).await;
        self.stop().await;
    }

    /// Stops the tasks, waits for them, and adds what they admitted to the step's count.
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            let _ = worker.await;
        }
        if let Some(e) = self
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            eprintln!("    first failure: {e}");
        }
        self.admitted
            .fetch_add(self.ok.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The `rpm` consumption every shard of `entity`'s bucket recorded, in acquires.
async fn recorded(repo: &Repository, entity: &str, shards: u32) -> anyhow::Result<f64> {
    let store = repo.buckets();
    let keys: Vec<BucketKey> = (0..shards)
        .map(|shard| BucketKey::new(entity, RESOURCE, shard))
        .collect();
    let images = futures::future::try_join_all(keys.iter().map(|key| store.read(key))).await?;
    let total: i64 = images
        .iter()
        .filter_map(|image| image.as_ref()?.limits.get("rpm"))
        .map(|l| l.tc)
        .sum();
    Ok(total as f64 / 1000.0)
}

/// The curve as an SVG line chart: admitted per second against shards (log scale), with the
/// target, the ideal and the client ceiling.
fn plot(points: &[Point], rate: f64) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let max_shards = points.iter().map(|p| p.shards).max().unwrap_or(1).max(2);
    let x_max = f64::from(max_shards).log2();
    let y_max = points
        .iter()
        .flat_map(|p| [p.admitted_per_s, p.ceiling_per_s])
        .filter(|v| v.is_finite())
        .chain([rate * f64::from(max_shards)])
        .fold(1.0, f64::max)
        * 1.1;
    let x = |shards: f64| left + shards.log2() / x_max * (w - left - right);
    let y = |v: f64| h - bottom - v / y_max * (h - top - bottom);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="14">Admitted acquires/s on one hot entity, each shard {rate:.0} writes/s</text>
"#,
        w / 2.0
    );
    let mut line = |points: &[(f64, f64)], colour: &str, dash: &str| {
        let path: Vec<String> = points
            .iter()
            .map(|(s, v)| format!("{:.1},{:.1}", x(*s), y(*v)))
            .collect();
        svg.push_str(&format!(
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>
"#,
            path.join(" ")
        ));
    };
    let shards: Vec<f64> = points.iter().map(|p| f64::from(p.shards)).collect();
    let ideal: Vec<(f64, f64)> = shards.iter().map(|s| (*s, s * rate)).collect();
    let target: Vec<(f64, f64)> = shards.iter().map(|s| (*s, 0.8 * s * rate)).collect();
    let ceiling: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.ceiling_per_s.is_finite())
        .map(|p| (f64::from(p.shards), p.ceiling_per_s))
        .collect();
    line(&ideal, "#999999", "2,4");
    line(&target, "#d62728", "6,4");
    line(&ceiling, "#2ca02c", "1,3");
    let measured: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (f64::from(p.shards), p.admitted_per_s))
        .collect();
    line(&measured, "#1f77b4", "none");
    for (s, v) in &measured {
        svg.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#1f77b4\"/>\n",
            x(*s),
            y(*v)
        ));
    }
    // Axes, ticks and legend.
    svg.push_str(&format!(
        "<line x1=\"{left}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{0}\" stroke=\"black\"/>\n",
        h - bottom,
        w - right
    ));
    for s in &shards {
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{s}</text>\n",
            x(*s),
            h - bottom + 18.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">shards (log scale)</text>\n",
        (left + w - right) / 2.0,
        h - 10.0
    ));
    for i in 0..=5 {
        let v = y_max / 1.1 * f64::from(i) / 5.0;
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            left - 6.0,
            y(v) + 4.0
        ));
    }
    let legend = [
        ("#1f77b4", "none", "admitted/s (measured)"),
        ("#d62728", "6,4", "target: 0.8 x shards x rate"),
        ("#999999", "2,4", "shards x rate"),
        ("#2ca02c", "1,3", "the same load, no throttling"),
    ];
    for (i, (colour, dash, label)) in legend.iter().enumerate() {
        let ly = top + 10.0 + 18.0 * i as f64;
        svg.push_str(&format!(
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>\n\
             <text x=\"{2}\" y=\"{3}\">{label}</text>\n",
            left + 10.0,
            left + 40.0,
            left + 46.0,
            ly + 4.0
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_places_each_measured_point_and_the_legend() {
        let points: Vec<Point> = [1u32, 2, 4]
            .iter()
            .map(|&shards| Point {
                shards,
                seconds: 2.0,
                admitted_per_s: 45.0 * f64::from(shards),
                ceiling_per_s: 1000.0,
                failed: 0,
                throttled: 0,
                forwarded: 0,
            })
            .collect();
        let svg = plot(&points, 50.0);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("no throttling"));
    }

    /// Samples every 100 ms: 50 admitted a second at one shard for a second, then 100 a
    /// second at two.
    #[test]
    fn each_count_is_measured_from_a_quarter_second_after_it_was_reached() {
        let samples: Vec<(u32, Mark)> = (0..=20u64)
            .map(|tenth| {
                let ok = if tenth <= 10 {
                    5 * tenth
                } else {
                    50 + 10 * (tenth - 10)
                };
                let mark = Mark {
                    at: Duration::from_millis(100 * tenth),
                    ok,
                    failed: tenth,
                    probe: (2 * tenth, 3 * tenth),
                };
                (if tenth < 10 { 1 } else { 2 }, mark)
            })
            .collect();
        let ceilings = [(1, 300.0), (2, 500.0)].into_iter().collect();
        let points = stages(&samples, &ceilings);
        let got: Vec<(u32, String, String, u64)> = points
            .iter()
            .map(|p| {
                let (seconds, rate) = (
                    format!("{:.1}", p.seconds),
                    format!("{:.0}", p.admitted_per_s),
                );
                (p.shards, seconds, rate, p.failed)
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, "0.7".to_owned(), "50".to_owned(), 7),
                (2, "0.7".to_owned(), "100".to_owned(), 7)
            ]
        );
        assert_eq!(points[1].ceiling_per_s, 500.0);
        assert_eq!((points[1].throttled, points[1].forwarded), (14, 21));
    }
}
