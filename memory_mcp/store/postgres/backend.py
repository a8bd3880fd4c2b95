"""PostgreSQL backend: the same MemoryStore as the JSON files, shared by any number of server instances.

The schema and the statements are in `queries` (migrated by `migrations`); the parts that use
them (`pages`, `documents`, `derived`, `erasure`) see PostgreSQL only through `connection.Database`,
which this module provides over psycopg, the one module besides `migrations` that uses the driver.

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

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, Self, TypeVar
from urllib.parse import quote, unquote

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from memory_mcp.base.errors import StorageError
from memory_mcp.store.postgres.composed import ComposedPostgresStore
from memory_mcp.store.postgres.connection import Attempt, Connection
from memory_mcp.store.postgres.migrations import check_schema_name, migrate, render
from memory_mcp.store.postgres.queries import QUERIES

log = logging.getLogger(__name__)

# Rows a stream brings per round of the client library (libpq 17 fetches them in chunks; before,
# one at a time: 10,000 waits cost 0.1 s of a first read at 10,000 exchanges).
STREAM_ROWS = 1000 if psycopg.pq.version() >= 170000 else 1

T = TypeVar("T")
DEFAULT_SCHEMA = "memory_mcp"
APPLICATION_NAME = "memory-mcp"
_LOCK_KEEPALIVE = {"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3"}


class PostgresStore(ComposedPostgresStore):
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
        secrets = _secrets_of(dsn)
        conninfo, self.location = _connection_info(dsn, connect_timeout)
        statement_timeout_ms = max(1, round(statement_timeout * 1000))
        lock_timeout_ms = max(1, round(lock_timeout * 1000))
        self._pool = ConnectionPool(
            conninfo,
            min_size=min_connections,
            max_size=max(min_connections, max_connections),
            kwargs={"autocommit": True},
            configure=partial(_configure, statement_timeout_ms, lock_timeout_ms),
            timeout=pool_timeout,
            name=f"memory-mcp {self.schema}",
            open=False,
        )
        # Connections that hold exclusive_updates' advisory locks, one per holder.
        self._lock_pool = ConnectionPool(
            conninfo,
            min_size=0,
            max_size=max_lock_connections,
            kwargs={"autocommit": True},
            configure=_configure_lock_connection,
            reset=_reset_lock_connection,
            timeout=pool_timeout,
            name=f"memory-mcp {self.schema} locks",
            open=False,
        )
        database = _Database(
            conninfo,
            self._pool,
            self._lock_pool,
            location=self.location,
            schema=self.schema,
            secrets=secrets,
            statement_timeout_ms=statement_timeout_ms,
            lock_timeout_ms=lock_timeout_ms,
            pool_timeout=pool_timeout,
        )
        self._open_pools(connect_timeout)
        super().__init__(database, cached_scopes)

    def _open_pools(self, connect_timeout: float) -> None:
        """Open the pool with its first connections (within twice `connect_timeout`), and the
        pool for locks, which opens connections as they are asked for."""
        try:
            self._pool.open(wait=True, timeout=max(connect_timeout, 1.0) * 2)
        except PoolTimeout:
            self._pool.close()
            raise StorageError(f"could not open connections to PostgreSQL at {self.location}") from None
        self._lock_pool.open(wait=False)

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, schema={self.schema!r})"

    def close(self) -> None:
        """Save the directory of every log in memory that grew since it was saved (the next start
        then reads none of its rows), and close every connection; locks still held by
        exclusive_updates are released with theirs."""
        if not self._pool.closed:
            self._pages.save_directories()
        self._pool.close()
        self._lock_pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Database:
    """`connection.Database` over psycopg: work run on pooled connections (a broken one replaced
    and the work retried where that is safe), advisory locks held on connections of their own, and
    the driver's errors turned into StorageError that never hold the DSN's password.

    Connects, and migrates the schema, when constructed."""

    def __init__(
        self,
        conninfo: str,
        pool: ConnectionPool,
        lock_pool: ConnectionPool,
        *,
        location: str,
        schema: str,
        secrets: list[str],
        statement_timeout_ms: int,
        lock_timeout_ms: int,
        pool_timeout: float,
    ) -> None:
        self._conninfo = conninfo
        self._pool = pool
        self._lock_pool = lock_pool
        self.location = location
        self.schema = schema
        self.stream_rows = STREAM_ROWS
        self._secrets = secrets
        self._statement_timeout_ms = statement_timeout_ms
        self._lock_timeout_ms = lock_timeout_ms
        self._pool_timeout = pool_timeout
        with self._open_connection(f"connect to PostgreSQL at {location}") as conn:
            try:
                applied = migrate(conn, schema)
            except psycopg.Error as exc:
                raise self._error(f"prepare the schema {schema!r} at {location}", exc) from None
            self.sql = {name: render(text, schema).as_string(conn) for name, text in QUERIES.items()}
        if applied:
            log.info("PostgreSQL schema %s at %s: applied migrations %s", schema, location, applied)

    def run(self, action: str, work: Callable[[Connection, Attempt], T]) -> T:
        """work(conn) on a pooled connection, with database failures turned into StorageError.

        A connection that turns out broken is dropped and `work` runs once more on another, if it
        says that is safe (its attempt's `retry_is_safe` still set)."""
        attempt = Attempt(1)
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
                    attempt = Attempt(2)
                    continue
                error = self._error(action, exc)
                raise error from exc

    @contextmanager
    def advisory_lock(self, key: int, deadline: float, action: str, holder: str) -> Iterator[bool]:
        conn = self._lock_connection(action)
        try:
            held = self._try_advisory_lock(conn, key, deadline, action)
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
            self._advisory_unlock(conn, key, holder)

    def _open_connection(self, action: str) -> psycopg.Connection:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise self._error(action, exc) from None

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

    def _try_advisory_lock(self, conn: psycopg.Connection, key: int, deadline: float, action: str) -> bool:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        try:
            if remaining_ms <= 0:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
                return row is not None and bool(row[0])
            conn.execute("SELECT set_config('lock_timeout', %s, false)", [str(remaining_ms)])
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", [key])
            except pg_errors.LockNotAvailable:
                return False
            return True
        except psycopg.Error as exc:
            raise self._error(action, exc) from None

    def _advisory_unlock(self, conn: psycopg.Connection, key: int, holder: str) -> None:
        try:
            if conn.broken or conn.closed:
                raise psycopg.OperationalError("the connection is closed")
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
        except psycopg.Error as exc:
            log.warning(
                "the update lock of %s was lost while held (%s); PostgreSQL had released it already",
                holder,
                self._redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__),
            )
        finally:
            self._lock_pool.putconn(conn)  # (a broken one is thrown away, not reused)

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


