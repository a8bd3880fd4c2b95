"""Every durable write makes the os calls that make it durable, in order: written, the file
fsync'd, renamed into place, its directory fsync'd; a new directory's entry fsync'd in its parent.

A SIGKILL test cannot see a missing fsync (the page cache survives a killed process, not a power
loss); this one can: it records the calls the file primitives make (recording only, each call
still goes to the os) and compares them with the sequence each write needs. Removing any one of
those calls from the code fails it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_mcp.models import MemoryDocument, Page
from memory_mcp.store import Scope
from memory_mcp.store.durable import FileLock
from memory_mcp.store.files.backend import JsonStore

RECORDED = ("open", "write", "fsync", "replace", "rename", "mkdir", "unlink", "rmdir")
TEMP = re.compile(r"\.memory\.json\.[0-9a-f]{8}\.tmp")
TOMBSTONE = re.compile(r"\.erased-(\w+)-[0-9a-f]{8}")


class OsCalls:
    """The os calls made by memory_mcp/store/durable.py (directly or through shutil/pathlib), as
    (call, path relative to the data root); but the opening of lock files, which hold no data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[tuple[str, str]] = []

    def name(self, target: Any, dir_fd: int | None = None) -> str:
        if isinstance(target, int):
            path = os.readlink(f"/proc/self/fd/{target}")
        else:
            path = os.fspath(target)
            if dir_fd is not None:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        relative = os.path.relpath(path, self.root)
        return TOMBSTONE.sub(r".erased-\1-X", TEMP.sub(".memory.json.TMP", relative))

    def wrap(self, call: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def recording(*args: Any, **kwargs: Any) -> Any:
            reads_a_file = call == "open" and not args[1] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_DIRECTORY)
            locks = call == "open" and os.fspath(args[0]).endswith(".lock")
            if _within_durable() and not reads_a_file and not locks:
                target = args[0]
                described = self.name(target, kwargs.get("dir_fd"))
                if call in ("replace", "rename"):
                    described += " -> " + self.name(args[1])
                if call == "open":
                    flags = args[1]
                    described += " (new)" if flags & os.O_CREAT and not os.path.exists(os.fspath(target)) else ""
                self.calls.append((call, described))
            return original(*args, **kwargs)

        return recording


def _within_durable() -> bool:
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(os.path.join("store", "durable.py")):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def recorded(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OsCalls]:
    calls = OsCalls(data_dir)
    for call in RECORDED:
        monkeypatch.setattr(os, call, calls.wrap(call, getattr(os, call)))
    yield calls


def page(n: int) -> Page:
    return Page(page_id=f"page_{n}", user_input=f"said {n}", agent_response="ok", timestamp="2024-05-01T00:00:00Z")


def test_the_first_add_of_a_new_user_makes_each_new_directory_and_the_log_durable(
    data_dir: Path, recorded: OsCalls
) -> None:
    JsonStore(data_dir).append_page(Scope("alice"), page(0))

    assert recorded.calls == [
        ("mkdir", "."),  # the data directory...
        ("open", ".."),
        ("fsync", ".."),  # ...and its entry in its parent
        ("mkdir", "locks"),
        ("open", "."),
        ("fsync", "."),
        ("mkdir", "users"),
        ("open", "."),
        ("fsync", "."),
        ("mkdir", "users/alice"),
        ("open", "users"),
        ("fsync", "users"),  # users/'s entry for alice: without it a power loss can lose her
        ("open", "users/alice/pages.jsonl (new)"),
        ("write", "users/alice/pages.jsonl"),
        ("fsync", "users/alice/pages.jsonl"),
        ("open", "users/alice"),
        ("fsync", "users/alice"),  # the new file's entry
    ]


def test_a_later_add_is_one_write_and_one_fsync(data_dir: Path, recorded: OsCalls) -> None:
    store = JsonStore(data_dir)
    store.append_page(Scope("alice"), page(0))
    recorded.calls.clear()

    store.append_page(Scope("alice"), page(1))

    assert recorded.calls == [
        ("open", "users/alice/pages.jsonl"),
        ("write", "users/alice/pages.jsonl"),
        ("fsync", "users/alice/pages.jsonl"),
    ]


