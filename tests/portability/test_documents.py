"""Moving memory: export documents, validating imports whole, merge rules, and the MemoryOS importer.

The core API only (MemoryService, transfer, importers), in-process; the same features over the real
stdio transport are in test_ownership_stdio.py and from a shell in test_cli.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from sample_memory import TRIP, memoryos_dir, write_json
from stdio_helpers import snapshot

from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.ids import IDENTIFIER_RULE
from memory_mcp.base.settings import Settings
from memory_mcp.extraction.updater import pending_threads
from memory_mcp.models import (
    AddFactRequest,
    AddMemoryRequest,
    ExportRequest,
    Fact,
    ForgetRequest,
    ImportRequest,
    MemoryDocument,
    Page,
    RetrieveMemoryRequest,
    SearchFactsRequest,
    Section,
    UpdateFactRequest,
)
from memory_mcp.portability.documents import merge_documents, merge_pages, parse_import
from memory_mcp.portability.memoryos import IMPORTED_CONFIDENCE, from_memoryos
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

# --- helpers ---------------------------------------------------------------------------------


def page(page_id: str, text: str = "hello", timestamp: str = "2024-05-01T10:00:00Z", **fields: Any) -> dict[str, Any]:
    return {"page_id": page_id, "user_input": text, "agent_response": "ok", "timestamp": timestamp, **fields}


def export_doc(**overrides: Any) -> dict[str, Any]:
    """A small valid export document, as JSON data."""
    document: dict[str, Any] = {
        "format": "memory-mcp/export",
        "version": 1,
        "exported_at": "2024-06-01T00:00:00Z",
        "user_id": "alice",
        "agent_name": None,
        "memory": {"facts": [{"id": "fact_1", "content": "Likes green tea", "confidence": 0.9}]},
        "pages": [page("p1", "first"), page("p2", "second", "2024-05-02T10:00:00Z")],
        "agents": {},
    }
    document.update(overrides)
    return document


def fact(fact_id: str, content: str, **fields: Any) -> Fact:
    return Fact(id=fact_id, content=content, confidence=fields.pop("confidence", 0.9), **fields)


def import_error(data: dict[str, Any], user_id: str | None = None) -> str:
    with pytest.raises(InvalidInput) as caught:
        parse_import(data, user_id)
    return str(caught.value)


def add_page(service: MemoryService, text: str, reply: str = "ok", **fields: Any) -> str:
    return service.add_memory(AddMemoryRequest.build(user_input=text, agent_response=reply, **fields)).page_id


def export(service: MemoryService, user_id: str, agent_name: str | None = None) -> dict[str, Any]:
    return service.export_memory(ExportRequest.build(user_id=user_id, agent_name=agent_name)).model_dump(mode="json")


def do_import(service: MemoryService, data: dict[str, Any], **fields: Any):
    return service.import_memory(ImportRequest.build(data=data, **fields))


def facts_of(
    service: MemoryService, user_id: str, agent_name: str | None = None, superseded: bool = True
) -> list[dict]:
    result = service.search_facts(
        SearchFactsRequest.build(user_id=user_id, agent_name=agent_name, include_superseded=superseded, limit=500)
    )
    return sorted((f.model_dump(exclude={"score"}) for f in result.facts), key=lambda f: f["id"])


def retrieval(service: MemoryService, query: str, user_id: str, agent_name: str | None = None) -> dict[str, Any]:
    result = service.retrieve_memory(RetrieveMemoryRequest.build(query=query, user_id=user_id, agent_name=agent_name))
    return {
        "short_term": [p.page_id for p in result.short_term_memory],
        "retrieved": [(p.page_id, p.score) for p in result.retrieved_pages],
        "facts": [(f.id, f.content, f.score) for f in result.retrieved_user_knowledge],
        "context": result.context,
    }


# --- parse_import: one clear error naming what is wrong ---------------------------------------


def test_a_valid_export_parses_and_user_id_can_be_overridden() -> None:
    document = parse_import(export_doc(), None)
    assert document.user_id == "alice"
    assert [p.page_id for p in document.pages] == ["p1", "p2"]
    assert [f.content for f in document.memory.facts] == ["Likes green tea"]

    moved = parse_import(export_doc(), "bob")
    assert moved.user_id == "bob"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"hello": "world"}, ["memory-mcp/export", "DeerFlow"]),
        ({"format": "something/else", "facts": []}, ["memory-mcp/export", "DeerFlow"]),
        (export_doc(version=2), ["data.version", "nothing was imported"]),
        ({k: v for k, v in export_doc().items() if k != "exported_at"}, ["data.exported_at", "Field required"]),
        (export_doc(user_id="../escape"), ["data.user_id", IDENTIFIER_RULE, "../escape"]),
        (export_doc(user_id="alice\n"), ["data.user_id", IDENTIFIER_RULE]),
        (export_doc(agent_name="a/b"), ["data.agent_name", IDENTIFIER_RULE]),
        (export_doc(surprise=1), ["data.surprise", "Extra inputs are not permitted"]),
        (export_doc(pages=[page("p1"), page("p2", meta_data=[1, 2])]), ["data.pages.1.meta_data"]),
        (export_doc(pages=[page("p1", text=5)]), ["data.pages.0.user_input"]),
        (export_doc(pages="not a list"), ["data.pages"]),
        (
            export_doc(memory={"facts": [{"id": "f", "content": "x", "confidence": "very"}]}),
            ["data.memory.facts.0.confidence"],
        ),
        (
            export_doc(memory={"facts": [{"id": "f", "content": "x", "confidence": 0.5, "category": "gossip"}]}),
            ["data.memory.facts.0.category"],
        ),
        (
            export_doc(memory={"user": {"workContext": {"summary": ["not", "text"]}}}),
            ["data.memory.user.workContext.summary"],
        ),
        (export_doc(memory={"analysis": {"allBefore": -1}}), ["data.memory.analysis.allBefore"]),
        (
            export_doc(agents={"bot": {"memory": {}, "pages": [{"page_id": "q", "user_input": "x"}]}}),
            ["data.agents.bot.pages.0"],
        ),
        (export_doc(agents={"bad bot": {"memory": {}, "pages": []}}), ["agents key", IDENTIFIER_RULE]),
        (export_doc(pages=[page("p1"), page("p2"), page("p1")]), ["pages[2].page_id", "'p1'", "twice"]),
        (
            export_doc(agents={"bot": {"memory": {}, "pages": [page("q1"), page("q1")]}}),
            ["page_id", "'q1'", "twice"],
        ),
    ],
    ids=[
        "neither-kind",
        "unknown-format",
        "wrong-version",
        "missing-field",
        "user-id-escape",
        "user-id-newline",
        "bad-agent-name",
        "extra-key",
        "meta-data-not-object",
        "user-input-not-text",
        "pages-not-list",
        "confidence-not-number",
        "unknown-category",
        "section-summary-not-text",
        "negative-analysis",
        "agent-page-missing-fields",
        "bad-agent-key",
        "duplicate-page-ids",
        "duplicate-agent-page-ids",
    ],
)
def test_invalid_documents_are_refused_with_a_message_naming_the_problem(
    data: dict[str, Any], expected: list[str]
) -> None:
    message = import_error(data)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    assert "\n" not in message, "one line"


def test_several_problems_are_counted_in_the_one_message() -> None:
    message = import_error(export_doc(pages=[{"page_id": "p"}]))
    assert "more problems" in message


def test_a_deerflow_memory_json_parses_into_the_given_or_default_user() -> None:
    deerflow = {
        "version": "1.0",
        "lastUpdated": "2024-05-01T00:00:00Z",
        "user": {"workContext": {"summary": "Data engineer at Acme", "updatedAt": "2024-04-01T00:00:00Z"}},
        "history": {"recentMonths": {"summary": "Moved to Lyon", "updatedAt": "2024-04-02T00:00:00Z"}},
        "facts": [
            {
                "id": "f1",
                "content": "Uses Rust",
                "category": "knowledge",
                "confidence": 0.8,
                "createdAt": "2024-04-01T00:00:00Z",
                "source": "thread-1",
                "sourceError": "said Go first",
            },
        ],
    }
    document = parse_import(deerflow, "carol")
    assert (document.user_id, document.pages, document.agents) == ("carol", [], {})
    assert document.memory.user.workContext.summary == "Data engineer at Acme"
    assert document.memory.history.recentMonths.summary == "Moved to Lyon"
    [only] = document.memory.facts
    assert (only.id, only.source, only.sourceError, only.category) == ("f1", "thread-1", "said Go first", "knowledge")

    assert parse_import({"facts": []}, None).user_id == "default"

    message = import_error({"facts": [{"id": "f", "content": "x", "confidence": 1.5}]})
    assert "DeerFlow" in message and "facts.0.confidence" in message


# --- merge rules --------------------------------------------------------------------------------


def test_merge_pages_skips_known_page_ids_and_repeats_keeping_order() -> None:
    existing = [Page.model_validate(page("a")), Page.model_validate(page("b"))]
    incoming = [Page.model_validate(page(pid)) for pid in ("c", "a", "d", "c", "b", "e")]
    new, counts = merge_pages(existing, incoming)
    assert [p.page_id for p in new] == ["c", "d", "e"]
    assert (counts.pages_added, counts.pages_skipped) == (3, 3)


def test_merge_documents_dedupes_facts_by_id_and_by_normalised_content_among_current_facts() -> None:
    existing = MemoryDocument(
        facts=[
            fact("f1", "Likes green tea"),
            fact("f2", "Lives in Paris", validTo="2024-01-01T00:00:00Z", supersededBy="f9"),
        ]
    )
    incoming = MemoryDocument(
        facts=[
            fact("f1", "A different text under a known id"),  # same id: skipped
            fact("f3", "  likes GREEN   tea "),  # same words as a current fact: skipped
            fact("f4", "Lives in Paris"),  # only a retired fact says so: added
            fact("f5", "Likes green tea", validTo="2024-02-01T00:00:00Z"),  # retired history: added
            fact("f6", "Plays chess"),
            fact("f7", "plays chess"),  # repeats one just added: skipped
        ]
    )
    merged, counts = merge_documents(existing, incoming)
    assert [f.id for f in merged.facts] == ["f1", "f2", "f4", "f5", "f6"]
    assert merged.facts[0].content == "Likes green tea", "an existing fact is never overwritten"
    assert (counts.facts_added, counts.facts_skipped) == (3, 3)
    assert [f.id for f in existing.facts] == ["f1", "f2"], "the existing document is not changed in place"


def test_merge_documents_fills_only_empty_sections_dedupes_knowledge_and_sums_session_visits() -> None:
    existing = MemoryDocument.model_validate(
        {
            "user": {"workContext": {"summary": "Mine", "updatedAt": "2024-01-01T00:00:00Z"}},
            "history": {"earlierContext": {"summary": "Old days"}},
            "assistantKnowledge": [{"id": "k1", "content": "I recommended Kyoto"}],
            "sessions": {"t:one": {"visits": 2, "lastVisit": "2024-01-02T00:00:00Z"}},
        }
    )
    incoming = MemoryDocument.model_validate(
        {
            "user": {
                "workContext": {"summary": "Theirs"},
                "personalContext": {"summary": "Has a cat", "updatedAt": "2024-03-01T00:00:00Z"},
            },
            "history": {
                "earlierContext": {"summary": "Other days"},
                "longTermBackground": {"summary": "Grew up in Oslo"},
            },
            "assistantKnowledge": [
                {"id": "k2", "content": "i recommended   KYOTO"},
                {"id": "k3", "content": "I am a travel helper"},
            ],
            "sessions": {
                "t:one": {"visits": 3, "lastVisit": "2024-01-05T00:00:00Z"},
                "t:two": {"visits": 1, "lastVisit": "2024-01-03T00:00:00Z"},
            },
        }
    )
    merged, _ = merge_documents(existing, incoming)
    assert merged.user.workContext.summary == "Mine"
    assert merged.user.personalContext == Section(summary="Has a cat", updatedAt="2024-03-01T00:00:00Z")
    assert merged.user.topOfMind.summary == ""
    assert merged.history.earlierContext.summary == "Old days"
    assert merged.history.longTermBackground.summary == "Grew up in Oslo"
    assert [k.id for k in merged.assistantKnowledge] == ["k1", "k3"]
    assert merged.sessions["t:one"].visits == 5
    assert merged.sessions["t:one"].lastVisit == "2024-01-05T00:00:00Z"
    assert merged.sessions["t:two"].visits == 1
    assert existing.sessions["t:one"].visits == 2, "the existing document is not changed in place"


# --- import through the service -------------------------------------------------------------------


def seed(service: MemoryService, user: str = "alice") -> dict[str, Any]:
    """Pages in several threads with meta_data and fixed timestamps, facts (one superseded), an
    agent's own memory; returns the ids."""
    ids = [
        add_page(
            service,
            text,
            reply,
            user_id=user,
            thread_id=thread,
            timestamp=f"2024-03-{number + 1:02d} 09:00:00",
            meta_data={"n": number, "tags": ["x", {"y": None}]},
        )
        for number, (text, reply, thread) in enumerate(TRIP)
    ]
    tea = service.add_fact(AddFactRequest.build(content="Likes green tea", user_id=user, category="preference"))
    service.add_fact(AddFactRequest.build(content="Is planning a Kyoto trip", user_id=user, confidence=0.8))
    newer = service.update_fact(UpdateFactRequest.build(fact_id=tea.fact.id, content="Likes oolong tea", user_id=user))
    agent_page = add_page(
        service, "Call me captain when we talk about Kyoto", "Aye, captain.", user_id=user, agent_name="bot"
    )
    service.add_fact(AddFactRequest.build(content="Wants to be called captain", user_id=user, agent_name="bot"))
    return {"pages": ids, "old_fact": tea.fact.id, "new_fact": newer.fact.id, "agent_page": agent_page}


