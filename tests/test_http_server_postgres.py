"""Two HTTP server instances on one PostgreSQL database, under load from two clients at once.

The deployment the PostgreSQL backend exists for: instances behind a load balancer, any of them
answering any user. Nothing acknowledged may be lost or stored twice, an exchange written
through one instance must be found through the other at once, and each exchange must reach
the LLM exactly once although both instances run updaters for the same users.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from http_helpers import HttpServer, http_client, issue_token
from postgres_fixture import Schemas, pg_schemas  # noqa: F401  (pg_schemas is a fixture)
from scripted_llm import EMPTY_UPDATE, SCRIPTED_MODEL, ScriptedLLM, exchanges_of, reply
from stdio_helpers import add, recall, run, write_config

from memory_mcp.base.settings import load_settings
from memory_mcp.memory.facts import current
from memory_mcp.models import FlushRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

pytestmark = pytest.mark.integration

USERS = ("shared", "ann", "ben")
ADDS_PER_CLIENT = 36


def numbered_update(number: int) -> dict[str, Any]:
    return {
        **EMPTY_UPDATE,
        "newFacts": [{"content": f"Numbered fact {number}", "category": "context", "confidence": 0.9}],
    }


@pytest.fixture
def llm() -> Any:
    server = ScriptedLLM().start()
    server.enqueue(*(reply(numbered_update(n), delay=random.uniform(0, 0.05)) for n in range(500)))
    yield server
    server.stop()


@pytest.mark.timeout(300)
def test_two_instances_on_one_database_lose_nothing_and_extract_each_exchange_once(
    pg_schemas: Schemas,  # noqa: F811
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "config.json",
        {
            "data_storage_path": str(tmp_path / "data"),
            "openai_base_url": llm.base_url,
            "llm_model": SCRIPTED_MODEL,
            "openai_api_key": "test",
            "storage": {"backend": "postgres", "dsn": pg_schemas.dsn, "postgres_schema": pg_schemas.new()},
            "memory": {"debounce_seconds": 0.05, "llm_max_attempts": 1, "max_facts": 500, "shutdown_flush_seconds": 60},
        },
    )
    tokens = {user: issue_token(config, user) for user in USERS}
    first = HttpServer(config, tmp_path / "first.log")
    second = HttpServer(config, tmp_path / "second.log")
    acknowledged: dict[str, list[str]] = {user: [] for user in USERS}

    async def client(name: str, writes_to: HttpServer, reads_from: HttpServer, own_user: str) -> None:
        """Adds through one instance, alternating the shared user and its own, and after each
        add recalls the exchange through the other instance."""
        async with (
            http_client(writes_to.url, tokens["shared"]) as shared_writer,
            http_client(writes_to.url, tokens[own_user]) as own_writer,
            http_client(reads_from.url, tokens["shared"]) as shared_reader,
            http_client(reads_from.url, tokens[own_user]) as own_reader,
        ):
            for seq in range(ADDS_PER_CLIENT):
                user, writer, reader = (
                    ("shared", shared_writer, shared_reader) if seq % 2 == 0 else (own_user, own_writer, own_reader)
                )
                marker = f"marker{name}x{seq}"
                stored = await add(writer, f"{name} says {seq} {marker}", f"answer {seq}", thread_id=f"t{seq % 3}")
                assert stored["user_id"] == user
                acknowledged[user].append(stored["page_id"])
                found = await recall(reader, marker, max_results=3)
                seen = [page["page_id"] for page in found["short_term_memory"] + found["retrieved_pages"]]
                assert stored["page_id"] in seen, f"{marker} written through one instance is missing from the other"

    async def load() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(client, "a", first, second, "ann")
            group.start_soon(client, "b", second, first, "ben")

    first.start()
    try:
        second.start()
        run(load, timeout=240)
        # SIGTERM drains each instance's pending updates (those the other held are left pending).
        assert first.stop() == 0, first.output()
        assert second.stop() == 0, second.output()
    finally:
        first.kill()
        second.kill()

    settings = load_settings(config)
    final = MemoryService(settings)
    try:
        for user in USERS:
            flushed = final.flush_memory(FlushRequest.build(user_id=user))
            assert flushed.errors == [] and flushed.pending_pages == 0, flushed
        stored = {user: [page.page_id for page in final.store.read_pages(Scope(user)).pages] for user in USERS}
        pages = {user: list(final.store.read_pages(Scope(user)).pages) for user in USERS}  # read while open
        facts = [fact.content for user in USERS for fact in current(final.store.read_document(Scope(user)).facts)]
    finally:
        final.close()

    for user in USERS:
        assert sorted(stored[user]) == sorted(acknowledged[user]), f"{user}: lost or duplicated exchanges"
    assert sum(map(len, stored.values())) == 2 * ADDS_PER_CLIENT
    sent = [exchange["user"] for request in llm.requests for exchange in exchanges_of(request)]
    for page in (page for user in USERS for page in pages[user]):
        times = sent.count(page.user_input)
        assert times == 1, f"{page.user_input!r} was sent to the LLM {times} times"
    numbered = [content for content in facts if content.startswith("Numbered fact")]
    assert len(numbered) == len(set(numbered)) == len(llm.requests), "every extraction applied exactly once"
    print(
        f"\n2 instances x 2 clients, {2 * ADDS_PER_CLIENT} adds and as many cross-instance recalls: "
        f"{len(llm.requests)} LLM calls, each exchange extracted once"
    )
