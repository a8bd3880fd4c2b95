"""The storage interface the service depends on; backends live beside it.

Everything above this package sees only `MemoryStore` (or the part of it a caller needs: see
`interfaces`), so a database backend can stand next to the JSON files without any caller knowing
which one is in use.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memory_mcp.base.errors import StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.store.interfaces import (
    DocumentStore,
    ErasingStore,
    MemoryStore,
    PageLog,
    PageStore,
    SavedIndexStore,
    Scope,
    StoreAdministration,
    VectorStore,
    already_stored,
)
from memory_mcp.store.records import PageVector, page_from_record, page_record, vector_from_record, vector_record

__all__ = [
    "DocumentStore",
    "ErasingStore",
    "MemoryStore",
    "PageLog",
    "PageStore",
    "PageVector",
    "SavedIndexStore",
    "Scope",
    "StoreAdministration",
    "VectorStore",
    "already_stored",
    "open_store",
    "page_from_record",
    "page_record",
    "refuse_unsafe_home",
    "vector_from_record",
    "vector_record",
]


def open_store(settings: Settings) -> MemoryStore:
    """The store the settings name; psycopg is imported only when PostgreSQL is used. A data home
    another account could write to is refused first (`refuse_unsafe_home`)."""
    refuse_unsafe_home(settings.data_storage_path)
    storage = settings.storage
    if storage.backend == "postgres":
        from memory_mcp.store.postgres.backend import PostgresStore

        assert storage.dsn is not None  # StorageSettings requires it
        return PostgresStore(
            storage.dsn,
            schema=storage.postgres_schema,
            max_connections=storage.max_connections,
            lock_timeout=storage.lock_timeout_seconds,
            cached_scopes=settings.memory.cached_scopes,
        )
    from memory_mcp.store.files.backend import JsonStore

    return JsonStore(
        settings.data_storage_path,
        lock_timeout=storage.lock_timeout_seconds,
        cached_scopes=settings.memory.cached_scopes,
    )


def refuse_unsafe_home(home: Path) -> None:
    """StorageError when the data home exists but is another account's or writable by others:
    memory planted there (exchanges, facts, a hook helper's socket) would be served as this user's."""
    try:
        found = os.stat(home)
    except (FileNotFoundError, NotADirectoryError):
        return  # made when first needed, owner-only (or refused then, saying why)
    if found.st_uid != os.getuid():
        raise StorageError(
            f"the data folder {home} belongs to another account (uid {found.st_uid}, you are {os.getuid()}): "
            "memory there could have been planted; use a folder of your own (MEMORY_MCP_HOME or data_storage_path)"
        )
    if found.st_mode & 0o022:
        raise StorageError(
            f"the data folder {home} is writable by other accounts (mode {stat.S_IMODE(found.st_mode):o}): "
            f"memory there could have been planted; make it yours alone (chmod 700 {home}) or use another"
        )
