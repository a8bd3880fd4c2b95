"""Hooks and the stdio server a host starts, against a team's memory-mcp HTTP server
(memory_server.url / MEMORY_MCP_SERVER_URL): the real commands against the real server with bearer
tokens. The server stores and
recalls for the token's user, the hook keeps no memory of its own, and a server that refuses or
does not answer costs the prompt nothing: one line on stderr, no output, exit 0."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from claude_code_session import Transcript, text
from command_line import Outcome, cli
from hook_calls import hook
from http_helpers import HttpServer, free_port, issue_token
from sample_memory import write_json
from stdio_helpers import RawServer, connect_command, ok, run, server_command

from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore

pytestmark = pytest.mark.integration

ALICE = "alice@corp.example"
TOLD = "We deploy the webshop with make ship, never by hand."


def gemini(event: str, session: str, shop: Path, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": session, "cwd": str(shop), "timestamp": f"{session}-t", **fields}


@pytest.fixture
def server_data(tmp_path: Path) -> Path:
    return tmp_path / "server-data"


@pytest.fixture
def server(tmp_path: Path, server_data: Path) -> Any:
    config = tmp_path / "server.json"
    write_json(config, {"data_storage_path": str(server_data)})
    tokens = {user: issue_token(config, user) for user in (ALICE, "bob")}
    with HttpServer(config, tmp_path / "server.log") as running:
        yield running, tokens


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    folder = tmp_path / "code" / "webshop"
    folder.mkdir(parents=True)
    return folder


def remote(url: str, token: str) -> dict[str, str]:
    return {"MEMORY_MCP_SERVER_URL": url, "MEMORY_MCP_SERVER_TOKEN": token}


def test_hooks_store_and_recall_on_the_server_for_the_tokens_user(
    server: Any, server_data: Path, home: Path, shop: Path
) -> None:
    running, tokens = server
    alice = remote(running.base, tokens[ALICE])
    stop = gemini("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response="Noted: make ship.")
    assert hook(home, "stop", stop, "--host", "gemini", env=alice) == Outcome(0, "", "")
    pages = JsonStore(server_data).read_pages(Scope(ALICE)).pages
    assert [(page.user_input, page.thread_id) for page in pages] == [(TOLD, "s-one")]
    assert pages[0].project is not None and pages[0].project.endswith("webshop")
    assert not home.exists() or not list(home.rglob("pages.jsonl")), "nothing stored on this machine"

    asked = gemini("BeforeAgent", "s-two", shop, prompt="How do we deploy?")
    answer = hook(home, "prompt", asked, "--host", "gemini", env=alice)
    assert (answer.code, answer.stderr) == (0, "")
    context = json.loads(answer.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("<memory>") and TOLD in context
    again = hook(home, "prompt", asked, "--host", "gemini", env=alice)
    assert again == Outcome(0, "", ""), "nothing given twice in a session: the server keeps its ledger"

    bobs = hook(
        home,
        "prompt",
        gemini("BeforeAgent", "s-three", shop, prompt="How do we deploy?"),
        env=remote(running.base, tokens["bob"]),
    )
    assert bobs == Outcome(0, "", ""), "bob's token sees nothing of alice's"
    other = hook(home, "prompt", asked, "--host", "gemini", "--user", "bob", env=alice)
    assert other.code == 0 and other.stdout == "" and "403" in other.stderr, "a token names its user alone"


def test_two_copies_of_one_session_start_hook_get_the_digest_once(
    server: Any, server_data: Path, home: Path, shop: Path
) -> None:
    """VS Code runs Claude Code's session-start hook and its own for one start: against the
    server too, one of them is given the digest, the other nothing; a later start has it again."""
    running, tokens = server
    alice = remote(running.base, tokens[ALICE])
    stop = gemini("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response="Noted: make ship.")
    assert hook(home, "stop", stop, "--host", "gemini", env=alice) == Outcome(0, "", "")
    start = {"cwd": str(shop), "sessionId": "vs-session", "hookEventName": "SessionStart", "source": "new"}

    def starts(stamp: str) -> list[Outcome]:
        sent = {**start, "timestamp": stamp}
        with ThreadPoolExecutor(2) as pool:
            return list(
                pool.map(lambda flags: hook(home, "session-start", sent, *flags, env=alice), [[], ["--host", "vscode"]])
            )

    answers = starts("2026-11-27T12:05:00.000Z")
    assert [(outcome.code, outcome.stderr) for outcome in answers] == [(0, ""), (0, "")]
    assert sorted(TOLD in outcome.stdout for outcome in answers) == [False, True], answers
    assert sum(TOLD in outcome.stdout for outcome in starts("2026-11-27T12:30:00.000Z")) == 1, "a later start has it"


def test_a_server_that_never_answers_costs_a_hook_less_than_the_hosts_timeout(home: Path, shop: Path) -> None:
    """memory_server.timeout_seconds may say 60; the hosts kill a prompt hook after 15 s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections are made and never answered
        home.mkdir(parents=True)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        write_json(home / "config.json", {"memory_server": {"url": url, "token": "t", "timeout_seconds": 60}})
        asked = gemini("BeforeAgent", "s-one", shop, prompt="How do we deploy?")

        started = time.monotonic()
        outcome = hook(home, "prompt", asked, "--host", "gemini")
        waited = time.monotonic() - started

    assert outcome.code == 0 and outcome.stdout == "" and "did not answer" in outcome.stderr
    assert waited < 15, f"the hook waited {waited:.1f} s"


