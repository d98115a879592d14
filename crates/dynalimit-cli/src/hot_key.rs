//! `dynalimit bench --hot-key`: admitted acquires per second on one hot entity as its bucket
//! doubles from 1 to 32 shards, under DynamoDB's per-partition write limit.
//!
//! DynamoDB Local accepts any rate on one key, so the run puts a
//! [`ThrottleProxy`](dynalimit_local::throttle::ThrottleProxy) in front of it: each partition
//! key (each shard of a bucket is its own key) sustains `--partition-rate` writes per second
//! and the proxy answers `ProvisionedThroughputExceededException` beyond that, as DynamoDB
//! does at about 1000. The default rate is lower than DynamoDB's so that the curve stays
//! below what the client machine can drive for longer; the proportions are DynamoDB's.
//!
//! For each shard count, a fresh entity's bucket is split to that count before the
//! measurement (each split creates the new shards with half of what the older ones hold);
//! every shard is then filled by an operator's reset on the emulator directly
//! (`--cold-shards` leaves the split's balances), then the load is warmed for
//! two seconds, then `--tasks` concurrent tasks acquire
//! `rpm=1` and commit for `--hot-key-seconds`. The limits are far above what a run spends, so
//! only the partitions bind. After each step every shard is read back: the consumption the
//! table recorded must equal the acquires the client counted as admitted (nothing admitted
//! without being debited, nothing debited twice). The same load on another entity with as many
//! shards, straight at the emulator, gives what the client machine can drive at that count.

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
use dynalimit_repository::aws::AwsSettings;
use dynalimit_repository::{OperationOptions, Repository};

/// Options of the hot-key curve (`dynalimit bench --hot-key`).
#[derive(Debug, Args)]
pub(crate) struct HotKeyArgs {
    /// Measure admitted acquires per second on one hot entity as its bucket doubles from 1 to
    /// 32 shards, each shard limited to `--partition-rate` writes per second (instead of the
    /// latency cases).
    #[arg(long)]
    pub(crate) hot_key: bool,
    /// Writes per second one partition key sustains in the hot-key curve (DynamoDB: 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    partition_rate: u32,
    /// Shard counts of the hot-key curve (comma-separated powers of two up to 32).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    shards: Vec<u32>,
    /// Measured seconds per shard count.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    hot_key_seconds: u64,
    /// Concurrent acquiring tasks in the hot-key curve.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    tasks: u64,
    /// Measure the shards as the splits left them (by default an operator's reset fills
    /// every shard before the measurement).
    #[arg(long)]
    cold_shards: bool,
    /// Write the curve as an SVG plot to this file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

const RESOURCE: &str = "model";

/// One point of the curve.
#[derive(Debug, Clone)]
struct Point {
    shards: u32,
    admitted_per_s: f64,
    /// The same load with no throttling, on another entity with as many shards.
    ceiling_per_s: f64,
    /// Acquires that failed (throttled past the client's retries).
    failed: u64,
    /// Requests the proxy refused during the step.
    throttled: u64,
    /// Requests the proxy forwarded during the step.
    forwarded: u64,
    /// Admitted acquires of the entity, warm-up included.
    admitted: u64,
    /// The consumption the shards recorded, in acquires.
    recorded: f64,
}

impl Point {
    fn conserved(&self) -> bool {
        (self.recorded - self.admitted as f64).abs() < f64::EPSILON
    }

    /// 0.8 x shards x the partition rate.
    fn target(&self, rate: f64) -> f64 {
        0.8 * rate * f64::from(self.shards)
    }

