"""Erasing or replacing a JSON store's scope whole, through renames that a crash leaves done or not
begun, and tidying what a crash left behind when a store is opened.

Erasing renames the directory to a tombstone (one durable rename: the memory is whole or gone),
then deletes it; a tombstone a crash left behind is deleted by the next store opened on the root.
Replacing writes the new memory whole beside the old (a staging directory, marked complete last),
then renames the old one to a tombstone and the staging to its place, holding a lock named after
the staging all along: a staging whose lock is free was left by a crash.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memory_mcp.base.clock import utc_now
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.durable import FileLock, LockTimeout, atomic_write, ensure_directory, remove_tree, rename_durably
from memory_mcp.store.files.document import document_bytes
from memory_mcp.store.files.layout import (
    STAGING_PREFIX,
    TOMBSTONE_PREFIX,
    ScopeFiles,
    directory_name,
    identifier_of,
    is_identifier,
    scope_of_lock,
    subdirectories,
)
from memory_mcp.store.files.scopes import FileScopes, delete_locks, let_go_of_log, os_errors
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.records import page_record

log = logging.getLogger(__name__)
STAGING_LOCK_SECONDS = 5.0


class Tombstones:
    """Erases and replaces whole scopes under one root, and tidies the root when it is opened."""

    def __init__(self, scopes: FileScopes) -> None:
        self._scopes = scopes
        self._layout = scopes.layout

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        """The new memory is written whole beside the old (`.replacing-…`, each file synced, then
        marked complete); then, under the locks, the old directory is renamed to a tombstone and the
        new one to its place. A crash before the second rename leaves the old memory, or no
        directory and a complete staging, which the next store opened on the root puts in place
        (`tidy`); an incomplete staging is deleted."""
        directory = self._layout.scope_dir(scope)
        staged = directory.with_name(f"{STAGING_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        agents = self._layout.list_agents(scope.user_id) if scope.agent_name is None else []
        affected = [scope, *(Scope(scope.user_id, agent) for agent in agents)]
        affected += [part for part, _, _ in parts if part not in affected]
        tombstone = directory.with_name(f"{TOMBSTONE_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        with os_errors(f"replace the memory of {scope.describe()}"), self._staging(staged):
            try:
                self._stage(directory, staged, parts)
            except BaseException:
                remove_tree(staged)
                raise
            with self._scopes.holding_whole(affected):
                if directory.is_dir():
                    rename_durably(directory, tombstone)
                rename_durably(staged, directory)
                ScopeFiles(directory).complete_mark.unlink()
                for known in self._scopes.erased(scope):
                    let_go_of_log(known)
                    known.document = None
            if tombstone.exists():
                remove_tree(tombstone)

    @contextmanager
    def _staging(self, staged: Path) -> Iterator[None]:
        """Hold the staging's lock while it is written and put in place, then delete the lock."""
        lock = FileLock(self._layout.staging_lock_file(staged))
        # Its name is new, but a store opening meanwhile may take it for a moment to see it is stray.
        lock.acquire(timeout=STAGING_LOCK_SECONDS)
        try:
            yield
            lock.delete()
        finally:
            lock.release()

    def _stage(
        self, directory: Path, staged: Path, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]
    ) -> None:
        """Write the new memory whole in `staged`, each file synced, and mark it complete."""
        for part, memory, pages in parts:
            folder = staged / self._layout.scope_dir(part).relative_to(directory)  # an agent's: agents/<name>
            ensure_directory(folder)
            files = ScopeFiles(folder)
            if pages:
                atomic_write(files.pages, b"".join((page_record(page) + "\n").encode() for page in pages))
            atomic_write(files.memory, document_bytes(memory.model_copy(update={"lastUpdated": utc_now()})))
        atomic_write(ScopeFiles(staged).complete_mark, b"")

    def erase(self, scope: Scope) -> None:
        """Rename the scope's directory to a tombstone, durably, under its locks (and for a user,
        its agents' locks), then delete the tombstone: a crash leaves all of it or none."""
        directory = self._layout.scope_dir(scope)
        affected = [scope]
        if scope.agent_name is None:
            affected += [Scope(scope.user_id, agent) for agent in self._layout.list_agents(scope.user_id)]
        tombstone = directory.with_name(f"{TOMBSTONE_PREFIX}{directory.name}-{secrets.token_hex(4)}")
        with os_errors(f"erase the memory of {scope.describe()}"), self._scopes.holding_whole(affected):
            if not directory.is_dir():
                return
            rename_durably(directory, tombstone)
            for known in self._scopes.erased(scope):
                let_go_of_log(known)
                known.document = None
            for each in affected:  # no lock named after the erased memory is left
                delete_locks(self._scopes.get(each))
        with os_errors(f"finish erasing the memory of {scope.describe()} (it is gone already)"):
            remove_tree(tombstone)

    def tidy(self) -> None:
        """Delete the tombstones of erases a crash cut short (that memory is gone already) and the
        locks of memory that is not there, and give directories named by an earlier version after
        an id with capitals their marked name."""
        users = self._layout.users_dir
        try:
            self._tidy_directory(users)
            for user_dir in subdirectories(users):
                self._tidy_directory(ScopeFiles(user_dir).agents)
            self._delete_stray_locks()
        except OSError as exc:
            log.warning("could not tidy %s: %s", users, exc.strerror or exc)

    def _delete_stray_locks(self) -> None:
        """Delete the lock files of scopes that have no memory (erased while a lock was held, or
        merely looked up): each only when nobody holds it."""
        for path in self._layout.lock_files():
            if path.name.startswith(STAGING_PREFIX):  # its staging, if a crash left one, is tidied already
                _delete_when_free(path, memory=None)
                continue
            scope = scope_of_lock(path.name)
            if scope is not None:
                _delete_when_free(path, memory=self._layout.scope_dir(scope))

    def _tidy_directory(self, parent: Path) -> None:
        for entry in subdirectories(parent):
            if entry.name.startswith(TOMBSTONE_PREFIX):
                remove_tree(entry)
            elif entry.name.startswith(STAGING_PREFIX):
                self._finish_replacing(parent, entry)
            elif identifier_of(entry.name) is None and is_identifier(entry.name):
                target = parent / directory_name(entry.name)
                if not target.exists():
                    log.info("renaming %s to %s (ids with capitals are marked)", entry, target.name)
                    rename_durably(entry, target)

    def _finish_replacing(self, parent: Path, staged: Path) -> None:
        """A replacement a crash cut short (its lock is free): put in place when it was complete and
        its place is empty (the old memory was renamed away already), otherwise deleted (the old
        memory stands). One another process is writing is left alone."""
        lock = FileLock(self._layout.staging_lock_file(staged))
        try:
            lock.acquire(timeout=0)
        except LockTimeout:
            return
        try:
            owner = identifier_of(staged.name[len(STAGING_PREFIX) :].rsplit("-", 1)[0])
            target = None if owner is None else parent / directory_name(owner)
            complete = ScopeFiles(staged).complete_mark.exists()
            if target is not None and complete and not target.exists():
                rename_durably(staged, target)
                ScopeFiles(target).complete_mark.unlink()
                log.warning("finished replacing the memory in %s", target)
            else:
                remove_tree(staged)  # nothing when its writer put it in place just before the lock was free
            lock.delete()
        finally:
            lock.release()


def _delete_when_free(path: Path, memory: Path | None) -> None:
    """Delete a lock file when nobody holds it and the memory it is named after (if any) is not
    there."""
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except LockTimeout:
        return  # in use: the next start deletes it
    try:
        if memory is None or not memory.is_dir():
            lock.delete()
    finally:
        lock.release()
