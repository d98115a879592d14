//! Hostile items: what any writer of a shared table can leave in it, for the "hostile items"
//! property suite (`tests/tests/hostile`) and the CLI's table output under the same items.
//!
//! A case starts from a [`world::Blueprint`]: a valid world as dynalimit's own writers store
//! it (namespace registry, version record, configuration levels, entity META with a parent,
//! bucket shards, an operation record, an audit event, a usage snapshot and watermark, the
//! registries), plus items zae-limiter 0.17 writes ([`zae`]), then [`mutate::Mutation`]s
//! applied to them: attributes dropped, retyped or set to extreme numbers and huge strings,
//! stamps far in the future or past, shard counts out of range, keys of the wrong shape, and
//! items of another namespace whose index keys name this one.
//!
//! Values are kept as [`aws_sdk_dynamodb::types::AttributeValue`]s; a value DynamoDB itself
//! refuses (a number out of its range, an empty set) is refused by the store on the put, as
//! DynamoDB refuses it, and the case goes on without it.

pub mod mutate;
pub mod strategy;
pub mod value;
pub mod world;
pub mod zae;

/// The proptest configuration of a hostile-items run: `PROPTEST_CASES` cases, else
/// `default_cases`; failing cases kept in `regressions` (a path from the test's package, its
/// working directory) and run first next time; at most `max_shrink_iters` shrinking steps.
pub fn config(
    default_cases: u32,
    regressions: &'static str,
    max_shrink_iters: u32,
) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, FileFailurePersistence};
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        max_shrink_iters,
        ..Config::default()
    }
}

/// The instant every case starts at (2023-11-14T22:13:20Z), epoch ms.
pub const T0: i64 = 1_700_000_000_000;

/// The namespace a case's repository opens.
pub const NAMESPACE: &str = "hostile";

/// The id of another namespace, whose principal writes items of its own partition with index
/// keys naming the case's namespace (IAM `LeadingKeys` constrains only the base table's key).
pub const FOREIGN_NS: &str = "zz9other";

/// The entity whose buckets the case drives.
pub const CHILD: &str = "hx-child";

/// The child's parent.
pub const PARENT: &str = "hx-parent";

/// The resource the case drives (a resource name may hold `/` and `:`).
pub const RESOURCE: &str = "hx/model:1";

use aws_sdk_dynamodb::Client;
use dynalimit_format::item::Item;

/// A case's items, once stored.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The valid world, as dynalimit's writers stored it before any change.
    pub world: Vec<(world::Role, Item)>,
    /// How many changed items the store refused (values DynamoDB does not hold).
    pub refused: usize,
}

/// Stores `case` in namespace `ns` (its id) of `table`: the world through the format's
/// writers, the case's pick of zae-limiter's items, then every item again as the mutations
/// left it, with raw `PutItem`s (a put the store refuses is counted and skipped, as DynamoDB
/// would refuse it).
///
/// # Panics
/// When the store refuses a write of the valid world.
pub async fn store_case(client: &Client, table: &str, ns: &str, case: &strategy::Case) -> Stored {
    let world = world::store(client, table, ns, &case.world).await;
    let mut items: Vec<Item> = world.iter().map(|(_, item)| item.clone()).collect();
    let fixed = zae::items(ns);
    if !fixed.is_empty() {
        for pick in &case.zae {
            items.push(pick.get(&fixed).1.clone());
        }
    }
    let names: Vec<String> = case.world.limits.iter().map(|l| l.name.clone()).collect();
    for m in &case.mutations {
        m.apply(&mut items, &names, ns);
    }
    let mut refused = 0;
    for item in items {
        let put = client
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await;
        refused += usize::from(put.is_err());
    }
    Stored { world, refused }
}
