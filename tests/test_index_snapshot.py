"""The saved word index: a restart finds exactly what a fresh build finds, and a snapshot that is
damaged, stale (its log rewritten, or the memory forgotten and written again) or written by several
servers at once is never trusted wrongly. Through the core API, over the JSON files (the store's
side, on both backends, is in tests/store/test_store_backends.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import threading
from pathlib import Path

import pytest
from word_index_history import QUERIES, SIZE, USER, conversation

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest, Page, RetrieveMemoryRequest
from memory_mcp.recall.saved_index import MAGIC, SnapshotKeeper, UnusableSnapshot, decode
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore
from memory_mcp.store.files.layout import INDEX_FILE


def service_over(data: Path) -> MemoryService:
    return MemoryService(Settings(data_storage_path=data))


def rankings(service: MemoryService) -> list[list[tuple[str, float]]]:
    return [
        [
            (found.page_id, found.score)
            for found in service.search_exchanges(
                RetrieveMemoryRequest.build(user_id=USER.user_id, query=query, max_results=30)
            )
        ]
        for query in QUERIES
    ]


def found_after_a_start(data: Path) -> list[list[tuple[str, float]]]:
    """What a service started over `data` finds (and what it saves when it closes)."""
    service = service_over(data)
    try:
        return rankings(service)
    finally:
        service.close()


def built_afresh(data: Path) -> list[list[tuple[str, float]]]:
    """What a service finds with no snapshot to start from (the snapshot set aside meanwhile)."""
    snapshot = data / "users" / "alice" / INDEX_FILE
    kept = snapshot.read_bytes() if snapshot.exists() else None
    snapshot.unlink(missing_ok=True)
    try:
        return found_after_a_start(data)
    finally:
        if kept is not None:
            snapshot.write_bytes(kept)


def saved(data: Path, pages: int) -> Path:
    """A memory of `pages` exchanges whose word index was built and saved once."""
    service = service_over(data)
    service.store.append_pages(USER, conversation(pages))
    rankings(service)
    service.close()  # waits for the save
    snapshot = data / "users" / "alice" / INDEX_FILE
    assert snapshot.exists()
    return snapshot


def sealed(body: bytes) -> bytes:
    """A snapshot body with the trailer its writer would give it: damage the checksum cannot see."""
    return body + hashlib.sha256(body).digest()


def opened(data: bytes) -> tuple[bytes, dict, int]:
    """The body, the header, and where the terms' length comes (just after the header)."""
    body = data[:-32]
    (length,) = struct.unpack_from("<I", body, len(MAGIC))
    start = len(MAGIC) + 4
    return body, json.loads(body[start : start + length]), start + length


def cut_after_its_header(data: bytes) -> bytes:
    body, _, end = opened(data)
    return sealed(body[:end])


def a_header_that_is_a_list(data: bytes) -> bytes:
    body, _, end = opened(data)
    return sealed(MAGIC + struct.pack("<I", 2) + b"[]" + body[end:])


def postings_offsets_running_backwards(data: bytes) -> bytes:
    body, _, end = opened(bytearray(data))
    (terms_length,) = struct.unpack_from("<I", body, end)
    struct.pack_into("<q", body, end + 4 + terms_length + 8, 2**40)  # the second term's start
    return sealed(bytes(body))


def postings_held_at_another_width_than_said(data: bytes) -> bytes:
    body, header, end = opened(bytearray(data))
    (terms_length,) = struct.unpack_from("<I", body, end)
    flags = end + 4 + terms_length + 8 * (header["terms"] + 1)
    body[flags] ^= 1  # the first term's documents said wide where they are narrow, or the other way
    return sealed(bytes(body))


def a_thread_term_past_the_terms(data: bytes) -> bytes:
    body, header, end = opened(bytearray(data))
    (terms_length,) = struct.unpack_from("<I", body, end)
    postings = sum(header["postings"])
    threads = 8 * (header["terms"] + 1) + postings + 8 * header["pages"] + 24 * len(header["threads"])
    struct.pack_into("<i", body, end + 4 + terms_length + threads, header["terms"] + 5)  # the first counted term
    return sealed(bytes(body))


