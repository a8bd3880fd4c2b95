"""What the agent receives, over the real stdio transport with no LLM endpoint: the <memory> block
holds the recent conversation, dated and oldest first, within its budget; the host model fills
structured memory itself through add_memory's `facts` and `profile`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import pytest
from mcp import Client
from stdio_helpers import add, connect, error_text, ok, profile, recall, run, snapshot

from memory_mcp.recall.memory_block import FRAME
from memory_mcp.recall.token_count import TokenCounter

pytestmark = pytest.mark.integration

EXCHANGES = [
    ("I'm planning a trip to Kyoto in April", "April is cherry blossom season; book early."),
    ("My partner Sam is vegetarian", "Noted: vegetarian places for Sam."),
    ("We land on the 3rd and stay nine nights", "Nine nights gives you time for Nara too."),
]


def recent_lines(context: str) -> list[str]:
    lines = context.splitlines()
    start = lines.index("## Recent conversation") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("## ") or lines[i] == "</memory>")
    return lines[start:end]


def test_the_latest_exchanges_of_a_new_user_are_all_in_context_dated_and_oldest_first(
    home: Path, errlog: TextIO
) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            for said, answered in EXCHANGES:
                await add(client, said, answered, user_id="newcomer")
            return await recall(client, "what should we eat in Kyoto?", user_id="newcomer")

    result = run(body)

    context = result["context"]
    assert context.splitlines()[:2] == ["<memory>", FRAME]
    lines = recent_lines(context)
    assert [line.split("User: ")[1].split(" | ")[0] for line in lines] == [said for said, _ in EXCHANGES]
    today = result["short_term_memory"][-1]["timestamp"][:10]
    assert all(line.startswith(f"- [{today}] User: ") for line in lines)
    assert result["context_tokens"] == TokenCounter("tiktoken").count(context) <= 2000
    # No relationship was passed, so the block claims none.
    assert "relationship" not in context and result["relationship_with_user"] == ""


def test_with_a_small_budget_the_newest_of_twelve_exchanges_is_kept_and_the_block_fits(
    home: Path, errlog: TextIO
) -> None:
    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            for number in range(12):
                await add(client, f"Update number {number}: " + "details " * 40, "ok " * 40, user_id="busy")
            return await recall(client, "latest update", user_id="busy", max_tokens=200)

    result = run(body)

    context = result["context"]
    assert result["context_tokens"] == TokenCounter("tiktoken").count(context) <= 200
    assert "Update number 11:" in recent_lines(context)[-1]
    assert any("max_tokens=200" in note for note in result["notes"])


def test_an_import_of_older_exchanges_leaves_todays_exchange_last_in_short_term_memory(
    home: Path, errlog: TextIO
) -> None:
    old_pages = [
        {
            "page_id": f"page_old_{number:02d}",
            "user_input": f"Last year's note {number}",
            "agent_response": "ok",
            "timestamp": f"2025-01-{number + 1:02d}T09:00:00Z",
        }
        for number in range(15)
    ]
    document = {"format": "memory-mcp/export", "version": 1, "exported_at": "", "user_id": "alice", "memory": {}}

    async def body() -> dict[str, Any]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "Today I adopted a greyhound", "Congratulations!", user_id="alice")
            ok(await client.call_tool("import_memory", {"data": {**document, "pages": old_pages}, "user_id": "alice"}))
            return await recall(client, "dog", user_id="alice")

    result = run(body)

    window = [page["user_input"] for page in result["short_term_memory"]]
    assert len(window) == 10 and window[-1] == "Today I adopted a greyhound"
    assert window[:-1] == [f"Last year's note {number}" for number in range(6, 15)]  # the newest of them, in order
    assert recent_lines(result["context"])[-1].split("User: ")[1].startswith("Today I adopted a greyhound")


def test_a_relationship_line_appears_only_when_passed(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "hi", "hello")
            return await recall(client, "hi"), await recall(client, "hi", relationship_with_user="coach")

    plain, passed = run(body)

    assert "relationship" not in plain["context"]
    assert "Your relationship with the user: coach." in passed["context"]


async def profile_and_facts(client: Client, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    facts = ok(await client.call_tool("search_facts", {"user_id": user, "include_superseded": True}))
    return await profile(client, user_id=user), facts


def test_facts_and_profile_from_the_host_fill_the_profile_with_no_endpoint(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect(home, errlog=errlog) as client:
            first = await add(
                client,
                "I live in Lyon and work as a nurse",
                "Good to know.",
                user_id="alice",
                facts=[
                    {"content": "Alice lives in Lyon", "category": "context", "confidence": 0.95},
                    {"content": "Alice is a nurse", "category": "context", "confidence": 0.95},
                ],
                profile={"workContext": "Alice is a nurse."},
            )
            lyon = next(f["id"] for f in first["structured"]["facts_added"] if "Lyon" in f["content"])
            moved = await add(
                client,
                "We moved to Berlin last week",
                "Exciting!",
                user_id="alice",
                facts=[
                    {"content": "Alice lives in Berlin", "category": "context", "confidence": 0.95, "replaces": lyon}
                ],
            )
            shown, facts = await profile_and_facts(client, "alice")
            status = ok(await client.call_tool("memory_status", {}))
            return moved, shown, facts, status

    moved, shown, facts, status = run(body)

    [superseded] = moved["structured"]["facts_superseded"]
    assert superseded["superseded_by"] == moved["structured"]["facts_added"][0]["id"]
    assert shown["user"]["workContext"]["summary"] == "Alice is a nurse."
    assert sorted(f["content"] for f in shown["facts"]) == ["Alice is a nurse", "Alice lives in Berlin"]
    lyon = next(f for f in facts["facts"] if f["content"] == "Alice lives in Lyon")
    berlin = next(f for f in facts["facts"] if f["content"] == "Alice lives in Berlin")
    assert lyon["supersededBy"] == berlin["id"] and lyon["validTo"]
    assert status["extraction"] == "host" and status["llm_configured"] is False


def test_an_invalid_fact_is_a_tool_error_naming_it_and_nothing_is_written(home: Path, errlog: TextIO) -> None:
    async def body() -> tuple[str, dict[str, Any], dict[str, Any]]:
        async with connect(home, errlog=errlog) as client:
            await add(client, "first", "ok", user_id="alice")
            before = snapshot(home)
            failed = await client.call_tool(
                "add_memory",
                {
                    "user_input": "second",
                    "agent_response": "ok",
                    "user_id": "alice",
                    "facts": [
                        {"content": "Alice likes tea", "category": "preference", "confidence": 0.9},
                        {"content": "Alice likes coffee", "category": "preference", "confidence": 7},
                    ],
                },
            )
            assert snapshot(home) == before
            return (
                error_text(failed),
                await recall(client, "second", user_id="alice"),
                await profile(client, user_id="alice"),
            )

    message, recalled, shown = run(body)

    assert "facts" in message and "1" in message and "confidence" in message
    assert [page["user_input"] for page in recalled["short_term_memory"]] == ["first"]
    assert shown["facts"] == []


def test_the_instructions_ask_the_host_for_facts_when_the_server_extracts_none(home: Path, errlog: TextIO) -> None:
    async def body() -> str:
        async with connect(home, errlog=errlog) as client:
            return client.instructions or ""

    instructions = run(body)

    assert "you are its extractor" in instructions and "`facts`" in instructions and "confidence" in instructions
