"""The SQL statements of the PostgreSQL store, each with `{schema}` where its schema's name goes
(`migrations.render` fills it in, quoted).

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

    page_directories (user_id, agent_name, generation, pages, data bytea, saved_at)  PK (user_id, agent_name)
        The columns of a long log's first `pages` pages (memory_mcp.store.postgres.directory), kept
        as the index snapshots are: written and read only at the scope's generation, deleted by an
        erase of pages.
"""

from __future__ import annotations

QUERIES = {
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
    # Stored uncompressed (migration 5), a part of it is read without reading the rest.
    "read_index_snapshot_part": """
        SELECT substring(i.data FROM %(from)s FOR %(for)s) FROM {schema}.index_snapshots i
        JOIN {schema}.scopes s USING (user_id, agent_name)
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
        FOR KEY SHARE  -- waits for an erase under way, then finds its new generation: nothing saved
        ON CONFLICT (user_id, agent_name)
        DO UPDATE SET generation = EXCLUDED.generation, data = EXCLUDED.data, saved_at = now()
    """,
    "erase_index_snapshot": """
        DELETE FROM {schema}.index_snapshots WHERE user_id = %(u)s AND agent_name = %(a)s
    """,
    "read_page_directory": """
        SELECT d.generation, d.pages, d.data FROM {schema}.page_directories d
        JOIN {schema}.scopes s USING (user_id, agent_name)
        WHERE d.user_id = %(u)s AND d.agent_name = %(a)s AND d.generation = s.generation AND d.pages <= s.page_count
    """,
    "write_page_directory": """
        INSERT INTO {schema}.page_directories (user_id, agent_name, generation, pages, data)
        SELECT user_id, agent_name, generation, %(n)s, %(data)s FROM {schema}.scopes
        WHERE user_id = %(u)s AND agent_name = %(a)s AND generation = %(g)s AND page_count >= %(n)s
        FOR KEY SHARE  -- waits for an erase under way, then finds its new generation: nothing saved
        ON CONFLICT (user_id, agent_name) DO UPDATE
        SET generation = EXCLUDED.generation, pages = EXCLUDED.pages, data = EXCLUDED.data, saved_at = now()
        WHERE {schema}.page_directories.generation <> EXCLUDED.generation
            OR {schema}.page_directories.pages <= EXCLUDED.pages  -- never one of fewer pages over it
    """,
    "erase_page_directory": """
        DELETE FROM {schema}.page_directories WHERE user_id = %(u)s AND agent_name = %(a)s
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
    "analyse": "ANALYZE {schema}.scopes, {schema}.pages",
}
