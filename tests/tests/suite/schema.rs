//! The table is created with exactly the schema of the reference (§1.2).

use aws_sdk_dynamodb::types::{
    KeyType, ProjectionType, ScalarAttributeType, StreamViewType, TimeToLiveStatus,
};
use dynalimit_format::schema::{IndexProjection, TABLE_SCHEMA};

fn projection(p: IndexProjection) -> ProjectionType {
    match p {
        IndexProjection::All => ProjectionType::All,
        IndexProjection::KeysOnly => ProjectionType::KeysOnly,
    }
}

#[tokio::test]
async fn created_table_has_every_key_index_projection_ttl_and_stream_setting() {
    if dynalimit_tests::skipped_on_the_memory_backend("it checks the table's stream") {
        return;
    }
    let table = dynalimit_tests::table().await;
    let client = table.client();
    let described = client
        .describe_table()
        .table_name(table.name())
        .send()
        .await
        .expect("DescribeTable")
        .table
        .expect("table description");

    // Primary key.
    let keys: Vec<_> = described
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_string(), k.key_type().clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("PK".to_string(), KeyType::Hash),
            ("SK".to_string(), KeyType::Range)
        ]
    );

    // Fifteen string key attributes.
    let mut attrs: Vec<_> = described
        .attribute_definitions()
        .iter()
        .map(|a| {
            assert_eq!(a.attribute_type(), &ScalarAttributeType::S);
            a.attribute_name().to_string()
        })
        .collect();
    attrs.sort();
    let mut expected: Vec<_> = [
        "PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK", "GSI3PK", "GSI3SK", "GSI4PK", "GSI4SK",
        "LSI1SK", "LSI2SK", "LSI3SK", "LSI4SK", "LSI5SK",
    ]
    .map(String::from)
    .to_vec();
    expected.sort();
    assert_eq!(attrs, expected);

    // Global indexes: keys and projections exactly as the reference.
    let gsis = described.global_secondary_indexes();
    assert_eq!(gsis.len(), 4);
    for (name, pk, sk, proj) in [
        ("GSI1", "GSI1PK", "GSI1SK", ProjectionType::All),
        ("GSI2", "GSI2PK", "GSI2SK", ProjectionType::All),
        ("GSI3", "GSI3PK", "GSI3SK", ProjectionType::KeysOnly),
        ("GSI4", "GSI4PK", "GSI4SK", ProjectionType::KeysOnly),
    ] {
        let g = gsis
            .iter()
            .find(|g| g.index_name() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing"));
        let k: Vec<_> = g
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name(), k.key_type().clone()))
            .collect();
        assert_eq!(k, [(pk, KeyType::Hash), (sk, KeyType::Range)], "{name}");
        assert_eq!(
            g.projection().and_then(|p| p.projection_type()),
            Some(&proj),
            "{name}"
        );
    }

    // Local indexes.
    let lsis = described.local_secondary_indexes();
    assert_eq!(lsis.len(), 5);
    for (i, proj) in [
        ProjectionType::All,
        ProjectionType::KeysOnly,
        ProjectionType::All,
        ProjectionType::KeysOnly,
        ProjectionType::All,
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("LSI{}", i + 1);
        let l = lsis
            .iter()
            .find(|l| l.index_name() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} missing"));
        let k: Vec<_> = l
            .key_schema()
            .iter()
            .map(|k| (k.attribute_name().to_string(), k.key_type().clone()))
            .collect();
        assert_eq!(
            k,
            [
                ("PK".to_string(), KeyType::Hash),
                (format!("LSI{}SK", i + 1), KeyType::Range)
            ]
        );
        assert_eq!(
            l.projection().and_then(|p| p.projection_type()),
            Some(&proj)
        );
    }

    // The schema constant agrees with what was created.
    for g in TABLE_SCHEMA.global_indexes {
        let created = gsis
            .iter()
            .find(|x| x.index_name() == Some(g.name))
            .unwrap();
        assert_eq!(
            created.projection().and_then(|p| p.projection_type()),
            Some(&projection(g.projection))
        );
    }

    // Stream and billing.
    let stream = described.stream_specification().expect("stream spec");
    assert!(stream.stream_enabled());
    assert_eq!(
        stream.stream_view_type(),
        Some(&StreamViewType::NewAndOldImages)
    );
    assert!(described.latest_stream_arn().is_some());
    assert_eq!(
        described
            .billing_mode_summary()
            .and_then(|b| b.billing_mode()),
        Some(&aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
    );

    // TTL on `ttl`.
    let ttl = client
        .describe_time_to_live()
        .table_name(table.name())
        .send()
        .await
        .expect("DescribeTimeToLive")
        .time_to_live_description
        .expect("ttl description");
    assert_eq!(ttl.attribute_name(), Some("ttl"));
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
}

#[tokio::test]
async fn creating_an_existing_table_is_a_no_op() {
    let table = dynalimit_tests::table().await;
    dynalimit_repository::create_table(table.client(), table.name())
        .await
        .expect("second create succeeds");
}