@pytest.fixture
def told(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="memory_mcp.recall.saved_index")
    return caplog


def test_a_restart_finds_from_the_saved_index_and_the_pages_since_what_a_fresh_build_finds(
    tmp_path: Path, told: pytest.LogCaptureFixture
) -> None:
    saved(tmp_path, SIZE)
    adding = service_over(tmp_path)  # more exchanges, continuing the threads, after the save
    for page in conversation(40, start=SIZE):
        adding.add_memory(
            AddMemoryRequest.build(
                user_id="alice",
                user_input=page.user_input,
                agent_response=page.agent_response,
                thread_id=page.thread_id,
            )
        )
    adding.close()

    found = found_after_a_start(tmp_path)

    assert f"{SIZE} exchanges from its snapshot" in told.text
    assert found == built_afresh(tmp_path)
    assert all(found), "each query finds exchanges"


def test_a_server_closed_after_more_exchanges_leaves_an_index_that_covers_them(
    tmp_path: Path, told: pytest.LogCaptureFixture
) -> None:
    saved(tmp_path, SIZE)
    running = service_over(tmp_path)
    running.store.append_pages(USER, conversation(30, start=SIZE))
    rankings(running)  # its index grows by 30, fewer than a save in the background waits for
    running.close()

    found = found_after_a_start(tmp_path)

    assert f"{SIZE + 30} exchanges from its snapshot" in told.text
    assert found == built_afresh(tmp_path)


def test_a_snapshot_saved_after_a_restart_keeps_the_threads_the_restart_did_not_touch(
    tmp_path: Path, told: pytest.LogCaptureFixture
) -> None:
    saved(tmp_path, SIZE)
    restarted = service_over(tmp_path)  # enough exchanges of another thread for a new save
    elsewhere = conversation(SnapshotKeeper.REFRESH_PAGES, start=SIZE)
    restarted.store.append_pages(USER, [page.model_copy(update={"thread_id": "elsewhere"}) for page in elsewhere])
    rankings(restarted)
    restarted.close()
    again = service_over(tmp_path)  # and then the first threads go on
    again.store.append_pages(USER, conversation(40, start=SIZE + SnapshotKeeper.REFRESH_PAGES))
    found = rankings(again)
    again.close()

    assert f"{SIZE + SnapshotKeeper.REFRESH_PAGES} exchanges from its snapshot" in told.text
    assert found == built_afresh(tmp_path)


def held(snapshot: Path, pages: list[Page]) -> tuple[dict[str, list], dict[str, tuple]]:
    """What a snapshot holds, whatever the order of its entries (pages added one at a time lend
    their terms to earlier entries later than a build does): each term's (document, weight) pairs,
    sorted; each thread's newest page, its counts, and the document its slot in each term points at."""
    state = decode(snapshot.read_bytes(), pages).state()
    ends = struct.unpack(f"<{len(state.terms) + 1}q", state.offsets)
    entries = struct.unpack(f"<{len(state.entries) // 4}f", state.entries)
    postings = {term: entries[2 * ends[n] : 2 * ends[n + 1]] for n, term in enumerate(state.terms)}
    threads = {
        thread: (document, counts, {term: postings[term][2 * slot] for term, slot in slots.items()})
        for thread, (document, counts, slots) in state.newest_by_thread.items()
    }
    return {term: sorted(zip(pairs[::2], pairs[1::2], strict=True)) for term, pairs in postings.items()}, threads


