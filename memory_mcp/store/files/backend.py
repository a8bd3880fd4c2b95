"""The embedded default backend: one directory per user (and per agent), plain files inside.

    {root}/users/{user}/memory.json                     structured memory (DeerFlow schema)
    {root}/users/{user}/pages.jsonl                     verbatim exchanges, one JSON per line
    {root}/users/{user}/pages.directory, index.snapshot where each record lies, and the word index:
                                                        derived, saved so that a start need not parse
    {root}/users/{user}/agents/{agent}/...              the same, for one agent of that user
    {root}/locks/{user}[@{agent}].{log,doc,update}.lock cross-process locks, deleted with their memory

A directory is named after its id, except that an id with capital letters gets them marked
(`Alice` -> `alice~1`, a bit per letter): ids that differ only in case are different users, and
must not share a directory on a case-insensitive file system (macOS, Windows).

The page log is append-only, so adding costs the same at any history size. Several processes
may share a data directory: writers take a per-scope file lock, and readers notice other
processes' changes from the log's size and identity (its inode and its first record, so a log
erased and begun again is never taken for the old one, even on a recycled inode), reading only
the new bytes.

Erasing renames the directory to a tombstone (one durable rename: the memory is whole or gone),
then deletes it; a tombstone a crash left behind is deleted by the next store opened on the root.
The locks live outside the directories they guard, so an erase never deletes a lock someone holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import MemoryGone, StorageError
from memory_mcp.base.ids import validate_identifier
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.models.stored import carries_host_memory
from memory_mcp.store import (
    PageLog,
    PageVector,
    Scope,
    already_stored,
    page_from_record,
    page_record,
    vector_from_record,
    vector_record,
)
from memory_mcp.store.durable import (
    FileLock,
    LockTimeout,
    NotDurable,
    append_records,
    atomic_write,
    ensure_directory,
    opened_for_reading,
    put_in_place,
    read_bytes,
    remove_stale_temps,
    remove_tree,
    rename_durably,
    written_aside,
)
from memory_mcp.store.files.pages import (
    DIRECTORY_MIN_PAGES,
    FilePages,
    encode_directory,
    log_digest,
    read_directory,
)
from memory_mcp.store.page_sequence import HeldPages
from memory_mcp.store.scope_state import CachedLog, ScopeStates, acquire, done_when_idle, retire_log

log = logging.getLogger(__name__)

MEMORY_FILE = "memory.json"
PAGES_FILE = "pages.jsonl"
VECTORS_FILE = "vectors.jsonl"  # embeddings of the pages: derived, so a damaged line is recomputed
INDEX_FILE = "index.snapshot"  # the word index of the pages: derived, so a damaged one is rebuilt
DIRECTORY_FILE = "pages.directory"  # where each page's record lies: derived, so a damaged one is rebuilt
USERS_DIR = "users"
AGENTS_DIR = "agents"
LOCKS_DIR = "locks"
TOMBSTONE_PREFIX = ".erased-"
# A memory being replaced is written whole beside its directory first, marked complete last.
STAGING_PREFIX = ".replacing-"
COMPLETE_MARK = ".complete"
DEFAULT_LOCK_TIMEOUT = 30.0
_FIRST_RECORD_CHUNK = 4096
MARK_OFFSET_BITS = 48  # of a vectors mark: the byte offset; the bits above hold the file's id
_VECTORS_HEADER_START = b'{"vectors_file": '
_OFFSET_MASK = (1 << MARK_OFFSET_BITS) - 1

_generations = itertools.count(1)


def directory_name(identifier: str) -> str:
    """The directory of an id: lower case, with a mask of its capitals after `~` when it has any."""
    mask = sum(1 << position for position, char in enumerate(identifier) if char.isupper())
    return identifier if not mask else f"{identifier.lower()}~{mask:x}"


def identifier_of(name: str) -> str | None:
    """The id whose directory `name` is, or None when it is nobody's."""
    base, _, mask_text = name.partition("~")
    try:
        mask = int(mask_text, 16) if mask_text else 0
        identifier = "".join(char.upper() if mask >> n & 1 else char for n, char in enumerate(base))
        validate_identifier("id", identifier)
    except ValueError:
        return None
    return identifier if directory_name(identifier) == name else None


@dataclass(kw_only=True)
class _LogCache(CachedLog):
    """What this process has read of one page log (`end`: bytes consumed, just past a newline)."""

    identity: tuple[int, bytes]  # (inode, first record)
    pages: FilePages | HeldPages = field(default_factory=HeldPages)  # HeldPages: none kept (a tally)
    generation: int = field(default_factory=lambda: next(_generations))
    lines: int = 0
    host_memory_end: int = 0  # every page carrying host memory is among the first this many
    unfinished_reported_at: int = -1
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)  # of the first `end` bytes
    directory_pages: int = 0  # how many pages the saved directory covers


@dataclass
class _DocumentCache:
    raw: bytes
    document: MemoryDocument


