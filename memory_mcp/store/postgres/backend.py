"""PostgreSQL backend: the same MemoryStore as the JSON files, shared by any number of server instances.

Schema (created and migrated by the server itself: see `memory_mcp.store.postgres.migrations`), all in one
PostgreSQL schema (default `memory_mcp`):

    schema_migrations (version PK, name, applied_at)
        Which numbered migrations were applied; written by `migrate` under an advisory lock.

    scopes (user_id, agent_name, generation, page_count, created_at)      PK (user_id, agent_name)
        One row per user (agent_name '') and per agent of a user with anything stored, the
        equivalent of the JSON store's directories: `list_users`, `list_agents` and `list_scopes`
        read it. `generation` comes from an identity column when the row is created, so a scope
        that was erased and written again has a generation it never had before; that is the
        PageLog generation (0 while nothing is stored). `page_count` is the length of the log.
        Deleting the row erases the scope: pages and document go with it (ON DELETE CASCADE).

    pages (user_id, agent_name, position, seq, page_id, page json, added_at, thread_id, said_at)
        PK (user_id, agent_name, position); UNIQUE (user_id, agent_name, page_id); FK to scopes.
        The verbatim exchanges. `page` is StoredPage.record() stored as `json` (kept verbatim,
        so text holding U+0000 round-trips, which `jsonb` refuses). `position` is the page's index in
        its scope's log; `seq` (bigserial) is the global order of insertion. `thread_id` and
        `said_at` (the page's timestamp) repeat what a start reads of every page, so that a long log
        is known without fetching each page (said_at NULL: that page is fetched whole).

    documents (user_id, agent_name, document jsonb, version, updated_at)  PK (user_id, agent_name)
        The structured memory in DeerFlow's memory.json shape (MemoryDocument.model_dump(mode="json",
        exclude_none=True), exactly what the JSON store writes). A trigger gives `version` a new value
        from the sequence `document_versions` on every insert and update (edits by hand included),
        never reused, so a reader that cached a version knows without fetching it whether the
        document changed.

    index_snapshots (user_id, agent_name, generation, data bytea, saved_at)  PK (user_id, agent_name)
        A saved word index (memory_mcp.recall.saved_index), written only while the scope's generation
        is the one it was made at, read only while it still is, and deleted by an erase of pages.

How the JSON store's guarantees carry over:

- Appends are one statement (auto-committed, hence durable when append_pages returns): it upserts
  the scope row, which locks it, adds len(pages) to page_count, and inserts the pages at the
  positions that follow. Appenders to one scope therefore take turns, and positions become visible
  in order: a reader that has seen position n has seen every position below it. (A bigserial would
  not do as the read cursor: sequence values are drawn before commit, so a transaction can commit
  a lower number after a reader has moved past it.)
- read_pages keeps, per scope, the id, thread and timestamp of the pages read so far and the next
  position to read, and fetches only rows at or after it, together with the scope's generation, in
  one statement (one snapshot): whole and checked when they are few, by their columns when many (a
  start over a long log). A different generation (erased, or erased and written again, by anyone)
  starts a new list. A page is fetched by its position when asked for, only while the generation is
  the one read (an erase moves positions: the page there now is another one).
- update_document is read-modify-write in one transaction: SELECT ... FOR UPDATE on the document
  row (created empty first if missing), change(), UPDATE, COMMIT. Concurrent edits from threads
  and from other instances queue on the row lock, so none is lost.
- exclusive_updates takes a session advisory lock (pg_try_advisory_lock, or pg_advisory_lock
  under lock_timeout when asked to wait) on a hash of (schema, user, agent), on a connection of its
  own held for the duration. If the instance dies, its connection closes and PostgreSQL releases
  the lock.
- erase deletes the scope row(s) (a user's include their agents'); the cascade removes the rest.

Errors surface as StorageError with one-line messages that never contain the DSN's password.
A connection found broken (say, PostgreSQL restarted) is replaced and the operation retried once
where that cannot apply it twice: reads, erase, appends (after checking whether the first try got
in), and document updates that had not yet called `change`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar
from urllib.parse import quote, unquote

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import LogReplaced, MemoryGone, StorageError
from memory_mcp.base.ids import validate_identifier
from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store import PageLog, PageVector, Scope, already_stored, page_from_record, page_record
from memory_mcp.store.page_sequence import StoredPages
from memory_mcp.store.postgres.migrations import advisory_key, check_schema_name, migrate, render
from memory_mcp.store.scope_state import CachedLog, ScopeStates, acquire, done_when_idle, retire_log

log = logging.getLogger(__name__)

# Rows a stream brings per round of the client library (libpq 17 fetches them in chunks; before,
# one at a time: 10,000 waits cost 0.1 s of a first read at 10,000 exchanges).
STREAM_ROWS = 1000 if psycopg.pq.version() >= 170000 else 1
# A read of fewer new rows than this fetches them whole and checks each; a longer one (a start
# over a long log) reads their columns only: those rows were checked when they were appended.
WHOLE_PAGES_BELOW = 1000
LARGE_RESULT_BYTES = 8 << 20  # a saved index larger than this is read on a connection of its own

T = TypeVar("T")
DEFAULT_SCHEMA = "memory_mcp"
APPLICATION_NAME = "memory-mcp"
NO_AGENT = ""  # agent_name of a user's own scope
_LOCK_KEEPALIVE = {"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3"}

_QUERIES = {
    "append": """
        WITH s AS (
            INSERT INTO {schema}.scopes AS sc (user_id, agent_name, page_count) VALUES (%(u)s, %(a)s, %(n)s)
            ON CONFLICT (user_id, agent_name) DO UPDATE SET page_count = sc.page_count + EXCLUDED.page_count
            RETURNING user_id, agent_name, generation, page_count
        ), added AS (
            INSERT INTO {schema}.pages (user_id, agent_name, position, page_id, page, thread_id, said_at)
            SELECT s.user_id, s.agent_name, s.page_count - %(n)s + v.n - 1, v.page_id, v.page::json, v.thread_id,
                v.said_at
            FROM s CROSS JOIN unnest(%(ids)s::text[], %(pages)s::text[], %(threads)s::text[], %(said_at)s::text[])
                WITH ORDINALITY AS v (page_id, page, thread_id, said_at, n)
            RETURNING 1
        )
        SELECT s.generation, s.page_count, (SELECT count(*) FROM added) FROM s
    """,
    "count_page_ids": """
        SELECT count(*) FROM {schema}.pages WHERE user_id = %s AND agent_name = %s AND page_id = ANY(%s::text[])
    """,
    "read_pages": """
        SELECT s.generation, p.position, p.page_id, p.thread_id, p.said_at,
            CASE WHEN s.page_count - %(after)s < %(whole_below)s OR p.said_at IS NULL THEN p.page::text END
        FROM {schema}.scopes s
        LEFT JOIN {schema}.pages p
            ON p.user_id = s.user_id AND p.agent_name = s.agent_name AND p.position >= %(after)s
        WHERE s.user_id = %(u)s AND s.agent_name = %(a)s
        ORDER BY p.position
    """,
    "read_pages_at": """
        SELECT p.position, p.page::text
        FROM {schema}.pages p JOIN {schema}.scopes s USING (user_id, agent_name)
        WHERE s.user_id = %(u)s AND s.agent_name = %(a)s AND s.generation = %(g)s
            AND p.position = ANY(%(positions)s::bigint[])
    """,
    "read_document": """
        SELECT version, CASE WHEN version = %(known)s THEN NULL ELSE document::text END
        FROM {schema}.documents WHERE user_id = %(u)s AND agent_name = %(a)s
    """,
    "ensure_document": """
        WITH s AS (
            INSERT INTO {schema}.scopes (user_id, agent_name) VALUES (%(u)s, %(a)s) ON CONFLICT DO NOTHING
        )
        INSERT INTO {schema}.documents (user_id, agent_name, document, version)
        VALUES (%(u)s, %(a)s, '{}'::jsonb, 0) ON CONFLICT DO NOTHING  -- empty, until the update below
    """,
    "lock_scope": """
        SELECT generation FROM {schema}.scopes WHERE user_id = %(u)s AND agent_name = %(a)s FOR SHARE
    """,
    "ensure_existing_document": """
        INSERT INTO {schema}.documents (user_id, agent_name, document, version)
        VALUES (%(u)s, %(a)s, '{}'::jsonb, 0) ON CONFLICT DO NOTHING  -- its scope row is locked: it exists
    """,
    "lock_document": """
        SELECT version, CASE WHEN version = %(known)s THEN NULL ELSE document::text END
        FROM {schema}.documents WHERE user_id = %(u)s AND agent_name = %(a)s FOR UPDATE
    """,
    "write_document": """
        UPDATE {schema}.documents
        SET document = %(doc)s::jsonb  -- (a trigger sets version and updated_at)
        WHERE user_id = %(u)s AND agent_name = %(a)s
        RETURNING version
    """,
    # The scope row is held FOR SHARE: an erase of pages (FOR UPDATE) cannot slip between the check
    # that a vector's page is stored and the insert.
    "append_vectors": """
        INSERT INTO {schema}.page_vectors (user_id, agent_name, page_id, model, scale, components)
        SELECT s.user_id, s.agent_name, v.page_id, v.model, v.scale, v.components
        FROM (
            SELECT user_id, agent_name FROM {schema}.scopes
            WHERE user_id = %(u)s AND agent_name = %(a)s FOR SHARE  -- no scope row (erased): nothing stored
        ) s
        CROSS JOIN unnest(%(ids)s::text[], %(models)s::text[], %(scales)s::float8[], %(components)s::bytea[])
            AS v (page_id, model, scale, components)
        WHERE NOT %(of_pages)s OR EXISTS (
            SELECT 1 FROM {schema}.pages p
            WHERE p.user_id = s.user_id AND p.agent_name = s.agent_name AND p.page_id = v.page_id
        )
    """,
    "read_vectors": """
        SELECT seq, page_id, model, scale, components FROM {schema}.page_vectors
        WHERE user_id = %(u)s AND agent_name = %(a)s AND seq > %(after)s ORDER BY seq
    """,
    "lock_scope_for_erasing": """
        SELECT page_count FROM {schema}.scopes WHERE user_id = %(u)s AND agent_name = %(a)s FOR UPDATE
    """,
    "positions_of": """
        SELECT position FROM {schema}.pages
        WHERE user_id = %(u)s AND agent_name = %(a)s AND page_id = ANY(%(ids)s::text[]) ORDER BY position
    """,
    "erase_pages": """
        DELETE FROM {schema}.pages WHERE user_id = %(u)s AND agent_name = %(a)s AND page_id = ANY(%(ids)s::text[])
    """,
    # Positions close up in two steps, each free of collisions however PostgreSQL orders the rows:
    # the pages after the first erased one move past the end of the log, then down to their rank.
    "lift_positions": """
        UPDATE {schema}.pages SET position = position + %(count)s
        WHERE user_id = %(u)s AND agent_name = %(a)s AND position > %(first)s
    """,
    "close_positions": """
        UPDATE {schema}.pages p SET position = %(first)s + r.rank
        FROM (
            SELECT position, row_number() OVER (ORDER BY position) - 1 AS rank FROM {schema}.pages
            WHERE user_id = %(u)s AND agent_name = %(a)s AND position >= %(count)s
        ) r
        WHERE p.user_id = %(u)s AND p.agent_name = %(a)s AND p.position = r.position
    """,
    "shorten_log": """
        UPDATE {schema}.scopes SET page_count = page_count - %(n)s, generation = DEFAULT
        WHERE user_id = %(u)s AND agent_name = %(a)s
    """,
    "rewrite_pages": """
        UPDATE {schema}.pages p SET page = v.page::json
        FROM unnest(%(ids)s::text[], %(pages)s::text[]) AS v (page_id, page)
        WHERE p.user_id = %(u)s AND p.agent_name = %(a)s AND p.page_id = v.page_id
    """,
    "new_generation": """
        UPDATE {schema}.scopes SET generation = DEFAULT WHERE user_id = %(u)s AND agent_name = %(a)s
    """,
    "erase_page_vectors": """
        DELETE FROM {schema}.page_vectors
        WHERE user_id = %(u)s AND agent_name = %(a)s AND page_id = ANY(%(ids)s::text[])
    """,
    "erase_model_vectors": """
        DELETE FROM {schema}.page_vectors
        WHERE user_id = %(u)s AND agent_name = %(a)s AND model = %(model)s AND page_id = ANY(%(ids)s::text[])
    """,
    "read_index_snapshot": """
        SELECT i.data FROM {schema}.index_snapshots i JOIN {schema}.scopes s USING (user_id, agent_name)
        WHERE i.user_id = %(u)s AND i.agent_name = %(a)s AND i.generation = s.generation
    """,
    "index_snapshot_size": """
        SELECT octet_length(i.data) FROM {schema}.index_snapshots i JOIN {schema}.scopes s USING (user_id, agent_name)
        WHERE i.user_id = %(u)s AND i.agent_name = %(a)s AND i.generation = s.generation
    """,
    "write_index_snapshot": """
        INSERT INTO {schema}.index_snapshots (user_id, agent_name, generation, data)
        SELECT user_id, agent_name, generation, %(data)s FROM {schema}.scopes
        WHERE user_id = %(u)s AND agent_name = %(a)s AND generation = %(g)s
        ON CONFLICT (user_id, agent_name)
        DO UPDATE SET generation = EXCLUDED.generation, data = EXCLUDED.data, saved_at = now()
    """,
    "erase_index_snapshot": """
        DELETE FROM {schema}.index_snapshots WHERE user_id = %(u)s AND agent_name = %(a)s
    """,
    "page_count": "SELECT page_count FROM {schema}.scopes WHERE user_id = %(u)s AND agent_name = %(a)s",
    # Found in the record's text, never by parsing it as JSON: an exchange may hold U+0000, which
    # PostgreSQL's JSON operators refuse, and one such page made this fail for the whole scope. The
    # key followed by an object is only ever the record's own (in a string its quotes are escaped).
    "host_memory_from": """
        SELECT EXISTS (SELECT 1 FROM {schema}.pages WHERE user_id = %(u)s AND agent_name = %(a)s
                       AND position >= %(start)s AND strpos(page::text, '"host_memory":{') > 0)
    """,
    "erase_user": "DELETE FROM {schema}.scopes WHERE user_id = %s",
    "erase_agent": "DELETE FROM {schema}.scopes WHERE user_id = %s AND agent_name = %s",
    "user_exists": "SELECT EXISTS (SELECT 1 FROM {schema}.scopes WHERE user_id = %s)",
    "agent_exists": "SELECT EXISTS (SELECT 1 FROM {schema}.scopes WHERE user_id = %s AND agent_name = %s)",
    "list_users": "SELECT DISTINCT user_id FROM {schema}.scopes ORDER BY user_id",
    "list_agents": "SELECT agent_name FROM {schema}.scopes WHERE user_id = %s AND agent_name <> '' ORDER BY agent_name",
    "list_scopes": "SELECT user_id, agent_name FROM {schema}.scopes ORDER BY user_id, agent_name",
}


@dataclass
class _DocumentCache:
    version: int
    document: MemoryDocument


class _RowPages(StoredPages):
    """The pages of a log at one generation: their ids, threads and timestamps as read, each page
    fetched by its position when asked for."""

    def __init__(self, load: Callable[[Sequence[int]], list[Page]]) -> None:
        super().__init__()
        self._load_rows = load

    def add(self, page_id: str, thread_id: str | None, timestamp: str) -> None:
        self._note(page_id, thread_id, timestamp)

    def _load(self, positions: Sequence[int]) -> list[Page]:
        return self._load_rows(positions)


@dataclass(kw_only=True)
class _RowLog(CachedLog):
    """The log as read: its pages' columns (`end`: one past the highest position read)."""

    pages: _RowPages


