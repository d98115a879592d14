//! `docs/cli-output.md`, generated from the output types: for each command the keys of its
//! JSON (names, types and meanings from the types' doc comments, read through their JSON
//! schemas) and an example made by serializing a value of the type. A test compares the page
//! with the file, so the page cannot drift from the types; `DYNALIMIT_WRITE_DOCS=1` rewrites
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use dynalimit_repository::DisabledFlag;
use schemars::{JsonSchema, schema_for};
use serde::Serialize;
use serde_json::{Value, json};

use super::access::{Disabled, EntityAccess, EntityCascade, ResourceAccess, ResourceCascade};
use super::alerts::{Cleared, Threshold};
use super::audit::Event;
use super::bench::{
    Admission, Case, CompareReport, HotKeyPoint, HotKeyReport, Machine, MixedReport, MixedSide,
    Peer, Processor, Ratio, Report, Verdict,
};
use super::concurrency::ConcurrencyLevel;
use super::entity::{Available, Balance, Comeback, Entity, Operation, OperationName, ParentSet};
use super::infra::{
    Check, Compatibility, LambdaPackage, ListedStack, Stack, StackDeleted, Status,
    TableCompatibility, TableVersion, Upgraded, Version,
};
use super::limits::{
    Configured, CustomLimits, LevelConfig, LevelDeleted, LevelKind, Resolved, Source, Unavailable,
};
use super::loadtest::{LimitLoad, LoadReport};
use super::local::{Local, LocalEnv, LocalLog};
use super::namespace::{ItemsDeleted, Namespace, NamespaceDeleted, Registered};
use super::usage::{Snapshot, Summary};
use dynalimit_manifest::{Action, AttributeChange, LevelChange, ManifestReport};

/// One command's (or several commands') output.
struct Entry {
    /// The commands, as the heading names them.
    commands: &'static str,
    /// Whether the commands print an array of the type.
    array: bool,
    /// The type's schema.
    schema: Value,
    /// What the commands print.
    example: Value,
}

fn one<T: JsonSchema + Serialize>(commands: &'static str, example: T) -> Entry {
    Entry {
        commands,
        array: false,
        schema: schema_for!(T).to_value(),
        example: serde_json::to_value(example).expect("examples serialize"),
    }
}

fn many<T: JsonSchema + Serialize>(commands: &'static str, examples: Vec<T>) -> Entry {
    Entry {
        commands,
        array: true,
        schema: schema_for!(T).to_value(),
        example: serde_json::to_value(examples).expect("examples serialize"),
    }
}

const NAMESPACE_ID: &str = "Qm9fT2xkX2E";
const CREATED: &str = "2026-11-20T09:15:02Z";

fn namespace_a() -> Namespace {
    Namespace {
        name: "tenant-a".into(),
        id: NAMESPACE_ID.into(),
        status: "active".into(),
        created_at: CREATED.into(),
        deleted_at: None,
    }
}

fn entity_key() -> Entity {
    Entity {
        id: "key-1".into(),
        name: "key-1".into(),
        parent_id: Some("proj-1".into()),
        cascade: true,
        metadata: BTreeMap::from([("tier".into(), "gold".into())]),
        created_at: CREATED.into(),
    }
}

fn stack() -> Stack {
    Stack {
        stack: "limits-prod".into(),
        status: "CREATE_COMPLETE".into(),
        reason: None,
        outputs: BTreeMap::from([
            ("TableName".into(), "limits-prod".into()),
            (
                "TableArn".into(),
                "arn:aws:dynamodb:eu-west-1:123456789012:table/limits-prod".into(),
            ),
        ]),
    }
}

fn case(op: &str, p50_us: f64, ops_per_s: f64, requests: f64) -> Case {
    Case {
        op: op.into(),
        shape: "hot".into(),
        concurrency: 1,
        ops: 1000,
        p50_us,
        p90_us: (p50_us * 1.3).round(),
        p99_us: (p50_us * 2.1).round(),
        mean_us: (p50_us * 1.1).round(),
        ops_per_s,
        requests_per_op: requests,
        requests_by_operation: BTreeMap::from([("UpdateItem".into(), requests)]),
        cpu_us_per_op: 21.4,
    }
}

