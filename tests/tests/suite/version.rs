//! The version record and the compatibility gate.

use dynalimit_repository::{Repository, RepositoryError};

/// What a newer zae-limiter does when it enables a feature older readers would mishandle.
async fn set_client_min_version(table: &dynalimit_tests::TestTable, version: &str) {
    table
        .set_version_attribute("client_min_version", version)
        .await;
}

#[tokio::test]
async fn open_writes_the_version_record_once_and_ping_answers() {
    let table = dynalimit_tests::table().await;
    let repo = table.repository("v").await;
    repo.ping().await.unwrap();
    let record = repo
        .version_record()
        .await
        .unwrap()
        .expect("written on open");
    assert_eq!(record.schema_version, "0.10.0");
    assert_eq!(record.client_min_version, "0.0.0");
    assert_eq!(record.lambda_version.as_deref(), Some("0.17.0"));
    assert!(record.updated_by.unwrap().starts_with("dynalimit:"));
    // A later write never lowers a ratcheted minimum.
    set_client_min_version(&table, "0.12.0").await;
    repo.write_version_record(Some("0.1.0")).await.unwrap();
    let record = repo.version_record().await.unwrap().unwrap();
    assert_eq!(record.client_min_version, "0.12.0");
    assert_eq!(record.lambda_version.as_deref(), Some("0.1.0"));
    // 0.12 is within what dynalimit implements: opening still works.
    table.repository("v").await;
}

#[tokio::test]
async fn a_table_ratcheted_to_0_17_opens_and_one_past_it_is_refused() {
    let table = dynalimit_tests::table().await;
    table.repository("v").await;
    for version in ["0.15.0", "0.16.0", "0.17.0"] {
        set_client_min_version(&table, version).await;
        table.builder().namespace("v").open().await.unwrap();
        table.builder().namespace("v").connect().await.unwrap();
    }
    set_client_min_version(&table, "0.18.0").await;
    for result in [
        table.builder().namespace("v").open().await,
        table.builder().namespace("v").connect().await,
    ] {
        match result {
            Err(RepositoryError::IncompatibleVersion {
                required,
                implemented,
                message,
            }) => {
                assert_eq!(required, "0.18.0");
                assert_eq!(implemented, "0.17.0");
                assert!(
                    message.contains("newer than zae-limiter 0.17.0"),
                    "{message}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn connect_writes_nothing_and_needs_an_existing_namespace() {
    let table = dynalimit_tests::table().await;
    let err = table.builder().namespace("x").connect().await.unwrap_err();
    assert!(
        matches!(err, RepositoryError::TableNotFound { .. }),
        "{err}"
    );
    assert!(table.scan_all().await.is_empty(), "connect wrote nothing");
    table.repository("x").await;
    table.builder().namespace("x").connect().await.unwrap();
    let err = table.builder().namespace("y").connect().await.unwrap_err();
    assert!(
        matches!(err, RepositoryError::NamespaceNotFound { .. }),
        "{err}"
    );
    let missing = Repository::builder()
        .client(table.client().clone())
        .stack("no-such-table")
        .create_table(false)
        .open()
        .await
        .unwrap_err();
    assert!(
        matches!(missing, RepositoryError::TableNotFound { .. }),
        "{missing}"
    );
}

/// `upgrade`'s last step, the refresh of the version record, whose answer is lost after it
/// was applied: sent again (by the client's retries, or by a second `upgrade`), it sets the
/// same values, and a ratcheted minimum stays as it was.
#[tokio::test]
async fn a_refresh_of_the_version_record_whose_answer_is_lost_lands_the_same_values() {
    use dynalimit_tests::fault::{FaultProxy, Lost};
    let table = dynalimit_tests::table().await;
    table.repository("v").await;
    set_client_min_version(&table, "0.12.0").await;
    let proxy = FaultProxy::start().await;
    let repo = proxy.repository(&table, "v").await;
    for how in [Lost::Answer500, Lost::Reset, Lost::Hang] {
        proxy.lose_after_applying("UpdateItem", Some("lambda_version"), how, 1);
        let first = repo.write_version_record(Some("0.2.0")).await;
        if first.is_err() {
            // The answer never came: the caller runs the step again.
            repo.write_version_record(Some("0.2.0")).await.unwrap();
        }
        let record = repo.version_record().await.unwrap().unwrap();
        assert_eq!(record.lambda_version.as_deref(), Some("0.2.0"), "{how:?}");
        assert_eq!(
            record.client_min_version, "0.12.0",
            "{how:?}: never lowered"
        );
        assert_eq!(record.schema_version, "0.10.0", "{how:?}");
    }
    assert_eq!(proxy.pending(), 0);
}
