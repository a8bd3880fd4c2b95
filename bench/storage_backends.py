"""What the store benchmarks need to know about a storage backend: settings, bulk loads, cleanup.

JSON: files under a temp directory. PostgreSQL: a schema of its own (bench_<random>) in the
database at the DSN, dropped when the run ends, so runs never see each other's rows.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

BACKENDS = ("json", "postgres")
DSN_VARIABLES = ("MEMORY_MCP_DSN", "MEMORY_MCP_TEST_DSN")
BULK_BATCH = 2000  # pages per PostgresStore.append_pages statement in a bulk load


def default_dsn() -> str | None:
    """The DSN the environment names ($MEMORY_MCP_DSN, else $MEMORY_MCP_TEST_DSN from .ci/postgres.sh)."""
    return next((os.environ[name] for name in DSN_VARIABLES if os.environ.get(name)), None)


def new_schema_name(label: str) -> str:
    return f"bench_{label}_{secrets.token_hex(4)}"


def settings_for(backend: str, data_root: Path, dsn: str | None = None, schema: str | None = None):
    """Settings for one benchmark run; postgres needs `dsn` and `schema`."""
    from memory_mcp.base.settings import Settings

    if backend == "json":
        return Settings(data_storage_path=data_root)
    return Settings(data_storage_path=data_root, storage={"backend": "postgres", "dsn": dsn, "postgres_schema": schema})


def drop_schema(dsn: str, schema: str) -> str | None:
    """Drop a benchmark schema with everything in it; returns the error, if any, as one line."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        return None
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def stored_size(settings, pages_path: Callable[[], Path]) -> tuple[str, float | None]:
    """(what was measured, MB) of the stored pages: pages.jsonl, or the pages table with its indexes."""
    if settings.storage.backend == "json":
        return "pages.jsonl", round(pages_path().stat().st_size / 2**20, 1)
    import psycopg

    storage = settings.storage
    try:
        with psycopg.connect(storage.dsn, autocommit=True, connect_timeout=10) as conn:
            size = conn.execute(
                "SELECT pg_total_relation_size(format('%%I.pages', %s::text)::regclass)", [storage.postgres_schema]
            ).fetchone()[0]
        return "pages table + indexes", round(size / 2**20, 1)
    except psycopg.Error:
        return "pages table + indexes", None


@contextlib.contextmanager
def bulk_writer(
    service, settings, user_id: str, pages_path: Callable[[], Path]
) -> Iterator[Callable[[Sequence], None]]:
    """write(pages) for a bulk load that skips add_memory; the records are the store's own.

    JSON: Page.model_dump_json() lines appended to pages.jsonl, one fsync at the end.
    PostgreSQL: PostgresStore.append_pages, one statement (and commit) per call, as the product
    itself writes several pages (the store has no faster path, and COPY would bypass its
    page_count and positions bookkeeping)."""
    if settings.storage.backend == "json":
        with open(pages_path(), "ab") as stream:
            yield lambda pages: stream.write(b"".join((p.model_dump_json() + "\n").encode("utf-8") for p in pages))
            stream.flush()
            os.fsync(stream.fileno())
        return
    from memory_mcp.store import Scope

    scope = Scope(user_id)
    yield lambda pages: service.store.append_pages(scope, pages)


def bulk_description(backend: str) -> str:
    if backend == "json":
        return "written straight to pages.jsonl"
    return f"bulk-inserted with PostgresStore.append_pages, {BULK_BATCH} pages per statement"