@pytest.fixture
def short_settings(data_dir: Path) -> Settings:
    # Three recent exchanges in short-term memory, so retrieval ranks the older five.
    return Settings(data_storage_path=data_dir, short_term_capacity=3)


QUERIES = ["Kyoto temples", "quarterly report", "road bike plants"]


def test_export_forget_import_reproduces_retrieval_and_so_does_a_fresh_data_dir(
    short_settings: Settings, tmp_path: Path
) -> None:
    service = MemoryService(short_settings)
    ids = seed(service)
    before = {q: retrieval(service, q, "alice") for q in QUERIES}
    agent_before = retrieval(service, "Kyoto captain", "alice", "bot")
    facts_before = facts_of(service, "alice")
    assert before["Kyoto temples"]["retrieved"], "the query must retrieve older pages"
    document = export(service, "alice")

    service.forget(ForgetRequest.build(user_id="alice", confirm="alice"))
    assert not (short_settings.data_storage_path / "users" / "alice").exists()
    result = do_import(service, document)
    assert (result.pages_added, result.facts_added, result.agents) == (len(TRIP) + 1, 4, ["bot"])

    assert {q: retrieval(service, q, "alice") for q in QUERIES} == before
    assert retrieval(service, "Kyoto captain", "alice", "bot") == agent_before
    assert facts_of(service, "alice") == facts_before
    assert export(service, "alice")["pages"] == document["pages"]

    fresh = MemoryService(short_settings.model_copy(update={"data_storage_path": tmp_path / "fresh"}))
    do_import(fresh, document)
    assert {q: retrieval(fresh, q, "alice") for q in QUERIES} == before
    assert retrieval(fresh, "Kyoto captain", "alice", "bot") == agent_before
    assert facts_of(fresh, "alice") == facts_before
    assert [p["page_id"] for p in export(fresh, "alice")["pages"]] == ids["pages"]


