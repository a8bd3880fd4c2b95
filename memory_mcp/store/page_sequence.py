"""The pages of a log as callers see them: a sequence whose ids, threads and timestamps are columns.

What a retrieve walks every page for (the snapshot's digest, sessions, the recent window, time
windows, what is pending) needs only those three fields, so they are kept as lists; the page itself
is built only when asked for. A sequence that holds its pages (`HeldPages`) builds nothing; one that
reads them back (`StoredPages`: the JSON log by byte offset, PostgreSQL rows by position) need not
parse nor hold 100,000 exchanges to search them.
"""

from __future__ import annotations

import json
import operator
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import overload

from memory_mcp.base.errors import LogReplaced
from memory_mcp.base.framing import copied_array
from memory_mcp.models import Page

_CHUNK = 512  # pages built at a time when a caller walks them all
# Below this many pages a log is read about as fast as a saved directory of it is checked; a
# directory is saved again once this many more pages are known (and at close if any more are).
DIRECTORY_MIN_PAGES = 1000


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
        """Take the next page's fields into the columns (the store appends, nobody else). The ids
        go last: their length is the sequence's, which a reader on another thread must never see
        ahead of the other columns."""
        thread = thread_id or ""
        self._threads.append(self._thread_names.setdefault(thread, thread))
        self._timestamps.append(timestamp)
        self._ids.append(page_id)

    def _take_columns(self, ids: list[str], threads: list[str], timestamps: list[str]) -> None:
        """Columns read back whole (as a saved directory holds them), in place of noting each page."""
        self._thread_names = {name: name for name in threads}
        self._threads = [self._thread_names[name] for name in threads]
        self._timestamps, self._ids = timestamps, ids

    def _read(self, positions: Sequence[int]) -> list[Page]:
        """The pages at these positions (within bounds), in that order, built or fetched; a
        `range` of positions is a contiguous one (step 1)."""
        raise NotImplementedError

    def pick(self, positions: Sequence[int]) -> list[Page]:
        """The pages at these positions, in that order, fetched together (one read of the file,
        one query): what a retrieve shows."""
        count = len(self)
        if any(not 0 <= position < count for position in positions):
            raise IndexError("page position out of range")
        return self._read(positions)

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

    def between(self, start: int, stop: int | None = None) -> PageSequence:
        """The pages from `start` up to `stop` (the end when None), as a view with its columns:
        what a plain slice gives, typed as such."""
        first, last, _ = slice(start, stop).indices(len(self))
        return _Slice(self, first, max(first, last))

    @overload
    def __getitem__(self, key: int) -> Page: ...

    @overload
    def __getitem__(self, key: slice) -> Sequence[Page]: ...  # a PageSequence; with a step, a list

    def __getitem__(self, key: int | slice) -> Page | Sequence[Page]:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:  # every few pages: those pages, as a list of them
                return self._read(list(range(start, stop, step)))
            return self.between(start, stop)
        position = operator.index(key)
        count = len(self)
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError("page position out of range")
        return self._read([position])[0]

    def __iter__(self) -> Iterator[Page]:
        for start in range(0, len(self), _CHUNK):
            yield from self._read(range(start, min(start + _CHUNK, len(self))))

    def __reversed__(self) -> Iterator[Page]:
        for stop in range(len(self), 0, -_CHUNK):
            yield from reversed(self._read(range(max(0, stop - _CHUNK), stop)))

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
        self._whole: PageSequence = whole._whole if isinstance(whole, _Slice) else whole
        self._start: int = whole._start + start if isinstance(whole, _Slice) else start
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

    def _read(self, positions: Sequence[int]) -> list[Page]:
        if isinstance(positions, range):
            return self._whole._read(range(self._start + positions.start, self._start + positions.stop))
        return self._whole._read([self._start + position for position in positions])


def packed_columns(pages: PageSequence, count: int) -> tuple[list[str], bytes, bytes]:
    """The first `count` pages' columns as a saved directory holds them: the threads' names, each
    page's thread as its number among them (int32), and the ids and timestamps as one JSON array
    of two lists (parsed whole in C at a start: 100,000 pages in ~40 ms)."""
    page_threads = pages.threads[:count]
    names = list(dict.fromkeys(page_threads))
    number = {name: n for n, name in enumerate(names)}
    numbers = array("i", [number[name] for name in page_threads])
    listed = json.dumps([pages.ids[:count], pages.timestamps[:count]], ensure_ascii=False, separators=(",", ":"))
    return names, numbers.tobytes(), listed.encode()


def unpacked_columns(
    names: list[str], numbers: memoryview, listed: memoryview, count: int
) -> tuple[list[str], list[str], list[str]]:
    """The ids, threads and timestamps `packed_columns` gave; ValueError unless they add up to
    `count` pages whose threads are among `names`."""
    thread_numbers = copied_array("i", numbers)
    ids, timestamps = json.loads(bytes(listed))
    if len(thread_numbers) != count or len(ids) != count or len(timestamps) != count:
        raise ValueError("damaged (its columns do not add up)")
    if count and (min(thread_numbers) < 0 or max(thread_numbers) >= len(names)):
        raise ValueError("damaged (its threads do not add up)")
    return ids, [names[n] for n in thread_numbers], timestamps


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

    def _read(self, positions: Sequence[int]) -> list[Page]:
        if isinstance(positions, range):
            return self._pages[positions.start : positions.stop]
        return [self._pages[position] for position in positions]


class StoredPages(PageSequence):
    """A sequence whose pages are read back from storage when asked for (`_load`); those asked
    for one by one or a few at a time are kept, the last KEPT_PAGES of them, as a retrieve shows
    the same recent pages again and again. A page read back must have the id its column says,
    or the storage no longer holds the log this sequence was read from (LogReplaced); a store that
    replaces the log itself (an erase) retires the sequence, kept pages and all."""

    KEPT_PAGES = 256
    _FEW = 32  # a read of more pages walks the log: they are not kept

    def __init__(self) -> None:
        super().__init__()
        self._kept: OrderedDict[int, Page] = OrderedDict()
        self._kept_guard = threading.Lock()
        self._retired = False

    def retire(self) -> None:
        """The log was replaced (exchanges erased): no page of it is read back, nor given from
        those kept."""
        with self._kept_guard:
            self._retired = True
            self._kept.clear()

    def _load(self, positions: Sequence[int]) -> list[Page]:
        """The pages at these positions (within bounds; a `range` when contiguous), read."""
        raise NotImplementedError

    def _checked(self, positions: Sequence[int]) -> list[Page]:
        pages = self._load(positions)
        if self._retired or any(page.page_id != self._ids[n] for n, page in zip(positions, pages, strict=True)):
            raise LogReplaced("exchanges were erased while they were read; ask again")
        return pages

    def _read(self, positions: Sequence[int]) -> list[Page]:
        if len(positions) > self._FEW:
            return self._checked(positions)
        with self._kept_guard:
            if self._retired:
                raise LogReplaced("exchanges were erased while they were read; ask again")
            found = {position: self._kept[position] for position in positions if position in self._kept}
            for position in found:
                self._kept.move_to_end(position)
        missing = sorted(set(positions) - found.keys())
        if missing:
            loaded = dict(zip(missing, self._checked(missing), strict=True))
            with self._kept_guard:
                self._kept.update(loaded)
                while len(self._kept) > self.KEPT_PAGES:
                    self._kept.popitem(last=False)
            found.update(loaded)
        return [found[position] for position in positions]