fn admission(library: &str, admitted: u64, requests: u64) -> Admission {
    Admission {
        library: library.into(),
        concurrency: 8,
        capacity: 10,
        refill_per_s: 10.0,
        seconds: 5.004,
        admitted,
        rejected: 2113,
        errors: 0,
        first_error: None,
        requests,
        allowance: 60.0,
        efficiency: (admitted as f64 / 60.04 * 1000.0).round() / 1000.0,
    }
}

fn example_machine() -> Machine {
    Machine {
        cpus: 2,
        cpu_model: "Example CPU @ 2.40GHz".into(),
        memory_gib: 7.8,
    }
}

/// Every command group's outputs, in the page's order.
fn sections() -> Vec<(&'static str, Vec<Entry>)> {
    vec![
        (
            "Namespaces",
            vec![
                many(
                    "namespace register",
                    vec![Registered {
                        name: "tenant-a".into(),
                        id: NAMESPACE_ID.into(),
                    }],
                ),
                one("namespace get, namespace recover", namespace_a()),
                many("namespace list, namespace orphans", vec![namespace_a()]),
                one(
                    "namespace delete",
                    NamespaceDeleted {
                        name: "tenant-a".into(),
                        id: NAMESPACE_ID.into(),
                        status: "deleted".into(),
                    },
                ),
                one(
                    "namespace purge, entity delete",
                    ItemsDeleted {
                        id: NAMESPACE_ID.into(),
                        items_deleted: 42,
                    },
                ),
            ],
        ),
        (
            "Entities",
            vec![
                one("entity create, entity get", entity_key()),
                many("entity children", vec![entity_key()]),
                one(
                    "entity set-parent",
                    ParentSet {
                        id: "key-1".into(),
                        parent_id: Some("proj-2".into()),
                        buckets_stamped: 2,
                    },
                ),
                one(
                    "entity disable, entity enable, entity bypass, entity clear-disabled",
                    EntityAccess {
                        id: "key-1".into(),
                        resource: Some("gpt-4".into()),
                        disabled: Some(Disabled(DisabledFlag::Bypass)),
                        buckets_stamped: 1,
                    },
                ),
                one(
                    "entity set-cascade",
                    EntityCascade {
                        id: "key-1".into(),
                        resource: None,
                        cascade: Some(false),
                        buckets_stamped: 3,
                    },
                ),
                one(
                    "entity available",
                    Available {
                        entity_id: "key-1".into(),
                        resource: "gpt-4".into(),
                        limits: vec![
                            Balance {
                                name: "rpm".into(),
                                available: 87,
                                capacity: 100,
                                comeback: Comeback::Rate {
                                    refill: "100/60s".into(),
                                },
                            },
                            Balance {
                                name: "tpd".into(),
                                available: 41_200,
                                capacity: 50_000,
                                comeback: Comeback::Quota {
                                    resets_at: Some("2026-11-21T00:00:00Z".into()),
                                },
                            },
                            Balance {
                                name: "requests".into(),
                                available: 99,
                                capacity: 100,
                                comeback: Comeback::SessionQuota {
                                    window_seconds: 86_400,
                                    resets_at: Some("2026-11-21T09:15:02Z".into()),
                                },
                            },
                        ],
                    },
                ),
                one(
                    "entity reset, entity top-up",
                    Operation {
                        entity_id: "key-1".into(),
                        resource: "gpt-4".into(),
                        operation: OperationName::TopUp,
                        operation_id: "refund-7731".into(),
                        shards: 1,
                        amounts: BTreeMap::from([("tpm".into(), 2000)]),
                        replayed: false,
                    },
                ),
            ],
        ),
        (
            "Resources",
            vec![
                one(
                    "resource disable, resource enable, resource bypass, resource clear-disabled",
                    ResourceAccess {
                        resource: "gpt-4".into(),
                        disabled: Some(Disabled(DisabledFlag::Disabled)),
                        buckets_stamped: 12,
                    },
                ),
                one(
                    "resource set-cascade",
                    ResourceCascade {
                        resource: "gpt-4".into(),
                        cascade: None,
                        buckets_stamped: 12,
                    },
                ),
            ],
        ),
        (
            "Limits",
            vec![
                one(
                    "limits set, limits get",
                    LevelConfig {
                        level: "resource gpt-4".into(),
                        limits: vec!["rpm=100/min".into(), "tpm=10000/min:burst=20000".into()],
                        disabled: None,
                        cascade: None,
                        on_unavailable: None,
                    },
                ),
                one(
                    "limits get --resolved",
                    Resolved {
                        entity: "key-1".into(),
                        resource: "gpt-4".into(),
                        source: Some(Source::Resource),
                        limits: vec!["rpm=100/min".into(), "tpm=10000/min:burst=20000".into()],
                        on_unavailable: Some(Unavailable::Block),
                    },
                ),
                one(
                    "limits delete",
                    LevelDeleted {
                        level: "entity key-1 on gpt-4".into(),
                        deleted: true,
                    },
                ),
                many(
                    "limits list",
                    vec![
                        Configured {
                            level: LevelKind::System,
                            resource: None,
                        },
                        Configured {
                            level: LevelKind::Resource,
                            resource: Some("gpt-4".into()),
                        },
                    ],
                ),
                many(
                    "limits list --resource",
                    vec![CustomLimits {
                        entity: "key-1".into(),
                        resource: "gpt-4".into(),
                    }],
                ),
            ],
        ),
        (
            "Limits as code",
            vec![one(
                "limits plan, limits diff, limits apply",
                ManifestReport {
                    namespace: "default".into(),
                    full: false,
                    applied: true,
                    changes: vec![
                        LevelChange {
                            action: Action::Create,
                            level: "resource gpt-4".into(),
                            attributes: vec![AttributeChange {
                                attribute: "limit rpm".into(),
                                before: None,
                                after: Some("rpm=100/min".into()),
                            }],
                        },
                        LevelChange {
                            action: Action::Update,
                            level: "entity key-1 on gpt-4".into(),
                            attributes: vec![AttributeChange {
                                attribute: "disabled".into(),
                                before: Some("true".into()),
                                after: None,
                            }],
                        },
                    ],
                    unchanged: 3,
                },
            )],
        ),
        (
            "Usage and audit",
            vec![
                many(
                    "usage",
                    vec![Snapshot {
                        entity: "key-1".into(),
                        resource: "gpt-4".into(),
                        window: "hourly".into(),
                        window_start: "2026-11-22T02:00:00Z".into(),
                        counters: BTreeMap::from([("rpm".into(), 5), ("tpm".into(), 700)]),
                        events: 5,
                    }],
                ),
                one(
                    "usage summary",
                    Summary {
                        snapshots: 2,
                        total: BTreeMap::from([("rpm".into(), 8), ("tpm".into(), 1000)]),
                        average: BTreeMap::from([("rpm".into(), 4.0), ("tpm".into(), 500.0)]),
                        events: 8,
                        first_window: Some("2026-11-22T01:00:00Z".into()),
                        last_window: Some("2026-11-22T02:00:00Z".into()),
                        truncated: false,
                    },
                ),
                one(
                    "alerts set",
                    Threshold {
                        entity: "key-1".into(),
                        resource: "gpt-4".into(),
                        limit: "tpd".into(),
                        percent: vec![80, 100],
                        refusing_for_minutes: Some(10),
                    },
                ),
                many(
                    "alerts list",
                    vec![
                        Threshold {
                            entity: "key-1".into(),
                            resource: "gpt-4".into(),
                            limit: "rpm".into(),
                            percent: vec![],
                            refusing_for_minutes: Some(5),
                        },
                        Threshold {
                            entity: "key-1".into(),
                            resource: "gpt-4".into(),
                            limit: "tpd".into(),
                            percent: vec![80, 100],
                            refusing_for_minutes: None,
                        },
                    ],
                ),
                one(
                    "alerts clear",
                    Cleared {
                        entity: "key-1".into(),
                        resource: "gpt-4".into(),
                        limit: Some("tpd".into()),
                        cleared: true,
                    },
                ),
                one(
                    "concurrency set, concurrency get, concurrency clear",
                    ConcurrencyLevel {
                        level: "resource gpt-4".into(),
                        limits: vec!["streams=5/30s".into()],
                    },
                ),
                many(
                    "audit",
                    vec![Event {
                        event_id: "01KAQ3N9V4D5YJ6W8X2R7T0M1C".into(),
                        timestamp: CREATED.into(),
                        action: "limits_set".into(),
                        entity: "key-1".into(),
                        resource: Some("gpt-4".into()),
                        principal: Some("dynalimit-cli".into()),
                        details: BTreeMap::from([("disabled".into(), json!(true))]),
                    }],
                ),
            ],
        ),
        (
            "Local DynamoDB",
            vec![
                one(
                    "local up",
                    Local::Running {
                        pid: Some(48213),
                        endpoint: "http://127.0.0.1:8000".into(),
                        answering: None,
                        table: Some("dynalimit".into()),
                    },
                ),
                one(
                    "local status",
                    Local::Running {
                        pid: Some(48213),
                        endpoint: "http://127.0.0.1:8000".into(),
                        answering: Some(true),
                        table: None,
                    },
                ),
                one("local down", Local::Stopped { pid: Some(48213) }),
                one(
                    "local env",
                    LocalEnv {
                        endpoint: "http://127.0.0.1:8000".into(),
                        variables: BTreeMap::from([
                            ("AWS_ACCESS_KEY_ID".into(), "dynalimit".into()),
                            (
                                "AWS_ENDPOINT_URL_DYNAMODB".into(),
                                "http://127.0.0.1:8000".into(),
                            ),
                            ("AWS_REGION".into(), "us-east-1".into()),
                            ("AWS_SECRET_ACCESS_KEY".into(), "local".into()),
                            (
                                "DYNALIMIT_ENDPOINT_URL".into(),
                                "http://127.0.0.1:8000".into(),
                            ),
                        ]),
                    },
                ),
                one(
                    "local logs",
                    LocalLog {
                        file: "/home/me/.cache/dynalimit/local/dynamodb-local.log".into(),
                        lines: vec![
                            "Initializing DynamoDB Local with the following configuration:".into(),
                            "Port:\t8000".into(),
                        ],
                    },
                ),
            ],
        ),
        (
            "Stack and table",
            vec![
                one("deploy", stack()),
                one(
                    "status",
                    Status {
                        stack: stack(),
                        table_status: Some("ACTIVE".into()),
                        item_count: Some(1342),
                        version: Some(TableVersion {
                            schema_version: "0.10.0".into(),
                            lambda_version: Some("0.17.0".into()),
                            client_min_version: "0.17.0".into(),
                        }),
                    },
                ),
                one(
                    "delete",
                    StackDeleted {
                        stack: "limits-prod".into(),
                        status: "DELETE_COMPLETE".into(),
                        table: "limits-prod".into(),
                        table_status: "ACTIVE".into(),
                        deletion_protection: Some(true),
                    },
                ),
                many(
                    "list",
                    vec![
                        ListedStack {
                            stack: "limits-prod".into(),
                            tool: "dynalimit".into(),
                            status: "UPDATE_COMPLETE".into(),
                            table: "limits-prod".into(),
                            created: Some(CREATED.into()),
                            updated: Some("2026-11-27T16:40:11Z".into()),
                            version: Some("0.1.0".into()),
                            schema_version: Some("0.10.0".into()),
                            lambda_version: Some("0.17.0".into()),
                            client_min_version: Some("0.17.0".into()),
                        },
                        ListedStack {
                            stack: "payments".into(),
                            tool: "zae-limiter".into(),
                            status: "CREATE_COMPLETE".into(),
                            table: "payments".into(),
                            created: Some(CREATED.into()),
                            updated: None,
                            version: Some("0.17.0".into()),
                            schema_version: Some("0.10.0".into()),
                            lambda_version: Some("0.17.0".into()),
                            client_min_version: None,
                        },
                    ],
                ),
                one(
                    "check",
                    Check {
                        stack: "limits-prod".into(),
                        result: Compatibility::UpdateAvailable,
                        reason: Some(
                            "the aggregator is 0.16.0, this client's is 0.17.0: `dynalimit \
                             upgrade` brings it up"
                                .into(),
                        ),
                        dynalimit: "0.1.0".into(),
                        implements: "0.17.0".into(),
                        client_schema_version: "0.10.0".into(),
                        table: Some(TableVersion {
                            schema_version: "0.10.0".into(),
                            lambda_version: Some("0.16.0".into()),
                            client_min_version: "0.16.0".into(),
                        }),
                    },
                ),
                one(
                    "upgrade",
                    Upgraded {
                        stack: Stack {
                            status: "UPDATE_COMPLETE".into(),
                            ..stack()
                        },
                        dynalimit_version: Some("0.1.0".into()),
                        code_updated: true,
                        version: TableVersion {
                            schema_version: "0.10.0".into(),
                            lambda_version: Some("0.17.0".into()),
                            client_min_version: "0.16.0".into(),
                        },
                    },
                ),
                one(
                    "lambda-export",
                    LambdaPackage {
                        file: "aggregator.zip".into(),
                        written: true,
                        source: "target/lambda/arm64/dynalimit-aggregator/bootstrap.zip".into(),
                        bytes: 4_812_301,
                        code_key: "aggregator/5f1d2c3b4a596877-4812301.zip".into(),
                        lambda_version: "0.17.0".into(),
                    },
                ),
                one(
                    "version",
                    Version {
                        dynalimit: "0.1.0".into(),
                        schema_version: "0.10.0".into(),
                        compatible_with: "zae-limiter 0.17.0".into(),
                        table: Some(TableCompatibility {
                            table_schema_version: "0.10.0".into(),
                            table_lambda_version: None,
                            table_client_min_version: "0.17.0".into(),
                            table_updated_by: Some("dynalimit:0.1.0".into()),
                            compatible: true,
                        }),
                    },
                ),
            ],
        ),
        (
            "Benchmark",
            vec![
                one(
                    "bench --json",
                    Report {
                        machine: Machine {
                            cpus: 2,
                            cpu_model: "Example CPU @ 2.40GHz".into(),
                            memory_gib: 7.8,
                        },
                        ops_per_case: 1000,
                        entities: 256,
                        results: vec![
                            case("raw-update", 1480.0, 652.0, 1.0),
                            case("warm-acquire", 1610.0, 601.0, 1.0),
                        ],
                        admission: vec![admission("dynalimit", 59, 71)],
                        targets: vec![Verdict {
                            target: "warm acquire p50 <= 1.15 x raw UpdateItem p50 (c=1, hot)"
                                .into(),
                            value: 1.088,
                            met: Some(true),
                        }],
                        aggregator: Some(Processor {
                            batch: 1000,
                            records_per_s_one_core: 412_000.0,
                            target: 100_000,
                        }),
                    },
                ),
                one(
                    "bench --compare --json",
                    CompareReport {
                        machine: example_machine(),
                        ops_per_case: 1000,
                        entities: 256,
                        peer: Peer {
                            library: "zae-limiter".into(),
                            version: "0.17.0".into(),
                            python: "3.11.7".into(),
                            cpu_measure: "time.process_time_ns(): CPU time of every thread of \
                                          the Python process, ended threads included"
                                .into(),
                            check_requests_sent: 5,
                            check_requests_counted: 5,
                        },
                        dynalimit: vec![case("warm-acquire", 1610.0, 601.0, 1.0)],
                        zae: vec![case("warm-acquire", 3220.0, 300.0, 1.0)],
                        ratios: vec![Ratio {
                            op: "warm-acquire".into(),
                            shape: "hot".into(),
                            concurrency: 1,
                            p50: 2.0,
                            p99: 2.0,
                            mean: 2.0,
                            ops_per_s: 0.5,
                            cpu_per_op: 9.5,
                            dynalimit_requests_per_op: 1.0,
                            zae_requests_per_op: 1.0,
                        }],
                        admission: vec![
                            admission("dynalimit", 59, 71),
                            admission("zae-limiter", 58, 80),
                        ],
                    },
                ),
                one(
                    "bench --hot-key --json",
                    HotKeyReport {
                        machine: Machine {
                            cpus: 2,
                            cpu_model: "Example CPU @ 2.40GHz".into(),
                            memory_gib: 7.8,
                        },
                        partition_writes_per_s: 50,
                        tasks: 64,
                        steady_seconds: 5,
                        splits: 1,
                        points: vec![HotKeyPoint {
                            shards: 2,
                            seconds: 1.4,
                            admitted_per_s: 98.0,
                            target_per_s: 80.0,
                            ceiling_per_s: 610.0,
                            met: true,
                            failed: 1520,
                            throttled_requests: 1534,
                            forwarded_requests: 498,
                        }],
                        admitted: 702,
                        recorded: 702.0,
                        conserved: true,
                    },
                ),
                one(
                    "bench --mixed --json",
                    MixedReport {
                        machine: Machine {
                            cpus: 2,
                            cpu_model: "Example CPU @ 2.40GHz".into(),
                            memory_gib: 7.8,
                        },
                        partition_writes_per_s: 50,
                        seconds: 20.1,
                        created_after_s: 0.4,
                        capacity: 240,
                        refill_amount: 1200,
                        refill_period_seconds: 60,
                        allowance: 642.0,
                        dynalimit: MixedSide {
                            library: "dynalimit".into(),
                            version: "0.1.0".into(),
                            tasks: 16,
                            admitted: 380,
                            rejected: 1210,
                            errors: 0,
                            first_error: None,
                            requests: None,
                        },
                        zae: MixedSide {
                            library: "zae-limiter".into(),
                            version: "0.17.0".into(),
                            tasks: 16,
                            admitted: 232,
                            rejected: 950,
                            errors: 0,
                            first_error: None,
                            requests: Some(3620),
                        },
                        admitted: 612,
                        ratio: 0.953,
                        allowance_at_deadline: 640.0,
                        admitted_at_deadline: 610,
                        ratio_at_deadline: 0.953,
                        target: 0.95,
                        met: true,
                        over_admitted: false,
                        shards: 2,
                        splits: 1,
                        recorded: 612.0,
                        conserved: true,
                        held: 9.5,
                        throttled_requests: 812,
                        forwarded_requests: 6120,
                    },
                ),
                one(
                    "loadtest",
                    LoadReport {
                        entities: vec!["lt-1".into(), "lt-2".into()],
                        resource: "gpt-4".into(),
                        concurrency: 32,
                        rate: None,
                        seconds: 60.02,
                        attempts: 41_250,
                        admitted: 2_402,
                        rejected: 38_848,
                        errors: BTreeMap::new(),
                        first_errors: BTreeMap::new(),
                        acquires_per_second: 687.3,
                        admitted_per_second: 40.0,
                        p50_ms: 4.1,
                        p90_ms: 6.8,
                        p99_ms: 14.2,
                        max_ms: 61.0,
                        requests: 4_870,
                        requests_per_acquire: 0.118,
                        requests_by_operation: BTreeMap::from([
                            ("UpdateItem".into(), 4_804),
                            ("GetItem".into(), 66),
                        ]),
                        limits: vec![LimitLoad {
                            limit: "rpm".into(),
                            cost: 1,
                            admitted_tokens: 2_402,
                            allowance: 2_402,
                            share: Some(1.0),
                        }],
                    },
                ),
            ],
        ),
    ]
}

