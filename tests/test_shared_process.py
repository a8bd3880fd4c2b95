"""One process per user serves every stdio session: the `memory-mcp` each host starts relays to it,
starts it when it is not there, and survives it; it survives a client that dies, and leaves when
idle. Run as hosts run the server: the command, each session a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stdio_helpers
from hook_calls import hook
from hook_helpers import answering_badly, gone, shared_processes
from project import PYTHON
from stdio_helpers import RawServer, add, connect_command, recall, run
from waiting import wait_until

from memory_mcp.base.private_sockets import code_stamp
from memory_mcp.cli.stdio_relay import relayed_options, shared_socket, sharing_on

pytestmark = pytest.mark.integration

# `memory-mcp`, as its console script runs it.
COMMAND = [PYTHON, "-c", "import sys; from memory_mcp.cli.entry import main; sys.exit(main())"]
START_SECONDS = 60  # a shared process to start and answer, on a loaded machine


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    """A session's environment: the variables that name the shared process (MEMORY_MCP_*, OPENAI_*)
    as the test's own (what RawServer sessions inherit), this data home, sharing on."""
    named = {key: value for key, value in os.environ.items() if key.startswith(("MEMORY_MCP_", "OPENAI_"))}
    return named | {"MEMORY_MCP_HOME": str(home), "MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES": "10"}


@pytest.fixture(autouse=True)
def sharing_on_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sharing is off by default: on for every session these tests start (and those they inherit)."""
    monkeypatch.setenv("MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES", "10")


@pytest.fixture(autouse=True)
def stop_shared(home: Path) -> Iterator[None]:
    """The shared processes a test started end with it."""
    yield
    for pid in shared_processes(home):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda pid=pid: gone(pid), 30, "the shared process to exit")


@pytest.fixture
def relay_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """RawServer starts `memory-mcp` (and not `python server.py`)."""
    monkeypatch.setattr(stdio_helpers, "server_command", lambda config, extra_args: COMMAND)


def folders(tmp_path: Path, *names: str) -> list[Path]:
    made = [tmp_path / name for name in names]
    for folder in made:
        folder.mkdir()
    return made


def projects_seen(result: dict[str, Any]) -> dict[str, str | None]:
    pages = result["short_term_memory"] + [hit["page"] if "page" in hit else hit for hit in result["retrieved_pages"]]
    return {page["user_input"]: page.get("project") for page in pages}


def test_sessions_of_two_hosts_share_one_process(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    app, site = folders(tmp_path, "app", "site")

    async def body() -> tuple[dict[str, Any], dict[str, Any], list[int]]:
        async with (
            connect_command(COMMAND, env, cwd=app) as first,
            connect_command(COMMAND, env, cwd=site) as second,
        ):
            await add(first, "The app's notes live in Obsidian", "Noted")
            await add(second, "The site deploys through Fly.io", "Noted")
            seen_by_second, seen_by_first = (
                await recall(second, "Obsidian notes"),
                await recall(first, "Fly.io deploys"),
            )
            return seen_by_first, seen_by_second, shared_processes(home)

    seen_by_first, seen_by_second, serving = run(body, START_SECONDS)
    assert len(serving) == 1
    assert projects_seen(seen_by_second)["The app's notes live in Obsidian"] == str(app)
    assert projects_seen(seen_by_first)["The site deploys through Fly.io"] == str(site)


def gemini_prompt(session: str, folder: Path, prompt: str) -> dict[str, Any]:
    return {"hook_event_name": "BeforeAgent", "session_id": session, "cwd": str(folder), "prompt": prompt}


def test_prompt_hooks_are_answered_by_the_shared_process_and_no_helper_is_kept(
    home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The hooks hold no memory of their own: the first answers itself and starts the shared
    process, which answers the next, with what a session stored through it a moment before."""
    [shop] = folders(tmp_path, "shop")
    first = hook(home, "prompt", gemini_prompt("s-1", shop, "How do we deploy?"), "--host", "gemini", env=env)
    assert (first.code, first.stdout, first.stderr) == (0, "", "")  # nothing stored yet
    wait_until(lambda: list(home.glob("run/shared-*.sock")), START_SECONDS, "the hook to start the shared process")

    async def body() -> list[int]:
        async with connect_command(COMMAND, env, cwd=shop) as session:
            await add(session, "We deploy the shop with make ship", "Noted")
            return shared_processes(home)

    assert len(run(body, START_SECONDS)) == 1
    second = hook(home, "prompt", gemini_prompt("s-2", shop, "How do we deploy the shop?"), "--host", "gemini", env=env)
    assert second.code == 0 and second.stderr == ""
    assert "make ship" in json.loads(second.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(shared_processes(home)) == 1
    assert not list((home / "run").glob("hook-helper-*")), "no hook helper holds memory beside it"
    shared_log = "".join(path.read_text() for path in (home / "run").glob("shared-*.log"))
    assert "a session ended with an error" not in shared_log


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"{not json\n", "the shared memory process's answer could not be read"),
        (b'{"stdout": 5, "stderr": ""}\n', "the hook helper's answer is not what a hook prints (ignored)"),
        (None, "the shared memory process gave no answer within 10 s"),
    ],
)
def test_a_shared_process_answering_a_hook_badly_or_trickling_costs_nothing_but_a_line(
    home: Path, env: dict[str, str], tmp_path: Path, answer: bytes | None, said: str
) -> None:
    with answering_badly(shared_socket(env, None), answer, greeting=b'{"pid": 1}\n'):
        started = time.monotonic()
        outcome = hook(home, "prompt", gemini_prompt("s-1", tmp_path, "How do we deploy?"), "--host", "gemini", env=env)
        took = time.monotonic() - started
    assert (outcome.code, outcome.stdout) == (0, "")
    [line] = outcome.stderr.splitlines()
    assert line.startswith(f"memory-mcp hook prompt: {said}")
    assert took < 20, "one deadline for the whole answer"


