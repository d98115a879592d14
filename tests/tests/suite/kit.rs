//! The test kit itself: the emulator is real, reused, and never outlives its process.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn children_of(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn the_endpoint_answers_and_tables_are_unique() {
    let a = dynalimit_tests::table().await;
    let b = dynalimit_tests::table().await;
    assert_ne!(a.name(), b.name());
    // Both exist (ListTables pages at 100 names, and the suite's other tests make tables too).
    for name in [a.name(), b.name()] {
        let described = a
            .client()
            .describe_table()
            .table_name(name)
            .send()
            .await
            .expect("DescribeTable");
        assert_eq!(described.table().and_then(|t| t.table_name()), Some(name));
    }
}

/// Run only as a child of `a_panicking_test_process_leaves_no_emulator_behind`.
#[tokio::test]
#[ignore = "run as a child process by another test"]
async fn child_starts_the_emulator_then_panics() {
    let Ok(report) = std::env::var("DYNALIMIT_KIT_CHILD_REPORT") else {
        return;
    };
    let endpoint = dynalimit_tests::endpoint();
    let watchdog = endpoint.local_pid().expect("a private emulator");
    let jvm = children_of(watchdog);
    std::fs::write(
        &report,
        format!(
            "{watchdog} {}",
            jvm.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        ),
    )
    .expect("write report");
    panic!("deliberate panic with a running emulator");
}

#[test]
fn a_panicking_test_process_leaves_no_emulator_behind() {
    if dynalimit_tests::skipped_on_the_memory_backend("it checks the emulator's processes") {
        return;
    }
    if dynalimit_tests::endpoint().is_external() {
        return; // Nothing is started when an external endpoint is configured.
    }
    let dir = std::env::temp_dir().join(format!("dynalimit-kit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("pids");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "kit::child_starts_the_emulator_then_panics",
            "--test-threads=1",
        ])
        .env("DYNALIMIT_KIT_CHILD_REPORT", &report)
        .output()
        .expect("run child");
    assert!(
        !status.status.success(),
        "the child test must have panicked"
    );
    let pids: Vec<u32> = std::fs::read_to_string(Path::new(&report))
        .expect("child wrote its pids")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        pids.len() >= 2,
        "watchdog and JVM pids expected, got {pids:?}"
    );
    let mut waited = Duration::ZERO;
    while pids.iter().any(|p| alive(*p)) && waited < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    }
    for pid in &pids {
        assert!(
            !alive(*pid),
            "process {pid} outlived the panicking test process"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_second_start_reuses_the_cached_installation() {
    if dynalimit_tests::skipped_on_the_memory_backend("it checks the emulator's installation") {
        return;
    }
    if dynalimit_tests::endpoint().is_external() {
        return;
    }
    let dir = dynalimit_local::install_dir();
    assert!(dynalimit_local::is_installed(&dir));
    let jar = dir.join("DynamoDBLocal.jar");
    let before = std::fs::metadata(&jar).unwrap().modified().unwrap();
    let again = dynalimit_local::install().unwrap();
    assert_eq!(again, dir);
    assert_eq!(std::fs::metadata(&jar).unwrap().modified().unwrap(), before);
}