def test_export_holds_superseded_facts_pages_with_everything_and_each_agent(service: MemoryService) -> None:
    ids = seed(service)
    document = export(service, "alice")
    assert {"format", "version", "exported_at", "user_id", "agent_name", "memory", "pages", "agents"} <= set(document)
    assert (document["format"], document["version"], document["user_id"], document["agent_name"]) == (
        "memory-mcp/export",
        1,
        "alice",
        None,
    )
    by_id = {f["id"]: f for f in document["memory"]["facts"]}
    assert by_id[ids["old_fact"]]["supersededBy"] == ids["new_fact"] and by_id[ids["old_fact"]]["validTo"]
    assert [p["page_id"] for p in document["pages"]] == ids["pages"]
    first = document["pages"][0]
    assert (first["thread_id"], first["timestamp"], first["meta_data"]) == (
        "trip",
        "2024-03-01T09:00:00Z",
        {"n": 0, "tags": ["x", {"y": None}]},
    )
    assert document["pages"][4]["thread_id"] is None
    assert list(document["agents"]) == ["bot"]
    assert [p["page_id"] for p in document["agents"]["bot"]["pages"]] == [ids["agent_page"]]
    assert [f["content"] for f in document["agents"]["bot"]["memory"]["facts"]] == ["Wants to be called captain"]

    agent_only = export(service, "alice", "bot")
    assert (agent_only["agent_name"], agent_only["agents"]) == ("bot", {})
    assert [p["page_id"] for p in agent_only["pages"]] == [ids["agent_page"]]


