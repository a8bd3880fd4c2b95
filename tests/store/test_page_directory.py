"""The JSON log's page directory: a start reads it instead of parsing every record, but only when
it is whole and made from the bytes the log holds now; an erase takes it with the exchanges."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memory_mcp.base.errors import MemoryGone
from memory_mcp.base.settings import Settings
from memory_mcp.models import Page, RetrieveMemoryRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import PageLog, Scope
from memory_mcp.store.files import page_log as json_store
from memory_mcp.store.files.backend import JsonStore
from memory_mcp.store.files.layout import DIRECTORY_FILE
from memory_mcp.store.page_sequence import DIRECTORY_MIN_PAGES

USER = Scope("alice")
SIZE = DIRECTORY_MIN_PAGES + 20


def make_page(n: int, thread: str | None = None) -> Page:
    return Page(
        page_id=f"page_{n:05d}",
        user_input=f"question number {n} about the {'garden' if n % 7 else 'violin'}",
        agent_response=f"answer number {n}",
        timestamp=f"2024-05-{1 + n % 28:02d}T13:56:00Z",
        thread_id=thread if thread is not None else f"thread-{n % 3}" if n % 4 else None,
    )


def filled(data_dir: Path, count: int = SIZE) -> list[Page]:
    pages = [make_page(n) for n in range(count)]
    JsonStore(data_dir).append_pages(USER, pages)
    return pages


def directory_path(data_dir: Path, scope: Scope = USER) -> Path:
    return JsonStore(data_dir).scope_dir(scope) / DIRECTORY_FILE


def parsed_by_a_read(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PageLog, int]:
    """A fresh store's read of the log, and how many records it parsed to make it."""
    parsed: list[bytes] = []
    parse = json_store.page_from_record
    with monkeypatch.context() as patched:
        patched.setattr(json_store, "page_from_record", lambda record: parsed.append(record) or parse(record))
        page_log = JsonStore(data_dir).read_pages(USER)
    return page_log, len(parsed)


