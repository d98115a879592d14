//! The Rust half of the shared-table walkthrough (`examples/shared-table/README.md`): a
//! dynalimit service stores the limits of a resource and spends from a key's bucket; a
//! zae-limiter 0.17 service (`examples/shared-table/walkthrough.py`) then spends the rest of
//! the same bucket.
//!
//! ```sh
//! dynalimit local up
//! AWS_ENDPOINT_URL=http://127.0.0.1:8000 cargo run -p dynalimit --example shared_table
//! ```

use dynalimit::{Limit, RateLimiter, Repository};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The table `dynalimit` (DYNALIMIT_STACK) and its namespace `default`, created when
    // missing; AWS_ENDPOINT_URL points at DynamoDB Local.
    let repo = Repository::open("default").await?;
    repo.set_resource_defaults("gpt-4", &[Limit::per_minute("rpm", 5)])
        .await?;
    let limiter = RateLimiter::new(repo);
    for _ in 0..3 {
        limiter
            .acquire("key-1", "gpt-4", [("rpm", 1)])
            .await?
            .commit()
            .await?;
    }
    let left = limiter.balances("key-1", "gpt-4", &[]).await?;
    println!(
        "dynalimit spent 3 of key-1's rpm; {} left for anyone sharing the table",
        left[0].available
    );
    Ok(())
}
