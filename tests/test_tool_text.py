"""What a model reads of each tool, over the real stdio server: compact text within each tool's
stated bound, never the JSON dump of the result, while the structured content keeps all of it.

Before, `retrieve_memory`'s text was the whole result as JSON: 46,632 tokens with 25 long
exchanges for the default 2,000-token budget, which a host replaced by "Output too large".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from stdio_helpers import connect, run

from memory_mcp.base.settings import MemorySettings, Settings
from memory_mcp.mcp.tool_text import RETRIEVE_EXTRA_TOKENS, TEXT_BOUNDS
from memory_mcp.models import AddFactRequest, AddMemoryRequest
from memory_mcp.recall.token_count import TokenCounter
from memory_mcp.service.memory_service import MemoryService

pytestmark = pytest.mark.integration

COUNTER = TokenCounter("tiktoken")
# 2,988 before e-mail addresses became ids; their exact rule costs 2 tokens more in each of 24 id fields.
TOOL_DEFINITIONS_BUDGET = 3050
TOPICS = ["invoice totals", "the staging deploy", "garden beds", "marathon training", "the CSV parser"]


def long_exchange(number: int) -> AddMemoryRequest:
    topic = TOPICS[number % len(TOPICS)]
    said = f"Exchange {number} about {topic}: " + " ".join(f"detail{number}-{word}" for word in range(350))
    answered = f"On {topic}, step {number}: " + " ".join(f"answer{number}-{word}" for word in range(350))
    return AddMemoryRequest.build(user_input=said, agent_response=answered, thread_id=f"t{number % 4}")


def seed_large_memory(home: Path) -> None:
    """A memory as large as the rules allow in every part a tool shows: 25 long exchanges, 100
    facts of 2,000 characters, six full profile sections, two agents, 300 users."""
    service = MemoryService(Settings(data_storage_path=home, memory=MemorySettings(max_facts=500)))
    try:
        for number in range(25):
            service.add_memory(long_exchange(number))
        for number in range(100):
            content = f"Fact {number} about {TOPICS[number % 5]}: " + "x" * 1960
            service.add_fact(AddFactRequest.build(content=content, confidence=0.9, pinned=number < 3))
        sections = ["workContext", "personalContext", "topOfMind", "recentMonths", "earlierContext"]
        profile = {name: f"{name}: " + "long summary words " * 200 for name in [*sections, "longTermBackground"]}
        service.add_memory(
            AddMemoryRequest.build(
                user_input="About me", agent_response="Noted.", profile={k: v[:4000] for k, v in profile.items()}
            )
        )
        for agent in ("coder", "reviewer"):
            service.add_memory(AddMemoryRequest.build(user_input="hi", agent_response="hello", agent_name=agent))
        for user in range(300):
            service.add_memory(AddMemoryRequest.build(user_input="hi", agent_response="hello", user_id=f"user{user}"))
    finally:
        service.close()


def text_of(result: Any) -> str:
    assert not result.is_error, result.content
    return "\n".join(block.text for block in result.content)


def is_json_dump(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict | list)
    except ValueError:
        return False


@pytest.fixture(scope="module")
def large_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("large") / "memory"
    seed_large_memory(home)
    return home


def test_retrieve_memory_text_is_the_block_within_max_tokens_and_the_result_stays_whole(large_home: Path) -> None:
    async def scenario() -> list[tuple[int, str, dict[str, Any]]]:
        async with connect(large_home) as client:
            answers = []
            for max_tokens in (None, 800):
                arguments: dict[str, Any] = {"query": "What was each exchange and each step about?"}
                if max_tokens:
                    arguments["max_tokens"] = max_tokens
                result = await client.call_tool("retrieve_memory", arguments)
                answers.append((max_tokens or 2000, text_of(result), result.structured_content))
            return answers

    for budget, text, structured in run(scenario, timeout=120):
        block, _, tail = text.partition("</memory>")
        assert text.startswith("<memory>") and not is_json_dump(text)
        assert COUNTER.count(block + "</memory>") <= budget
        assert COUNTER.count(text) <= budget + RETRIEVE_EXTRA_TOKENS
        [ids_line] = [line for line in tail.splitlines() if line.startswith("Exchanges shown: ")]
        shown = ids_line.removeprefix("Exchanges shown: ").split()
        found = {page["page_id"] for page in structured["retrieved_pages"] + structured["short_term_memory"]}
        assert shown and set(shown) <= found
        assert structured["context"] == block + "</memory>", "the text is the block the result carries"
        assert len(structured["retrieved_pages"]) == 10, "the ranking is whole in the structured content"
        assert all(len(page["user_input"]) > 2000 for page in structured["retrieved_pages"]), "pages verbatim"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("add_memory", {"user_input": "We deploy on Fridays", "agent_response": "Noted."}),
        ("get_user_profile", {}),
        ("get_user_profile", {"include_assistant_knowledge": True, "agent_name": "coder"}),
        ("search_facts", {"limit": 500}),
        ("search_facts", {"query": "invoice", "include_superseded": True}),
        ("add_fact", {"content": "Prefers tea " + "y" * 1980}),
        ("flush_memory", {"retry_failed": True}),
        ("memory_status", {}),
        ("export_memory", {}),
        ("forget", {"user_id": "user7", "confirm": "user7"}),
    ],
)
def test_every_tool_answers_in_compact_text_within_its_stated_bound(
    large_home: Path, tool: str, arguments: dict[str, Any]
) -> None:
    async def call() -> tuple[str, dict[str, Any]]:
        async with connect(large_home) as client:
            result = await client.call_tool(tool, arguments)
            return text_of(result), result.structured_content

    text, structured = run(call, timeout=120)
    assert not is_json_dump(text)
    assert COUNTER.count(text) <= TEXT_BOUNDS[tool], f"{tool}: {COUNTER.count(text)} tokens"
    assert "null" not in text.split(), "no JSON nulls"
    assert structured, "the whole result stays in the structured content"


def test_export_text_says_what_the_document_holds_and_import_takes_the_structured_document(large_home: Path) -> None:
    async def scenario() -> tuple[str, dict[str, Any], str]:
        async with connect(large_home) as client:
            exported = await client.call_tool("export_memory", {})
            document = exported.structured_content
            imported = await client.call_tool("import_memory", {"data": document, "user_id": "copy"})
            return text_of(exported), document, text_of(imported)

    text, document, imported = run(scenario, timeout=120)
    assert len(json.dumps(document)) > 200_000 and COUNTER.count(text) < 120
    facts = sum(1 for fact in document["memory"]["facts"] if fact.get("validTo") is None)
    assert f"{len(document['pages'])} exchanges" in text and f"{facts} facts" in text
    assert "2 agents" in text and "kB of JSON" in text and "structured content" in text
    everything = len(document["pages"]) + sum(len(agent["pages"]) for agent in document["agents"].values())
    assert f"Imported {everything} exchanges" in imported


def test_the_tool_definitions_fit_3050_tokens_with_every_bound_published(tmp_path: Path) -> None:
    async def listed() -> list[Any]:
        async with connect(tmp_path / "memory") as client:
            return (await client.list_tools()).tools

    tools = run(listed, timeout=60)
    total = sum(COUNTER.count(tool.description or "") + COUNTER.count(json.dumps(tool.input_schema)) for tool in tools)
    assert total <= TOOL_DEFINITIONS_BUDGET, f"{total} tokens"
    schemas = {tool.name: tool.input_schema for tool in tools}
    assert schemas["retrieve_memory"]["properties"]["max_tokens"] == {
        "type": "integer",
        "minimum": 100,
        "maximum": 8000,
        "description": "Budget of the block; omit for the default.",
    }
    assert schemas["add_memory"]["properties"]["user_id"]["pattern"] == r"^([\w-][\w.@+-]{0,127})?$"
    assert schemas["add_memory"]["properties"]["facts"]["maxItems"] == 50
    assert all("title" not in json.dumps(schema) for schema in schemas.values())


def test_who_extracts_is_named_one_way_and_nothing_is_called_pending_that_nothing_will_take(tmp_path: Path) -> None:
    from memory_mcp.mcp.tool_text import text_of as text_for
    from memory_mcp.models import FlushRequest

    service = MemoryService(Settings(data_storage_path=tmp_path / "memory"))
    service.add_memory(AddMemoryRequest.build(user_input="I write Go", agent_response="ok"))
    fact = {"content": "Writes Go", "category": "knowledge", "confidence": 0.9}
    service.add_memory(AddMemoryRequest.build(user_input="at Acme", agent_response="ok", facts=[fact]))
    status = text_for("memory_status", service.memory_status(), COUNTER)
    flushed = text_for("flush_memory", service.flush_memory(FlushRequest.build()), COUNTER)
    assert "extraction by the host model" in status and flushed.startswith("Extraction by the host model")
    for text in (status, flushed):
        assert "pending" not in text.lower() and "not analysed (set an LLM endpoint and llm_model" in text
