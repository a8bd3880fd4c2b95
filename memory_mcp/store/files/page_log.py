"""The JSON store's page log: one file per scope, appended to, read back by what was added since.

The log is append-only, so adding costs the same at any history size. Several processes may
share a data directory: writers take a per-scope file lock, and readers notice other processes'
changes from the log's size and identity (its inode and its first record, so a log erased and
begun again is never taken for the old one, even on a recycled inode), reading only the new bytes.
A long log's directory (where each record lies: `pages.py`) is saved beside it, so that a start
reads that instead of parsing every record.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from memory_mcp.base.errors import StorageError
from memory_mcp.models import Page
from memory_mcp.models.stored import carries_host_memory
from memory_mcp.store.durable import (
    append_records,
    ensure_directory,
    opened_for_reading,
    put_in_place,
    written_aside,
)
from memory_mcp.store.files.layout import DIRECTORY_FILE
from memory_mcp.store.files.pages import FilePages, encode_directory, log_digest, read_directory
from memory_mcp.store.files.scopes import FileScopes, LogCache, ScopeState, new_generation, os_errors
from memory_mcp.store.interfaces import PageLog, Scope, already_stored
from memory_mcp.store.page_sequence import DIRECTORY_MIN_PAGES, HeldPages
from memory_mcp.store.records import page_from_record, page_record

log = logging.getLogger(__name__)

_FIRST_RECORD_CHUNK = 4096
# How much of a log just before where it was read up to is kept, to tell a log only grown since
# from one put in its place (see _continued): the end of its last record read, id and timestamp.
TAIL_BYTES = 64


class PageLogFiles:
    """The page logs of the scopes under one root, as this process has read them."""

    def __init__(self, scopes: FileScopes) -> None:
        self._scopes = scopes

    def path(self, scope: Scope) -> Path:
        return self._scopes.layout.files(scope).pages

    def append(self, scope: Scope, pages: Sequence[Page], refuse_stored: bool) -> None:
        """Append `pages` (after checking that none of their ids is stored, if `refuse_stored`);
        the cached log takes them in when it had read up to where they begin."""
        if not pages:
            return
        each_record = [(page_record(page) + "\n").encode("utf-8") for page in pages]
        records, record_lengths = b"".join(each_record), [len(record) for record in each_record]
        state = self._scopes.get(scope)
        path = self.path(scope)
        with os_errors(f"store pages for {scope.describe()}"), self._scopes.holding_log(state, scope):
            if refuse_stored and path.exists():
                with opened_for_reading(path) as fd:  # under the file lock: nobody appends meanwhile
                    self.catch_up(fd, path, state, scope)
                assert state.log is not None
                stored = set(state.log.pages.ids)
                clash = [page.page_id for page in pages if page.page_id in stored]
                if clash:
                    raise already_stored(scope, clash)
            ensure_directory(path.parent)  # an add is the one write that may begin a user's memory
            size_before = append_records(path, records)
            cache = state.log
            if (
                cache is not None
                and cache.identity[0] == path.stat().st_ino
                and isinstance(cache.pages, FilePages)
                and cache.extend_if_at(size_before, size_before + len(records))
            ):
                _take_in_appended(cache, pages, record_lengths, records, size_before)

    def read_pages(self, scope: Scope) -> PageLog:
        state = self._scopes.get(scope)
        path = self.path(scope)
        with os_errors(f"read the pages of {scope.describe()}"), state.log_lock:
            try:
                with opened_for_reading(path) as fd:
                    self.catch_up(fd, path, state, scope)
            except FileNotFoundError:
                _no_log(state)
            assert state.log is not None
            page_log = PageLog(state.log.generation, state.log.pages)
            draft = _directory_draft(state.log, new_pages=DIRECTORY_MIN_PAGES)
        if draft is not None:
            self._save_directory(state, scope, path, draft)
        return page_log

    def tally(self, scope: Scope) -> LogCache:
        """What is known of the log, brought up to the file: its cache if it is in memory, else
        its records counted and checked (only those not counted before), keeping no page."""
        state = self._scopes.get(scope)
        path = self.path(scope)
        with os_errors(f"count the pages of {scope.describe()}"), state.log_lock:
            try:
                with opened_for_reading(path) as fd:
                    return self.catch_up(fd, path, state, scope, keep_pages=state.log is not None)
            except FileNotFoundError:
                return LogCache(identity=(0, b""))

    def ids_held(self, state: ScopeState, scope: Scope, path: Path) -> Sequence[str]:
        """The ids of the pages in the log at `path` now (held: log locks). No log: none, and the
        state says so (a new generation if it held one), as a read would."""
        try:
            with opened_for_reading(path) as fd:
                self.catch_up(fd, path, state, scope)
        except FileNotFoundError:
            _no_log(state)
            return []
        assert state.log is not None
        return state.log.pages.ids

    def records(self, state: ScopeState, scope: Scope, path: Path) -> tuple[bytes, Sequence[str]]:
        """The complete records of the log at `path` as read now, and their pages' ids (held: log
        locks); FileNotFoundError when there is no log."""
        with opened_for_reading(path) as fd:
            self.catch_up(fd, path, state, scope)
            assert state.log is not None
            return os.pread(fd, state.log.end, 0), state.log.pages.ids

    def save_directories(self) -> None:
        """Save the directory of every log in memory that grew since its directory was saved, so
        that the next start parses none of it (every file is closed after each operation)."""
        for scope, state in self._scopes.known():
            with state.log_lock:
                draft = _directory_draft(state.log, new_pages=1)
            if draft is not None:
                with contextlib.suppress(StorageError, ValueError):  # an id no longer valid: nothing to save
                    self._save_directory(state, scope, self.path(scope), draft)

    def catch_up(self, fd: int, path: Path, state: ScopeState, scope: Scope, keep_pages: bool = True) -> LogCache:
        """Bring the cached log up to the file: the same log grown, or another one begun. Without
        `keep_pages` (the log not in memory), only where it was is brought up: its tally."""
        size = os.fstat(fd).st_size
        identity = (os.fstat(fd).st_ino, first_record(fd))
        cache = state.log
        if not keep_pages:
            if not _continued(state.tally, identity, size, fd):
                state.tally = _log_from_start(fd, path, identity, keep_pages=False)
            cache = state.tally
            assert cache is not None
        elif cache is None and _continued(state.tally, identity, size, fd):
            assert state.tally is not None
            cache = state.log = _log_from_start(fd, path, identity, generation=state.tally.generation)  # read again
        elif cache is None or not _continued(cache, identity, size, fd):
            cache = state.log = _log_from_start(fd, path, identity)
        if keep_pages:
            state.tally = None
        if size <= cache.end:
            return cache
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._scopes.holding(state.log_file_lock, scope))
            except OSError:
                pass  # a read-only data directory: nobody can be appending, so read without the lock
            _read_new_records(fd, path, cache, keep_pages)
        return cache

    def _save_directory(self, state: ScopeState, scope: Scope, path: Path, draft: _DirectoryDraft) -> None:
        """Save a directory of the log, so that a start reads it instead of parsing the records.
        Encoded and written aside with no lock held (100,000 pages: ~0.1 s with the fsync); put in
        place under the log's locks, which an erase takes too, and only if the log still begins
        with the bytes it covers: a directory never names exchanges an erase removed."""
        target = path.with_name(DIRECTORY_FILE)
        try:
            aside = written_aside(
                target, encode_directory(draft.pages, draft.count, draft.host_memory_end, draft.digest)
            )
        except FileNotFoundError:
            return  # erased meanwhile
        except OSError as exc:
            log.warning("the page directory of %s was not saved (%s); the log is parsed instead", scope.describe(), exc)
            return
        try:
            with self._scopes.holding_log(state, scope), opened_for_reading(path) as fd:
                if (
                    os.fstat(fd).st_ino == draft.inode
                    and log_digest(fd, draft.covered).digest() == draft.digest.digest()
                ):
                    put_in_place(aside, target)
        except (FileNotFoundError, ValueError):
            pass  # erased, or the log cut shorter, meanwhile: the directory would not be used
        except (OSError, StorageError) as exc:
            log.warning("the page directory of %s was not saved (%s); the log is parsed instead", scope.describe(), exc)
        finally:
            aside.unlink(missing_ok=True)


def _take_in_appended(
    cache: LogCache, pages: Sequence[Page], record_lengths: list[int], records: bytes, size_before: int
) -> None:
    """Take pages this process has just appended at `size_before` into the cached log."""
    assert isinstance(cache.pages, FilePages)
    end = size_before
    for page, length in zip(pages, record_lengths, strict=True):
        end += length
        cache.pages.add(page.page_id, page.thread_id, page.timestamp, end)
    cache.digest.update(records)
    cache.tail = (cache.tail + records)[-TAIL_BYTES:]
    carrying = [n for n, page in enumerate(pages, start=cache.lines + 1) if carries_host_memory(page)]
    cache.host_memory_end = carrying[-1] if carrying else cache.host_memory_end
    cache.lines += len(pages)
    if size_before == 0:
        cache.identity = (cache.identity[0], records[: records.index(b"\n") + 1])


def _read_new_records(fd: int, path: Path, cache: LogCache, keep_pages: bool) -> None:
    """Parse what was appended since the last read, reading only those bytes (and keeping
    the pages if asked). Called holding the file lock (when it can be had), so an
    unterminated last line is an interrupted write."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size - cache.end, cache.end)
    complete_end = data.rfind(b"\n") + 1
    new_pages = []  # (id, thread, timestamp, where its record ends): taken in once all are read
    number, end, host_memory_end = cache.lines, cache.end, cache.host_memory_end
    for line in lines(data, complete_end):
        number += 1
        end += len(line) + 1
        try:
            page = page_from_record(line)
        except ValidationError:
            raise StorageError(
                f"{path} line {number} is not a valid page record; the file was left untouched "
                "(fix or remove that line)"
            ) from None
        if carries_host_memory(page):
            host_memory_end = number
        if keep_pages:
            new_pages.append((page.page_id, page.thread_id, page.timestamp, end))
    if cache.end == 0 and complete_end:
        cache.identity = (cache.identity[0], data[: data.index(b"\n") + 1])
    if keep_pages:
        assert isinstance(cache.pages, FilePages)
        for fields in new_pages:
            cache.pages.add(*fields)
    cache.digest.update(memoryview(data)[:complete_end])
    cache.lines, cache.host_memory_end = number, host_memory_end
    cache.end += complete_end
    cache.tail = (cache.tail + data[:complete_end])[-TAIL_BYTES:]
    unfinished = len(data) - complete_end
    if unfinished and cache.unfinished_reported_at != cache.end:
        cache.unfinished_reported_at = cache.end
        log.warning("%s ends with %d bytes of an interrupted write; ignoring them", path, unfinished)


