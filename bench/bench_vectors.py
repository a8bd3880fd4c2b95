#!/usr/bin/env python
"""What embeddings cost a retrieve and an add, at a given number of exchanges.

A user's memory is filled with generated exchanges (bench_store.py's word distribution) and, for
each, a stored vector of the local model's size and layout (random unit parts: what is measured is
the work, not the ranking, and computing real ones for 10,000 exchanges takes twenty minutes).
Then, in one run,
retrieve_memory (warm, one untimed call first) and add_memory are timed with embeddings off and
with `backend: local` (the query's vector is computed for real each time), and their ratio is
printed. With embeddings on, adds also wake the background work, which here has nothing to do
but the added exchange.

Usage: .venv/bin/python bench/bench_vectors.py [--size 10000] [--queries 200]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
sys.path.insert(0, str(PROJECT_ROOT / "bench"))

import numpy as np
from bench_store import generated_pages

from memory_mcp.base.settings import EmbeddingSettings, Settings
from memory_mcp.models import AddMemoryRequest, RetrieveMemoryRequest
from memory_mcp.recall.embedders import LocalEmbedder, stored_model
from memory_mcp.recall.vectors import PARTS, quantised
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

DIMENSIONS = 384  # multilingual-e5-small


def seed(data: Path, size: int, model: str) -> list[str]:
    """`size` exchanges with a vector each; return some queries drawn from the same words."""
    service = MemoryService(Settings(data_storage_path=data))
    pages = generated_pages(size)
    scope = Scope("default")
    for start in range(0, size, 1000):
        service.store.append_pages(scope, pages[start : start + 1000])
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((size, PARTS, DIMENSIONS)).astype(np.float32)
    matrix = (matrix / np.linalg.norm(matrix, axis=2, keepdims=True)).reshape(size, PARTS * DIMENSIONS)
    for start in range(0, size, 1000):
        service.store.append_vectors(
            scope,
            quantised([page.page_id for page in pages[start : start + 1000]], matrix[start : start + 1000], model),
        )
    service.close()
    return [" ".join(random.Random(n).sample(page.user_input.split(), 3)) for n, page in enumerate(pages[:500])]


def timed(service: MemoryService, queries: list[str], count: int) -> tuple[float, float, float]:
    """retrieve p50, p95 and add p50, in ms."""
    service.retrieve_memory(RetrieveMemoryRequest.build(query=queries[0]))  # loads the index (and vectors)
    retrieves = []
    for query in itertools.islice(itertools.cycle(queries), count):
        began = time.perf_counter()
        service.retrieve_memory(RetrieveMemoryRequest.build(query=query))
        retrieves.append((time.perf_counter() - began) * 1e3)
    adds = []
    for number in range(50):
        began = time.perf_counter()
        service.add_memory(AddMemoryRequest.build(user_input=f"one more exchange {number}", agent_response="ok"))
        adds.append((time.perf_counter() - began) * 1e3)
    retrieves.sort()
    return statistics.median(retrieves), retrieves[int(0.95 * len(retrieves)) - 1], statistics.median(adds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    model = stored_model(LocalEmbedder().model)
    with tempfile.TemporaryDirectory(prefix="bench-vectors-") as folder:
        data = Path(folder)
        queries = seed(data, args.size, model)
        figures = {}
        for backend in ("none", "local"):
            service = MemoryService(Settings(data_storage_path=data, embeddings=EmbeddingSettings(backend=backend)))
            service.start()
            try:
                figures[backend] = timed(service, queries, args.queries)
            finally:
                service.close()
    print(f"{args.size} exchanges, {args.queries} retrieves, 50 adds (ms)")
    print(f"{'embeddings':>10} {'retrieve p50':>13} {'p95':>7} {'add p50':>8}")
    for backend, (p50, p95, add) in figures.items():
        print(f"{backend:>10} {p50:>13.1f} {p95:>7.1f} {add:>8.2f}")
    off, on = figures["none"], figures["local"]
    print(f"ratio local/none: retrieve p50 {on[0] / off[0]:.2f}, add p50 {on[2] / off[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
