"""What the PostgreSQL store's parts need of the database, typed by what they call: statements run
on a pooled connection, rows read back, a lock held. The driver (psycopg) is named in `backend`
alone, which provides all of it (`Database`); the parts see only these types.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from memory_mcp.base.errors import StorageError
from memory_mcp.base.ids import validate_identifier
from memory_mcp.store.interfaces import Scope

T = TypeVar("T")
Row = tuple[Any, ...]
Params = Sequence[Any] | Mapping[str, Any]

NO_AGENT = ""  # agent_name of a user's own scope

# PostgreSQL's codes (SQLSTATE) for the errors the parts act on, whichever class the driver gives them.
UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"
UNTRANSLATABLE_CHARACTER = "22P05"


class Cursor(Protocol):
    """The result of a statement."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> list[Row]: ...


class StreamingCursor(Protocol):
    def stream(self, query: str, params: Params | None = None, *, size: int = 1) -> Iterator[Row]: ...


class Connection(Protocol):
    """A connection in autocommit mode: each statement commits unless run in `transaction()`."""

    def execute(self, query: str, params: Params | None = None, *, binary: bool = False) -> Cursor: ...

    def transaction(self) -> AbstractContextManager[object]: ...

    def cursor(self) -> StreamingCursor: ...


@dataclass
class Attempt:
    """One run of a piece of work; it clears `retry_is_safe` once running it again could apply it twice."""

    number: int
    retry_is_safe: bool = True


class Database(Protocol):
    """PostgreSQL as the parts use it. Failures of the database come out as StorageError that say
    what could not be done (`action`), never the DSN's password."""

    @property
    def schema(self) -> str: ...

    @property
    def sql(self) -> Mapping[str, str]:
        """The statements of `queries.QUERIES`, by name, rendered for this schema."""

    @property
    def stream_rows(self) -> int:
        """How many rows a stream brings at a time."""

    def run(self, action: str, work: Callable[[Connection, Attempt], T]) -> T:
        """work(conn, attempt) on a pooled connection; run once more on another if the connection
        turns out broken and the attempt says that is safe."""

    def advisory_lock(self, key: int, deadline: float, action: str, holder: str) -> AbstractContextManager[bool]:
        """Hold the session advisory lock `key` on a connection of its own for the duration
        (`holder`: whose it is, as a warning names it); yields False when it is not had by the
        time.monotonic() `deadline` (past: tried once)."""


class ScopeVanished(Exception):
    """The scope was erased between two statements of a transaction; start it again."""


def scope_key(scope: Scope) -> tuple[str, str]:
    """The (user_id, agent_name) columns of a scope, checked as the JSON store checks directory names."""
    user_id = validate_identifier("user_id", scope.user_id)
    if scope.agent_name is None:
        return user_id, NO_AGENT
    return user_id, validate_identifier("agent_name", scope.agent_name)


def only_row(cursor: Cursor) -> Row:
    """The row of a statement that always returns one (a count, an EXISTS, a locked row's update)."""
    row = cursor.fetchone()
    if row is None:
        raise StorageError("PostgreSQL returned no row where a statement always returns one")
    return row


@contextmanager
def streamed(conn: Connection, query: str, params: Params, size: int) -> Iterator[Iterator[Row]]:
    """The rows of `query` as they come, `size` at a time. The stream is closed however the
    reading ends: one left open holds the connection's lock, and the pool, taking the connection
    back, would wait for it for ever."""
    rows = conn.cursor().stream(query, params, size=size)
    try:
        yield rows
    finally:
        if isinstance(rows, Generator):  # what a stream is: closing it ends the query
            rows.close()


def sqlstate(error: BaseException | None) -> str | None:
    """PostgreSQL's code for the error (None: not one PostgreSQL reported)."""
    code = getattr(error, "sqlstate", None)
    return code if isinstance(code, str) else None


def constraint_of(error: BaseException | None) -> str | None:
    """The constraint an integrity error names (None: none named)."""
    name = getattr(getattr(error, "diag", None), "constraint_name", None)
    return name if isinstance(name, str) else None


def scope_row(database: Database, action: str, query: str, scope: Scope, **params: Any) -> Row | None:
    """The row (if any) of one of the queries that name a scope by %(u)s and %(a)s."""
    user_id, agent = scope_key(scope)
    named = {"u": user_id, "a": agent, **params}
    return database.run(action, lambda conn, _: conn.execute(database.sql[query], named).fetchone())
