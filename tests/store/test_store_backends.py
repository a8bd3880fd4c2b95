"""The MemoryStore contract, run the same way against every backend: JsonStore and PostgresStore.

Each test gets a `backend`: fresh, empty storage (a temp directory, or a schema of its own on the
PostgreSQL named by MEMORY_MCP_TEST_DSN), from which it opens as many store instances as it likes;
two instances stand for two server processes sharing that storage. Tests that need a real second
process start one. Tests at the end cover what only PostgreSQL has (migrations, DSN secrecy).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_fixture import Schemas, fresh_schemas, postgres_dsn
from project import PROJECT_ROOT
from waiting import wait_until

from memory_mcp.base.errors import InvalidInput, MemoryGone, NotFound, StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    ExportRequest,
    Fact,
    ForgetExchangeRequest,
    ForgetRequest,
    HostFact,
    HostMemory,
    ImportRequest,
    MemoryDocument,
    Page,
    RetrieveMemoryRequest,
    SessionState,
    StoredPage,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import MemoryStore, PageVector, Scope
from memory_mcp.store.files.backend import JsonStore

USER = Scope("alice")
TRICKY = 'line one\nline two\r\n\u2028 sep \u0085 nel \x00 nul "quoted" \\ back 中文 🙂 %s {schema}'


def make_page(n: int, text: str | None = None, **meta: Any) -> Page:
    return Page(
        page_id=f"page_{n:04d}",
        user_input=text if text is not None else f"question number {n}",
        agent_response=f"answer number {n}",
        timestamp="2024-05-01T13:56:00Z",
        meta_data={"n": n, **meta},
    )


def ids(pages: Any) -> list[str]:
    return [page.page_id for page in pages]


# --- backends -----------------------------------------------------------------------------


class Backend:
    """Fresh storage for one test, and the means to open store instances over it."""

    name: str

    def __init__(self) -> None:
        self.opened: list[Any] = []
        self.services: list[MemoryService] = []

    def store(self) -> MemoryStore:
        """A new store instance over this test's storage (as another process would open it)."""
        raise NotImplementedError

    def service(self, settings: Settings) -> MemoryService:
        """A service over a new store instance, closed with the backend (before its stores: a
        service left open would keep its index in the background over a store closed under it)."""
        service = MemoryService(settings, store=self.store())
        self.services.append(service)
        return service

    def child_spec(self) -> dict[str, str]:
        """What a child process needs to open a store over the same storage."""
        raise NotImplementedError

    def corrupt_document(self, scope: Scope, raw: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for service in self.services:
            service.close()
        for store in self.opened:
            close = getattr(store, "close", None)
            if close is not None:
                close()


class JsonBackend(Backend):
    name = "json"

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def store(self) -> MemoryStore:
        return JsonStore(self.root)

    def child_spec(self) -> dict[str, str]:
        return {"kind": "json", "root": str(self.root)}

    def corrupt_document(self, scope: Scope, raw: str) -> None:
        (JsonStore(self.root).scope_dir(scope) / "memory.json").write_text(raw, encoding="utf-8")


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, schemas: Schemas) -> None:
        super().__init__()
        self.schemas = schemas
        self.dsn = schemas.dsn
        self.schema = schemas.new()

    def store(self) -> MemoryStore:
        try:
            from memory_mcp.store.postgres.backend import PostgresStore
        except ImportError as exc:  # the DSN says PostgreSQL tests must run: say what is missing
            pytest.fail(f"{exc}: install the postgres extra (pip install -e '.[test,postgres]')", pytrace=False)
        store = PostgresStore(self.dsn, schema=self.schema, max_connections=6)
        self.opened.append(store)
        return store

    def child_spec(self) -> dict[str, str]:
        return {"kind": "postgres", "schema": self.schema}

    def corrupt_document(self, scope: Scope, raw: str) -> None:
        with self.schemas.admin() as conn:
            conn.execute(
                f'UPDATE "{self.schema}".documents SET document = %s::jsonb WHERE user_id = %s AND agent_name = %s',
                [raw, scope.user_id, scope.agent_name or ""],
            )

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.schemas.admin() as conn:
            cursor = conn.execute(query.replace("{schema}", f'"{self.schema}"'), params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=["json", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "json":
        chosen: Backend = JsonBackend(tmp_path / "data")
    else:
        schemas = request.getfixturevalue("schemas")
        chosen = PostgresBackend(schemas)
    try:
        yield chosen
    finally:
        chosen.close()


@pytest.fixture
def schemas() -> Iterator[Schemas]:
    yield from fresh_schemas()


@pytest.fixture
def pg(schemas: Schemas) -> Iterator[PostgresBackend]:
    chosen = PostgresBackend(schemas)
    try:
        yield chosen
    finally:
        chosen.close()


# --- child processes ------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from memory_mcp.models import Page
    from memory_mcp.store import Scope

    spec = json.loads(sys.argv[1])
    if spec["kind"] == "json":
        from memory_mcp.store.files.backend import JsonStore
        store = JsonStore(Path(spec["root"]))
    else:
        from memory_mcp.store.postgres.backend import PostgresStore
        store = PostgresStore(os.environ["MEMORY_MCP_TEST_DSN"], schema=spec["schema"])
    scope = Scope(spec["user"])
    if spec["job"] == "append":
        print("ready", flush=True)
        for n in range(100_000):
            page = Page(page_id=f"child_{n:06d}", user_input=f"child says {n}", agent_response="ok",
                        timestamp="2024-05-01T13:56:00Z")
            store.append_page(scope, page)
            print(n, flush=True)  # acknowledged: it must survive whatever happens next
    elif spec["job"] == "hold":
        with store.exclusive_updates(scope) as held:
            print("held" if held else "refused", flush=True)
            time.sleep(120)
    """
)


def start_child(backend: Backend, job: str, user: str = USER.user_id) -> subprocess.Popen[str]:
    spec = {**backend.child_spec(), "job": job, "user": user}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
    )


def kill(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)


# --- pages ------------------------------------------------------------------------------------


def test_pages_come_back_in_the_order_they_were_added_through_a_fresh_instance(backend: Backend) -> None:
    store = backend.store()
    originals = [make_page(0), make_page(1, TRICKY), make_page(2, "x" * 100_000)]
    batch = [make_page(n, nested={"list": [1, 2.5, None, True], "text": TRICKY}) for n in range(3, 60)]
    for page in originals:
        store.append_page(USER, page)
    store.append_pages(USER, batch)
    store.append_pages(USER, [])  # nothing to do

    assert list(store.read_pages(USER).pages) == originals + batch
    assert list(backend.store().read_pages(USER).pages) == originals + batch


def test_reading_a_scope_with_nothing_stored_is_empty_and_stores_nothing(backend: Backend) -> None:
    store = backend.store()

    assert list(store.read_pages(USER).pages) == []
    assert store.read_document(USER).is_empty()
    assert store.list_users() == [] and store.list_scopes() == []
    with store.exclusive_updates(USER) as held:
        assert held is False  # nothing stored: nothing to update
    assert store.list_users() == []


@pytest.mark.integration
def test_an_acknowledged_append_survives_the_writer_being_killed(backend: Backend) -> None:
    child = start_child(backend, "append")
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        acknowledged = -1
        while acknowledged < 30:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            acknowledged = int(line)
    finally:
        kill(child)
    # Acknowledgements written before the kill but not yet read count too.
    acknowledged = max([acknowledged, *(int(line) for line in child.stdout.read().split() if line.isdigit())])

    stored = ids(backend.store().read_pages(USER).pages)
    # Every acknowledged page is there, in order; at most the one in flight beyond them.
    assert stored[: acknowledged + 1] == [f"child_{n:06d}" for n in range(acknowledged + 1)]
    assert len(stored) <= acknowledged + 2


def test_another_instances_appends_are_read_incrementally(backend: Backend) -> None:
    first, second = backend.store(), backend.store()
    first.append_page(USER, make_page(0))
    before = second.read_pages(USER)
    assert ids(before.pages) == ["page_0000"]
    kept = before.pages[0]

    first.append_page(USER, make_page(1))
    second.append_page(USER, make_page(2))  # second's cache is behind: it must not skip page 1
    first.append_pages(USER, [make_page(3), make_page(4)])

    after = second.read_pages(USER)
    assert ids(after.pages) == [f"page_{n:04d}" for n in range(5)]
    assert after.generation == before.generation  # extended, not rebuilt...
    assert after.pages[0] is kept  # ...and what was read before was not read again
    assert ids(first.read_pages(USER).pages) == ids(after.pages)
    assert list(backend.store().read_pages(USER).pages) == list(after.pages)


def test_concurrent_appenders_lose_nothing_and_readers_only_ever_see_the_log_grow(backend: Backend) -> None:
    writers, per_writer = 4, 60
    stores = [backend.store(), backend.store()]
    reader = backend.store()
    stores[0].append_page(USER, make_page(9999))
    done = threading.Event()
    problems: list[str] = []

    def write(index: int) -> None:
        store = stores[index % 2]
        for n in range(per_writer):
            page = Page(page_id=f"w{index}_{n:03d}", user_input="x", agent_response="y", timestamp="t")
            if n % 10 == 9:
                store.append_pages(USER, [page, page.model_copy(update={"page_id": f"w{index}_{n:03d}b"})])
            else:
                store.append_page(USER, page)

    def read() -> None:
        seen: list[str] = []
        generation = None
        while not done.is_set():
            log = reader.read_pages(USER)
            now = ids(log.pages)
            if generation is not None and log.generation != generation:
                problems.append("generation changed without an erase")
            if now[: len(seen)] != seen:
                problems.append(f"log did not just grow: had {len(seen)}, now {len(now)}")
            generation, seen = log.generation, now

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    observer = threading.Thread(target=read)
    observer.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    observer.join()

    assert problems == []
    final = ids(reader.read_pages(USER).pages)
    assert len(final) == len(set(final)) == 1 + writers * (per_writer + per_writer // 10)
    for index in range(writers):
        own = [page_id for page_id in final if page_id.startswith(f"w{index}_")]
        assert own == sorted(own)  # each writer's order is kept
    assert final == ids(backend.store().read_pages(USER).pages)


def test_generation_changes_when_the_log_is_erased_and_only_then(backend: Backend) -> None:
    store, other = backend.store(), backend.store()
    store.append_page(USER, make_page(0))
    first = store.read_pages(USER)
    for n in (1, 2):
        other.append_page(USER, make_page(n))
        store.append_page(USER, make_page(n + 10))
        assert store.read_pages(USER).generation == first.generation

    other.erase(USER)  # by another instance: this one only sees it happen
    erased = store.read_pages(USER)
    assert erased.generation != first.generation
    assert list(erased.pages) == []
    assert first.pages.ids[:1] == ["page_0000"]  # a log already handed out is not changed

    other.append_page(USER, make_page(5))
    again = store.read_pages(USER)
    assert again.generation != first.generation
    assert ids(again.pages) == ["page_0005"]
    store.append_page(USER, make_page(6))
    assert store.read_pages(USER).generation == again.generation

    store.erase(USER)  # and by this one
    store.append_page(USER, make_page(7))
    last = store.read_pages(USER)
    assert last.generation not in {first.generation, again.generation}
    assert ids(last.pages) == ["page_0007"]


# --- the memory document ------------------------------------------------------------------


def counter(document: MemoryDocument) -> int:
    return next((int(fact.content) for fact in document.facts if fact.id == "counter"), 0)


def increment(document: MemoryDocument) -> MemoryDocument:
    value = counter(document)
    time.sleep(0.0005)  # widen the window a lost update would need
    others = [fact for fact in document.facts if fact.id != "counter"]
    return document.model_copy(update={"facts": [*others, Fact(id="counter", content=str(value + 1), confidence=1.0)]})


def test_write_document_round_trips_stamps_last_updated_and_is_seen_by_other_instances(backend: Backend) -> None:
    writer, reader = backend.store(), backend.store()
    document = MemoryDocument(facts=[Fact(id="f1", content=f"likes tea {TRICKY.replace(chr(0), '')}", confidence=0.9)])
    document.user.workContext.summary = "writes Rust"
    document.sessions["t:abc"] = SessionState(visits=2, summary="bees")
    stored = writer.write_document(USER, document)

    assert stored.lastUpdated.endswith("Z")
    assert reader.read_document(USER) == stored
    assert backend.store().read_document(USER) == stored

    for version in ("two", "333"):  # a change of content alone is noticed, size or not
        newer = writer.write_document(USER, MemoryDocument(facts=[Fact(id="f1", content=version, confidence=0.5)]))
        assert reader.read_document(USER) == newer
    assert reader.read_document(USER).facts[0].content == "333"
    assert USER.user_id in reader.list_users()  # a document alone makes the scope stored


def test_update_document_loses_no_edit_across_threads_and_instances(backend: Backend) -> None:
    stores = [backend.store(), backend.store()]
    threads_per_store, increments = 2, 15
    errors: list[BaseException] = []

    def work(store: MemoryStore) -> None:
        try:
            for _ in range(increments):
                store.update_document(USER, increment)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(store,)) for store in stores for _ in range(threads_per_store)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    expected = len(stores) * threads_per_store * increments
    assert counter(backend.store().read_document(USER)) == expected
    assert all(counter(store.read_document(USER)) == expected for store in stores)


def test_a_change_that_raises_writes_nothing(backend: Backend) -> None:
    store = backend.store()
    store.update_document(USER, increment)

    def fail(document: MemoryDocument) -> MemoryDocument:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update_document(USER, fail)
    assert counter(backend.store().read_document(USER)) == 1
    assert counter(store.update_document(USER, increment)) == 2


def test_a_damaged_document_is_reported_and_never_overwritten(backend: Backend) -> None:
    store = backend.store()
    store.write_document(USER, MemoryDocument(facts=[Fact(id="f1", content="good", confidence=0.9)]))
    assert store.read_document(USER).facts[0].content == "good"  # cached
    backend.corrupt_document(USER, '{"facts": "x", "padding": "differs"}')

    for reader in (store, backend.store()):
        with pytest.raises(StorageError, match="not a valid memory document") as caught:
            reader.read_document(USER)
        assert "\n" not in str(caught.value)
        with pytest.raises(StorageError, match="not a valid memory document"):
            reader.write_document(USER, MemoryDocument())  # would hide the damage
    backend.corrupt_document(USER, '{"facts": []}')
    assert backend.store().read_document(USER).facts == []


# --- the updater's turn -------------------------------------------------------------------


def test_exclusive_updates_admits_one_holder_across_instances_and_threads(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    first, second = backend.store(), backend.store()
    first.append_page(USER, make_page(0))
    with first.exclusive_updates(USER) as held:
        assert held is True
        with second.exclusive_updates(USER) as other:
            assert other is False
        started = time.monotonic()
        with second.exclusive_updates(USER, wait=0.3) as other:
            assert other is False
        assert time.monotonic() - started >= 0.25
        with first.exclusive_updates(USER) as same_instance:  # another thread of the same instance
            assert same_instance is False
        with first.exclusive_updates(Scope("alice", "coder")) as unrelated:
            assert unrelated is False  # nothing stored for that agent (not a lock conflict)
    with second.exclusive_updates(USER) as other:
        assert other is True


def test_a_waiting_claim_gets_the_turn_as_soon_as_it_is_released(backend: Backend) -> None:
    first, second = backend.store(), backend.store()
    first.append_page(USER, make_page(0))
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with first.exclusive_updates(USER) as held:
            assert held
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with second.exclusive_updates(USER, wait=10) as got:
        waited = time.monotonic() - started
        assert got is True
    holder.join()
    assert 0.2 <= waited < 5


@pytest.mark.integration
def test_the_turn_is_released_when_its_holder_process_dies(backend: Backend) -> None:
    store = backend.store()
    store.append_page(USER, make_page(0))
    child = start_child(backend, "hold")
    try:
        assert child.stdout.readline().strip() == "held", child.stderr.read()
        claimed: list[tuple[bool, float]] = []

        def claim() -> None:
            with store.exclusive_updates(USER, wait=20) as got:
                claimed.append((got, time.monotonic()))

        claimant = threading.Thread(target=claim)
        claimant.start()
        time.sleep(0.5)
        assert claimed == []  # still held by the child
        killed_at = time.monotonic()
        child.send_signal(signal.SIGKILL)
        claimant.join(20)
        assert len(claimed) == 1
        got, at = claimed[0]
        assert got is True
        assert killed_at <= at < killed_at + 10
    finally:
        kill(child)


@pytest.mark.integration
def test_a_claim_held_by_another_process_is_refused(backend: Backend, request: pytest.FixtureRequest) -> None:
    store = backend.store()
    store.append_page(USER, make_page(0))
    child = start_child(backend, "hold")
    try:
        assert child.stdout.readline().strip() == "held", child.stderr.read()
        with store.exclusive_updates(USER) as got:
            assert got is False
        with store.exclusive_updates(USER, wait=0.2) as got:
            assert got is False
    finally:
        kill(child)


# --- erase and listing ----------------------------------------------------------------------


def populate(store: MemoryStore) -> None:
    for scope in (Scope("bob"), Scope("alice"), Scope("A-1_b"), Scope("alice", "zeta"), Scope("alice", "coder")):
        store.append_page(scope, make_page(0))
    store.write_document(Scope("carol", "helper"), MemoryDocument())  # a user with only an agent
    store.write_document(Scope("alice", "coder"), MemoryDocument(facts=[Fact(id="f", content="c", confidence=1)]))


def test_listing_is_sorted_and_matches_what_is_stored(backend: Backend) -> None:
    store = backend.store()
    populate(store)
    for reader in (store, backend.store()):
        assert reader.list_users() == ["A-1_b", "alice", "bob", "carol"]
        assert reader.list_agents("alice") == ["coder", "zeta"]
        assert reader.list_agents("bob") == [] and reader.list_agents("nobody") == []
        assert reader.list_scopes() == [
            Scope("A-1_b"),
            Scope("alice"),
            Scope("alice", "coder"),
            Scope("alice", "zeta"),
            Scope("bob"),
            Scope("carol"),
            Scope("carol", "helper"),
        ]


def test_erasing_a_user_erases_their_agents_and_nobody_else(backend: Backend) -> None:
    store, other = backend.store(), backend.store()
    populate(store)
    for scope in (Scope("alice"), Scope("alice", "coder")):
        other.read_pages(scope)
        other.read_document(scope)  # cached by another instance, which must notice the erase

    store.erase(Scope("alice", "zeta"))
    assert other.list_agents("alice") == ["coder"]

    store.erase(Scope("alice"))
    for reader in (store, other, backend.store()):
        assert reader.list_users() == ["A-1_b", "bob", "carol"]
        assert reader.list_agents("alice") == []
        assert list(reader.read_pages(Scope("alice")).pages) == []
        assert list(reader.read_pages(Scope("alice", "coder")).pages) == []
        assert reader.read_document(Scope("alice", "coder")).is_empty()
        assert ids(reader.read_pages(Scope("bob")).pages) == ["page_0000"]
    store.erase(Scope("alice"))  # erasing nothing is fine


def test_ids_that_are_not_identifiers_are_refused(backend: Backend) -> None:
    store = backend.store()
    for scope in (Scope(".."), Scope("a/b"), Scope("ok", "../x"), Scope("bob\n"), Scope(""), Scope("ok", "")):
        with pytest.raises(ValueError):
            store.append_page(scope, make_page(0))
        with pytest.raises(ValueError):
            store.read_pages(scope)
    assert store.list_users() == []


# --- the service on each backend ------------------------------------------------------------


def comparable(export: Any) -> dict[str, Any]:
    """An export without the times that the import itself sets."""
    data = export.model_dump(mode="json", exclude={"exported_at"})
    for memory in [data["memory"], *(agent["memory"] for agent in data["agents"].values())]:
        memory["lastUpdated"] = ""
    return data


def test_the_service_adds_retrieves_exports_and_imports_on_this_backend(backend: Backend, tmp_path: Path) -> None:
    settings = Settings(data_storage_path=tmp_path / "unused", short_term_capacity=2)
    service = backend.service(settings)
    for n, text in enumerate(["I keep bees in the garden", "my sister lives in Lisbon", "I play the cello", "hi"]):
        service.add_memory(AddMemoryRequest.build(user_id="alice", user_input=text, agent_response=f"noted {n}"))
    service.add_memory(
        AddMemoryRequest.build(user_id="alice", agent_name="coder", user_input="use ruff", agent_response="ok")
    )

    found = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="bees garden"))
    assert found.retrieved_pages[0].user_input == "I keep bees in the garden"
    service.close()  # lets the visits the retrieve counted be saved (in the background)

    exported = service.export_memory(ExportRequest.build(user_id="alice"))
    assert [page.user_input for page in exported.pages][:1] == ["I keep bees in the garden"]
    assert list(exported.agents) == ["coder"]
    service.forget(ForgetRequest.build(user_id="alice", confirm="alice"))
    assert service.store.list_users() == []

    data = exported.model_dump(mode="json")
    result = service.import_memory(ImportRequest.build(user_id="alice", data=data, mode="replace"))
    assert result.pages_added == 5

    # A second server instance over the same storage sees exactly what was exported.
    again = backend.service(settings)
    reexported = again.export_memory(ExportRequest.build(user_id="alice"))
    assert comparable(reexported) == comparable(exported)
    found = again.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="sister Lisbon"))
    assert found.retrieved_pages[0].user_input == "my sister lives in Lisbon"

    merged = again.import_memory(ImportRequest.build(user_id="alice", data=data, mode="merge"))
    assert merged.pages_added == 0 and merged.pages_skipped == 5


def stored_bytes(backend: Backend, store: MemoryStore) -> bytes:
    """Everything the backend holds, as bytes: every file, or every row of every table."""
    if isinstance(backend, JsonBackend):
        paths = sorted(backend.root.rglob("*"))
        names = "\n".join(str(path.relative_to(backend.root)) for path in paths).encode()
        return names + b"".join(path.read_bytes() for path in paths if path.is_file())
    assert isinstance(backend, PostgresBackend)
    tables = backend.sql("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [backend.schema])
    return b"".join(str(backend.sql(f'SELECT t::text FROM {{schema}}."{table}" t')).encode() for (table,) in tables)


def test_one_exchange_erased_leaves_no_trace_and_the_others_as_they_were_on_this_backend(
    backend: Backend, tmp_path: Path
) -> None:
    service = backend.service(Settings(data_storage_path=tmp_path / "unused"))
    said = ["I keep bees in the garden", "my locker code is zanzibar", "I play the cello", "bees again"]
    for text in said:
        service.add_memory(
            AddMemoryRequest.build(user_id="alice", user_input=text, agent_response="ok", thread_id="t1")
        )
    log = service.store.read_pages(USER)
    erased = log.pages.ids[1]
    service.store.append_vectors(USER, [PageVector(page_id, "m", 0.01, bytes(8)) for page_id in log.pages.ids])
    service.store.write_index_snapshot(USER, b"saved words: zanzibar", log.generation)
    service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="locker code"))  # cached, indexed
    with pytest.raises(NotFound):
        service.forget_exchange(ForgetExchangeRequest.build(user_id="alice", exchange_id="page_unknown"))
    assert list(service.store.read_pages(USER).pages.ids) == list(log.pages.ids), "an unknown id changes nothing"

    result = service.forget_exchange(ForgetExchangeRequest.build(user_id="alice", exchange_id=erased))

    assert result.exchange_id == erased and "for good" in result.message
    kept = service.store.read_pages(USER).pages
    assert [page.user_input for page in kept] == [said[0], said[2], said[3]]
    assert erased not in {vector.page_id for vector in service.store.read_vectors(USER, 0)[0]}
    found = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="my locker code"))
    assert "zanzibar" not in found.model_dump_json()
    assert "zanzibar" not in service.export_memory(ExportRequest.build(user_id="alice")).model_dump_json()
    held = stored_bytes(backend, service.store)
    assert b"zanzibar" not in held and erased.encode() not in held
    # Another instance (another process) reads the same: three exchanges, one session of three.
    again = backend.service(Settings(data_storage_path=tmp_path / "unused"))
    assert len(again.store.read_pages(USER).pages) == 3
    assert [view.exchanges for view in again.sessions("alice")] == [3]
    service.close()
    again.close()


def test_forget_leaves_nothing_that_names_the_user_on_this_backend(backend: Backend, tmp_path: Path) -> None:
    service = backend.service(Settings(data_storage_path=tmp_path / "unused"))
    for user, agent in (("zelda", None), ("zelda", "coder"), ("bob", None)):
        service.add_memory(AddMemoryRequest.build(user_id=user, agent_name=agent, user_input="hi", agent_response="ok"))
        service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, agent_name=agent, query="hi"))
    service.forget(ForgetRequest.build(user_id="zelda", confirm="zelda"))
    service.close()
    held = stored_bytes(backend, service.store)
    assert b"zelda" not in held and b"bob" in held


def test_scrub_rewrites_stored_secrets_in_place_and_nothing_else_on_this_backend(
    backend: Backend, tmp_path: Path
) -> None:
    settings = Settings(data_storage_path=tmp_path / "unused", memory={"redaction": False})
    service = backend.service(settings)
    key = "AKIA" + "QWERTYUIOPASDFGH"
    said = ["I keep bees", f"my key is {key} <private>and my PIN is zorbquill</private>", "I play the cello"]
    for text in said:
        service.add_memory(AddMemoryRequest.build(user_id="alice", user_input=text, agent_response="ok"))
    service.add_memory(
        AddMemoryRequest.build(
            user_id="alice", agent_name="coder", user_input=f"deploy with {key}", agent_response="ok"
        )
    )
    service.add_fact(AddFactRequest.build(user_id="alice", content=f"Their AWS key is {key}"))
    log = service.store.read_pages(USER)
    service.store.append_vectors(USER, [PageVector(page_id, "m", 0.01, bytes(8)) for page_id in log.pages.ids])
    service.store.write_index_snapshot(USER, f"saved words: {key}".encode(), log.generation)
    assert key.encode() in stored_bytes(backend, service.store)

    result = service.scrub("alice")

    assert (result.memories, result.exchanges, result.documents) == (2, 2, 1)
    assert key.encode() not in stored_bytes(backend, service.store) and b"zorbquill" not in stored_bytes(
        backend, service.store
    )
    again = backend.service(settings)  # another process reads the same
    pages = again.store.read_pages(USER).pages
    assert [page.page_id for page in pages] == list(log.pages.ids)
    assert [page.user_input for page in pages] == [said[0], "my key is [redacted: aws access key] ", said[2]]
    assert {vector.page_id for vector in again.store.read_vectors(USER, 0)[0]} == {log.pages.ids[0], log.pages.ids[2]}
    assert again.store.read_index_snapshot(USER) is None
    assert again.scrub("alice").exchanges == 0, "a second scrub finds nothing"
    service.close()
    again.close()


def test_a_nul_in_structured_memory_is_refused_and_writes_nothing_on_this_backend(
    backend: Backend, tmp_path: Path
) -> None:
    service = backend.service(Settings(data_storage_path=tmp_path / "unused"))
    service.add_memory(
        AddMemoryRequest.build(user_id="alice", user_input="exchange text may hold \x00", agent_response="ok")
    )
    attempts = [
        lambda: service.add_memory(
            AddMemoryRequest.build(
                user_id="alice",
                user_input="hi",
                agent_response="ok",
                facts=[{"content": "likes \x00 tea", "category": "preference", "confidence": 0.9}],
            )
        ),
        lambda: service.add_memory(
            AddMemoryRequest.build(user_id="alice", user_input="hi", agent_response="ok", profile={"topOfMind": "\x00"})
        ),
        lambda: service.add_fact(AddFactRequest.build(user_id="alice", content="likes \x00 tea")),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInput, match="U\\+0000"):
            attempt()
    exported = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    exported["memory"]["user"]["workContext"]["summary"] = "works at \x00 Acme"
    with pytest.raises(InvalidInput, match="memory.user.workContext.summary"):
        service.import_memory(ImportRequest.build(user_id="bob", data=exported))
    assert len(service.store.read_pages(USER).pages) == 1 and service.store.list_users() == ["alice"]
    fact = {"content": "likes green tea", "category": "preference", "confidence": 0.9}
    service.add_memory(AddMemoryRequest.build(user_id="alice", user_input="tea", agent_response="ok", facts=[fact]))
    assert [f.content for f in service.store.read_document(USER).facts] == ["likes green tea"]
    service.close()


def test_background_writes_never_bring_erased_memory_back_on_this_backend(backend: Backend) -> None:
    store, other = backend.store(), backend.store()  # `other` as another process would see it
    alice = Scope("alice")
    store.append_page(alice, make_page(0))
    read_before_the_erase = store.read_pages(alice).generation
    store.write_document(alice, MemoryDocument(facts=[Fact(id="fact_00000001", content="old", confidence=0.9)]))

    other.erase(alice)
    with pytest.raises(MemoryGone):
        store.update_document(alice, lambda document: document, create=False)
    assert store.list_users() == [] and other.list_users() == []

    other.append_page(alice, make_page(1))  # memory begun anew
    with pytest.raises(MemoryGone):
        store.update_document(alice, lambda document: document, create=False, log_generation=read_before_the_erase)
    assert store.read_document(alice).facts == [] and [p.page_id for p in store.read_pages(alice).pages] == [
        "page_0001"
    ]
    # Work on the memory as it is now goes through.
    fresh = store.read_pages(alice).generation
    store.update_document(alice, lambda document: document, create=False, log_generation=fresh)


def test_host_facts_are_applied_once_even_when_a_crash_cut_the_add_in_two_on_this_backend(
    backend: Backend, tmp_path: Path
) -> None:
    settings = Settings(data_storage_path=tmp_path / "unused")
    service = backend.service(settings)
    fact = {"content": "Alice keeps bees", "category": "context", "confidence": 0.95}
    added = service.add_memory(
        AddMemoryRequest.build(user_id="alice", user_input="I keep bees", agent_response="nice", facts=[fact])
    )
    assert [f.content for f in added.structured.facts_added] == ["Alice keeps bees"]  # type: ignore[union-attr]
    # What a crash between an add's two writes leaves: the page, carrying its facts, and no more.
    cut = StoredPage(
        page_id="page_cut",
        user_input="I moved to Berlin",
        agent_response="ok",
        timestamp="2026-01-01T00:00:00Z",
        host_memory=HostMemory(facts=[HostFact(content="Alice lives in Berlin", category="context", confidence=0.9)]),
    )
    backend.store().append_page(Scope("alice"), cut)

    for _restart in range(2):
        restarted = backend.service(settings)
        restarted.start()
        wait_until(lambda: not any(t.name == "memory-resume" for t in threading.enumerate()), 10, "resume")
        restarted.close()

    document = backend.store().read_document(Scope("alice"))
    assert sorted(f.content for f in document.facts) == ["Alice keeps bees", "Alice lives in Berlin"]
    assert document.analysis.hostBefore == 2
    [page] = [p for p in backend.store().read_pages(Scope("alice")).pages if p.page_id == "page_cut"]
    assert isinstance(page, StoredPage) and page.host_memory == cut.host_memory


# --- PostgreSQL only ------------------------------------------------------------------------


def test_postgres_reads_and_writes_of_one_document_never_deadlock_on_a_pool_of_one(pg: PostgresBackend) -> None:
    """Was: read_document held the in-process document lock while it waited for a connection,
    and update_document held a connection while it took that lock: with a pool of one they
    waited for each other until the pool timeout."""
    from memory_mcp.store.postgres.backend import PostgresStore

    store = PostgresStore(pg.dsn, schema=pg.schema, max_connections=1, pool_timeout=30)
    pg.opened.append(store)
    alice = Scope("alice")
    store.write_document(alice, MemoryDocument())
    errors: list[BaseException] = []

    def keep(work: Any) -> None:
        try:
            for n in range(150):
                work(n)
        except BaseException as exc:  # noqa: BLE001 (reported in the test's thread below)
            errors.append(exc)

    writer = threading.Thread(
        target=keep, args=(lambda n: store.update_document(alice, lambda d: d.model_copy(update={"version": f"{n}"})),)
    )
    reader = threading.Thread(target=keep, args=(lambda n: store.read_document(alice),))
    started = time.monotonic()
    for thread in (writer, reader):
        thread.start()
    for thread in (writer, reader):
        thread.join(60)

    assert not writer.is_alive() and not reader.is_alive(), "deadlocked"
    assert errors == [] and time.monotonic() - started < 30
    assert store.read_document(alice).version == "149"


def test_postgres_migrations_are_recorded_once_and_concurrent_first_starts_agree(pg: PostgresBackend) -> None:
    from memory_mcp.store.postgres.migrations import LATEST_VERSION

    stores: list[Any] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            stores.append(pg.store())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == [] and len(stores) == 4
    versions = pg.sql("SELECT version FROM {schema}.schema_migrations ORDER BY version")
    assert [row[0] for row in versions] == list(range(1, LATEST_VERSION + 1))
    tables = pg.sql("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", [pg.schema])
    assert [row[0] for row in tables] == [
        "documents",
        "index_snapshots",
        "page_directories",
        "page_vectors",
        "pages",
        "schema_migrations",
        "scopes",
    ]
    pg.store()  # and once more, with nothing to do
    assert len(pg.sql("SELECT version FROM {schema}.schema_migrations")) == LATEST_VERSION


def test_postgres_refuses_a_schema_from_a_newer_release(pg: PostgresBackend) -> None:
    pg.store()
    pg.sql("INSERT INTO {schema}.schema_migrations (version, name) VALUES (999, 'from the future')")
    with pytest.raises(StorageError, match="version 999, newer than this memory-mcp"):
        pg.store()


def test_postgres_stores_pages_and_documents_as_documented(pg: PostgresBackend) -> None:
    store = pg.store()
    store.append_pages(Scope("alice", "coder"), [make_page(0), make_page(1)])
    stored = store.write_document(USER, MemoryDocument(facts=[Fact(id="f1", content="tea", confidence=0.9)]))

    rows = pg.sql("SELECT user_id, agent_name, position, page_id, page::text FROM {schema}.pages ORDER BY seq")
    assert [row[:4] for row in rows] == [("alice", "coder", 0, "page_0000"), ("alice", "coder", 1, "page_0001")]
    assert Page.model_validate_json(rows[1][4]) == make_page(1)
    (document,) = pg.sql("SELECT document FROM {schema}.documents WHERE user_id = 'alice' AND agent_name = ''")[0]
    assert document == stored.model_dump(mode="json", exclude_none=True)  # DeerFlow's shape, as in memory.json
    assert "validTo" not in document["facts"][0]


def test_pages_whose_id_is_already_stored_are_refused_and_nothing_is_written(backend: Backend) -> None:
    """Imports bring pages from elsewhere: two at once must not store a page twice."""
    store, other = backend.store(), backend.store()
    store.append_page(USER, make_page(1))
    with pytest.raises(StorageError, match="page_0001 .*already stored.*nothing was written"):
        other.append_pages(USER, [make_page(2), make_page(1)])  # another instance, which never read the log
    assert ids(backend.store().read_pages(USER).pages) == ["page_0001"]
    store.append_page(USER, make_page(2))
    assert ids(store.read_pages(USER).pages) == ["page_0001", "page_0002"]


def test_postgres_releases_the_turn_when_the_holding_connection_is_killed(pg: PostgresBackend) -> None:
    from memory_mcp.store.postgres.migrations import advisory_key

    first, second = pg.store(), pg.store()
    first.append_page(USER, make_page(0))
    key = advisory_key("update", pg.schema, "alice", "") & 0xFFFFFFFFFFFFFFFF
    with first.exclusive_updates(USER) as held:
        assert held
        holders = pg.sql(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid::bigint = %s"
            " AND objid::bigint = %s AND objsubid = 1",
            [key >> 32, key & 0xFFFFFFFF],
        )
        assert len(holders) == 1  # an advisory lock on the scope's hash, held by one session
        with second.exclusive_updates(USER) as other:
            assert other is False
        pg.sql("SELECT pg_terminate_backend(%s)", [holders[0][0]])
        with second.exclusive_updates(USER, wait=5) as other:
            assert other is True
    # Leaving the block with the connection gone is not an error; the turn is free again.
    with first.exclusive_updates(USER) as again:
        assert again is True


def test_postgres_recovers_when_its_pooled_connections_are_killed(pg: PostgresBackend) -> None:
    store = pg.store()
    store.append_page(USER, make_page(0))
    store.write_document(USER, MemoryDocument())
    pg.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'memory-mcp'"
    )
    time.sleep(0.2)
    assert ids(store.read_pages(USER).pages) == ["page_0000"]  # read: retried on a new connection
    pg.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'memory-mcp'"
    )
    time.sleep(0.2)
    store.append_page(USER, make_page(1))  # append: retried, and not twice
    store.update_document(USER, increment)
    assert ids(pg.store().read_pages(USER).pages) == ["page_0000", "page_0001"]
    assert counter(pg.store().read_document(USER)) == 1


def _check_no_secret(message: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in message, message
    assert "\n" not in message


def test_postgres_errors_say_what_failed_and_never_show_the_password(schemas: Schemas) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from memory_mcp.store.postgres.backend import PostgresStore

    params = conninfo_to_dict(postgres_dsn())
    real = params.get("password") or "no-password-set"
    wrong = "Wr0ng-Secret-Passw0rd"
    schema = schemas.new()

    bad_password = make_conninfo(**{**params, "password": wrong})
    with pytest.raises(StorageError) as caught:
        PostgresStore(bad_password, schema=schema)
    message = str(caught.value)
    assert "could not connect to PostgreSQL at postgresql://" in message
    _check_no_secret(message, wrong, real)

    url = f"postgresql://{params.get('user')}:{wrong}@127.0.0.1:1/{params.get('dbname')}"
    with pytest.raises(StorageError, match="127.0.0.1:1") as caught:
        PostgresStore(url, schema=schema, connect_timeout=2)
    _check_no_secret(str(caught.value), wrong)

    for garbage in (f"postgresql://u:{wrong}@host:notaport/db", f"host=x password={wrong} nonsense"):
        with pytest.raises(StorageError) as caught:
            PostgresStore(garbage, schema=schema)
        _check_no_secret(str(caught.value), wrong)

    store = PostgresStore(postgres_dsn(), schema=schema, statement_timeout=0.2)
    try:
        assert real not in repr(store) and real not in store.location
        with schemas.admin() as holder:  # hold the document row so the update times out
            store.write_document(USER, MemoryDocument())
            holder.execute("BEGIN")
            holder.execute(f'SELECT * FROM "{schema}".documents FOR UPDATE')
            with pytest.raises(StorageError, match="statement_timeout") as caught:
                store.update_document(USER, increment)
            holder.execute("ROLLBACK")
        _check_no_secret(str(caught.value), real)
    finally:
        store.close()


def test_a_page_erased_by_another_instance_is_never_read_back_from_a_log_read_before(backend: Backend) -> None:
    """Pages are read back when asked for: after an erase, a log read before it must give neither
    the erased page nor (positions having moved up) another page in its place."""
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(4)])
    before = store.read_pages(USER)
    assert before.pages[0] == make_page(0)  # read back once, and kept

    backend.store().erase_pages(USER, ["page_0001"], lambda document, _positions: document)

    assert before.pages[0] == make_page(0) and before.pages.ids[1] == "page_0001"  # what was read stays read
    for position in (1, 2):
        with pytest.raises(MemoryGone, match="erased"):
            before.pages[position]
    assert ids(store.read_pages(USER).pages) == ["page_0000", "page_0002", "page_0003"]


def test_a_store_says_whether_a_saved_index_is_there_to_read(backend: Backend) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(3)])
    assert not store.has_index_snapshot(USER)
    assert store.write_index_snapshot(USER, b"an index", store.read_pages(USER).generation)
    assert store.has_index_snapshot(USER) and not store.has_index_snapshot(Scope("bob"))

    store.erase_pages(USER, ["page_0001"], lambda document, _positions: document)  # it held that page's words

    assert not store.has_index_snapshot(USER)


def test_a_log_read_before_an_erase_by_the_same_store_gives_none_of_its_pages_back(backend: Backend) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(4)])
    before = store.read_pages(USER)
    assert before.pages.pick([0, 1]) == [make_page(0), make_page(1)]  # read back, and kept

    store.erase_pages(USER, ["page_0001"], lambda document, _positions: document)

    for position in (0, 1):
        with pytest.raises(MemoryGone, match="erased"):
            before.pages[position]


def test_postgres_reads_a_long_log_by_its_columns_and_fetches_pages_when_asked(pg: PostgresBackend) -> None:
    from memory_mcp.store.postgres.pages import WHOLE_PAGES_BELOW

    pages = [
        make_page(n).model_copy(
            update={"thread_id": f"t{n % 3}" if n % 2 else None, "timestamp": f"2024-05-{n % 28 + 1:02d}"}
        )
        for n in range(WHOLE_PAGES_BELOW + 5)
    ]
    pages[7] = pages[7].model_copy(update={"thread_id": "nul\x00thread"})  # text cannot hold it: fetched whole
    pg.store().append_pages(USER, pages)
    pg.sql('UPDATE {schema}.pages SET page = \'{"page_id": "x"}\' WHERE position = 3')  # damaged by hand

    page_log = pg.store().read_pages(USER)

    assert list(page_log.pages.ids) == [page.page_id for page in pages]
    assert list(page_log.pages.threads) == [page.thread_id or "" for page in pages]
    assert list(page_log.pages.timestamps) == [page.timestamp for page in pages]
    assert page_log.pages.pick([7, 1000, 0]) == [pages[7], pages[1000], pages[0]]
    with pytest.raises(StorageError, match="at position 3 is not a valid page record"):
        page_log.pages[3]  # a row changed by hand is checked when it is read


def test_postgres_reads_a_large_saved_index_again_and_again(pg: PostgresBackend) -> None:
    """A large snapshot comes a part at a time (libpq would keep a buffer as large as the whole for
    the lifetime of a pooled connection): it reads whole, every time, and the reads after it go on
    as before."""
    from memory_mcp.store.postgres.derived import SNAPSHOT_PART_BYTES

    store = pg.store()
    store.append_page(USER, make_page(0))
    data = os.urandom(3 * SNAPSHOT_PART_BYTES + 1)
    assert store.write_index_snapshot(USER, data, store.read_pages(USER).generation)

    for n in range(1, 4):
        assert store.read_index_snapshot(USER) == data
        store.append_page(USER, make_page(n))
        assert ids(store.read_pages(USER).pages)[-1] == f"page_{n:04d}"
    assert pg.sql(
        "SELECT attstorage FROM pg_attribute WHERE attrelid = '{schema}.index_snapshots'::regclass AND attname = 'data'"
    ) == [("e",)], "stored as it is: a start does not decompress it"


def test_postgres_migration_gives_pages_stored_before_it_their_columns(pg: PostgresBackend) -> None:
    pages = [make_page(0).model_copy(update={"thread_id": "t"}), make_page(1), make_page(2)]
    pg.store().append_pages(USER, pages)
    pg.sql("ALTER TABLE {schema}.pages DROP COLUMN thread_id, DROP COLUMN said_at")
    pg.sql("DELETE FROM {schema}.schema_migrations WHERE version = 4")  # as a schema from before it

    pg.store()  # migrates it
    rows = pg.sql("SELECT thread_id, said_at FROM {schema}.pages ORDER BY position")

    assert rows == [(page.thread_id, page.timestamp) for page in pages]


def test_postgres_reports_a_damaged_page_row_by_its_position(pg: PostgresBackend) -> None:
    store = pg.store()
    store.append_pages(USER, [make_page(0), make_page(1), make_page(2)])
    pg.sql('UPDATE {schema}.pages SET page = \'{"page_id": "x"}\' WHERE position = 1')
    for _ in range(2):
        with pytest.raises(StorageError, match="at position 1 is not a valid page record"):
            pg.store().read_pages(USER)


def test_postgres_append_whose_commit_was_not_acknowledged_is_not_stored_twice(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    import psycopg

    store = pg.store()
    store.append_page(USER, make_page(0))
    real_connection = store._pool.connection  # type: ignore[attr-defined]
    lost: list[str] = []

    class AcknowledgementLost:
        """The append commits, then the connection dies before the client hears so."""

        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

        def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            cursor = self._conn.execute(query, *args, **kwargs)
            if "INSERT INTO" in str(query) and "pages" in str(query) and not lost:
                lost.append("once")
                self._conn.pgconn.finish()
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return cursor

    @contextlib.contextmanager
    def flaky_connection(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_connection(*args, **kwargs) as conn:
            yield AcknowledgementLost(conn)

    monkeypatch.setattr(store._pool, "connection", flaky_connection)  # type: ignore[attr-defined]
    store.append_pages(USER, [make_page(1), make_page(2)])

    assert lost == ["once"]
    assert ids(pg.store().read_pages(USER).pages) == ["page_0000", "page_0001", "page_0002"]


# --- page vectors -----------------------------------------------------------------------------


def vector(n: int, model: str = "m1") -> PageVector:
    return PageVector(f"page_{n:04d}", model, 0.01 * (n + 1), bytes([n % 128, 1, 255, 0]))


def test_page_vectors_are_read_on_from_a_mark_and_go_with_their_scope(backend: Backend) -> None:
    store = backend.store()
    store.append_vectors(USER, [vector(0)])
    assert store.read_vectors(USER, 0)[0] == [], "no pages: nothing stored"

    store.append_pages(USER, [make_page(n) for n in range(3)])
    store.append_vectors(USER, [vector(0), vector(1)])
    first, mark = store.read_vectors(USER, 0)
    assert first == [vector(0), vector(1)]
    store.append_vectors(USER, [vector(2, "m2")])
    other = backend.store()  # another process sees them too, and reads on from the mark
    assert other.read_vectors(USER, mark)[0] == [vector(2, "m2")]
    assert other.read_vectors(USER, 0)[0] == [vector(0), vector(1), vector(2, "m2")]

    store.erase(USER)
    assert backend.store().read_vectors(USER, 0)[0] == []
    store.append_vectors(USER, [vector(1)])
    assert backend.store().read_vectors(USER, 0)[0] == [], "vectors of an erased scope are not stored"


# --- erasing pages ------------------------------------------------------------------------------


def test_erase_pages_removes_them_and_their_vectors_renumbers_and_changes_the_document_at_once(
    backend: Backend,
) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n, text=f"secret {n}" if n in (1, 3) else None) for n in range(6)])
    store.append_vectors(USER, [vector(n) for n in range(6)])
    before = store.read_pages(USER).generation
    seen: list[list[int]] = []

    def change(document: MemoryDocument, positions: list[int]) -> MemoryDocument:
        seen.append(positions)
        return document.model_copy(update={"facts": [Fact(id="fact_00000001", content="kept", confidence=0.9)]})

    store.erase_pages(USER, ["page_0003", "page_0001", "page_9999"], change)

    assert seen == [[1, 3]], "the change is told the positions the pages had, ascending; unknown ids skipped"
    other = backend.store()  # as another process finds it
    log = other.read_pages(USER)
    assert ids(log.pages) == ["page_0000", "page_0002", "page_0004", "page_0005"]
    assert log.generation != before
    assert [v.page_id for v in other.read_vectors(USER, 0)[0]] == ids(log.pages)
    assert [f.content for f in other.read_document(USER).facts] == ["kept"]
    store.append_page(USER, make_page(6))
    assert ids(backend.store().read_pages(USER).pages)[-2:] == ["page_0005", "page_0006"]

    unchanged = store.read_pages(USER).generation
    store.erase_pages(USER, ["page_0001"], change)  # again: nothing left to erase, the log is the same
    assert seen[-1] == []
    assert store.read_pages(USER).generation == unchanged
    if isinstance(backend, JsonBackend):
        stored = b"".join(path.read_bytes() for path in backend.root.rglob("*") if path.is_file())
    else:
        stored = repr(backend.sql("SELECT page::text FROM {schema}.pages")).encode()
    assert b"secret" not in stored, "erased text is gone from storage"

    store.erase(USER)
    with pytest.raises(MemoryGone):
        store.erase_pages(USER, ["page_0000"], change)


def test_pages_appended_while_others_are_erased_are_all_kept_in_order(backend: Backend) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(300)])
    appender = backend.store()
    added: list[str] = []

    def append_many() -> None:
        for n in range(300, 360):
            appender.append_page(USER, make_page(n))
            added.append(f"page_{n:04d}")

    thread = threading.Thread(target=append_many)
    thread.start()
    for start in range(0, 200, 20):
        store.erase_pages(USER, [f"page_{n:04d}" for n in range(start, start + 20)], lambda d, _p: d)
    thread.join()

    expected = [f"page_{n:04d}" for n in range(200, 300)] + added
    assert ids(backend.store().read_pages(USER).pages) == expected
    assert ids(store.read_pages(USER).pages) == expected
    assert ids(appender.read_pages(USER).pages) == expected


def test_a_reader_of_vectors_misses_none_stored_after_others_were_erased(backend: Backend) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(3)])
    store.append_vectors(USER, [vector(0), vector(1)])
    reader = backend.store()
    _, mark = reader.read_vectors(USER, 0)

    # Each erase rewrites the file (a file system soon hands a freed inode number out again), and
    # here what follows it brings the file back to the length the reader's mark points at.
    for n in range(5):
        fact = PageVector(f"fact-{n}", "m1#fact", vector(n).scale, vector(n).components)
        store.append_vectors(USER, [fact], of_pages=False)
        _, mark = reader.read_vectors(USER, mark)
        store.erase_vectors(USER, "m1#fact", [fact.page_id])
        store.erase_vectors(USER, "m1#fact", ["fact-never-stored"])  # nothing to erase: nothing changes
        store.append_vectors(USER, [vector(n % 3), vector((n + 1) % 3)])
        since, mark = reader.read_vectors(USER, mark)

        assert vector(n % 3) in since and vector((n + 1) % 3) in since, "nothing stored after the mark is missed"
        assert all(v.model == "m1" for v in since), "no erased or damaged vector comes back"
    later = [m for n in range(5) for m in (n % 3, (n + 1) % 3)]
    assert backend.store().read_vectors(USER, 0)[0] == [vector(m) for m in [0, 1, *later]]


def test_vectors_of_pages_erased_meanwhile_are_not_stored_and_erasing_vectors_spares_pages(
    backend: Backend,
) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(0), make_page(1)])
    store.erase_pages(USER, ["page_0001"], lambda document, _positions: document)

    store.append_vectors(USER, [vector(0), vector(1)])  # computed before the erase, stored after it
    store.append_vectors(USER, [PageVector("page_0000", "m1#fact", 0.5, bytes([1, 2, 3, 4]))], of_pages=False)
    store.erase_vectors(USER, "m1#fact", ["page_0000"])  # another model's vector, under a page's id

    assert store.read_vectors(USER, 0)[0] == [vector(0)]
    assert ids(backend.store().read_pages(USER).pages) == ["page_0000"]


def test_a_saved_word_index_lives_only_as_long_as_the_log_it_was_made_from(backend: Backend) -> None:
    store = backend.store()
    assert store.read_index_snapshot(USER) is None
    store.append_pages(USER, [make_page(n) for n in range(4)])
    generation = store.read_pages(USER).generation
    assert store.write_index_snapshot(USER, b"index of four pages", generation)
    other = backend.store()  # as another process finds it
    other.read_pages(USER)
    assert other.read_index_snapshot(USER) == b"index of four pages"
    store.append_page(USER, make_page(4))  # growing the log keeps it: the reader checks what it covers
    assert store.write_index_snapshot(USER, b"index of five pages", store.read_pages(USER).generation)
    assert other.read_index_snapshot(USER) == b"index of five pages"

    store.erase_pages(USER, ["page_0002"], lambda document, _: document)
    assert other.read_index_snapshot(USER) is None, "erasing pages takes the index holding their words"
    assert not other.write_index_snapshot(USER, b"index made before the erase", generation)
    assert store.read_index_snapshot(USER) is None

    assert store.write_index_snapshot(USER, b"index after the erase", store.read_pages(USER).generation)
    stale = store.read_pages(USER).generation
    store.erase(USER)
    assert other.read_index_snapshot(USER) is None, "forgetting takes it too"
    store.append_page(USER, make_page(9))
    assert not other.write_index_snapshot(USER, b"index of the forgotten log", stale)
    assert backend.store().read_index_snapshot(USER) is None


def test_a_word_index_of_forgotten_memory_never_lands_in_memory_begun_again_without_exchanges(
    backend: Backend,
) -> None:
    store = backend.store()
    store.append_pages(USER, [make_page(n) for n in range(3)])
    stale = store.read_pages(USER).generation
    other = backend.store()  # another process forgets the user, who then states a fact: no exchange yet
    other.erase(USER)
    other.write_document(USER, MemoryDocument())

    assert not store.write_index_snapshot(USER, b"index of the forgotten exchanges", stale)
    assert backend.store().read_index_snapshot(USER) is None


def test_page_count_is_the_length_of_the_log_without_loading_it(backend: Backend) -> None:
    store = backend.store()
    assert store.page_count(USER) == 0
    store.append_pages(USER, [make_page(n) for n in range(5)])
    other = backend.store()  # as another process counts them, having read nothing
    assert other.page_count(USER) == 5
    store.erase_pages(USER, ["page_0001"], lambda document, _: document)
    assert other.page_count(USER) == len(other.read_pages(USER).pages) == 4
    store.erase(USER)
    assert other.page_count(USER) == 0


def test_host_memory_from_says_whether_a_page_from_there_on_carries_host_memory(backend: Backend) -> None:
    store = backend.store()
    assert not store.host_memory_from(USER, 0)
    host = HostMemory(facts=[HostFact(content="Alice writes Go", category="knowledge", confidence=0.9)])
    carrying = StoredPage(**make_page(2).model_dump(), host_memory=host)
    store.append_pages(USER, [make_page(0), make_page(1), carrying, make_page(3)])
    other = backend.store()  # as another process, having read nothing
    for asking in (store, other):
        assert [asking.host_memory_from(USER, start) for start in range(5)] == [True, True, True, False, False]
    store.erase_pages(USER, ["page_0001"], lambda document, _: document)
    for asking in (store, other, backend.store()):  # the tally another process kept sees the erase
        assert [asking.host_memory_from(USER, start) for start in range(3)] == [True, True, False]


def test_postgres_replaces_a_memory_in_one_transaction(pg: PostgresBackend) -> None:
    store = pg.store()
    store.append_pages(USER, [make_page(0), make_page(1)])
    store.write_document(USER, MemoryDocument())
    # The pages go in, then the document is refused (U+0000 cannot be stored as jsonb): all of it rolls back.
    unstorable = MemoryDocument(facts=[Fact(id="fact_00000001", content="a\x00b", category="context", confidence=1)])
    clashing = [(USER, unstorable, [make_page(2)])]
    with pytest.raises(StorageError):
        store.replace(USER, clashing)
    assert ids(pg.store().read_pages(USER).pages) == ["page_0000", "page_0001"], "the old memory stands whole"
    store.replace(USER, [(USER, MemoryDocument(), [make_page(3)]), (Scope("alice", "coder"), MemoryDocument(), [])])
    fresh = pg.store()
    assert ids(fresh.read_pages(USER).pages) == ["page_0003"] and fresh.list_agents("alice") == ["coder"]