/// The page.
fn page() -> String {
    let mut out = String::from(
        "# What the `dynalimit` commands print\n\n\
         <!-- Generated from crates/dynalimit-cli/src/output by the test \
         output::catalog::the_page_is_current; do not edit by hand. -->\n\n\
         Every command prints its result on standard output: as aligned text by default, as \
         JSON with `--output json` (`bench` takes `--json`). Notes, progress and the cursor \
         of the next page (`more: --cursor …`) go to standard error, so standard output \
         parses as one JSON document. The JSON is an object, or an array of objects for \
         lists; keys are sorted. The tables below give each key, its type and its meaning, \
         which says when a key may be null or absent. Amounts of tokens are whole tokens; \
         times are UTC. The examples show the shapes; their values are made up, not \
         measured.\n\n\
         Other writers share the table, so no string is printed with a character a terminal \
         would act on instead of showing: control characters (C0, DEL, C1) and the \
         bidirectional embeddings, overrides, isolates and marks (U+061C, U+200E, U+200F, \
         U+202A–U+202E, U+2066–U+2069). The text form writes each as an escape (`\\n`, \
         `\\r`, `\\t`, otherwise `\\u{1b}` with the code point in hexadecimal); the JSON \
         form writes each as a JSON escape (`\\u001b`), which a parser reads back as \
         stored.\n",
    );
    let mut shown = BTreeSet::new();
    for (title, entries) in sections() {
        write!(out, "\n## {title}\n").unwrap();
        for entry in entries {
            write_entry(&mut out, &entry, &mut shown);
        }
    }
    out
}

