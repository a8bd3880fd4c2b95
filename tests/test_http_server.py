"""The streamable-HTTP server, run as a subprocess: bearer tokens, identity, health, stopping.

What a team deploying memory-mcp relies on: a token acts for one user and no other, requests
without a valid token or aimed at another user's memory are refused with 401 / 403 and change
nothing, tokens can be added and revoked on a running server, the health endpoint tells a load
balancer the truth, and SIGTERM finishes pending memory updates before the process exits.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest
from http_helpers import (
    HttpServer,
    get_json,
    http_client,
    issue_token,
    memory_mcp,
    post_jsonrpc,
    tool_call,
)
from scripted_llm import ScriptedLLM, reply
from stdio_helpers import HANDSHAKE_PROTOCOL_VERSION, add, ok, recall, run, snapshot, write_config

from memory_mcp.access import RegistryTokenVerifier, TokenRegistry
from memory_mcp.config import Settings, load_settings
from memory_mcp.http_server import MCP_PATH, token_auth_settings
from memory_mcp.server import build_server
from memory_mcp.service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.json_store import JsonStore

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
