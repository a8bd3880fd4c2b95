"""A word index (bm25.LexicalIndex) as flat data: what a snapshot saves and a restart or a
one-pass build hands it, and the copy a save takes under the scope's lock to make that data after."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from memory_mcp.recall.posting_codec import CompactPostings

# What decoding one compact term on its own costs, in entries of the one pass over all terms.
TERM_DECODE_IN_ENTRIES = 500

NewestPage: TypeAlias = tuple[int, dict[str, int], dict[str, int]]  # (document, counts, slots)


@dataclass(frozen=True)
class IndexState:
    """A LexicalIndex as flat data: the postings of `terms[i]` are entries offsets[i]..offsets[i+1]
    of `entries` (float32 pairs, as _Postings holds them); `lengths` (float64) per document; each
    thread's newest document, with its own term counts and the place of its entry in each term's
    postings it is in (the next page of the thread lends it terms: into those entries, or new ones)."""

    terms: list[str]
    offsets: bytes | memoryview  # int64, len(terms) + 1
    entries: bytes | memoryview
    lengths: bytes | memoryview
    total_length: float
    newest_by_thread: Mapping[str, NewestPage]
    compact: CompactPostings | None = None  # where the postings are held compactly (entries then empty)


class NewestPages(Mapping[str, NewestPage]):
    """Each thread's newest page: those pages were added to since, over those of `saved` (a
    restored index's), which are read only when asked for (a snapshot copies them as they are)."""

    def __init__(self, added: dict[str, NewestPage], saved: Mapping[str, NewestPage]) -> None:
        self.added, self.saved = added, saved

    def __getitem__(self, thread: str) -> NewestPage:
        return self.added[thread] if thread in self.added else self.saved[thread]

    def __iter__(self) -> Iterator[str]:
        yield from (thread for thread in self.saved if thread not in self.added)
        yield from self.added

    def __len__(self) -> int:
        return len(self.saved) + sum(1 for thread in self.added if thread not in self.saved)


@dataclass(frozen=True)
class PostingsCopy:
    """What bm25's `_Postings.copy` took: the grown terms' pairs, and where the others' lie."""

    terms: list[str]
    numbers: dict[str, int]
    ends: memoryview[Any]
    pairs: memoryview[Any]
    compact: CompactPostings | None
    grown: dict[str, memoryview[Any]]

    def flat(self) -> tuple[bytes, bytes]:
        """The offsets (int64) and entries (float32 pairs) of every term's postings, in term order."""
        given = self._given()
        offsets, chunks = array("q", [0]), []
        for term in self.terms:
            chunk = self.grown[term] if term in self.grown else given(self.numbers[term])
            chunks.append(chunk)
            offsets.append(offsets[-1] + len(chunk) // 2)
        return offsets.tobytes(), b"".join(chunks)

    def _given(self) -> Callable[[int], memoryview[Any]]:
        """Term number -> its pairs as given (not grown since). Compact ones are decoded a term at a
        time where few are left ungrown, else all in one pass: at 30,000 generated exchanges (3,916
        terms, 2.4 million entries) a term took ~10 us on its own, the pass ~20 ns an entry."""
        pairs, ends, compact = self.pairs, self.ends, self.compact
        if compact is not None:
            left = sum(1 for term in self.numbers if term not in self.grown)
            if left * TERM_DECODE_IN_ENTRIES < compact.entry_count:
                return lambda number: memoryview(compact.decode(number))
            pairs = memoryview(compact.flat()).cast("B").cast("f")
        return lambda number: pairs[2 * ends[number] : 2 * ends[number + 1]]


@dataclass(frozen=True)
class IndexCopy:
    """A LexicalIndex as it was when copied, quick to take under the caller's lock; its `state`
    (the flat data a snapshot saves) is made after, while the index goes on."""

    postings: PostingsCopy
    lengths: bytes
    total_length: float
    newest_by_thread: NewestPages

    def __len__(self) -> int:
        return len(self.lengths) // 8

    def state(self) -> IndexState:
        offsets, entries = self.postings.flat()
        terms = self.postings.terms
        return IndexState(terms, offsets, entries, self.lengths, self.total_length, self.newest_by_thread)
