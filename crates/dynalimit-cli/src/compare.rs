//! `dynalimit bench --compare zae`: dynalimit and zae-limiter 0.17 measured on the same
//! DynamoDB Local in one run, side by side.
//!
//! dynalimit's latency cases that both libraries have (`warm-acquire`, `warm-cascade`,
//! `adjust`, `first-touch`, each on the hot and the many shape) and the admission case run
//! first, in the namespace `bench`. Then the bench script `python/zae_bench.py` (embedded in
//! the binary, written to a temporary file) runs in the Python of `--python` against the same
//! endpoint and table, in its own namespace `bench-zae` (registered here, since zae-limiter's
//! `Repository.connect` only reads): it stores the same limits, creates the same entities,
//! warms the same buckets and measures the same cases with the same definitions at the same
//! concurrencies (asyncio tasks). It counts requests with a `before-send` handler on its
//! client's events, checked first against requests of a known number, and measures client CPU
//! with `time.process_time_ns()` (the process's CPU clock: every thread, ended ones included)
//! where dynalimit reads the scheduler's run time of its live threads (the same kernel
//! accounting).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context as _;
use dynalimit_demo::{Target, print_table};
use dynalimit_repository::Repository;
use dynalimit_repository::aws::AwsSettings;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

use crate::bench::{self, AdmissionRun, BenchArgs, Figures, Op, Shape};
use crate::context::BadInput;
use crate::output::bench::{Case, CompareReport, Machine, Peer, Ratio};

/// The bench script, carried by the binary.
const SCRIPT: &str = include_str!("../python/zae_bench.py");

/// The peer's namespace.
const NAMESPACE: &str = "bench-zae";

/// The peer library, as its figures name it.
pub(crate) const PEER: &str = "zae-limiter";

/// The peer's release line the comparison is for.
pub(crate) const PEER_LINE: &str = "0.17.";

/// Where the interpreter is looked for when neither `--python` nor `DYNALIMIT_PYTHON` names
/// one (relative to the current directory: the venv `./scripts/python-env` creates).
const DEFAULT_PYTHON: &str = ".cache/venv-zae/bin/python";