/// Writes one entry; a type already in `shown` is named, not listed again.
fn write_entry(out: &mut String, entry: &Entry, shown: &mut BTreeSet<String>) {
    let commands: Vec<String> = entry
        .commands
        .split(", ")
        .map(|c| format!("`{c}`"))
        .collect();
    write!(out, "\n### {}\n\n", commands.join(", ")).unwrap();
    let schema = &entry.schema;
    let title = schema["title"].as_str().unwrap_or("");
    if entry.array {
        writeln!(out, "An array of `{title}`.\n").unwrap();
    }
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    for (name, object) in std::iter::once((&title.to_owned(), schema)).chain(&defs) {
        if shown.insert(name.clone()) {
            write_object(out, name, object);
        } else {
            writeln!(out, "`{name}`: as above.\n").unwrap();
        }
    }
    writeln!(
        out,
        "Example:\n\n```json\n{}\n```",
        serde_json::to_string_pretty(&entry.example).unwrap()
    )
    .unwrap();
}

/// One line of text from a doc comment.
fn text(schema: &Value) -> String {
    schema["description"]
        .as_str()
        .unwrap_or("")
        .replace('\n', " ")
}

/// A type (an object's keys, an enumeration's values) under a heading of `level`.
fn write_object(out: &mut String, name: &str, schema: &Value) {
    writeln!(out, "#### `{name}`\n\n{}\n", text(schema)).unwrap();
    if let Some(values) = enum_values(schema) {
        for (value, meaning) in values {
            writeln!(out, "- `{value}`{meaning}").unwrap();
        }
        out.push('\n');
        return;
    }
    write_keys(out, schema, None);
    let variants = schema["oneOf"].as_array().cloned().unwrap_or_default();
    if variants.is_empty() {
        return;
    }
    let tag = tag_of(&variants);
    let then = if schema.get("properties").is_some() {
        "Then, by"
    } else {
        "By"
    };
    writeln!(out, "{then} `{tag}`:\n").unwrap();
    for variant in &variants {
        let value = &variant["properties"][&tag]["const"];
        writeln!(out, "`{tag}` = `{value}`: {}\n", text(variant)).unwrap();
        write_keys(out, variant, Some(&tag));
    }
}

