#!/usr/bin/env python
"""How long the dashboard's pages take, at a given number of exchanges and facts.

One user's memory is filled with generated exchanges (bench_store.py's word distribution) and
facts, `memory-mcp dashboard` is started on it, and each page is fetched over HTTP from this
process: once first, then --repeat times, of which the median and 95th percentile are printed.
Pages are opened in the order a person opens them (the list, the user, then a search); the user's
page starts building the search index in the background, so "search, cold" is measured apart: on
a fresh start, before any other page. What is timed includes the HTTP round trip on the loopback
interface, so it bounds the server's time from above.

Usage: .venv/bin/python bench/bench_dashboard.py [--size 10000] [--facts 100] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
sys.path.insert(0, str(PROJECT_ROOT / "bench"))

from bench_store import generated_pages

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddFactRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

PORT = 18799


def seed(data: Path, size: int, facts: int) -> tuple[str, str, str]:
    """`size` exchanges and `facts` facts for user "bench"; return a query drawn from them, the day
    of the middle exchange, and its id."""
    service = MemoryService(Settings(data_storage_path=data))
    pages = generated_pages(size)
    for start in range(0, size, 1000):
        service.store.append_pages(Scope("bench"), pages[start : start + 1000])
    for number in range(facts):
        service.add_fact(
            AddFactRequest.build(user_id="bench", content=f"Fact number {number}: {pages[number].user_input[:80]}")
        )
    service.close()
    middle = pages[size // 2]
    return " ".join(middle.user_input.split()[:3]), middle.timestamp[:10], middle.page_id


@contextmanager
def serving(folder: str) -> Iterator[str]:
    """`memory-mcp dashboard` over the memory in `folder`, started now; yields its base URL, every
    request sent with the owner's cookie (the key it printed, as opening that address sets it)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "memory_mcp", "dashboard", "--port", str(PORT)],
        env={**os.environ, "MEMORY_MCP_HOME": folder},
        cwd=PROJECT_ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{PORT}"
    try:
        assert server.stderr is not None
        for line in server.stderr:
            printed = re.search(r"\?key=([\w-]+)", line)
            if printed:
                break
        else:
            raise SystemExit("the dashboard printed no address")
        threading.Thread(target=server.stderr.read, daemon=True).start()  # drained, so it never blocks
        opener = urllib.request.build_opener()
        opener.addheaders = [("Cookie", f"memory-mcp-owner-{PORT}={printed[1]}")]
        urllib.request.install_opener(opener)
        while True:
            try:
                timed(f"{base}/users")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


def report(name: str, url: str, repeat: int) -> None:
    first = timed(url)
    times = sorted(timed(url) for _ in range(repeat))
    print(f"{name:<12} {first:8.1f} {statistics.median(times):8.1f} {times[int(0.95 * len(times)) - 1]:8.1f}")


def timed(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        response.read()
    return (time.perf_counter() - began) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as folder:
        query, day, page_id = seed(Path(folder), args.size, args.facts)
        print(f"{args.size} exchanges, {args.facts} facts; ms per page over HTTP on 127.0.0.1")
        print(f"{'page':<12} {'first':>8} {'p50':>8} {'p95':>8}")
        with serving(folder) as base:
            report("search, cold", f"{base}/users/bench/search?q={urllib.request.quote(query)}", args.repeat)
        with serving(folder) as base:
            for name, path in (
                ("users", "/users"),
                ("user", "/users/bench"),
                ("search", f"/users/bench/search?q={urllib.request.quote(query)}"),
                ("exchanges", f"/users/bench/exchanges?day={day}"),
                ("exchange", f"/users/bench/exchanges/{page_id}"),
            ):
                report(name, base + path, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
