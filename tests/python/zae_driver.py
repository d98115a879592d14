"""Drives zae-limiter 0.17 for the dynalimit interop suite.

Reads JSON documents from standard input, one a line, until it closes:

    {"endpoint": "http://127.0.0.1:8000", "stack": "table-name", "namespace": "default",
     "ops": [{"op": "get_entity", "id": "user-1"}, ...]}

connects to the existing table with ``Repository.connect()`` (no CloudFormation, no Lambda,
no writes to the version record), runs the operations in order and answers each document with
one line on standard output:
``{"results": [{"ok": <value>} | {"error": {"type": ..., "message": ...}}]}``. An operation that
fails stops its document's run unless it carries ``"continue": true``; the caller decides what an
error means. The caller keeps the process for its next document: importing zae-limiter takes
most of a short run's time.

An operation with ``"now_ms"`` runs with zae-limiter's token-bucket clock fixed at that epoch
millisecond (``Repository._now_ms``, the one clock its refill, ``rf`` stamps and TTLs read).

``reset_bucket`` and ``top_up`` call the repository's operations of the same name (optional
``idempotency_key`` and ``principal``) and answer ``{entity_id, resource, shards, amounts}``;
``available`` answers ``RateLimiter.available`` (whole tokens per limit, every shard summed).

The ``aggregate`` operation runs zae-limiter's aggregator (``process_stream_records``) on the
Lambda stream records it is given, against the same table.

Limits travel as ``{"name", "capacity", "refill_amount", "refill_period_seconds"}`` (plus
``"schedule"``, a list of ``{"cron", "tz", and "scale" or any of the absolute fields}``, on a
scheduled limit, ``"reset"``, a list of ``{"cron", "tz"}``, on a calendar quota, and
``"reset_after_seconds"`` on a session quota), entities
as their ``zae_limiter.Entity`` fields, buckets as their raw DynamoDB attribute values
(``{"N": "..."}``, ``{"S": "..."}``, ...) so the caller compares stored values exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

# Local emulators accept any credentials; a real endpoint uses the normal chain.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "dynalimit")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from zae_limiter import Limit, RateLimiter, Repository  # noqa: E402
from zae_limiter.exceptions import RateLimitExceeded  # noqa: E402
from zae_limiter.schedule import ScheduleEntry  # noqa: E402

ENTRY_FIELDS = ("scale", "capacity", "refill_amount", "refill_period_seconds")


def limit_to_json(limit: Limit) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": limit.name,
        "capacity": limit.capacity,
        "refill_amount": limit.refill_amount,
        "refill_period_seconds": limit.refill_period_seconds,
    }
    if limit.reset_schedule:
        doc["reset"] = [{"cron": e.cron, "tz": e.tz} for e in limit.reset_schedule]
    if limit.reset_after is not None:
        doc["reset_after_seconds"] = int(limit.reset_after.total_seconds())
    if limit.schedule:
        doc["schedule"] = [
            {"cron": e.cron, "tz": e.tz}
            | {f: getattr(e, f) for f in ENTRY_FIELDS if getattr(e, f) is not None}
            for e in limit.schedule
        ]
    return doc


def limit_from_json(doc: dict[str, Any]) -> Limit:
    if doc.get("reset_after_seconds"):
        limit = Limit(
            name=doc["name"],
            capacity=doc["capacity"],
            refill_amount=0,
            refill_period_seconds=doc["refill_period_seconds"],
            reset_after=timedelta(seconds=doc["reset_after_seconds"]),
            soft=doc.get("soft", False),
        )
        if doc.get("schedule"):
            limit = limit.with_schedule(tuple(ScheduleEntry(**e) for e in doc["schedule"]))
        return limit
    if doc.get("reset"):
        return Limit(
            name=doc["name"],
            capacity=doc["capacity"],
            refill_amount=0,
            refill_period_seconds=doc["refill_period_seconds"],
            reset_schedule=tuple(ScheduleEntry.reset(e["cron"], e["tz"]) for e in doc["reset"]),
            soft=doc.get("soft", False),
        )
    limit = Limit.custom(
        doc["name"],
        capacity=doc["capacity"],
        refill_amount=doc["refill_amount"],
        refill_period_seconds=doc["refill_period_seconds"],
        soft=doc.get("soft", False),
    )
    if doc.get("schedule"):
        limit = limit.with_schedule(tuple(ScheduleEntry(**e) for e in doc["schedule"]))
    return limit


def limits_to_json(limits: list[Limit] | None) -> list[dict[str, Any]]:
    return sorted((limit_to_json(x) for x in limits or []), key=lambda x: x["name"])


def entity_to_json(entity: Any) -> dict[str, Any] | None:
    if entity is None:
        return None
    return {
        "id": entity.id,
        "name": entity.name,
        "parent_id": entity.parent_id,
        "cascade": entity.cascade,
        "metadata": dict(entity.metadata or {}),
        "created_at": entity.created_at,
        "parent_generation": entity.parent_generation,
        "incarnation": entity.incarnation,
    }


ACCESS_METHODS = frozenset(
    f"{verb}_{level}{suffix}"
    for verb, suffix in (
        ("disable", ""),
        ("enable", ""),
        ("bypass", ""),
        ("clear", "_disabled"),
        ("set", "_cascade"),
        ("clear", "_cascade"),
    )
    for level in ("resource", "entity")
) | {"set_parent"}
def operation_to_json(result: Any) -> dict[str, Any]:
    """A ``BucketOperationResult`` (reset or top-up)."""
    return {
        "entity_id": result.entity_id,
        "resource": result.resource,
        "shards": result.shards,
        "amounts": dict(result.amounts),
    }


class Driver:
    def __init__(self, endpoint: str, stack: str) -> None:
        self.endpoint = endpoint
        self.stack = stack
        self.repos: dict[str, Repository] = {}

    async def repo(self, namespace: str) -> Repository:
        if namespace not in self.repos:
            self.repos[namespace] = await Repository.connect(
                namespace,
                stack=self.stack,
                endpoint_url=self.endpoint,
                region=os.environ["AWS_DEFAULT_REGION"],
                config_cache_ttl=0,
                rejection_cache_ttl=0,
            )
        return self.repos[namespace]

    async def close(self) -> None:
        for repo in self.repos.values():
            await repo.close()

    async def run(self, op: dict[str, Any], namespace: str) -> Any:
        ns = op.get("namespace", namespace)
        name = op["op"]
        if name == "connect":
            repo = await self.repo(ns)
            return {"namespace_id": repo.namespace_id, "namespace_name": repo.namespace_name}
        if name == "aggregate":
            return self.aggregate(op)
        if name == "register_namespace":
            # Any registered namespace can register another one.
            return await (await self.repo(ns)).register_namespace(op["name"])
        if name == "list_namespaces":
            found = await (await self.repo(ns)).list_namespaces()
            return sorted(
                ({"name": n["name"], "namespace_id": n["namespace_id"]} for n in found),
                key=lambda n: n["name"],
            )
        repo = await self.repo(ns)
        if "now_ms" in op:
            # The token-bucket clock of zae-limiter: refill, rf stamps and TTLs all read it.
            fixed = int(op["now_ms"])
            repo._now_ms = lambda: fixed  # type: ignore[method-assign]
        else:
            repo.__dict__.pop("_now_ms", None)
        if name == "create_entity":
            entity = await repo.create_entity(
                op["id"],
                name=op.get("name"),
                parent_id=op.get("parent_id"),
                cascade=op.get("cascade", False),
                metadata=op.get("metadata"),
            )
            return entity_to_json(entity)
        if name == "get_entity":
            return entity_to_json(await repo.get_entity(op["id"], consistent_read=True))
        if name == "delete_entity":
            await repo.delete_entity(op["id"])
            return None
        if name == "set_limits":
            kwargs: dict[str, Any] = {}
            if "disabled" in op:
                kwargs["disabled"] = op["disabled"]
            await repo.set_limits(
                op["entity"],
                [limit_from_json(x) for x in op["limits"]],
                resource=op.get("resource", "_default_"),
                **kwargs,
            )
            return None
        if name == "get_limits":
            limits = await repo.get_limits(op["entity"], resource=op.get("resource", "_default_"))
            return limits_to_json(limits)
        if name == "set_resource_defaults":
            await repo.set_resource_defaults(
                op["resource"], [limit_from_json(x) for x in op["limits"]]
            )
            return None
        if name == "get_resource_defaults":
            return limits_to_json(await repo.get_resource_defaults(op["resource"]))
        if name == "set_system_defaults":
            await repo.set_system_defaults(
                [limit_from_json(x) for x in op["limits"]],
                on_unavailable=op.get("on_unavailable"),
            )
            return None
        if name == "get_system_defaults":
            limits, on_unavailable = await repo.get_system_defaults()
            return {"limits": limits_to_json(limits), "on_unavailable": on_unavailable}
        if name == "resolve_limits":
            limits, _, source = await repo.resolve_limits(op["entity"], op["resource"])
            return {"limits": limits_to_json(limits), "source": source}
        if name == "access":
            # The disable/enable/bypass and cascade-policy setters and set_parent; each
            # answers the buckets it stamped.
            if op["method"] not in ACCESS_METHODS:
                raise ValueError(f"unknown access method {op['method']!r}")
            return await getattr(repo, op["method"])(*op["args"])
        if name == "reset_bucket":
            result = await repo.reset_bucket(
                op["entity"],
                op["resource"],
                principal=op.get("principal"),
                idempotency_key=op.get("idempotency_key"),
            )
            return operation_to_json(result)
        if name == "top_up":
            result = await repo.top_up(
                op["entity"],
                op["resource"],
                op["amounts"],
                principal=op.get("principal"),
                idempotency_key=op.get("idempotency_key"),
            )
            return operation_to_json(result)
        if name == "available":
            limiter = RateLimiter(repository=repo)
            return await limiter.available(op["entity"], op["resource"])
        if name == "acquire":
            return await self.acquire(repo, op)
        if name == "hammer":
            return await self.hammer(repo, op)
        if name == "raw_item":
            client = await repo._get_client()
            found = await client.get_item(
                TableName=repo.table_name,
                Key={"PK": {"S": op["pk"]}, "SK": {"S": op["sk"]}},
                ConsistentRead=True,
            )
            return found.get("Item")
        raise ValueError(f"unknown op {name!r}")

    def aggregate(self, op: dict[str, Any]) -> dict[str, Any]:
        """zae-limiter's aggregator on `records` (Lambda stream records), as its Lambda runs it:
        `process_stream_records` against this table with `windows` and `ttl_days`."""
        from zae_limiter_aggregator.processor import process_stream_records

        # The aggregator builds its own boto3 resource from the environment, and logs JSON
        # lines to standard output, which carries this driver's answer: keep them apart.
        before = os.environ.get("AWS_ENDPOINT_URL")
        os.environ["AWS_ENDPOINT_URL"] = self.endpoint
        try:
            with contextlib.redirect_stdout(sys.stderr):
                result = process_stream_records(
                    op["records"], self.stack, op["windows"], op.get("ttl_days", 90)
                )
        finally:
            # The process answers other documents next: leave the environment as found.
            if before is None:
                os.environ.pop("AWS_ENDPOINT_URL", None)
            else:
                os.environ["AWS_ENDPOINT_URL"] = before
        return {"snapshots_updated": result.snapshots_updated, "errors": result.errors}

    async def acquire(self, repo: Repository, op: dict[str, Any]) -> dict[str, Any]:
        """One acquire; `adjust` (optional) is applied to the lease before it commits."""
        limiter = RateLimiter(repository=repo)
        try:
            async with limiter.acquire(
                op["entity"], op["resource"], op["consume"], also=op.get("also")
            ) as lease:
                if op.get("adjust"):
                    await lease.adjust(**op["adjust"])
            return {"admitted": True}
        except RateLimitExceeded as e:
            return {
                "admitted": False,
                "retry_after_ms": round(e.retry_after_seconds * 1000),
            }

    async def hammer(self, repo: Repository, op: dict[str, Any]) -> dict[str, Any]:
        """`count` acquires of `consume` by `concurrency` workers until `deadline` (epoch s).
        With `count_errors`, an acquire that raises anything but a refusal is counted in
        `errors` and the worker goes on; otherwise the exception ends the operation. With
        `stop_file`, the workers also stop once that file exists."""
        limiter = RateLimiter(repository=repo)
        admitted = 0
        rejected = 0
        errors = 0
        remaining = op["count"]
        deadline = op.get("deadline")
        count_errors = op.get("count_errors", False)
        stop_file = op.get("stop_file")

        def running() -> bool:
            if deadline is not None and time.time() >= deadline:
                return False
            return stop_file is None or not os.path.exists(stop_file)

        async def worker() -> None:
            nonlocal admitted, rejected, errors, remaining
            while remaining > 0 and running():
                remaining -= 1
                try:
                    async with limiter.acquire(op["entity"], op["resource"], op["consume"]):
                        pass
                    admitted += 1
                except RateLimitExceeded:
                    rejected += 1
                    await asyncio.sleep(0)
                except Exception:
                    if not count_errors:
                        raise
                    errors += 1

        start = op.get("start_at")
        if start is not None:
            await asyncio.sleep(max(0.0, start - time.time()))
        await asyncio.gather(*(worker() for _ in range(op.get("concurrency", 1))))
        return {"admitted": admitted, "rejected": rejected, "errors": errors}


async def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The results of one request's operations."""
    driver = Driver(request["endpoint"], request["stack"])
    namespace = request.get("namespace", "default")
    results: list[dict[str, Any]] = []
    try:
        for op in request["ops"]:
            try:
                results.append({"ok": await driver.run(op, namespace)})
            except Exception as e:  # reported to the caller, which decides
                results.append(
                    {
                        "error": {
                            "type": type(e).__name__,
                            "message": str(e),
                            "trace": traceback.format_exc(limit=4),
                        }
                    }
                )
                if not op.get("continue"):
                    break
    finally:
        await driver.close()
    return {"results": results}


def main() -> int:
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(asyncio.run(answer(json.loads(line)))) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
