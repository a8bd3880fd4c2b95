"""What the PostgreSQL store derives from each scope's log: the page vectors (rows of
`page_vectors`, read by their `seq`) and the saved word index (a row of `index_snapshots`, valid
only while the scope's generation is the one it was made at)."""

from __future__ import annotations

from collections.abc import Sequence

from memory_mcp.base.errors import StorageError
from memory_mcp.store.interfaces import Scope
from memory_mcp.store.postgres.connection import Attempt, Connection, Database, scope_key, scope_row
from memory_mcp.store.records import PageVector

SNAPSHOT_PART_BYTES = 1 << 20


class PostgresDerived:
    """The vectors and saved word indexes of the scopes in one schema."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def append_vectors(self, scope: Scope, vectors: Sequence[PageVector], of_pages: bool = True) -> None:
        user_id, agent = scope_key(scope)
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
        self._db.run(
            f"store page vectors for {scope.describe()}",
            lambda conn, _: conn.execute(self._db.sql["append_vectors"], params),
        )

    def erase_vectors(self, scope: Scope, model: str, ids: Sequence[str]) -> None:
        user_id, agent = scope_key(scope)
        params = {"u": user_id, "a": agent, "model": model, "ids": list(ids)}
        self._db.run(
            f"erase vectors of {scope.describe()}",
            lambda conn, _: conn.execute(self._db.sql["erase_model_vectors"], params),
        )

    def read_vectors(self, scope: Scope, after: int) -> tuple[list[PageVector], int]:
        user_id, agent = scope_key(scope)
        rows = self._db.run(
            f"read the page vectors of {scope.describe()}",
            lambda conn, _: conn.execute(
                self._db.sql["read_vectors"], {"u": user_id, "a": agent, "after": after}
            ).fetchall(),
        )
        vectors = [
            PageVector(page_id, model, scale, bytes(components)) for _, page_id, model, scale, components in rows
        ]
        return vectors, rows[-1][0] if rows else after

    def has_index_snapshot(self, scope: Scope) -> bool:
        action = f"look for the word index of {scope.describe()}"
        return scope_row(self._db, action, "index_snapshot_size", scope) is not None

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        """Read a part of SNAPSHOT_PART_BYTES at a time, in one repeatable-read transaction (the
        parts of one saved index, whatever is saved meanwhile): libpq keeps a connection's input
        buffer as large as the largest result it took in, and one 22 MB result took longer to come
        than its 22 parts (~100 against ~50 ms at 30,000 exchanges)."""
        user_id, agent = scope_key(scope)
        names = {"u": user_id, "a": agent}

        def work(conn: Connection, _attempt: Attempt) -> bytes | None:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                size = conn.execute(self._db.sql["index_snapshot_size"], names).fetchone()
                if size is None:
                    return None
                data = bytearray(size[0])
                for start in range(0, len(data), SNAPSHOT_PART_BYTES):
                    part = {**names, "from": start + 1, "for": SNAPSHOT_PART_BYTES}
                    # In binary: as text, the bytes travel hex-encoded (three times slower).
                    row = conn.execute(self._db.sql["read_index_snapshot_part"], part, binary=True).fetchone()
                    data[start : start + SNAPSHOT_PART_BYTES] = row[0] if row is not None else b""
                    if len(data) != size[0]:
                        raise StorageError(f"the saved word index of {scope.describe()} changed while it was read")
                return bytes(data)

        return self._db.run(f"read the word index of {scope.describe()}", work)

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Saved only while the scope's generation is still `generation` (one statement)."""
        user_id, agent = scope_key(scope)
        params = {"u": user_id, "a": agent, "g": generation, "data": data}
        written = self._db.run(
            f"save the word index of {scope.describe()}",
            lambda conn, _: conn.execute(self._db.sql["write_index_snapshot"], params).rowcount,
        )
        return written == 1