def test_a_client_killed_mid_call_ends_its_session_alone(
    home: Path, env: dict[str, str], tmp_path: Path, relay_command: None
) -> None:
    async def body() -> None:
        async with connect_command(COMMAND, env, cwd=tmp_path) as survivor:
            await add(survivor, "Before the crash", "Noted")
            serving = shared_processes(home)
            with RawServer(home, tmp_path / "doomed.log", cwd=tmp_path) as doomed:
                doomed.initialize()
                doomed.send(tool_call(7, "add_memory", {"user_input": "x " * 50_000, "agent_response": "y"}))
                doomed.kill()  # SIGKILL, the call in flight
            await add(survivor, "After the crash", "Noted")
            assert "Before the crash" in projects_seen(await recall(survivor, "crash"))
            assert shared_processes(home) == serving

    run(body, START_SECONDS)


def tool_call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def answer_to(session: RawServer, request_id: int) -> dict[str, Any]:
    def answered() -> dict[str, Any] | None:
        for line in session.stdout_lines:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return dict(message)
        return None

    wait_until(answered, START_SECONDS, f"an answer to request {request_id}")
    answer = answered()
    assert answer is not None
    return answer


def test_the_shared_process_killed_mid_add_loses_nothing_acknowledged(
    home: Path, tmp_path: Path, relay_command: None
) -> None:
    words = ["kumquat", "quokka", "axolotl"]
    acknowledged, failed = [], []
    with RawServer(home, tmp_path / "session.log", cwd=tmp_path) as session:
        session.initialize()
        for n, word in enumerate(words):
            (serving,) = shared_processes(home)
            session.send(tool_call(100 + n, "add_memory", {"user_input": f"My {word} is fine", "agent_response": "ok"}))
            os.kill(serving, signal.SIGKILL)
            answer = answer_to(session, 100 + n)
            (acknowledged if "result" in answer and not answer["result"].get("isError") else failed).append(word)
            assert "result" in answer or "not acknowledged" in answer["error"]["message"]
            found = session.call_tool("retrieve_memory", {"query": " ".join(words)})  # served by a new process
            assert not found["result"].get("isError"), found
            (replacement,) = shared_processes(home)
            assert replacement != serving
    stored = json.dumps(found["result"]["structuredContent"])
    assert all(word in stored for word in acknowledged), (acknowledged, failed)