def assert_holds(page_log: PageLog, pages: list[Page]) -> None:
    """The log as read holds exactly these pages, by its columns and by the pages built from it."""
    assert list(page_log.pages.ids) == [page.page_id for page in pages]
    assert list(page_log.pages.threads) == [page.thread_id or "" for page in pages]
    assert list(page_log.pages.timestamps) == [page.timestamp for page in pages]
    assert list(page_log.pages) == pages
    assert [page_log.pages[n] for n in (0, len(pages) // 2, -1)] == [pages[0], pages[len(pages) // 2], pages[-1]]


def test_a_start_reads_the_directory_and_parses_only_what_was_appended_since(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = filled(data_dir)
    _, first_parse = parsed_by_a_read(data_dir, monkeypatch)  # parses every record and saves the directory
    later = [make_page(n) for n in range(SIZE, SIZE + 5)]
    for page in later:
        JsonStore(data_dir).append_page(USER, page)

    page_log, parsed = parsed_by_a_read(data_dir, monkeypatch)

    assert (first_parse, parsed) == (SIZE, len(later))
    assert_holds(page_log, pages + later)


def test_a_closing_store_saves_the_directory_of_a_log_it_only_appended_to(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonStore(data_dir)
    store.append_page(USER, make_page(0))
    store.read_pages(USER)  # the log in memory, then grown by appends alone
    pages = [make_page(0)] + [make_page(n) for n in range(1, SIZE)]
    for page in pages[1:]:
        store.append_page(USER, page)
    assert not directory_path(data_dir).exists()

    store.close()
    page_log, parsed = parsed_by_a_read(data_dir, monkeypatch)

    assert parsed == 0
    assert_holds(page_log, pages)


def damage_directory(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b"page_00500")
    data[at + 9] ^= 1  # one id changed: page_00501
    path.write_bytes(bytes(data))


def cut_directory(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def foreign_directory(path: Path) -> None:
    path.write_bytes(b"memory-mcp page directory\n" + b"\0" * 64)


@pytest.mark.parametrize("damage", [damage_directory, cut_directory, foreign_directory])
def test_a_damaged_directory_is_not_used_and_is_saved_again(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, damage
) -> None:
    pages = filled(data_dir)
    JsonStore(data_dir).read_pages(USER)
    damage(directory_path(data_dir))
    damaged = directory_path(data_dir).read_bytes()

    page_log, parsed = parsed_by_a_read(data_dir, monkeypatch)

    assert parsed == SIZE, "the log was parsed"
    assert_holds(page_log, pages)
    assert directory_path(data_dir).read_bytes() != damaged
    assert parsed_by_a_read(data_dir, monkeypatch)[1] == 0, "and the directory saved again is used"


def test_a_directory_made_from_other_bytes_than_the_log_holds_is_not_used(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log rewritten to the same length (by hand, or by a tool): ids the directory still names
    must not be handed out for pages that now have others."""
    pages = filled(data_dir)
    JsonStore(data_dir).read_pages(USER)
    log_path = JsonStore(data_dir).scope_dir(USER) / "pages.jsonl"
    log_path.write_bytes(log_path.read_bytes().replace(b'"page_00010"', b'"page_99910"'))
    pages[10] = pages[10].model_copy(update={"page_id": "page_99910"})

    page_log, parsed = parsed_by_a_read(data_dir, monkeypatch)

    assert parsed == SIZE
    assert_holds(page_log, pages)


def test_erasing_exchanges_leaves_no_file_that_names_them(data_dir: Path) -> None:
    filled(data_dir)
    store, other = JsonStore(data_dir), JsonStore(data_dir)
    store.read_pages(USER)
    assert directory_path(data_dir).exists()
    other.read_pages(USER)
    other.append_page(USER, make_page(SIZE))  # its log in memory grew since the directory was saved

    crashed_save = directory_path(data_dir).with_name(f".{DIRECTORY_FILE}.0badf00d.tmp")
    crashed_save.write_bytes(directory_path(data_dir).read_bytes())  # a save a crash cut short

    store.erase_pages(USER, ["page_00003"], lambda document, _positions: document)
    other.close()  # which must not save the directory of the log it read before the erase

    for path in JsonStore(data_dir).scope_dir(USER).rglob("*"):
        assert b"page_00003" not in path.read_bytes(), path
    assert "page_00003" not in JsonStore(data_dir).read_pages(USER).pages.ids


def test_a_log_rewritten_in_place_is_not_read_by_the_offsets_of_the_old_one(data_dir: Path) -> None:
    """Another process forgot the user and began anew, and the new log got the old one's inode
    back: a log read before must not hand out the new records at the old offsets as its pages,
    nor save its directory over the new log (it would name forgotten pages)."""
    filled(data_dir)
    reader = JsonStore(data_dir)
    before = reader.read_pages(USER)
    reader.append_page(USER, make_page(SIZE))  # grown since its directory: close would save one
    saved = directory_path(data_dir).read_bytes()
    log_path = JsonStore(data_dir).scope_dir(USER) / "pages.jsonl"
    renamed = log_path.read_bytes().replace(b'"page_0', b'"other_')  # the same lengths, other ids
    with log_path.open("r+b") as same_inode:
        same_inode.truncate(0)
        same_inode.write(renamed)

    with pytest.raises(MemoryGone, match="erased"):
        before.pages[1]
    reader.close()

    assert directory_path(data_dir).read_bytes() == saved, "not saved again from the old log"


def test_pages_erased_by_another_process_are_never_read_back_from_a_log_read_before(data_dir: Path) -> None:
    pages = filled(data_dir)
    reader = JsonStore(data_dir)
    before = reader.read_pages(USER)
    before.pages[0]  # one page read back, and kept

    JsonStore(data_dir).erase_pages(USER, ["page_00001"], lambda document, _positions: document)

    assert before.pages.ids[1] == "page_00001" and before.pages[0] == pages[0]  # what was read stays read
    with pytest.raises(MemoryGone, match="erased"):
        before.pages[1]
    assert reader.read_pages(USER).pages[1] == pages[2]


def test_a_log_read_before_an_erase_here_gives_none_of_its_pages_back(data_dir: Path) -> None:
    filled(data_dir, count=5)
    store = JsonStore(data_dir)
    before = store.read_pages(USER)
    before.pages[0], before.pages[1]  # read back, and kept

    store.erase_pages(USER, ["page_00001"], lambda document, _positions: document)

    for position in (0, 1):
        with pytest.raises(MemoryGone, match="erased"):
            before.pages[position]


class _ErasedUnderARead(JsonStore):
    """A store on which another process erases an exchange right after each of the first `times`
    reads of the log: the erase lands while a retrieve holds what it read."""

    def __init__(self, root: Path, erased: list[str], times: int) -> None:
        super().__init__(root)
        self._erased, self._times = erased, times

    def read_pages(self, scope: Scope) -> PageLog:
        page_log = super().read_pages(scope)
        if self._times and self._erased:
            self._times -= 1
            JsonStore(self.root).erase_pages(scope, [self._erased.pop(0)], lambda document, _positions: document)
        return page_log


def test_a_retrieve_whose_exchanges_are_erased_while_it_reads_reads_again_what_is_kept(data_dir: Path) -> None:
    pages = filled(data_dir)
    violins = [page.page_id for page in pages if "violin" in page.user_input]
    settings = Settings(data_storage_path=data_dir)
    service = MemoryService(settings, store=_ErasedUnderARead(data_dir, erased=violins[:2], times=2))
    try:
        result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="the violin"))
    finally:
        service.close()

    found = {page.page_id for page in result.retrieved_pages + result.short_term_memory}
    assert found and all("violin" in page.user_input for page in result.retrieved_pages)
    assert not found & set(violins[:2])


def test_a_directory_saved_while_others_append_covers_what_it_says(data_dir: Path) -> None:
    """Readers save directories while a writer appends: every start after reads every page, once."""
    filled(data_dir)
    written = [make_page(n) for n in range(SIZE)]
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        writer = JsonStore(data_dir)
        n = SIZE
        while not stop.is_set() and n < SIZE + 3 * DIRECTORY_MIN_PAGES:
            page = make_page(n)
            writer.append_page(USER, page)
            written.append(page)
            n += 1

    def read() -> None:
        try:
            for _ in range(12):
                reader = JsonStore(data_dir)
                page_log = reader.read_pages(USER)
                assert list(page_log.pages.ids) == [page.page_id for page in page_log.pages]
                reader.close()
        except BaseException as exc:
            failures.append(exc)

    writer_thread = threading.Thread(target=write)
    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in [writer_thread, *readers]:
        thread.start()
    for thread in readers:
        thread.join()
    stop.set()
    writer_thread.join()

    assert failures == []
    assert_holds(JsonStore(data_dir).read_pages(USER), written)
