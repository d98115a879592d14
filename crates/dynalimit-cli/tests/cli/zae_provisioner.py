"""Drives zae-limiter 0.17's provisioner code directly (no Lambda) against a table.

argv: endpoint table namespace_id manifest.yaml (apply | plan)

apply: writes every level the manifest declares, as the provisioner's apply does.
plan:  prints, as JSON, each level whose stored item differs from the one the provisioner
       would write, with the attributes only the table has, only the provisioner would
       write, and those whose values differ.
"""

import json
import os
import sys

endpoint, table, namespace_id, path, mode = sys.argv[1:6]
os.environ["AWS_ENDPOINT_URL"] = endpoint
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")

import boto3  # noqa: E402
import yaml  # noqa: E402
from zae_limiter_provisioner.applier import (  # noqa: E402
    _build_change_item,
    _normalized,
    apply_changes,
    drop_unchanged,
)
from zae_limiter_provisioner.differ import compute_diff  # noqa: E402
from zae_limiter_provisioner.manifest import LimitsManifest  # noqa: E402

with open(path) as f:
    manifest = LimitsManifest.from_dict(yaml.safe_load(f))
declared = compute_diff(manifest, {})
if mode == "apply":
    result = apply_changes(declared, table, namespace_id)
    print(json.dumps({"created": result.created, "errors": result.errors}))
    sys.exit(0)

client = boto3.client("dynamodb")
drift = []
for change in drop_unchanged(declared, table, namespace_id):
    pk, sk, want = _build_change_item(namespace_id, change)
    got = client.get_item(
        TableName=table, Key={"PK": {"S": pk}, "SK": {"S": sk}}, ConsistentRead=True
    ).get("Item", {})
    theirs, ours = _normalized(want), _normalized(got)
    drift.append(
        {
            "level": change.level,
            "target": change.target,
            "only_table": sorted(k for k in ours if k not in theirs),
            "only_provisioner": sorted(k for k in theirs if k not in ours),
            "differ": sorted(k for k in theirs if k in ours and ours[k] != theirs[k]),
        }
    )
print(json.dumps(drift))
