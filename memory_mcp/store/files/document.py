"""The JSON store's memory document (`memory.json`, one per scope), written atomically under the
scope's document locks, and the updater's turn at changing it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import MemoryGone, StorageError
from memory_mcp.models import MemoryDocument
from memory_mcp.store.durable import (
    LockTimeout,
    NotDurable,
    atomic_write,
    ensure_directory,
    read_bytes,
    remove_stale_temps,
)
from memory_mcp.store.files.page_log import PageLogFiles
from memory_mcp.store.files.scopes import DocumentCache, FileScopes, ScopeState, os_errors
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.scope_state import acquire

# Finishes an erase of pages a crash cut short after its document write (held: the document
# locks), given the document that still names the pages; returns the document then.
FinishErasing = Callable[[ScopeState, Scope, MemoryDocument], MemoryDocument]


class DocumentFiles:
    """The memory documents of the scopes under one root. A document marked with an erase of
    pages under way has that erase finished (`finish_erasing`) by whoever reads it next."""

    def __init__(self, scopes: FileScopes, page_log: PageLogFiles, finish_erasing: FinishErasing) -> None:
        self._scopes = scopes
        self._log = page_log
        self._finish_erasing = finish_erasing

    def read_document(self, scope: Scope) -> MemoryDocument:
        state = self._scopes.get(scope)
        path = self._scopes.layout.files(scope).memory
        with os_errors(f"read the memory of {scope.describe()}"), state.document_lock:
            document = current_document(state, path)
            if not document.analysis.erasing:
                return document
            with self._scopes.holding(state.document_file_lock, scope):
                document = current_document(state, path)
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
        state = self._scopes.get(scope)
        files = self._scopes.layout.files(scope)
        directory, path = files.directory, files.memory
        with (
            os_errors(f"save the memory of {scope.describe()}"),
            state.document_lock,
            self._scopes.holding(state.document_file_lock, scope),
        ):
            if create:
                ensure_directory(directory)
            elif not directory.is_dir():
                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
            if current_document(state, path).analysis.erasing:  # before the generation is compared
                self._finish_erasing(state, scope, current_document(state, path))
            if log_generation is not None and self._log.read_pages(scope).generation != log_generation:
                raise MemoryGone(f"the memory of {scope.describe()} was erased and begun anew; nothing was written")
            return write_document(state, path, change)

    @contextmanager
    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> Iterator[bool]:
        state = self._scopes.get(scope)
        deadline = time.monotonic() + wait
        acquired = acquire(state.update_guard, wait)
        if not acquired:
            yield False
            return
        try:
            if not self._scopes.layout.scope_dir(scope).is_dir():
                yield False  # nothing stored: nothing to update (and no directory to recreate)
                return
            try:
                with os_errors(f"lock the memory of {scope.describe()}"):
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


def current_document(state: ScopeState, path: Path) -> MemoryDocument:
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
    state.document = DocumentCache(raw, document)
    return document


def write_document(state: ScopeState, path: Path, change: Callable[[MemoryDocument], MemoryDocument]) -> MemoryDocument:
    """Read, change and write the document (held: its locks)."""
    # Reading first also means a damaged file is reported, never overwritten.
    current = current_document(state, path)
    stored = change(current).model_copy(update={"lastUpdated": utc_now()})
    raw = document_bytes(stored)
    try:
        atomic_write(path, raw)
    except NotDurable:
        state.document = DocumentCache(raw, stored)  # in place, if not synced
        raise
    state.document = DocumentCache(raw, stored)
    remove_stale_temps(path)
    return stored


def document_bytes(document: MemoryDocument) -> bytes:
    """memory.json as written: indented, without absent fields."""
    return json.dumps(document.model_dump(mode="json", exclude_none=True), ensure_ascii=False, indent=2).encode()


def marked(document: MemoryDocument, erasing: list[str]) -> MemoryDocument:
    """The document marked with the ids of the pages being erased (none: the mark cleared)."""
    return document.model_copy(update={"analysis": document.analysis.model_copy(update={"erasing": erasing})})
