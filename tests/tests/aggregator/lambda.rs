//! The Lambda handler on a delivered event: snapshots once, and partial batch failures naming
//! exactly the records whose usage is not counted.

use aws_lambda_events::event::dynamodb::Event;
use dynalimit_aggregator::{Aggregator, Settings, handler};
use dynalimit_format::item::get_i64;

fn event() -> Event {
    serde_json::from_str(include_str!(
        "../../../lambda/aggregator/tests/fixtures/batch.json"
    ))
    .expect("fixture")
}

#[tokio::test]
async fn the_handler_counts_a_delivery_once_and_reports_failures_by_sequence_number() {
    let table = dynalimit_tests::table().await;
    let agg = Aggregator::new(table.client().clone(), Settings::new(table.name()));
    let first = handler::handle(&agg, event()).await;
    assert!(first.batch_item_failures.is_empty());
    let items = super::snapshot_items(&table).await;
    let h22 = &items[&(
        "a7x3kq/ENTITY#u1".to_owned(),
        "#USAGE#gpt-4#2023-11-14T22:00:00Z".to_owned(),
    )];
    assert_eq!(get_i64(h22, "rpm"), Some(4));
    assert_eq!(get_i64(h22, "tpm"), Some(800));
    assert_eq!(get_i64(h22, "total_events"), Some(6));

    // Redelivered: no failure, no change.
    let second = handler::handle(&agg, event()).await;
    assert!(second.batch_item_failures.is_empty());
    assert_eq!(super::snapshot_items(&table).await, items);

    // A table that does not exist: every record carrying usage is reported, nothing else.
    let broken = Aggregator::new(
        table.client().clone(),
        Settings::new(format!("{}-missing", table.name())),
    );
    let failed = handler::handle(&broken, event()).await;
    let mut ids: Vec<String> = failed
        .batch_item_failures
        .into_iter()
        .filter_map(|f| f.item_identifier)
        .collect();
    ids.sort_by_key(|s| s.parse::<u64>().unwrap());
    assert_eq!(ids, vec!["100", "200", "300", "400", "500", "800"]);
}