def test_merge_import_skips_pages_and_facts_already_present(service: MemoryService) -> None:
    seed(service)
    document = export(service, "alice")
    before = export(service, "alice")

    again = do_import(service, document)
    assert (again.pages_added, again.facts_added) == (0, 0)
    assert (again.pages_skipped, again.facts_skipped) == (len(TRIP) + 1, 4)
    after = export(service, "alice")
    assert after["pages"] == before["pages"]
    assert after["memory"]["facts"] == before["memory"]["facts"]

    # New pages and facts arrive; the same fact in other words-spacing does not.
    extra = copy.deepcopy(document)
    extra["pages"].append(page("page_new", "A brand new exchange", "2024-04-01T00:00:00Z"))
    extra["memory"]["facts"].append({"id": "fact_other", "content": "  LIKES oolong   TEA", "confidence": 0.5})
    extra["memory"]["facts"].append({"id": "fact_new", "content": "Owns a road bike", "confidence": 0.7})
    result = do_import(service, extra)
    assert (result.pages_added, result.facts_added, result.facts_skipped) == (1, 1, 5)
    assert [p["page_id"] for p in export(service, "alice")["pages"]][-1] == "page_new"
    contents = [f["content"] for f in facts_of(service, "alice", superseded=False)]
    assert sorted(contents) == ["Is planning a Kyoto trip", "Likes oolong tea", "Owns a road bike"]


