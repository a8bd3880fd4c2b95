#!/usr/bin/env python
"""Many users through one HTTP instance: memory stays within `memory.cached_scopes`, and what a
user let go costs when they come back.

--users users (default 5,000) of --pages exchanges each (100) are written through the store, then
one `python -m memory_mcp --transport streamable-http` serves them (loopback, no tokens: each call
names its user) with `memory.cached_scopes` = --budget (1,000), and --clients (4) concurrent SDK
clients call retrieve_memory:
  touch  every user once, in a shuffled order (each call reads that user's log and builds their
         index: the first call after a start);
  warm   --calls calls over --budget / 2 users retrieved just before (held in memory);
  cold   --calls calls over users retrieved longest ago (let go: read and indexed again).
The server's resident memory (VmRSS, from /proc) is printed after each phase, with its high-water
mark (VmHWM), and the latency of each phase as the clients see it (ms, p50 / p95).

Usage: .venv/bin/python bench/bench_many_users.py [--users 5000] [--pages 100] [--budget 1000]
       [--clients 4] [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
sys.path.insert(0, str(PROJECT_ROOT / "bench"))

from bench_store import generated_pages

from bench.http_clients import SCRUBBED, ServerProcess
from bench.stats import summary

DISTINCT_CONVERSATIONS = 50  # users share these texts (each with ids of its own): seeding stays quick


def seed(data: Path, users: list[str], pages: int) -> None:
    from memory_mcp.base.ids import new_id
    from memory_mcp.store import Scope
    from memory_mcp.store.files.backend import JsonStore

    conversations = [generated_pages(pages, seed=number) for number in range(DISTINCT_CONVERSATIONS)]
    store = JsonStore(data)
    for number, user in enumerate(users):
        texts = conversations[number % DISTINCT_CONVERSATIONS]
        store.append_pages(Scope(user), [page.model_copy(update={"page_id": new_id("page")}) for page in texts])


def resident_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Vm")
    )
    return tuple(int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def retrieve_all(url: str, calls: list[str], clients: int, questions: list[str]) -> list[float]:
    """retrieve_memory for each user in `calls`, shared out among `clients` concurrent clients; ms each."""
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []

    async def client(share: list[str]) -> None:
        async with (
            httpx2.AsyncClient(timeout=120) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for number, user in enumerate(share):
                arguments = {"user_id": user, "query": questions[number % len(questions)]}
                started = time.perf_counter()
                result = await session.call_tool("retrieve_memory", arguments)
                latencies.append((time.perf_counter() - started) * 1e3)
                if result.is_error:
                    raise RuntimeError(f"retrieve_memory for {user} failed: {result.content}")

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for number in range(clients):
                group.start_soon(client, calls[number::clients])

    anyio.run(main)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(7)
    users = [f"user{number:05d}" for number in range(args.users)]
    questions = ["what did we plan for the weekend", "the project deadline", "tea and the garden", "how is the family"]
    with tempfile.TemporaryDirectory(prefix="bench-many-users-") as folder:
        work = Path(folder)
        began = time.perf_counter()
        seed(work / "data", users, args.pages)
        print(f"{args.users} users x {args.pages} exchanges written in {time.perf_counter() - began:.0f} s")
        config = work / "config.json"
        config.write_text(
            json.dumps({"data_storage_path": str(work / "data"), "memory": {"cached_scopes": args.budget}}),
            encoding="utf-8",
        )
        env = {key: value for key, value in os.environ.items() if key not in SCRUBBED}
        server = ServerProcess(config, work / "server.log", env)
        try:
            server.wait_ready()
            url = server.url
            print(f"one HTTP instance, memory.cached_scopes {args.budget}, {args.clients} concurrent clients")
            print(f"{'phase':<28} {'calls':>6} {'p50 ms':>8} {'p95 ms':>8} {'RSS MB':>8} {'peak MB':>8}")
            retrieve_all(url, users[:1], 1, questions)
            rss, peak = resident_mb(server.process.pid)
            print(f"{'started, one call':<28} {1:>6} {'':>8} {'':>8} {rss:>8.0f} {peak:>8.0f}")
            order = users[:]
            rng.shuffle(order)
            phases = [
                ("touch: every user once", order),
                ("warm: held in memory", [rng.choice(order[-args.budget // 2 :]) for _ in range(args.calls)]),
                ("cold: let go, read again", [order[number] for number in range(args.calls)]),
            ]
            for name, calls in phases:
                times = summary(retrieve_all(url, calls, args.clients, questions))
                rss, peak = resident_mb(server.process.pid)
                print(f"{name:<28} {times['n']:>6} {times['p50']:>8.1f} {times['p95']:>8.1f} {rss:>8.0f} {peak:>8.0f}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
