//! A zae-limiter 0.17 client on a bucket carrying the pause stamp.
//!
//! Needs `DYNALIMIT_PYTHON`: an interpreter with zae-limiter 0.17 installed (for instance the
//! one `scripts/python-env` prints). Unset, the test prints why it is skipped, unless `CI` is
//! set, where it fails.

use std::process::Command;
use std::time::Duration;

use dynalimit::RateLimiter;
use dynalimit_format::attr::PAUSE_UNTIL as PAUSE_ATTRIBUTE;
use dynalimit_format::item::get_i64;

use super::{balances, bucket_item, paused, spend_one, succeeded};

const NS: &str = "pause-py";

/// Acquires `rpm: 2` on `user-1`/`llm` with zae-limiter's public API (`Repository.connect`,
/// `RateLimiter.acquire` as a context manager, `RateLimiter.available`) and prints
/// `admitted <available>`.
const SCRIPT: &str = r#"
import asyncio, os, sys
os.environ.setdefault("AWS_ACCESS_KEY_ID", "dynalimit")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
from zae_limiter import Limit, RateLimiter, Repository

async def main():
    endpoint, stack, namespace = sys.argv[1:4]
    repo = await Repository.connect(namespace, stack=stack, endpoint_url=endpoint,
                                    region=os.environ["AWS_DEFAULT_REGION"])
    try:
        limiter = RateLimiter(repository=repo)
        limits = [Limit.per_minute("rpm", 10)]
        async with limiter.acquire("user-1", "llm", {"rpm": 2}, limits=limits):
            pass
        available = await limiter.available("user-1", "llm", limits=limits)
        print("admitted", available["rpm"])
    finally:
        await repo.close()

asyncio.run(main())
"#;

fn interpreter() -> Option<String> {
    match std::env::var("DYNALIMIT_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var_os("CI").is_none_or(|v| v.is_empty()),
                "DYNALIMIT_PYTHON is not set: this test needs a Python with zae-limiter 0.17"
            );
            eprintln!(
                "skipped: DYNALIMIT_PYTHON is not set (point it at a Python with zae-limiter \
                 0.17, e.g. the one scripts/python-env prints)"
            );
            None
        }
    }
}

#[tokio::test]
async fn a_zae_limiter_client_acquires_and_releases_on_a_stamped_bucket() {
    let Some(python) = interpreter() else {
        return;
    };
    let table = dynalimit_tests::table().await;
    let repo = table.repository(NS).await;
    let limiter = RateLimiter::new(repo);
    spend_one(&limiter).await.unwrap();
    let until = limiter
        .pause("user-1", "llm", Duration::from_secs(300))
        .await
        .unwrap()
        .expect("stamped");

    let out = Command::new(&python)
        .args([
            "-c",
            SCRIPT,
            dynalimit_tests::endpoint().url(),
            table.name(),
            NS,
        ])
        .output()
        .expect("run the Python client");
    let stdout = succeeded(&out, "zae-limiter failed on the stamped bucket");
    let available: i64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("admitted "))
        .expect("the Python client was admitted")
        .trim()
        .parse()
        .unwrap();
    // 10 - 1 (Rust) - 2 (Python), plus whatever refilled in between (1 token per 6 s).
    assert!((7..=8).contains(&available), "available {available}");

    // Read back: the stamp survived the Python writes, which were counted on the same item,
    // and the Rust limiter still honours the pause.
    let item = bucket_item(&table, "user-1", "llm").await;
    assert_eq!(get_i64(&item, PAUSE_ATTRIBUTE), Some(until));
    let (_, _, counted) = balances(&item);
    assert_eq!(counted, 3000, "one Rust and two Python requests counted");
    assert!(paused(spend_one(&limiter).await).is_some());
}
