"""JsonStore: durability, crash recovery, corruption reporting and cross-process sharing.

Every test here works on real files in a temp directory. Failures of the operating system are
simulated only at the os-call boundary (os.fsync / os.replace), never by patching the store.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from project import PROJECT_ROOT

from memory_mcp.base.errors import StorageError
from memory_mcp.base.settings import Settings
from memory_mcp.models import (
    AddMemoryRequest,
    Fact,
    KnowledgeEntry,
    MemoryDocument,
    Page,
    ProfileRequest,
    RetrieveMemoryRequest,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope, durable
from memory_mcp.store.files import page_log as json_store
from memory_mcp.store.files.backend import JsonStore

USER = Scope("alice")


def make_page(n: int, text: str | None = None) -> Page:
    return Page(
        page_id=f"page_{n:04d}",
        user_input=text if text is not None else f"question number {n}",
        agent_response=f"answer number {n}",
        timestamp="2024-05-01T13:56:00Z",
        meta_data={"n": n},
    )


def make_document(*facts: str) -> MemoryDocument:
    return MemoryDocument(
        facts=[Fact(id=f"fact_{i}", content=text, confidence=0.9) for i, text in enumerate(facts)],
    )


def pages_path(root: Path, scope: Scope = USER) -> Path:
    return JsonStore(root).scope_dir(scope) / "pages.jsonl"


def memory_path(root: Path, scope: Scope = USER) -> Path:
    return JsonStore(root).scope_dir(scope) / "memory.json"


def temp_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# --- basic round trips ------------------------------------------------------------------


def test_pages_round_trip_through_a_fresh_store_in_order(data_dir: Path) -> None:
    tricky = 'line one\nline two\r\n\u2028 sep \u0085 nel \x00 nul "quoted" 中文 🙂'
    store = JsonStore(data_dir)
    originals = [make_page(0), make_page(1, tricky), make_page(2)]
    for page in originals:
        store.append_page(USER, page)

    reread = JsonStore(data_dir).read_pages(USER).pages

    assert list(reread) == originals
    # One record per line, however many line-like characters the text holds.
    assert len(pages_path(data_dir).read_bytes().splitlines()) == 3


def test_reading_a_scope_with_no_files_is_empty_and_creates_nothing(data_dir: Path) -> None:
    store = JsonStore(data_dir)

    assert list(store.read_pages(USER).pages) == []
    assert store.read_document(USER).is_empty()
    assert not data_dir.exists()


def test_write_document_round_trips_and_stamps_last_updated(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    document = make_document("likes tea")
    document.assistantKnowledge.append(KnowledgeEntry(id="k1", content="promised a recipe"))

    stored = store.write_document(USER, document)

    assert stored.lastUpdated.endswith("Z") and stored.lastUpdated != ""
    fresh = JsonStore(data_dir).read_document(USER)
    assert fresh == stored
    assert json.loads(memory_path(data_dir).read_text(encoding="utf-8"))["facts"][0]["content"] == "likes tea"


# --- atomic replace of memory.json -------------------------------------------------------


def _raise_enospc(*args: object, **kwargs: object) -> None:
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("failing_call", ["fsync", "replace"])
def test_failed_document_write_leaves_the_old_file_intact(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, failing_call: str
) -> None:
    store = JsonStore(data_dir)
    old = store.write_document(USER, make_document("old fact"))
    path = memory_path(data_dir)
    old_bytes = path.read_bytes()

    with monkeypatch.context() as patch:
        # The operating system fails midway: the temp file is written but cannot be made durable / renamed.
        patch.setattr(durable.os, failing_call, _raise_enospc)
        with pytest.raises(StorageError) as caught:
            store.write_document(USER, make_document("new fact that must not appear"))

    message = str(caught.value)
    assert "alice" in message and "No space left on device" in message
    assert path.read_bytes() == old_bytes
    assert temp_files(path.parent) == []
    assert store.read_document(USER) == old
    assert JsonStore(data_dir).read_document(USER) == old
    # The store still works once the disk does.
    newer = store.write_document(USER, make_document("after recovery"))
    assert JsonStore(data_dir).read_document(USER) == newer


def test_failed_page_append_raises_storage_error(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JsonStore(data_dir)
    store.append_page(USER, make_page(0))

    with monkeypatch.context() as patch:
        patch.setattr(durable.os, "fsync", _raise_enospc)
        with pytest.raises(StorageError, match="alice.*No space left on device"):
            store.append_page(USER, make_page(1))


# --- torn tail of the page log -----------------------------------------------------------


def test_torn_log_tail_is_ignored_then_cut_off_by_the_next_append(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = JsonStore(data_dir)
    written = [make_page(i) for i in range(3)]
    for page in written:
        writer.append_page(USER, page)
    path = pages_path(data_dir)
    half_record = make_page(99).model_dump_json().encode()[:40]
    with path.open("ab") as stream:  # a writer crashed halfway through its append
        stream.write(half_record)

    caplog.set_level(logging.WARNING)
    reader = JsonStore(data_dir)
    assert list(reader.read_pages(USER).pages) == written
    assert any("interrupted write" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)

    new_page = make_page(3)
    reader.append_page(USER, new_page)

    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a newline
    assert [Page.model_validate_json(line) for line in lines[:-1]] == [*written, new_page]
    assert half_record not in path.read_bytes()
    assert list(reader.read_pages(USER).pages) == [*written, new_page]
    assert list(JsonStore(data_dir).read_pages(USER).pages) == [*written, new_page]


def test_torn_tail_warning_is_logged_once_not_on_every_read(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = JsonStore(data_dir)
    store.append_page(USER, make_page(0))
    with pages_path(data_dir).open("ab") as stream:
        stream.write(b'{"page_id": "pa')

    caplog.set_level(logging.WARNING)
    for _ in range(3):
        assert len(store.read_pages(USER).pages) == 1
    assert sum("interrupted write" in r.getMessage() for r in caplog.records) == 1


# --- corruption is reported, never repaired silently ------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"{ this is not json",
        b'{"facts": "x"}',
        b'{"facts": [{"id": "f1", "content": "c", "confidence": 7}]}',
        b"[]",
        b"\xff\xfe not utf-8",
    ],
    ids=["invalid-json", "facts-not-a-list", "confidence-out-of-range", "not-an-object", "not-utf8"],
)
def test_corrupt_memory_json_is_reported_and_left_untouched(data_dir: Path, content: bytes) -> None:
    settings = Settings(data_storage_path=data_dir)
    service = MemoryService(settings)
    service.add_memory(AddMemoryRequest.build(user_id="alice", user_input="hi", agent_response="hello"))
    path = memory_path(data_dir)
    path.write_bytes(content)

    with pytest.raises(StorageError) as caught:
        JsonStore(data_dir).read_document(USER)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)

    with pytest.raises(StorageError, match="memory.json"):
        service.get_user_profile(ProfileRequest.build(user_id="alice"))
    with pytest.raises(StorageError, match="memory.json"):
        service.retrieve_memory(RetrieveMemoryRequest.build(user_id="alice", query="hi"))

    assert path.read_bytes() == content
    assert temp_files(path.parent) == []


def test_write_does_not_replace_a_corrupt_document(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    store.write_document(USER, make_document("good"))
    path = memory_path(data_dir)
    damaged = b'{"facts": "x"}'
    path.write_bytes(damaged)

    with pytest.raises(StorageError, match="not a valid memory document"):
        JsonStore(data_dir).write_document(USER, make_document("would hide the damage"))

    assert path.read_bytes() == damaged
    assert temp_files(path.parent) == []


def test_store_that_cached_a_good_document_reports_corruption_written_later(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    store.write_document(USER, make_document("good"))
    assert store.read_document(USER).facts[0].content == "good"
    path = memory_path(data_dir)
    path.write_bytes(b'{"facts": "x", "padding": "makes the size differ from before"}')

    with pytest.raises(StorageError, match="not a valid memory document"):
        store.read_document(USER)


@pytest.mark.parametrize(
    "bad_line",
    [b"{ not json at all", b'{"page_id": "p"}', b""],
    ids=["invalid-json", "missing-fields", "empty-line"],
)
def test_corrupt_line_in_the_middle_of_the_log_names_the_line(data_dir: Path, bad_line: bytes) -> None:
    store = JsonStore(data_dir)
    for i in range(4):
        store.append_page(USER, make_page(i))
    path = pages_path(data_dir)
    lines = path.read_bytes().split(b"\n")
    lines[2] = bad_line  # the third line
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()

    fresh = JsonStore(data_dir)
    for _ in range(2):  # a retry fails the same way: the bad line is never skipped
        with pytest.raises(StorageError) as caught:
            fresh.read_pages(USER)
        assert f"{path} line 3 " in str(caught.value)
    assert path.read_bytes() == before


def test_corrupt_line_after_an_incremental_read_names_its_absolute_line_number(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    for i in range(2):
        store.append_page(USER, make_page(i))
    assert len(store.read_pages(USER).pages) == 2
    path = pages_path(data_dir)
    with path.open("ab") as stream:
        stream.write(make_page(2).model_dump_json().encode() + b"\n")
        stream.write(b"garbage\n")

    with pytest.raises(StorageError, match=r"line 4 "):
        store.read_pages(USER)


# --- sharing a data directory ----------------------------------------------------------


def test_other_store_sees_pages_appended_after_it_read(data_dir: Path) -> None:
    first, second = JsonStore(data_dir), JsonStore(data_dir)
    first.append_page(USER, make_page(0))
    log = second.read_pages(USER)
    assert len(log.pages) == 1

    first.append_page(USER, make_page(1))
    second.append_page(USER, make_page(2))  # second's cache is behind: it must not skip page 1
    first.append_page(USER, make_page(3))

    expected = [make_page(i) for i in range(4)]
    assert list(second.read_pages(USER).pages) == expected
    assert list(first.read_pages(USER).pages) == expected
    assert second.read_pages(USER).generation == log.generation  # extended, not rebuilt


def test_replaced_log_gets_a_new_generation(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    for i in range(3):
        store.append_page(USER, make_page(i))
    before = store.read_pages(USER)
    path = pages_path(data_dir)
    replacement = path.with_name("replacement")
    replacement.write_bytes(make_page(7).model_dump_json().encode() + b"\n")
    os.replace(replacement, path)

    after = store.read_pages(USER)

    assert after.generation != before.generation
    assert list(after.pages) == [make_page(7)]


def test_a_log_replaced_on_the_same_inode_is_read_anew(data_dir: Path) -> None:
    """Another process forgot the user and began a new log, which got the old log's inode back
    (file systems recycle them): the new log is not taken for the old one grown."""
    store = JsonStore(data_dir)
    for i in range(3):
        store.append_page(USER, make_page(i, "erased secret " + "x" * 50))
    before = store.read_pages(USER)
    path = pages_path(data_dir)
    inode, old_size = path.stat().st_ino, path.stat().st_size
    new_log = b"".join(make_page(10 + i, "new life").model_dump_json().encode() + b"\n" for i in range(5))
    with path.open("r+b") as same_inode:  # rewritten in place: the same inode, a different log
        same_inode.truncate(0)
        same_inode.write(new_log)

    after = store.read_pages(USER)

    assert path.stat().st_ino == inode and len(new_log) > old_size
    assert after.generation != before.generation
    assert [page.page_id for page in after.pages] == [f"page_{10 + i:04d}" for i in range(5)]


def test_a_log_rewritten_on_the_same_inode_that_begins_alike_is_read_anew(data_dir: Path) -> None:
    """Another process scrubbed an exchange twice, and its log came back to the old inode (a
    rename over the log alternates two): the same first record, at least as long, yet rewritten."""
    store = JsonStore(data_dir)
    store.append_pages(USER, [make_page(i) for i in range(4)])
    before = store.read_pages(USER)
    path = pages_path(data_dir)
    inode, old_size = path.stat().st_ino, path.stat().st_size
    rewritten = [make_page(0), make_page(1, "[redacted] " + "z" * 60), make_page(2), make_page(3)]
    with path.open("r+b") as same_inode:
        same_inode.truncate(0)
        same_inode.write(b"".join(page.model_dump_json().encode() + b"\n" for page in rewritten))

    after = store.read_pages(USER)

    assert path.stat().st_ino == inode and path.stat().st_size >= old_size
    assert after.generation != before.generation
    assert [page.user_input for page in after.pages] == [page.user_input for page in rewritten]


def test_new_records_are_read_from_where_the_last_read_ended(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = JsonStore(data_dir), JsonStore(data_dir)
    for i in range(50):
        writer.append_page(USER, make_page(i))
    reader.read_pages(USER)
    writer.append_page(USER, make_page(50))
    offsets: list[tuple[int, int]] = []
    original = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, size, at: offsets.append((size, at)) or original(fd, size, at))

    assert len(reader.read_pages(USER).pages) == 51

    record = len(make_page(50).model_dump_json()) + 1
    assert (record, pages_path(data_dir).stat().st_size - record) in offsets  # only the new record's bytes
    assert sum(size for size, _ in offsets) < 2 * record + 4096  # and the log's first record, its identity


def test_directories_named_by_an_earlier_version_after_ids_with_capitals_are_renamed(data_dir: Path) -> None:
    legacy = data_dir / "users" / "Alice"
    legacy.mkdir(parents=True)
    (legacy / "pages.jsonl").write_bytes(make_page(0).model_dump_json().encode() + b"\n")

    store = JsonStore(data_dir)

    assert store.list_users() == ["Alice"] and not legacy.exists()
    assert [page.page_id for page in store.read_pages(Scope("Alice")).pages] == ["page_0000"]
    assert store.read_pages(Scope("alice")).pages == []


def test_a_directory_sync_failing_after_the_rename_says_the_write_may_not_be_durable(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonStore(data_dir)
    store.write_document(USER, make_document("old"))
    original = os.fsync

    def fail_for_directories(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(5, "Input/output error")
        original(fd)

    monkeypatch.setattr(os, "fsync", fail_for_directories)
    with pytest.raises(StorageError) as raised:
        store.write_document(USER, make_document("new"))

    assert "durably" in str(raised.value) and "may not survive a power loss" in str(raised.value)
    assert "nothing" not in str(raised.value)
    assert store.read_document(USER).facts[0].content == "new"  # the rename went through, as said


def test_document_written_by_one_store_is_seen_by_another_that_cached_the_old_one(data_dir: Path) -> None:
    writer, reader = JsonStore(data_dir), JsonStore(data_dir)
    writer.write_document(USER, make_document("version one"))
    assert reader.read_document(USER).facts[0].content == "version one"

    writer.write_document(USER, make_document("version two"))
    assert reader.read_document(USER).facts[0].content == "version two"

    # Same size as before, too: a change of content alone must be noticed.
    writer.write_document(USER, make_document("version 333"))
    assert reader.read_document(USER).facts[0].content == "version 333"


def test_document_cache_is_not_fooled_by_inode_reuse_and_coarse_mtime(data_dir: Path) -> None:
    # Regression: the cache used to be keyed on (inode, mtime_ns, size). atomic_write makes the
    # filesystem recycle inodes (ext4 alternates between two), and mtimes are coarse (1 s on
    # ext3/HFS+/many network mounts), so a same-size write by another process could go unnoticed.
    writer, reader = JsonStore(data_dir), JsonStore(data_dir)
    writer.write_document(USER, make_document("version AAA"))
    assert reader.read_document(USER).facts[0].content == "version AAA"
    path = memory_path(data_dir)
    cached = path.stat()
    old_inode = path.with_name("old-inode")
    os.link(path, old_inode)  # keep the inode alive so the new content can land in it

    writer.write_document(USER, make_document("version BBB"))
    new_bytes = path.read_bytes()
    assert len(new_bytes) == cached.st_size
    # Reproduce deterministically what inode reuse plus a coarse clock produce: the new content
    # under the old inode, with the old size and the old mtime.
    with old_inode.open("r+b") as stream:
        stream.write(new_bytes)
    os.replace(old_inode, path)
    os.utime(path, ns=(cached.st_atime_ns, cached.st_mtime_ns))
    now = path.stat()
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (cached.st_ino, cached.st_size, cached.st_mtime_ns)

    assert reader.read_document(USER).facts[0].content == "version BBB"


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from memory_mcp.base.settings import Settings
    from memory_mcp.models import AddMemoryRequest
    from memory_mcp.service.memory_service import MemoryService

    data, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    service = MemoryService(Settings(data_storage_path=Path(data)))
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the other writer
    for seq in range(count):
        service.add_memory(AddMemoryRequest.build(
            user_id="shared",
            user_input=f"{tag} asks question {seq} marker{tag}{seq}",
            agent_response="noted",
            meta_data={"proc": tag, "seq": seq},
        ))
    print("done", flush=True)
    """
)


