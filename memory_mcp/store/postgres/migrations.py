"""The PostgreSQL schema of memory-mcp, as numbered migrations the server applies itself.

`migrate` runs when a `PostgresStore` first connects. It takes a session advisory lock that is
specific to the schema, so when several server instances start together one migrates while the
others wait and then find nothing left to do. Each migration runs in its own transaction together
with the row that records it in `schema_migrations`, so a migration is either applied and recorded
or neither (PostgreSQL's DDL is transactional). Migrations are never edited once released: a
change of schema is a new, higher-numbered entry appended to `MIGRATIONS`.

A database migrated by a newer memory-mcp than this one (a version above the highest known here)
is refused with a StorageError rather than used, since this code could misread it.

The SQL uses `{schema}`, replaced by the quoted schema name; nothing else in it is templated.
See `memory_mcp.store.postgres.queries` for what the tables hold, and `backend` for how they are used.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from memory_mcp.base.errors import StorageError

SCHEMA_RULE = "[a-z_][a-z0-9_]{0,62}"
_SCHEMA_NAME = re.compile(SCHEMA_RULE)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "scopes, pages and documents",
        """
        -- One row per user (agent_name '') and per agent of a user that has anything stored.
        -- Deleting it erases the scope: its pages and document go with it (ON DELETE CASCADE).
        CREATE TABLE {schema}.scopes (
            user_id     text COLLATE "C" NOT NULL
                        CHECK (user_id ~ '^[A-Za-z0-9_-]+$' AND length(user_id) <= 64),
            agent_name  text COLLATE "C" NOT NULL
                        CHECK (agent_name = '' OR (agent_name ~ '^[A-Za-z0-9_-]+$' AND length(agent_name) <= 64)),
            generation  bigint GENERATED ALWAYS AS IDENTITY,
            page_count  bigint NOT NULL DEFAULT 0 CHECK (page_count >= 0),
            created_at  timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT scopes_pkey PRIMARY KEY (user_id, agent_name)
        );

        -- The page log: position is the page's index in its scope's log (0, 1, 2, ...), handed
        -- out under the scope row's lock, so positions commit in order; seq is the global order
        -- of insertion across all scopes.
        CREATE TABLE {schema}.pages (
            user_id     text COLLATE "C" NOT NULL,
            agent_name  text COLLATE "C" NOT NULL,
            position    bigint NOT NULL CHECK (position >= 0),
            seq         bigserial NOT NULL,
            page_id     text NOT NULL,
            page        json NOT NULL,
            added_at    timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pages_pkey PRIMARY KEY (user_id, agent_name, position),
            CONSTRAINT pages_page_id_key UNIQUE (user_id, agent_name, page_id),
            CONSTRAINT pages_scope_fkey FOREIGN KEY (user_id, agent_name)
                REFERENCES {schema}.scopes (user_id, agent_name) ON DELETE CASCADE
        );

        -- Every write of a document, by the server or by hand, takes a new version from this
        -- sequence (the trigger below), so a version number is never reused, even after the scope
        -- was erased and written again: readers tell "unchanged" from the version alone.
        CREATE SEQUENCE {schema}.document_versions;

        CREATE TABLE {schema}.documents (
            user_id     text COLLATE "C" NOT NULL,
            agent_name  text COLLATE "C" NOT NULL,
            document    jsonb NOT NULL,
            version     bigint NOT NULL DEFAULT 0,
            updated_at  timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT documents_pkey PRIMARY KEY (user_id, agent_name),
            CONSTRAINT documents_scope_fkey FOREIGN KEY (user_id, agent_name)
                REFERENCES {schema}.scopes (user_id, agent_name) ON DELETE CASCADE
        );

        CREATE FUNCTION {schema}.documents_new_version() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.version := nextval('{schema}.document_versions');
            NEW.updated_at := now();
            RETURN NEW;
        END
        $$;

        CREATE TRIGGER documents_new_version BEFORE INSERT OR UPDATE ON {schema}.documents
            FOR EACH ROW EXECUTE FUNCTION {schema}.documents_new_version();
        """,
    ),
    Migration(
        2,
        "page vectors",
        """
        -- Embeddings of pages, appended as they are computed; seq orders them, so a reader reads on
        -- from the last one it saw. They go with their scope (ON DELETE CASCADE).
        CREATE TABLE {schema}.page_vectors (
            user_id     text COLLATE "C" NOT NULL,
            agent_name  text COLLATE "C" NOT NULL,
            seq         bigserial NOT NULL,
            page_id     text NOT NULL,
            model       text NOT NULL,
            scale       double precision NOT NULL,
            components  bytea NOT NULL,
            CONSTRAINT page_vectors_pkey PRIMARY KEY (user_id, agent_name, seq),
            CONSTRAINT page_vectors_scope_fkey FOREIGN KEY (user_id, agent_name)
                REFERENCES {schema}.scopes (user_id, agent_name) ON DELETE CASCADE
        );
        """,
    ),
    Migration(
        3,
        "saved word indexes",
        """
        -- One saved word index per scope, made from its log at `generation` (derived data: a reader
        -- checks it against the log before use). It goes with its scope (ON DELETE CASCADE).
        CREATE TABLE {schema}.index_snapshots (
            user_id     text COLLATE "C" NOT NULL,
            agent_name  text COLLATE "C" NOT NULL,
            generation  bigint NOT NULL,
            data        bytea NOT NULL,
            saved_at    timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT index_snapshots_pkey PRIMARY KEY (user_id, agent_name),
            CONSTRAINT index_snapshots_scope_fkey FOREIGN KEY (user_id, agent_name)
                REFERENCES {schema}.scopes (user_id, agent_name) ON DELETE CASCADE
        );
        """,
    ),
    Migration(
        4,
        "page fields as columns",
        """
        -- What a start reads of every page besides its id, as columns: a log of 100,000 pages is
        -- then known without fetching and parsing each page. said_at is NULL where the page does
        -- not hold its timestamp and thread as text (a reader fetches such a page whole).
        ALTER TABLE {schema}.pages ADD COLUMN thread_id text, ADD COLUMN said_at text;
        UPDATE {schema}.pages SET
            thread_id = CASE WHEN strpos(coalesce((page->'thread_id')::text, ''), '\\u0000') = 0
                             THEN page->>'thread_id' END,
            said_at = CASE WHEN json_typeof(page->'timestamp') = 'string'
                                AND strpos((page->'timestamp')::text, '\\u0000') = 0
                                AND strpos(coalesce((page->'thread_id')::text, ''), '\\u0000') = 0
                           THEN page->>'timestamp' END;
        """,
    ),
    Migration(
        5,
        "saved word indexes stored uncompressed",
        """
        -- A saved index is read whole at every start of an instance: compressed, PostgreSQL spent
        -- ~120 ms of a 0.4 s read at 100,000 exchanges undoing it, to save half its 72 MB. Rows
        -- written from now on are stored as they are (those already saved, at their next save).
        ALTER TABLE {schema}.index_snapshots ALTER COLUMN data SET STORAGE EXTERNAL;
        """,
    ),
    Migration(
        6,
        "page directories",
        """
        -- The first `pages` pages' ids, threads and timestamps of a long log at `generation`, in
        -- one value: a start reads it and the rows after it, not every row (30,000 rows streamed
        -- took ~0.1 s). Derived data, used only while the generation is the scope's; deleted by
        -- an erase of pages, and with its scope (ON DELETE CASCADE).
        CREATE TABLE {schema}.page_directories (
            user_id     text COLLATE "C" NOT NULL,
            agent_name  text COLLATE "C" NOT NULL,
            generation  bigint NOT NULL,
            pages       bigint NOT NULL CHECK (pages >= 0),
            data        bytea NOT NULL,
            saved_at    timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT page_directories_pkey PRIMARY KEY (user_id, agent_name),
            CONSTRAINT page_directories_scope_fkey FOREIGN KEY (user_id, agent_name)
                REFERENCES {schema}.scopes (user_id, agent_name) ON DELETE CASCADE
        );
        """,
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def check_schema_name(schema: str) -> str:
    if not isinstance(schema, str) or _SCHEMA_NAME.fullmatch(schema) is None:
        raise ValueError(f"schema must match {SCHEMA_RULE} (got {schema!r:.80})")
    return schema


def render(template: str, schema: str) -> sql.Composed:
    """`template` with `{schema}` replaced by the quoted schema name (and no other substitution)."""
    parts = template.split("{schema}")
    pieces: list[sql.Composable] = [sql.SQL(parts[0])]
    for part in parts[1:]:
        pieces += [sql.Identifier(schema), sql.SQL(part)]
    return sql.Composed(pieces)


def advisory_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for `parts` (a stable hash, the same in every process)."""
    digest = hashlib.blake2b("\x00".join(("memory-mcp", *parts)).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def migrate(conn: psycopg.Connection, schema: str) -> list[int]:
    """Bring `schema` up to the latest version; return the versions applied now (none if current).

    `conn` must be in autocommit mode; it is left so, with no lock held.
    """
    check_schema_name(schema)
    validate_migrations()
    key = advisory_key("migrate", schema)
    conn.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        with conn.transaction():
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
            if exists is None:
                # Only when missing: CREATE SCHEMA IF NOT EXISTS would still need the CREATE privilege.
                conn.execute(render("CREATE SCHEMA {schema}", schema))
            conn.execute(
                render(
                    "CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
                    " version integer PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())",
                    schema,
                )
            )
        applied = {row[0] for row in conn.execute(render("SELECT version FROM {schema}.schema_migrations", schema))}
        unknown = sorted(version for version in applied if version > LATEST_VERSION)
        if unknown:
            raise StorageError(
                f"the PostgreSQL schema {schema!r} is at version {unknown[-1]}, newer than this memory-mcp "
                f"understands (up to {LATEST_VERSION}): upgrade memory-mcp, or use another schema"
            )
        done = []
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            with conn.transaction():
                conn.execute(render(migration.sql, schema))
                conn.execute(
                    render("INSERT INTO {schema}.schema_migrations (version, name) VALUES (%s, %s)", schema),
                    [migration.version, migration.name],
                )
            done.append(migration.version)
        return done
    finally:
        if not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])


def validate_migrations() -> None:
    """The list itself is well formed: versions 1, 2, 3, ... in order."""
    versions = [migration.version for migration in MIGRATIONS]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"migrations must be numbered 1, 2, 3, ... in order (got {versions})")
