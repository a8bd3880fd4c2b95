"""What the PostgreSQL store derives from each scope's log: the page vectors (rows of
`page_vectors`, read by their `seq`) and the saved word index (a row of `index_snapshots`, valid
only while the scope's generation is the one it was made at)."""

from __future__ import annotations

from collections.abc import Sequence

from memory_mcp.store.interfaces import Scope
from memory_mcp.store.postgres.connection import Connection, Database, scope_key, scope_row
from memory_mcp.store.records import PageVector

LARGE_RESULT_BYTES = 8 << 20  # a saved index larger than this is read on a connection of its own


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
        """A large snapshot is read on a connection of its own, closed after it: libpq keeps a
        connection's input buffer as large as the largest result it took in (72 MB at 100k
        exchanges), which a pooled connection would hold for as long as it lives."""
        action = f"read the word index of {scope.describe()}"
        size = scope_row(self._db, action, "index_snapshot_size", scope)
        if size is None:
            return None
        if size[0] <= LARGE_RESULT_BYTES:
            return self._db.run(action, lambda conn, _: self._snapshot_on(conn, scope))
        return self._db.run_alone(action, lambda conn: self._snapshot_on(conn, scope))

    def _snapshot_on(self, conn: Connection, scope: Scope) -> bytes | None:
        # In binary: as text, the bytes travel hex-encoded (72 MB at 100k exchanges: 0.8 s instead of 0.3).
        user_id, agent = scope_key(scope)
        row = conn.execute(self._db.sql["read_index_snapshot"], {"u": user_id, "a": agent}, binary=True).fetchone()
        return None if row is None else bytes(row[0])

    def write_index_snapshot(self, scope: Scope, data: bytes, generation: int) -> bool:
        """Saved only while the scope's generation is still `generation` (one statement)."""
        user_id, agent = scope_key(scope)
        params = {"u": user_id, "a": agent, "g": generation, "data": data}
        written = self._db.run(
            f"save the word index of {scope.describe()}",
            lambda conn, _: conn.execute(self._db.sql["write_index_snapshot"], params).rowcount,
        )
        return written == 1
