"""The streamable-HTTP server, run as a subprocess: bearer tokens, identity, health, stopping.

What a team deploying memory-mcp relies on: a token acts for one user and no other, requests
without a valid token or aimed at another user's memory are refused with 401 / 403 and change
nothing, tokens can be added and revoked on a running server (the first one turns authentication
on), the health endpoint tells a load balancer the truth within its deadline, connections that
send nothing or too slowly are closed and cannot keep callers out or flood the log, and SIGTERM
finishes pending memory updates before the process exits.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import selectors
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx2
import pytest
from http_helpers import (
    HttpServer,
    StallingProxy,
    get_json,
    http_client,
    issue_token,
    memory_mcp,
    post_jsonrpc,
    tool_call,
)
from postgres_fixture import Schemas, pg_schemas  # noqa: F401  (pg_schemas is a fixture)
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from stdio_helpers import HANDSHAKE_PROTOCOL_VERSION, add, ok, recall, run, snapshot, write_config
from waiting import wait_until

from memory_mcp.base.settings import Settings, load_settings
from memory_mcp.mcp.http import HEALTH_DEADLINE_SECONDS, MCP_PATH, token_auth_settings
from memory_mcp.mcp.http_limits import (
    ACCEPT_FAILED,
    INVALID_REQUEST,
    REQUEST_BODY_SECONDS,
    REQUEST_HEAD_SECONDS,
    UNSUPPORTED_UPGRADE,
    Hush,
)
from memory_mcp.mcp.server import build_server
from memory_mcp.mcp.token_verifier import RegistryTokenVerifier
from memory_mcp.service.access import TokenRegistry
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore

pytestmark = pytest.mark.integration


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config.json", {"data_storage_path": str(tmp_path / "data")})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def stored_inputs(data: Path, user_id: str) -> list[str]:
    return [page.user_input for page in JsonStore(data).read_pages(Scope(user_id)).pages]


def test_each_token_acts_for_its_own_user_through_the_sdk_client(config: Path, data: Path, tmp_path: Path) -> None:
    alice, bob = issue_token(config, "alice"), issue_token(config, "bob")

    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with http_client(server.url, alice) as client:
            stored = await add(client, "I moved to Lyon last spring", "Noted: Lyon.")
            await add(client, "My cat is called Miso", "A fine name.")
        async with http_client(server.url, bob) as client:
            await add(client, "I live in Oslo", "Noted: Oslo.")
        async with http_client(server.url, alice) as client:
            recalled = await recall(client, "where did I move?")
            status = ok(await client.call_tool("memory_status", {}))
        assert stored["user_id"] == "alice"
        return recalled, status

    with HttpServer(config, tmp_path / "server.log") as server:
        recalled, status = run(body)

    assert stored_inputs(data, "alice") == ["I moved to Lyon last spring", "My cat is called Miso"]
    assert stored_inputs(data, "bob") == ["I live in Oslo"]
    assert recalled["user_id"] == "alice"
    seen = [page["user_input"] for page in recalled["short_term_memory"] + recalled["retrieved_pages"]]
    assert "I live in Oslo" not in seen and "I moved to Lyon last spring" in seen
    # memory_status names no other user, not even by id.
    assert [user["user_id"] for user in status["users"]] == ["alice"]


def test_requests_without_a_valid_token_get_401_and_change_nothing(config: Path, data: Path, tmp_path: Path) -> None:
    issue_token(config, "alice")
    add_call = tool_call("add_memory", {"user_input": "x", "agent_response": "y", "user_id": "alice"})
    with HttpServer(config, tmp_path / "server.log") as server:
        before = snapshot(data)
        for token in (None, "mm_not-a-token", ""):
            status, headers, body = post_jsonrpc(server.url, add_call, token)
            assert status == 401, (token, body)
            assert headers["www-authenticate"].startswith("Bearer")
            assert body["error"] == "invalid_token"
        assert snapshot(data) == before


@pytest.mark.parametrize(
    "message",
    [
        tool_call("add_memory", {"user_input": "planted", "agent_response": "x", "user_id": "bob"}),
        tool_call("retrieve_memory", {"query": "Oslo", "user_id": "bob"}),
        tool_call("get_user_profile", {"user_id": "bob"}),
        tool_call("export_memory", {"user_id": "bob"}),
        tool_call("forget", {"user_id": "bob", "confirm": "bob"}),
        tool_call("import_memory", {"data": {"format": "memory-mcp/export"}, "user_id": "bob"}),
        {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "memory://users/bob/profile"}},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "prompts/get",
            "params": {"name": "memory_context", "arguments": {"query": "q", "user_id": "bob"}},
        },
    ],
    ids=["add", "retrieve", "profile", "export", "forget", "import", "resource", "prompt"],
)
def test_a_token_naming_another_user_gets_403_and_changes_nothing(
    message: dict[str, Any], config: Path, data: Path, tmp_path: Path
) -> None:
    alice, bob = issue_token(config, "alice"), issue_token(config, "bob")
    with HttpServer(config, tmp_path / "server.log") as server:
        status, _, body = post_jsonrpc(
            server.url, tool_call("add_memory", {"user_input": "I live in Oslo", "agent_response": "ok"}), bob
        )
        assert status == 200, body
        before = snapshot(data)

        status, _, body = post_jsonrpc(server.url, message, alice)

        assert status == 403, body
        assert body["error"] == "forbidden"
        assert "'alice'" in body["error_description"] and "'bob'" in body["error_description"]
        assert snapshot(data) == before
    assert stored_inputs(data, "bob") == ["I live in Oslo"]


def test_tokens_issued_or_revoked_take_effect_on_a_running_server(config: Path, tmp_path: Path) -> None:
    alice = issue_token(config, "alice")
    listing = memory_mcp(config, "token", "list", "--json")
    token_id = next(entry["token_id"] for entry in json.loads(listing.stdout))
    probe = tool_call("memory_status", {})
    with HttpServer(config, tmp_path / "server.log") as server:
        assert post_jsonrpc(server.url, probe, alice)[0] == 200
        carol = issue_token(config, "carol")
        assert post_jsonrpc(server.url, probe, carol)[0] == 200

        revoked = memory_mcp(config, "token", "revoke", token_id)

        assert revoked.returncode == 0, revoked.stderr
        assert post_jsonrpc(server.url, probe, alice)[0] == 401
        assert post_jsonrpc(server.url, probe, carol)[0] == 200


def test_a_token_issued_while_a_loopback_server_runs_without_tokens_turns_authentication_on(
    config: Path, data: Path, tmp_path: Path
) -> None:
    def add_as_dana(text: str) -> dict[str, Any]:
        return tool_call("add_memory", {"user_input": text, "agent_response": "ok", "user_id": "dana"})

    with HttpServer(config, tmp_path / "server.log") as server:
        status, _, body = post_jsonrpc(server.url, add_as_dana("said before any token"))
        assert status == 200 and not body["result"]["isError"], body

        alice = issue_token(config, "alice")

        status, headers, body = post_jsonrpc(server.url, add_as_dana("said after a token"))
        assert status == 401, body
        assert headers["www-authenticate"].startswith("Bearer")
        with urllib.request.urlopen(f"{server.base}/dashboard/users/dana", timeout=30) as page:
            assert "said before any token" not in page.read().decode()
        added = tool_call("add_memory", {"user_input": "said as alice", "agent_response": "ok"})
        status, _, body = post_jsonrpc(server.url, added, alice)
        assert status == 200 and body["result"]["structuredContent"]["user_id"] == "alice", body

        # Revoking every token does not open the server again: only a restart decides afresh.
        token_id = json.loads(memory_mcp(config, "token", "list", "--json").stdout)[0]["token_id"]
        assert memory_mcp(config, "token", "revoke", token_id).returncode == 0
        assert post_jsonrpc(server.url, add_as_dana("said after revoking"))[0] == 401
    assert stored_inputs(data, "dana") == ["said before any token"]
    assert stored_inputs(data, "alice") == ["said as alice"]


def test_tokens_are_stored_hashed_and_owner_only(config: Path, data: Path) -> None:
    token = issue_token(config, "alice")

    stored = (data / "tokens.json").read_text(encoding="utf-8")

    assert token.startswith("mm_") and len(token) > 40
    assert token not in stored and "alice" in stored
    assert (data / "tokens.json").stat().st_mode & 0o077 == 0
    assert token not in memory_mcp(config, "token", "list", "--json").stdout


def test_health_is_ok_and_says_503_when_memory_cannot_be_stored(tmp_path: Path) -> None:
    good = write_config(tmp_path / "good.json", {"data_storage_path": str(tmp_path / "data")})
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the data directory should be")
    bad = write_config(tmp_path / "bad.json", {"data_storage_path": str(blocker / "data"), "http": {"auth": "none"}})
    # One user's damaged memory is that user's problem, not the server's health.
    damaged = tmp_path / "data" / "users" / "bob"
    damaged.mkdir(parents=True)
    (damaged / "memory.json").write_text("{not json")

    with HttpServer(good, tmp_path / "good.log") as server:
        status, _, body = get_json(f"{server.base}/health")
        assert (status, body["status"], body["storage"]) == (200, "ok", "json")
    with HttpServer(bad, tmp_path / "bad.log") as server:
        status, _, body = get_json(f"{server.base}/health")
        assert (status, body["status"]) == (503, "unavailable")
        assert "not-a-directory" in body["error"]


@pytest.mark.timeout(180)
def test_health_answers_503_within_its_deadline_while_the_database_hangs(
    pg_schemas: Schemas,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The database accepts connections and never answers (a stalled proxy in front of it): every
    probe still gets its answer in time, and health comes back once the database does."""
    where = conninfo_to_dict(pg_schemas.dsn)
    proxy = StallingProxy(str(where.get("host") or "127.0.0.1"), int(where.get("port") or 5432))
    proxied = make_conninfo(pg_schemas.dsn, host="127.0.0.1", port=str(proxy.port))
    storage = {"backend": "postgres", "dsn": proxied, "postgres_schema": pg_schemas.new()}
    config = write_config(tmp_path / "config.json", {"data_storage_path": str(tmp_path / "data"), "storage": storage})
    try:
        with HttpServer(config, tmp_path / "server.log") as server:
            assert get_json(f"{server.base}/health")[0] == 200

            proxy.stall()

            for _ in range(3):  # later probes wait on the check still under way, in time as well
                started = time.monotonic()
                status, _, body = get_json(f"{server.base}/health")
                assert time.monotonic() - started < 5, "a probe must be answered within 2 s, give or take"
                assert (status, body["status"]) == (503, "unavailable"), body
                assert body["error"] == f"storage not ready within {HEALTH_DEADLINE_SECONDS} s"

            proxy.resume()
            wait_until(lambda: get_json(f"{server.base}/health")[0] == 200, 60, "health once the database answers")
    finally:
        proxy.stop()


