"""Forget is final: nothing brings erased memory back, no concurrent work makes forget fail,
and an erase cut short by a crash leaves all of the memory or none of it.

Races run over the real stdio transport where a user meets them (retrieve's background save of
session visits racing forget; a second process forgetting a user a running server has cached);
the crash is simulated at the os-call boundary of a real `memory-mcp forget` process, which is
killed (os._exit) at each file operation in turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from core_calls import add
from project import PROJECT_ROOT
from stdio_helpers import RawServer, server_env

from memory_mcp.base.errors import MemoryGone
from memory_mcp.base.settings import Settings
from memory_mcp.memory.sessions import RETRIEVALS_PER_SAVE
from memory_mcp.models import AddFactRequest, ExportRequest, ForgetRequest, Page, RetrieveMemoryRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore
from memory_mcp.store.files.layout import TOMBSTONE_PREFIX

pytestmark = pytest.mark.integration


def structured(response: dict) -> dict:
    result = response["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


def user_dirs(home: Path) -> list[str]:
    users = home / "users"
    return sorted(path.name for path in users.iterdir()) if users.is_dir() else []


# --- forget racing background work ------------------------------------------------------------


def test_forget_racing_the_background_save_of_visits_never_fails_and_nothing_comes_back(
    home: Path, tmp_path: Path
) -> None:
    rounds = 12
    with RawServer(home, tmp_path / "stderr.log") as server:
        server.initialize()
        for round_number in range(rounds):
            user = f"racer{round_number}"
            for said in ("I play the cello", "my cello teacher is strict", "cello recital in May"):
                structured(
                    server.call_tool("add_memory", {"user_input": said, "agent_response": "ok", "user_id": user})
                )
            for _ in range(RETRIEVALS_PER_SAVE - 1):
                structured(server.call_tool("retrieve_memory", {"query": "cello", "user_id": user}))
            # The 20th retrieve starts the background save; forget follows on its heels.
            server.send({"jsonrpc": "2.0", "id": 10_000 + round_number, "method": "tools/call",
                         "params": {"name": "retrieve_memory", "arguments": {"query": "cello", "user_id": user}}})  # fmt: skip
            forgot = structured(server.call_tool("forget", {"user_id": user, "confirm": user}))
            assert forgot["removed_pages"] == 3
            listed = structured(server.call_tool("memory_status", {}))["users"]
            assert user not in [entry["user_id"] for entry in listed]
        assert server.close_stdin_and_wait(30) == 0, server.stderr_text()[-2000:]  # background work all done
    assert user_dirs(home) == [], "an erased user came back"
    assert "Traceback" not in server.stderr_text()


def test_many_rounds_of_forget_racing_saves_and_updates_in_process(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    for round_number in range(150):
        user = f"u{round_number}"
        add(service, "tea in the garden", user_id=user)
        for _ in range(RETRIEVALS_PER_SAVE):
            service.retrieve_memory(RetrieveMemoryRequest.build(query="tea garden", user_id=user))
        service.forget(ForgetRequest.build(user_id=user, confirm=user))
    service.close()  # waits for every background save

    assert user_dirs(data_dir) == []
    assert MemoryService(Settings(data_storage_path=data_dir)).memory_status().users == []


# --- another process forgets a user this one has cached -----------------------------------------


def test_a_user_forgotten_by_another_process_and_begun_anew_shows_only_the_new_exchanges(
    home: Path, tmp_path: Path
) -> None:
    with RawServer(home, tmp_path / "first.log") as first:
        first.initialize()
        for said in ("my secret is the blue door", "the blue door code is 4711"):
            structured(first.call_tool("add_memory", {"user_input": said, "agent_response": "ok", "user_id": "alice"}))
        cached = structured(first.call_tool("retrieve_memory", {"query": "blue door", "user_id": "alice"}))
        assert len(cached["short_term_memory"]) == 2

        # Another process forgets alice, and a third begins her memory anew.
        forget = subprocess.run(
            [sys.executable, "-m", "memory_mcp", "forget", "alice", "--yes"],
            env=server_env(home), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert forget.returncode == 0, forget.stderr
        with RawServer(home, tmp_path / "second.log") as second:
            second.initialize()
            structured(
                second.call_tool("add_memory", {"user_input": "I like tea", "agent_response": "ok", "user_id": "alice"})
            )
            assert second.close_stdin_and_wait() == 0

        recalled = structured(first.call_tool("retrieve_memory", {"query": "door code tea", "user_id": "alice"}))
        exported = structured(first.call_tool("export_memory", {"user_id": "alice"}))
        assert first.close_stdin_and_wait() == 0
    seen = json.dumps([recalled, exported])
    assert "blue door" not in seen and "4711" not in seen, "the first server served erased exchanges"
    assert [page["user_input"] for page in recalled["short_term_memory"]] == ["I like tea"]


def test_an_update_read_before_an_erase_is_never_written_into_memory_begun_anew(data_dir: Path) -> None:
    """The write a background update makes after another process erased the user and a new
    exchange began their memory again must not land in that new memory."""
    first = MemoryService(Settings(data_storage_path=data_dir))
    add(first, "my secret is the blue door", user_id="alice")
    stale = first.store.read_pages(Scope("alice"))

    second = MemoryService(Settings(data_storage_path=data_dir))
    second.forget(ForgetRequest.build(user_id="alice", confirm="alice"))
    add(second, "I like tea", user_id="alice")

    with pytest.raises(MemoryGone):
        first.store.update_document(
            Scope("alice"),
            lambda document: document.model_copy(update={"facts": []}),
            create=False,
            log_generation=stale.generation,
        )
    exported = second.export_memory(ExportRequest.build(user_id="alice"))
    assert [page.user_input for page in exported.pages] == ["I like tea"]


# --- an erase killed half-way --------------------------------------------------------------------

# Runs `memory-mcp forget alice --yes` with every file operation counted; at operation number N
# the process dies on the spot (os._exit: no cleanup, no flush, like SIGKILL for the files).
KILL_SWITCH = textwrap.dedent(
    """
    import os, shutil, sys
    sys.path.insert(0, {root!r})
    kill_at, count = int(sys.argv[1]), 0
    def counted(function):
        def wrapper(*args, **kwargs):
            global count
            count += 1
            if count == kill_at:
                os._exit(137)
            return function(*args, **kwargs)
        return wrapper
    for name in ("rename", "replace", "unlink", "rmdir", "fsync", "mkdir"):
        setattr(os, name, counted(getattr(os, name)))
    from memory_mcp.cli.main import main
    code = main(["forget", "alice", "--yes"])
    print("completed", count)
    sys.exit(code)
    """
)


def seed(home: Path) -> dict[str, bytes]:
    """alice with an agent, and bob beside her; returns alice's files by relative path."""
    service = MemoryService(Settings(data_storage_path=home))
    for scope in (Scope("alice"), Scope("alice", "coder"), Scope("bob")):
        for n in range(3):
            add(service, f"{scope.describe()} exchange {n}", user_id=scope.user_id, agent_name=scope.agent_name)
        service.add_fact(
            AddFactRequest.build(content=f"{scope.describe()} fact", user_id=scope.user_id, agent_name=scope.agent_name)
        )
    alice = home / "users" / "alice"
    return {str(path.relative_to(alice)): path.read_bytes() for path in alice.rglob("*") if path.is_file()}


