"""Structured memory end to end over the real stdio transport: `python server.py` as a host runs
it, JSON-RPC on its stdin and stdout, the LLM a scripted HTTP server in this test process.

Covers what only a real process shows: pending work surviving SIGKILL, the flush at shutdown
(stdin closed, SIGTERM), and the shutdown bound when the LLM hangs.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, Step, conversation_of, reply
from stdio_helpers import HANDSHAKE_PROTOCOL_VERSION, RawServer, write_config
from waiting import wait_until

pytestmark = pytest.mark.integration

PROTOCOL_VERSION = HANDSHAKE_PROTOCOL_VERSION
EXIT_MARGIN = 3.0  # interpreter teardown on a loaded machine, beyond the configured shutdown bound


# --- a minimal MCP client that owns the server process ----------------------------------------


class StdioServer(RawServer):
    """`python server.py --config ...` with the LLM endpoint given the way users give it, in
    OPENAI_BASE_URL (which RawServer otherwise keeps from the server), and the data dir in
    MEMORY_MCP_HOME; initialized, and with calls that must succeed."""

    def __init__(self, workdir: Path, name: str, home: Path, memory: dict[str, Any], llm_url: str | None) -> None:
        super().__init__(
            home,
            workdir / f"{name}.stderr.log",
            config=write_config(workdir / f"{name}.config.json", {"memory": memory}),
            extra_env={"OPENAI_BASE_URL": llm_url, "MEMORY_MCP_LLM_MODEL": SCRIPTED_MODEL} if llm_url else None,
            cwd=workdir,
        )
        initialized = self.initialize(PROTOCOL_VERSION)
        assert initialized["result"]["protocolVersion"] == PROTOCOL_VERSION, initialized

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        response = self.call_tool(tool, arguments)
        assert "error" not in response and not response["result"].get("isError"), response
        return response["result"]["structuredContent"]

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout)


# --- helpers ---------------------------------------------------------------------------------


def fact_update(*contents: str, delay: float = 0.0) -> Step:
    return reply(
        {
            "user": {},
            "history": {},
            "newFacts": [{"content": content, "category": "context", "confidence": 0.9} for content in contents],
            "factsToRemove": [],
        },
        delay=delay,
    )


def requests_with(llm: ScriptedLLM, text: str) -> list[int]:
    return [i for i, request in enumerate(list(llm.requests)) if text in conversation_of(request)]


def facts_on_disk(data_dir: Path, user: str) -> list[str]:
    path = data_dir / "users" / user / "memory.json"
    if not path.exists():
        return []
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:  # never half-written (atomic rename), but be safe while polling
        return []
    return [fact["content"] for fact in document.get("facts", []) if fact.get("validTo") is None]


# A debounce that never fires by itself: updates run only when flushed, at shutdown, or resumed.
MEMORY = {"debounce_seconds": 60, "shutdown_flush_seconds": 5, "llm_timeout_seconds": 10, "llm_max_attempts": 2}


ServerFactory = Callable[..., StdioServer]


@pytest.fixture
def start_server(tmp_path: Path, data_dir: Path, llm: ScriptedLLM) -> Iterator[ServerFactory]:
    """Start server processes on the test's data dir; any still running at the end are killed."""
    started: list[StdioServer] = []

    def factory(name: str = "server", with_llm: bool = True, **memory: Any) -> StdioServer:
        server = StdioServer(tmp_path, name, data_dir, {**MEMORY, **memory}, llm.base_url if with_llm else None)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.kill()


# --- tools over stdio --------------------------------------------------------------------------


