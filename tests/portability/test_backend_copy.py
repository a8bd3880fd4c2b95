"""`memory-mcp migrate`: everything stored moves between the JSON files and PostgreSQL, and back.

The command runs as a real subprocess over a JSON data directory seeded with several users and
agents, exchanges (unicode, NUL and all, more than one batch), facts with superseded versions, a
profile, analysis progress and sessions. What arrives is compared through the stores and through
the service's export, the equality oracle a user relies on. Tests that need PostgreSQL get fresh
schemas from `pg_schemas` (skipped without MEMORY_MCP_TEST_DSN, failed with
MEMORY_MCP_REQUIRE_POSTGRES=1); the rest of the logic is also checked between two JSON stores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from postgres_fixture import Schemas, pg_schemas  # noqa: F401  (pg_schemas is a fixture)
from project import PROJECT_ROOT
from stdio_helpers import server_env, snapshot, write_config

import memory_mcp.portability.backend_copy as backend_copy
from memory_mcp.base.errors import StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    AnalysisProgress,
    ExportRequest,
    KnowledgeEntry,
    MemoryDocument,
    Page,
    RetrieveMemoryRequest,
    Section,
    SessionState,
    UpdateFactRequest,
)
from memory_mcp.portability.backend_copy import batches, copy_memory
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import MemoryStore, Scope
from memory_mcp.store.files.backend import JsonStore

pytestmark = pytest.mark.integration

TRICKY = 'line one\nline two\r\n\u2028 sep \u0085 nel \x00 nul "quoted" \\ back 中文 🙂 مرحبا e\u0301 %s {schema}'
BULK_PAGES = 2100  # alice's log needs more than one batch, and its word index is saved


# --- seeding and comparing --------------------------------------------------------------------


def seed(root: Path) -> None:
    """Memory of every kind a data directory can hold, written the way a server writes it."""
    service = MemoryService(Settings(data_storage_path=root))
    try:
        for n, (text, thread) in enumerate(
            [("We plan a trip to Kyoto in April", "trip"), ("I booked a ryokan", "trip"), ("My cat is Miso", None)]
        ):
            service.add_memory(
                AddMemoryRequest.build(
                    user_id="alice",
                    user_input=text,
                    agent_response=f"noted {n}",
                    thread_id=thread,
                    timestamp=f"2024-03-0{n + 1} 09:00:00",
                    meta_data={"n": n, "tags": ["a", None, 2.5, True]},
                )
            )
        tea = service.add_fact(
            AddFactRequest.build(user_id="alice", content="Likes green tea 🍵", category="preference")
        )
        service.update_fact(UpdateFactRequest.build(user_id="alice", fact_id=tea.fact.id, content="Likes oolong tea"))
        service.add_fact(AddFactRequest.build(user_id="alice", content="Plans a Kyoto trip", category="goal"))
        for agent, text in (("coder", "use ruff, not flake8"), ("writer", "oxford commas please")):
            service.add_memory(
                AddMemoryRequest.build(user_id="alice", agent_name=agent, user_input=text, agent_response="ok")
            )
        service.add_fact(AddFactRequest.build(user_id="alice", agent_name="coder", content="Prefers Python 3.12"))
        service.add_memory(
            AddMemoryRequest.build(user_id="bob", agent_name="helper", user_input="hi", agent_response="hello")
        )
    finally:
        service.close()
    store = JsonStore(root)
    store.append_pages(Scope("alice"), [bulk_page(n) for n in range(BULK_PAGES)])
    store.append_pages(
        Scope("carol"),
        [
            Page(
                page_id="page_tricky",
                user_input=TRICKY,
                agent_response=TRICKY[::-1],
                timestamp="2024-05-01T13:56:00Z",
                meta_data={"text": TRICKY, "deep": {"list": [{"k": "中文"}]}},
                thread_id="线程 1",
            ),
            Page(page_id="page_plain", user_input="plain", agent_response="text", timestamp="2024-05-02T13:56:00Z"),
        ],
    )
    store.update_document(Scope("alice"), profile)
    store.update_document(
        Scope("carol"), lambda document: document.model_copy(update={"analysis": AnalysisProgress(allBefore=1)})
    )


def bulk_page(n: int) -> Page:
    return Page(
        page_id=f"page_bulk_{n:05d}",
        user_input=f"bulk question {n} über",
        agent_response=f"answer {n}",
        timestamp="2024-04-01T10:00:00Z",
        meta_data={"n": n},
    )


def profile(document: MemoryDocument) -> MemoryDocument:
    """Profile sections, assistant knowledge, updater progress, sessions, and a field from a newer release."""
    section = Section(summary="Works on the billing service at Acme — 请用中文", updatedAt="2024-05-01T00:00:00Z")
    changed = document.model_copy(
        update={
            "user": document.user.model_copy(update={"workContext": section}),
            "history": document.history.model_copy(update={"recentMonths": section}),
            "assistantKnowledge": [KnowledgeEntry(id="ak_1", content="I suggested Kyoto in April", confidence=0.8)],
            "analysis": AnalysisProgress(allBefore=2, threads={"trip": 3}),
            "sessions": {"trip": SessionState(visits=3, lastVisit="2024-05-01T00:00:00Z", counted=2, summary="Kyoto")},
        }
    )
    return MemoryDocument.model_validate({**changed.model_dump(), "futureField": {"kept": ["as", "is"]}})


def stored(store: MemoryStore) -> dict[Scope, tuple[list[Page], MemoryDocument]]:
    """Every scope's pages and document (without lastUpdated, which each write stamps)."""
    return {
        scope: (list(store.read_pages(scope).pages), store.read_document(scope).model_copy(update={"lastUpdated": ""}))
        for scope in store.list_scopes()
    }


