"""Memory held per user is bounded: beyond `memory.cached_scopes` the least recently used users'
exchanges and index are let go and read again when next asked for, with the same answers, their
visits saved, and nothing mistaken for erased, however many threads use them meanwhile. Through
the core API, over the JSON files (the PostgreSQL store's cache is let go the same way)."""

from __future__ import annotations

import threading
from pathlib import Path

from memory_mcp.base.settings import Settings
from memory_mcp.models import AddMemoryRequest, RetrieveMemoryRequest
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope

USERS = [f"user{n}" for n in range(12)]
BUDGET = 3


def remember(service: MemoryService, user: str, n: int) -> None:
    service.add_memory(
        AddMemoryRequest.build(
            user_id=user, user_input=f"{user} keeps a notebook about topic{n} and {user}hobby", agent_response="ok"
        )
    )


def recalled(service: MemoryService, user: str, query: str, searched: dict[str, int] | None = None) -> set[str]:
    """The exchanges retrieve_memory gives (recent and found); `searched` counts the retrievals
    that found some by search (each is one visit of their session)."""
    result = service.retrieve_memory(RetrieveMemoryRequest.build(user_id=user, query=query, max_results=50))
    if searched is not None and result.retrieved_pages:
        searched[user] = searched.get(user, 0) + 1
    return {page.user_input for page in [*result.short_term_memory, *result.retrieved_pages]}


def test_users_beyond_the_budget_are_let_go_and_answer_the_same_when_asked_again(tmp_path: Path) -> None:
    service = MemoryService(Settings(data_storage_path=tmp_path, memory={"cached_scopes": BUDGET}))
    for user in USERS:
        for n in range(5):
            remember(service, user, n)
    first = {user: recalled(service, user, f"{user}hobby notebook") for user in USERS}
    assert service.memory_status().scopes_in_memory == BUDGET

    again = {user: recalled(service, user, f"{user}hobby notebook") for user in reversed(USERS)}
    assert again == first
    for user, found in first.items():
        assert len(found) == 5 and all(text.startswith(f"{user} ") for text in found), "each user's own, all of them"
    service.close()


def test_letting_go_under_concurrent_use_loses_no_add_no_answer_and_no_visit(tmp_path: Path) -> None:
    service = MemoryService(Settings(data_storage_path=tmp_path, memory={"cached_scopes": BUDGET}))
    errors: list[BaseException] = []
    searched: dict[str, int] = {}
    rounds = 15

    def client(users: list[str]) -> None:
        try:
            for n in range(rounds):
                for user in users:
                    remember(service, user, n)
                    found = recalled(service, user, f"{user}hobby", searched)
                    assert len(found) == n + 1 and all(text.startswith(f"{user} ") for text in found)
        except BaseException as exc:
            errors.append(exc)

    clients = [threading.Thread(target=client, args=(USERS[k::4],)) for k in range(4)]
    for each in clients:
        each.start()
    for each in clients:
        each.join()
    assert errors == []
    assert service.memory_status().scopes_in_memory <= BUDGET + 4, "the budget, give or take those in use"
    service.close()

    reopened = MemoryService(Settings(data_storage_path=tmp_path))
    for user in USERS:
        assert len(reopened.store.read_pages(Scope(user)).pages) == rounds
        sessions = reopened.store.read_document(Scope(user)).sessions
        assert sum(state.visits for state in sessions.values()) == searched[user], f"every visit of {user} saved"
    reopened.close()