def test_a_document_write_is_written_synced_renamed_then_its_directory_synced(
    data_dir: Path, recorded: OsCalls
) -> None:
    store = JsonStore(data_dir)
    store.append_page(Scope("alice"), page(0))
    recorded.calls.clear()

    store.write_document(Scope("alice"), MemoryDocument())

    assert recorded.calls == [
        ("open", "users/alice/.memory.json.TMP (new)"),
        ("write", "users/alice/.memory.json.TMP"),
        ("fsync", "users/alice/.memory.json.TMP"),
        ("replace", "users/alice/.memory.json.TMP -> users/alice/memory.json"),
        ("open", "users/alice"),
        ("fsync", "users/alice"),
    ]


def test_an_erase_is_one_durable_rename_then_the_tombstone_is_deleted(data_dir: Path, recorded: OsCalls) -> None:
    store = JsonStore(data_dir)
    store.append_page(Scope("alice"), page(0))
    store.write_document(Scope("alice"), MemoryDocument())
    recorded.calls.clear()

    store.erase(Scope("alice"))

    rename, sync = recorded.calls[:3], recorded.calls[-2:]
    assert rename == [
        ("rename", "users/alice -> users/.erased-alice-X"),
        ("open", "users"),
        ("fsync", "users"),  # from here on alice is gone, whatever happens to the deletion
    ]
    deleted = {path for call, path in recorded.calls[3:-2] if call in ("unlink", "rmdir")}
    assert {"users/.erased-alice-X/pages.jsonl", "users/.erased-alice-X/memory.json"} <= deleted
    assert sync == [("open", "users"), ("fsync", "users")]


HOLD_BRIEFLY = """
import sys
from pathlib import Path
from memory_mcp.store.durable import FileLock, LockTimeout
lock = FileLock(Path(sys.argv[1]))
try:
    lock.acquire(timeout=0)
except LockTimeout:
    print("held elsewhere")
else:
    print("had it")
"""


def test_a_lock_is_one_process_s_and_a_child_forked_meanwhile_does_not_keep_it(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "locks" / "alice.log.lock")  # its folder made on first use
    lock.acquire(timeout=0)
    lock.acquire(timeout=0)  # again, by its holder: no wait

    def other_process() -> str:
        run = subprocess.run([sys.executable, "-c", HOLD_BRIEFLY, str(lock.path)], capture_output=True, text=True)
        return run.stdout.strip() or run.stderr

    child = os.fork()
    if child == 0:  # the child of a process holding the lock: it lives on, doing nothing
        time.sleep(5)
        os._exit(0)
    try:
        assert other_process() == "held elsewhere"
        lock.release()
        assert other_process() == "held elsewhere", "held until released as often as acquired"
        lock.release()
        assert other_process() == "had it", "the forked child, still alive, does not hold it"
        with pytest.raises(RuntimeError, match="released more often"):
            lock.release()
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def test_a_lock_whose_file_its_holder_deleted_excludes_whoever_locks_the_path_next(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "locks" / "zelda.log.lock"
    holder, waiter, newcomer = FileLock(path), FileLock(path), FileLock(path)
    holder.acquire(timeout=0)
    got = threading.Event()

    def wait_for_it() -> None:
        waiter.acquire(timeout=30)
        got.set()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    holder.delete()  # the memory was erased: no file named after it is left
    assert not path.exists()
    newcomer.acquire(timeout=0)  # the path's new file
    holder.release()  # the waiter gets the deleted file's lock, and must see it is stale
    assert not got.wait(1.0), "two holders at once: one of the deleted file, one of the new"
    newcomer.release()
    assert got.wait(30)
    thread.join()
    waiter.release()
    with pytest.raises(RuntimeError):
        waiter.delete()  # only its holder deletes a lock's file


def test_forget_leaves_no_lock_or_name_of_the_user_and_a_new_store_deletes_strays(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    page = Page(page_id="page_1", user_input="hi", agent_response="ok", timestamp="2024-05-01T13:56:00Z")
    for scope in (Scope("zelda"), Scope("zelda", "coder"), Scope("bob")):
        store.append_page(scope, page)
        store.write_document(scope, MemoryDocument())
    store.read_pages(Scope("ghost"))  # looked up: its locks, but no memory
    store.erase(Scope("zelda"))
    names = [str(path.relative_to(data_dir)) for path in data_dir.rglob("*")]
    assert not [name for name in names if "zelda" in name], names
    assert any("bob" in name for name in names)
    JsonStore(data_dir)  # a new store (a start) deletes the locks of memory that is not there
    names = [str(path.relative_to(data_dir)) for path in data_dir.rglob("*")]
    assert not [name for name in names if "ghost" in name], names
    assert any(name.startswith("locks/bob.") for name in names)