@dataclass
class _ScopeState:
    """Locks of one scope. The page log and the document have separate locks, so an add never
    waits behind a document write (two fsyncs); the update lock only marks whose turn it is."""

    log_lock: threading.Lock
    log_file_lock: FileLock
    document_lock: threading.Lock
    document_file_lock: FileLock
    update_guard: threading.Lock
    update_file_lock: FileLock
    log: _LogCache | None = None
    document: _DocumentCache | None = None
    tally: _LogCache | None = None  # where the log was when its cache was let go, or when counted (no pages)


class JsonStore:
    """`MemoryStore` over JSON files; safe across threads and across processes.

    A file lock held longer than `lock_timeout` seconds by another process (a hung one) fails
    that one call with a StorageError; every other user goes on being served.
    """

    def __init__(
        self, root: Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, cached_scopes: int | None = None
    ) -> None:
        self.root = root
        self.location = str(root)
        self.lock_timeout = lock_timeout
        self._states = ScopeStates(self._new_state, cached_scopes, _drop_cached)
        self._tidy()

    # --- layout ---------------------------------------------------------------------------

    def scope_dir(self, scope: Scope) -> Path:
        """The scope's directory. A symbolic link anywhere on the way is refused: it would let
        whoever planted it send one user's memory out of the data directory."""
        users = self.root / USERS_DIR
        user_dir = users / directory_name(validate_identifier("user_id", scope.user_id))
        steps = [users, user_dir]
        if scope.agent_name is not None:
            agents = user_dir / AGENTS_DIR
            steps += [agents, agents / directory_name(validate_identifier("agent_name", scope.agent_name))]
        for step in steps:
            if step.is_symlink():
                raise StorageError(f"{step} is a symbolic link; memory is never read or written through one")
        return steps[-1]

    def close(self) -> None:
        """Save the directory of every log in memory that grew since its directory was saved, so
        that the next start parses none of it (every file is closed after each operation)."""
        for scope, state in self._states.known():
            with state.log_lock:
                draft = _directory_draft(state.log, new_pages=1)
            if draft is not None:
                with contextlib.suppress(StorageError, ValueError):  # an id no longer valid: nothing to save
                    self._save_directory(state, scope, self.scope_dir(scope) / PAGES_FILE, draft)

    def check_ready(self) -> None:
        # A data directory not created yet is ready: the first add creates it.
        existing = next(path for path in (self.root, *self.root.parents) if path.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise StorageError(f"cannot write memory under {self.root} ({existing} is not a writable directory)")

    def list_users(self) -> list[str]:
        return _identifier_dirs(self.root / USERS_DIR)

    def list_agents(self, user_id: str) -> list[str]:
        return _identifier_dirs(self.scope_dir(Scope(user_id)) / AGENTS_DIR)

    def list_scopes(self) -> list[Scope]:
        scopes = []
        for user_id in self.list_users():
            scopes.append(Scope(user_id))
            scopes.extend(Scope(user_id, agent) for agent in self.list_agents(user_id))
        return scopes

    # --- pages ----------------------------------------------------------------------------

    def append_page(self, scope: Scope, page: Page) -> None:
        """A page just made (its id fresh and random): appended without looking for its id."""
        self._append(scope, [page], refuse_stored=False)

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self._append(scope, pages, refuse_stored=True)

    def _append(self, scope: Scope, pages: Sequence[Page], refuse_stored: bool) -> None:
        if not pages:
            return
        each_record = [(page_record(page) + "\n").encode("utf-8") for page in pages]
        records, record_lengths = b"".join(each_record), [len(record) for record in each_record]
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        path = directory / PAGES_FILE
        with (
            _os_errors(f"store pages for {scope.describe()}"),
            state.log_lock,
            self._holding(state.log_file_lock, scope),
        ):
            if refuse_stored and path.exists():
                with opened_for_reading(path) as fd:  # under the file lock: nobody appends meanwhile
                    self._catch_up(fd, path, state, scope)
                assert state.log is not None
                stored = set(state.log.pages.ids)
                clash = [page.page_id for page in pages if page.page_id in stored]
                if clash:
                    raise already_stored(scope, clash)
            ensure_directory(directory)  # an add is the one write that may begin a user's memory
            size_before = append_records(path, records)
            cache = state.log
            if (
                cache is not None
                and cache.identity[0] == path.stat().st_ino
                and isinstance(cache.pages, FilePages)
                and cache.extend_if_at(size_before, size_before + len(records))
            ):
                end = size_before
                for page, length in zip(pages, record_lengths, strict=True):
                    end += length
                    cache.pages.add(page.page_id, page.thread_id, page.timestamp, end)
                cache.digest.update(records)
                carrying = [n for n, page in enumerate(pages, start=cache.lines + 1) if carries_host_memory(page)]
                cache.host_memory_end = carrying[-1] if carrying else cache.host_memory_end
                cache.lines += len(pages)
                if size_before == 0:
                    cache.identity = (cache.identity[0], records[: records.index(b"\n") + 1])

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        if not vectors:
            return
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        path = directory / VECTORS_FILE
        with (
            _os_errors(f"store page vectors for {scope.describe()}"),
            state.log_lock,
            self._holding(state.log_file_lock, scope),
        ):
            if not directory.is_dir():  # under the lock an erase takes: not erased meanwhile
                return
            if of_pages:  # pages erased since their vectors were computed: their vectors go too
                stored = set(self._ids_held(state, scope, directory))
                vectors = [vector for vector in vectors if vector.page_id in stored]
            records = b"".join((vector_record(vector) + "\n").encode("ascii") for vector in vectors)
            if records:
                header = b"" if path.exists() and path.stat().st_size else _vectors_header()
                append_records(path, header + records)

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        """A mark is the file's id (its first record, new at every rewrite) and a byte offset in
        it: `file_id << MARK_OFFSET_BITS | offset`."""
        path = self.scope_dir(scope) / VECTORS_FILE
        with _os_errors(f"read the page vectors of {scope.describe()}"):
            try:
                with opened_for_reading(path) as fd:
                    file_id = _vectors_file_id(_first_record(fd))
                    size = os.fstat(fd).st_size
                    after = after & _OFFSET_MASK if after >> MARK_OFFSET_BITS == file_id else 0
                    after = after if after <= size else 0
                    data = os.pread(fd, size - after, after)
            except FileNotFoundError:
                return [], 0
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line is an append under way or cut short
        vectors = []
        for line in complete.splitlines():
            if line.startswith(_VECTORS_HEADER_START):
                continue
            try:
                vectors.append(vector_from_record(line))
            except (ValueError, KeyError, TypeError):
                log.warning("%s holds a damaged line; its page will be embedded again", path)
        return vectors, file_id << MARK_OFFSET_BITS | (after + len(complete))

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        state = self._states.get(scope)
        path = self.scope_dir(scope) / VECTORS_FILE
        with (
            _os_errors(f"erase vectors of {scope.describe()}"),
            state.log_lock,
            self._holding(state.log_file_lock, scope),
        ):
            if path.exists():
                kept = _vectors_without(
                    read_bytes(path), lambda vector: vector.model == model and vector.page_id in ids
                )
                if kept is not None:
                    atomic_write(path, kept)
                remove_stale_temps(path)

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        """The log and vectors without the pages are written aside first (a full disk changes
        nothing); then the document, changed and marked with the ids being erased; then the files
        put in place, and the mark cleared. A crash after the document write leaves the mark, and
        whoever reads this memory next, in any process, finishes the erase (`_finish_erasing`)."""
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        with (
            _os_errors(f"erase exchanges of {scope.describe()}"),
            state.document_lock,
            self._holding(state.document_file_lock, scope),
            state.log_lock,
            self._holding(state.log_file_lock, scope),
        ):
            if not directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            positions, aside = self._written_without(state, scope, directory, set(page_ids))
            marked = list(page_ids) if aside else []
            try:
                self._write_document(state, directory / MEMORY_FILE, lambda d: _marked(change(d, positions), marked))
            except BaseException:
                for temp, _ in aside:
                    temp.unlink(missing_ok=True)
                raise
            self._put_in_place(state, aside)
            if marked:
                self._write_document(state, directory / MEMORY_FILE, lambda d: _marked(d, []))

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """The log and vectors are written aside, then put in place, vectors first: a crash
        between the two leaves the old text with its vectors gone, which a scrub run again finds."""
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        replacing = {page.page_id: page for page in pages}
        path, vectors_path = directory / PAGES_FILE, directory / VECTORS_FILE
        with (
            _os_errors(f"rewrite exchanges of {scope.describe()}"),
            state.log_lock,
            self._holding(state.log_file_lock, scope),
        ):
            if not directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            with opened_for_reading(path) as fd:
                self._catch_up(fd, path, state, scope)
                assert state.log is not None
                data = os.pread(fd, state.log.end, 0)
                ids = state.log.pages.ids
            if not any(page_id in replacing for page_id in ids):
                return
            lines = (
                page_record(replacing[page_id]).encode() if page_id in replacing else line
                for page_id, line in zip(ids, _lines(data, len(data)), strict=True)
            )
            aside = [(written_aside(path, b"".join(line + b"\n" for line in lines)), path)]
            if vectors_path.exists():
                kept = _vectors_without(read_bytes(vectors_path), lambda vector: vector.page_id in replacing)
                if kept is not None:
                    aside.insert(0, (written_aside(vectors_path, kept), vectors_path))
            self._put_in_place(state, aside)

    def _finish_erasing(self, state: _ScopeState, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        """Finish an erase a crash cut short after its document write (held: the document locks)."""
        directory = self.scope_dir(scope)
        with state.log_lock, self._holding(state.log_file_lock, scope):
            _, aside = self._written_without(state, scope, directory, set(document.analysis.erasing))
            self._put_in_place(state, aside)
        log.warning("finished erasing %d exchanges of %s", len(document.analysis.erasing), scope.describe())
        return self._write_document(state, directory / MEMORY_FILE, lambda d: _marked(d, []))

    def _written_without(
        self, state: _ScopeState, scope: Scope, directory: Path, erased: set[str]
    ) -> tuple[list[int], list[tuple[Path, Path]]]:
        """The positions of the `erased` pages in the log, and the log and vectors files without
        them written aside, as (temp, target) pairs, for those that hold any (held: log locks)."""
        path, vectors_path = directory / PAGES_FILE, directory / VECTORS_FILE
        aside: list[tuple[Path, Path]] = []
        positions: list[int] = []
        with contextlib.suppress(FileNotFoundError):  # no log yet: facts only
            with opened_for_reading(path) as fd:
                self._catch_up(fd, path, state, scope)
                assert state.log is not None
                data = os.pread(fd, state.log.end, 0)
            positions = [number for number, page_id in enumerate(state.log.pages.ids) if page_id in erased]
            if positions:
                gone = set(positions)
                kept = b"".join(  # the lines as a read splits them: at newlines only
                    line + b"\n" for number, line in enumerate(_lines(data, len(data))) if number not in gone
                )
                aside.append((written_aside(path, kept), path))
        if vectors_path.exists():
            kept_vectors = _vectors_without(read_bytes(vectors_path), lambda vector: vector.page_id in erased)
            if kept_vectors is not None:
                aside.append((written_aside(vectors_path, kept_vectors), vectors_path))
        return positions, aside

    def _put_in_place(self, state: _ScopeState, aside: list[tuple[Path, Path]]) -> None:
        for temp, target in aside:
            put_in_place(temp, target)
            remove_stale_temps(target)  # what a crash cut short before: kept records only, but a copy
            if target.name == PAGES_FILE:
                _let_go_of_log(state)  # read again: a new file, a new generation
                # They hold the erased pages' words, and their ids and timestamps: a directory
                # written aside (a save under way, or one a crash cut short) goes too.
                (target.parent / INDEX_FILE).unlink(missing_ok=True)
                (target.parent / DIRECTORY_FILE).unlink(missing_ok=True)
                for temp in target.parent.glob(f".{DIRECTORY_FILE}.*.tmp"):
                    temp.unlink(missing_ok=True)

    def _ids_held(self, state: _ScopeState, scope: Scope, directory: Path) -> Sequence[str]:
        """The ids of the pages in the log now (held: log locks)."""
        path = directory / PAGES_FILE
        try:
            with opened_for_reading(path) as fd:
                self._catch_up(fd, path, state, scope)
        except FileNotFoundError:
            return []
        assert state.log is not None
        return state.log.pages.ids

    def page_count(self, scope: Scope) -> int:
        return self._tally(scope).lines

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        return self._tally(scope).host_memory_end > start

    def _tally(self, scope: Scope) -> _LogCache:
        """What is known of the log, brought up to the file: its cache if it is in memory, else
        its records counted and checked (only those not counted before), keeping no page."""
        state = self._states.get(scope)
        path = self.scope_dir(scope) / PAGES_FILE
        with _os_errors(f"count the pages of {scope.describe()}"), state.log_lock:
            try:
                with opened_for_reading(path) as fd:
                    return self._catch_up(fd, path, state, scope, keep_pages=state.log is not None)
            except FileNotFoundError:
                return _LogCache(identity=(0, b""))

    def has_index_snapshot(self, scope: Scope) -> bool:
        return (self.scope_dir(scope) / INDEX_FILE).exists()

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        try:
            return read_bytes(self.scope_dir(scope) / INDEX_FILE)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("the saved word index of %s cannot be read (%s); it is built again", scope.describe(), exc)
            return None

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Written aside first, then checked against the log and put in place under the log's
        locks, which an erase holds too: it lands before an erase (which removes it) or not at all."""
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        path = directory / INDEX_FILE
        with _os_errors(f"save the word index of {scope.describe()}"):
            try:
                aside = written_aside(path, data)
            except FileNotFoundError:  # erased meanwhile
                return False
            try:
                with state.log_lock, self._holding(state.log_file_lock, scope):
                    self._ids_held(state, scope, directory)
                    if state.log is None or state.log.generation != generation:
                        return False
                    put_in_place(aside, path)
                    remove_stale_temps(path)
                    return True
            finally:
                aside.unlink(missing_ok=True)

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        """The new memory is written whole beside the old (`.replacing-…`, each file synced, then
        marked complete); then, under the locks, the old directory is renamed to a tombstone and the
        new one to its place. A crash before the second rename leaves the old memory, or no
        directory and a complete staging, which the next store opened on the root puts in place
        (`_tidy`); an incomplete staging is deleted."""
        directory = self.scope_dir(scope)
        staged = directory.with_name(f"{STAGING_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        agents = self.list_agents(scope.user_id) if scope.agent_name is None else []
        affected = [scope, *(Scope(scope.user_id, agent) for agent in agents)]
        affected += [part for part, _, _ in parts if part not in affected]
        tombstone = directory.with_name(f"{TOMBSTONE_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        with _os_errors(f"replace the memory of {scope.describe()}"):
            try:
                for part, memory, pages in parts:
                    folder = staged / self.scope_dir(part).relative_to(directory)  # an agent's: agents/<name>
                    ensure_directory(folder)
                    if pages:
                        atomic_write(
                            folder / PAGES_FILE, b"".join((page_record(page) + "\n").encode() for page in pages)
                        )
                    atomic_write(
                        folder / MEMORY_FILE, _document_bytes(memory.model_copy(update={"lastUpdated": utc_now()}))
                    )
                atomic_write(staged / COMPLETE_MARK, b"")
            except BaseException:
                remove_tree(staged)
                raise
            with self._holding_whole(affected):
                if directory.is_dir():
                    rename_durably(directory, tombstone)
                rename_durably(staged, directory)
                (directory / COMPLETE_MARK).unlink()
                for known in self._states.erased(scope):
                    _let_go_of_log(known)
                    known.document = None
            if tombstone.exists():
                remove_tree(tombstone)

    def erase(self, scope: Scope) -> None:
        """Rename the scope's directory to a tombstone, durably, under its locks (and for a user,
        its agents' locks), then delete the tombstone: a crash leaves all of it or none."""
        directory = self.scope_dir(scope)
        affected = [scope]
        if scope.agent_name is None:
            affected += [Scope(scope.user_id, agent) for agent in self.list_agents(scope.user_id)]
        tombstone = directory.with_name(f"{TOMBSTONE_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        with _os_errors(f"erase the memory of {scope.describe()}"), self._holding_whole(affected):
            if not directory.is_dir():
                return
            rename_durably(directory, tombstone)
            for known in self._states.erased(scope):
                _let_go_of_log(known)
                known.document = None
            for each in affected:  # no lock named after the erased memory is left
                _delete_locks(self._states.get(each))
        with _os_errors(f"finish erasing the memory of {scope.describe()} (it is gone already)"):
            remove_tree(tombstone)

    def read_pages(self, scope: Scope) -> PageLog:
        state = self._states.get(scope)
        path = self.scope_dir(scope) / PAGES_FILE
        with _os_errors(f"read the pages of {scope.describe()}"), state.log_lock:
            try:
                with opened_for_reading(path) as fd:
                    self._catch_up(fd, path, state, scope)
            except FileNotFoundError:
                if state.log is None or state.log.identity != (0, b""):
                    state.log = _LogCache(identity=(0, b""))
            assert state.log is not None
            page_log = PageLog(state.log.generation, state.log.pages)
            draft = _directory_draft(state.log, new_pages=DIRECTORY_MIN_PAGES)
        if draft is not None:
            self._save_directory(state, scope, path, draft)
        return page_log

    def _save_directory(self, state: _ScopeState, scope: Scope, path: Path, draft: _DirectoryDraft) -> None:
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
            with state.log_lock, self._holding(state.log_file_lock, scope), opened_for_reading(path) as fd:
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

    def _catch_up(self, fd: int, path: Path, state: _ScopeState, scope: Scope, keep_pages: bool = True) -> _LogCache:
        """Bring the cached log up to the file: the same log grown, or another one begun. Without
        `keep_pages` (the log not in memory), only where it was is brought up: its tally."""
        size = os.fstat(fd).st_size
        identity = (os.fstat(fd).st_ino, _first_record(fd))
        cache = state.log
        if not keep_pages:
            if not _continued(state.tally, identity, size):
                state.tally = _log_from_start(fd, path, identity, keep_pages=False)
            cache = state.tally
            assert cache is not None
        elif cache is None and _continued(state.tally, identity, size):
            assert state.tally is not None
            cache = state.log = _log_from_start(fd, path, identity, generation=state.tally.generation)  # read again
        elif cache is None or cache.identity[0] != identity[0] or size < cache.end or not _same_start(cache, identity):
            cache = state.log = _log_from_start(fd, path, identity)
        if keep_pages:
            state.tally = None
        if size <= cache.end:
            return cache
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._holding(state.log_file_lock, scope))
            except OSError:
                pass  # a read-only data directory: nobody can be appending, so read without the lock
            self._read_new_records(fd, path, cache, keep_pages)
        return cache

    def _read_new_records(self, fd: int, path: Path, cache: _LogCache, keep_pages: bool) -> None:
        """Parse what was appended since the last read, reading only those bytes (and keeping
        the pages if asked). Called holding the file lock (when it can be had), so an
        unterminated last line is an interrupted write."""
        size = os.fstat(fd).st_size
        data = os.pread(fd, size - cache.end, cache.end)
        complete_end = data.rfind(b"\n") + 1
        new_pages = []  # (id, thread, timestamp, where its record ends): taken in once all are read
        number, end = cache.lines, cache.end
        for line in _lines(data, complete_end):
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
                cache.host_memory_end = number
            if keep_pages:
                new_pages.append((page.page_id, page.thread_id, page.timestamp, end))
        if cache.end == 0 and complete_end:
            cache.identity = (cache.identity[0], data[: data.index(b"\n") + 1])
        if keep_pages:
            assert isinstance(cache.pages, FilePages)
            for fields in new_pages:
                cache.pages.add(*fields)
        cache.digest.update(memoryview(data)[:complete_end])
        cache.lines = number
        cache.end += complete_end
        unfinished = len(data) - complete_end
        if unfinished and cache.unfinished_reported_at != cache.end:
            cache.unfinished_reported_at = cache.end
            log.warning("%s ends with %d bytes of an interrupted write; ignoring them", path, unfinished)

    # --- structured memory ----------------------------------------------------------------

    def read_document(self, scope: Scope) -> MemoryDocument:
        state = self._states.get(scope)
        path = self.scope_dir(scope) / MEMORY_FILE
        with _os_errors(f"read the memory of {scope.describe()}"), state.document_lock:
            document = self._current_document(state, path)
            if not document.analysis.erasing:
                return document
            with self._holding(state.document_file_lock, scope):
                document = self._current_document(state, path)
                return self._finish_erasing(state, scope, document) if document.analysis.erasing else document

    def write_document(self, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        return self.update_document(scope, lambda _current: document)

    def update_document(
        self,
        scope: Scope,
        change: Callable[[MemoryDocument], MemoryDocument],
        *,
        create: bool = True,
        log_generation: int | None = None,
    ) -> MemoryDocument:
        state = self._states.get(scope)
        directory = self.scope_dir(scope)
        path = directory / MEMORY_FILE
        with (
            _os_errors(f"save the memory of {scope.describe()}"),
            state.document_lock,
            self._holding(state.document_file_lock, scope),
        ):
            if create:
                ensure_directory(directory)
            elif not directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            if self._current_document(state, path).analysis.erasing:  # before the generation is compared
                self._finish_erasing(state, scope, self._current_document(state, path))
            if log_generation is not None and self.read_pages(scope).generation != log_generation:
                raise MemoryGone(f"the memory of {scope.describe()} was erased and begun anew; nothing was written")
            return self._write_document(state, path, change)

    def _write_document(
        self, state: _ScopeState, path: Path, change: Callable[[MemoryDocument], MemoryDocument]
    ) -> MemoryDocument:
        """Read, change and write the document (held: its locks)."""
        # Reading first also means a damaged file is reported, never overwritten.
        current = self._current_document(state, path)
        stored = change(current).model_copy(update={"lastUpdated": utc_now()})
        raw = _document_bytes(stored)
        try:
            atomic_write(path, raw)
        except NotDurable:
            state.document = _DocumentCache(raw, stored)  # in place, if not synced
            raise
        state.document = _DocumentCache(raw, stored)
        remove_stale_temps(path)
        return stored

    @contextmanager
    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> Iterator[bool]:
        state = self._states.get(scope)
        deadline = time.monotonic() + wait
        acquired = acquire(state.update_guard, wait)
        if not acquired:
            yield False
            return
        try:
            if not self.scope_dir(scope).is_dir():
                yield False  # nothing stored: nothing to update (and no directory to recreate)
                return
            try:
                with _os_errors(f"lock the memory of {scope.describe()}"):
                    state.update_file_lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
            except LockTimeout:
                yield False
                return
            try:
                yield True
            finally:
                state.update_file_lock.release()
        finally:
            state.update_guard.release()

    def _current_document(self, state: _ScopeState, path: Path) -> MemoryDocument:
        """The document as on disk now. The bytes are compared rather than the file's mtime and
        inode: renames recycle inodes and mtimes are coarse, so those can miss another process's write."""
        try:
            raw = read_bytes(path)
        except FileNotFoundError:
            state.document = None
            return MemoryDocument()
        if state.document is not None and state.document.raw == raw:
            return state.document.document
        try:
            document = MemoryDocument.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            reason = str(exc).splitlines()[0]
            raise StorageError(
                f"{path} is not a valid memory document ({reason}); it was left untouched: fix it or restore "
                "a backup, and this user's memory will load again"
            ) from None
        state.document = _DocumentCache(raw, document)
        return document

    # --- locking --------------------------------------------------------------------------

    def _new_state(self, scope: Scope) -> _ScopeState:
        name = directory_name(validate_identifier("user_id", scope.user_id))
        if scope.agent_name is not None:
            name += "@" + directory_name(validate_identifier("agent_name", scope.agent_name))
        locks = self.root / LOCKS_DIR
        return _ScopeState(
            log_lock=threading.Lock(),
            log_file_lock=FileLock(locks / f"{name}.log.lock"),
            document_lock=threading.Lock(),
            document_file_lock=FileLock(locks / f"{name}.doc.lock"),
            update_guard=threading.Lock(),
            update_file_lock=FileLock(locks / f"{name}.update.lock"),
        )

    @contextmanager
    def _holding_whole(self, scopes: Sequence[Scope]) -> Iterator[None]:
        """Every lock of these scopes, their documents' and logs', taken in one order (by name) so
        that two erases or replacements never wait on each other."""
        with contextlib.ExitStack() as held:
            for each in sorted(scopes, key=Scope.describe):
                state = self._states.get(each)
                held.enter_context(state.document_lock)
                held.enter_context(self._holding(state.document_file_lock, each))
                held.enter_context(state.log_lock)
                held.enter_context(self._holding(state.log_file_lock, each))
            yield

    @contextmanager
    def _holding(self, file_lock: FileLock, scope: Scope) -> Iterator[None]:
        """A scope's cross-process lock, waited for at most `lock_timeout` seconds."""
        try:
            file_lock.acquire(timeout=self.lock_timeout)
        except LockTimeout:
            raise StorageError(
                f"the memory of {scope.describe()} is locked by another process that has held it for over "
                f"{self.lock_timeout:g} s (storage.lock_timeout_seconds); nothing was changed: try again, or "
                "stop the process that hangs"
            ) from None
        try:
            yield
        finally:
            file_lock.release()

    def _tidy(self) -> None:
        """Delete the tombstones of erases a crash cut short (that memory is gone already) and the
        locks of memory that is not there, and give directories named by an earlier version after
        an id with capitals their marked name."""
        users = self.root / USERS_DIR
        try:
            _tidy_directory(users)
            for user_dir in _subdirectories(users):
                _tidy_directory(user_dir / AGENTS_DIR)
            self._delete_stray_locks()
        except OSError as exc:
            log.warning("could not tidy %s: %s", users, exc.strerror or exc)

    def _delete_stray_locks(self) -> None:
        """Delete the lock files of scopes that have no memory (erased while a lock was held, or
        merely looked up): each only when nobody holds it."""
        for path in sorted((self.root / LOCKS_DIR).glob("*.lock")):
            scope = _scope_of_lock(path.name)
            if scope is None or self.scope_dir(scope).is_dir():
                continue
            lock = FileLock(path)
            try:
                lock.acquire(timeout=0)
            except LockTimeout:
                continue  # in use: the next start deletes it
            try:
                if not self.scope_dir(scope).is_dir():
                    lock.delete()
            finally:
                lock.release()


def _document_bytes(document: MemoryDocument) -> bytes:
    """memory.json as written: indented, without absent fields."""
    return json.dumps(document.model_dump(mode="json", exclude_none=True), ensure_ascii=False, indent=2).encode()


def _delete_locks(state: _ScopeState) -> None:
    """Delete the lock files of an erased scope (held: its log and document locks); its update
    lock too unless an update holds it (then the next start deletes it)."""
    state.log_file_lock.delete()
    state.document_file_lock.delete()
    if not acquire(state.update_guard, 0):
        return
    try:
        state.update_file_lock.acquire(timeout=0)
    except LockTimeout:
        state.update_guard.release()
        return
    try:
        state.update_file_lock.delete()
    finally:
        state.update_file_lock.release()
        state.update_guard.release()


def _finish_replacing(parent: Path, staged: Path) -> None:
    """A replacement a crash cut short: put in place when it was complete and its place is empty
    (the old memory was renamed away already), otherwise deleted (the old memory stands)."""
    owner = identifier_of(staged.name[len(STAGING_PREFIX) :].rsplit("-", 1)[0])
    target = None if owner is None else parent / directory_name(owner)
    if target is not None and (staged / COMPLETE_MARK).exists() and not target.exists():
        rename_durably(staged, target)
        (target / COMPLETE_MARK).unlink()
        log.warning("finished replacing the memory in %s", target)
    else:
        remove_tree(staged)


def _scope_of_lock(name: str) -> Scope | None:
    """The scope a lock file is named after (`{user}[@{agent}].{kind}.lock`), or None."""
    owner = name.split(".", 1)[0]
    user_name, _, agent_name = owner.partition("@")
    user_id = identifier_of(user_name)
    agent = identifier_of(agent_name) if agent_name else None
    if user_id is None or (agent_name and agent is None):
        return None
    return Scope(user_id, agent)


def _tidy_directory(parent: Path) -> None:
    for entry in _subdirectories(parent):
        if entry.name.startswith(TOMBSTONE_PREFIX):
            remove_tree(entry)
        elif entry.name.startswith(STAGING_PREFIX):
            _finish_replacing(parent, entry)
        elif identifier_of(entry.name) is None and _is_identifier(entry.name):
            target = parent / directory_name(entry.name)
            if not target.exists():
                log.info("renaming %s to %s (ids with capitals are marked)", entry, target.name)
                rename_durably(entry, target)


@contextmanager
def _os_errors(action: str) -> Iterator[None]:
    """Report a failure of the filesystem (permissions, disk full, I/O) as a StorageError that says
    what could not be done; the atomic writes and appends leave the files as they were, except
    when the change was made and only its durability is in doubt, which is said."""
    try:
        yield
    except NotDurable as exc:
        raise StorageError(f"could not {action} durably: {exc.strerror} (it may not survive a power loss)") from exc
    except OSError as exc:
        raise StorageError(f"could not {action}: {exc.strerror or exc}") from exc


def _vectors_without(data: bytes, erased: Callable[[PageVector], bool]) -> bytes | None:
    """The vectors file `data` without the records `erased` picks, under a new file id; None when
    it holds none of them (nothing to rewrite)."""
    kept, dropped = [], False
    for line in data[: data.rfind(b"\n") + 1].splitlines():
        if line.startswith(_VECTORS_HEADER_START):
            continue
        with contextlib.suppress(ValueError, KeyError, TypeError):  # a damaged line stays as it was
            if erased(vector_from_record(line)):
                dropped = True
                continue
        kept.append(line + b"\n")
    return _vectors_header() + b"".join(kept) if dropped else None


def _vectors_header() -> bytes:
    """The first record of a vectors file: a random id, so that a reader's mark into a file that
    was rewritten since (even on a recycled inode) is never taken for a mark into this one."""
    return _VECTORS_HEADER_START + b"%d}\n" % (secrets.randbits(40) | 1)


def _vectors_file_id(first_record: bytes) -> int:
    """The id in a vectors file's first record (0: a file from before ids, or empty)."""
    if not first_record.startswith(_VECTORS_HEADER_START):
        return 0
    try:
        return int(json.loads(first_record)["vectors_file"])
    except (ValueError, KeyError, TypeError):
        return 0


def _marked(document: MemoryDocument, erasing: list[str]) -> MemoryDocument:
    return document.model_copy(update={"analysis": document.analysis.model_copy(update={"erasing": erasing})})


def _lines(data: bytes, end: int) -> Iterator[bytes]:
    """The lines of data[:end] (which ends with a newline), one at a time: splitting them all
    first left the heap fragmented once they were parsed and freed (+48 MB of resident memory
    for a log of 100,000 exchanges)."""
    start = 0
    while start < end:
        stop = data.index(b"\n", start)
        yield data[start:stop]
        start = stop + 1


def _first_record(fd: int) -> bytes:
    """The log's first line, newline included (b"" while it has none): with the inode, what tells
    one log from another that replaced it."""
    data = b""
    while b"\n" not in data:
        chunk = os.pread(fd, _FIRST_RECORD_CHUNK, len(data))
        if not chunk:
            return b""
        data += chunk
    return data[: data.index(b"\n") + 1]


def _drop_cached(state: _ScopeState) -> bool:
    """Let go of a scope's cached pages and document, unless a thread is using them right now.
    Where the log was is noted, so that reading it again keeps its generation if it only grew."""

    def drop() -> None:
        if state.log is not None:
            state.tally = dataclasses.replace(state.log, pages=HeldPages())
        state.log = state.document = None

    return done_when_idle([state.log_lock, state.document_lock], drop)


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


def _directory_draft(cache: _LogCache | None, new_pages: int) -> _DirectoryDraft | None:
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


def _let_go_of_log(state: _ScopeState) -> None:
    """Forget the log as read (held: its locks): exchanges were erased from it."""
    retire_log(state.log)
    state.log = state.tally = None


def _log_from_start(
    fd: int, path: Path, identity: tuple[int, bytes], keep_pages: bool = True, generation: int | None = None
) -> _LogCache:
    """A cache of the log open as `fd` that has read nothing yet, or, when its saved directory
    may be used, everything the directory covers (without its pages when not `keep_pages`)."""
    kept = {} if generation is None else {"generation": generation}
    found = read_directory(path.with_name(DIRECTORY_FILE), fd, path, identity[0])
    if found is None:
        return _LogCache(identity=identity, pages=FilePages(path, identity[0]) if keep_pages else HeldPages(), **kept)
    return _LogCache(
        identity=identity,
        pages=found.pages if keep_pages else HeldPages(),
        end=found.pages.end,
        lines=len(found.pages),
        host_memory_end=found.host_memory_end,
        digest=found.digest,
        directory_pages=len(found.pages),
        **kept,
    )


def _continued(known: _LogCache | None, identity: tuple[int, bytes], size: int) -> bool:
    """Whether the log file is the one last known (its cache let go, or its tally), only grown since."""
    return known is not None and known.identity[0] == identity[0] and size >= known.end and _same_start(known, identity)


def _same_start(cache: _LogCache, identity: tuple[int, bytes]) -> bool:
    """Whether the file still begins as the cached log did (a log with no whole line yet
    matches whatever first record it now has)."""
    return not cache.identity[1] or cache.identity[1] == identity[1]


def _identifier_dirs(parent: Path) -> list[str]:
    """The ids of the subdirectories that are someone's, sorted (anything else, links included,
    is not ours)."""
    found = (identifier_of(entry.name) for entry in _subdirectories(parent))
    return sorted(identifier for identifier in found if identifier is not None)


def _subdirectories(parent: Path) -> list[Path]:
    if not parent.is_dir() or parent.is_symlink():
        return []
    return [entry for entry in parent.iterdir() if entry.is_dir() and not entry.is_symlink()]


def _is_identifier(name: str) -> bool:
    try:
        validate_identifier("id", name)
    except ValueError:
        return False
    return True