def _configure(statement_timeout_ms: int, lock_timeout_ms: int, conn: psycopg.Connection) -> None:
    """A pooled connection's timeouts."""
    conn.execute(
        "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false),"
        " set_config('idle_in_transaction_session_timeout', '60000', false)",
        [str(statement_timeout_ms), str(lock_timeout_ms)],
    )


def _configure_lock_connection(conn: psycopg.Connection) -> None:
    """No statement timeout (a claim may wait, a lock may be held for minutes), and TCP
    keepalives so that the server notices a vanished host within about a minute and releases
    its locks."""
    settings = {"statement_timeout": "0", **_LOCK_KEEPALIVE}
    if conn.info.server_version >= 140000:
        settings["idle_session_timeout"] = "0"
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, false)", [name, value])


def _reset_lock_connection(conn: psycopg.Connection) -> None:
    """Back in the pool holding nothing, whatever happened while it was out."""
    conn.execute("SELECT pg_advisory_unlock_all(), set_config('lock_timeout', '0', false)")


def _connection_info(dsn: str, connect_timeout: float) -> tuple[str, str]:
    """The connection string to connect with (the DSN, with a connect timeout and this application's
    name unless it gives its own), and where it points as it may be shown (`describe_dsn`)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        raise StorageError(
            "the PostgreSQL DSN is not a valid connection string: use "
            "postgresql://user:password@host:port/dbname or 'host=... dbname=... user=...'"
        ) from None
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = max(1, round(connect_timeout))
    if "application_name" not in params:
        extra["application_name"] = APPLICATION_NAME
    return make_conninfo(dsn, **extra), describe_dsn(params)


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
    password: str | None
    try:
        given = conninfo_to_dict(dsn).get("password")
        password = None if given is None else str(given)
    except psycopg.Error:
        password = None
        match = re.search(r"://[^:/@\s]*:([^@\s]*)@", dsn) or re.search(r"password\s*=\s*(\S+)", dsn)
        if match:
            password = match.group(1)
    if password:
        found |= {password, unquote(password), quote(password, safe="")}
    # Longest first, so a DSN is replaced whole before the password inside it.
    return sorted((s for s in found if len(s) >= 4 or s == dsn), key=len, reverse=True)
