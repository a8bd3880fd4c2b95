"""The PostgreSQL log's page directory: a start reads one row and the rows added after it instead
of every row, but only when the directory is whole and of the log's generation; an erase takes it
with the exchanges, and no save racing an erase brings it (or a saved index) back."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from postgres_fixture import Schemas, pg_schemas  # noqa: F401  (pg_schemas is a fixture)
from waiting import wait_until

from memory_mcp.models import Page
from memory_mcp.store import PageLog, Scope
from memory_mcp.store.page_sequence import DIRECTORY_MIN_PAGES
from memory_mcp.store.postgres import pages as row_pages
from memory_mcp.store.postgres.backend import PostgresStore

USER = Scope("alice")
SIZE = DIRECTORY_MIN_PAGES + 20


def make_page(n: int) -> Page:
    return Page(
        page_id=f"page_{n:05d}",
        user_input=f"question number {n} about the {'garden' if n % 7 else 'violin'}",
        agent_response=f"answer number {n}",
        timestamp=f"2024-05-{1 + n % 28:02d}T13:56:00Z",
        thread_id=f"thread-{n % 3}" if n % 4 else None,
    )


class Database:
    """Stores over one fresh schema, and plain SQL on it."""

    def __init__(self, schemas: Schemas) -> None:
        self.schemas, self.schema = schemas, schemas.new()
        self.opened: list[PostgresStore] = []

    def store(self) -> PostgresStore:
        store = PostgresStore(self.schemas.dsn, schema=self.schema)
        self.opened.append(store)
        return store

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.schemas.admin() as conn:
            cursor = conn.execute(query.replace("{schema}", f'"{self.schema}"'), params)
            return cursor.fetchall() if cursor.description else []

    def directory(self) -> tuple[int, int] | None:
        """The saved directory's generation and page count, if there is one."""
        rows = self.sql("SELECT generation, pages FROM {schema}.page_directories")
        return rows[0] if rows else None


@pytest.fixture
def db(pg_schemas: Schemas) -> Iterator[Database]:  # noqa: F811
    database = Database(pg_schemas)
    yield database
    for store in database.opened:
        store.close()


def filled(db: Database, count: int = SIZE) -> list[Page]:
    pages = [make_page(n) for n in range(count)]
    store = db.store()
    store.append_pages(USER, pages)
    store.close()
    return pages


def read_from(db: Database, monkeypatch: pytest.MonkeyPatch) -> tuple[PageLog, list[int]]:
    """A fresh store's read of the log, and the positions its reads of rows started from."""
    starts: list[int] = []
    read_log = row_pages.PostgresPages._read_log

    def recorded(self: Any, conn: Any, scope: Scope, after: int) -> Any:
        starts.append(after)
        return read_log(self, conn, scope, after)

    with monkeypatch.context() as patched:
        patched.setattr(row_pages.PostgresPages, "_read_log", recorded)
        page_log = db.store().read_pages(USER)
    return page_log, starts


def assert_holds(page_log: PageLog, pages: list[Page]) -> None:
    """The log as read holds exactly these pages, by its columns and by the pages fetched from it."""
    assert list(page_log.pages.ids) == [page.page_id for page in pages]
    assert list(page_log.pages.threads) == [page.thread_id or "" for page in pages]
    assert list(page_log.pages.timestamps) == [page.timestamp for page in pages]
    assert list(page_log.pages) == pages