def test_add_flush_profile_and_retrieve_over_stdio(start_server: ServerFactory, llm: ScriptedLLM) -> None:
    llm.enqueue(
        reply(
            {
                "user": {"workContext": {"summary": "Alice is a Go engineer at Acme.", "shouldUpdate": True}},
                "history": {},
                "newFacts": [
                    {"content": "Writes Go at Acme", "category": "knowledge", "confidence": 0.8},
                    {"content": "Has a cat named Miso", "category": "context", "confidence": 0.95},
                ],
                "factsToRemove": [],
                "assistantKnowledge": ["Recommended table-driven tests"],
            }
        )
    )
    server = start_server()
    for user_input in ("I write Go at Acme", "My cat Miso sat on my keyboard"):
        started = time.monotonic()
        added = server.call(
            "add_memory", user_input=user_input, agent_response="Nice", user_id="alice", thread_id="chat-1"
        )
        assert added["status"] == "success"
        assert time.monotonic() - started < 2
    server.call("add_memory", user_input="bob's exchange", agent_response="ok", user_id="bob")
    assert llm.requests == []  # debounce is 60 s: nothing runs until asked

    flushed = server.call("flush_memory", user_id="alice")

    assert flushed["extraction"] == "server"
    assert (flushed["pages_analysed"], flushed["llm_calls"], flushed["pending_pages"]) == (2, 1, 0)
    assert flushed["facts_added"] == ["Writes Go at Acme", "Has a cat named Miso"]
    assert flushed["sections_updated"] == ["user.workContext"]
    assert flushed["assistant_knowledge_added"] == ["Recommended table-driven tests"]
    assert flushed["errors"] == []
    [request] = llm.requests
    assert "I write Go at Acme" in conversation_of(request) and "Miso" in conversation_of(request)
    assert "bob's exchange" not in conversation_of(request)

    profile = server.call("get_user_profile", user_id="alice")
    assert profile["user"]["workContext"]["summary"] == "Alice is a Go engineer at Acme."
    assert [f["content"] for f in profile["facts"]] == ["Has a cat named Miso", "Writes Go at Acme"]
    assert all(f["source"] == "chat-1" for f in profile["facts"])

    recalled = server.call("retrieve_memory", query="what is my cat called", user_id="alice")
    assert recalled["retrieved_user_knowledge"][0]["content"] == "Has a cat named Miso"

    assert server.call("flush_memory", user_id="bob")["pending_pages"] == 0
    assert len(llm.requests) == 2

    server.close_stdin()
    assert server.wait_exit(5 + EXIT_MARGIN) == 0


def test_flush_over_stdio_without_an_llm_says_how_to_turn_it_on(start_server: ServerFactory) -> None:
    server = start_server(with_llm=False)
    server.call("add_memory", user_input="I write Go", agent_response="ok", user_id="alice")

    flushed = server.call("flush_memory", user_id="alice")

    assert (flushed["extraction"], flushed["pending_pages"], flushed["errors"]) == ("off", 1, [])
    assert "OPENAI_BASE_URL" in " ".join(flushed["notes"])
    server.close_stdin()
    assert server.wait_exit(EXIT_MARGIN) == 0


# --- crashes -------------------------------------------------------------------------------------