/// The values of an enumeration with their meanings, when `schema` is one.
fn enum_values(schema: &Value) -> Option<Vec<(String, String)>> {
    if let Some(values) = schema["enum"].as_array() {
        return Some(
            values
                .iter()
                .map(|v| (v.to_string(), String::new()))
                .collect(),
        );
    }
    let variants = schema["oneOf"].as_array()?;
    variants
        .iter()
        .map(|v| {
            let value = v.get("const")?;
            Some((value.to_string(), format!(": {}", text(v))))
        })
        .collect()
}

/// The key every variant fixes with a constant.
fn tag_of(variants: &[Value]) -> String {
    let first = variants[0]["properties"]
        .as_object()
        .expect("variants are objects");
    first
        .iter()
        .find(|(_, p)| p.get("const").is_some())
        .map(|(k, _)| k.clone())
        .expect("a tagged enumeration")
}

/// The table of an object's keys (but `skip`).
fn write_keys(out: &mut String, schema: &Value, skip: Option<&str>) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    out.push_str("| key | type | meaning |\n|---|---|---|\n");
    for (key, property) in properties {
        if Some(key.as_str()) == skip {
            continue;
        }
        writeln!(
            out,
            "| `{key}` | {} | {} |",
            type_of(property),
            text(property)
        )
        .unwrap();
    }
    if let Some(extra) = schema.get("additionalProperties") {
        writeln!(
            out,
            "| any other key | {} | see the description above |",
            type_of(extra)
        )
        .unwrap();
    }
    out.push('\n');
}

