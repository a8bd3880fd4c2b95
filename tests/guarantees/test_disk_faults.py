"""Disk faults: a full disk, a read-only or immutable data directory, a data path that cannot be a
directory. Each must give a clear tool error (no traceback, no paths, no other user's name), leave
no half-written file, keep earlier data intact, and keep reads working; once the fault is gone,
adds work again.

How the faults are made (the tests run as root, so chmod would not stop anything):

- a full disk is a small tmpfs mounted on the test's temp dir and filled until ENOSPC; where
  `mount` is not permitted, those variants are skipped, and the stdio variant also runs with a
  simulated disk instead: a `sitecustomize` on the server's PYTHONPATH makes `os.write` on files
  under the data dir behave like a disk with N free bytes (a short write, then ENOSPC). That
  simulates the OS, not the code under test.
- a read-only data dir is the same tmpfs remounted read-only;
- an immutable file is `chattr +i` (skipped where the filesystem does not support it);
- a path component that is a regular file needs nothing special.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from stdio_helpers import RawServer
from tool_helpers import Tools

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest
from memory_mcp.service.memory_service import MemoryService

pytestmark = pytest.mark.integration

# Flush-driven: no debounce fires during a test, one attempt per update, nothing waits at close.
TEST_MEMORY = {"debounce_seconds": 60, "llm_timeout_seconds": 5, "llm_max_attempts": 1, "shutdown_flush_seconds": 0}
BIG = "x" * 20_000  # more than a tmpfs page: an append this size cannot fit in a file's last page
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
READ_ONLY = os.strerror(errno.EROFS)  # "Read-only file system"


# --- making faults ---------------------------------------------------------------------------


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount small tmpfs filesystems under the test's temp dir (skipping the test if that is not
    permitted here); all are unmounted at the end."""
    mounted: list[Path] = []

    def mount(name: str = "mnt", size: str = "1m") -> Path:
        point = tmp_path / name
        point.mkdir()
        if os.geteuid() != 0:
            pytest.skip("a tmpfs mount needs root; this variant needs a real full or read-only filesystem")
        try:
            done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(point))
        except FileNotFoundError:
            pytest.skip("no `mount` command in this sandbox: cannot make a small or read-only filesystem")
        if done.returncode != 0:
            pytest.skip(f"`mount -t tmpfs` is not permitted in this sandbox ({done.stderr.strip()})")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        _run("umount", "-l", str(point))


def remount(point: Path, mode: str) -> None:
    done = _run("mount", "-o", f"remount,{mode}", str(point))
    if done.returncode != 0:
        pytest.skip(f"`mount -o remount,{mode}` is not permitted in this sandbox ({done.stderr.strip()})")