@dataclass
class _ScopeState:
    log_lock: threading.Lock = field(default_factory=threading.Lock)
    document_lock: threading.Lock = field(default_factory=threading.Lock)  # guards `document`
    update_lock: threading.Lock = field(default_factory=threading.Lock)  # one update_document at a time here
    update_guard: threading.Lock = field(default_factory=threading.Lock)  # the updater's turn, in this process
    log: _RowLog | None = None
    document: _DocumentCache | None = None


def _drop_cached(state: _ScopeState) -> bool:
    """Let go of a scope's cached pages and document, unless a thread is using them right now (the
    generation is the database's, so reading them again changes nothing else)."""

    def drop() -> None:
        state.log = state.document = None

    return done_when_idle([state.log_lock, state.document_lock], drop)


@dataclass
class _Attempt:
    number: int
    retry_is_safe: bool = True


class _ScopeVanished(Exception):
    """The scope was erased between two statements of a transaction; start it again."""


class PostgresStore:
    """`MemoryStore` over PostgreSQL; safe across threads, processes and hosts.

    Connects, and migrates the schema, when constructed: a wrong DSN or an unreachable server is
    reported then, as a StorageError. Call `close()` when done (or use it as a context manager).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_connections: int = 1,
        max_connections: int = 10,
        connect_timeout: float = 10.0,
        statement_timeout: float = 30.0,
        pool_timeout: float = 10.0,
        max_lock_connections: int = 64,
        lock_timeout: float = 30.0,
        cached_scopes: int | None = None,
    ) -> None:
        self.schema = check_schema_name(schema)
        self._secrets = _secrets_of(dsn)
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error:
            raise StorageError(
                "the PostgreSQL DSN is not a valid connection string: use "
                "postgresql://user:password@host:port/dbname or 'host=... dbname=... user=...'"
            ) from None
        self.location = describe_dsn(params)
        extra: dict[str, Any] = {}
        if "connect_timeout" not in params:
            extra["connect_timeout"] = max(1, round(connect_timeout))
        if "application_name" not in params:
            extra["application_name"] = APPLICATION_NAME
        self._conninfo = make_conninfo(dsn, **extra)
        self._statement_timeout_ms = max(1, round(statement_timeout * 1000))
        self._lock_timeout_ms = max(1, round(lock_timeout * 1000))
        self._pool_timeout = pool_timeout
        self._states = ScopeStates(lambda _scope: _ScopeState(), cached_scopes, _drop_cached)

        with self._connect(f"connect to PostgreSQL at {self.location}") as conn:
            try:
                applied = migrate(conn, self.schema)
            except psycopg.Error as exc:
                raise self._error(f"prepare the schema {self.schema!r} at {self.location}", exc) from None
            self._sql = {name: render(text, self.schema).as_string(conn) for name, text in _QUERIES.items()}
        if applied:
            log.info("PostgreSQL schema %s at %s: applied migrations %s", self.schema, self.location, applied)

        self._pool = ConnectionPool(
            self._conninfo,
            min_size=min_connections,
            max_size=max(min_connections, max_connections),
            kwargs={"autocommit": True},
            configure=self._configure,
            timeout=pool_timeout,
            name=f"memory-mcp {self.schema}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=max(connect_timeout, 1.0) * 2)
        except PoolTimeout:
            self._pool.close()
            raise StorageError(f"could not open connections to PostgreSQL at {self.location}") from None
        # Connections that hold exclusive_updates' advisory locks, one per holder.
        self._lock_pool = ConnectionPool(
            self._conninfo,
            min_size=0,
            max_size=max_lock_connections,
            kwargs={"autocommit": True},
            configure=self._configure_lock_connection,
            reset=self._reset_lock_connection,
            timeout=pool_timeout,
            name=f"memory-mcp {self.schema} locks",
            open=False,
        )
        self._lock_pool.open(wait=False)

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, schema={self.schema!r})"

    def close(self) -> None:
        """Close every connection; locks still held by exclusive_updates are released with theirs."""
        self._pool.close()
        self._lock_pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def check_ready(self) -> None:
        self._run("answer a health check", lambda conn, _: conn.execute("SELECT 1").fetchone())

    # --- listing --------------------------------------------------------------------------

    def list_users(self) -> list[str]:
        rows = self._run("list the users", lambda conn, _: conn.execute(self._sql["list_users"]).fetchall())
        return [row[0] for row in rows]

    def list_agents(self, user_id: str) -> list[str]:
        validate_identifier("user_id", user_id)
        rows = self._run(
            f"list the agents of {user_id}",
            lambda conn, _: conn.execute(self._sql["list_agents"], [user_id]).fetchall(),
        )
        return [row[0] for row in rows]

    def list_scopes(self) -> list[Scope]:
        rows = self._run("list the stored scopes", lambda conn, _: conn.execute(self._sql["list_scopes"]).fetchall())
        scopes: list[Scope] = []
        for user_id, agent_name in rows:
            if not scopes or scopes[-1].user_id != user_id:
                scopes.append(Scope(user_id))  # a user with only agents still has a scope, as on disk
            if agent_name != NO_AGENT:
                scopes.append(Scope(user_id, agent_name))
        return scopes

    # --- pages ----------------------------------------------------------------------------

    def append_page(self, scope: Scope, page: Page) -> None:
        self.append_pages(scope, [page])

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        user_id, agent = _key(scope)
        if not pages:
            return
        page_ids = [page.page_id for page in pages]
        params = _append_parameters(scope, pages)

        def work(conn: psycopg.Connection, attempt: _Attempt) -> tuple[int, int] | None:
            if attempt.number > 1:
                # The first try lost its connection: it may have committed before that.
                found = conn.execute(self._sql["count_page_ids"], [user_id, agent, page_ids]).fetchone()[0]
                if found == len(set(page_ids)):
                    return None
                if found:
                    raise StorageError(
                        f"could not store pages for {scope.describe()}: {found} of {len(pages)} are already "
                        "stored after a lost connection; read the pages back before adding them again"
                    )
            generation, page_count, added = conn.execute(self._sql["append"], params).fetchone()
            if added != len(pages):  # cannot happen: the statement inserts every row or fails
                raise StorageError(f"could not store pages for {scope.describe()}: {added} of {len(pages)} went in")
            return generation, page_count

        try:
            result = self._run(f"store pages for {scope.describe()}", work)
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, pg_errors.UniqueViolation) and cause.diag.constraint_name == "pages_page_id_key":
                raise already_stored(scope, page_ids) from None
            raise
        if result is None:
            return
        generation, page_count = result
        state = self._states.get(scope)
        with state.log_lock:
            cache = state.log
            if (
                cache is not None
                and cache.generation == generation
                and cache.extend_if_at(page_count - len(pages), page_count)
            ):
                for page in pages:
                    cache.pages.add(page.page_id, page.thread_id, page.timestamp)

    def read_pages(self, scope: Scope) -> PageLog:
        _key(scope)
        state = self._states.get(scope)
        with state.log_lock:
            cache = state.log
            after = cache.end if cache is not None else 0
            read = f"read the pages of {scope.describe()}"
            generation, new_fields, last = self._run(read, lambda conn, _: self._read_log(conn, scope, after))
            if generation is None:  # nothing stored
                if cache is None or cache.generation != 0:
                    cache = state.log = self._new_log(scope, 0)
                return PageLog(cache.generation, cache.pages)
            if cache is None or cache.generation != generation:
                if after > 0:  # read against a log that has been replaced since: start again
                    generation, new_fields, last = self._run(read, lambda conn, _: self._read_log(conn, scope, 0))
                    if generation is None:
                        cache = state.log = self._new_log(scope, 0)
                        return PageLog(cache.generation, cache.pages)
                cache = state.log = self._new_log(scope, generation)
            for fields in new_fields:
                cache.pages.add(*fields)
            cache.end = last + 1
            return PageLog(cache.generation, cache.pages)

    def _new_log(self, scope: Scope, generation: int) -> _RowLog:
        return _RowLog(
            generation=generation, pages=_RowPages(lambda positions: self._pages_at(scope, generation, positions))
        )

    def _read_log(
        self, conn: psycopg.Connection, scope: Scope, after: int
    ) -> tuple[int | None, list[tuple[str, str | None, str]], int]:
        """The log's generation (None: no such scope), the id, thread and timestamp of its pages
        from position `after` on, and the last one's position. A few rows (fewer than
        WHOLE_PAGES_BELOW, as after a start of a small log or since the last read) come whole and
        are checked as they arrive; a long log is read by its columns (100,000 rows: ~0.2 s,
        against ~1.2 s whole)."""
        user_id, agent = _key(scope)
        generation, fields, last = None, [], after - 1
        # Closed however the loop ends: a stream left open holds the connection's lock, and the
        # pool, taking the connection back, would wait for it for ever.
        params = {"u": user_id, "a": agent, "after": after, "whole_below": WHOLE_PAGES_BELOW}
        with contextlib.closing(conn.cursor().stream(self._sql["read_pages"], params, size=STREAM_ROWS)) as rows:
            for _generation, position, page_id, thread_id, said_at, text in rows:
                if position is None:
                    continue
                if text is None:
                    fields.append((page_id, thread_id, said_at))
                else:
                    page = self._page_of_row(scope, position, text)
                    fields.append((page.page_id, page.thread_id, page.timestamp))
                last = position
        return generation, fields, last

    def _page_of_row(self, scope: Scope, position: int, text: str) -> Page:
        try:
            return page_from_record(text)
        except ValidationError as exc:
            reason = str(exc).splitlines()[0]
            raise StorageError(
                f"{self.schema}.pages of {scope.describe()} at position {position} is not a valid page "
                f"record ({reason}); it was left untouched (fix or delete that row)"
            ) from None

    def _pages_at(self, scope: Scope, generation: int, positions: Sequence[int]) -> list[Page]:
        """The pages at these positions of the log at `generation`, in one query; LogReplaced
        when the log is no longer that one (pages erased: positions now name other pages)."""
        user_id, agent = _key(scope)
        params = {"u": user_id, "a": agent, "g": generation, "positions": list(positions)}
        rows = self._run(
            f"read the pages of {scope.describe()}",
            lambda conn, _: conn.execute(self._sql["read_pages_at"], params).fetchall(),
        )
        texts = dict(rows)
        if len(texts) != len(set(positions)):
            raise LogReplaced(f"exchanges of {scope.describe()} were erased while they were read; ask again")
        return [self._page_of_row(scope, position, texts[position]) for position in positions]

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        user_id, agent = _key(scope)
        if not vectors:
            return
        params = {
            "u": user_id,
            "a": agent,
            "of_pages": of_pages,
            "ids": [vector.page_id for vector in vectors],
            "models": [vector.model for vector in vectors],
            "scales": [vector.scale for vector in vectors],
            "components": [vector.components for vector in vectors],
        }
        # Appending twice after a lost connection only stores the same vectors again: harmless.
        self._run(
            f"store page vectors for {scope.describe()}",
            lambda conn, _: conn.execute(self._sql["append_vectors"], params),
        )

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        user_id, agent = _key(scope)
        params = {"u": user_id, "a": agent, "model": model, "ids": list(ids)}
        self._run(
            f"erase vectors of {scope.describe()}",
            lambda conn, _: conn.execute(self._sql["erase_model_vectors"], params),
        )

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        user_id, agent = _key(scope)
        rows = self._run(
            f"read the page vectors of {scope.describe()}",
            lambda conn, _: conn.execute(
                self._sql["read_vectors"], {"u": user_id, "a": agent, "after": after}
            ).fetchall(),
        )
        vectors = [
            PageVector(page_id, model, scale, bytes(components)) for _, page_id, model, scale, components in rows
        ]
        return vectors, rows[-1][0] if rows else after

    def rewrite_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        """One transaction: the scope row locked (appends wait), the pages' records replaced, their
        vectors and the saved index deleted, and a new generation."""
        user_id, agent = _key(scope)
        state = self._states.get(scope)
        names: dict[str, Any] = {"u": user_id, "a": agent, "ids": [page.page_id for page in pages]}

        def work(conn: psycopg.Connection, _attempt: _Attempt) -> None:
            with conn.transaction():
                if conn.execute(self._sql["lock_scope_for_erasing"], names).fetchone() is None:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                conn.execute(self._sql["rewrite_pages"], {**names, "pages": [page_record(page) for page in pages]})
                conn.execute(self._sql["erase_page_vectors"], names)
                conn.execute(self._sql["erase_index_snapshot"], names)
                conn.execute(self._sql["new_generation"], names)

        self._run(f"rewrite exchanges of {scope.describe()}", work)
        with state.log_lock:
            _let_go_of_log(state)

    def erase_pages(
        self, scope: Scope, page_ids: Sequence[str], change: Callable[[MemoryDocument, list[int]], MemoryDocument]
    ) -> None:
        """One transaction: the scope row locked (appends wait), the document changed, the pages and
        their vectors deleted, the positions after them closed up, and a new generation."""
        user_id, agent = _key(scope)
        state = self._states.get(scope)
        names: dict[str, Any] = {"u": user_id, "a": agent, "ids": list(page_ids)}

        def work(conn: psycopg.Connection, attempt: _Attempt) -> tuple[int, MemoryDocument]:
            with conn.transaction():
                row = conn.execute(self._sql["lock_scope_for_erasing"], names).fetchone()
                if row is None:
                    raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                count = row[0]
                positions = [found[0] for found in conn.execute(self._sql["positions_of"], names).fetchall()]
                conn.execute(self._sql["ensure_existing_document"], names)
                document_row = conn.execute(self._sql["lock_document"], {**names, "known": -1}).fetchone()
                with state.document_lock:
                    current = self._document_from_row(state, scope, document_row)
                attempt.retry_is_safe = False  # change() is called once
                stored = change(current, positions).model_copy(update={"lastUpdated": utc_now()})
                data = stored.model_dump_json(exclude_none=True)
                version = conn.execute(self._sql["write_document"], {**names, "doc": data}).fetchone()[0]
                if positions:
                    moved = {**names, "count": count, "first": positions[0]}
                    conn.execute(self._sql["erase_pages"], names)
                    conn.execute(self._sql["lift_positions"], moved)
                    conn.execute(self._sql["close_positions"], moved)
                    conn.execute(self._sql["shorten_log"], {**names, "n": len(positions)})
                conn.execute(self._sql["erase_page_vectors"], names)
                conn.execute(self._sql["erase_index_snapshot"], names)
            return version, stored

        with state.update_lock:
            version, stored = self._run(f"erase exchanges of {scope.describe()}", work)
        with state.document_lock:
            state.document = _DocumentCache(version, stored)
        with state.log_lock:
            _let_go_of_log(state)

    def page_count(self, scope: Scope) -> int:
        row = self._scope_row(f"count the pages of {scope.describe()}", "page_count", scope)
        return 0 if row is None else int(row[0])

    def host_memory_from(self, scope: Scope, start: int) -> bool:
        action = f"look for host memory in the pages of {scope.describe()}"
        row = self._scope_row(action, "host_memory_from", scope, start=start)
        return row is not None and bool(row[0])

    def has_index_snapshot(self, scope: Scope) -> bool:
        return (
            self._scope_row(f"look for the word index of {scope.describe()}", "index_snapshot_size", scope) is not None
        )

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        """A large snapshot is read on a connection of its own, closed after it: libpq keeps a
        connection's input buffer as large as the largest result it took in (72 MB at 100k
        exchanges), which a pooled connection would hold for as long as it lives."""
        action = f"read the word index of {scope.describe()}"
        size = self._scope_row(action, "index_snapshot_size", scope)
        if size is None:
            return None
        if size[0] <= LARGE_RESULT_BYTES:
            return self._run(action, lambda conn, _: self._snapshot_on(conn, scope))
        with self._connect(action) as conn:
            try:
                self._configure(conn)
                return self._snapshot_on(conn, scope)
            except psycopg.Error as exc:
                raise self._error(action, exc) from None

    def _snapshot_on(self, conn: psycopg.Connection, scope: Scope) -> bytes | None:
        # In binary: as text, the bytes travel hex-encoded (72 MB at 100k exchanges: 0.8 s instead of 0.3).
        user_id, agent = _key(scope)
        row = conn.execute(self._sql["read_index_snapshot"], {"u": user_id, "a": agent}, binary=True).fetchone()
        return None if row is None else bytes(row[0])

    def _scope_row(self, action: str, query: str, scope: Scope, **params: Any) -> tuple[Any, ...] | None:
        """The row (if any) of one of the queries that name a scope by %(u)s and %(a)s."""
        user_id, agent = _key(scope)
        named = {"u": user_id, "a": agent, **params}
        return self._run(action, lambda conn, _: conn.execute(self._sql[query], named).fetchone())

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Saved only while the scope's generation is still `generation` (one statement)."""
        user_id, agent = _key(scope)
        params = {"u": user_id, "a": agent, "g": generation, "data": data}
        written = self._run(
            f"save the word index of {scope.describe()}",
            lambda conn, _: conn.execute(self._sql["write_index_snapshot"], params).rowcount,
        )
        return written == 1

    def replace(self, scope: Scope, parts: Sequence[tuple[Scope, MemoryDocument, Sequence[Page]]]) -> None:
        """One transaction: the scope (with its agents) deleted, then every part's pages and
        document inserted."""
        user_id, agent = _key(scope)
        erasing = (
            (self._sql["erase_user"], [user_id])
            if scope.agent_name is None
            else (self._sql["erase_agent"], [user_id, agent])
        )

        def work(conn: psycopg.Connection, _attempt: _Attempt) -> None:
            with conn.transaction():
                conn.execute(*erasing)
                for part_scope, memory, pages in parts:
                    part_user, part_agent = _key(part_scope)
                    names = {"u": part_user, "a": part_agent}
                    if pages:
                        conn.execute(self._sql["append"], _append_parameters(part_scope, pages))
                    conn.execute(self._sql["ensure_document"], names)
                    stored = memory.model_copy(update={"lastUpdated": utc_now()})
                    conn.execute(
                        self._sql["write_document"], {**names, "doc": stored.model_dump_json(exclude_none=True)}
                    )

        self._run(f"replace the memory of {scope.describe()}", work)
        for known in self._states.erased(scope):
            with known.log_lock, known.document_lock:
                _let_go_of_log(known)
                known.document = None

    def erase(self, scope: Scope) -> None:
        user_id, agent = _key(scope)
        if scope.agent_name is None:
            query, params = self._sql["erase_user"], [user_id]
        else:
            query, params = self._sql["erase_agent"], [user_id, agent]
        self._run(f"erase the memory of {scope.describe()}", lambda conn, _: conn.execute(query, params))
        for known in self._states.erased(scope):
            with known.log_lock, known.document_lock:
                _let_go_of_log(known)
                known.document = None

    # --- structured memory ----------------------------------------------------------------

    def read_document(self, scope: Scope) -> MemoryDocument:
        state = self._states.get(scope)

        def fetch(known: int) -> tuple[Any, ...] | None:
            # No in-process lock is held while waiting for a connection: update_document holds a
            # connection while it takes document_lock, and the two orders would deadlock.
            return self._scope_row(f"read the memory of {scope.describe()}", "read_document", scope, known=known)

        with state.document_lock:
            known = state.document.version if state.document is not None else -1
        row = fetch(known)
        with state.document_lock:
            if row is not None and row[1] is None and (state.document is None or state.document.version != row[0]):
                row = None  # the cache moved on while we read: fetch the document whole
            else:
                return self._document_from_row(state, scope, row)
        row = fetch(-1)
        with state.document_lock:
            return self._document_from_row(state, scope, row)

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
        user_id, agent = _key(scope)
        state = self._states.get(scope)
        names = {"u": user_id, "a": agent}

        def work(conn: psycopg.Connection, attempt: _Attempt) -> tuple[int, MemoryDocument]:
            for _ in range(5):
                try:
                    with conn.transaction():
                        if create and log_generation is None:
                            conn.execute(self._sql["ensure_document"], names)
                        else:
                            # Held until commit: an erase waits for this write, then deletes it too.
                            scope_row = conn.execute(self._sql["lock_scope"], names).fetchone()
                            if scope_row is None:
                                raise MemoryGone(f"the memory of {scope.describe()} was erased; nothing was written")
                            if log_generation is not None and scope_row[0] != log_generation:
                                raise MemoryGone(
                                    f"the memory of {scope.describe()} was erased and begun anew; nothing was written"
                                )
                            conn.execute(self._sql["ensure_existing_document"], names)
                        with state.document_lock:
                            known = state.document.version if state.document is not None else -1
                        row = conn.execute(self._sql["lock_document"], {**names, "known": known}).fetchone()
                        if row is None:
                            raise _ScopeVanished
                        with state.document_lock:
                            if row[1] is None and (state.document is None or state.document.version != row[0]):
                                # The cache moved on since `known` was read: fetch the (locked) row whole.
                                row = conn.execute(self._sql["lock_document"], {**names, "known": -1}).fetchone()
                            current = self._document_from_row(state, scope, row)
                        attempt.retry_is_safe = False  # change() may have effects of its own: call it once
                        stored = change(current).model_copy(update={"lastUpdated": utc_now()})
                        data = stored.model_dump_json(exclude_none=True)
                        version = conn.execute(self._sql["write_document"], {**names, "doc": data}).fetchone()[0]
                    return version, stored
                except (_ScopeVanished, pg_errors.ForeignKeyViolation):
                    if not attempt.retry_is_safe:
                        raise
                    continue  # erased between our statements: create it again
            raise StorageError(f"could not save the memory of {scope.describe()}: it kept being erased meanwhile")

        with state.update_lock:
            try:
                version, stored = self._run(f"save the memory of {scope.describe()}", work)
            except StorageError as exc:
                if isinstance(exc.__cause__, pg_errors.UntranslatableCharacter):
                    raise StorageError(
                        f"could not save the memory of {scope.describe()}: PostgreSQL cannot store the character "
                        "U+0000 (NUL) in a JSONB document; nothing was written"
                    ) from None
                raise
        with state.document_lock:
            state.document = _DocumentCache(version, stored)
        return stored

    def _document_from_row(self, state: _ScopeState, scope: Scope, row: tuple[Any, ...] | None) -> MemoryDocument:
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
                f"{self.schema}.documents of {scope.describe()} is not a valid memory document ({reason}); it was "
                "left untouched: fix it or restore a backup, and this user's memory will load again"
            ) from None
        state.document = _DocumentCache(version, document)
        return document

    # --- the updater's turn ---------------------------------------------------------------

    @contextmanager
    def exclusive_updates(self, scope: Scope, wait: float = 0.0) -> Iterator[bool]:
        user_id, agent = _key(scope)
        guard = self._states.get(scope).update_guard
        deadline = time.monotonic() + wait
        acquired = acquire(guard, wait)
        if not acquired:
            yield False
            return
        try:
            action = f"lock the memory of {scope.describe()}"
            if scope.agent_name is None:
                query, params = self._sql["user_exists"], [user_id]
            else:
                query, params = self._sql["agent_exists"], [user_id, agent]
            if not self._run(action, lambda conn, _: conn.execute(query, params).fetchone()[0]):
                yield False  # nothing stored: nothing to update
                return
            key = advisory_key("update", self.schema, user_id, agent)
            conn = self._lock_connection(action)
            try:
                held = self._advisory_lock(conn, key, deadline, action)
            except BaseException:
                self._lock_pool.putconn(conn)
                raise
            if not held:
                self._lock_pool.putconn(conn)
                yield False
                return
            try:
                yield True
            finally:
                self._advisory_unlock(conn, key, scope)
        finally:
            guard.release()

    def _lock_connection(self, action: str) -> psycopg.Connection:
        """A connection for one holder alone, from the pool kept for locks: nothing else runs on it
        while the lock is held. That pool opens connections on demand (min_size 0), so an instance
        that never runs the updater holds none."""
        try:
            return self._lock_pool.getconn()
        except PoolTimeout:
            raise StorageError(
                f"could not {action}: no connection to PostgreSQL at {self.location} became available "
                f"within {self._pool_timeout:g} s"
            ) from None

    @staticmethod
    def _configure_lock_connection(conn: psycopg.Connection) -> None:
        """No statement timeout (a claim may wait, a lock may be held for minutes), and TCP
        keepalives so that the server notices a vanished host within about a minute and releases
        its locks."""
        settings = {"statement_timeout": "0", **_LOCK_KEEPALIVE}
        if conn.info.server_version >= 140000:
            settings["idle_session_timeout"] = "0"
        for name, value in settings.items():
            conn.execute("SELECT set_config(%s, %s, false)", [name, value])

    @staticmethod
    def _reset_lock_connection(conn: psycopg.Connection) -> None:
        """Back in the pool holding nothing, whatever happened while it was out."""
        conn.execute("SELECT pg_advisory_unlock_all(), set_config('lock_timeout', '0', false)")

    def _advisory_lock(self, conn: psycopg.Connection, key: int, deadline: float, action: str) -> bool:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        try:
            if remaining_ms <= 0:
                return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0])
            conn.execute("SELECT set_config('lock_timeout', %s, false)", [str(remaining_ms)])
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", [key])
            except pg_errors.LockNotAvailable:
                return False
            return True
        except psycopg.Error as exc:
            raise self._error(action, exc) from None

    def _advisory_unlock(self, conn: psycopg.Connection, key: int, scope: Scope) -> None:
        try:
            if conn.broken or conn.closed:
                raise psycopg.OperationalError("the connection is closed")
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
        except psycopg.Error as exc:
            log.warning(
                "the update lock of %s was lost while held (%s); PostgreSQL had released it already",
                scope.describe(),
                self._redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__),
            )
        finally:
            self._lock_pool.putconn(conn)  # (a broken one is thrown away, not reused)

    # --- plumbing -------------------------------------------------------------------------

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', '60000', false)",
            [str(self._statement_timeout_ms), str(self._lock_timeout_ms)],
        )

    def _open_connection(self, action: str) -> psycopg.Connection:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise self._error(action, exc) from None

    @contextmanager
    def _connect(self, action: str) -> Iterator[psycopg.Connection]:
        with self._open_connection(action) as conn:
            yield conn

    def _run(self, action: str, work: Callable[[psycopg.Connection, _Attempt], T]) -> T:
        """work(conn) on a pooled connection, with database failures turned into StorageError.

        A connection that turns out broken is dropped and `work` runs once more on another, if it
        says that is safe (its attempt's `retry_is_safe` still set)."""
        attempt = _Attempt(1)
        while True:
            used: list[psycopg.Connection] = []
            try:
                with self._pool.connection() as conn:
                    used.append(conn)
                    return work(conn, attempt)
            except PoolTimeout:
                raise StorageError(
                    f"could not {action}: no connection to PostgreSQL at {self.location} became available "
                    f"within {self._pool_timeout:g} s"
                ) from None
            except psycopg.Error as exc:
                lost = bool(used) and used[0].broken
                if lost and attempt.number == 1 and attempt.retry_is_safe:
                    log.info("connection to PostgreSQL lost (%s); retrying on a new one", type(exc).__name__)
                    # Its siblings in the pool are likely gone too (a server restart): test them all.
                    self._pool.check()
                    attempt = _Attempt(2)
                    continue
                error = self._error(action, exc)
                raise error from exc

    def _error(self, action: str, exc: BaseException) -> StorageError:
        if isinstance(exc, pg_errors.LockNotAvailable):
            reason = (
                f"another connection has held this memory's lock for over {self._lock_timeout_ms / 1000:g} s "
                "(storage.lock_timeout_seconds); nothing was changed: try again"
            )
        elif isinstance(exc, pg_errors.QueryCanceled):
            reason = f"PostgreSQL gave up after {self._statement_timeout_ms / 1000:g} s (statement_timeout)"
        else:
            lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
            reason = lines[0] if lines else type(exc).__name__
            if isinstance(exc, psycopg.OperationalError) and self.location not in reason:
                reason += f" (PostgreSQL at {self.location})"
        error = StorageError(self._redact(f"could not {action}: {reason}"))
        error.__cause__ = exc
        return error

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", text, flags=re.IGNORECASE)
        return re.sub(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)


