//! The shared-table walkthrough (`examples/shared-table`) as it runs: the Rust half's steps
//! (the limits stored, 3 of key-1's 5 a minute spent by dynalimit), then the Python half's
//! script run as a user runs it, which reads those limits and is admitted exactly the 2 left.

use dynalimit::{Limit, RateLimiter};

#[tokio::test]
async fn the_python_half_spends_what_the_rust_half_left() {
    let Some(interpreter) = crate::python::interpreter() else {
        return;
    };
    let table = dynalimit_tests::table().await;
    // What `cargo run -p dynalimit --example shared_table` does.
    let repo = table.repository("default").await;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 5)])
        .await
        .unwrap();
    let limiter = RateLimiter::new(repo);
    for _ in 0..3 {
        limiter
            .acquire("key-1", "gpt-4", [("rpm", 1)])
            .await
            .unwrap()
            .commit()
            .await
            .unwrap();
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/shared-table/walkthrough.py");
    let out = tokio::process::Command::new(interpreter)
        .arg(script)
        .args(["--stack", table.name()])
        .args(["--endpoint-url", dynalimit_tests::endpoint().url()])
        .args(["--entity", "key-1"])
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("limits stored by dynalimit: rpm=5/60s"),
        "{stdout}"
    );
    assert!(stdout.contains("admitted 2, then refused"), "{stdout}");
}