def test_replace_import_erases_the_users_memory_first(service: MemoryService) -> None:
    seed(service)
    document = export(service, "alice")
    agent_document = export(service, "alice", "bot")
    document["agents"] = {}  # only the user's own memory matters here
    add_page(service, "Something said after the export", user_id="alice")
    service.add_fact(AddFactRequest.build(content="Learned after the export", user_id="alice"))
    add_page(service, "bob's own", user_id="bob")

    result = do_import(service, document, mode="replace")
    assert result.mode == "replace"
    after = export(service, "alice")
    assert after["pages"] == document["pages"]
    assert after["memory"]["facts"] == document["memory"]["facts"]
    assert after["agents"] == {}, "replacing a whole user erases their agents too"
    assert len(export(service, "bob")["pages"]) == 1, "another user is untouched"

    add_page(service, "The agent heard this later", user_id="alice", agent_name="bot")
    do_import(service, agent_document, mode="replace")
    assert export(service, "alice", "bot")["pages"] == agent_document["pages"]
    assert export(service, "alice")["pages"] == document["pages"], "replacing an agent leaves the user's own memory"


def test_import_into_another_user_id_leaves_the_original_alone(service: MemoryService) -> None:
    seed(service)
    document = export(service, "alice")
    before = snapshot(service.settings.data_storage_path / "users" / "alice")
    result = do_import(service, document, user_id="bob")
    assert result.user_id == "bob"
    copied = export(service, "bob")
    assert copied["user_id"] == "bob"
    assert copied["pages"] == document["pages"] and copied["agents"].keys() == {"bot"}
    assert snapshot(service.settings.data_storage_path / "users" / "alice") == before


def test_analysis_progress_travels_into_an_empty_scope_but_not_into_one_with_pages(service: MemoryService) -> None:
    document = export_doc(memory={"analysis": {"allBefore": 2}}, pages=[page("p1"), page("p2"), page("p3")])
    do_import(service, document)
    assert pending_threads(service.store, Scope("alice")) == {"": 1}

    add_page(service, "existing", user_id="carol")
    do_import(service, document, user_id="carol")
    assert sum(pending_threads(service.store, Scope("carol")).values()) == 4, "imported pages are analysed here"


