"""MemoryOS's tiers: session heat, visits saved in batches, eviction after analysis, archive search."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scripted_llm import SCRIPTED_MODEL, ScriptedLLM, reply
from waiting import wait_until

from memory_mcp.base.settings import Settings
from memory_mcp.memory.sessions import RETRIEVALS_PER_SAVE, heat, session_of, sessions_to_archive
from memory_mcp.models import (
    AddMemoryRequest,
    AnalysisProgress,
    FlushRequest,
    Page,
    ProfileRequest,
    RetrieveMemoryRequest,
    SessionState,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

ALICE = Scope("alice")

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def add(service: MemoryService, text: str, thread: str, user_id: str = "alice") -> None:
    service.add_memory(AddMemoryRequest.build(user_input=text, agent_response="ok", thread_id=thread, user_id=user_id))


def retrieve(service: MemoryService, query: str, **fields: Any):
    return service.retrieve_memory(RetrieveMemoryRequest.build(query=query, user_id="alice", **fields))


def saved_sessions(service: MemoryService) -> dict[str, SessionState]:
    return service.store.read_document(Scope("alice")).sessions


def mark_all_analysed(service: MemoryService, scope: Scope = ALICE) -> None:
    count = len(service.store.read_pages(scope).pages)
    service.store.update_document(
        scope, lambda document: document.model_copy(update={"analysis": AnalysisProgress(allBefore=count)})
    )


# --- heat arithmetic ------------------------------------------------------------------------


def test_heat_is_alpha_visits_plus_beta_length_plus_gamma_recency() -> None:
    settings = Settings(heat_alpha=2.0, heat_beta=0.5, heat_gamma=3.0, heat_tau_hours=24)
    visited_a_day_ago = SessionState(visits=4, lastVisit=(NOW - timedelta(hours=24)).isoformat())

    assert heat(visited_a_day_ago, 6, NOW, settings) == pytest.approx(2.0 * 4 + 0.5 * 6 + 3.0 * math.exp(-1))
    just_now = SessionState(visits=0, lastVisit=NOW.isoformat())
    assert heat(just_now, 0, NOW, settings) == pytest.approx(3.0)


def test_heat_counts_only_exchanges_since_the_last_consolidation() -> None:
    settings = Settings()
    state = SessionState(visits=0, counted=8, lastVisit=(NOW - timedelta(days=365)).isoformat())

    assert heat(state, 10, NOW, settings) == pytest.approx(2.0, abs=1e-6)


def test_sessions_are_threads_or_days() -> None:
    threaded = Page(page_id="a", user_input="", agent_response="", timestamp="2024-05-01T10:00:00Z", thread_id="t9")
    loose = Page(page_id="b", user_input="", agent_response="", timestamp="2024-05-01T23:00:00Z")

    assert session_of(threaded) == "thread:t9"
    assert session_of(loose) == "day:2024-05-01"


def test_the_coldest_analysed_sessions_go_first() -> None:
    heats = {"hot": 9.0, "warm": 3.0, "cold": 1.0, "cold-unanalysed": 0.5, "tied": 1.0}
    visits = {"cold": 0, "tied": 2}

    chosen = sessions_to_archive(heats, visits, frozenset(), {"cold-unanalysed"}, capacity=3)

    # Two over capacity; the coldest has pages not yet analysed, so it stays; ties go by visits.
    assert chosen == ["cold", "tied"]
    assert sessions_to_archive(heats, visits, frozenset({"cold", "tied"}), set(), capacity=3) == []


# --- visits ---------------------------------------------------------------------------------


def test_visits_are_saved_in_batches_not_per_query(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    add(service, "a canoe trip on the river", "trip")
    add(service, "filler", "other")
    memory_file = data_dir / "users" / "alice" / "memory.json"

    for _ in range(RETRIEVALS_PER_SAVE - 1):
        assert retrieve(service, "canoe").retrieved_pages
    assert not memory_file.exists()  # nineteen queries, no write

    retrieve(service, "canoe")
    wait_until(lambda: memory_file.exists(), timeout=10)
    saved = saved_sessions(service)
    assert saved["thread:trip"].visits == RETRIEVALS_PER_SAVE
    assert saved["thread:trip"].lastVisit


def test_unsaved_visits_are_saved_on_close(data_dir: Path) -> None:
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1))
    add(service, "a canoe trip on the river", "trip")
    add(service, "filler", "other")
    for _ in range(3):
        retrieve(service, "canoe")

    service.close()

    assert MemoryService(service.settings).store.read_document(Scope("alice")).sessions["thread:trip"].visits == 3


# --- eviction and the archive ---------------------------------------------------------------


def crowded_service(data_dir: Path) -> MemoryService:
    """Three sessions, room for two."""
    service = MemoryService(Settings(data_storage_path=data_dir, short_term_capacity=1, mid_term_capacity=2))
    add(service, "sailing lessons on the lake", "sailing")
    add(service, "violin practice schedule", "violin")
    add(service, "tax paperwork for 2023", "taxes")
    add(service, "newest exchange, in short-term memory", "violin")
    return service


def visit_violin_and_taxes(service: MemoryService) -> None:
    """Enough retrievals for one save; sailing is never visited, so it is the coldest."""
    for i in range(RETRIEVALS_PER_SAVE):
        retrieve(service, "violin" if i % 2 else "tax")


def test_nothing_is_archived_while_its_pages_await_analysis(data_dir: Path) -> None:
    service = crowded_service(data_dir)

    visit_violin_and_taxes(service)

    wait_until(lambda: saved_sessions(service), timeout=10)  # the visits were saved...
    assert not any(state.archived for state in saved_sessions(service).values())  # ...and nothing archived
    assert retrieve(service, "sailing").retrieved_pages  # still searched


def test_the_coldest_analysed_session_is_archived_but_never_lost(data_dir: Path) -> None:
    service = crowded_service(data_dir)
    mark_all_analysed(service)

    visit_violin_and_taxes(service)

    wait_until(lambda: any(state.archived for state in saved_sessions(service).values()), timeout=10)
    sessions = saved_sessions(service)
    assert {name for name, state in sessions.items() if state.archived} == {"thread:sailing"}
    assert retrieve(service, "sailing lake").retrieved_pages == []
    found = retrieve(service, "sailing lake", include_archived=True).retrieved_pages
    assert [page.user_input for page in found] == ["sailing lessons on the lake"]
    assert len((data_dir / "users" / "alice" / "pages.jsonl").read_text().splitlines()) == 4  # all on disk

    # What a person looking through their memory is shown: the archived session last, as the coldest.
    views = service.sessions("alice")
    assert [(view.name, view.exchanges, view.archived) for view in views][-1] == ("thread:sailing", 1, True)
    assert {view.name for view in views if not view.archived} == {"thread:violin", "thread:taxes"}
    assert all(view.visits > 0 and view.heat > views[-1].heat for view in views[:-1])


# --- heat in ranking ------------------------------------------------------------------------


def test_heat_lifts_a_slightly_weaker_page_only_when_weighted(data_dir: Path) -> None:
    def ranking(weight: float) -> list[str | None]:
        service = MemoryService(
            Settings(data_storage_path=data_dir / str(weight), short_term_capacity=1, heat_ranking_weight=weight)
        )
        add(service, "bread recipe with rye flour and seeds", "popular")
        add(service, "bread recipe with rye flour", "plain")
        add(service, "newest", "chat")
        for _ in range(RETRIEVALS_PER_SAVE):
            retrieve(service, "seeds")  # visits only the "popular" session
        wait_until(lambda: service.store.read_document(Scope("alice")).sessions, timeout=10)
        return [page.thread_id for page in retrieve(service, "bread rye flour").retrieved_pages]

    assert ranking(0.0)[0] == "plain"  # shorter page, higher BM25
    assert ranking(1.0)[0] == "popular"


# --- hot sessions are analysed at once ------------------------------------------------------


def test_a_hot_session_is_analysed_without_waiting_for_the_debounce(data_dir: Path) -> None:
    llm = ScriptedLLM(
        default=reply({"newFacts": [{"content": "plays the violin", "category": "context", "confidence": 0.9}]})
    )
    llm.start()
    try:
        settings = Settings(
            data_storage_path=data_dir,
            openai_base_url=llm.base_url,
            llm_model=SCRIPTED_MODEL,
            short_term_capacity=1,
            mid_term_heat_threshold=3.0,
            memory={"debounce_seconds": 300},
        )
        service = MemoryService(settings)
        service.start()
        add(service, "violin practice schedule", "violin")
        add(service, "newest", "chat")

        for _ in range(RETRIEVALS_PER_SAVE):
            retrieve(service, "violin")
        deadline = datetime.now() + timedelta(seconds=15)
        while not service.get_user_profile(ProfileRequest.build(user_id="alice")).facts and datetime.now() < deadline:
            time.sleep(0.05)

        assert [fact.content for fact in service.get_user_profile(ProfileRequest.build(user_id="alice")).facts] == [
            "plays the violin"
        ]
        assert service.store.read_document(Scope("alice")).sessions["thread:violin"].visits == 0  # heat reset
        # Only the hot session was analysed early; "newest" waited for its debounce until this flush.
        assert service.flush_memory(FlushRequest.build(user_id="alice")).pages_analysed == 1
        service.close()
    finally:
        llm.stop()


def test_the_updater_gives_each_session_its_topic(data_dir: Path) -> None:
    topic = {"summary": "Planning a sailing trip on the lake", "keywords": ["sailing", "lake", "trip"]}
    llm = ScriptedLLM(default=reply({"newFacts": [], "session": topic}))
    llm.start()
    try:
        service = MemoryService(
            Settings(data_storage_path=data_dir, openai_base_url=llm.base_url, llm_model=SCRIPTED_MODEL)
        )
        add(service, "We want to sail across the lake in June", "sailing")
        add(service, "Unrelated: my tax return is due", "taxes")

        service.flush_memory(FlushRequest.build(user_id="alice"))

        sessions = saved_sessions(service)
        assert sessions["thread:sailing"].summary == topic["summary"]
        assert sessions["thread:sailing"].keywords == topic["keywords"]
        assert "summary" in llm.requests[0]["messages"][0]["content"]  # the prompt asks for it
        service.close()
    finally:
        llm.stop()