def test_a_snapshot_saved_after_a_restart_holds_what_one_of_a_fresh_build_holds(tmp_path: Path) -> None:
    """Threads a page was added to since the restart, threads none was, and a new thread."""
    snapshot = saved(tmp_path, SIZE)
    restarted = service_over(tmp_path)
    more = conversation(20, start=SIZE) + [
        page.model_copy(update={"thread_id": "new-thread"}) for page in conversation(3, start=SIZE + 20)
    ]
    restarted.store.append_pages(USER, more)
    rankings(restarted)
    restarted.close()  # saves the restored index, grown by 23
    pages = service_over(tmp_path).store.read_pages(USER).pages
    after_restart = held(snapshot, pages)
    snapshot.unlink()

    found_after_a_start(tmp_path)  # builds from the exchanges and saves

    assert len(after_restart[1]) == 37 + 1
    assert after_restart == held(snapshot, pages)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x01]) + data[len(data) // 2 + 1 :],
        lambda data: data[: len(data) // 2],
        lambda data: b"not an index at all",
        lambda data: b"",
    ],
    ids=["a flipped bit", "cut in half", "another file", "empty"],
)
def test_a_damaged_snapshot_is_not_used_and_a_sound_one_takes_its_place(
    tmp_path: Path, told: pytest.LogCaptureFixture, damage: object
) -> None:
    snapshot = saved(tmp_path, SIZE)
    expected = built_afresh(tmp_path)
    snapshot.write_bytes(damage(snapshot.read_bytes()))  # type: ignore[operator]

    found = found_after_a_start(tmp_path)

    assert "is not used" in told.text and "from its snapshot" not in told.text
    assert found == expected
    pages = service_over(tmp_path).store.read_pages(USER).pages
    assert len(decode(snapshot.read_bytes(), pages)) == SIZE, "saved again, whole"


@pytest.mark.parametrize(
    "damage",
    [
        cut_after_its_header,
        a_header_that_is_a_list,
        postings_offsets_running_backwards,
        postings_held_at_another_width_than_said,
        a_thread_term_past_the_terms,
    ],
)
def test_a_snapshot_its_writer_got_wrong_is_not_used_either(
    tmp_path: Path, told: pytest.LogCaptureFixture, damage: object
) -> None:
    test_a_damaged_snapshot_is_not_used_and_a_sound_one_takes_its_place(tmp_path, told, damage)


def test_a_snapshot_of_a_rewritten_log_is_never_used(tmp_path: Path, told: pytest.LogCaptureFixture) -> None:
    snapshot = saved(tmp_path, SIZE)
    old = snapshot.read_bytes()
    service = service_over(tmp_path)
    service.store.append_page(
        USER,
        Page(
            page_id="page_secret",
            user_input="my zanzibar passport number",
            agent_response="noted",
            timestamp="2025-04-01T10:00:00Z",
        ),
    )
    rankings(service)
    service.store.erase_pages(USER, ["page_00007", "page_secret"], lambda document, _: document)
    service.close()
    assert not snapshot.exists(), "erasing pages takes the saved index, which holds their words"

    snapshot.write_bytes(old)  # a stale copy put back: the log no longer starts with those pages
    restarted = service_over(tmp_path)
    found = rankings(restarted)
    zanzibar = restarted.search_exchanges(RetrieveMemoryRequest.build(user_id="alice", query="zanzibar passport"))
    restarted.close()

    assert "made from other exchanges than the log holds now" in told.text
    assert found == built_afresh(tmp_path)
    assert zanzibar == []


def test_a_snapshot_of_forgotten_memory_is_never_used_for_what_is_written_after(
    tmp_path: Path, told: pytest.LogCaptureFixture
) -> None:
    old = saved(tmp_path, SIZE).read_bytes()
    service = service_over(tmp_path)
    service.store.erase(USER)
    service.store.append_pages(USER, conversation(SIZE, start=50_000))  # new exchanges, new ids
    service.close()
    (tmp_path / "users" / "alice" / INDEX_FILE).write_bytes(old)

    found = found_after_a_start(tmp_path)

    assert "made from other exchanges" in told.text
    assert found == built_afresh(tmp_path)
    assert {page_id for ranking in found for page_id, _ in ranking} <= {f"page_{n:05d}" for n in range(50_000, 60_000)}