def test_without_tokens_the_server_refuses_to_listen_beyond_loopback(config: Path, tmp_path: Path) -> None:
    refused = memory_mcp(config, "--transport", "streamable-http", "--host", "0.0.0.0", "--port", "1")
    assert refused.returncode == 2
    assert "memory-mcp token add" in refused.stderr

    open_config = write_config(tmp_path / "open.json", {"http": {"auth": "none", "host": "0.0.0.0"}})
    refused = memory_mcp(open_config, "--transport", "streamable-http")
    assert refused.returncode == 2
    assert "loopback" in refused.stderr


def test_on_loopback_without_tokens_callers_name_their_user(config: Path, data: Path, tmp_path: Path) -> None:
    with HttpServer(config, tmp_path / "server.log") as server:
        status, _, body = post_jsonrpc(
            server.url, tool_call("add_memory", {"user_input": "hello", "agent_response": "hi", "user_id": "dana"})
        )
        assert status == 200 and not body["result"]["isError"], body
    assert stored_inputs(data, "dana") == ["hello"]


@pytest.mark.parametrize("auth", ["auto", "none"])
def test_on_loopback_without_tokens_another_account_on_this_machine_is_refused(
    data: Path, tmp_path: Path, auth: str
) -> None:
    """The finding: `runuser -u nobody curl` read and wrote a user's memory through a tokenless server."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("runuser") is None or python is None or not Path("/proc/net/tcp").exists():
        pytest.skip("acting as another account needs Linux, root, runuser and a system python3")
    config = write_config(tmp_path / f"config-{auth}.json", {"data_storage_path": str(data), "http": {"auth": auth}})
    call = json.dumps(tool_call("add_memory", {"user_input": "sneaked in", "agent_response": "ok"}))
    script = """