/// A schema's type in words.
fn type_of(schema: &Value) -> String {
    if let Some(path) = schema["$ref"].as_str() {
        return format!("`{}`", path.rsplit('/').next().unwrap_or(path));
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let kinds: Vec<String> = any.iter().map(type_of).collect();
        return kinds.join(" or ");
    }
    let kinds: Vec<&str> = match &schema["type"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => return "any JSON value".into(),
    };
    let words: Vec<String> = kinds
        .iter()
        .map(|kind| match *kind {
            "array" => format!("array of {}", type_of(&schema["items"])),
            "object" => match schema.get("additionalProperties") {
                Some(values) => format!("object (name → {})", type_of(values)),
                None => "object".into(),
            },
            other => other.into(),
        })
        .collect();
    words.join(" or ")
}

fn page_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli-output.md")
}

#[test]
fn the_page_is_current() {
    let page = page();
    let path = page_path();
    if std::env::var_os("DYNALIMIT_WRITE_DOCS").is_some() {
        std::fs::write(&path, &page).expect("write docs/cli-output.md");
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == page,
        "docs/cli-output.md differs from the output types; rewrite it with \
         `DYNALIMIT_WRITE_DOCS=1 cargo test -p dynalimit-cli --bin dynalimit the_page_is_current`"
    );
}