@pytest.mark.parametrize("mode", ["merge", "replace"])
@pytest.mark.parametrize(
    "bad",
    [
        {"format": "memory-mcp/export"},
        export_doc(user_id="../bob"),
        export_doc(pages=[page("p1"), page("p1")]),
        export_doc(pages=[page("p1"), page("p2", timestamp="2024-13-45")]),
        export_doc(memory={"facts": [{"id": "x", "content": "c", "confidence": 0.5, "validTo": 7}]}),
        export_doc(agents={"bot": {"memory": {"facts": [{"id": 1}]}, "pages": []}}),
        export_doc(agents={"bot": {"memory": {}, "pages": [page("q"), page("q")]}}),
    ],
    ids=["incomplete", "bad-user", "duplicate-pages", "bad-timestamp", "deep-type", "agent-fact", "agent-duplicates"],
)
def test_an_invalid_document_changes_nothing_on_disk(service: MemoryService, mode: str, bad: dict[str, Any]) -> None:
    seed(service)
    root = service.settings.data_storage_path
    before = snapshot(root)
    with pytest.raises(InvalidInput):
        do_import(service, bad, mode=mode)
    assert snapshot(root) == before


def test_replace_import_into_a_user_with_nothing_stored(service: MemoryService) -> None:
    result = do_import(service, export_doc(), mode="replace")
    assert result.pages_added == 2


def test_replace_import_of_a_whole_user_export_with_agents_keeps_the_data(service: MemoryService) -> None:
    seed(service)
    document = export(service, "alice")
    try:
        do_import(service, document, mode="replace")
    finally:
        # Whatever happened, the user's memory must still be there.
        assert service.store.list_users() == ["alice"]
    assert export(service, "alice")["pages"] == document["pages"]


def deep_object(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "bad_page",
    [page("p1", meta_data=deep_object(40)), page("p1", thread_id="a\nb")],
    ids=["meta-data-40-deep", "thread-id-newline"],
)
def test_imported_pages_follow_the_rules_of_add_memory(service: MemoryService, bad_page: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        do_import(service, export_doc(pages=[bad_page]))


def test_replace_import_that_cannot_be_written_erases_nothing(service: MemoryService) -> None:
    seed(service)
    root = service.settings.data_storage_path
    before = snapshot(root)
    document = export(service, "alice")
    document["agents"] = {}
    document["pages"].append(page("page_deep", meta_data=deep_object(300)))
    try:
        with pytest.raises(InvalidInput):
            do_import(service, document, mode="replace")
    finally:
        assert snapshot(root) == before


def test_imported_page_timestamps_are_stored_in_the_one_stored_form(service: MemoryService) -> None:
    do_import(
        service,
        export_doc(
            pages=[page("p1", timestamp="2024-05-01 15:56:00"), page("p2", timestamp="2024-05-01T15:56:00+02:00")]
        ),
    )
    assert [p["timestamp"] for p in export(service, "alice")["pages"]] == [
        "2024-05-01T15:56:00Z",
        "2024-05-01T13:56:00Z",
    ]


def test_a_deerflow_import_without_user_id_goes_to_the_configured_default_user(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, user_id="owner"))
    result = do_import(service, {"facts": [{"id": "f1", "content": "Uses Rust", "confidence": 0.8}]})
    assert result.user_id == "owner"
    assert [f["content"] for f in facts_of(service, "owner")] == ["Uses Rust"]
    assert service.store.list_users() == ["owner"]


# --- the MemoryOS importer ---------------------------------------------------------------------


def test_memoryos_user_becomes_one_export_document_with_nothing_lost(tmp_path: Path) -> None:
    [document] = from_memoryos(memoryos_dir(tmp_path / "mos"))
    assert document.user_id == "alice"
    pages = document.pages
    # Sorted by time; the exchange in both mid-term and short-term arrives once (as the mid-term page).
    assert [p.user_input for p in pages] == [
        "Planning a Japan trip",
        "Booked a ryokan",
        "I just got back from Kyoto",
        "The temples were amazing",
    ]
    assert [p.timestamp for p in pages] == [
        "2024-02-28T08:00:00Z",
        "2024-03-01T09:00:00Z",
        "2024-03-05T10:00:00Z",
        "2024-03-05T10:01:00Z",
    ]
    assert [p.page_id for p in pages[:3]] == ["mos_p1", "mos_p2", "mos_p3"], "MemoryOS page ids are kept"
    assert pages[3].page_id.startswith("page_")
    assert [p.thread_id for p in pages] == ["session_b", "session_b", "session_c", None]
    assert pages[0].meta_data == {"mood": "excited"}
    # The two oldest were analysed by MemoryOS: not sent to the LLM again.
    assert document.memory.analysis.allBefore == 2

    personal = document.memory.user.personalContext
    assert (personal.summary, personal.updatedAt) == ("Alice loves Japan and travels often.", "2024-03-05T11:00:00Z")
    facts = document.memory.facts
    assert [f.content for f in facts] == ["Alice visited Kyoto in March 2024", "Alice stays in ryokans"]
    assert {(f.source, f.category, f.confidence) for f in facts} == {("memoryos", "context", IMPORTED_CONFIDENCE)}
    assert [f.createdAt for f in facts] == ["2024-03-05T11:00:00Z", "2024-03-01T11:00:00Z"]
    assert len({f.id for f in facts}) == 2
    assert [k.content for k in document.memory.assistantKnowledge] == [
        "I recommended Fushimi Inari",
        "I am a travel guide",
    ]


