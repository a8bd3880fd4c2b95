"""The embedded default backend: one directory per user (and per agent), plain files inside.

    {root}/users/{user_id}/memory.json                    structured memory (DeerFlow schema)
    {root}/users/{user_id}/pages.jsonl                    verbatim exchanges, one JSON per line
    {root}/users/{user_id}/agents/{agent_name}/...        the same, for one agent of that user

The page log is append-only, so adding costs the same at any history size. Several processes
may share a data directory: writers take a per-scope file lock, and readers notice other
processes' changes from the files' size and identity and read only what is new.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout
from pydantic import ValidationError

from memory_mcp.errors import StorageError
from memory_mcp.ids import validate_identifier
from memory_mcp.models import MemoryDocument, Page, utc_now
from memory_mcp.store import PageLog, Scope, page_from_record, page_record
from memory_mcp.store.durable import (
    FILE_MODE,
    append_records,
    atomic_write,
    ensure_directory,
    read_bytes,
    remove_stale_temps,
    remove_tree,
)

log = logging.getLogger(__name__)

MEMORY_FILE = "memory.json"
PAGES_FILE = "pages.jsonl"
LOG_LOCK_FILE = ".lock"
DOCUMENT_LOCK_FILE = ".memory.lock"
UPDATE_LOCK_FILE = ".update.lock"

_generations = itertools.count(1)


@dataclass
class _LogCache:
    """What this process has read of one page log."""

    inode: int
    generation: int = field(default_factory=lambda: next(_generations))
    pages: list[Page] = field(default_factory=list)
    offset: int = 0  # bytes consumed: always just past a newline
    lines: int = 0
    unfinished_reported_at: int = -1


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


class JsonStore:
    """`MemoryStore` over JSON files; safe across threads and across processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._states: dict[Scope, _ScopeState] = {}
        self._states_guard = threading.Lock()

    # --- layout ---------------------------------------------------------------------------

    def scope_dir(self, scope: Scope) -> Path:
        """The scope's directory. A symbolic link anywhere on the way is refused: it would let
        whoever planted it send one user's memory out of the data directory."""
        users = self.root / "users"
        user_dir = users / validate_identifier("user_id", scope.user_id)
        steps = [users, user_dir]
        if scope.agent_name is not None:
            steps += [user_dir / "agents", user_dir / "agents" / validate_identifier("agent_name", scope.agent_name)]
        for step in steps:
            if step.is_symlink():
                raise StorageError(f"{step} is a symbolic link; memory is never read or written through one")
        return steps[-1]

    def check_ready(self) -> None:
        # A data directory not created yet is ready: the first add creates it.
        existing = next(path for path in (self.root, *self.root.parents) if path.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise StorageError(f"cannot write memory under {self.root} ({existing} is not a writable directory)")

    def list_users(self) -> list[str]:
        return _identifier_dirs(self.root / "users")

    def list_agents(self, user_id: str) -> list[str]:
        return _identifier_dirs(self.root / "users" / validate_identifier("user_id", user_id) / "agents")

    def list_scopes(self) -> list[Scope]:
        scopes = []
        for user_id in self.list_users():
            scopes.append(Scope(user_id))
            scopes.extend(Scope(user_id, agent) for agent in _identifier_dirs(self.root / "users" / user_id / "agents"))
        return scopes

    # --- pages ----------------------------------------------------------------------------

    def append_page(self, scope: Scope, page: Page) -> None:
        self.append_pages(scope, [page])

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        if not pages:
            return
        records = b"".join((page_record(page) + "\n").encode("utf-8") for page in pages)
        state = self._state(scope)
        path = self.scope_dir(scope) / PAGES_FILE
        with (
            _os_errors(f"store pages for {scope.describe()}"),
            state.log_lock,
            self._locked(state.log_file_lock, scope),
        ):
            size_before = append_records(path, records)
            cache = state.log
            # Extend the cache in place only if it had read exactly up to where these went.
            if cache is not None and cache.offset == size_before and cache.inode == path.stat().st_ino:
                cache.pages.extend(pages)
                cache.offset += len(records)
                cache.lines += len(pages)

    def erase(self, scope: Scope) -> None:
        directory = self.scope_dir(scope)
        with _os_errors(f"erase the memory of {scope.describe()}"):
            remove_tree(directory)
        with self._states_guard:
            for known in list(self._states):
                if known == scope or (scope.agent_name is None and known.user_id == scope.user_id):
                    del self._states[known]

    def read_pages(self, scope: Scope) -> PageLog:
        state = self._state(scope)
        path = self.scope_dir(scope) / PAGES_FILE
        with _os_errors(f"read the pages of {scope.describe()}"), state.log_lock:
            try:
                stat = path.stat()
            except FileNotFoundError:
                if state.log is None or state.log.inode != 0:
                    state.log = _LogCache(inode=0)
                return PageLog(state.log.generation, state.log.pages)
            cache = state.log
            if cache is None or cache.inode != stat.st_ino or stat.st_size < cache.offset:
                cache = state.log = _LogCache(inode=stat.st_ino)
            if stat.st_size > cache.offset:
                try:
                    lock = self._locked(state.log_file_lock, scope)
                    lock.acquire()
                except OSError:
                    # A read-only data directory: nobody can be appending, so read without the lock.
                    self._read_new_records(path, cache, scope)
                else:
                    try:
                        self._read_new_records(path, cache, scope)
                    finally:
                        lock.release()
            return PageLog(cache.generation, cache.pages)

    def _read_new_records(self, path: Path, cache: _LogCache, scope: Scope) -> None:
        """Parse what was appended since the last read. Called holding the file lock, so an
        unterminated last line is an interrupted write, not one still in progress."""
        data = read_bytes(path)[cache.offset :]
        complete_end = data.rfind(b"\n") + 1
        new_pages = []
        for number, line in enumerate(data[:complete_end].splitlines(), start=cache.lines + 1):
            try:
                new_pages.append(page_from_record(line))
            except ValidationError:
                raise StorageError(
                    f"{path} line {number} is not a valid page record; the file was left untouched "
                    "(fix or remove that line)"
                ) from None
        cache.pages.extend(new_pages)
        cache.lines += len(new_pages)
        cache.offset += complete_end
        unfinished = len(data) - complete_end
        if unfinished and cache.unfinished_reported_at != cache.offset:
            cache.unfinished_reported_at = cache.offset
            log.warning("%s ends with %d bytes of an interrupted write; ignoring them", path, unfinished)

    # --- structured memory ----------------------------------------------------------------

    def read_document(self, scope: Scope) -> MemoryDocument:
        state = self._state(scope)
        path = self.scope_dir(scope) / MEMORY_FILE
        with _os_errors(f"read the memory of {scope.describe()}"), state.document_lock:
            return self._current_document(state, path)

    def write_document(self, scope: Scope, document: MemoryDocument) -> MemoryDocument:
        return self.update_document(scope, lambda _current: document)

    def update_document(self, scope: Scope, change: Callable[[MemoryDocument], MemoryDocument]) -> MemoryDocument:
        state = self._state(scope)
        path = self.scope_dir(scope) / MEMORY_FILE
        with (
            _os_errors(f"save the memory of {scope.describe()}"),
            state.document_lock,
            self._locked(state.document_file_lock, scope),
        ):
            # Reading first also means a damaged file is reported, never overwritten.
            current = self._current_document(state, path)
            stored = change(current).model_copy(update={"lastUpdated": utc_now()})
            data = json.dumps(stored.model_dump(mode="json", exclude_none=True), ensure_ascii=False, indent=2)
            raw = data.encode("utf-8")
            atomic_write(path, raw)
            state.document = _DocumentCache(raw, stored)
            remove_stale_temps(path)
        return stored

    @contextmanager
    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> Iterator[bool]:
        state = self._state(scope)
        deadline = time.monotonic() + wait
        acquired = state.update_guard.acquire(timeout=wait) if wait > 0 else state.update_guard.acquire(blocking=False)
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
            except Timeout:
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

    def _state(self, scope: Scope) -> _ScopeState:
        with self._states_guard:
            state = self._states.get(scope)
            if state is None:
                directory = self.scope_dir(scope)
                state = _ScopeState(
                    log_lock=threading.Lock(),
                    log_file_lock=FileLock(directory / LOG_LOCK_FILE, mode=FILE_MODE, thread_local=False),
                    document_lock=threading.Lock(),
                    document_file_lock=FileLock(directory / DOCUMENT_LOCK_FILE, mode=FILE_MODE, thread_local=False),
                    update_guard=threading.Lock(),
                    update_file_lock=FileLock(directory / UPDATE_LOCK_FILE, mode=FILE_MODE, thread_local=False),
                )
                self._states[scope] = state
            return state

    def _locked(self, file_lock: FileLock, scope: Scope) -> FileLock:
        """A cross-process lock of the scope, ready to enter; the scope's directory is made first."""
        ensure_directory(self.scope_dir(scope))
        return file_lock


@contextmanager
def _os_errors(action: str) -> Iterator[None]:
    """Report a failure of the filesystem (permissions, disk full, I/O) as a StorageError that says
    what could not be done; the atomic writes and appends below leave the files as they were."""
    try:
        yield
    except Timeout:
        raise  # a lock someone else holds (filelock's Timeout is an OSError): the caller decides
    except OSError as exc:
        raise StorageError(f"could not {action}: {exc.strerror or exc}") from exc


def _identifier_dirs(parent: Path) -> list[str]:
    """Names of the subdirectories that are valid ids, sorted (anything else, links included,
    is not ours)."""
    if not parent.is_dir() or parent.is_symlink():
        return []
    return sorted(
        entry.name
        for entry in parent.iterdir()
        if entry.is_dir() and not entry.is_symlink() and _is_identifier(entry.name)
    )


def _is_identifier(name: str) -> bool:
    try:
        validate_identifier("user_id", name)
    except ValueError:
        return False
    return True
