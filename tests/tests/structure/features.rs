//! What a service compiles: `dynalimit` with its `provision` feature off depends on no
//! CloudFormation or S3 SDK, and with the default features (provisioning on) it does, so the
//! check can tell the two apart. The demo's binary compiles the data plane alone.

use std::collections::BTreeSet;
use std::process::Command;

use crate::source;

/// The packages `dynalimit` compiles with these feature arguments (normal and build
/// dependencies, as `cargo tree` resolves them for this package alone).
fn packages(features: &[&str]) -> BTreeSet<String> {
    packages_of("dynalimit", features)
}

/// The packages `package` compiles with these feature arguments.
fn packages_of(package: &str, features: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(source::root())
        .args(["tree", "--locked", "-p", package, "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(features)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

const CONTROL_PLANE: [&str; 2] = ["aws-sdk-cloudformation", "aws-sdk-s3"];

#[test]
fn a_service_without_provisioning_compiles_no_control_plane_sdk() {
    let lean = packages(&["--no-default-features", "--features", "dynamodb"]);
    assert!(
        lean.contains("aws-sdk-dynamodb") && lean.contains("dynalimit-repository"),
        "the data plane is there: {lean:?}"
    );
    for sdk in CONTROL_PLANE {
        assert!(!lean.contains(sdk), "{sdk} is compiled without `provision`");
    }
    assert!(!lean.contains("dynalimit-stack"));
    assert!(
        !lean.contains("dynalimit-local"),
        "dev tooling stays out of services"
    );

    let default = packages(&[]);
    for sdk in CONTROL_PLANE {
        assert!(default.contains(sdk), "`provision` (default) brings {sdk}");
    }
    assert!(!default.contains("dynalimit-local"));
}

#[test]
fn the_in_process_limiters_need_no_aws_sdk() {
    let core_only = packages(&["--no-default-features"]);
    assert!(core_only.contains("dynalimit-core"));
    let aws: Vec<_> = core_only.iter().filter(|p| p.starts_with("aws")).collect();
    assert!(aws.is_empty(), "{aws:?}");
}

#[test]
fn the_demo_compiles_no_control_plane() {
    let demo = packages_of("dynalimit-demo", &[]);
    assert!(
        demo.contains("dynalimit") && demo.contains("dynalimit-local"),
        "the limiter and the emulator are there: {demo:?}"
    );
    for package in [
        "dynalimit-stack",
        "dynalimit-aggregator",
        "dynalimit-cli",
        "aws-sdk-s3",
        "aws-sdk-cloudformation",
        "aws-sdk-dynamodbstreams",
        "zip",
        "axum",
    ] {
        assert!(!demo.contains(package), "the demo compiles {package}");
    }
}