/// Runs the comparison against the endpoint `settings` configure (with their region and
/// profile), or a fresh private DynamoDB Local when they configure none; `stack` is the table.
pub(crate) async fn run(
    args: &BenchArgs,
    settings: &AwsSettings,
    stack: &str,
) -> anyhow::Result<()> {
    bench::check_concurrency(args)?;
    let python = interpreter(
        args.python.as_deref(),
        std::env::var_os("DYNALIMIT_PYTHON").map(PathBuf::from),
    )?;
    if !args.json {
        eprintln!(
            "Starting the endpoint; dynalimit first, then zae-limiter with {}...",
            python.display()
        );
    }
    let target = Target::from_settings(settings).await?;
    let outcome = both(args, &python, &target, stack).await;
    target.stop().await;
    let report = outcome?;
    if args.json {
        let report = serde_json::to_value(&report)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// The interpreter: `flag` (`--python`), else `env` (`DYNALIMIT_PYTHON`), else
/// [`DEFAULT_PYTHON`]; an error saying how to get one when it is not a file.
pub(crate) fn interpreter(flag: Option<&Path>, env: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let (path, from) = match (flag, env.filter(|p| !p.as_os_str().is_empty())) {
        (Some(path), _) => (path.to_path_buf(), "--python"),
        (None, Some(path)) => (path, "DYNALIMIT_PYTHON"),
        (None, None) => (PathBuf::from(DEFAULT_PYTHON), "the default"),
    };
    if path.is_file() {
        return Ok(path);
    }
    Err(anyhow::Error::new(BadInput(format!(
        "--compare zae and --mixed need a Python with zae-limiter 0.17, and there is none at {} ({from}): \
         in a dynalimit checkout `./scripts/python-env` creates .cache/venv-zae; otherwise \
         create a virtualenv, `pip install zae-limiter==0.17.0` into it and pass its python \
         with --python PATH or DYNALIMIT_PYTHON",
        path.display()
    ))))
}

/// dynalimit's cases, then zae-limiter's, on `target`.
async fn both(
    args: &BenchArgs,
    python: &Path,
    target: &Target,
    stack: &str,
) -> anyhow::Result<CompareReport> {
    if !args.json {
        eprintln!("dynalimit:");
    }
    let ours = bench::measure(args, target, stack, &Op::COMPARED, true).await?;
    // zae-limiter's connect reads its namespace from the registry and registers none.
    Repository::builder()
        .client(target.client(None).await?)
        .stack(stack)
        .namespace(NAMESPACE)
        .open()
        .await
        .with_context(|| format!("registering the namespace {NAMESPACE}"))?;
    if !args.json {
        eprintln!("{PEER}:");
    }
    let peer = peer(args, python, target, stack).await?;
    let expected: Vec<(String, String, usize)> = ours
        .cases
        .iter()
        .map(|f| {
            let case = f.to_output();
            (case.op, case.shape, case.concurrency)
        })
        .collect();
    let got: Vec<(String, String, usize)> = peer
        .cases
        .iter()
        .map(|c| (c.op.clone(), c.shape.clone(), c.concurrency))
        .collect();
    anyhow::ensure!(
        expected == got,
        "the bench script measured {got:?}, not the cases {expected:?}"
    );
    let limit = bench::admission_limit();
    let dynalimit: Vec<Case> = ours.cases.iter().map(Figures::to_output).collect();
    let ratios = dynalimit
        .iter()
        .zip(&peer.cases)
        .map(|(d, z)| ratio(d, z))
        .collect();
    let admission = ours
        .admission
        .iter()
        .map(|run| run.to_output(bench::LIBRARY, &limit))
        .chain(peer.admission.iter().map(|run| run.to_output(PEER, &limit)))
        .collect();
    Ok(CompareReport {
        machine: Machine::this_host(),
        ops_per_case: args.ops,
        entities: args.entities,
        peer: Peer {
            library: PEER.to_owned(),
            version: peer.ready.version,
            python: peer.ready.python,
            cpu_measure: peer.ready.cpu_measure,
            check_requests_sent: peer.ready.request_check.sent,
            check_requests_counted: peer.ready.request_check.counted,
        },
        dynalimit,
        zae: peer.cases,
        ratios,
        admission,
    })
}

/// `zae / ours`, to two decimals; zero when `ours` is zero.
fn over(zae: f64, ours: f64) -> f64 {
    if ours == 0.0 {
        0.0
    } else {
        (zae / ours * 100.0).round() / 100.0
    }
}

fn ratio(ours: &Case, zae: &Case) -> Ratio {
    Ratio {
        op: ours.op.clone(),
        shape: ours.shape.clone(),
        concurrency: ours.concurrency,
        p50: over(zae.p50_us, ours.p50_us),
        p99: over(zae.p99_us, ours.p99_us),
        mean: over(zae.mean_us, ours.mean_us),
        ops_per_s: over(zae.ops_per_s, ours.ops_per_s),
        cpu_per_op: over(zae.cpu_us_per_op, ours.cpu_us_per_op),
        dynalimit_requests_per_op: ours.requests_per_op,
        zae_requests_per_op: zae.requests_per_op,
    }
}

/// One line the bench script writes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Ready(Ready),
    Case(Case),
    Admission(AdmissionRun),
    Done {},
    Error(String),
}

/// The script's first line.
#[derive(Debug, Deserialize)]
struct Ready {
    version: String,
    python: String,
    cpu_measure: String,
    request_check: RequestCheck,
}

/// The request counter's self-check.
#[derive(Debug, Deserialize)]
struct RequestCheck {
    sent: u64,
    counted: u64,
}

/// What the script measured.
#[derive(Debug)]
struct PeerRun {
    ready: Ready,
    cases: Vec<Case>,
    admission: Vec<AdmissionRun>,
}

/// A script the binary carries, written to a temporary file, removed on drop.
struct ScriptFile(PathBuf);

impl ScriptFile {
    /// Writes `text` to `{stem}-{pid}.py` in the temporary directory.
    fn write(stem: &str, text: &str) -> anyhow::Result<ScriptFile> {
        let path = std::env::temp_dir().join(format!("{stem}-{}.py", std::process::id()));
        std::fs::write(&path, text)
            .with_context(|| format!("writing the bench script to {}", path.display()))?;
        Ok(ScriptFile(path))
    }
}

impl Drop for ScriptFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The bench script running in `python`: its standard input, its lines, and its standard
/// error collected apart. The process is killed when this is dropped.
pub(crate) struct Script {
    pub(crate) child: tokio::process::Child,
    pub(crate) stdin: tokio::process::ChildStdin,
    pub(crate) lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
    _file: ScriptFile,
}

impl Script {
    /// Writes the bench script and starts it with `python`.
    pub(crate) fn spawn(python: &Path) -> anyhow::Result<Script> {
        let file = ScriptFile::write("dynalimit-zae-bench", SCRIPT)?;
        let mut child = tokio::process::Command::new(python)
            .arg(&file.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("running {}", python.display()))?;
        let stdin = child.stdin.take().context("the script's stdin")?;
        let mut stderr = child.stderr.take().context("the script's stderr")?;
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let lines = BufReader::new(child.stdout.take().context("the script's stdout")?).lines();
        Ok(Script {
            child,
            stdin,
            lines,
            stderr,
            _file: file,
        })
    }

    /// Writes one JSON line to the script.
    pub(crate) async fn send(&mut self, line: &serde_json::Value) -> anyhow::Result<()> {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        Ok(self.stdin.flush().await?)
    }

    /// Waits for the script to exit: its status and the last 20 lines of its standard error.
    pub(crate) async fn end(&mut self) -> anyhow::Result<(std::process::ExitStatus, String)> {
        let status = self.child.wait().await?;
        let stderr = (&mut self.stderr).await.unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().collect();
        Ok((status, lines[lines.len().saturating_sub(20)..].join("\n")))
    }
}

/// Runs the bench script and collects its lines.
async fn peer(
    args: &BenchArgs,
    python: &Path,
    target: &Target,
    stack: &str,
) -> anyhow::Result<PeerRun> {
    let limit_json = |l: &dynalimit::Limit| {
        json!({
            "name": l.name(),
            "capacity": l.capacity(),
            "refill_amount": l.refill_amount(),
            "refill_period_seconds": l.refill_period_seconds(),
        })
    };
    let request = json!({
        "endpoint": target.url(),
        "table": stack,
        "namespace": NAMESPACE,
        "entities": args.entities,
        "ops": args.ops,
        "concurrency": args.concurrency,
        "cases": Op::COMPARED.map(Op::name),
        "shapes": Shape::ALL.map(Shape::name),
        "resource": bench::RESOURCE,
        "limits": bench::bench_limits().iter().map(limit_json).collect::<Vec<_>>(),
        "admission": {
            "resource": bench::ADMISSION_RESOURCE,
            "limit": limit_json(&bench::admission_limit()),
            "seconds": args.admission_seconds,
        },
    });
    let mut script = Script::spawn(python)?;
    script.send(&request).await?;
    let mut ready = None;
    let mut cases = Vec::new();
    let mut admission = Vec::new();
    let mut failure = None;
    let mut done = false;
    while let Some(line) = script.lines.next_line().await? {
        let parsed: Line = match serde_json::from_str(&line) {
            Ok(parsed) => parsed,
            Err(e) => {
                failure = Some(format!("an unreadable line ({e}): {line}"));
                break;
            }
        };
        match parsed {
            Line::Ready(r) => {
                check_ready(&r)?;
                ready = Some(r);
            }
            Line::Case(case) => {
                if !args.json {
                    eprintln!(
                        "  {:<13} {:<4} c={:<3} p50 {:>7.0} us  {:>6.0} ops/s",
                        case.op, case.shape, case.concurrency, case.p50_us, case.ops_per_s
                    );
                }
                cases.push(case);
            }
            Line::Admission(run) => {
                if !args.json {
                    eprintln!(
                        "  {:<13} c={:<3} admitted {} rejected {} errors {}",
                        Op::Admission.name(),
                        run.concurrency,
                        run.admitted,
                        run.rejected,
                        run.errors
                    );
                }
                admission.push(run);
            }
            Line::Done {} => done = true,
            Line::Error(trace) => failure = Some(trace),
        }
    }
    let (status, stderr) = script.end().await?;
    let tail = |text: &str| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    if let Some(failure) = failure {
        anyhow::bail!("the zae-limiter bench script failed: {}", tail(&failure));
    }
    anyhow::ensure!(
        done && status.success(),
        "the zae-limiter bench script ended early ({status}): {stderr}"
    );
    Ok(PeerRun {
        ready: ready.context("the bench script never said it was ready")?,
        cases,
        admission,
    })
}

/// The peer's version is the one compared with, and its request counter counts each request
/// once.
fn check_ready(ready: &Ready) -> anyhow::Result<()> {
    anyhow::ensure!(
        ready.version.starts_with(PEER_LINE),
        "--compare zae is for {PEER} {PEER_LINE}x; the Python has {}",
        ready.version
    );
    let check = &ready.request_check;
    anyhow::ensure!(
        check.sent == check.counted,
        "{PEER}'s request counter saw {} of {} requests",
        check.counted,
        check.sent
    );
    Ok(())
}

fn print_report(report: &CompareReport) {
    let m = &report.machine;
    println!(
        "\nMachine: {} CPUs, {}, {} GiB",
        m.cpus, m.cpu_model, m.memory_gib
    );
    let peer = &report.peer;
    println!(
        "dynalimit against {} {} (Python {}), the same DynamoDB Local, {} operations per case; \
         x = {} / dynalimit",
        peer.library, peer.version, peer.python, report.ops_per_case, peer.library
    );
    let mut rows = vec![[
        "operation".to_string(),
        "shape".into(),
        "conc".into(),
        "p50 us".into(),
        "zae".into(),
        "x".into(),
        "p99 us".into(),
        "zae".into(),
        "x".into(),
        "ops/s".into(),
        "zae".into(),
        "req/op".into(),
        "zae".into(),
        "cpu us/op".into(),
        "zae".into(),
        "x".into(),
    ]];
    for ((d, z), r) in report.dynalimit.iter().zip(&report.zae).zip(&report.ratios) {
        rows.push([
            d.op.clone(),
            d.shape.clone(),
            d.concurrency.to_string(),
            format!("{:.0}", d.p50_us),
            format!("{:.0}", z.p50_us),
            format!("{:.2}", r.p50),
            format!("{:.0}", d.p99_us),
            format!("{:.0}", z.p99_us),
            format!("{:.2}", r.p99),
            format!("{:.0}", d.ops_per_s),
            format!("{:.0}", z.ops_per_s),
            format!("{:.2}", d.requests_per_op),
            format!("{:.2}", z.requests_per_op),
            format!("{:.1}", d.cpu_us_per_op),
            format!("{:.1}", z.cpu_us_per_op),
            format!("{:.2}", r.cpu_per_op),
        ]);
    }
    print_table(&rows);
    println!();
    bench::print_admission(&report.admission);
    println!(
        "\nClient CPU: dynalimit, the scheduler's run time of this process's threads; {}, {}.",
        peer.library, peer.cpu_measure
    );
    println!(
        "{} requests counted by a before-send handler ({} of {} check requests seen).",
        peer.library, peer.check_requests_counted, peer.check_requests_sent
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_comes_from_the_flag_then_the_environment_then_the_default() {
        let this = std::env::current_exe().unwrap();
        let flag = interpreter(Some(&this), Some(PathBuf::from("/nowhere/python"))).unwrap();
        assert_eq!(flag, this);
        let env = interpreter(None, Some(this.clone())).unwrap();
        assert_eq!(env, this);
        let missing = interpreter(None, Some(PathBuf::from("/nowhere/python"))).unwrap_err();
        let text = format!("{missing:#}");
        assert!(
            text.contains("/nowhere/python")
                && text.contains("DYNALIMIT_PYTHON")
                && text.contains("./scripts/python-env"),
            "{text}"
        );
        assert!(missing.is::<BadInput>());
    }

    #[test]
    fn a_ratio_is_zae_over_dynalimit() {
        assert_eq!(over(300.0, 100.0), 3.0);
        assert_eq!(over(1.0, 3.0), 0.33);
        assert_eq!(over(5.0, 0.0), 0.0);
    }
}