@pytest.mark.integration
def test_two_processes_appending_to_one_user_lose_nothing(data_dir: Path) -> None:
    per_process = 500
    scope = Scope("shared")
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=2))
    for i in range(3):
        service.add_memory(AddMemoryRequest.build(user_id="shared", user_input=f"parent note {i}", agent_response="ok"))
    before = service.store.read_pages(scope)
    before_pages = list(before.pages)
    early = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="shared", query="markeralpha0"))
    assert early.retrieved_pages == []

    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(data_dir), tag, str(per_process)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        )
        for tag in ("alpha", "beta")
    ]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            assert out.strip() == "done"
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    # The file: every line a valid page, none lost, none duplicated, each writer's order kept.
    raw_lines = pages_path(data_dir, scope).read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    records = [json.loads(line) for line in raw_lines[:-1]]
    assert len(records) == 3 + 2 * per_process
    assert len({record["page_id"] for record in records}) == len(records)
    for tag in ("alpha", "beta"):
        sequence = [r["meta_data"]["seq"] for r in records if r["meta_data"] and r["meta_data"].get("proc") == tag]
        assert sequence == list(range(per_process))

    # The parent's store, which had read the log before, catches up incrementally.
    after = service.store.read_pages(scope)
    assert after.generation == before.generation
    assert [page.page_id for page in after.pages] == [record["page_id"] for record in records]
    assert list(after.pages[:3]) == before_pages

    # And the parent's search index finds what another process added.
    result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="shared", query="markeralpha0"))
    assert [page.user_input for page in result.retrieved_pages][:1] == ["alpha asks question 0 markeralpha0"]
    result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id="shared", query="markerbeta7"))
    assert result.retrieved_pages[0].meta_data == {"proc": "beta", "seq": 7}