def test_a_long_session_with_a_huge_paste_is_stored_whole_on_the_server(
    server: Any, server_data: Path, home: Path, shop: Path, tmp_path: Path
) -> None:
    """More exchanges than one request may carry, and a paste larger than a request's body: the
    stop sends them in several requests, each side within max_text_chars."""
    running, tokens = server
    session = Transcript(tmp_path / "long.jsonl", session_id="long", cwd=str(shop))
    session.prompt("Here is the log: " + "x" * 5_000_000)
    session.reply(text("That is a long log."))
    for step in range(1_000):
        session.prompt(f"step {step}")
        session.reply(text(f"done {step}"))

    stopped = cli(
        home, "hook", "stop", stdin=json.dumps(session.stop_input(last_message="done 999")),
        env=remote(running.base, tokens[ALICE]),
    )  # fmt: skip

    assert stopped == Outcome(0, "", "")
    pages = JsonStore(server_data).read_pages(Scope(ALICE)).pages
    assert len(pages) == 1_001 and pages[-1].user_input == "step 999"
    assert pages[0].user_input.startswith("Here is the log: ") and len(pages[0].user_input) <= 100_000


def test_a_server_that_refuses_or_is_not_there_costs_the_prompt_nothing(server: Any, home: Path, shop: Path) -> None:
    running, _ = server
    asked = gemini("BeforeAgent", "s-one", shop, prompt="How do we deploy?")
    for env, said in (
        (remote(running.base, "not-a-token"), "refused (401)"),
        (remote(f"http://127.0.0.1:{free_port()}", "t"), "did not answer"),
    ):
        outcome = hook(home, "prompt", asked, "--host", "gemini", env=env)
        assert outcome.code == 0 and outcome.stdout == "" and said in outcome.stderr
        assert len(outcome.stderr.strip().splitlines()) == 1
        stop = hook(home, "stop", gemini("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response="ok"), env=env)
        assert stop.code == 0 and stop.stdout == "" and said in stop.stderr


def test_a_host_whose_stop_lacks_the_prompt_pairs_it_here_and_stores_it_there(
    server: Any, server_data: Path, home: Path, shop: Path
) -> None:
    running, tokens = server
    alice = remote(running.base, tokens[ALICE])
    common = {
        "conversation_id": "c-1",
        "generation_id": "g-1",
        "cursor_version": "2.1.7",
        "workspace_roots": [str(shop)],
    }
    hook(home, "prompt", {**common, "hook_event_name": "beforeSubmitPrompt", "prompt": TOLD}, env=alice)
    hook(home, "stop", {**common, "hook_event_name": "afterAgentResponse", "text": "Noted."}, env=alice)
    assert [page.user_input for page in JsonStore(server_data).read_pages(Scope(ALICE)).pages] == [TOLD]


def test_the_server_can_be_set_in_the_config_file(
    server: Any, server_data: Path, home: Path, shop: Path, tmp_path: Path
) -> None:
    running, tokens = server
    config = tmp_path / "hooks.json"
    write_json(config, {"memory_server": {"url": running.base, "token": tokens[ALICE], "timeout_seconds": 3}})
    stop = gemini("AfterAgent", "s-one", shop, prompt=TOLD, prompt_response="ok")
    assert cli(home, "--config", config, "hook", "stop", "--host", "gemini", stdin=json.dumps(stop)) == Outcome(
        0, "", ""
    )
    assert len(JsonStore(server_data).read_pages(Scope(ALICE)).pages) == 1


# --- the stdio server a host starts, its memory on the team's server ---------------------------


def test_a_hosts_stdio_server_serves_the_tokens_memory_from_the_team_server(
    server: Any, server_data: Path, home: Path, shop: Path
) -> None:
    running, tokens = server

    async def session(token: str) -> tuple[list[str], str]:
        env = {
            "MEMORY_MCP_HOME": str(home),
            **remote(running.base, token),
            "MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES": "5",
        }
        async with connect_command(server_command(), env, cwd=shop) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            if token == tokens[ALICE]:
                ok(await client.call_tool("add_memory", {"user_input": TOLD, "agent_response": "Noted."}))
            found = ok(await client.call_tool("retrieve_memory", {"query": "How do we deploy the webshop?"}))
            return tools, str(found["context"])

    tools, alices = run(lambda: session(tokens[ALICE]))
    assert {"add_memory", "retrieve_memory", "get_user_profile"} <= set(tools) and TOLD in alices
    [page] = JsonStore(server_data).read_pages(Scope(ALICE)).pages
    assert page.user_input == TOLD and page.project is not None and page.project.endswith("webshop")
    assert not home.exists() or not list(home.rglob("*.jsonl")), "nothing stored or shared on this machine"
    assert not home.exists() or not list(home.rglob("shared-*.sock")), "no shared process holds memory here"
    _, bobs = run(lambda: session(tokens["bob"]))
    assert TOLD not in bobs, "bob's token sees nothing of alice's"


def test_a_stdio_server_whose_team_server_refuses_or_is_not_there_answers_each_call_with_why(
    server: Any, home: Path, shop: Path
) -> None:
    running, _ = server
    gone = f"http://127.0.0.1:{free_port()}"
    for url, token, said in (
        (running.base, "not-a-token", f"the memory server at {running.base}/mcp answered 401"),
        (gone, "t", f"the memory server at {gone}/mcp did not answer"),
    ):
        with RawServer(home, home.parent / "stderr.log", extra_env=remote(url, token), cwd=shop) as stdio:
            for _ in range(2):  # the session goes on: each call gets its answer
                assert said in stdio.initialize()["error"]["message"]
            assert stdio.close_stdin_and_wait() == 0
            assert said in stdio.stderr_text()