def test_servers_adding_and_saving_at_once_leave_a_snapshot_that_holds_or_is_refused(tmp_path: Path) -> None:
    first = service_over(tmp_path)
    first.store.append_pages(USER, conversation(SnapshotKeeper.MIN_PAGES))
    first.close()
    errors: list[BaseException] = []

    def server(number: int) -> None:
        try:
            service = service_over(tmp_path)  # a store of its own, as another process has
            for n, page in enumerate(conversation(60, start=100_000 * (number + 1))):
                service.add_memory(
                    AddMemoryRequest.build(
                        user_id="alice", user_input=page.user_input, agent_response=page.agent_response
                    )
                )
                if n % 20 == 0:
                    rankings(service)  # builds (or catches up) its index, and saves it
            service.close()
        except BaseException as exc:
            errors.append(exc)

    servers = [threading.Thread(target=server, args=(number,)) for number in range(3)]
    for each in servers:
        each.start()
    for each in servers:
        each.join()
    assert errors == []

    pages = service_over(tmp_path).store.read_pages(USER).pages
    assert len(pages) == SnapshotKeeper.MIN_PAGES + 180
    snapshot = (tmp_path / "users" / "alice" / INDEX_FILE).read_bytes()
    try:
        covered = len(decode(snapshot, pages))
    except UnusableSnapshot as exc:
        pytest.fail(f"the last snapshot written is a sound one of this log, yet: {exc}")
    assert SnapshotKeeper.MIN_PAGES <= covered <= len(pages)
    found = found_after_a_start(tmp_path)
    assert found == built_afresh(tmp_path)


class _ErasedAfterTheIndexIsRead(JsonStore):
    """A store on which another process forgets an exchange just after the saved index was read
    ahead of the log: the index read is of the exchanges before the erase."""

    def __init__(self, root: Path, erased: str) -> None:
        super().__init__(root)
        self._erased: str | None = erased

    def read_index_snapshot(self, scope: Scope) -> bytes | None:
        data = super().read_index_snapshot(scope)
        if self._erased is not None:
            JsonStore(self.root).erase_pages(scope, [self._erased], lambda document, _positions: document)
            self._erased = None
        return data


def test_an_index_read_ahead_of_exchanges_erased_meanwhile_finds_none_of_them(tmp_path: Path) -> None:
    """Whichever of the log and the erase comes first, the erased exchange is not found, and what
    is found afterwards is what a fresh build finds."""
    saved(tmp_path, SIZE)
    violin = next(page.page_id for page in conversation(SIZE) if "violin" in page.user_input)
    service = MemoryService(Settings(data_storage_path=tmp_path), store=_ErasedAfterTheIndexIsRead(tmp_path, violin))
    try:
        result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="violin lessons"))
    finally:
        service.close()

    assert result.retrieved_pages and violin not in {page.page_id for page in result.retrieved_pages}
    assert found_after_a_start(tmp_path) == built_afresh(tmp_path)


def test_pages_indexed_while_a_save_was_under_way_are_saved_at_close(tmp_path: Path) -> None:
    """A save asked for while another of the same memory is still writing is not started: the
    pages it would have held count as unsaved, and the close saves them."""
    service = service_over(tmp_path)
    writing, release = threading.Event(), threading.Event()
    write = service.store.write_index_snapshot

    def slow_first_write(scope: Scope, data: bytes, generation: int) -> bool:
        if not writing.is_set():
            writing.set()
            release.wait(timeout=60)
        return write(scope, data, generation)

    service.store.write_index_snapshot = slow_first_write  # type: ignore[method-assign]
    service.store.append_pages(USER, conversation(SIZE))
    rankings(service)  # builds the index and starts saving it
    assert writing.wait(timeout=60)
    more = conversation(SnapshotKeeper.REFRESH_PAGES, start=SIZE)
    service.store.append_pages(USER, more)
    rankings(service)  # worth another save, while the first is still writing
    release.set()
    service.close()

    pages = service_over(tmp_path).store.read_pages(USER).pages
    assert len(decode((tmp_path / "users" / "alice" / INDEX_FILE).read_bytes(), pages)) == SIZE + len(more)
