"""Runs zae-limiter 0.17's Lambda auto-update against a stack dynalimit deployed.

Usage: ``zae_auto_update.py ENDPOINT STACK FUNCTION CLIENT_VERSION``

``Repository.open(auto_update=True)``, zae-limiter's default, compares the version record's
``lambda_version`` with its own version and, when the record's is older, pushes its Python
aggregator and provisioner code (``StackManager.deploy_lambda_code`` and
``deploy_provisioner_code``) to the functions its stack would have, ``{stack}-aggregator`` and
``{stack}-limits-provisioner``. The installed release is 0.17.0, which a dynalimit stack's
``lambda_version = 0.17.0`` does not send down that path; ``CLIENT_VERSION`` stands in for a
newer release by setting ``zae_limiter.__version__``, the one value the check and the push
read. Nothing else of zae-limiter is changed: its own check and update code runs.

Prints one JSON document: the CodeSha256 of ``FUNCTION`` (the aggregator dynalimit deployed)
before and after, the functions that exist before and after, what the version check decided,
the status of each code push zae-limiter attempted, and the version record afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("AWS_ACCESS_KEY_ID", "dynalimit")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402

import zae_limiter  # noqa: E402
from zae_limiter import Repository, schema  # noqa: E402
from zae_limiter.infra.stack_manager import StackManager  # noqa: E402
from zae_limiter.version import InfrastructureVersion, check_compatibility  # noqa: E402


async def main(endpoint: str, stack: str, function: str, client_version: str) -> dict:
    zae_limiter.__version__ = client_version
    lam = boto3.client("lambda", endpoint_url=endpoint, region_name="us-east-1")

    def functions() -> list[str]:
        return sorted(f["FunctionName"] for f in lam.list_functions()["Functions"])

    def sha() -> str:
        return lam.get_function(FunctionName=function)["Configuration"]["CodeSha256"]

    before = {"sha": sha(), "functions": functions()}

    pushes: list[dict] = []
    for method in ("deploy_lambda_code", "deploy_provisioner_code"):
        original = getattr(StackManager, method)

        def spy(original=original, method=method):
            async def call(self, *args, **kwargs):
                result = await original(self, *args, **kwargs)
                pushes.append({"push": method, "status": result.get("status")})
                return result

            return call

        setattr(StackManager, method, spy())

    # What zae-limiter's check decides on the record as it stands.
    ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    key = {
        "PK": {"S": schema.pk_system(schema.RESERVED_NAMESPACE)},
        "SK": {"S": schema.sk_version()},
    }
    stored = ddb.get_item(TableName=stack, Key=key, ConsistentRead=True)["Item"]
    fields = {k: v.get("S") for k, v in stored.items()}
    compatibility = check_compatibility(client_version, InfrastructureVersion.from_record(fields))
    decision = {
        "lambda_version": fields.get("lambda_version"),
        "requires_lambda_update": compatibility.requires_lambda_update,
    }
    error = None
    record = None
    try:
        repo = await Repository.open(
            "default", stack=stack, endpoint_url=endpoint, region="us-east-1", auto_update=True
        )
        record = await repo.get_version_record()
    except Exception as e:  # reported, the caller decides
        error = {"type": type(e).__name__, "message": str(e)}
    return {
        "before": before,
        "after": {"sha": sha(), "functions": functions()},
        "decision": decision,
        "pushes": pushes,
        "record": record,
        "error": error,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5])), default=str))
