"""The embedded default backend: one directory per user (and per agent), plain files inside.

Its parts, each in a module of its own:

    layout      where each scope's files and locks are, and the checks that keep paths in the root
    scopes      what a process keeps per scope (the log and document as read), and its locks
    page_log    the page log: appended to, read by what was added since, its directory saved
    document    the memory document, and the updater's turn at changing it
    vectors     the page vectors; saved_index: the saved word index (both derived from the log)
    erasure     pages erased or rewritten: files written aside, then put in place
    tombstones  a scope erased or replaced whole by renames, and what a crash left tidied at start

Several processes may share a data directory: every write takes the scope's cross-process lock,
and every read notices what other processes wrote since (see `page_log`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from memory_mcp.base.errors import StorageError
from memory_mcp.models import Page
from memory_mcp.store.delegation import DelegatingStore
from memory_mcp.store.files.document import DocumentFiles
from memory_mcp.store.files.erasure import PageErasure
from memory_mcp.store.files.layout import Layout
from memory_mcp.store.files.page_log import PageLogFiles
from memory_mcp.store.files.saved_index import SavedIndexFiles
from memory_mcp.store.files.scopes import FileScopes
from memory_mcp.store.files.tombstones import Tombstones
from memory_mcp.store.files.vectors import VectorFiles
from memory_mcp.store.interfaces import PageLog, Scope

DEFAULT_LOCK_TIMEOUT = 30.0


class JsonStore(DelegatingStore):
    """`MemoryStore` over JSON files; safe across threads and across processes. Documents, derived
    data and erasing are handed to their parts (`DelegatingStore`).

    A file lock held longer than `lock_timeout` seconds by another process (a hung one) fails
    that one call with a StorageError; every other user goes on being served.
    """

    def __init__(
        self, root: Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, cached_scopes: int | None = None
    ) -> None:
        self.root = root
        self.location = str(root)
        self.lock_timeout = lock_timeout
        self._layout = Layout(root)
        scopes = FileScopes(self._layout, lock_timeout, cached_scopes)
        self._log = PageLogFiles(scopes)
        self._vectors = VectorFiles(scopes, self._log)
        self._saved_index = SavedIndexFiles(scopes, self._log)
        self._erasure = erasure = PageErasure(scopes, self._log)
        self._documents = DocumentFiles(scopes, self._log, erasure.finish_erasing)
        self._scope_erasure = tombstones = Tombstones(scopes)
        tombstones.tidy()

    def scope_dir(self, scope: Scope) -> Path:
        """The scope's directory (a symbolic link on the way is refused: see `Layout.scope_dir`)."""
        return self._layout.scope_dir(scope)

    # --- the store as a whole -------------------------------------------------------------

    def close(self) -> None:
        """Save the directory of every log in memory that grew since its directory was saved, so
        that the next start parses none of it (every file is closed after each operation)."""
        self._log.save_directories()

    def bulk_loaded(self) -> None:
        """Nothing to prepare: a log is read by what its page directory and records say."""

    def check_ready(self) -> None:
        # A data directory not created yet is ready: the first add creates it.
        existing = next(path for path in (self.root, *self.root.parents) if path.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise StorageError(f"cannot write memory under {self.root} ({existing} is not a writable directory)")

    def list_users(self) -> list[str]:
        return self._layout.list_users()

    def list_agents(self, user_id: str) -> list[str]:
        return self._layout.list_agents(user_id)

    def list_scopes(self) -> list[Scope]:
        return self._layout.list_scopes()

    # --- pages ----------------------------------------------------------------------------

    def append_page(self, scope: Scope, page: Page) -> None:
        """A page just made (its id fresh and random): appended without looking for its id."""
        self._log.append(scope, [page], refuse_stored=False)

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self._log.append(scope, pages, refuse_stored=True)

    def read_pages(self, scope: Scope) -> PageLog:
        return self._log.read_pages(scope)

    def page_count(self, scope: Scope) -> int:
        return self._log.tally(scope).lines

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        return self._log.tally(scope).host_memory_end > start
