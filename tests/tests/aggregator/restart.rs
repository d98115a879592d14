//! The runner outlives a restart of the emulator: it backs off, finds the new stream and
//! carries on.

use aws_sdk_dynamodb::Client;
use dynalimit_aggregator::runner::{Runner, RunnerOptions};
use dynalimit_format::item::{get_i64, get_s};
use dynalimit_local::{self as local, DynamoDbLocal};

use super::{T, Writer, counting_only, sdk_for};

async fn daily_rpm(client: &Client, table: &str) -> i64 {
    let items = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan")
        .items
        .unwrap_or_default();
    items
        .iter()
        .filter(|it| get_s(it, "window") == Some("daily"))
        .filter_map(|it| get_i64(it, "rpm"))
        .sum()
}

#[tokio::test]
async fn the_runner_survives_an_emulator_restart_and_resumes() {
    if dynalimit_tests::endpoint().is_external() {
        // Restarting needs a private emulator; an external endpoint cannot be restarted here.
        return;
    }
    let dir = local::install().expect("DynamoDB Local");
    let first = DynamoDbLocal::start().expect("emulator");
    let port = first.port();
    let url = first.endpoint().to_owned();
    let sdk = sdk_for(&url).await;
    let client = Client::new(&sdk);
    let table = "aggregator-restart";
    dynalimit_repository::create_table(&client, table)
        .await
        .unwrap();
    let mut runner = Runner::from_sdk_config(&sdk, counting_only(table), RunnerOptions::default());

    let w = Writer::new(&client, table, "nsr");
    w.create("u1", 0, T).await;
    w.consume("u1", 0, &[("rpm", 3)], None).await;
    super::drain(&mut runner).await;
    assert_eq!(daily_rpm(&client, table).await, 3);
    let first_stream = runner.stream_arn().unwrap().to_owned();

    // The emulator goes away: polls fail, and the runner keeps its state.
    first.stop();
    assert!(runner.poll_once().await.is_err());
    assert!(runner.poll_once().await.is_err());

    // It comes back (in memory: an empty table with a new stream).
    let second = DynamoDbLocal::start_in(&dir, port).expect("emulator again");
    dynalimit_repository::create_table(&client, table)
        .await
        .unwrap();
    w.create("u1", 0, T).await;
    w.consume("u1", 0, &[("rpm", 5)], None).await;
    let report = super::drain(&mut runner).await;
    assert_eq!(report.counted, 1, "{report:?}");
    assert_ne!(runner.stream_arn(), Some(first_stream.as_str()));
    assert_eq!(daily_rpm(&client, table).await, 5);
    second.stop();
}