def test_the_shared_process_leaves_when_idle(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    env["MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES"] = "0.02"

    async def body() -> list[int]:
        async with connect_command(COMMAND, env, cwd=tmp_path) as client:
            await add(client, "Remembered before the process left", "Noted")
            return shared_processes(home)

    (serving,) = run(body, START_SECONDS)
    wait_until(lambda: gone(serving), 30, "the idle shared process to exit")
    assert not list((home / "run").glob("shared-*.sock"))


@pytest.mark.parametrize("switch", ["environment", "config file", "default"])
def test_idle_minutes_zero_serves_each_session_in_its_own_process(
    home: Path, env: dict[str, str], tmp_path: Path, switch: str
) -> None:
    if switch == "environment":
        env["MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES"] = "0"
    else:
        del env["MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES"]
    if switch == "config file":
        home.mkdir(parents=True)
        (home / "config.json").write_text(json.dumps({"shared_process_idle_minutes": 0}), encoding="utf-8")

    async def body() -> list[int]:
        async with connect_command(COMMAND, env, cwd=tmp_path) as first, connect_command(COMMAND, env) as second:
            await add(first, "Served in a process of its own", "Noted")
            assert "Served in a process of its own" in projects_seen(await recall(second, "process of its own"))
            return shared_processes(home)

    assert run(body, START_SECONDS) == []


def test_a_data_folder_nothing_can_be_made_in_serves_the_session_itself_at_once(
    home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The shared process fails to start (its folder cannot be made): the session is served in its
    own process straight away (which says where its data is), not after a minute of failing starts."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    env["MEMORY_MCP_HOME"] = str(blocker / "memory")
    ended = subprocess.run(
        COMMAND, env=os.environ | env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert ended.returncode == 0 and f"data in {blocker}" in ended.stderr


def test_sharing_is_read_from_the_environment_else_the_config_file_else_off(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"shared_process_idle_minutes": 10}), encoding="utf-8")
    home = {"MEMORY_MCP_HOME": str(tmp_path)}
    assert sharing_on(home, None) and sharing_on({}, str(config)), "the data folder's config.json, or --config"
    assert not sharing_on(home | {"MEMORY_MCP_SHARED_PROCESS_IDLE_MINUTES": "0"}, None), "the environment wins"
    assert not sharing_on({"MEMORY_MCP_HOME": str(tmp_path / "elsewhere")}, None), "off by default"
    config.write_text("{not json", encoding="utf-8")
    assert not sharing_on(home, None), "a config the settings will refuse: served here, where they say why"


def test_only_a_plain_stdio_server_is_relayed() -> None:
    assert relayed_options([]) == {}
    assert relayed_options(["--config=c.json"]) == {"--config": "c.json"}
    assert relayed_options(["--transport", "stdio"]) == {"--transport": "stdio"}
    others = (["--transport", "streamable-http"], ["--port", "1"], ["--help"], ["--config"], ["--log-level", "DEBUG"])
    for other in others:  # a --log-level wants the log on its own stderr: served in its own process
        assert relayed_options(other) is None


def test_settings_that_differ_are_served_by_different_processes(tmp_path: Path) -> None:
    home = {"MEMORY_MCP_HOME": str(tmp_path)}
    assert shared_socket(home, None) == shared_socket(dict(home), None)
    assert shared_socket(home, None).parent == tmp_path / "run"
    assert shared_socket(home, None) != shared_socket(home, "/x/config.json")
    assert shared_socket(home, None) != shared_socket(home | {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, None)
    assert shared_socket(home, None) == shared_socket(home | {"PATH": "/elsewhere"}, None)
    # Codex gives its server only the variables settings read, its hooks all: both are served by one.
    assert shared_socket(home, None) == shared_socket(home | {"OPENAI_ORG_ID": "org-1"}, None)
    before = shared_socket(home, None)
    (tmp_path / "config.json").write_text('{"user_id": "dana"}', encoding="utf-8")
    assert shared_socket(home, None) != before, "an edited config file is served by a new process"


def test_code_changed_in_place_gets_a_new_process(tmp_path: Path) -> None:
    (tmp_path / "package" / "part").mkdir(parents=True)
    module = tmp_path / "package" / "part" / "module.py"
    module.write_text("", encoding="utf-8")
    before = code_stamp(tmp_path / "package")
    os.utime(module, ns=(before + 10**9, before + 10**9))
    assert code_stamp(tmp_path / "package") == before + 10**9
