"""Postings stored compactly come back exactly, whatever their steps and weights, and a restored
index holding them saves them as it holds them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memory_mcp.recall import index_state
from memory_mcp.recall.bm25 import LexicalIndex
from memory_mcp.recall.posting_codec import CompactPostings, compact


def flat_postings(postings: list[list[tuple[int, float]]]) -> tuple[bytes, bytes]:
    """Offsets (int64) and entries (float32 pairs) of these terms' postings."""
    offsets = np.concatenate([[0], np.cumsum([len(term) for term in postings])]).astype(np.int64)
    entries = np.array([pair for term in postings for pair in term], dtype=np.float32).reshape(-1)
    return offsets.tobytes(), entries.tobytes()


POSTINGS = [
    [(0, 1.0), (3, -0.5), (4, 2.5)],
    [],  # a term whose only page was taken back
    [(70_000, 1.0), (70_001, 0.5)],  # a first document past 16 bits
    [(5, 1.0), (40_000, -1.5)],  # a step past 16 bits
    [(10, 1.0), (12, 0.5), (11, -0.5)],  # a thread's earlier page given the term later: a step back
    [(1, 200.0), (2, 1.0)],  # a weight past 8 bits of halves
    [(2, 0.3), (9, 1.0)],  # a weight that is not a half
    [(16_777_215, -63.5)],  # the last document an index numbers, the widest narrow weight
]


def test_every_term_comes_back_exactly_one_at_a_time_and_all_at_once() -> None:
    offsets, entries = flat_postings(POSTINGS)
    held = CompactPostings(offsets, compact(offsets, entries))

    for number, expected in enumerate(POSTINGS):
        got = np.frombuffer(held(number), dtype=np.float32).reshape(-1, 2)
        assert got.tolist() == np.array(expected, dtype=np.float32).reshape(-1, 2).tolist(), number
    assert np.frombuffer(held.flat(), dtype=np.float32).tobytes() == entries


def test_the_usual_postings_take_under_half_the_bytes() -> None:
    rng = np.random.default_rng(3)
    postings = [
        [(int(d), float(w)) for d, w in zip(np.sort(rng.choice(30_000, 200, replace=False)), rng.integers(1, 4, 200))]
        for _ in range(50)
    ]
    offsets, entries = flat_postings(postings)

    assert sum(len(part) for part in compact(offsets, entries)) < len(entries) / 2


def test_an_empty_index_holds_nothing() -> None:
    offsets, entries = flat_postings([])
    held = CompactPostings(offsets, compact(offsets, entries))

    assert len(held.flat()) == 0


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_parts_that_do_not_hold_what_the_offsets_say_are_refused(cut: int) -> None:
    offsets, entries = flat_postings(POSTINGS)
    parts = compact(offsets, entries)
    parts[cut] = parts[cut][: -(len(parts[cut]) // 2 or 1)] if parts[cut] else b"\0\0\0\0"

    with pytest.raises(ValueError, match="postings"):
        CompactPostings(offsets, parts)


@pytest.mark.parametrize("added", [0, 40, 400])
@pytest.mark.parametrize("per_term_cost", [0, 10**12], ids=["term by term", "in one pass"])
def test_a_restored_index_saves_what_it_holds_however_its_compact_postings_are_decoded(
    monkeypatch: pytest.MonkeyPatch, added: int, per_term_cost: int
) -> None:
    """A save decodes the postings not grown since the restart: one term at a time or all at once,
    the snapshot's postings are those of the same index restored from uncompacted postings."""
    monkeypatch.setattr(index_state, "TERM_DECODE_IN_ENTRIES", per_term_cost)
    rng = np.random.default_rng(5)
    words = [f"w{n}" for n in range(300)]
    pages = [(" ".join(rng.choice(words, 12)), f"t{n % 37}") for n in range(2400 + added)]
    built = LexicalIndex()
    built.extend(pages[:2400])
    state = built.state()
    held = CompactPostings(state.offsets, compact(state.offsets, state.entries))
    restored = {
        "compact": LexicalIndex.from_state(dataclasses.replace(state, entries=b"", compact=held)),
        "as pairs": LexicalIndex.from_state(state),
    }
    for index in restored.values():
        index.extend(pages[2400:])

    saved = {name: index.copy().state() for name, index in restored.items()}

    assert saved["compact"].terms == saved["as pairs"].terms
    assert bytes(saved["compact"].offsets) == bytes(saved["as pairs"].offsets)
    assert bytes(saved["compact"].entries) == bytes(saved["as pairs"].entries)
