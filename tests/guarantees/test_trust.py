"""Nothing stalls the server and one damaged user never breaks the others; the protocol's edges
get answers: tested over the real stdio transport, as hosts meet them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_llm import EMPTY_UPDATE, SCRIPTED_MODEL, ScriptedLLM, reply
from stdio_helpers import RawServer, server_env, write_config

from memory_mcp.base.settings import Settings
from memory_mcp.models import Page
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

HOLD_LOCK = """
import sys, time
from memory_mcp.store.durable import FileLock
lock = FileLock(sys.argv[1])
lock.acquire(timeout=0)
print("held", flush=True)
time.sleep(120)
"""


def tool(server: RawServer, name: str, **arguments: object) -> dict:
    return server.call_tool(name, arguments)["result"]


def text_of(result: dict) -> str:
    return " ".join(block.get("text", "") for block in result.get("content", []))


def test_a_hung_lock_holder_fails_that_users_calls_after_the_bound_and_others_are_served(
    home: Path, tmp_path: Path
) -> None:
    seeded = MemoryService(Settings(data_storage_path=home))
    for user in ("alice", "bob"):
        seeded.store.append_page(Scope(user), _page(user))
    config = write_config(tmp_path / "config.json", {"storage": {"lock_timeout_seconds": 2}})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(home / "locks" / "alice.log.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with RawServer(home, tmp_path / "stderr.log", config=config) as server:
            server.initialize()
            started = time.monotonic()
            stuck = tool(server, "add_memory", user_input="hello", agent_response="hi", user_id="alice")
            waited = time.monotonic() - started
            served = tool(server, "add_memory", user_input="hello", agent_response="hi", user_id="bob")
            recalled = tool(server, "retrieve_memory", query="hello", user_id="bob")
            status = tool(server, "memory_status")
            assert server.close_stdin_and_wait() == 0
    finally:
        holder.kill()
        holder.wait()

    assert (
        stuck["isError"] and "locked by another process" in text_of(stuck) and "lock_timeout_seconds" in text_of(stuck)
    )
    assert 1.5 < waited < 20, f"the call waited {waited:.1f} s for a 2 s bound"
    assert not served.get("isError") and not recalled.get("isError") and not status.get("isError")
    assert len(recalled["structuredContent"]["short_term_memory"]) == 2


def test_flushes_waiting_on_a_stalled_llm_never_take_the_threads_adds_need(home: Path, tmp_path: Path) -> None:
    seeded = MemoryService(Settings(data_storage_path=home))
    users = [f"user{n}" for n in range(44)]
    for user in users:
        seeded.store.append_page(Scope(user), _page(user))
    llm = ScriptedLLM(default=reply(EMPTY_UPDATE, delay=8)).start()
    config = write_config(
        tmp_path / "config.json",
        {
            "openai_base_url": llm.base_url,
            "llm_model": SCRIPTED_MODEL,
            "memory": {"debounce_seconds": 300, "llm_max_attempts": 1, "llm_timeout_seconds": 20},
        },
    )
    try:
        with RawServer(home, tmp_path / "stderr.log", config=config) as server:
            server.initialize()
            for n, user in enumerate(users):  # more than the SDK's 40 worker threads
                server.send({"jsonrpc": "2.0", "id": 5000 + n, "method": "tools/call",
                             "params": {"name": "flush_memory", "arguments": {"user_id": user}}})  # fmt: skip
            started = time.monotonic()
            added = tool(server, "add_memory", user_input="hello", agent_response="hi", user_id="bob")
            recalled = tool(server, "retrieve_memory", query="hello", user_id="bob")
            waited = time.monotonic() - started
            server.kill()
    finally:
        llm.stop()

    assert not added.get("isError") and not recalled.get("isError")
    assert waited < 6, f"add and retrieve waited {waited:.1f} s behind flushes stuck on an 8 s LLM"
    assert llm.max_in_flight <= 4  # flush_memory's own threads


def _page(user: str) -> Page:
    return Page(
        page_id=f"page_{user}", user_input=f"{user} was here", agent_response="ok", timestamp="2024-05-01T00:00:00Z"
    )


def test_a_damaged_user_fails_alone_and_status_lists_everyone(home: Path, tmp_path: Path) -> None:
    service = MemoryService(Settings(data_storage_path=home))
    for user in ("alice", "bob", "carol"):
        for n in range(3):
            service.store.append_page(Scope(user), _page(f"{user}{n}").model_copy(update={"page_id": f"p_{user}{n}"}))
    (home / "users" / "bob" / "memory.json").write_text("{not json", encoding="utf-8")
    carol_log = home / "users" / "carol" / "pages.jsonl"
    lines = carol_log.read_bytes().splitlines(keepends=True)
    carol_log.write_bytes(lines[0] + b'{"page_id": "broken"\n' + b"".join(lines[1:]))

    with RawServer(home, tmp_path / "stderr.log") as server:
        server.initialize()
        status = tool(server, "memory_status")
        alice = tool(server, "retrieve_memory", query="here", user_id="alice")
        bob = tool(server, "retrieve_memory", query="here", user_id="bob")
        carol = tool(server, "retrieve_memory", query="here", user_id="carol")
        assert server.close_stdin_and_wait() == 0
    users = {user["user_id"]: user for user in status["structuredContent"]["users"]}
    cli = subprocess.run(
        [sys.executable, "-m", "memory_mcp", "users", "--json"],
        env=server_env(home), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert not status.get("isError") and set(users) == {"alice", "bob", "carol"}
    assert users["alice"]["pages"] == 3 and users["alice"]["problem"] is None
    assert "memory.json" in users["bob"]["problem"] and "not a valid memory document" in users["bob"]["problem"]
    assert "pages.jsonl line 2" in users["carol"]["problem"]
    assert not alice.get("isError")
    assert bob["isError"] and "memory.json" in text_of(bob)
    assert carol["isError"] and "line 2" in text_of(carol)
    assert cli.returncode == 0, cli.stderr
    assert {user["user_id"]: bool(user["problem"]) for user in json.loads(cli.stdout)["users"]} == {
        "alice": False,
        "bob": True,
        "carol": True,
    }


def test_an_unreadable_line_gets_a_parse_error_at_once_and_the_server_goes_on(home: Path, tmp_path: Path) -> None:
    with RawServer(home, tmp_path / "stderr.log") as server:
        server.initialize()
        answers = []
        for line in (
            b"this is not json",
            b'{"valid": "json, but no request"}',
            b'{"jsonrpc": "2.0", "id": 5, "method"',
        ):
            server.send_line(line)
            answers.append(json.loads(server._lines.get(timeout=10)))
        added = tool(server, "add_memory", user_input="still here", agent_response="ok")
        assert server.close_stdin_and_wait() == 0

    assert [(a["id"], a["error"]["code"]) for a in answers] == [(None, -32700), (None, -32600), (None, -32700)]
    assert not added.get("isError")


def test_prompt_arguments_that_break_a_rule_are_named_in_one_error(home: Path, tmp_path: Path) -> None:
    with RawServer(home, tmp_path / "stderr.log") as server:
        server.initialize()
        bad_user = server.request(
            "prompts/get", {"name": "memory_context", "arguments": {"query": "x", "user_id": "../etc"}}
        )
        bad_budget = server.request(
            "prompts/get", {"name": "memory_context", "arguments": {"query": "x", "max_tokens": "abc"}}
        )
        assert server.close_stdin_and_wait() == 0
        stderr = server.stderr_text()

    assert bad_user["error"]["code"] == -32602 and "user_id must match" in bad_user["error"]["message"]
    assert bad_budget["error"]["code"] == -32602 and "max_tokens" in bad_budget["error"]["message"]
    assert "Traceback" not in stderr and stderr.count("memory_context prompt refused") == 2


def test_adds_for_the_default_user_keep_their_order_however_it_is_named(home: Path, tmp_path: Path) -> None:
    """user_id omitted, empty, or the configured default: one user, so one lane in arrival order."""
    names: list[dict[str, object]] = [{}, {"user_id": ""}, {"user_id": "default"}]
    with RawServer(home, tmp_path / "stderr.log") as server:
        server.initialize()
        for n in range(45):
            arguments = {"user_input": f"add {n:02d}", "agent_response": "ok", **names[n % 3]}
            server.send({"jsonrpc": "2.0", "id": 1000 + n, "method": "tools/call",
                         "params": {"name": "add_memory", "arguments": arguments}})  # fmt: skip
        answered = {json.loads(server._lines.get(timeout=30))["id"] for _ in range(45)}
        assert server.close_stdin_and_wait() == 0
    assert answered == set(range(1000, 1045))
    stored = [
        json.loads(line)["user_input"] for line in (home / "users" / "default" / "pages.jsonl").read_text().splitlines()
    ]
    assert stored == [f"add {n:02d}" for n in range(45)]
