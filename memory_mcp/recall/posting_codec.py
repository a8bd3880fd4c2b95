"""Postings as a saved word index holds them: less than half the bytes of float32 pairs, read one
term at a time.

A first retrieve after a restart reads the whole saved index (from PostgreSQL, over a connection)
but looks at the postings of a few query terms. So the postings are stored small and a term's are
decoded only when first asked for. Within a term the documents are stored as the step from the one
before (the first from 0), 16-bit; the weights as twice their value, 8-bit, since every weight is a
multiple of one half (see bm25's NEIGHBOUR_WEIGHT). A term whose steps or weights do not fit is
stored at full width: 32-bit steps, float32 weights. A step may be negative: a thread's previous page
may be given a term after a later page of another thread was.

At 30,000 generated exchanges the saved index is 10.3 MB instead of 22.7, and PostgreSQL's first
retrieve ~50 ms faster (10 runs alternating over the same exchanges: medians 462 against 511 ms).
"""

from __future__ import annotations

from typing import Any

WIDE_STEPS, WIDE_WEIGHTS = 1, 2
# The parts, in order: per-term flags (uint8), narrow steps (int16), wide steps (int32), narrow
# weights (int8, halves), wide weights (float32).
PART_COUNT = 5
_ITEM_SIZES = (1, 2, 4, 1, 4)


def _wide_entries(flags: Any, counts: Any) -> tuple[Any, Any]:
    """Which entries, over all terms in order, have their steps and which their weights at full
    width: each term's flags repeated over its entries."""
    import numpy as np

    per_entry = np.repeat(flags, counts)
    return (per_entry & WIDE_STEPS) != 0, (per_entry & WIDE_WEIGHTS) != 0


def compact(offsets: Any, entries: Any) -> list[bytes]:
    """The parts that hold `entries` (float32 pairs), the postings of term i being pairs
    offsets[i]..offsets[i+1] (int64)."""
    import numpy as np

    starts = np.frombuffer(offsets, dtype=np.int64)
    counts = np.diff(starts)
    pairs = np.frombuffer(entries, dtype=np.float32).reshape(-1, 2)
    # int32 throughout (documents are below 2^24): a save at 30,000 exchanges peaked 31 MB higher in int64.
    documents = pairs[:, 0].astype(np.int32)
    weights = pairs[:, 1]
    steps = np.diff(documents, prepend=np.zeros(1, dtype=np.int32))
    firsts = starts[:-1][counts > 0]
    steps[firsts] = documents[firsts]
    del documents
    halves = weights * 2
    fits = (halves == np.round(halves)) & (np.abs(halves) <= 127)
    flags = np.zeros(len(counts), dtype=np.uint8)
    if len(firsts):
        narrow = (np.maximum.reduceat(steps, firsts) <= 32767) & (np.minimum.reduceat(steps, firsts) >= -32768)
        flags[counts > 0] = np.where(narrow, 0, WIDE_STEPS) | np.where(
            np.logical_and.reduceat(fits, firsts), 0, WIDE_WEIGHTS
        )
    wide_steps, wide_weights = _wide_entries(flags, counts)
    return [
        flags.tobytes(),
        steps[~wide_steps].astype(np.int16).tobytes(),
        steps[wide_steps].astype(np.int32).tobytes(),
        halves[~wide_weights].astype(np.int8).tobytes(),
        weights[wide_weights].astype(np.float32).tobytes(),
    ]


class CompactPostings:
    """Each term's postings as float32 (document, weight) pairs, decoded from the parts `compact`
    made: a term's when first asked for, then kept; anew by `decode`; all at once by `flat`."""

    def __init__(self, offsets: Any, parts: list[Any]) -> None:
        """ValueError unless the parts hold what the offsets say, no more and no less."""
        import numpy as np

        self._counts: Any = np.diff(np.frombuffer(offsets, dtype=np.int64))
        self.entry_count = int(self._counts.sum())
        if len(parts) != PART_COUNT or any(len(part) % size for part, size in zip(parts, _ITEM_SIZES, strict=True)):
            raise ValueError("its postings are not whole")
        self._flags = np.frombuffer(parts[0], dtype=np.uint8)
        self._narrow_steps, self._wide_steps = np.frombuffer(parts[1], np.int16), np.frombuffer(parts[2], np.int32)
        self._narrow_weights, self._wide_weights = np.frombuffer(parts[3], np.int8), np.frombuffer(parts[4], np.float32)
        if len(self._flags) != len(self._counts):
            raise ValueError("its postings do not match its terms")
        # Where each term's entries start in each part.
        self._at = []
        for wide, narrow_part, wide_part in (
            ((self._flags & WIDE_STEPS) != 0, self._narrow_steps, self._wide_steps),
            ((self._flags & WIDE_WEIGHTS) != 0, self._narrow_weights, self._wide_weights),
        ):
            narrow_at = np.concatenate([[0], np.cumsum(np.where(wide, 0, self._counts))])
            wide_at = np.concatenate([[0], np.cumsum(np.where(wide, self._counts, 0))])
            if narrow_at[-1] != len(narrow_part) or wide_at[-1] != len(wide_part):
                raise ValueError("its postings do not add up")
            self._at.append((narrow_at, wide_at))
        self._decoded: dict[int, memoryview] = {}

    def __call__(self, number: int, keep: bool = True) -> memoryview:
        """Term `number`'s pairs, kept for the next call unless not `keep` (the caller copies them)."""
        decoded = self._decoded.pop(number, None)
        if decoded is None:
            decoded = memoryview(self.decode(number))
        if keep:
            self._decoded[number] = decoded
        return decoded

    def decode(self, number: int) -> Any:
        """Term `number`'s pairs as a float32 array, decoded anew: reads nothing a search writes,
        so a save may call it on its own thread."""
        import numpy as np

        count, flag = int(self._counts[number]), int(self._flags[number])
        (narrow_steps_at, wide_steps_at), (narrow_weights_at, wide_weights_at) = self._at
        if flag & WIDE_STEPS:
            steps: Any = self._wide_steps[wide_steps_at[number] : wide_steps_at[number] + count]
        else:
            steps = self._narrow_steps[narrow_steps_at[number] : narrow_steps_at[number] + count]
        pairs = np.empty(2 * count, dtype=np.float32)
        pairs[0::2] = np.cumsum(steps, dtype=np.int64)
        if flag & WIDE_WEIGHTS:
            pairs[1::2] = self._wide_weights[wide_weights_at[number] : wide_weights_at[number] + count]
        else:
            pairs[1::2] = self._narrow_weights[narrow_weights_at[number] : narrow_weights_at[number] + count] * 0.5
        return pairs

    def flat(self) -> Any:
        """All terms' pairs, in term order, as one float32 array (for a snapshot of the whole index)."""
        import numpy as np

        starts = np.concatenate([[0], np.cumsum(self._counts)])
        wide_steps, wide_weights = _wide_entries(self._flags, self._counts)
        steps = np.empty(int(starts[-1]), dtype=np.int64)
        steps[~wide_steps], steps[wide_steps] = self._narrow_steps, self._wide_steps
        documents = np.cumsum(steps)
        before = np.concatenate([[0], documents])[starts[:-1]]  # each term's running sum before its first
        pairs = np.empty((len(steps), 2), dtype=np.float32)
        pairs[:, 0] = documents - np.repeat(before, self._counts)
        pairs[~wide_weights, 1], pairs[wide_weights, 1] = self._narrow_weights * 0.5, self._wide_weights
        return pairs.ravel()