# --- layout ---------------------------------------------------------------------------


def test_data_is_private_to_its_owner_whatever_the_umask(data_dir: Path) -> None:
    previous = os.umask(0)  # the most permissive umask: modes must come from the store itself
    try:
        store = JsonStore(data_dir)
        agent = Scope("alice", "coder")
        for scope in (USER, agent):
            store.append_page(scope, make_page(0))
            store.write_document(scope, make_document("fact"))
    finally:
        os.umask(previous)

    user_dir = store.scope_dir(USER)
    agent_dir = store.scope_dir(agent)
    locks = data_dir / "locks"
    for directory in (data_dir, data_dir / "users", user_dir, user_dir / "agents", agent_dir, locks):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for directory in (user_dir, agent_dir):
        for name in ("pages.jsonl", "memory.json"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, directory / name
    lock_files = sorted(path.name for path in locks.iterdir())
    assert lock_files == ["alice.doc.lock", "alice.log.lock", "alice@coder.doc.lock", "alice@coder.log.lock"]
    assert all(stat.S_IMODE((locks / name).stat().st_mode) == 0o600 for name in lock_files)


def test_list_users_lists_only_valid_user_directories(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    assert store.list_users() == []
    for user in ("bob", "alice", "A-1_b"):
        store.append_page(Scope(user), make_page(0))
    store.append_page(Scope("carol", "helper"), make_page(0))
    users = data_dir / "users"
    for junk in ("with space", ".hidden", "x" * 129, "%2ehidden", "bad%40x.org", "ümlaut"):
        (users / junk).mkdir()
    (users / "file_not_dir").write_text("x")

    assert store.list_users() == ["A-1_b", "alice", "bob", "carol"]


def test_scope_dir_rejects_ids_that_could_escape_the_data_root(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    for scope in (Scope(".."), Scope("a/b"), Scope("ok", "../x"), Scope("bob\n")):
        with pytest.raises(ValueError):
            store.append_page(scope, make_page(0))
    assert not data_dir.exists()


def test_a_count_reads_only_what_was_added_since_and_names_a_damaged_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[bytes] = []
    parse = json_store.page_from_record
    monkeypatch.setattr(json_store, "page_from_record", lambda record: parsed.append(record) or parse(record))
    writer, counter = JsonStore(tmp_path), JsonStore(tmp_path)
    writer.append_pages(USER, [make_page(n) for n in range(3)])
    assert counter.page_count(USER) == 3
    for n in range(3, 5):
        writer.append_page(USER, make_page(n))  # which reads nothing back
    assert counter.page_count(USER) == 5 and len(parsed) == 5, "each record read once"
    with pages_path(tmp_path).open("ab") as log:
        log.write(b'{"page_id": "cut off')  # an interrupted write: not a page
    assert counter.page_count(USER) == 5
    assert counter.read_pages(USER).pages == writer.read_pages(USER).pages

    fresh = JsonStore(tmp_path)
    fresh.page_count(USER)
    with pages_path(tmp_path).open("ab") as log:
        log.write(b"\n")  # the cut-off record, ended: line 6, unreadable
    with pytest.raises(StorageError, match="line 6"):
        fresh.page_count(USER)
    with pytest.raises(StorageError, match="line 6"):
        fresh.read_pages(USER)


def test_erasing_exchanges_keeps_the_others_whole_whatever_whitespace_their_records_hold(tmp_path: Path) -> None:
    store = JsonStore(tmp_path)
    store.append_pages(USER, [make_page(0)])
    with pages_path(tmp_path).open("ab") as log:  # valid JSON: a carriage return is whitespace
        log.write(make_page(1).model_dump_json().replace(',"user_input"', ',\r"user_input"').encode() + b"\n")
    store.append_pages(USER, [make_page(2)])

    store.erase_pages(USER, ["page_0002"], lambda document, _: document)

    assert [page.page_id for page in JsonStore(tmp_path).read_pages(USER).pages] == ["page_0000", "page_0001"]


def test_an_erase_leaves_no_copy_a_crashed_rewrite_left_of_the_log_however_recent(tmp_path: Path) -> None:
    """A temp file of the log (or its vectors) a crash cut short holds the records of then: the
    erase that follows takes it, as no writer can be writing one while the erase holds the log."""
    store = JsonStore(tmp_path)
    store.append_pages(USER, [make_page(0), make_page(1)])
    log = pages_path(tmp_path)
    left = [log.with_name(f".{name}.crashed.tmp") for name in (log.name, "vectors.jsonl")]
    for temp in left:
        temp.write_bytes(log.read_bytes())  # seconds old, not minutes

    store.erase_pages(USER, ["page_0001"], lambda document, _: document)

    assert [temp for temp in left if temp.exists()] == []
    assert b"page_0001" not in b"".join(path.read_bytes() for path in log.parent.iterdir() if path.is_file())