import sys, urllib.error, urllib.request
headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
for path, body in (("/mcp", sys.argv[2].encode()), ("/dashboard/users", None)):
    try:
        with urllib.request.urlopen(urllib.request.Request(sys.argv[1] + path, body, headers), timeout=10) as answer:
            print(answer.status)
    except urllib.error.HTTPError as error:
        print(error.code)
"""
    with HttpServer(config, tmp_path / "server.log") as server:
        other = subprocess.run(
            ["runuser", "-u", "nobody", "--", python, "-c", script, server.base, call],
            check=False, capture_output=True, text=True, timeout=60, cwd="/",
        )  # fmt: skip
        assert other.returncode == 0, other.stderr
        assert other.stdout.split() == ["403", "403"]
        status, _, body = post_jsonrpc(
            server.url, tool_call("add_memory", {"user_input": "mine", "agent_response": "ok"})
        )
        assert status == 200 and not body["result"]["isError"], body
    assert stored_inputs(data, "default") == ["mine"]
    assert "this account only" in (tmp_path / "server.log").read_text()


def test_sigterm_finishes_pending_memory_updates_before_exiting(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        default=reply(
            {
                "user": {},
                "history": {},
                "newFacts": [{"content": "Lives in Lyon", "category": "context", "confidence": 0.95}],
                "factsToRemove": [],
            }
        )
    ).start()
    config = write_config(
        tmp_path / "config.json",
        {
            "data_storage_path": str(tmp_path / "data"),
            "openai_base_url": llm.base_url,
            "openai_api_key": "test",
            "llm_model": SCRIPTED_MODEL,
            "memory": {"debounce_seconds": 300, "shutdown_flush_seconds": 30},
        },
    )
    token = issue_token(config, "alice")
    try:
        server = HttpServer(config, tmp_path / "server.log").start()
        status, _, body = post_jsonrpc(
            server.url, tool_call("add_memory", {"user_input": "I live in Lyon", "agent_response": "ok"}), token
        )
        assert status == 200, body
        assert llm.requests == []  # the debounce would hold it for five minutes

        assert server.stop() == 0, server.output()
    finally:
        llm.stop()

    assert len(llm.requests) == 1
    facts = JsonStore(load_settings(config).data_storage_path).read_document(Scope("alice")).facts
    assert [fact.content for fact in facts] == ["Lives in Lyon"]


def test_the_mcp_layer_binds_every_request_to_the_token_user_even_past_the_http_check(tmp_path: Path) -> None:
    """Should a request shape ever slip past the 403 check, the MCP middleware still makes it act
    as the token's user: here the app runs without that check, in process."""
    service = MemoryService(Settings(data_storage_path=tmp_path / "data"))
    registry = TokenRegistry(tmp_path / "tokens.json")
    alice = registry.issue("alice").token
    server = build_server(
        service, token_verifier=RegistryTokenVerifier(registry), auth=token_auth_settings("127.0.0.1")
    )
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True)
    headers = {"Authorization": f"Bearer {alice}", "Accept": "application/json, text/event-stream"}

    async def body() -> list[Any]:
        transport = httpx2.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http,
        ):
            messages = [
                tool_call("add_memory", {"user_input": "from alice", "agent_response": "ok", "user_id": "bob"}),
                {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "memory://users/bob/facts"}},
                tool_call("memory_status", {}),
            ]
            return [(await http.post(MCP_PATH, json=message, headers=headers)).json() for message in messages]

    try:
        added, facts, status = run(body)
    finally:
        service.close()

    assert added["result"]["structuredContent"]["user_id"] == "alice"
    assert stored_inputs(tmp_path / "data", "alice") == ["from alice"]
    assert stored_inputs(tmp_path / "data", "bob") == []
    assert json.loads(facts["result"]["contents"][0]["text"])["user_id"] == "alice"
    assert [user["user_id"] for user in status["result"]["structuredContent"]["users"]] == ["alice"]


