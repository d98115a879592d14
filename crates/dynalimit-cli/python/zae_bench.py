"""zae-limiter's half of `dynalimit bench --compare zae` and `dynalimit bench --mixed`.

The `dynalimit` binary embeds this file, writes it to a temporary file and runs it with the
Python named by `--python`. It reads one JSON request line on standard input:

    {"endpoint": "http://127.0.0.1:8000", "table": "...", "namespace": "bench-zae",
     "entities": 256, "ops": 1000, "concurrency": [1, 8, 32],
     "cases": ["warm-acquire", "warm-cascade", "adjust", "first-touch"],
     "shapes": ["hot", "many"], "resource": "model", "limits": [<limit>, ...],
     "admission": {"resource": "admission", "limit": <limit>, "seconds": 5}}

where a limit is {"name", "capacity", "refill_amount", "refill_period_seconds"}. It connects to
the namespace (registered by the caller) with `Repository.connect()`, stores `limits` as the
namespace's system defaults, creates the cascade parents and children, warms every bucket the
warm cases use, then measures each case as the Rust side does. It writes JSON lines to standard
output, each an object with one key:

* `ready`: the library's and Python's versions, the CPU measure, and the request counter's
  self-check (requests sent, requests counted), before any case;
* `case`: the figures of one case, in the fields of the Rust side's `Case`;
* `admission`: the raw counts of one admission run at one concurrency;
* `done`: the end.

For `--mixed` the request is `{"endpoint", "table", "namespace", "mixed": {"entity",
"resource", "limit", "tasks"}}`: after `ready` the script waits for a second line,
`{"until_epoch_ms": N}`, then `tasks` tasks acquire 1 of `limit` on the entity (its limit
stored by the caller) until the wall clock passes N, and it writes `counts` (admitted,
rejected, errors, the first error, requests sent, and the epoch ms after the last task
ended), then `done`.

On failure it writes `{"error": "<traceback>"}` and exits 1.

Requests are counted by a `before-send.dynamodb.*` handler on the aiobotocore client's event
system: botocore emits it once per HTTP request it sends (each retry included), named after the
DynamoDB operation. Client CPU is `time.process_time_ns()` (CLOCK_PROCESS_CPUTIME_ID: user and
system time of every thread of the process, ended ones included) over the case.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
import traceback
from collections import Counter
from importlib import metadata
from typing import Any

# Local emulators accept any credentials; a real endpoint uses the normal chain.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "dynalimit")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from zae_limiter import Limit, RateLimiter, Repository  # noqa: E402
from zae_limiter.exceptions import RateLimitExceeded  # noqa: E402

CONSUME = {"rpm": 1, "tpm": 100}
CPU_MEASURE = (
    "time.process_time_ns(): CPU time of every thread of the Python process, "
    "ended threads included"
)


def emit(kind: str, doc: Any) -> None:
    sys.stdout.write(json.dumps({kind: doc}) + "\n")
    sys.stdout.flush()


def limit_from(doc: dict[str, Any]) -> Limit:
    return Limit.custom(
        doc["name"],
        capacity=doc["capacity"],
        refill_amount=doc["refill_amount"],
        refill_period_seconds=doc["refill_period_seconds"],
    )


class Requests:
    """Requests the client sent, by DynamoDB operation name."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()

    def __call__(self, event_name: str, **_: Any) -> None:
        # `before-send.dynamodb.UpdateItem`: returning None lets the request go.
        self.by_operation[event_name.rsplit(".", 1)[-1]] += 1

    def snapshot(self) -> Counter[str]:
        return Counter(self.by_operation)


def pick(sorted_ns: list[int], q: float) -> float:
    """The q-quantile in microseconds, chosen as the Rust side chooses it."""
    idx = min(int(math.floor((len(sorted_ns) - 1) * q + 0.5)), len(sorted_ns) - 1)
    return sorted_ns[idx] / 1000.0


