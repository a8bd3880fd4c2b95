"""The PostgreSQL store's memory documents (one row of `documents` per scope, read-modify-written
in one transaction under the row's lock), and the updater's turn at changing them (a session
advisory lock, released by PostgreSQL if the instance holding it dies)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import MemoryGone, StorageError
from memory_mcp.models import MemoryDocument
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.postgres.connection import (
    FOREIGN_KEY_VIOLATION,
    UNTRANSLATABLE_CHARACTER,
    Attempt,
    Connection,
    Database,
    Row,
    ScopeVanished,
    only_row,
    scope_key,
    scope_row,
    sqlstate,
)
from memory_mcp.store.postgres.migrations import advisory_key
from memory_mcp.store.postgres.state import DocumentCache, ScopeState
from memory_mcp.store.scope_state import ScopeStates, acquire

_ATTEMPTS_WHILE_ERASED = 5  # an update whose scope keeps being erased under it gives up after these


class PostgresDocuments:
    """The memory documents of the scopes in one schema, cached by version in this process."""

    def __init__(self, database: Database, states: ScopeStates[ScopeState]) -> None:
        self._db = database
        self._states = states

    def read_document(self, scope: Scope) -> MemoryDocument:
        state = self._states.get(scope)

        def fetch(known: int) -> Row | None:
            # No in-process lock is held while waiting for a connection: update_document holds a
            # connection while it takes document_lock, and the two orders would deadlock.
            return scope_row(self._db, f"read the memory of {scope.describe()}", "read_document", scope, known=known)

        with state.document_lock:
            known = state.document.version if state.document is not None else -1
        row = fetch(known)
        with state.document_lock:
            if row is not None and row[1] is None and (state.document is None or state.document.version != row[0]):
                row = None  # the cache moved on while we read: fetch the document whole
            else:
                return document_from_row(self._db, state, scope, row)
        row = fetch(-1)
        with state.document_lock:
            return document_from_row(self._db, state, scope, row)

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
        scope_key(scope)
        state = self._states.get(scope)

        def work(conn: Connection, attempt: Attempt) -> tuple[int, MemoryDocument]:
            for _ in range(_ATTEMPTS_WHILE_ERASED):
                try:
                    return self._update(conn, attempt, scope, state, change, create, log_generation)
                except Exception as exc:
                    erased = isinstance(exc, ScopeVanished) or sqlstate(exc) == FOREIGN_KEY_VIOLATION
                    if not erased or not attempt.retry_is_safe:
                        raise
                    continue  # erased between our statements: create it again
            raise StorageError(f"could not save the memory of {scope.describe()}: it kept being erased meanwhile")

        with state.update_lock:
            try:
                version, stored = self._db.run(f"save the memory of {scope.describe()}", work)
            except StorageError as exc:
                if sqlstate(exc.__cause__) == UNTRANSLATABLE_CHARACTER:
                    raise StorageError(
                        f"could not save the memory of {scope.describe()}: PostgreSQL cannot store the character "
                        "U+0000 (NUL) in a JSONB document; nothing was written"
                    ) from None
                raise
        with state.document_lock:
            state.document = DocumentCache(version, stored)
        return stored

    def _update(
        self,
        conn: Connection,
        attempt: Attempt,
        scope: Scope,
        state: ScopeState,
        change: Callable[[MemoryDocument], MemoryDocument],
        create: bool,
        log_generation: int | None,
    ) -> tuple[int, MemoryDocument]:
        """One transaction of update_document: the document row locked (made first if missing),
        changed and written; ScopeVanished when the scope was erased between two statements."""
        user_id, agent = scope_key(scope)
        names = {"u": user_id, "a": agent}
        with conn.transaction():
            if create and log_generation is None:
                conn.execute(self._db.sql["ensure_document"], names)
            else:
                # Held until commit: an erase waits for this write, then deletes it too.
                locked = conn.execute(self._db.sql["lock_scope"], names).fetchone()
                if locked is None:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                if log_generation is not None and locked[0] != log_generation:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased and begun anew; nothing was written")
                conn.execute(self._db.sql["ensure_existing_document"], names)
            with state.document_lock:
                known = state.document.version if state.document is not None else -1
            row = conn.execute(self._db.sql["lock_document"], {**names, "known": known}).fetchone()
            if row is None:
                raise ScopeVanished
            with state.document_lock:
                if row[1] is None and (state.document is None or state.document.version != row[0]):
                    # The cache moved on since `known` was read: fetch the (locked) row whole.
                    row = conn.execute(self._db.sql["lock_document"], {**names, "known": -1}).fetchone()
                current = document_from_row(self._db, state, scope, row)
            attempt.retry_is_safe = False  # change() may have effects of its own: call it once
            stored = change(current).model_copy(update={"lastUpdated": utc_now()})
            data = stored.model_dump_json(exclude_none=True)
            version = only_row(conn.execute(self._db.sql["write_document"], {**names, "doc": data}))[0]
        return version, stored

    @contextmanager
    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> Iterator[bool]:
        user_id, agent = scope_key(scope)
        guard = self._states.get(scope).update_guard
        deadline = time.monotonic() + wait
        acquired = acquire(guard, wait)
        if not acquired:
            yield False
            return
        try:
            action = f"lock the memory of {scope.describe()}"
            if scope.agent_name is None:
                query, params = self._db.sql["user_exists"], [user_id]
            else:
                query, params = self._db.sql["agent_exists"], [user_id, agent]
            if not self._db.run(action, lambda conn, _: only_row(conn.execute(query, params))[0]):
                yield False  # nothing stored: nothing to update
                return
            lock = advisory_key("update", self._db.schema, user_id, agent)
            with self._db.advisory_lock(lock, deadline, action, scope.describe()) as held:
                yield held
        finally:
            guard.release()


def document_from_row(database: Database, state: ScopeState, scope: Scope, row: Row | None) -> MemoryDocument:
    """The document a `read_document`/`lock_document` row stands for; caller holds document_lock."""
    if row is None:  # none written
        state.document = None
        return MemoryDocument()
    version, text = row
    if text is None and state.document is not None and state.document.version == version:
        return state.document.document
    try:
        document = MemoryDocument.model_validate_json(text)
    except (ValueError, ValidationError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StorageError(
            f"{database.schema}.documents of {scope.describe()} is not a valid memory document ({reason}); it was "
            "left untouched: fix it or restore a backup, and this user's memory will load again"
        ) from None
    state.document = DocumentCache(version, document)
    return document
