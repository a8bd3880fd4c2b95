"""The public surface, frozen: changing a tool's parameters or result fields must be deliberate."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from memory_mcp.mcp.server import TOOLS, build_server
from memory_mcp.mcp.tool_signatures import published_schema
from memory_mcp.service.memory_service import MemoryService

PARAMETERS = {
    "add_memory": [
        "user_input",
        "agent_response",
        "timestamp",
        "meta_data",
        "user_id",
        "agent_name",
        "thread_id",
        "project",
        "facts",
        "profile",
    ],
    "retrieve_memory": [
        "query",
        "relationship_with_user",
        "style_hint",
        "max_results",
        "user_id",
        "agent_name",
        "max_tokens",
        "current_context",
        "include_archived",
        "thread_id",
        "project",
        "since",
        "until",
    ],
    "get_user_profile": ["include_knowledge", "include_assistant_knowledge", "user_id", "agent_name"],
    "flush_memory": ["user_id", "agent_name", "retry_failed"],
    "search_facts": ["query", "category", "limit", "include_superseded", "as_of", "user_id", "agent_name"],
    "add_fact": ["content", "category", "confidence", "pinned", "expires_at", "project", "user_id", "agent_name"],
    "update_fact": ["fact_id", "content", "category", "confidence", "pinned", "expires_at", "user_id", "agent_name"],
    "delete_fact": ["fact_id", "user_id", "agent_name"],
    "forget_exchange": ["exchange_id", "user_id", "agent_name"],
    "forget": ["user_id", "confirm", "agent_name"],
    "export_memory": ["user_id", "agent_name"],
    "import_memory": ["data", "mode", "user_id"],
    "memory_status": [],
}
REQUIRED = {
    "add_memory": ["user_input", "agent_response"],
    "retrieve_memory": ["query"],
    "get_user_profile": [],
    "flush_memory": [],
    "search_facts": [],
    "add_fact": ["content"],
    "update_fact": ["fact_id"],
    "delete_fact": ["fact_id"],
    "forget_exchange": ["exchange_id"],
    "forget": ["user_id", "confirm"],
    "export_memory": [],
    "import_memory": ["data"],
    "memory_status": [],
}
RESULT_FIELDS = {
    "add_memory": {"status", "message", "page_id", "user_id", "agent_name", "thread_id", "timestamp", "structured"},
    "retrieve_memory": {
        "status",
        "query",
        "user_id",
        "agent_name",
        "relationship_with_user",
        "style_hint",
        "short_term_memory",
        "retrieved_pages",
        "retrieved_user_knowledge",
        "retrieved_assistant_knowledge",
        "user_profile",
        "context",
        "context_tokens",
        "notes",
    },
    "get_user_profile": {
        "status",
        "user_id",
        "agent_name",
        "user",
        "history",
        "facts",
        "assistant_knowledge",
        "lastUpdated",
        "notes",
    },
    "flush_memory": {
        "status",
        "user_id",
        "agent_name",
        "extraction",
        "pages_analysed",
        "llm_calls",
        "facts_added",
        "facts_removed",
        "sections_updated",
        "assistant_knowledge_added",
        "pending_pages",
        "set_aside_pages",
        "errors",
        "notes",
    },
    "search_facts": {"status", "user_id", "agent_name", "facts", "total"},
    "add_fact": {"status", "user_id", "agent_name", "action", "fact", "message"},
    "update_fact": {"status", "user_id", "agent_name", "action", "fact", "message"},
    "delete_fact": {"status", "user_id", "agent_name", "action", "fact", "message"},
    "forget_exchange": {"status", "user_id", "agent_name", "exchange_id", "message"},
    "forget": {"status", "user_id", "agent_name", "removed_pages", "removed_facts", "message"},
    "export_memory": {"format", "version", "exported_at", "user_id", "agent_name", "memory", "pages", "agents"},
    "import_memory": {
        "status",
        "user_id",
        "agent_name",
        "mode",
        "pages_added",
        "pages_skipped",
        "facts_added",
        "facts_skipped",
        "agents",
        "message",
    },
    "memory_status": {
        "status",
        "version",
        "data_dir",
        "storage_ok",
        "users",
        "llm_configured",
        "extraction",
        "llm_model",
        "llm_base_url",
        "token_counter",
        "queued_updates",
        "scopes_in_memory",
        "last_update_errors",
        "notes",
    },
}
DESTRUCTIVE = {"delete_fact", "forget_exchange", "forget", "import_memory"}
READ_ONLY = {"retrieve_memory", "get_user_profile", "search_facts", "export_memory", "memory_status"}
PAGE_FIELDS = {"page_id", "user_input", "agent_response", "timestamp", "meta_data", "thread_id", "project"}


def listed_tools(service: MemoryService) -> dict[str, Any]:
    tools = anyio.run(build_server(service).list_tools)
    return {tool.name: tool for tool in tools}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_tool_parameters_and_results_are_frozen(service: MemoryService, name: str) -> None:
    tool = listed_tools(service)[name]
    assert list(tool.input_schema["properties"]) == PARAMETERS[name]
    assert sorted(tool.input_schema.get("required", [])) == sorted(REQUIRED[name])
    assert set(tool.output_schema["properties"]) == RESULT_FIELDS[name]


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_the_published_input_schema_is_the_schema_of_the_model_that_validates(
    service: MemoryService, name: str
) -> None:
    published = listed_tools(service)[name].input_schema
    validating = published_schema(TOOLS[name].request.model_json_schema())

    assert published["properties"] == validating["properties"]
    assert sorted(published.get("required", [])) == sorted(validating.get("required", []))
    assert published.get("$defs", {}) == validating.get("$defs", {})


def test_tools_list_publishes_the_bounds_the_validator_enforces(service: MemoryService) -> None:
    tools = listed_tools(service)

    def field(tool: str, name: str) -> dict[str, Any]:
        schema = tools[tool].input_schema["properties"][name]
        return next((branch for branch in schema.get("anyOf", []) if branch.get("type") != "null"), schema) | {
            key: value for key, value in schema.items() if key != "anyOf"
        }

    assert (field("retrieve_memory", "max_results")["minimum"], field("retrieve_memory", "max_results")["maximum"]) == (
        1,
        100,
    )
    assert (field("retrieve_memory", "max_tokens")["minimum"], field("retrieve_memory", "max_tokens")["maximum"]) == (
        100,
        8000,
    )
    assert (field("add_fact", "confidence")["minimum"], field("add_fact", "confidence")["maximum"]) == (0, 1)
    assert (field("search_facts", "limit")["minimum"], field("search_facts", "limit")["maximum"]) == (1, 500)
    assert field("add_fact", "content")["maxLength"] == 2000
    assert field("retrieve_memory", "query")["maxLength"] == 20_000
    assert field("add_memory", "user_id")["pattern"] == r"^([\w-][\w.@+-]{0,127})?$"
    assert field("forget", "user_id")["pattern"] == r"^([\w-][\w.@+-]{0,127})?$"
    assert field("search_facts", "category")["enum"] == [
        "preference",
        "knowledge",
        "context",
        "behavior",
        "goal",
        "correction",
    ]
    fact = tools["add_memory"].input_schema["$defs"]["HostFact"]["properties"]
    assert fact["confidence"]["maximum"] == 1 and fact["content"]["maxLength"] == 2000


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
    # A host that passes no relationship gets no relationship line in its context.
    assert retrieve["relationship_with_user"]["default"] == ""
    assert retrieve["style_hint"]["default"] == ""
    assert retrieve["max_results"]["default"] == 10
    profile = tools["get_user_profile"].input_schema["properties"]
    assert profile["include_knowledge"]["default"] is True
    assert profile["include_assistant_knowledge"]["default"] is False


def test_annotations_mark_what_reads_and_what_destroys(service: MemoryService) -> None:
    for name, tool in listed_tools(service).items():
        assert bool(tool.annotations.read_only_hint) == (name in READ_ONLY), name
        assert bool(tool.annotations.destructive_hint) == (name in DESTRUCTIVE), name