async def run_parallel(workers: int, items: list[Any], work: Any) -> None:
    queue = list(reversed(items))

    async def worker() -> None:
        while queue:
            await work(queue.pop())

    await asyncio.gather(*(worker() for _ in range(workers)))


class Bench:
    def __init__(self, request: dict[str, Any], repo: Repository, requests: Requests) -> None:
        self.request = request
        self.repo = repo
        self.requests = requests
        self.limiter = RateLimiter(repository=repo)
        self.entities = int(request["entities"])
        self.resource = request["resource"]
        self.fresh = 0

    async def prepare(self) -> None:
        await self.repo.set_system_defaults([limit_from(x) for x in self.request["limits"]])

        async def one(i: int) -> None:
            await self.repo.create_entity(f"p-{i}")
            await self.repo.create_entity(f"c-{i}", parent_id=f"p-{i}", cascade=True)
            for entity in (f"e-{i}", f"c-{i}"):
                async with self.limiter.acquire(entity, self.resource, {"rpm": 1, "tpm": 1}):
                    pass

        await run_parallel(16, list(range(self.entities)), one)

    def entity_index(self, shape: str, i: int) -> int:
        return 0 if shape == "hot" else i % self.entities

    async def one(self, op: str, shape: str, i: int) -> None:
        e = self.entity_index(shape, i)
        if op in ("warm-acquire", "warm-cascade"):
            prefix = "c" if op == "warm-cascade" else "e"
            async with self.limiter.acquire(f"{prefix}-{e}", self.resource, CONSUME):
                pass
        elif op == "adjust":
            async with self.limiter.acquire(f"e-{e}", self.resource, CONSUME) as lease:
                await lease.adjust(tpm=50)
        elif op == "first-touch":
            n = self.fresh
            self.fresh += 1
            if shape == "hot":
                entity, resource = "e-0", f"fresh-{n}"
            else:
                entity, resource = f"fresh-{n}", self.resource
            async with self.limiter.acquire(entity, resource, CONSUME):
                pass
        else:
            raise ValueError(f"unknown case {op!r}")

    async def case(self, op: str, shape: str, concurrency: int, ops: int) -> dict[str, Any]:
        next_index = 0
        latencies: list[int] = []

        async def worker() -> None:
            nonlocal next_index
            while next_index < ops:
                i = next_index
                next_index += 1
                t0 = time.perf_counter_ns()
                await self.one(op, shape, i)
                latencies.append(time.perf_counter_ns() - t0)

        before = self.requests.snapshot()
        cpu_before = time.process_time_ns()
        started = time.perf_counter_ns()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = (time.perf_counter_ns() - started) / 1e9
        cpu_us = (time.process_time_ns() - cpu_before) / 1000.0
        sent = self.requests.snapshot() - before
        latencies.sort()
        n = len(latencies)
        return {
            "op": op,
            "shape": shape,
            "concurrency": concurrency,
            "ops": ops,
            "p50_us": round(pick(latencies, 0.50)),
            "p90_us": round(pick(latencies, 0.90)),
            "p99_us": round(pick(latencies, 0.99)),
            "mean_us": round(sum(latencies) / n / 1000.0),
            "ops_per_s": round(n / wall_s),
            "requests_per_op": round(sum(sent.values()) / n, 2),
            "requests_by_operation": {k: round(v / n, 2) for k, v in sorted(sent.items())},
            "cpu_us_per_op": round(cpu_us / n, 1),
        }

    async def admission(self, concurrency: int) -> dict[str, Any]:
        """Tasks acquiring 1 of a refill-bound limit on one fresh bucket for `seconds`."""
        spec = self.request["admission"]
        limit = limit_from(spec["limit"])
        resource = spec["resource"]
        entity = f"adm-{concurrency}"
        await self.repo.set_limits(entity, [limit], resource=resource)
        before = self.requests.snapshot()
        started = time.perf_counter()
        deadline = started + float(spec["seconds"])
        counts = await acquire_while(
            self.limiter,
            (entity, resource, limit.name),
            concurrency,
            lambda: time.perf_counter() < deadline,
        )
        elapsed = time.perf_counter() - started
        sent = self.requests.snapshot() - before
        return {
            "concurrency": concurrency,
            "seconds": elapsed,
            **counts,
            "requests": sum(sent.values()),
        }