def test_memoryos_import_through_the_service_leaves_only_unanalysed_exchanges_pending(
    service: MemoryService, tmp_path: Path
) -> None:
    [document] = from_memoryos(memoryos_dir(tmp_path / "mos"))
    result = do_import(service, document.model_dump(mode="json"))
    assert (result.pages_added, result.facts_added) == (4, 2)
    assert sum(pending_threads(service.store, Scope("alice")).values()) == 2
    profile = service.store.read_document(Scope("alice"))
    assert profile.user.personalContext.summary == "Alice loves Japan and travels often."
    assert len(profile.assistantKnowledge) == 2


def test_importing_the_same_memoryos_directory_twice_adds_nothing_the_second_time(
    service: MemoryService, tmp_path: Path
) -> None:
    root = memoryos_dir(tmp_path / "mos")
    [first] = from_memoryos(root)
    do_import(service, first.model_dump(mode="json"))
    [second] = from_memoryos(root)
    result = do_import(service, second.model_dump(mode="json"))
    assert (result.pages_added, result.facts_added) == (0, 0)
    assert len(service.store.read_pages(Scope("alice")).pages) == 4


def test_analysed_prefix_stops_at_the_first_unanalysed_exchange_in_time_order(tmp_path: Path) -> None:
    root = tmp_path / "mos"
    details = [
        {
            "page_id": "late",
            "user_input": "c",
            "agent_response": "c",
            "timestamp": "2024-01-03 00:00:00",
            "analyzed": True,
        },
        {
            "page_id": "middle",
            "user_input": "b",
            "agent_response": "b",
            "timestamp": "2024-01-02 00:00:00",
            "analyzed": False,
        },
        {
            "page_id": "early",
            "user_input": "a",
            "agent_response": "a",
            "timestamp": "2024-01-01 00:00:00",
            "analyzed": True,
        },
    ]
    write_json(root / "users" / "u1" / "mid_term.json", {"sessions": {"s": {"summary": "", "details": details}}})
    [document] = from_memoryos(root)
    assert [p.page_id for p in document.pages] == ["early", "middle", "late"]
    assert document.memory.analysis.allBefore == 1


def test_memoryos_selection_of_user_and_assistant_and_empty_profiles(tmp_path: Path) -> None:
    root = memoryos_dir(tmp_path / "mos")
    write_json(root / "users" / "bob" / "long_term_user.json", {"user_profiles": {"bob": {"data": "None"}}})
    write_json(
        root / "assistants" / "other" / "long_term_assistant.json",
        {"assistant_knowledge": [{"knowledge": "I am another assistant", "timestamp": "2024-01-01 00:00:00"}]},
    )

    everyone = from_memoryos(root)
    assert [d.user_id for d in everyone] == ["alice", "bob"]
    bob = everyone[1]
    assert bob.pages == [] and bob.memory.user.personalContext.summary == "", "MemoryOS writes 'None' for no profile"

    [only] = from_memoryos(root, source_user="alice", assistant_id="guide")
    assert [k.content for k in only.memory.assistantKnowledge] == ["I recommended Fushimi Inari", "I am a travel guide"]


