"""A memory just large enough to have its word index saved (SnapshotKeeper.MIN_PAGES), and the
queries a test compares rankings by."""

from __future__ import annotations

import random

from memory_mcp.models import Page
from memory_mcp.recall.saved_index import SnapshotKeeper
from memory_mcp.store import Scope

USER = Scope("alice")
WORDS = (
    "garden lake violin taxes recipe bread marathon kitten train harbour museum ticket doctor "
    "birthday paint guitar winter summer river mountain coffee novel chess ferry bakery"
).split()
QUERIES = ["violin lessons by the lake", "bread recipe", "marathon training in winter", "ferry ticket harbour"]
SIZE = SnapshotKeeper.MIN_PAGES + 200


def conversation(count: int, start: int = 0) -> list[Page]:
    """`count` exchanges numbered from `start`, in 37 threads, of words drawn from WORDS."""
    rng = random.Random(start)
    return [
        Page(
            page_id=f"page_{n:05d}",
            user_input=" ".join(rng.choices(WORDS, k=8)),
            agent_response=" ".join(rng.choices(WORDS, k=6)),
            timestamp=f"2025-03-{1 + n % 28:02d}T10:00:00Z",
            thread_id=f"thread-{n % 37}",
        )
        for n in range(start, start + count)
    ]
