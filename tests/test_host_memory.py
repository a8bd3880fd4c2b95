"""Structured memory from the host model: add_memory's `facts` and `profile`, applied by the
updater's rules, atomically with the exchange, with no LLM endpoint configured."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from core_calls import add
from stdio_helpers import snapshot
from waiting import wait_until

from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import Settings
from memory_mcp.models import (
    HostFact,
    HostMemory,
    MemoryDocument,
    ProfileRequest,
    SearchFactsRequest,
    StoredPage,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope


def fact(content: str, confidence: float = 0.95, category: str = "preference", **extra: Any) -> dict[str, Any]:
    return {"content": content, "category": category, "confidence": confidence, **extra}


def holding(service: MemoryService, user: str = "alice") -> list[str]:
    return [f.content for f in service.store.read_document(Scope(user)).facts if f.validTo is None]


def test_facts_and_profile_fill_structured_memory_with_no_endpoint(service: MemoryService) -> None:
    result = add(
        service,
        "I'm vegetarian, and I just started at Acme as a data engineer",
        "Congratulations!",
        user_id="alice",
        facts=[fact("Alice is vegetarian"), fact("Alice works at Acme as a data engineer", 0.9, "context")],
        profile={"workContext": "Data engineer at Acme since this week.", "recentMonths": "Changed jobs to Acme."},
    )

    assert result.structured is not None
    assert [f.content for f in result.structured.facts_added] == [
        "Alice is vegetarian",
        "Alice works at Acme as a data engineer",
    ]
    assert result.structured.sections_updated == ["user.workContext", "history.recentMonths"]
    profile = service.get_user_profile(ProfileRequest.build(user_id="alice"))
    assert profile.user.workContext.summary == "Data engineer at Acme since this week."
    assert profile.history.recentMonths.summary == "Changed jobs to Acme."
    assert {(f.content, f.source) for f in profile.facts or []} == {
        ("Alice is vegetarian", "host"),
        ("Alice works at Acme as a data engineer", "host"),
    }
    assert service.memory_status().extraction == "host"


def test_the_updaters_rules_apply_to_host_facts(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, memory={"max_facts": 10}))
    add(service, "hi", user_id="alice", facts=[fact(f"Known thing {n}", 0.8) for n in range(10)])

    result = add(
        service,
        "I uploaded my CV and I love tea",
        user_id="alice",
        facts=[
            fact("Alice might like jazz", 0.5),  # below memory.fact_confidence_threshold
            fact("  KNOWN   thing 3 ", 0.9),  # the same words, in other case and spacing
            fact("Alice uploaded cv.pdf", 0.95),  # uploads belong to one session
            fact("Alice loves tea", 0.99),  # pushes the least confident fact out (max_facts)
        ],
        profile={"topOfMind": "Job hunting. She uploaded her CV today."},
    )

    assert result.structured is not None
    assert [(s.index, s.reason) for s in result.structured.facts_skipped] == [
        (0, "below_threshold"),
        (1, "duplicate"),
        (2, "upload_mention"),
    ]
    assert [f.content for f in result.structured.facts_added] == ["Alice loves tea"]
    assert len(holding(service)) == 10 and "Alice loves tea" in holding(service)
    assert service.store.read_document(Scope("alice")).user.topOfMind.summary == "Job hunting."


def test_replaces_supersedes_and_keeps_history(service: MemoryService) -> None:
    first = add(service, "I live in Lyon", user_id="alice", facts=[fact("Alice lives in Lyon", category="context")])
    assert first.structured is not None
    lyon = first.structured.facts_added[0].id

    moved = add(service, "I moved to Berlin", user_id="alice", facts=[fact("Alice lives in Berlin", replaces=lyon)])

    assert moved.structured is not None
    berlin = moved.structured.facts_added[0].id
    assert [(s.id, s.superseded_by) for s in moved.structured.facts_superseded] == [(lyon, berlin)]
    assert holding(service) == ["Alice lives in Berlin"]
    history = service.search_facts(SearchFactsRequest.build(user_id="alice", include_superseded=True)).facts
    old = next(f for f in history if f.id == lyon)
    assert old.supersededBy == berlin and old.validTo


BAD_FACTS = {
    "unknown category": ([fact("ok"), fact("x", category="opinion")], "facts[1].category"),
    "confidence over 1": ([fact("x", 1.5)], "facts[0].confidence"),
    "blank content": ([fact("   ")], "facts[0].content"),
    "unknown field": ([{**fact("x"), "replace": "fact_00000000"}], "facts[0].replace"),
    "bad fact id": ([fact("x", replaces="../etc")], "facts[0].replaces"),
    "unknown fact": ([fact("x", replaces="fact_0badbeef")], "facts[0].replaces"),
    "content too long": ([fact("x" * 2001)], "facts[0].content"),
}


@pytest.mark.parametrize(("facts", "named"), list(BAD_FACTS.values()), ids=list(BAD_FACTS))
def test_an_invalid_fact_names_its_index_and_field_and_writes_nothing(
    service: MemoryService, data_dir: Path, facts: list[dict[str, Any]], named: str
) -> None:
    add(service, "first", user_id="alice", facts=[fact("Alice likes trains")])
    before = snapshot(data_dir)

    with pytest.raises(InvalidInput, match=named.replace("[", r"\[").replace("]", r"\]")):
        add(service, "second", user_id="alice", facts=facts)

    assert snapshot(data_dir) == before


def test_replacing_more_facts_than_max_fact_removals_is_refused_whole(service: MemoryService, data_dir: Path) -> None:
    added = add(service, "hi", user_id="alice", facts=[fact(f"Thing {n}") for n in range(7)]).structured
    assert added is not None
    before = snapshot(data_dir)

    with pytest.raises(InvalidInput, match="max_fact_removals"):
        add(service, "all new", user_id="alice", facts=[fact(f"New {f.id}", replaces=f.id) for f in added.facts_added])

    assert snapshot(data_dir) == before


def test_a_profile_section_must_be_one_of_the_six(service: MemoryService) -> None:
    with pytest.raises(InvalidInput, match="profile.hobbies"):
        add(service, "hi", user_id="alice", profile={"hobbies": "chess"})


def crashed_page(**profile: str) -> StoredPage:
    """The state a crash leaves between the two writes of an add: the exchange, carrying what the
    host learned, is in the log; memory.json has not been updated yet."""
    return StoredPage(
        page_id="page_crashed",
        user_input="I moved to Berlin",
        agent_response="Noted",
        timestamp="2026-01-01T00:00:00Z",
        host_memory=HostMemory(
            facts=[HostFact(content="Alice lives in Berlin", category="context", confidence=0.95)],
            profile=profile,
        ),
    )


def test_host_memory_cut_off_by_a_crash_is_applied_at_the_next_start_once(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    add(service, "before", user_id="alice")
    service.store.append_page(Scope("alice"), crashed_page(topOfMind="Moving to Berlin."))
    assert holding(service) == []

    for _restart in range(2):
        restarted = MemoryService(Settings(data_storage_path=data_dir))
        restarted.start()
        wait_until(lambda: not any(t.name == "memory-resume" for t in threading.enumerate()), 10, "resume")
        restarted.close()

    assert holding(restarted) == ["Alice lives in Berlin"]
    assert restarted.store.read_document(Scope("alice")).user.topOfMind.summary == "Moving to Berlin."


def test_the_next_add_finishes_what_a_crash_left_half_done(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir))
    service.store.append_page(Scope("alice"), crashed_page())

    add(service, "I write Go", user_id="alice", facts=[fact("Alice writes Go")])

    assert holding(service) == ["Alice lives in Berlin", "Alice writes Go"]


def test_two_servers_adding_host_facts_for_one_user_apply_each_exactly_once(data_dir: Path) -> None:
    servers = [MemoryService(Settings(data_storage_path=data_dir)) for _ in range(2)]
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        try:
            for n in range(15):
                add(servers[number], f"exchange {number}-{n}", user_id="alice", facts=[fact(f"Fact {number}-{n}")])
        except BaseException as exc:  # noqa: BLE001 (reported in the test's thread below)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    facts = holding(MemoryService(Settings(data_storage_path=data_dir)))
    assert sorted(facts) == sorted(f"Fact {w}-{n}" for w in range(2) for n in range(15))
    stored = json.loads((data_dir / "users" / "alice" / "memory.json").read_text())
    assert stored["analysis"]["hostBefore"] == 30


def test_tool_results_and_exports_carry_plain_pages(service: MemoryService) -> None:
    from memory_mcp.models import ExportRequest, RetrieveMemoryRequest

    add(service, "I moved to Berlin", user_id="alice", facts=[fact("Alice lives in Berlin")])

    recalled = service.retrieve_memory(RetrieveMemoryRequest.build(query="Berlin", user_id="alice"))
    exported = service.export_memory(ExportRequest.build(user_id="alice")).model_dump(mode="json")

    assert "host_memory" not in recalled.model_dump(mode="json")["short_term_memory"][0]
    assert "host_memory" not in exported["pages"][0]
    assert MemoryDocument.model_validate(exported["memory"]).facts[0].content == "Alice lives in Berlin"


def test_an_add_whose_facts_cannot_be_applied_now_says_so_and_the_next_add_applies_them(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_mcp.base.errors import StorageError

    service = MemoryService(Settings(data_storage_path=data_dir))
    add(service, "before", user_id="alice")
    write = service.store.update_document

    def failing(*args: object, **kwargs: object) -> object:
        raise StorageError("could not write the memory of alice: disk full")

    monkeypatch.setattr(service.store, "update_document", failing)
    result = add(service, "I moved to Berlin", user_id="alice", facts=[fact("Alice lives in Berlin")])
    assert result.status == "success" and "applied at the next add or start (could not write" in result.message
    assert [page.user_input for page in service.store.read_pages(Scope("alice")).pages] == [
        "before",
        "I moved to Berlin",
    ]
    monkeypatch.setattr(service.store, "update_document", write)
    add(service, "and I write Go", user_id="alice", facts=[fact("Alice writes Go")])
    assert holding(service) == ["Alice lives in Berlin", "Alice writes Go"]
