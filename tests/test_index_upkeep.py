"""A saved word index exists whoever wrote the exchanges: a process that only adds (a server whose
model never retrieves, the team server taking hooks' exchanges, an import) saves it when its writes
pause and when it closes, and a Stop hook leaves a process that does. Without one, the first
retrieve after a restart tokenises every exchange (3.4 s at 30,000). Through the core API on both
backends, and through the real hook command and the process it leaves; migration's side is in
tests/portability/test_backend_copy.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from claude_code_session import Transcript, coding_session, text
from command_line import cli
from postgres_fixture import Schemas, pg_schemas  # noqa: F401  (pg_schemas is a fixture)
from waiting import wait_until
from word_index_history import QUERIES, SIZE, USER, conversation

import memory_mcp.service.memory_service as memory_service
from memory_mcp.base.settings import Settings
from memory_mcp.hosts.index_build import BUILD_LOCK
from memory_mcp.hosts.relay import run_folder
from memory_mcp.models import AddMemoryRequest, ExportDocument, ImportRequest, MemoryDocument, RetrieveMemoryRequest
from memory_mcp.recall.saved_index import SnapshotKeeper, decode
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.durable import FileLock
from memory_mcp.store.files.backend import JsonStore
from memory_mcp.store.files.layout import DIRECTORY_FILE


@pytest.fixture(params=["json", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "json":
        return Settings(data_storage_path=tmp_path / "data")
    schemas: Schemas = request.getfixturevalue("pg_schemas")
    return Settings(
        data_storage_path=tmp_path / "data",
        storage={"backend": "postgres", "dsn": schemas.dsn, "postgres_schema": schemas.new()},
    )


@pytest.fixture
def open_service(settings: Settings) -> Iterator[Callable[[], MemoryService]]:
    """Services over the same memory, each a process of its own would have; closed at the end."""
    opened: list[MemoryService] = []

    def open_one() -> MemoryService:
        opened.append(MemoryService(settings))
        return opened[-1]

    yield open_one
    for service in opened:
        service.close()


def snapshot_covers(service: MemoryService, scope: Scope = USER) -> int | None:
    """How many of the log's exchanges the saved index covers (None: there is none)."""
    data = service.store.read_index_snapshot(scope)
    return None if data is None else len(decode(data, service.store.read_pages(scope).pages))


def add(service: MemoryService, count: int, start: int) -> None:
    for page in conversation(count, start):
        service.add_memory(
            AddMemoryRequest.build(
                user_id=USER.user_id,
                user_input=page.user_input,
                agent_response=page.agent_response,
                thread_id=page.thread_id,
            )
        )


def imported(service: MemoryService, count: int, start: int) -> None:
    document = ExportDocument(
        exported_at="2025-03-01T10:00:00Z",
        user_id=USER.user_id,
        memory=MemoryDocument(),
        pages=conversation(count, start),
    )
    service.import_memory(ImportRequest.build(data=document.model_dump(mode="json"), mode="merge"))


def found(service: MemoryService) -> list[list[str]]:
    return [
        [
            each.page_id
            for each in service.search_exchanges(
                RetrieveMemoryRequest.build(user_id=USER.user_id, query=query, max_results=20)
            )
        ]
        for query in QUERIES
    ]


def test_a_process_that_only_adds_saves_the_index_as_it_closes(open_service: Callable[[], MemoryService]) -> None:
    writer = open_service()
    writer.store.append_pages(USER, conversation(SIZE))  # a history nobody indexed
    assert snapshot_covers(writer) is None
    add(writer, 3, start=SIZE)
    writer.close()

    reader = open_service()
    assert snapshot_covers(reader) == SIZE + 3
    if reader.settings.storage.backend == "json":  # and where each exchange lies, for its log's reading
        assert (reader.settings.data_storage_path / "users" / "alice" / DIRECTORY_FILE).exists()
    expected = found(reader)
    assert all(expected)
    reader.store.write_index_snapshot(USER, b"not an index", reader.store.read_pages(USER).generation)
    assert found(open_service()) == expected, "what the saved index finds is what a fresh build finds"