def exports(settings: Settings) -> dict[str, dict[str, Any]]:
    """Each user's export, as the service gives it, without the times a write or an export stamps."""
    service = MemoryService(settings)
    try:
        found = {}
        for user in service.store.list_users():
            data = service.export_memory(ExportRequest.build(user_id=user)).model_dump(
                mode="json", exclude={"exported_at"}
            )
            for memory in [data["memory"], *(agent["memory"] for agent in data["agents"].values())]:
                memory["lastUpdated"] = ""
            found[user] = data
        return found
    finally:
        service.close()


def recall(settings: Settings) -> list[tuple[list[str], str]]:
    """What retrieve_memory returns for a few queries: page ids and the <memory> block."""
    service = MemoryService(settings)
    try:
        results = []
        for user, agent, query in (
            ("alice", None, "Kyoto ryokan trip"),
            ("alice", "coder", "ruff"),
            ("carol", None, "中文"),
        ):
            result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, agent_name=agent, query=query))
            ids = [page.page_id for page in [*result.short_term_memory, *result.retrieved_pages]]
            results.append((ids, result.context))
        return results
    finally:
        service.close()


def json_settings(root: Path) -> Settings:
    return Settings(data_storage_path=root)


def pg_settings(dsn: str, schema: str) -> Settings:
    return Settings.model_validate(
        {"data_storage_path": "/nonexistent", "storage": {"backend": "postgres", "dsn": dsn, "postgres_schema": schema}}
    )


def pg_store(dsn: str, schema: str) -> MemoryStore:
    from memory_mcp.store.postgres.backend import PostgresStore

    return PostgresStore(dsn, schema=schema, max_connections=4)


# --- the command ------------------------------------------------------------------------------


def analysed_at(dsn: str, schema: str) -> object:
    """When PostgreSQL last gathered statistics of the schema's pages (None: never)."""
    import psycopg

    query = "SELECT last_analyze FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'pages'"
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, [schema]).fetchone()
    return None if row is None else row[0]


def page_directories(dsn: str, schema: str) -> list[tuple[str, str, int]]:
    """Whose logs have a saved page directory, and of how many pages."""
    import psycopg

    query = f'SELECT user_id, agent_name, pages FROM "{schema}".page_directories ORDER BY 1, 2'
    with psycopg.connect(dsn) as conn:
        return [tuple(row) for row in conn.execute(query).fetchall()]


