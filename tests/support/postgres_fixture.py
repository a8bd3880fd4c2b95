"""A PostgreSQL for tests: the server named by MEMORY_MCP_TEST_DSN, one fresh schema per test.

Without MEMORY_MCP_TEST_DSN the PostgreSQL tests are skipped, saying how to get one; with
MEMORY_MCP_REQUIRE_POSTGRES=1 they fail instead, so a run that must cover PostgreSQL cannot pass
by skipping.
`.ci/postgres.sh` starts a throwaway server and prints the export line:

    eval "$(.ci/postgres.sh)" && .venv/bin/python -m pytest tests/test_store_backends.py
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

DSN_VARIABLE = "MEMORY_MCP_TEST_DSN"
SKIP_REASON = "no PostgreSQL: set MEMORY_MCP_TEST_DSN (CI starts one with .ci/postgres.sh)"


def postgres_required() -> bool:
    return os.environ.get("MEMORY_MCP_REQUIRE_POSTGRES", "").strip().lower() in {"true", "1", "yes"}


def postgres_dsn() -> str:
    """The test server's DSN; skips the test without one (fails it when PostgreSQL is required)."""
    dsn = os.environ.get(DSN_VARIABLE, "").strip()
    if dsn:
        return dsn
    if postgres_required():
        pytest.fail(f"MEMORY_MCP_REQUIRE_POSTGRES is set but {SKIP_REASON}", pytrace=False)
    pytest.skip(SKIP_REASON)


class Schemas:
    """Hands out schema names no other test uses, and drops every one of them afterwards."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.created: list[str] = []

    def new(self) -> str:
        name = f"test_{secrets.token_hex(6)}"
        self.created.append(name)
        return name

    def admin(self):  # -> psycopg.Connection
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True)

    def drop_all(self) -> None:
        if not self.created:
            return
        with self.admin() as conn:
            for name in self.created:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def fresh_schemas() -> Iterator[Schemas]:
    """Body of a fixture: fresh schemas on the test server for one test, dropped afterwards;
    the test is skipped (failed on CI) without a server. `yield from fresh_schemas()`."""
    schemas = Schemas(postgres_dsn())
    try:
        yield schemas
    finally:
        schemas.drop_all()


pg_schemas = pytest.fixture(fresh_schemas, name="pg_schemas")