@pytest.mark.parametrize(
    ("prepare", "user_id", "expected"),
    [
        (lambda root: (root / "users" / "john doe").mkdir(parents=True), None, ["'john doe'", "--user"]),
        (lambda root: root.mkdir(parents=True), None, ["no users/ folder", "not a MemoryOS data directory"]),
        (lambda root: (root / "users" / "alice").mkdir(parents=True), "zoe", ["no user 'zoe'"]),
        (
            lambda root: (
                write_json(root / "users" / "alice" / "short_term.json", {})
                or (root / "users" / "alice" / "mid_term.json").write_text("{broken", encoding="utf-8")
            ),
            None,
            ["mid_term.json", "could not be read as JSON"],
        ),
    ],
    ids=["invalid-user-id", "not-memoryos", "unknown-user", "corrupt-file"],
)
def test_memoryos_problems_are_clear_errors(
    tmp_path: Path, prepare: Any, user_id: str | None, expected: list[str]
) -> None:
    root = tmp_path / "mos"
    prepare(root)
    with pytest.raises(InvalidInput) as caught:
        from_memoryos(root, user_id)
    for part in expected:
        assert part in str(caught.value), str(caught.value)


def test_knowledge_entries_keep_their_order_and_text(tmp_path: Path) -> None:
    root = tmp_path / "mos"
    write_json(
        root / "users" / "u" / "long_term_user.json",
        {
            "knowledge_base": [{"knowledge": f"fact number {i}", "timestamp": "2024-01-01 00:00:00"} for i in range(30)]
            + ["  a plain string entry  ", {"knowledge": ""}, {"knowledge": 5}],
        },
    )
    [document] = from_memoryos(root)
    assert [f.content for f in document.memory.facts] == [f"fact number {i}" for i in range(30)] + [
        "a plain string entry"
    ]
    assert isinstance(document.memory.facts[0], Fact)


def _exported_with(service: MemoryService, **changes: Any) -> dict[str, Any]:
    service.add_memory(AddMemoryRequest.build(user_id="alice", user_input="hi", agent_response="ok"))
    document = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")
    for key, value in changes.items():
        document[key] = value
    return document


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (lambda d: d["pages"][0].update(page_id="../x/y"), "pages[0].page_id"),
        (
            lambda d: d["memory"]["facts"].append(
                {"id": "fact/1", "content": "x", "category": "context", "confidence": 0.9}
            ),
            "facts[0].id",
        ),
        (
            lambda d: d["memory"]["facts"].append(
                {"id": "fact_1", "content": "x" * 500_000, "category": "context", "confidence": 0.9}
            ),
            "facts[0].content",
        ),
    ],
    ids=["page id with a slash", "fact id with a slash", "500 KB fact"],
)
def test_an_import_breaking_the_rules_added_memory_follows_is_refused_whole(
    data_dir: Path, broken: Any, named: str
) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    document = _exported_with(service)
    broken(document)
    before = snapshot(data_dir)
    for mode in ("merge", "replace"):
        with pytest.raises(InvalidInput, match=named.replace("[", r"\[").replace("]", r"\]")):
            service.import_memory(ImportRequest.build(user_id="alice", data=document, mode=mode))
    assert snapshot(data_dir) == before


def test_imported_facts_are_held_to_max_facts_and_later_adds_with_facts_still_work(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    document = _exported_with(service)
    document["memory"]["facts"] = [
        {"id": f"fact_{n:08x}", "content": f"Fact number {n}", "category": "context", "confidence": 0.5 + n / 1e5}
        for n in range(20_000)
    ]
    preview = service.preview_import(ImportRequest.build(user_id="bob", data=document))
    result = service.import_memory(ImportRequest.build(user_id="bob", data=document))
    assert "19900 facts beyond memory.max_facts were kept as history" in result.message
    assert "would be kept as history" in preview.message
    holding = [fact for fact in service.store.read_document(Scope("bob")).facts if fact.validTo is None]
    assert len(holding) == service.settings.memory.max_facts
    assert min(fact.content for fact in holding) >= "Fact number 19900", "the most confident are kept"
    added = service.add_memory(
        AddMemoryRequest.build(
            user_id="bob",
            user_input="I moved to Lisbon",
            agent_response="ok",
            facts=[{"content": "Lives in Lisbon", "category": "context", "confidence": 0.95}],
        )
    )
    assert added.structured is not None
    assert [fact.content for fact in added.structured.facts_added] == ["Lives in Lisbon"]