def lines(data: bytes, end: int) -> Iterator[bytes]:
    """The lines of data[:end] (which ends with a newline), one at a time: splitting them all
    first left the heap fragmented once they were parsed and freed (+48 MB of resident memory
    for a log of 100,000 exchanges)."""
    start = 0
    while start < end:
        stop = data.index(b"\n", start)
        yield data[start:stop]
        start = stop + 1


def first_record(fd: int) -> bytes:
    """The file's first line, newline included (b"" while it has none): with the inode, what tells
    one log from another that replaced it."""
    data = b""
    while b"\n" not in data:
        chunk = os.pread(fd, _FIRST_RECORD_CHUNK, len(data))
        if not chunk:
            return b""
        data += chunk
    return data[: data.index(b"\n") + 1]


@dataclass(frozen=True)
class _DirectoryDraft:
    """What a directory is saved from: the first `count` pages of a log as cached, the SHA-256 of
    their records, and the log file's inode."""

    pages: FilePages
    count: int
    covered: int  # where the last of those pages' records ends
    host_memory_end: int
    digest: hashlib._Hash
    inode: int


def _directory_draft(cache: LogCache | None, new_pages: int) -> _DirectoryDraft | None:
    """What to save the cache's directory from, when `new_pages` or more pages (DIRECTORY_MIN_PAGES
    in all) came since it was last saved (held: the log lock). They count as saved from then on: a
    save that fails is not tried again at every read."""
    if cache is None or not isinstance(cache.pages, FilePages):
        return None
    count = len(cache.pages)
    if count < DIRECTORY_MIN_PAGES or count - cache.directory_pages < new_pages:
        return None
    cache.directory_pages = count
    return _DirectoryDraft(cache.pages, count, cache.end, cache.host_memory_end, cache.digest.copy(), cache.identity[0])