def _instructions(url: str, token: str | None) -> str:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    status, _, body = post_jsonrpc(url, initialize, token)
    assert status == 200, body
    return str(body["result"]["instructions"])


def test_the_instructions_say_whose_memory_a_call_reaches(config: Path, tmp_path: Path) -> None:
    with HttpServer(config, tmp_path / "open.log") as server:
        assert "pass each one's user_id" in _instructions(server.url, None)
    token = issue_token(config, "alice")
    with HttpServer(config, tmp_path / "tokens.log") as server:
        told = _instructions(server.url, token)
    assert "your access token decides whose: leave user_id out" in told and "pass each one's user_id" not in told


def test_a_busy_port_is_an_error_before_anything_says_it_listens(config: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = memory_mcp(config, "--transport", "streamable-http", "--port", str(port))
    assert refused.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in refused.stderr and "--port" in refused.stderr
    assert "listening on" not in refused.stderr


def _still_open(connections: list[socket.socket], within: float, trickle: socket.socket | None = None) -> int:
    """How many of `connections` the server has not closed after `within` seconds (fewer once all
    are closed); `trickle` gets one more byte of its request head every 0.2 s meanwhile."""
    with selectors.DefaultSelector() as watching:
        for connection in connections:
            watching.register(connection, selectors.EVENT_READ)
        remaining = len(connections)
        deadline = time.monotonic() + within
        while remaining and time.monotonic() < deadline:
            for key, _ in watching.select(timeout=0.2):
                try:
                    closed = not key.fileobj.recv(65536)  # type: ignore[union-attr]
                except OSError:
                    closed = True
                if closed:
                    watching.unregister(key.fileobj)
                    remaining -= 1
            if trickle is not None and trickle.fileno() in {key.fd for key in watching.get_map().values()}:
                try:
                    trickle.sendall(b"a")
                except OSError:
                    pass  # closed: the next select sees it
        return remaining


def _connect(port: int, head: bytes = b"") -> socket.socket:
    """A connection to the server that sends `head` (or nothing) and waits."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        connection.sendall(head)
    except OSError:
        pass  # already closed to make room for newer ones: what the test is about
    return connection


def test_idle_and_half_sent_connections_are_closed_and_never_keep_a_caller_out(
    config: Path, data: Path, tmp_path: Path
) -> None:
    """More idle connections than the server may hold, nor even accept, with 256 file descriptors
    (so at most 64 connections): a caller with a token still gets in, the idle ones are closed
    within a few seconds (a head sent a byte at a time too), and the log stays a few lines long."""
    alice = issue_token(config, "alice")
    half_head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    upgrade = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    connections: list[socket.socket] = []
    with HttpServer(config, tmp_path / "server.log", max_open_files=256) as server:
        try:
            connections += [_connect(server.port, half_head if n % 3 else b"") for n in range(300)]
            connections += [_connect(server.port, b"NOT HTTP AT ALL\r\n\r\n") for _ in range(5)]
            connections += [_connect(server.port, upgrade) for _ in range(5)]
            trickle = _connect(server.port, b"GET /health HTTP/1.1\r\nX-Slow: ")
            connections.append(trickle)

            added = tool_call("add_memory", {"user_input": "I still got in", "agent_response": "ok"})
            status, _, body = post_jsonrpc(server.url, added, alice)

            assert status == 200 and not body["result"]["isError"], body
            assert _still_open(connections, within=REQUEST_HEAD_SECONDS + 20, trickle=trickle) == 0
        finally:
            for connection in connections:
                connection.close()
        assert get_json(f"{server.base}/health")[0] == 200
    assert stored_inputs(data, "alice") == ["I still got in"]
    output = server.output()
    assert output.count(INVALID_REQUEST) == 1, "five malformed requests, one line a minute"
    assert output.count(UNSUPPORTED_UPGRADE) == 1, "five WebSocket upgrades, one line a minute"
    assert ACCEPT_FAILED not in output and len(output) < 10_000, output[-3000:]


@pytest.mark.timeout(180)
def test_a_request_whose_body_stops_coming_is_cut_off(config: Path, tmp_path: Path) -> None:
    alice = issue_token(config, "alice")
    with HttpServer(config, tmp_path / "server.log") as server:
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {alice}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 1000\r\n\r\n"
        )
        slow = _connect(server.port, head.encode() + b'{"jsonrpc": "2.0", ')
        try:
            # One byte of body a second, never the 1000 announced: cut off after 30 s all the same.
            assert _still_open([slow], within=REQUEST_BODY_SECONDS + 30, trickle=slow) == 0
        finally:
            slow.close()
        assert post_jsonrpc(server.url, tool_call("memory_status", {}), alice)[0] == 200
    assert "Traceback" not in server.output(), server.output()[-3000:]


def _answer(connection: socket.socket) -> bytes:
    """All the server sends on `connection` before closing it (what came by then, after 30 s)."""
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except OSError:
        pass  # reset after the answer, or no answer within the socket's timeout
    return received


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts a process's open files in /proc (Linux)")
def test_a_server_out_of_file_descriptors_answers_503_at_once_and_says_so_once_a_minute(
    config: Path, tmp_path: Path
) -> None:
    """With no descriptor free, asyncio would log a traceback for every failed accept (and retry
    each), leaving callers queued; the server answers each caller 503 and logs one line a minute."""
    with HttpServer(config, tmp_path / "server.log") as server:
        pid = server.process.pid
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), limits[1]))
        connections: list[socket.socket] = []
        try:
            connections.extend(_connect(server.port) for _ in range(100))
            assert _answer(connections[0]).startswith(b"HTTP/1.1 503 ")
            assert _still_open(connections[1:], within=30) == 0, "every other caller is answered as well"
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
            for connection in connections:
                connection.close()
        assert get_json(f"{server.base}/health")[0] == 200
    output = server.output()
    assert output.count("short of file descriptors") == 1, output[-3000:]
    assert ACCEPT_FAILED not in output and len(output) < 10_000, output[-3000:]


def test_a_hushed_message_passes_once_a_period_and_says_how_many_were_held_back() -> None:
    now = 1000.0
    hush = Hush((INVALID_REQUEST, ACCEPT_FAILED), 60, clock=lambda: now)

    def passes(message: str) -> logging.LogRecord | None:
        record = logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, message, None, None)
        return record if hush.filter(record) else None

    assert passes(INVALID_REQUEST) is not None
    assert [passes(INVALID_REQUEST) for _ in range(4)] == [None] * 4
    assert passes(f"{ACCEPT_FAILED}\nsocket: <...>") is not None, "each kind has its own period"
    assert passes("anything else") is not None and passes("anything else") is not None
    now += 61
    shown = passes(INVALID_REQUEST)
    assert shown is not None and "(4 more like this were held back since the last one)" in shown.getMessage()
    assert passes(INVALID_REQUEST) is None
