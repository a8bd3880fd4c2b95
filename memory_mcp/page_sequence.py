"""The pages of a log as callers see them: a sequence whose ids, threads and timestamps are columns.

What a retrieve walks every page for (the snapshot's digest, sessions, the recent window, time
windows, what is pending) needs only those three fields, so they are kept as lists; the page itself
is built only when asked for. A store that holds its pages (`HeldPages`) builds nothing; one that
reads them back by position (the JSON log by byte offset) need not parse nor hold 100,000 exchanges
to search them.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import overload

from memory_mcp.models import Page

_CHUNK = 512  # pages built at a time when a caller walks them all


class PageSequence(Sequence[Page]):
    """The pages of one log in order, growing as the log does (a slice keeps its bounds).

    Callers read it and never change it; `ids`, `threads` (the updater's thread key: "" for pages
    without one) and `timestamps` are read-only views of the columns."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._threads: list[str] = []
        self._timestamps: list[str] = []
        self._thread_names: dict[str, str] = {}  # each thread's name held once, not once a page

    def _note(self, page_id: str, thread_id: str | None, timestamp: str) -> None:
        """Take the next page's fields into the columns (the store appends, nobody else)."""
        thread = thread_id or ""
        self._ids.append(page_id)
        self._threads.append(self._thread_names.setdefault(thread, thread))
        self._timestamps.append(timestamp)

    def _build(self, start: int, stop: int) -> list[Page]:
        """Pages `start` to `stop` (within bounds, start < stop), built or fetched."""
        raise NotImplementedError

    @property
    def ids(self) -> Sequence[str]:
        return self._ids

    @property
    def threads(self) -> Sequence[str]:
        return self._threads

    @property
    def timestamps(self) -> Sequence[str]:
        return self._timestamps

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, key: int) -> Page: ...

    @overload
    def __getitem__(self, key: slice) -> PageSequence: ...

    def __getitem__(self, key: int | slice) -> Page | PageSequence:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise ValueError("pages are sliced in order, without a step")
            return _Slice(self, start, max(start, stop))
        position = operator.index(key)
        count = len(self)
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError("page position out of range")
        return self._build(position, position + 1)[0]

    def __iter__(self) -> Iterator[Page]:
        for start in range(0, len(self), _CHUNK):
            yield from self._build(start, min(start + _CHUNK, len(self)))

    def __reversed__(self) -> Iterator[Page]:
        for stop in range(len(self), 0, -_CHUNK):
            yield from reversed(self._build(max(0, stop - _CHUNK), stop))

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same pages in the same order, as a list of them would be."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(mine == theirs for mine, theirs in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which have none


class _Slice(PageSequence):
    """Pages `start` to `stop` of another sequence: its columns copied (pointers), no page built."""

    def __init__(self, whole: PageSequence, start: int, stop: int) -> None:
        # A slice of a slice refers to the sequence underneath: views never stack up.
        self._whole, self._start = (whole._whole, whole._start + start) if isinstance(whole, _Slice) else (whole, start)
        self._stop = self._start + (stop - start)

    @property
    def ids(self) -> Sequence[str]:
        return self._whole._ids[self._start : self._stop]

    @property
    def threads(self) -> Sequence[str]:
        return self._whole._threads[self._start : self._stop]

    @property
    def timestamps(self) -> Sequence[str]:
        return self._whole._timestamps[self._start : self._stop]

    def __len__(self) -> int:
        return self._stop - self._start

    def _build(self, start: int, stop: int) -> list[Page]:
        return self._whole._build(self._start + start, self._start + stop)


def columns_of(pages: Sequence[Page]) -> PageSequence:
    """`pages` with their columns: as they are when a store gave them, else (a list) wrapped."""
    return pages if isinstance(pages, PageSequence) else HeldPages(pages)


class HeldPages(PageSequence):
    """A sequence that holds its pages (what a store read whole, or a caller made)."""

    def __init__(self, pages: Sequence[Page] = ()) -> None:
        super().__init__()
        self._pages: list[Page] = []
        self.extend(pages)

    def extend(self, pages: Sequence[Page]) -> None:
        for page in pages:
            self._note(page.page_id, page.thread_id, page.timestamp)
        self._pages.extend(pages)

    def _build(self, start: int, stop: int) -> list[Page]:
        return self._pages[start:stop]
