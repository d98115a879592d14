//! Windows that share a snapshot item, on a real table: the hour-00 item is its day's item,
//! and on the first of a month its month's too. DynamoDB refuses a transaction with two
//! operations on one item, so before the aggregator merged them every such record failed.

use dynalimit_aggregator::SnapshotWindow;
use dynalimit_aggregator::runner::{Runner, RunnerOptions};
use dynalimit_format::item::{get_i64, get_s};
use dynalimit_format::keys;
use dynalimit_repository::UsageQuery;

use super::{Writer, counting_only, drain, sdk_for, setup, snapshot_items};

/// 2026-12-31T23:30:00Z, 2027-01-01T00:10:00Z and 2027-01-01T05:00:00Z.
const DEC31_2330: i64 = 1_798_759_800_000;
const JAN01_0010: i64 = 1_798_762_200_000;
const JAN01_0500: i64 = JAN01_0010 + 290 * 60_000;

/// `(window_start, window, rpm, tpm, total_events)` of one snapshot item.
type Row<'a> = (&'a str, &'a str, Option<i64>, Option<i64>, Option<i64>);

#[tokio::test]
async fn a_year_end_batch_with_every_window_writes_each_shared_item_once() {
    let (table, repo) = setup().await;
    let w = Writer::new(table.client(), table.name(), repo.namespace_id());
    w.create("u1", 0, DEC31_2330).await;
    w.consume("u1", 0, &[("rpm", 1), ("tpm", 100)], None).await;
    w.consume("u1", 0, &[("rpm", 2)], Some(JAN01_0010)).await;
    w.consume("u1", 0, &[("rpm", 4), ("tpm", 10)], Some(JAN01_0500))
        .await;

    let mut settings = counting_only(table.name());
    settings.windows = vec![
        SnapshotWindow::Hourly,
        SnapshotWindow::Daily,
        SnapshotWindow::Monthly,
    ];
    let sdk = sdk_for(dynalimit_tests::endpoint().url()).await;
    let mut runner = Runner::from_sdk_config(&sdk, settings.clone(), RunnerOptions::default());
    let report = drain(&mut runner).await;
    assert_eq!((report.counted, report.failed), (3, 0), "{report:?}");

    let items = snapshot_items(&table).await;
    let pk = keys::entity_pk(repo.namespace_id(), "u1");
    let got: Vec<Row<'_>> = items
        .iter()
        .map(|((item_pk, sk), it)| {
            assert_eq!(item_pk, &pk);
            let start = get_s(it, "window_start").unwrap();
            assert_eq!(sk, &format!("#USAGE#gpt-4#{start}"));
            (
                start,
                get_s(it, "window").unwrap(),
                get_i64(it, "rpm"),
                get_i64(it, "tpm"),
                get_i64(it, "total_events"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "2026-12-01T00:00:00Z",
                "monthly",
                Some(1),
                Some(100),
                Some(2)
            ),
            ("2026-12-31T00:00:00Z", "daily", Some(1), Some(100), Some(2)),
            (
                "2026-12-31T23:00:00Z",
                "hourly",
                Some(1),
                Some(100),
                Some(2)
            ),
            // Hour 00, the day and the month of 2027-01-01: 00:10 counted three times, 05:00
            // twice; `window` from the first configured window of the earliest record.
            (
                "2027-01-01T00:00:00Z",
                "hourly",
                Some(2 * 3 + 4 * 2),
                Some(10 * 2),
                Some(3 + 4)
            ),
            ("2027-01-01T05:00:00Z", "hourly", Some(4), Some(10), Some(2)),
        ]
    );

    // The reader: the shared item is the day's and the month's item although it says hourly.
    let starts = |window: &'static str| {
        let repo = &repo;
        async move {
            repo.usage_snapshots(&UsageQuery::entity("u1").with_window(window), 100, None)
                .await
                .unwrap()
                .snapshots
                .into_iter()
                .map(|s| s.window_start)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        starts("daily").await,
        ["2027-01-01T00:00:00Z", "2026-12-31T00:00:00Z"]
    );
    assert_eq!(
        starts("monthly").await,
        ["2027-01-01T00:00:00Z", "2026-12-01T00:00:00Z"]
    );
    assert_eq!(
        starts("hourly").await,
        [
            "2027-01-01T05:00:00Z",
            "2027-01-01T00:00:00Z",
            "2026-12-31T23:00:00Z"
        ]
    );

    // Delivered again from the start of the stream: nothing changes.
    let mut again = Runner::from_sdk_config(&sdk, settings, RunnerOptions::default());
    let second = drain(&mut again).await;
    assert_eq!((second.counted, second.duplicates), (0, 3), "{second:?}");
    assert_eq!(snapshot_items(&table).await, items);
}