    /// Whether the target is reached, or the ceiling when the target is above it.
    fn met(&self, rate: f64) -> bool {
        self.admitted_per_s >= self.target(rate).min(self.ceiling_per_s)
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
        !args.shards.is_empty()
            && args
                .shards
                .iter()
                .all(|s| s.is_power_of_two() && (1..=32).contains(s)),
        "--shards takes powers of two between 1 and 32"
    );
    if !json_out {
        eprintln!("Starting the endpoint...");
    }
    let target = Target::from_settings(settings).await?;
    let outcome = curve(args, &target, stack, json_out).await;
    target.stop().await;
    let points = outcome?;
    let rate = f64::from(args.partition_rate);
    if json_out {
        let report = HotKeyReport {
            machine: crate::output::bench::Machine::this_host(),
            partition_writes_per_s: args.partition_rate,
            tasks: args.tasks,
            seconds_per_step: args.hot_key_seconds,
            points: points
                .iter()
                .map(|p| HotKeyPoint {
                    shards: p.shards,
                    admitted_per_s: p.admitted_per_s.round(),
                    target_per_s: p.target(rate).round(),
                    ceiling_per_s: p.ceiling_per_s.round(),
                    met: p.met(rate),
                    failed: p.failed,
                    throttled_requests: p.throttled,
                    forwarded_requests: p.forwarded,
                    admitted: p.admitted,
                    recorded: p.recorded,
                    conserved: p.conserved(),
                })
                .collect(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "\nhot key: one entity, {} tasks, {} s per step, each shard {} writes/s\n",
            args.tasks, args.hot_key_seconds, args.partition_rate
        );
        println!(
            "| shards | admitted/s | shards x rate | target (0.8x) | ceiling (no throttling) | met | failed acquires | throttled requests | recorded = admitted |"
        );
        println!("|---:|---:|---:|---:|---:|---|---:|---:|---|");
        for p in &points {
            println!(
                "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} |",
                p.shards,
                p.admitted_per_s,
                rate * f64::from(p.shards),
                p.target(rate),
                p.ceiling_per_s,
                if p.met(rate) { "yes" } else { "no" },
                p.failed,
                p.throttled,
                if p.conserved() {
                    format!("yes ({})", p.admitted)
                } else {
                    format!("NO: {} admitted, {} recorded", p.admitted, p.recorded)
                }
            );
        }
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, plot(&points, rate))
            .with_context(|| format!("writing {}", path.display()))?;
        if !json_out {
            eprintln!("plot written to {}", path.display());
        }
    }
    anyhow::ensure!(
        points.iter().all(Point::conserved),
        "the recorded consumption differs from the admitted acquires"
    );
    Ok(())
}

async fn curve(
    args: &HotKeyArgs,
    target: &Target,
    stack: &str,
    json_out: bool,
) -> anyhow::Result<Vec<Point>> {
    let direct = open(target.client(None).await?, stack).await?;
    // Stored as well as passed with each acquire: the reset that fills the shards reads them.
    direct.set_system_defaults(&limits(), None).await?;
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
    Step::new(&direct, "warm-up", 4)
        .await?
        .load(
            args.tasks,
            Duration::from_secs(3),
            Duration::from_millis(100),
            || (0, 0),
        )
        .await;

    let mut points = Vec::new();
    for &shards in &args.shards {
        let ceiling_per_s = Step::new(&direct, &format!("free-{shards}"), shards)
            .await?
            .load(args.tasks, warm_up, seconds, || (0, 0))
            .await
            .0;
        let entity = format!("hot-{shards}");
        let mut step = Step::new(&throttled, &entity, shards).await?;
        if !args.cold_shards {
            step.settle(&direct, shards).await?;
        }
        let (admitted_per_s, failed, (throttled_n, forwarded_n)) = step
            .load(args.tasks, warm_up, seconds, || {
                (proxy.throttled(), proxy.forwarded())
            })
            .await;
        // Read back through the emulator directly: the proxy would charge the reads.
        let recorded = recorded(&direct, &entity, shards).await?;
        let point = Point {
            shards,
            admitted_per_s,
            ceiling_per_s,
            failed,
            throttled: throttled_n,
            forwarded: forwarded_n,
            admitted: step.admitted.load(Ordering::Relaxed),
            recorded,
        };
        if !json_out {
            eprintln!(
                "  {shards:>2} shards: {admitted_per_s:>6.0} admitted/s (no throttling: \
                 {ceiling_per_s:.0}), {failed} failed, {throttled_n} throttled requests"
            );
        }
        points.push(point);
    }
    Ok(points)
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

impl Step {
    /// Creates the entity's bucket and splits it to `shards`.
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

    /// Fills every one of the `shards` shards through `direct` (no throttling) with an
    /// operator's reset.
    async fn settle(&self, direct: &Repository, shards: u32) -> anyhow::Result<()> {
        direct
            .reset_bucket(&self.entity, RESOURCE, &OperationOptions::new())
            .await?;
        let store = direct.buckets();
        for shard in 0..shards {
            let key = BucketKey::new(self.entity.as_str(), RESOURCE, shard);
            let filled = store
                .read(&key)
                .await?
                .and_then(|i| i.limits.get("rpm").map(|l| l.tk > 0));
            anyhow::ensure!(
                filled == Some(true),
                "shard {shard} of {} holds no tokens after the reset",
                self.entity
            );
        }
        Ok(())
    }

    /// `tasks` tasks acquiring without a pause: unmeasured for `warm_up`, then measured for
    /// `length`, the load never stopping between the two (a pause would let the partitions
    /// refill their burst). Admitted acquires per second and failures of the measured part,
    /// and `probe`'s reading over it.
    async fn load<P: Fn() -> (u64, u64)>(
        &mut self,
        tasks: u64,
        warm_up: Duration,
        length: Duration,
        probe: P,
    ) -> (f64, u64, (u64, u64)) {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
        let workers: Vec<_> = (0..tasks)
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
        tokio::time::sleep(warm_up).await;
        let mark = |at: Duration| {
            let (a, b) = probe();
            (
                at,
                ok.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed),
                a,
                b,
            )
        };
        let before = mark(SystemClock.monotonic());
        first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        tokio::time::sleep(length).await;
        let after = mark(SystemClock.monotonic());
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            let _ = worker.await;
        }
        if let Some(e) = first_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            eprintln!("    first failure while measured: {e}");
        }
        self.admitted
            .fetch_add(ok.load(Ordering::Relaxed), Ordering::Relaxed);
        let seconds = (after.0 - before.0).as_secs_f64();
        (
            (after.1 - before.1) as f64 / seconds,
            after.2 - before.2,
            (after.3 - before.3, after.4 - before.4),
        )
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
                admitted_per_s: 45.0 * f64::from(shards),
                ceiling_per_s: 1000.0,
                failed: 0,
                throttled: 0,
                forwarded: 0,
                admitted: 0,
                recorded: 0.0,
            })
            .collect();
        let svg = plot(&points, 50.0);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("no throttling"));
    }
}