def test_an_erase_killed_at_any_file_operation_leaves_all_or_nothing_and_the_next_start_finishes_it(
    tmp_path: Path,
) -> None:
    kill_point, outcomes = 0, []
    while True:
        kill_point += 1
        home = tmp_path / f"kill-{kill_point}"
        whole = seed(home)
        bob_before = sorted((home / "users" / "bob").rglob("*"))
        run = subprocess.run(
            [sys.executable, "-c", KILL_SWITCH.format(root=str(PROJECT_ROOT)), str(kill_point)],
            env=server_env(home), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        alice = home / "users" / "alice"
        if alice.exists():
            left = {str(path.relative_to(alice)): path.read_bytes() for path in alice.rglob("*") if path.is_file()}
            assert left == whole, f"kill at operation {kill_point}: alice's memory is partly gone"
            outcomes.append("whole")
        else:
            outcomes.append("gone")
        assert sorted((home / "users" / "bob").rglob("*")) == bob_before, "bob was touched"
        # The next start finishes what was cut short: no tombstone stays, and alice is listed
        # exactly when her memory is whole.
        store = JsonStore(home)
        assert not list((home / "users").glob(f"{TOMBSTONE_PREFIX}*"))
        assert store.list_users() == (["alice", "bob"] if alice.exists() else ["bob"])
        if run.returncode == 0:
            assert "completed" in run.stdout and not alice.exists()
            break
        assert run.returncode == 137, run.stderr[-2000:]
        assert kill_point < 200, "the erase never completed"
    assert "whole" in outcomes and "gone" in outcomes[:-1], outcomes  # kills landed before and after the rename
    print(
        f"\nerase: {kill_point - 1} kill points, outcomes {outcomes.count('whole')} whole / {outcomes.count('gone')} gone"
    )


EXCHANGE_KILL_SWITCH = KILL_SWITCH.replace(
    'main(["forget", "alice", "--yes"])', 'main(["forget", "alice", "--exchange", sys.argv[2], "--yes"])'
)


def test_an_exchange_erase_killed_at_any_file_operation_never_leaves_its_words_in_a_saved_index(
    tmp_path: Path,
) -> None:
    """The saved word index holds the erased exchange's words: wherever the erase is cut short,
    once the log no longer holds the exchange, no saved index of the old log is left beside it,
    and the next start finishes the erase."""
    kill_point = 0
    while True:
        kill_point += 1
        home = tmp_path / f"kill-{kill_point}"
        store = JsonStore(home)
        scope = Scope("alice")
        store.append_pages(scope, [page(n) for n in range(3)])
        store.write_document(scope, store.read_document(scope))
        assert store.write_index_snapshot(scope, b"words: zanzibar", store.read_pages(scope).generation)
        run = subprocess.run(
            [sys.executable, "-c", EXCHANGE_KILL_SWITCH.format(root=str(PROJECT_ROOT)), str(kill_point), "page_1"],
            env=server_env(home), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        log = (home / "users" / "alice" / "pages.jsonl").read_bytes()
        snapshot = JsonStore(home).read_index_snapshot(scope)
        assert b"zanzibar" in log or snapshot is None, f"kill at operation {kill_point}: the old index outlived its log"

        restarted = JsonStore(home)
        restarted.read_document(scope)  # finishes an erase cut short
        erased = "page_1" not in restarted.read_pages(scope).pages.ids
        assert erased or run.returncode == 137, run.stderr[-2000:]
        if erased:
            assert b"zanzibar" not in (home / "users" / "alice" / "pages.jsonl").read_bytes()
            assert restarted.read_index_snapshot(scope) is None, f"kill at operation {kill_point}: index kept"
        if run.returncode == 0:
            break
        assert run.returncode == 137, run.stderr[-2000:]
        assert kill_point < 100, "the erase never completed"
    print(f"\nexchange erase: {kill_point - 1} kill points")


def page(number: int) -> Page:
    said = "we sailed to zanzibar" if number == 1 else f"exchange {number}"
    return Page(page_id=f"page_{number}", user_input=said, agent_response="ok", timestamp="2025-01-01T00:00:00Z")


# --- an import that replaces memory, killed half-way ----------------------------------------------

IMPORT_KILL_SWITCH = KILL_SWITCH.replace(
    'main(["forget", "alice", "--yes"])', 'main(["import", sys.argv[2], "--mode", "replace", "--yes"])'
)


def held_by(home: Path, user: str) -> dict[str, list[str]]:
    """What a user's memory says, per scope: exchanges, and facts that hold."""
    store = JsonStore(home)
    scopes = [Scope(user), *(Scope(user, agent) for agent in store.list_agents(user))]
    return {
        scope.describe(): sorted(page.user_input for page in store.read_pages(scope).pages)
        + sorted(fact.content for fact in store.read_document(scope).facts if fact.validTo is None)
        for scope in scopes
    }


def test_an_import_replacing_memory_killed_at_any_file_operation_leaves_the_old_memory_or_the_new(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    seed(source)
    service = MemoryService(Settings(data_storage_path=source))
    add(service, "only in the new memory", user_id="alice", agent_name="writer")
    document = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    document["pages"] = document["pages"][1:]  # the new memory differs from the old
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(document))
    new = {"alice": document}
    kill_point, outcomes = 0, []
    while True:
        kill_point += 1
        home = tmp_path / f"kill-{kill_point}"
        seed(home)
        old = held_by(home, "alice")
        bob_before = held_by(home, "bob")
        run = subprocess.run(
            [sys.executable, "-c", IMPORT_KILL_SWITCH.format(root=str(PROJECT_ROOT)), str(kill_point), str(path)],
            env=server_env(home), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        now = held_by(home, "alice")  # a store opened on the root finishes what was cut short
        assert not list((home / "users").glob(".replacing-*")) and not list(
            (home / "users").glob(f"{TOMBSTONE_PREFIX}*")
        )
        if now == old:
            outcomes.append("old")
        else:
            assert now == held_by_document(new["alice"]), f"kill at operation {kill_point}: a mix of old and new"
            outcomes.append("new")
        assert held_by(home, "bob") == bob_before, "bob was touched"
        if run.returncode == 0:
            assert "completed" in run.stdout and outcomes[-1] == "new"
            break
        assert run.returncode == 137, run.stderr[-2000:]
        assert kill_point < 300, "the import never completed"
    assert "old" in outcomes and "new" in outcomes[:-1], outcomes  # kills landed before and after the swap
    print(f"\nimport replace: {kill_point - 1} kill points, {outcomes.count('old')} old / {outcomes.count('new')} new")


PAUSE_SWITCH = IMPORT_KILL_SWITCH.replace("count == kill_at", "count >= kill_at").replace(
    "os._exit(137)", 'print("paused", count, file=sys.stderr, flush=True); sys.stdin.readline()'
)


def test_a_store_opened_at_any_instant_of_a_replacement_leaves_it_to_finish(tmp_path: Path) -> None:
    """Another process opening the store (a server starting, a second import) tidies what crashes
    left; a replacement still being written is not that, whatever instant it is at."""
    seed(tmp_path / "source")
    path = tmp_path / "alice.json"
    service = MemoryService(Settings(data_storage_path=tmp_path / "source"))
    path.write_text(json.dumps(service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")))
    home = tmp_path / "home"
    seed(home)
    add(MemoryService(Settings(data_storage_path=home)), "only in the old memory", user_id="alice")
    replacing = subprocess.Popen(
        [sys.executable, "-c", PAUSE_SWITCH.format(root=str(PROJECT_ROOT)), "1", str(path)],
        env=server_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert replacing.stdin is not None and replacing.stderr is not None
    pauses = 0
    for line in replacing.stderr:
        if line.startswith("paused "):
            pauses += 1
            JsonStore(home)  # opened while the replacement waits at this file operation
            replacing.stdin.write("\n")
            replacing.stdin.flush()
    assert replacing.wait(timeout=60) == 0 and pauses > 20
    assert held_by(home, "alice") == held_by_document(json.loads(path.read_text()))
    leftovers = [*(home / "users").glob(".*"), *(home / "locks").glob(".*")]
    assert not leftovers and "only in the old memory" not in str(held_by(home, "alice"))


def held_by_document(document: dict) -> dict[str, list[str]]:
    """What an export document says, as `held_by` reads a memory."""
    parts = {"alice": document} | {f"alice/{name}": agent for name, agent in document["agents"].items()}
    return {
        scope: sorted(page["user_input"] for page in part["pages"])
        + sorted(fact["content"] for fact in part["memory"]["facts"] if fact.get("validTo") is None)
        for scope, part in parts.items()
    }
