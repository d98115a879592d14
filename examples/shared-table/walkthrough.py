"""The Python half of the shared-table walkthrough (examples/shared-table/README.md).

A zae-limiter 0.17 service spends from the same bucket a dynalimit service spends from: it
connects to the table dynalimit opened, reads the limits dynalimit stored and acquires until
the bucket refuses, then prints what it saw.

    python walkthrough.py --stack dynalimit --endpoint-url http://127.0.0.1:8000 --entity key-1
"""

from __future__ import annotations

import argparse
import asyncio
import os

from zae_limiter import RateLimiter, Repository
from zae_limiter.exceptions import RateLimitExceeded


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stack", default="dynalimit")
    parser.add_argument("--endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"))
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--entity", default="key-1")
    parser.add_argument("--resource", default="gpt-4")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    repo = await Repository.connect(
        args.namespace,
        stack=args.stack,
        endpoint_url=args.endpoint_url,
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )
    try:
        limits = await repo.get_resource_defaults(args.resource)
        print("limits stored by dynalimit:", ", ".join(
            f"{l.name}={l.capacity}/{l.refill_period_seconds}s" for l in limits
        ))
        limiter = RateLimiter(repository=repo)
        admitted = 0
        while True:
            try:
                async with limiter.acquire(args.entity, args.resource, {"rpm": 1}):
                    admitted += 1
            except RateLimitExceeded as e:
                print(f"admitted {admitted}, then refused: retry in {e.retry_after_seconds:.1f} s")
                break
    finally:
        await repo.close()


if __name__ == "__main__":
    asyncio.run(main())
