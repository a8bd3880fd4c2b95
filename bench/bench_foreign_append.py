#!/usr/bin/env python3
"""What a retrieve costs right after another process appended to a long page log.

A server keeps each log it has read in memory and, when another process appends, reads only the
new bytes (pread from where it stopped) after checking that the log is still the same one (its
inode and first record). For comparison the bench also times reading the whole file, which is
what a reader that re-reads the log on every foreign change would pay.

Usage:  .venv/bin/python bench/bench_foreign_append.py [--megabytes 32] [--rounds 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.stats import summary
from memory_mcp.base.settings import Settings
from memory_mcp.models import Page, RetrieveMemoryRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.durable import read_bytes
from memory_mcp.store.files.backend import JsonStore

WORDS = ["kettle", "violin", "harbour", "lantern", "pepper", "glacier", "orchid", "saddle", "meteor", "walnut"]
ALICE = Scope("alice")


def page(number: int) -> Page:
    words = " ".join(WORDS[(number * 7 + k) % len(WORDS)] for k in range(60))
    return Page(
        page_id=f"page_{number:08x}",
        user_input=f"exchange {number}: {words}",
        agent_response=f"answer {number}: {words}",
        timestamp="2025-01-01T00:00:00Z",
    )


def fill(root: Path, megabytes: int) -> int:
    """A log of about `megabytes` MB for alice; returns its page count."""
    store = JsonStore(root)
    size, number = 0, 0
    while size < megabytes * 1_000_000:
        batch = [page(number + k) for k in range(1000)]
        store.append_pages(ALICE, batch)
        number += len(batch)
        size = (store.scope_dir(ALICE) / "pages.jsonl").stat().st_size
    return number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-foreign-") as temp:
        root = Path(temp)
        pages = fill(root, args.megabytes)
        log_path = JsonStore(root).scope_dir(ALICE) / "pages.jsonl"
        server = MemoryService(Settings(data_storage_path=root))
        request = RetrieveMemoryRequest.build(query="violin harbour", user_id="alice")
        server.retrieve_memory(request)  # warm: the index is built
        other_process = JsonStore(root)
        after_foreign, quiet, whole_file = [], [], []
        for number in range(pages, pages + args.rounds):
            other_process.append_page(ALICE, page(number))
            started = time.perf_counter()
            server.retrieve_memory(request)
            after_foreign.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            server.retrieve_memory(request)
            quiet.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            read_bytes(log_path)
            whole_file.append((time.perf_counter() - started) * 1000)
        size = log_path.stat().st_size / 1_000_000
        server.close()  # its background saves of visits write into the directory about to go
    print(f"log: {pages} exchanges, {size:.1f} MB; {args.rounds} rounds")
    print(f"retrieve after another process appended one exchange (ms): {summary(after_foreign)}")
    print(f"retrieve with nothing new (ms):                             {summary(quiet)}")
    print(f"reading the whole log, for comparison (ms):                 {summary(whole_file)}")


if __name__ == "__main__":
    main()