async def acquire_while(
    limiter: RateLimiter, bucket: tuple[str, str, str], tasks: int, running: Any
) -> dict[str, Any]:
    """`tasks` tasks acquiring 1 of the limit on (entity, resource) while `running()`, each
    trying again at once when refused; the admitted, rejected and failed counts, and the
    admitted acquires that returned while `running()` still held (`admitted_in_time`)."""
    entity, resource, name = bucket
    counts: Counter[str] = Counter()
    first_error: str | None = None

    async def worker() -> None:
        nonlocal first_error
        while running():
            try:
                async with limiter.acquire(entity, resource, {name: 1}):
                    pass
                counts["admitted"] += 1
                if running():
                    counts["admitted_in_time"] += 1
            except RateLimitExceeded:
                counts["rejected"] += 1
                # A refusal answered from the rejection cache awaits nothing: let the
                # other tasks run.
                await asyncio.sleep(0)
            except Exception as e:  # counted and reported, the run goes on
                counts["errors"] += 1
                if first_error is None:
                    first_error = f"{type(e).__name__}: {e}"
                await asyncio.sleep(0)

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return {
        "admitted": counts["admitted"],
        "admitted_in_time": counts["admitted_in_time"],
        "rejected": counts["rejected"],
        "errors": counts["errors"],
        "first_error": first_error,
    }


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


async def mixed(spec: dict[str, Any], repo: Repository, requests: Requests) -> None:
    """The `--mixed` fleet: waits for the start line, acquires until its deadline, and
    writes its counts."""
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:
        raise EOFError("standard input closed before the start line")
    until = int(json.loads(line)["until_epoch_ms"])
    before = requests.snapshot()
    counts = await acquire_while(
        RateLimiter(repository=repo),
        (spec["entity"], spec["resource"], spec["limit"]),
        int(spec["tasks"]),
        lambda: epoch_ms() < until,
    )
    sent = requests.snapshot() - before
    emit(
        "counts",
        {**counts, "requests": sum(sent.values()), "ended_epoch_ms": epoch_ms()},
    )


async def check_counter(repo: Repository, requests: Requests) -> dict[str, int]:
    """Sends a known number of plain requests and reads what the handler counted."""
    client = await repo._get_client()
    before = requests.snapshot()
    sent = 5
    for _ in range(sent):
        await client.describe_table(TableName=repo.table_name)
    counted = sum((requests.snapshot() - before).values())
    return {"sent": sent, "counted": counted}


async def main() -> int:
    request = json.loads(sys.stdin.readline())
    repo = await Repository.connect(
        request["namespace"],
        stack=request["table"],
        endpoint_url=request["endpoint"],
        region=os.environ["AWS_DEFAULT_REGION"],
    )
    try:
        requests = Requests()
        client = await repo._get_client()
        client.meta.events.register("before-send.dynamodb.*", requests)
        emit(
            "ready",
            {
                "library": "zae-limiter",
                "version": metadata.version("zae-limiter"),
                "python": sys.version.split()[0],
                "cpu_measure": CPU_MEASURE,
                "request_check": await check_counter(repo, requests),
            },
        )
        if request.get("mixed"):
            await mixed(request["mixed"], repo, requests)
            emit("done", {})
            return 0
        bench = Bench(request, repo, requests)
        await bench.prepare()
        for concurrency in request["concurrency"]:
            for op in request["cases"]:
                for shape in request["shapes"]:
                    emit("case", await bench.case(op, shape, concurrency, int(request["ops"])))
        if request.get("admission"):
            for concurrency in request["concurrency"]:
                emit("admission", await bench.admission(concurrency))
        emit("done", {})
    finally:
        await repo.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except Exception:
        emit("error", traceback.format_exc())
        sys.exit(1)
