"""Facts that age well: pinned facts stay and come first after corrections; facts with an end
leave retrieval the moment it passes, and stay in exports, marked by it, until erased."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from core_calls import add

from memory_mcp.base.clock import format_timestamp, now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.settings import MemorySettings, Settings
from memory_mcp.memory.rules import UpdateProposal, apply_proposal
from memory_mcp.models import (
    AddFactRequest,
    ExportRequest,
    ImportRequest,
    MemoryDocument,
    RetrieveMemoryRequest,
    SearchFactsRequest,
    UpdateFactRequest,
)
from memory_mcp.service.memory_service import MemoryService


@pytest.fixture
def service(data_dir: Path) -> MemoryService:
    return MemoryService(Settings(data_storage_path=data_dir, memory=MemorySettings(max_facts=10)))


def fact(service: MemoryService, content: str, **fields: object) -> str:
    return service.add_fact(AddFactRequest.build(content=content, **fields)).fact.id


def holding(service: MemoryService) -> list[str]:
    return [f.content for f in service.search_facts(SearchFactsRequest.build(limit=500)).facts]


def block(service: MemoryService) -> str:
    """The block for a request that asks nothing in particular: every fact that holds, best first."""
    return service.retrieve_memory(RetrieveMemoryRequest.build(query="")).context


def test_pinned_facts_come_right_after_corrections_and_say_so(service: MemoryService) -> None:
    fact(service, "Prefers tea", category="preference", confidence=1.0)
    fact(service, "Allergic to peanuts", category="knowledge", confidence=0.7, pinned=True)
    fact(service, "Said Paris is in Italy: it is in France", category="correction", confidence=0.9)

    lines = [line for line in block(service).splitlines() if line.startswith("- [")]

    assert lines == [
        "- [correction | 0.90] Said Paris is in Italy: it is in France",
        "- [knowledge | 0.70 | pinned] Allergic to peanuts",
        "- [preference | 1.00] Prefers tea",
    ]


def test_max_facts_never_trims_a_pinned_fact(service: MemoryService) -> None:
    fact(service, "Allergic to peanuts", confidence=0.5, pinned=True)
    for number in range(12):
        fact(service, f"Fact number {number}", confidence=0.95)

    kept = holding(service)

    assert "Allergic to peanuts" in kept and len(kept) == 10, "the pinned fact and the nine most confident others"


def test_the_updater_cannot_retire_a_pinned_fact_but_an_edit_by_name_can_unpin_it(service: MemoryService) -> None:
    pinned = fact(service, "Allergic to peanuts", pinned=True)
    plain = fact(service, "Likes jazz")
    document = MemoryDocument.model_validate(service.export_memory(ExportRequest.build()).memory.model_dump())

    updated, report = apply_proposal(
        document, UpdateProposal(factsToRemove=[pinned, plain]), service.settings, "thread-1", {pinned, plain}
    )

    assert [f.content for f in updated.facts if f.validTo is None] == ["Allergic to peanuts"]
    assert report.facts_removed == ["Likes jazz"]
    service.update_fact(UpdateFactRequest.build(fact_id=pinned, pinned=False))
    assert "| pinned]" not in block(service)


def test_the_llm_updater_cannot_pin_what_it_proposes(service: MemoryService) -> None:
    proposal = UpdateProposal(
        newFacts=[{"content": "Lives in Lyon", "category": "context", "confidence": 0.9, "pinned": True}]
    )

    updated, _ = apply_proposal(MemoryDocument(), proposal, service.settings, "thread-1", set())

    assert [(f.content, f.pinned) for f in updated.facts] == [("Lives in Lyon", False)]


def test_a_fact_past_its_end_leaves_retrieval_at_once_and_stays_in_the_export_until_erased(
    service: MemoryService,
) -> None:
    yesterday = format_timestamp(now() - timedelta(days=1))
    tomorrow = format_timestamp(now() + timedelta(days=1))
    gone = fact(service, "In Paris this week", expires_at=yesterday)
    fact(service, "On holiday until tomorrow", expires_at=tomorrow)

    assert holding(service) == ["On holiday until tomorrow"]
    assert "In Paris" not in block(service) and f"(until {tomorrow[:10]})" in block(service)
    exported = {f.content: f.expiresAt for f in service.export_memory(ExportRequest.build()).memory.facts}
    assert exported == {"In Paris this week": yesterday, "On holiday until tomorrow": tomorrow}
    assert fact(service, "In Paris this week") != gone, "an expired fact does not block saying it again"

    service.update_fact(UpdateFactRequest.build(fact_id=gone, expires_at="never"))
    assert holding(service).count("In Paris this week") == 2, "its end removed, it holds again"


def test_host_facts_sent_with_an_exchange_may_be_pinned_or_given_an_end(service: MemoryService) -> None:
    tomorrow = format_timestamp(now() + timedelta(days=1))
    add(
        service,
        "Keep in mind I'm vegetarian. I'm in Rome until tomorrow.",
        "Noted.",
        facts=[
            {"content": "Is vegetarian", "category": "preference", "confidence": 0.95, "pinned": True},
            {"content": "Is in Rome", "category": "context", "confidence": 0.95, "expiresAt": tomorrow},
        ],
    )

    stored = {f.content: (f.pinned, f.expiresAt) for f in service.export_memory(ExportRequest.build()).memory.facts}

    assert stored == {"Is vegetarian": (True, None), "Is in Rome": (False, tomorrow)}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"expires_at": "next friday"}, "expires_at"),
        ({"pinned": "sometimes"}, "pinned"),
    ],
)
def test_a_wrong_pin_or_end_is_refused_and_changes_nothing(
    service: MemoryService, fields: dict[str, object], problem: str
) -> None:
    kept = fact(service, "Likes jazz")
    with pytest.raises(InvalidInput, match=problem):
        service.add_fact(AddFactRequest.build(content="Likes blues", **fields))
    with pytest.raises(InvalidInput, match=problem):
        service.update_fact(UpdateFactRequest.build(fact_id=kept, **fields))
    assert holding(service) == ["Likes jazz"]


def test_as_of_gives_the_facts_believed_at_that_moment(service: MemoryService) -> None:
    history = [
        {"id": "fact_0000000a", "content": "Lives in Berlin", "category": "context", "confidence": 0.9,
         "createdAt": "2024-01-10T00:00:00Z", "validTo": "2025-03-01T00:00:00Z", "supersededBy": "fact_0000000b"},
        {"id": "fact_0000000b", "content": "Lives in Lyon", "category": "context", "confidence": 0.9,
         "createdAt": "2025-03-01T00:00:00Z"},
        {"id": "fact_0000000c", "content": "On holiday in Rome", "category": "context", "confidence": 0.9,
         "createdAt": "2025-06-01T00:00:00Z", "expiresAt": "2025-06-15T00:00:00Z"},
    ]  # fmt: skip
    document = {"user": {}, "history": {}, "facts": history}
    service.import_memory(ImportRequest.build(data=document))

    def believed(moment: str) -> list[str]:
        return sorted(f.content for f in service.search_facts(SearchFactsRequest.build(as_of=moment)).facts)

    assert believed("2023-12-31") == []
    assert believed("2024-06-01") == ["Lives in Berlin"]
    assert believed("2025-03-01T00:00:00Z") == ["Lives in Lyon"], "the replacement holds from its own moment"
    assert believed("2025-06-10") == ["Lives in Lyon", "On holiday in Rome"]
    assert believed("2025-06-15") == ["Lives in Lyon"]
    assert believed(format_timestamp(now())) == holding(service) == ["Lives in Lyon"]