def test_a_start_reads_the_directory_and_only_the_rows_added_since(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = filled(db)
    first, first_starts = read_from(db, monkeypatch)  # reads every row, and saves the directory
    assert db.directory() == (first.generation, SIZE)
    later = [make_page(n) for n in range(SIZE, SIZE + 5)]
    db.store().append_pages(USER, later)

    page_log, starts = read_from(db, monkeypatch)

    assert (first_starts, starts) == ([0], [SIZE])
    assert_holds(page_log, pages + later)


def test_a_closing_store_saves_the_directory_of_a_log_that_grew_in_memory(db: Database) -> None:
    filled(db, DIRECTORY_MIN_PAGES - 1)  # too short to be worth a directory yet
    store = db.store()
    generation = store.read_pages(USER).generation
    store.append_pages(USER, [make_page(n) for n in range(DIRECTORY_MIN_PAGES - 1, SIZE)])
    assert db.directory() is None

    store.close()

    assert db.directory() == (generation, SIZE)


def overwrite_an_id(db: Database) -> None:
    db.sql(
        "UPDATE {schema}.page_directories"
        " SET data = overlay(data PLACING 'page_00501'::bytea FROM position('page_00500'::bytea IN data))"
    )


def cut(db: Database) -> None:
    db.sql("UPDATE {schema}.page_directories SET data = substring(data FROM 1 FOR octet_length(data) - 100)")


def foreign(db: Database) -> None:
    db.sql("UPDATE {schema}.page_directories SET data = 'memory-mcp row directory\n'::bytea || '\\x00'::bytea")


def of_more_pages_than_it_lists(db: Database) -> None:
    db.sql("UPDATE {schema}.page_directories SET pages = pages - 1")


@pytest.mark.parametrize("damage", [overwrite_an_id, cut, foreign, of_more_pages_than_it_lists])
def test_a_damaged_directory_is_not_used_and_is_saved_again(
    db: Database, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    pages = filled(db)
    read_from(db, monkeypatch)
    damage(db)

    page_log, starts = read_from(db, monkeypatch)

    assert starts == [0]
    assert_holds(page_log, pages)
    assert db.directory() == (page_log.generation, SIZE)
    assert read_from(db, monkeypatch)[1] == [SIZE]


def test_erasing_exchanges_leaves_no_directory_that_names_them(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = filled(db)
    store, other = db.store(), db.store()
    store.read_pages(USER)
    other.read_pages(USER)
    other.append_pages(USER, [make_page(SIZE)])  # its log in memory grew since the directory was saved

    store.erase_pages(USER, ["page_00003"], lambda document, _positions: document)
    other.close()  # which must not save the directory of the log it read before the erase

    assert db.directory() is None
    page_log, starts = read_from(db, monkeypatch)
    assert starts == [0]
    assert_holds(page_log, [page for page in pages + [make_page(SIZE)] if page.page_id != "page_00003"])


def test_a_directory_of_an_earlier_generation_is_not_used(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = filled(db)
    read_from(db, monkeypatch)
    db.sql("UPDATE {schema}.scopes SET generation = DEFAULT")  # as a rewrite of the log does

    page_log, starts = read_from(db, monkeypatch)

    assert starts == [0]
    assert_holds(page_log, pages)


@pytest.mark.parametrize("saved", ["directory", "word index"])
def test_a_save_racing_an_erase_waits_for_it_and_saves_nothing(db: Database, saved: str) -> None:
    """A save that reads the scope's generation just before an erase commits must not leave a row
    naming the erased exchanges: it waits for the erase, finds the new generation, saves nothing."""
    filled(db, DIRECTORY_MIN_PAGES - 1)
    store = db.store()
    generation = store.read_pages(USER).generation
    store.append_pages(USER, [make_page(n) for n in range(DIRECTORY_MIN_PAGES - 1, SIZE)])  # a directory due

    def save() -> None:
        if saved == "directory":
            store.close()
        else:
            store.write_index_snapshot(USER, b"an index of the exchanges before the erase", generation)

    with db.schemas.admin() as eraser, eraser.transaction():  # as an erase of pages holds it
        eraser.execute(f'SELECT 1 FROM "{db.schema}".scopes WHERE user_id = %s FOR UPDATE', [USER.user_id])
        eraser.execute(f'UPDATE "{db.schema}".scopes SET generation = DEFAULT WHERE user_id = %s', [USER.user_id])
        saving = threading.Thread(target=save)
        saving.start()
        wait_until(
            lambda: db.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") != [(0,)],
            what="the save to wait for the erase",
        )
    saving.join(30)

    assert not saving.is_alive()
    assert db.sql("SELECT count(*) FROM {schema}.page_directories") == [(0,)]
    assert db.sql("SELECT count(*) FROM {schema}.index_snapshots") == [(0,)]
