"""What the JSON store keeps in a process for each scope (the log and document as read, and the
scope's locks), and how those locks are taken: in-process first, then across processes, each
file lock waited for at most `lock_timeout` seconds.

The page log and the document have separate locks, so an add never waits behind a document
write (two fsyncs); the update lock only marks whose turn it is to run the updater. The locks
live outside the directories they guard, so an erase never deletes a lock someone holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from memory_mcp.base.errors import StorageError
from memory_mcp.models import MemoryDocument
from memory_mcp.store.durable import FileLock, LockTimeout, NotDurable
from memory_mcp.store.files.layout import Layout
from memory_mcp.store.files.pages import FilePages
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.page_sequence import HeldPages
from memory_mcp.store.scope_state import CachedLog, ScopeStates, acquire, done_when_idle, retire_log

_generations = itertools.count(1)


def new_generation() -> int:
    """A generation no log read in this process has had."""
    return next(_generations)


@dataclass(kw_only=True)
class LogCache(CachedLog):
    """What this process has read of one page log (`end`: bytes consumed, just past a newline)."""

    identity: tuple[int, bytes]  # (inode, first record)
    pages: FilePages | HeldPages = field(default_factory=HeldPages)  # HeldPages: none kept (a tally)
    generation: int = field(default_factory=new_generation)
    lines: int = 0
    host_memory_end: int = 0  # every page carrying host memory is among the first this many
    unfinished_reported_at: int = -1
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)  # of the first `end` bytes
    tail: bytes = b""  # the last TAIL_BYTES of the first `end` bytes: see page_log._continued
    directory_pages: int = 0  # how many pages the saved directory covers


@dataclass
class DocumentCache:
    raw: bytes
    document: MemoryDocument


@dataclass
class ScopeState:
    """Locks of one scope, and what this process has read of its files."""

    log_lock: threading.Lock
    log_file_lock: FileLock
    document_lock: threading.Lock
    document_file_lock: FileLock
    update_guard: threading.Lock
    update_file_lock: FileLock
    log: LogCache | None = None
    document: DocumentCache | None = None
    tally: LogCache | None = None  # where the log was when its cache was let go, or when counted (no pages)


class FileScopes:
    """The state of every scope under one root, made on first use, and the taking of its locks."""

    def __init__(self, layout: Layout, lock_timeout: float, cached_scopes: int | None) -> None:
        self.layout = layout
        self.lock_timeout = lock_timeout
        self._states = ScopeStates(self._new_state, cached_scopes, _drop_cached)

    def get(self, scope: Scope) -> ScopeState:
        return self._states.get(scope)

    def known(self) -> list[tuple[Scope, ScopeState]]:
        return self._states.known()

    def erased(self, scope: Scope) -> list[ScopeState]:
        return self._states.erased(scope)

    def _new_state(self, scope: Scope) -> ScopeState:
        return ScopeState(
            log_lock=threading.Lock(),
            log_file_lock=FileLock(self.layout.lock_file(scope, "log")),
            document_lock=threading.Lock(),
            document_file_lock=FileLock(self.layout.lock_file(scope, "doc")),
            update_guard=threading.Lock(),
            update_file_lock=FileLock(self.layout.lock_file(scope, "update")),
        )

    @contextmanager
    def holding(self, file_lock: FileLock, scope: Scope) -> Iterator[None]:
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

    @contextmanager
    def holding_log(self, state: ScopeState, scope: Scope) -> Iterator[None]:
        """The scope's log locks: this process's, then the cross-process one."""
        with state.log_lock, self.holding(state.log_file_lock, scope):
            yield

    @contextmanager
    def holding_whole(self, scopes: Sequence[Scope]) -> Iterator[None]:
        """Every lock of these scopes, their documents' and logs', taken in one order (by name) so
        that two erases or replacements never wait on each other."""
        with contextlib.ExitStack() as held:
            for each in sorted(scopes, key=Scope.describe):
                state = self.get(each)
                held.enter_context(state.document_lock)
                held.enter_context(self.holding(state.document_file_lock, each))
                held.enter_context(state.log_lock)
                held.enter_context(self.holding(state.log_file_lock, each))
            yield


def let_go_of_log(state: ScopeState) -> None:
    """Forget the log as read (held: its locks): exchanges were erased from it."""
    retire_log(state.log)
    state.log = state.tally = None


def delete_locks(state: ScopeState) -> None:
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


@contextmanager
def os_errors(action: str) -> Iterator[None]:
    """Report a failure of the filesystem (permissions, disk full, I/O) as a StorageError that says
    what could not be done; the atomic writes and appends leave the files as they were, except
    when the change was made and only its durability is in doubt, which is said."""
    try:
        yield
    except NotDurable as exc:
        raise StorageError(f"could not {action} durably: {exc.strerror} (it may not survive a power loss)") from exc
    except OSError as exc:
        raise StorageError(f"could not {action}: {exc.strerror or exc}") from exc


def _drop_cached(state: ScopeState) -> bool:
    """Let go of a scope's cached pages and document, unless a thread is using them right now.
    Where the log was is noted, so that reading it again keeps its generation if it only grew."""

    def drop() -> None:
        if state.log is not None:
            state.tally = dataclasses.replace(state.log, pages=HeldPages())
        state.log = state.document = None

    return done_when_idle([state.log_lock, state.document_lock], drop)