def run(config: Path, *args: str, dsn_env: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m memory_mcp migrate --config CONFIG ARGS`, with MEMORY_MCP_DSN only if given."""
    env = server_env()
    env.pop("MEMORY_MCP_DSN", None)
    if dsn_env is not None:
        env["MEMORY_MCP_DSN"] = dsn_env
    return subprocess.run(
        [sys.executable, "-m", "memory_mcp", "migrate", "--config", str(config), *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def error_line(completed: subprocess.CompletedProcess[str]) -> str:
    assert completed.returncode == 1, (completed.returncode, completed.stdout, completed.stderr)
    assert completed.stdout == ""
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    return lines[0]


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    root = tmp_path / "source"
    seed(root)
    return root


@pytest.fixture
def schema(pg_schemas: Schemas) -> str:  # noqa: F811
    return pg_schemas.new()


@pytest.fixture
def dsn(pg_schemas: Schemas) -> str:  # noqa: F811
    return pg_schemas.dsn


@pytest.fixture
def postgres(dsn: str, schema: str) -> Iterator[Callable[[], MemoryStore]]:
    """Opens a new store over the test's schema (a fresh instance reads nothing from a cache)."""
    opened: list[Any] = []

    def open_store() -> MemoryStore:
        opened.append(pg_store(dsn, schema))
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


def test_json_to_postgres_and_back_keeps_every_page_fact_and_profile(
    source_dir: Path, tmp_path: Path, dsn: str, schema: str, postgres: Callable[[], MemoryStore]
) -> None:
    original = stored(JsonStore(source_dir))
    original_exports = exports(json_settings(source_dir))
    config = write_config(
        tmp_path / "to-pg.json",
        {"data_storage_path": str(source_dir), "storage": {"dsn": dsn, "postgres_schema": schema}},
    )

    completed = run(config, "--from", "json", "--to", "postgres", "--json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert [(s["user_id"], s["agent_name"]) for s in report["scopes"]] == [
        ("alice", None),
        ("alice", "coder"),
        ("alice", "writer"),
        ("bob", None),
        ("bob", "helper"),
        ("carol", None),
    ]
    alice = report["scopes"][0]
    assert (alice["pages"], alice["pages_copied"], alice["facts"]) == (3 + BULK_PAGES, 3 + BULK_PAGES, 3)
    assert report["pages"] == report["pages_copied"] == sum(len(pages) for pages, _ in original.values())
    assert report["facts"] == 4
    assert "verified" in report["message"]
    # a start reads alice's long log from its directory (bob's few exchanges need none)
    assert page_directories(dsn, schema) == [("alice", "", 3 + BULK_PAGES)]

    assert stored(postgres()) == original
    assert list(stored(postgres())) == list(original)  # the same scopes, in the same order
    assert exports(pg_settings(dsn, schema)) == original_exports
    assert JsonStore(source_dir).read_document(Scope("alice")).facts[0].supersededBy  # history survived
    # the first recall on the new backend reads a saved word index (bob's few exchanges need none)
    assert [postgres().has_index_snapshot(Scope(user)) for user in ("alice", "bob")] == [True, False]
    assert analysed_at(dsn, schema) is not None, "the new rows' statistics, for reading them back by index"
    assert stored(JsonStore(source_dir)) == original  # the source was only read

    # Back into a fresh directory, with the DSN from the environment and PostgreSQL configured.
    back_dir = tmp_path / "back"
    back = write_config(
        tmp_path / "to-json.json",
        {"data_storage_path": str(back_dir), "storage": {"backend": "postgres", "postgres_schema": schema}},
    )
    completed = run(back, "--from", "postgres", "--to", "json", dsn_env=dsn)
    assert completed.returncode == 0, completed.stderr
    assert "total" in completed.stdout and "postgres -> json" in completed.stdout  # the table
    assert stored(JsonStore(back_dir)) == original
    assert JsonStore(back_dir).has_index_snapshot(Scope("alice"))
    assert exports(json_settings(back_dir)) == original_exports
    assert recall(json_settings(back_dir)) == recall(pg_settings(dsn, schema)) == recall(json_settings(source_dir))


def test_a_target_that_already_holds_memory_is_refused_and_left_unchanged(
    source_dir: Path, tmp_path: Path, dsn: str, schema: str, postgres: Callable[[], MemoryStore]
) -> None:
    store = postgres()
    store.append_pages(Scope("carol"), [bulk_page(1)])
    store.write_document(Scope("alice", "coder"), MemoryDocument())
    before = stored(store)
    config = write_config(
        tmp_path / "c.json", {"data_storage_path": str(source_dir), "storage": {"dsn": dsn, "postgres_schema": schema}}
    )

    line = error_line(run(config, "--from", "json", "--to", "postgres"))
    assert "already holds memory for alice, alice/coder, carol" in line and "--resume" in line
    assert stored(postgres()) == before

    # The other way round: a JSON target is left byte for byte as it was.
    pg_config = write_config(
        tmp_path / "p.json",
        {
            "data_storage_path": str(source_dir),
            "storage": {"backend": "postgres", "dsn": dsn, "postgres_schema": schema},
        },
    )
    files = snapshot(source_dir)
    line = error_line(run(pg_config, "--from", "postgres", "--to", "json"))
    assert "already holds memory for alice, alice/coder, carol" in line
    assert snapshot(source_dir) == files


def test_a_stopped_migration_is_continued_with_resume(
    source_dir: Path, tmp_path: Path, dsn: str, schema: str, postgres: Callable[[], MemoryStore]
) -> None:
    original = stored(JsonStore(source_dir))
    target = StopsAfter(postgres(), appends=2)  # alice's first batch, then the failure
    with pytest.raises(StorageError) as stopped:
        copy_memory(JsonStore(source_dir), target, postgres())
    assert "migration stopped at alice: " in str(stopped.value) and "--resume" in str(stopped.value)
    partial = stored(postgres())
    assert list(partial) == [Scope("alice")]
    assert [p.page_id for p in partial[Scope("alice")][0]] == [p.page_id for p in original[Scope("alice")][0]][:1000]
    assert stored(JsonStore(source_dir)) == original

    config = write_config(
        tmp_path / "c.json", {"data_storage_path": str(source_dir), "storage": {"dsn": dsn, "postgres_schema": schema}}
    )
    assert "already holds memory for alice" in error_line(run(config, "--from", "json", "--to", "postgres"))
    completed = run(config, "--from", "json", "--to", "postgres", "--resume", "--json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["scopes"][0]["pages_copied"] == 3 + BULK_PAGES - 1000
    assert report["pages_copied"] == report["pages"] - 1000
    assert stored(postgres()) == original

    # Once complete, resuming again copies nothing and still verifies.
    again = json.loads(run(config, "--from", "json", "--to", "postgres", "--resume", "--json").stdout)
    assert again["pages_copied"] == 0 and again["pages"] == report["pages"]


def test_resume_refuses_a_target_whose_pages_did_not_come_from_the_source(
    source_dir: Path, tmp_path: Path, dsn: str, schema: str, postgres: Callable[[], MemoryStore]
) -> None:
    store = postgres()
    store.append_pages(Scope("carol"), [bulk_page(7)])
    before = stored(store)
    config = write_config(
        tmp_path / "c.json", {"data_storage_path": str(source_dir), "storage": {"dsn": dsn, "postgres_schema": schema}}
    )
    line = error_line(run(config, "--from", "json", "--to", "postgres", "--resume"))
    assert "cannot resume" in line and "carol" in line and "nothing was written" in line
    assert stored(postgres()) == before


def test_the_same_backend_twice_and_a_missing_dsn_are_one_line_errors(source_dir: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.json", {"data_storage_path": str(source_dir)})
    files = snapshot(source_dir)
    assert "--from and --to must name different backends (both are json)" in error_line(
        run(config, "--from", "json", "--to", "json")
    )
    for direction in (["--from", "json", "--to", "postgres"], ["--from", "postgres", "--to", "json"]):
        line = error_line(run(config, *direction))
        assert "needs a DSN" in line and "MEMORY_MCP_DSN" in line and "nothing was migrated" in line
    assert snapshot(source_dir) == files


# --- the copy itself, between two JSON stores -------------------------------------------------


class Delegating:
    """A store that passes every call to `store`; subclasses change what an append does."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class StopsAfter(Delegating):
    """A target whose appends fail from the `appends`-th on, as on a full disk or a lost server."""

    def __init__(self, store: MemoryStore, appends: int) -> None:
        super().__init__(store)
        self.left = appends

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self.left -= 1
        if self.left <= 0:
            raise StorageError("could not store pages: No space left on device")
        self.store.append_pages(scope, pages)


class DropsLastPage(Delegating):
    """A target that silently loses the last page of each append."""

    def append_pages(self, scope: Scope, pages: Sequence[Page]) -> None:
        self.store.append_pages(scope, pages[:-1])


def test_json_to_json_copies_everything_and_verifies_through_a_fresh_instance(source_dir: Path, tmp_path: Path) -> None:
    report = copy_memory(JsonStore(source_dir), JsonStore(tmp_path / "t"), JsonStore(tmp_path / "t"))
    assert stored(JsonStore(tmp_path / "t")) == stored(JsonStore(source_dir))
    assert report.pages == report.pages_copied == sum(len(pages) for pages, _ in stored(JsonStore(source_dir)).values())


def test_verification_catches_a_target_that_lost_pages(source_dir: Path, tmp_path: Path) -> None:
    lost = rf"the target holds {BULK_PAGES} exchanges, the source {BULK_PAGES + 3}"  # one from each of 3 batches
    with pytest.raises(StorageError, match=rf"verification failed for alice: {lost}"):
        copy_memory(JsonStore(source_dir), DropsLastPage(JsonStore(tmp_path / "t")), JsonStore(tmp_path / "t"))


def test_an_empty_source_migrates_nothing(tmp_path: Path) -> None:
    report = copy_memory(JsonStore(tmp_path / "none"), JsonStore(tmp_path / "t"), JsonStore(tmp_path / "t"))
    assert report.scopes == [] and report.message == "The source holds no memory: nothing was migrated."
    assert not (tmp_path / "t").exists()


def test_batches_are_bounded_by_count_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [bulk_page(n) for n in range(2500)]
    assert [len(batch) for batch in batches(pages)] == [1000, 1000, 500]
    huge = bulk_page(9).model_copy(update={"user_input": "x" * 5000})
    monkeypatch.setattr(backend_copy, "BATCH_CHARS", 3000)
    mixed = [pages[0], pages[1], huge, pages[2]]
    assert [len(batch) for batch in batches(mixed)] == [2, 1, 1]
    assert [page for batch in batches(mixed) for page in batch] == mixed