def fill(point: Path) -> Path:
    """Write a filler file until the filesystem has not one byte left; return it (delete to free)."""
    filler = point / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (b"\0" * 65536, b"\0" * 512, b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler


# A disk with N free bytes, for a server process: `os.write` on files under the data dir writes
# at most what the budget in the flag file allows (a short write, as the kernel does), then
# fails with ENOSPC. No flag file: an ordinary disk.
SIMULATED_DISK = textwrap.dedent(
    """
    import errno
    import os

    _FLAG = os.environ.get("MEMORY_MCP_TEST_DISK_BUDGET")
    _HOME = os.environ.get("MEMORY_MCP_HOME")

    if _FLAG and _HOME:
        _DATA = os.path.realpath(_HOME) + os.sep
        _real_write = os.write

        def _under_data(fd):
            try:
                return os.readlink(f"/proc/self/fd/{fd}").startswith(_DATA)
            except OSError:
                return False

        def write(fd, data):
            if not _under_data(fd):
                return _real_write(fd, data)
            try:
                with open(_FLAG) as stream:
                    budget = int(stream.read().strip() or 0)
            except FileNotFoundError:
                return _real_write(fd, data)
            if budget <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written = _real_write(fd, bytes(memoryview(data)[:budget]))
            with open(_FLAG, "w") as stream:
                stream.write(str(budget - written))
            return written

        os.write = write
    """
)


class SimulatedDisk:
    """Installs SIMULATED_DISK for server processes started after it (through the environment)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        site = tmp_path / "simulated-disk-site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SIMULATED_DISK, encoding="utf-8")
        self.flag = tmp_path / "disk-budget"
        path = os.environ.get("PYTHONPATH")
        monkeypatch.setenv("PYTHONPATH", str(site) + (os.pathsep + path if path else ""))
        monkeypatch.setenv("MEMORY_MCP_TEST_DISK_BUDGET", str(self.flag))

    def fill(self, free_bytes: int = 1000) -> None:
        self.flag.write_text(str(free_bytes))

    def free(self) -> None:
        self.flag.unlink()


# --- checking ---------------------------------------------------------------------------------


def pages_file(home: Path, user: str = "alice") -> Path:
    return home / "users" / user / "pages.jsonl"


def memory_file(home: Path, user: str = "alice") -> Path:
    return home / "users" / user / "memory.json"


def page_log(path: Path) -> tuple[list[dict[str, Any]], bytes]:
    """The complete records of a page log (each must be a valid JSON page) and any bytes after
    the last newline (an unfinished record)."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    records = [json.loads(line) for line in complete.splitlines()]
    assert all({"page_id", "user_input", "agent_response", "timestamp"} <= set(r) for r in records), records
    return records, data[len(complete) :]


def assert_clean_error(message: str, home: Path, problem: str, *, others: tuple[str, ...] = ("bob",)) -> None:
    """A message for a person: names the problem, and carries no traceback, path or other user."""
    assert problem in message, message
    assert "Traceback" not in message and 'File "' not in message, message
    assert str(home) not in message and "/users/" not in message and "pages.jsonl" not in message, message
    for other in others:
        assert other not in message, f"the error names another user ({other}): {message}"


def no_temp_files(home: Path) -> list[Path]:
    return [path for path in home.rglob("*") if path.name.endswith(".tmp")]


def tool_error(call: Callable[[], Any]) -> str:
    with pytest.raises(ToolError) as caught:
        call()
    return str(caught.value)


# --- in-process fixtures ------------------------------------------------------------------------


@pytest.fixture
def make_tools(llm: ScriptedLLM) -> Iterator[Callable[..., Tools]]:
    opened: list[MemoryService] = []

    def factory(home: Path, with_llm: bool = True) -> Tools:
        settings = Settings(
            data_storage_path=home,
            openai_base_url=llm.base_url if with_llm else None,
            llm_model=SCRIPTED_MODEL,
            memory=TEST_MEMORY,
        )
        service = MemoryService(settings)
        opened.append(service)
        return Tools(service)

    yield factory
    for service in opened:
        service.close()


def update_adding(*contents: str) -> dict[str, Any]:
    facts = [{"content": content, "category": "context", "confidence": 0.9} for content in contents]
    return {"user": {}, "history": {}, "newFacts": facts, "factsToRemove": []}


# --- a full disk --------------------------------------------------------------------------------


def test_a_full_disk_fails_writes_clearly_keeps_reads_and_pending_work_and_recovers(
    tmpfs: Callable[..., Path], make_tools: Callable[..., Tools], llm: ScriptedLLM
) -> None:
    mount = tmpfs(size="1m")
    home = mount / "data"
    t = make_tools(home)
    t.memory.add_memory("I live in Lyon", "Noted", user_id="alice")
    t.memory.add_memory("I write Go at Acme", "Nice", user_id="alice")
    t.memory.add_memory("bob's own exchange", "ok", user_id="bob")
    llm.enqueue(reply(update_adding("Alice lives in Lyon")))
    assert t.memory.flush_memory(user_id="alice").facts_added == ["Alice lives in Lyon"]
    t.memory.add_memory("I like green tea", "ok", user_id="alice")  # pending: not analysed yet
    pages_before = pages_file(home).read_bytes()
    memory_before = memory_file(home).read_bytes()

    filler = fill(mount)

    # Writes fail with a clear message and change nothing that was stored.
    message = tool_error(lambda: t.memory.add_memory(BIG, "ok", user_id="alice"))
    assert_clean_error(message, home, NO_SPACE)
    assert "alice" in message, "the error says whose memory could not be stored"
    message = tool_error(lambda: t.own.add_fact("Alice likes oolong", user_id="alice"))
    assert_clean_error(message, home, NO_SPACE)
    assert memory_file(home).read_bytes() == memory_before
    assert no_temp_files(home) == []

    # An update whose LLM call succeeded but whose write failed keeps its pages pending.
    llm.enqueue(reply(update_adding("Alice likes green tea")))
    flushed = t.memory.flush_memory(user_id="alice")
    assert flushed.errors and NO_SPACE in flushed.errors[-1], flushed.errors
    assert (flushed.pages_analysed, flushed.facts_added, flushed.pending_pages) == (0, [], 1)
    assert memory_file(home).read_bytes() == memory_before
    assert no_temp_files(home) == []

    # Earlier data is intact: the complete records are exactly the earlier ones.
    records, _unfinished = page_log(pages_file(home))
    assert pages_file(home).read_bytes().startswith(pages_before)
    assert [r["user_input"] for r in records] == ["I live in Lyon", "I write Go at Acme", "I like green tea"]
    json.loads(memory_file(home).read_bytes())

    # Reads keep working while the disk is full.
    recalled = t.memory.retrieve_memory("Where does Alice live?", user_id="alice")
    assert [p.user_input for p in recalled.short_term_memory] == [r["user_input"] for r in records]
    assert [f.content for f in recalled.retrieved_user_knowledge] == ["Alice lives in Lyon"]
    profile = t.memory.get_user_profile(user_id="alice")
    assert [f.content for f in profile.facts or []] == ["Alice lives in Lyon"]
    exported = t.own.export_memory(user_id="alice")
    assert len(exported.pages) == 3 and [f.content for f in exported.memory.facts] == ["Alice lives in Lyon"]
    assert t.own.search_facts(query="Lyon", user_id="alice").total == 1
    status = t.own.memory_status()
    assert {(u.user_id, u.pages, u.pending_pages) for u in status.users} == {("alice", 3, 1), ("bob", 1, 1)}
    assert any(NO_SPACE in error for error in status.last_update_errors), status.last_update_errors

    # Space freed: adds work again, and the pending work is done.
    filler.unlink()
    t.memory.add_memory("Back after the disk filled up", "ok", user_id="alice")
    llm.enqueue(reply(update_adding("Alice likes green tea")))
    flushed = t.memory.flush_memory(user_id="alice")
    assert (flushed.errors, flushed.facts_added, flushed.pending_pages) == ([], ["Alice likes green tea"], 0)
    records, unfinished = page_log(pages_file(home))
    assert unfinished == b""
    assert [r["user_input"] for r in records][-1] == "Back after the disk filled up"
    assert len(records) == 4
    assert t.own.memory_status().last_update_errors == []
    assert no_temp_files(home) == []


def full_disk_server(
    variant: str, tmp_path: Path, tmpfs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Callable[[], None], Callable[[], None]]:
    """A data dir, and how to fill and free its disk, for a server process started afterwards."""
    if variant == "tmpfs":
        mount = tmpfs(size="1m")
        filler: list[Path] = []
        return mount / "data", lambda: filler.append(fill(mount)), lambda: filler.pop().unlink()
    disk = SimulatedDisk(tmp_path, monkeypatch)
    return tmp_path / "data", disk.fill, disk.free


def call(server: RawServer, tool: str, **arguments: Any) -> dict[str, Any]:
    response = server.call_tool(tool, arguments)
    assert "error" not in response, response
    return response["result"]


def ok(server: RawServer, tool: str, **arguments: Any) -> dict[str, Any]:
    result = call(server, tool, **arguments)
    assert not result.get("isError"), result
    return result["structuredContent"]


def failed(server: RawServer, tool: str, **arguments: Any) -> str:
    result = call(server, tool, **arguments)
    assert result.get("isError"), f"{tool} was expected to fail: {result}"
    return "\n".join(block["text"] for block in result["content"] if block.get("type") == "text")


@pytest.mark.parametrize("variant", ["tmpfs", "simulated"])
def test_over_stdio_a_full_disk_gives_a_clear_error_and_the_server_keeps_serving(
    variant: str, tmp_path: Path, tmpfs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, make_full, make_free = full_disk_server(variant, tmp_path, tmpfs, monkeypatch)
    with RawServer(home, tmp_path / "server.stderr") as server:
        server.initialize()
        ok(server, "add_memory", user_input="I live in Lyon", agent_response="Noted", user_id="alice")
        ok(server, "add_memory", user_input="I write Go at Acme", agent_response="Nice", user_id="alice")
        ok(server, "add_memory", user_input="bob's own exchange", agent_response="ok", user_id="bob")
        ok(server, "add_fact", content="Alice lives in Lyon", user_id="alice")
        memory_before = memory_file(home).read_bytes()

        make_full()
        message = failed(server, "add_memory", user_input=BIG, agent_response="ok", user_id="alice")
        assert_clean_error(message, home, NO_SPACE)
        message = failed(server, "add_fact", content="Alice likes oolong", user_id="alice")
        assert_clean_error(message, home, NO_SPACE)
        assert memory_file(home).read_bytes() == memory_before

        recalled = ok(server, "retrieve_memory", query="Lyon", user_id="alice")
        assert [p["user_input"] for p in recalled["short_term_memory"]] == ["I live in Lyon", "I write Go at Acme"]
        profile = ok(server, "get_user_profile", user_id="alice")
        assert [f["content"] for f in profile["facts"]] == ["Alice lives in Lyon"]
        exported = ok(server, "export_memory", user_id="alice")
        assert [p["user_input"] for p in exported["pages"]] == ["I live in Lyon", "I write Go at Acme"]
        status = ok(server, "memory_status")
        assert {(u["user_id"], u["pages"]) for u in status["users"]} == {("alice", 2), ("bob", 1)}

        make_free()
        ok(server, "add_memory", user_input=BIG, agent_response="ok", user_id="alice")
        recalled = ok(server, "retrieve_memory", query="Lyon", user_id="alice")
        assert len(recalled["short_term_memory"]) == 3
        assert server.close_stdin_and_wait() == 0

    records, unfinished = page_log(pages_file(home))
    assert (len(records), unfinished) == (3, b"")
    assert json.loads(memory_file(home).read_bytes())["facts"][0]["content"] == "Alice lives in Lyon"
    assert no_temp_files(home) == []


# Regression test. Found by this suite and fixed in 64737a3; before that: store/durable.py append_records (_write_all
# at line 56): when the write fails part-way (ENOSPC after a short write) the bytes already written stay at the end of
# pages.jsonl; nothing truncates the file back to the size it had, so a half record sits on disk until the next
# successful append cuts it off
@pytest.mark.parametrize("variant", ["tmpfs", "simulated"])
def test_a_failed_add_leaves_no_partial_record_in_the_page_log(
    variant: str, tmp_path: Path, tmpfs: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, make_full, _make_free = full_disk_server(variant, tmp_path, tmpfs, monkeypatch)
    with RawServer(home, tmp_path / "server.stderr") as server:
        server.initialize()
        ok(server, "add_memory", user_input="I live in Lyon", agent_response="Noted", user_id="alice")
        before = pages_file(home).read_bytes()
        make_full()
        failed(server, "add_memory", user_input=BIG, agent_response="ok", user_id="alice")
        after = pages_file(home).read_bytes()
    assert after == before, f"{len(after) - len(before)} bytes of a failed append were left in pages.jsonl"


# --- a read-only data dir -----------------------------------------------------------------------


def test_a_data_dir_turned_read_only_under_a_running_server_fails_writes_and_keeps_serving_reads(
    tmpfs: Callable[..., Path], make_tools: Callable[..., Tools]
) -> None:
    mount = tmpfs(size="1m")
    home = mount / "data"
    t = make_tools(home, with_llm=False)
    t.memory.add_memory("I live in Lyon", "Noted", user_id="alice")
    t.memory.add_memory("bob's own exchange", "ok", user_id="bob")
    t.own.add_fact("Alice lives in Lyon", user_id="alice")
    t.own.memory_status()  # the server has read everything once

    remount(mount, "ro")
    try:
        message = tool_error(lambda: t.memory.add_memory("I moved to Berlin", "ok", user_id="alice"))
        assert_clean_error(message, home, READ_ONLY)
        message = tool_error(lambda: t.memory.add_memory("new user", "ok", user_id="carol"))
        assert_clean_error(message, home, READ_ONLY, others=("bob", "alice"))
        message = tool_error(lambda: t.own.add_fact("Alice likes tea", user_id="alice"))
        assert_clean_error(message, home, READ_ONLY)

        recalled = t.memory.retrieve_memory("Lyon", user_id="alice")
        assert [p.user_input for p in recalled.short_term_memory] == ["I live in Lyon"]
        assert [f.content for f in t.memory.get_user_profile(user_id="alice").facts or []] == ["Alice lives in Lyon"]
        assert len(t.own.export_memory(user_id="alice").pages) == 1
        status = t.own.memory_status()
        assert {u.user_id for u in status.users} == {"alice", "bob"}
        assert status.storage_ok is False and "cannot be stored" in status.notes[0]
    finally:
        remount(mount, "rw")
    assert t.own.memory_status().storage_ok is True

    t.memory.add_memory("I moved to Berlin", "ok", user_id="alice")
    assert len(t.memory.retrieve_memory("Berlin", user_id="alice").short_term_memory) == 2
    records, unfinished = page_log(pages_file(home))
    assert (len(records), unfinished) == (2, b"")
    assert no_temp_files(home) == []


def test_memory_status_over_stdio_says_when_memory_cannot_be_stored(tmp_path: Path, tmpfs: Callable[..., Path]) -> None:
    mount = tmpfs(size="1m")
    home = mount / "data"
    MemoryService(Settings(data_storage_path=home)).add_memory(
        AddMemoryRequest.build(user_input="I live in Lyon", agent_response="Noted", user_id="alice")
    )
    remount(mount, "ro")
    try:
        with RawServer(home, tmp_path / "server.stderr") as server:
            server.initialize()
            status = ok(server, "memory_status")
            assert server.close_stdin_and_wait() == 0
    finally:
        remount(mount, "rw")

    assert status["storage_ok"] is False
    assert "cannot be stored" in status["notes"][0] and str(home) in status["notes"][0]
    assert [(user["user_id"], user["pages"]) for user in status["users"]] == [("alice", 1)]


# Regression test. Found by this suite and fixed in 64737a3; before that: store/json_store.py read_pages (line 153)
# takes the scope's cross-process file lock to read new records, and opening .lock needs write access: a server
# started on a read-only data dir cannot serve retrieve_memory, export_memory or memory_status ('could not read the
# pages of alice: Read-only file system'), though nothing could be writing
def test_a_server_started_on_a_read_only_data_dir_serves_reads(
    tmp_path: Path, tmpfs: Callable[..., Path], make_tools: Callable[..., Tools]
) -> None:
    mount = tmpfs(size="1m")
    home = mount / "data"
    t = make_tools(home, with_llm=False)
    t.memory.add_memory("I live in Lyon", "Noted", user_id="alice")
    t.own.add_fact("Alice lives in Lyon", user_id="alice")
    remount(mount, "ro")
    try:
        with RawServer(home, tmp_path / "server.stderr") as server:
            server.initialize()
            message = failed(server, "add_memory", user_input="I moved", agent_response="ok", user_id="alice")
            assert_clean_error(message, home, READ_ONLY)
            profile = ok(server, "get_user_profile", user_id="alice")
            assert [f["content"] for f in profile["facts"]] == ["Alice lives in Lyon"]
            recalled = ok(server, "retrieve_memory", query="Lyon", user_id="alice")
            assert [p["user_input"] for p in recalled["short_term_memory"]] == ["I live in Lyon"]
            assert len(ok(server, "export_memory", user_id="alice")["pages"]) == 1
            assert [u["user_id"] for u in ok(server, "memory_status")["users"]] == ["alice"]
    finally:
        remount(mount, "rw")


# --- immutable files ----------------------------------------------------------------------------


def chattr(flag: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    try:
        return _run("chattr", flag, *map(str, paths))
    except FileNotFoundError:
        pytest.skip("no `chattr` command in this sandbox")


def test_immutable_memory_files_fail_writes_clearly_and_reads_still_work(
    data_dir: Path, make_tools: Callable[..., Tools]
) -> None:
    t = make_tools(data_dir, with_llm=False)
    t.memory.add_memory("I live in Lyon", "Noted", user_id="alice")
    t.own.add_fact("Alice lives in Lyon", user_id="alice")
    locked = (pages_file(data_dir), memory_file(data_dir))
    before = [path.read_bytes() for path in locked]
    done = chattr("+i", *locked)
    if done.returncode != 0:
        pytest.skip(f"`chattr +i` is not supported here ({done.stderr.strip()})")
    try:
        message = tool_error(lambda: t.memory.add_memory("I moved to Berlin", "ok", user_id="alice"))
        assert_clean_error(message, data_dir, os.strerror(errno.EPERM))
        message = tool_error(lambda: t.own.add_fact("Alice likes tea", user_id="alice"))
        assert_clean_error(message, data_dir, os.strerror(errno.EPERM))
        assert [path.read_bytes() for path in locked] == before
        assert no_temp_files(data_dir) == []

        fresh = make_tools(data_dir, with_llm=False)  # a server started now reads them too
        recalled = fresh.memory.retrieve_memory("Lyon", user_id="alice")
        assert [p.user_input for p in recalled.short_term_memory] == ["I live in Lyon"]
        assert [f.content for f in fresh.memory.get_user_profile(user_id="alice").facts or []] == [
            "Alice lives in Lyon"
        ]
        assert len(fresh.own.export_memory(user_id="alice").pages) == 1
    finally:
        chattr("-i", *locked)

    t.memory.add_memory("I moved to Berlin", "ok", user_id="alice")
    assert len(page_log(pages_file(data_dir))[0]) == 2


# --- a path that cannot be a directory ------------------------------------------------------------


def test_a_data_dir_below_a_regular_file_gives_a_clean_error_and_writes_nothing(
    tmp_path: Path, make_tools: Callable[..., Tools]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where a directory should be\n")
    home = blocker / "data"
    t = make_tools(home, with_llm=False)

    message = tool_error(lambda: t.memory.add_memory("I live in Lyon", "Noted", user_id="alice"))
    assert_clean_error(message, home, "could not store pages for alice")
    message = tool_error(lambda: t.own.add_fact("Alice lives in Lyon", user_id="alice"))
    assert_clean_error(message, home, "could not save the memory of alice")
    status = t.own.memory_status()
    assert status.users == []
    assert blocker.read_text() == "a file where a directory should be\n"


def test_a_user_directory_replaced_by_a_file_fails_that_user_only(
    data_dir: Path, make_tools: Callable[..., Tools]
) -> None:
    t = make_tools(data_dir, with_llm=False)
    t.memory.add_memory("bob's own exchange", "ok", user_id="bob")
    (data_dir / "users" / "alice").write_text("junk\n")

    message = tool_error(lambda: t.memory.add_memory("I live in Lyon", "Noted", user_id="alice"))
    assert_clean_error(message, data_dir, "could not store pages for alice")
    message = tool_error(lambda: t.memory.retrieve_memory("Lyon", user_id="alice"))
    assert_clean_error(message, data_dir, "alice")
    assert (data_dir / "users" / "alice").read_text() == "junk\n"

    # Everyone else is served as before.
    t.memory.add_memory("bob again", "ok", user_id="bob")
    assert len(t.memory.retrieve_memory("bob", user_id="bob").short_term_memory) == 2
    assert [u.user_id for u in t.own.memory_status().users] == ["bob"]