def _no_log(state: ScopeState) -> None:
    """The scope has no log file (erased, or never written): its cache says so, with a generation
    of its own unless it said so already, so that nothing made from a log read before matches it."""
    if state.log is None or state.log.identity != (0, b""):
        state.log = LogCache(identity=(0, b""))


def _log_from_start(
    fd: int, path: Path, identity: tuple[int, bytes], keep_pages: bool = True, generation: int | None = None
) -> LogCache:
    """A cache of the log open as `fd` that has read nothing yet, or, when its saved directory
    may be used, everything the directory covers (without its pages when not `keep_pages`)."""
    found = read_directory(path.with_name(DIRECTORY_FILE), fd, path, identity[0])
    generation = new_generation() if generation is None else generation
    if found is None:
        pages = FilePages(path, identity[0]) if keep_pages else HeldPages()
        return LogCache(identity=identity, pages=pages, generation=generation)
    end = found.pages.end
    return LogCache(
        identity=identity,
        pages=found.pages if keep_pages else HeldPages(),
        generation=generation,
        end=end,
        tail=os.pread(fd, min(TAIL_BYTES, end), end - min(TAIL_BYTES, end)),
        lines=len(found.pages),
        host_memory_end=found.host_memory_end,
        digest=found.digest,
        directory_pages=len(found.pages),
    )


def _continued(known: LogCache | None, identity: tuple[int, bytes], size: int, fd: int) -> bool:
    """Whether the log file open as `fd` is the one last known (its cache, or its tally), only grown
    since: the same inode, beginning alike, and as it was just before where it was read up to. A
    log rewritten twice by another process can be back on its first inode (a rename over the log
    alternates two on ext4), and an erase keeps the first record unless it erases it."""
    return (
        known is not None
        and known.identity[0] == identity[0]
        and size >= known.end
        and _same_start(known, identity)
        and os.pread(fd, len(known.tail), known.end - len(known.tail)) == known.tail
    )


def _same_start(cache: LogCache, identity: tuple[int, bytes]) -> bool:
    """Whether the file still begins as the cached log did (a log with no whole line yet
    matches whatever first record it now has)."""
    return not cache.identity[1] or cache.identity[1] == identity[1]
