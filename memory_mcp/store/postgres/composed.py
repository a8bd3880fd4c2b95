"""The PostgreSQL store's parts put together: every `MemoryStore` method handed to the part that
does it, over any `Database` (`backend.PostgresStore` gives it one over psycopg)."""

from __future__ import annotations

from collections.abc import Sequence

from memory_mcp.base.ids import validate_identifier
from memory_mcp.models import Page
from memory_mcp.store.delegation import DelegatingStore
from memory_mcp.store.interfaces import PageLog, Scope
from memory_mcp.store.postgres.connection import NO_AGENT, Database
from memory_mcp.store.postgres.derived import PostgresDerived
from memory_mcp.store.postgres.documents import PostgresDocuments
from memory_mcp.store.postgres.erasure import PostgresErasure
from memory_mcp.store.postgres.pages import PostgresPages
from memory_mcp.store.postgres.state import ScopeState, drop_cached
from memory_mcp.store.scope_state import ScopeStates


class ComposedPostgresStore(DelegatingStore):
    """Pages, documents, derived data and erasure of the scopes in one schema, each a part of its
    own sharing this process's per-scope state (kept for `cached_scopes` scopes at most). Pages are
    handed to their part here; documents, derived data and erasing by `DelegatingStore`."""

    def __init__(self, database: Database, cached_scopes: int | None) -> None:
        self._db = database
        states = ScopeStates(lambda _scope: ScopeState(), cached_scopes, drop_cached)
        self._pages = PostgresPages(database, states)
        self._documents = PostgresDocuments(database, states)
        self._vectors = self._saved_index = PostgresDerived(database)
        self._erasure = self._scope_erasure = PostgresErasure(database, states)

    # --- the store as a whole -------------------------------------------------------------

    def check_ready(self) -> None:
        self._db.run("answer a health check", lambda conn, _: conn.execute("SELECT 1").fetchone())

    def bulk_loaded(self) -> None:
        self._db.run("gather statistics of the new rows", lambda conn, _: conn.execute(self._db.sql["analyse"]))

    def list_users(self) -> list[str]:
        rows = self._db.run("list the users", lambda conn, _: conn.execute(self._db.sql["list_users"]).fetchall())
        return [row[0] for row in rows]

    def list_agents(self, user_id: str) -> list[str]:
        validate_identifier("user_id", user_id)
        rows = self._db.run(
            f"list the agents of {user_id}",
            lambda conn, _: conn.execute(self._db.sql["list_agents"], [user_id]).fetchall(),
        )
        return [row[0] for row in rows]

    def list_scopes(self) -> list[Scope]:
        rows = self._db.run(
            "list the stored scopes", lambda conn, _: conn.execute(self._db.sql["list_scopes"]).fetchall()
        )
        scopes: list[Scope] = []
        for user_id, agent_name in rows:
            if not scopes or scopes[-1].user_id != user_id:
                scopes.append(Scope(user_id))  # a user with only agents still has a scope, as on disk
            if agent_name != NO_AGENT:
                scopes.append(Scope(user_id, agent_name))
        return scopes

    # --- pages ----------------------------------------------------------------------------

    def append_page(self, scope: Scope, page: Page) -> None:
        self._pages.append_page(scope, page)

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self._pages.append_pages(scope, pages)

    def read_pages(self, scope: Scope) -> PageLog:
        return self._pages.read_pages(scope)

    def page_count(self, scope: Scope) -> int:
        return self._pages.page_count(scope)

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        return self._pages.host_memory_from(scope, start)