def test_a_killed_server_resumes_its_pending_work_at_restart_and_analyses_no_page_twice(
    start_server: ServerFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    llm.enqueue(fact_update("Known before the crash"))
    llm.default = fact_update("Learned after the restart")
    first = start_server("first")
    for text in ("exchange one", "exchange two"):
        first.call("add_memory", user_input=text, agent_response="ok", user_id="alice", thread_id="t")
    assert first.call("flush_memory", user_id="alice")["pages_analysed"] == 2
    first.call("add_memory", user_input="exchange three", agent_response="ok", user_id="alice", thread_id="t")
    first.call("add_memory", user_input="exchange four", agent_response="ok", user_id="alice", thread_id="u")
    first.call("add_memory", user_input="bob's exchange", agent_response="ok", user_id="bob")

    first.process.send_signal(signal.SIGKILL)
    assert first.wait_exit(5) == -signal.SIGKILL
    assert len(llm.requests) == 1  # the three later exchanges were only pending

    second = start_server("second", debounce_seconds=0.3)  # nothing is added to it: resuming is enough

    wait_until(lambda: len(llm.requests) == 4 and None not in llm.answered, timeout=10, what="the resumed updates")
    wait_until(lambda: "Learned after the restart" in facts_on_disk(data_dir, "bob"), timeout=5, what="bob's update")
    for text in ("exchange one", "exchange two", "exchange three", "exchange four", "bob's exchange"):
        assert len(requests_with(llm, text)) == 1, f"{text!r} was analysed {len(requests_with(llm, text))} times"
    assert facts_on_disk(data_dir, "alice") == ["Known before the crash", "Learned after the restart"]
    for user in ("alice", "bob"):
        flushed = second.call("flush_memory", user_id=user)
        assert (flushed["llm_calls"], flushed["pending_pages"]) == (0, 0)
    assert len(llm.requests) == 4

    second.close_stdin()
    assert second.wait_exit(5 + EXIT_MARGIN) == 0


def test_a_server_killed_during_an_update_applies_it_once_after_restart(
    start_server: ServerFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    llm.enqueue(fact_update("Never applied", delay=30))  # the update the kill interrupts
    llm.default = fact_update("Applied once")
    first = start_server("first", debounce_seconds=0.2)
    first.call("add_memory", user_input="the exchange", agent_response="ok", user_id="alice")
    wait_until(lambda: len(llm.requests) == 1, timeout=10, what="the update to reach the LLM")

    first.process.send_signal(signal.SIGKILL)
    assert first.wait_exit(5) == -signal.SIGKILL
    assert facts_on_disk(data_dir, "alice") == []

    second = start_server("second")
    wait_until(lambda: facts_on_disk(data_dir, "alice") == ["Applied once"], timeout=10, what="the resumed update")
    flushed = second.call("flush_memory", user_id="alice")

    assert (flushed["llm_calls"], flushed["pending_pages"]) == (0, 0)
    assert len(llm.requests) == 2  # the interrupted call, and the one after the restart
    second.close_stdin()
    assert second.wait_exit(5 + EXIT_MARGIN) == 0
    assert facts_on_disk(data_dir, "alice") == ["Applied once"]


# --- shutdown ----------------------------------------------------------------------------------


def end_server(server: StdioServer, how: str) -> None:
    """Ask the server to end the way hosts do: close its stdin, or send a signal (stdin left open)."""
    if how == "close stdin":
        server.close_stdin()
    else:
        server.process.send_signal(getattr(signal, how))


ENDINGS = ["close stdin", "SIGTERM", "SIGINT"]


@pytest.mark.parametrize("how", ENDINGS)
def test_pending_updates_run_before_the_server_exits(
    start_server: ServerFactory, llm: ScriptedLLM, data_dir: Path, how: str
) -> None:
    llm.default = fact_update("Flushed at shutdown", delay=0.3)
    server = start_server(shutdown_flush_seconds=5)
    server.call("add_memory", user_input="alice's exchange", agent_response="ok", user_id="alice")
    server.call("add_memory", user_input="bob's exchange", agent_response="ok", user_id="bob", thread_id="x")
    assert llm.requests == []  # debounce is 60 s

    end_server(server, how)

    assert server.wait_exit(5 + EXIT_MARGIN) == 0
    assert facts_on_disk(data_dir, "alice") == ["Flushed at shutdown"]
    assert facts_on_disk(data_dir, "bob") == ["Flushed at shutdown"]
    assert len(llm.requests) == 2


@pytest.mark.parametrize("how", ["close stdin", "SIGTERM"])
def test_a_hanging_llm_does_not_hold_up_exit_and_the_work_waits_for_the_next_start(
    start_server: ServerFactory, llm: ScriptedLLM, data_dir: Path, how: str
) -> None:
    llm.default = fact_update("Too late", delay=30)
    server = start_server("hanging", debounce_seconds=0.2, shutdown_flush_seconds=1, llm_timeout_seconds=60)
    server.call("add_memory", user_input="the exchange", agent_response="ok", user_id="alice")
    wait_until(lambda: len(llm.requests) == 1, timeout=10, what="the update to reach the LLM")

    closed = time.monotonic()
    end_server(server, how)

    assert server.wait_exit(1 + EXIT_MARGIN) == 0
    assert time.monotonic() - closed < 1 + EXIT_MARGIN
    assert "still pending at shutdown" in server.stderr_text()
    assert facts_on_disk(data_dir, "alice") == []
    if how != "close stdin":
        return  # resuming at the next start is the same whatever ended the server

    llm.default = fact_update("Done at the next start")
    restarted = start_server("restarted")
    wait_until(
        lambda: facts_on_disk(data_dir, "alice") == ["Done at the next start"],
        timeout=10,
        what="the update resumed at the next start",
    )
    assert requests_with(llm, "the exchange") == [0, 1]
    restarted.close_stdin()
    assert restarted.wait_exit(5 + EXIT_MARGIN) == 0