def test_writes_that_pause_get_their_index_saved_while_the_process_runs(
    open_service: Callable[[], MemoryService], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_service, "INDEX_IDLE_SECONDS", 0.2)
    writer = open_service()
    imported(writer, SIZE, start=0)  # as an import, or the team server taking a host's exchanges

    wait_until(lambda: snapshot_covers(writer) == SIZE, timeout=60, what="the index saved once writes paused")


def test_a_few_exchanges_leave_the_saved_index_alone_and_a_few_hundred_bring_it_up_to_date(
    open_service: Callable[[], MemoryService],
) -> None:
    first = open_service()
    imported(first, SIZE, start=0)
    first.close()
    assert snapshot_covers(open_service()) == SIZE
    assert SIZE // SnapshotKeeper.REFRESH_PAGES == (SIZE + 10) // SnapshotKeeper.REFRESH_PAGES

    few = open_service()
    add(few, 10, start=SIZE)  # a Stop hook's worth: cheaper for the next reader to index than to save
    few.close()
    stale = open_service()
    assert snapshot_covers(stale) == SIZE
    from_the_snapshot = found(stale)
    stale.store.write_index_snapshot(USER, b"gone", stale.store.read_pages(USER).generation)
    assert from_the_snapshot == found(open_service()), "a reader indexes what the snapshot lacks"

    many = open_service()
    imported(many, SnapshotKeeper.REFRESH_PAGES, start=SIZE + 10)
    many.close()
    assert snapshot_covers(open_service()) == SIZE + 10 + SnapshotKeeper.REFRESH_PAGES


@pytest.mark.integration
def test_a_stop_hook_leaves_a_process_that_saves_the_index_of_a_large_history(home: Path, tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "claude" / "projects" / "-work-app" / "session.jsonl")
    coding_session(transcript)
    first = cli(home, "hook", "stop", stdin=json.dumps(transcript.stop_input()))
    assert (first.code, first.stderr) == (0, "")
    store = JsonStore(home)
    (scope,) = store.list_scopes()
    store.append_pages(scope, conversation(SIZE))  # a long history, never retrieved from
    assert store.read_index_snapshot(scope) is None, "hooks that stored a few exchanges saved nothing"

    transcript.prompt("And the date column?")
    transcript.reply(text("Parse it with `pl.col('date').str.to_date()`."))
    stop = cli(home, "hook", "stop", stdin=json.dumps(transcript.stop_input()))

    assert (stop.code, stop.stdout, stop.stderr) == (0, "", "")
    pages = store.read_pages(scope).pages
    assert len(pages) == SIZE + 3
    wait_until(lambda: store.read_index_snapshot(scope) is not None, timeout=60, what="the index the hook left saved")
    data = store.read_index_snapshot(scope)
    assert data is not None and len(decode(data, pages)) == SIZE + 3


@pytest.mark.integration
def test_an_index_build_stands_down_while_another_runs_and_a_later_one_saves(tmp_path: Path) -> None:
    settings = Settings(data_storage_path=tmp_path / "data")
    store = JsonStore(settings.data_storage_path)
    store.append_pages(USER, conversation(SIZE))
    told = json.dumps({"settings": settings.model_dump(mode="json"), "user_id": USER.user_id, "agent_name": None})
    build = [sys.executable, "-m", "memory_mcp.hosts.index_build"]
    running = FileLock(run_folder(settings.data_storage_path) / BUILD_LOCK)

    running.acquire(timeout=0)  # as a build started by an earlier hook holds it
    try:
        stood_down = subprocess.run(build, input=told, capture_output=True, text=True, timeout=60)
    finally:
        running.release()
    assert (stood_down.returncode, stood_down.stderr) == (0, "")
    assert store.read_index_snapshot(USER) is None

    later = subprocess.run(build, input=told, capture_output=True, text=True, timeout=120)
    assert (later.returncode, later.stderr) == (0, "")
    data = store.read_index_snapshot(USER)
    assert data is not None and len(decode(data, store.read_pages(USER).pages)) == SIZE
