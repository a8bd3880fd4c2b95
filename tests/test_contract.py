"""The public surface, frozen: changing a tool's parameters or result fields must be deliberate."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from memory_mcp.server import build_server
from memory_mcp.service import MemoryService

PARAMETERS = {
    "add_memory": ["user_input", "agent_response", "timestamp", "meta_data", "user_id", "agent_name", "thread_id"],
    "retrieve_memory": [
        "query", "relationship_with_user", "style_hint", "max_results", "user_id", "agent_name",
        "max_tokens", "current_context", "include_archived",
    ],
    "get_user_profile": ["include_knowledge", "include_assistant_knowledge", "user_id", "agent_name"],
    "flush_memory": ["user_id", "agent_name"],
}
REQUIRED = {
    "add_memory": ["user_input", "agent_response"],
    "retrieve_memory": ["query"],
    "get_user_profile": [],
    "flush_memory": [],
}
RESULT_FIELDS = {
    "add_memory": {"status", "message", "page_id", "user_id", "agent_name", "thread_id", "timestamp"},
    "retrieve_memory": {
        "status", "query", "user_id", "agent_name", "relationship_with_user", "style_hint",
        "short_term_memory", "retrieved_pages", "retrieved_user_knowledge",
        "retrieved_assistant_knowledge", "user_profile", "context", "context_tokens", "notes",
    },
    "get_user_profile": {
        "status", "user_id", "agent_name", "user", "history", "facts", "assistant_knowledge", "lastUpdated", "notes",
    },
    "flush_memory": {
        "status", "user_id", "agent_name", "extraction", "pages_analysed", "llm_calls", "facts_added",
        "facts_removed", "sections_updated", "assistant_knowledge_added", "pending_pages", "errors", "notes",
    },
}
PAGE_FIELDS = {"page_id", "user_input", "agent_response", "timestamp", "meta_data", "thread_id"}


def listed_tools(service: MemoryService) -> dict[str, Any]:
    tools = anyio.run(build_server(service).list_tools)
    return {tool.name: tool for tool in tools}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_tool_parameters_and_results_are_frozen(service: MemoryService, name: str) -> None:
    tool = listed_tools(service)[name]
    assert list(tool.input_schema["properties"]) == PARAMETERS[name]
    assert sorted(tool.input_schema.get("required", [])) == sorted(REQUIRED[name])
    assert set(tool.output_schema["properties"]) == RESULT_FIELDS[name]


def test_only_the_contract_tools_are_registered(service: MemoryService) -> None:
    assert set(listed_tools(service)) == set(PARAMETERS)


def test_pages_in_results_have_the_page_fields(service: MemoryService) -> None:
    schema = listed_tools(service)["retrieve_memory"].output_schema
    definitions = schema["$defs"]
    assert set(definitions["Page"]["properties"]) == PAGE_FIELDS
    assert set(definitions["ScoredPage"]["properties"]) == PAGE_FIELDS | {"score"}


def test_defaults_match_the_contract(service: MemoryService) -> None:
    tools = listed_tools(service)
    retrieve = tools["retrieve_memory"].input_schema["properties"]
    assert retrieve["relationship_with_user"]["default"] == "friend"
    assert retrieve["style_hint"]["default"] == ""
    assert retrieve["max_results"]["default"] == 10
    profile = tools["get_user_profile"].input_schema["properties"]
    assert profile["include_knowledge"]["default"] is True
    assert profile["include_assistant_knowledge"]["default"] is False