#[test]
fn every_key_of_every_type_is_documented() {
    let mut undocumented = Vec::new();
    for (_, entries) in sections() {
        for entry in entries {
            let mut objects = vec![entry.schema.clone()];
            objects.extend(
                entry.schema["$defs"]
                    .as_object()
                    .into_iter()
                    .flat_map(|d| d.values().cloned()),
            );
            for object in objects {
                let variants = object["oneOf"].as_array().cloned().unwrap_or_default();
                for o in std::iter::once(&object).chain(&variants) {
                    if text(o).is_empty() {
                        undocumented.push(format!("{}: a type", entry.commands));
                    }
                    for (key, p) in o["properties"].as_object().into_iter().flatten() {
                        if text(p).is_empty() && p.get("const").is_none() {
                            undocumented.push(format!("{}: {key}", entry.commands));
                        }
                    }
                }
            }
        }
    }
    assert!(undocumented.is_empty(), "{undocumented:#?}");
}

#[test]
fn the_examples_show_every_key_their_types_print() {
    // Each example is a value of its type; a key its schema lists but the example lacks is
    // one the page shows no instance of (allowed only for keys absent by design).
    let absent_by_design = ["reason", "answering", "table"];
    for (_, entries) in sections() {
        for entry in entries {
            let example = match &entry.example {
                Value::Array(items) => items[0].clone(),
                other => other.clone(),
            };
            let keys = entry.schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k);
            for key in keys {
                assert!(
                    example.get(key).is_some() || absent_by_design.contains(&key.as_str()),
                    "{}: the example lacks {key}",
                    entry.commands
                );
            }
        }
    }
}
