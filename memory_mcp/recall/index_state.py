"""A word index (bm25.LexicalIndex) as flat data: what a snapshot saves and a restart or a
one-pass build hands it, and the copy a save takes under the scope's lock to make that data after."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from memory_mcp.recall.posting_codec import CompactPostings

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
        """The offsets (int64) and entries (float32 pairs) of every term's postings, in term order.
        Compact ones are decoded in one pass: a term at a time took 12-15 us a term (30,000 generated
        exchanges, 3,922 terms: 45-60 ms, the pass 63-139), ~0.5 s for real conversations' 40,000."""
        given = self.pairs if self.compact is None else memoryview(self.compact.flat()).cast("B").cast("f")
        offsets, chunks = array("q", [0]), []
        for term in self.terms:
            number = self.numbers.get(term, -1)
            chunk = self.grown[term] if term in self.grown else given[2 * self.ends[number] : 2 * self.ends[number + 1]]
            chunks.append(chunk)
            offsets.append(offsets[-1] + len(chunk) // 2)
        return offsets.tobytes(), b"".join(chunks)


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
