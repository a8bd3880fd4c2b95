"""What a start reads: pending work is resumed, and a status given, without loading every user's log."""

from __future__ import annotations

import threading
from pathlib import Path

from core_calls import add
from waiting import wait_until

from memory_mcp.base.settings import Settings
from memory_mcp.models import HostFact, HostMemory, StoredPage
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import PageLog, Scope
from memory_mcp.store.files.backend import JsonStore


class ReadsNoted(JsonStore):
    """The JSON store, noting whose whole log was asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.logs_read: set[str] = set()

    def read_pages(self, scope: Scope) -> PageLog:
        self.logs_read.add(scope.describe())
        return super().read_pages(scope)


def test_a_start_and_a_status_read_in_full_only_the_log_a_crash_left_host_memory_in(tmp_path: Path) -> None:
    settings = Settings(data_storage_path=tmp_path)
    before = MemoryService(settings)
    for user in ("alice", "bob", "carol"):
        add(before, f"{user} says hello", user_id=user)
    fact = HostFact(content="Bob lives in Lyon", category="context", confidence=0.95)
    add(before, "I live in Lyon", user_id="bob", facts=[fact.model_dump()])  # host memory, applied
    fact = HostFact(content="Dora lives in Lyon", category="context", confidence=0.95)
    crashed = StoredPage(
        page_id="page_crashed", user_input="I moved to Lyon", agent_response="Noted",
        timestamp="2026-01-01T00:00:00Z", host_memory=HostMemory(facts=[fact]),
    )  # fmt: skip
    before.store.append_page(Scope("dora"), crashed)  # a crash between the add's two writes
    before.close()

    store = ReadsNoted(tmp_path)
    service = MemoryService(settings, store=store)
    service.start()
    wait_until(lambda: not any(t.name == "memory-resume" for t in threading.enumerate()), 10, "resume")
    status = service.memory_status()
    service.close()

    assert store.logs_read == {"dora"}
    assert [fact.content for fact in store.read_document(Scope("dora")).facts] == ["Dora lives in Lyon"]
    assert {user.user_id: user.pages for user in status.users} == {"alice": 1, "bob": 2, "carol": 1, "dora": 1}
