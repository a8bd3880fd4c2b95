"""Erasing and rewriting in the PostgreSQL store, each one transaction: pages erased or rewritten
with the scope row locked (appends wait), and whole scopes erased or replaced by deleting their
scope rows, which takes everything else with them (ON DELETE CASCADE)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import MemoryGone
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.postgres.connection import Attempt, Connection, Database, only_row, scope_key
from memory_mcp.store.postgres.documents import document_from_row
from memory_mcp.store.postgres.pages import append_parameters
from memory_mcp.store.postgres.state import DocumentCache, ScopeState, let_go_of_log
from memory_mcp.store.records import page_record
from memory_mcp.store.scope_state import ScopeStates


class PostgresErasure:
    """Erases and rewrites pages, and erases and replaces whole scopes, in one schema."""

    def __init__(self, database: Database, states: ScopeStates[ScopeState]) -> None:
        self._db = database
        self._states = states

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        """One transaction: the scope row locked (appends wait), the document changed, the pages and
        their vectors, saved index and directory deleted, the positions after them closed up, and a
        new generation."""
        user_id, agent = scope_key(scope)
        state = self._states.get(scope)
        names: dict[str, Any] = {"u": user_id, "a": agent, "ids": list(page_ids)}

        def work(conn: Connection, attempt: Attempt) -> tuple[int, MemoryDocument]:
            with conn.transaction():
                row = conn.execute(self._db.sql["lock_scope_for_erasing"], names).fetchone()
                if row is None:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                count = row[0]
                positions = [found[0] for found in conn.execute(self._db.sql["positions_of"], names).fetchall()]
                conn.execute(self._db.sql["ensure_existing_document"], names)
                document_row = conn.execute(self._db.sql["lock_document"], {**names, "known": -1}).fetchone()
                with state.document_lock:
                    current = document_from_row(self._db, state, scope, document_row)
                attempt.retry_is_safe = False  # change() is called once
                stored = change(current, positions).model_copy(update={"lastUpdated": utc_now()})
                data = stored.model_dump_json(exclude_none=True)
                version = only_row(conn.execute(self._db.sql["write_document"], {**names, "doc": data}))[0]
                if positions:
                    moved = {**names, "count": count, "first": positions[0]}
                    conn.execute(self._db.sql["erase_pages"], names)
                    conn.execute(self._db.sql["lift_positions"], moved)
                    conn.execute(self._db.sql["close_positions"], moved)
                    conn.execute(self._db.sql["shorten_log"], {**names, "n": len(positions)})
                conn.execute(self._db.sql["erase_page_vectors"], names)
                conn.execute(self._db.sql["erase_index_snapshot"], names)
                conn.execute(self._db.sql["erase_page_directory"], names)
            return version, stored

        with state.update_lock:
            version, stored = self._db.run(f"erase exchanges of {scope.describe()}", work)
        with state.document_lock:
            state.document = DocumentCache(version, stored)
        with state.log_lock:
            let_go_of_log(state)

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """One transaction: the scope row locked (appends wait), the pages' records replaced, their
        vectors, the saved index and the directory deleted, and a new generation."""
        user_id, agent = scope_key(scope)
        state = self._states.get(scope)
        names: dict[str, Any] = {"u": user_id, "a": agent, "ids": [page.page_id for page in pages]}

        def work(conn: Connection, _attempt: Attempt) -> None:
            with conn.transaction():
                if conn.execute(self._db.sql["lock_scope_for_erasing"], names).fetchone() is None:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                conn.execute(self._db.sql["rewrite_pages"], {**names, "pages": [page_record(page) for page in pages]})
                conn.execute(self._db.sql["erase_page_vectors"], names)
                conn.execute(self._db.sql["erase_index_snapshot"], names)
                conn.execute(self._db.sql["erase_page_directory"], names)
                conn.execute(self._db.sql["new_generation"], names)

        self._db.run(f"rewrite exchanges of {scope.describe()}", work)
        with state.log_lock:
            let_go_of_log(state)

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        """One transaction: the scope (with its agents) deleted, then every part's pages and
        document inserted."""
        erasing = self._erasing(scope)

        def work(conn: Connection, _attempt: Attempt) -> None:
            with conn.transaction():
                conn.execute(*erasing)
                for part_scope, memory, pages in parts:
                    part_user, part_agent = scope_key(part_scope)
                    names = {"u": part_user, "a": part_agent}
                    if pages:
                        conn.execute(self._db.sql["append"], append_parameters(part_scope, pages))
                    conn.execute(self._db.sql["ensure_document"], names)
                    stored = memory.model_copy(update={"lastUpdated": utc_now()})
                    conn.execute(
                        self._db.sql["write_document"], {**names, "doc": stored.model_dump_json(exclude_none=True)}
                    )

        self._db.run(f"replace the memory of {scope.describe()}", work)
        self._forget(scope)

    def erase(self, scope: Scope) -> None:
        query, params = self._erasing(scope)
        self._db.run(f"erase the memory of {scope.describe()}", lambda conn, _: conn.execute(query, params))
        self._forget(scope)

    def _erasing(self, scope: Scope) -> tuple[str, list[str]]:
        """The statement that deletes the scope's row (a user's: their agents' too), and its parameters."""
        user_id, agent = scope_key(scope)
        if scope.agent_name is None:
            return self._db.sql["erase_user"], [user_id]
        return self._db.sql["erase_agent"], [user_id, agent]

    def _forget(self, scope: Scope) -> None:
        """Let go of what this process has read of the erased scope (for a user, their agents too)."""
        for known in self._states.erased(scope):
            with known.log_lock, known.document_lock:
                let_go_of_log(known)
                known.document = None