def describe_dsn(params: dict[str, Any]) -> str:
    """Where a DSN points, as postgresql://user@host:port/dbname: never the password."""
    user = params.get("user")
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port")
    where = f"{host}:{port}" if port else host
    return f"postgresql://{quote(user) + '@' if user else ''}{where}/{params.get('dbname') or ''}"


def _secrets_of(dsn: str) -> list[str]:
    """The password as it may appear in messages (as given, decoded and encoded), and the DSN itself."""
    found = {dsn}
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        password = None
        match = re.search(r"://[^:/@\s]*:([^@\s]*)@", dsn) or re.search(r"password\s*=\s*(\S+)", dsn)
        if match:
            password = match.group(1)
    if password:
        found |= {password, unquote(password), quote(password, safe="")}
    # Longest first, so a DSN is replaced whole before the password inside it.
    return sorted((s for s in found if len(s) >= 4 or s == dsn), key=len, reverse=True)


def _let_go_of_log(state: _ScopeState) -> None:
    """Forget the log as read (held: state.log_lock): exchanges were erased from it."""
    retire_log(state.log)
    state.log = None


def _as_text(value: str | None) -> str | None:
    """`value` as a text column holds it (None when it holds U+0000, which text cannot: said_at is
    then NULL too, and readers fetch that page whole)."""
    return value if value is None or "\x00" not in value else None


def _key(scope: Scope) -> tuple[str, str]:
    """The (user_id, agent_name) columns of a scope, checked as the JSON store checks directory names."""
    user_id = validate_identifier("user_id", scope.user_id)
    if scope.agent_name is None:
        return user_id, NO_AGENT
    return user_id, validate_identifier("agent_name", scope.agent_name)


def _append_parameters(scope: Scope, pages: Sequence[Page]) -> dict[str, Any]:
    """The `append` statement's parameters for these pages of `scope`."""
    user_id, agent = _key(scope)
    return {
        "u": user_id,
        "a": agent,
        "n": len(pages),
        "ids": [page.page_id for page in pages],
        "pages": [page_record(page) for page in pages],
        "threads": [_as_text(page.thread_id) for page in pages],
        "said_at": [_as_text(page.timestamp) if _as_text(page.thread_id) == page.thread_id else None for page in pages],
    }
