//! The aggregator's environment contract, read from both sides: what `infra/template.yaml`
//! sets on the function, and what the binary reads (`dynalimit_aggregator::config`).

use std::collections::BTreeMap;

use dynalimit_aggregator::config::{
    DEFAULT_SNAPSHOT_TTL_DAYS, ENV_SNAPSHOT_RETENTION_DAYS, ENV_SNAPSHOT_WINDOWS, ENV_TABLE,
    ENVIRONMENT, EnvVar,
};
use dynalimit_aggregator::{Settings, SnapshotWindow};
use dynalimit_stack::LOG_LEVELS;
use dynalimit_tests::template::{
    function_environment, parameter_default, resolve_with_defaults, template,
};
use serde_json::{Value, json};

fn variables(t: &Value) -> &serde_json::Map<String, Value> {
    t["Resources"]["AggregatorFunction"]["Properties"]["Environment"]["Variables"]
        .as_object()
        .expect("the function has environment variables")
}

#[test]
fn the_template_sets_exactly_what_the_aggregator_reads_with_the_same_defaults() {
    let t = template();
    let set = variables(&t);
    let read: BTreeMap<&str, &EnvVar> = ENVIRONMENT.iter().map(|v| (v.name, v)).collect();
    for name in set.keys() {
        assert!(
            read.contains_key(name.as_str()),
            "the template sets {name}, which the aggregator never reads"
        );
    }
    for v in ENVIRONMENT.iter().filter(|v| v.required) {
        assert!(
            set.contains_key(v.name),
            "the aggregator requires {}, which the template does not set",
            v.name
        );
    }
    assert_eq!(set[ENV_TABLE], json!({ "Ref": "RateLimitsTable" }));

    // A variable fed by a parameter has the parameter's default as its own default.
    let resources = BTreeMap::from([("RateLimitsTable", "limits".to_owned())]);
    for (name, value) in set {
        if let Some(default) = read[name.as_str()].default {
            assert_eq!(
                resolve_with_defaults(&t, value, &resources),
                default,
                "{name}"
            );
        }
    }
    assert_eq!(
        parameter_default(&t, "SnapshotRetentionDays"),
        DEFAULT_SNAPSHOT_TTL_DAYS.to_string()
    );
    assert_eq!(
        SnapshotWindow::parse_list(&parameter_default(&t, "SnapshotWindows")).unwrap(),
        Settings::new("limits").windows
    );

    // The environment of a stack with default parameters starts the aggregator with its
    // default settings on the stack's table.
    let env = function_environment(&t, "AggregatorFunction", &resources);
    let settings = Settings::from_lookup(|k| env.get(k).cloned()).expect("settings");
    assert_eq!(settings, Settings::new("limits"));
}

#[test]
fn every_value_the_parameters_allow_is_accepted_by_the_aggregator() {
    let t = template();
    let p = &t["Parameters"];
    // SnapshotRetentionDays: a number from 1 up; the aggregator takes any positive integer.
    assert_eq!(p["SnapshotRetentionDays"]["Type"], "Number");
    assert_eq!(p["SnapshotRetentionDays"]["MinValue"], 1);
    // SnapshotWindows: the pattern admits lists of the three names, which the aggregator reads.
    assert_eq!(
        p["SnapshotWindows"]["AllowedPattern"],
        "^(hourly|daily|monthly)(,(hourly|daily|monthly))*$"
    );
    for (windows, days) in [("monthly", "1"), ("hourly,daily,monthly", "3650")] {
        let env = BTreeMap::from([
            (ENV_TABLE.to_owned(), "limits".to_owned()),
            (ENV_SNAPSHOT_WINDOWS.to_owned(), windows.to_owned()),
            (ENV_SNAPSHOT_RETENTION_DAYS.to_owned(), days.to_owned()),
        ]);
        let settings = Settings::from_lookup(|k| env.get(k).cloned()).expect(windows);
        assert_eq!(settings.snapshot_ttl_days.to_string(), days);
    }
}

#[test]
fn the_function_logs_json_at_the_level_parameter_into_the_stack_log_group() {
    let t = template();
    let f = &t["Resources"]["AggregatorFunction"]["Properties"];
    assert_eq!(
        f["LoggingConfig"],
        json!({
            "LogFormat": "JSON",
            "ApplicationLogLevel": { "Ref": "LogLevel" },
            "SystemLogLevel": "INFO",
            "LogGroup": { "Ref": "AggregatorLogGroup" },
        })
    );
    // Lambda's application levels that `tracing` also knows (Lambda's FATAL is not one), in
    // the spelling Lambda requires; the CLI's options pass the same.
    assert_eq!(
        t["Parameters"]["LogLevel"]["AllowedValues"],
        json!(["ERROR", "WARN", "INFO", "DEBUG", "TRACE"])
    );
    assert_eq!(
        t["Parameters"]["LogLevel"]["AllowedValues"],
        json!(LOG_LEVELS)
    );
    // The level comes from the logging configuration, not from a variable of its own.
    assert!(!variables(&t).contains_key("RUST_LOG"));
    let env = function_environment(
        &t,
        "AggregatorFunction",
        &BTreeMap::from([("RateLimitsTable", "limits".to_owned())]),
    );
    assert_eq!(env["AWS_LAMBDA_LOG_FORMAT"], "JSON");
    assert_eq!(env["AWS_LAMBDA_LOG_LEVEL"], "INFO");
}
