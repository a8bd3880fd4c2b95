"""Retention (`memory.retention_days`): old exchanges erased for good once nothing waits to be
drawn from them, their facts kept, and analysis progress still pointing at the same pages.

Through the service where the user's view matters (what is found, exported, left on disk), and
through `memory_mcp.extraction.retention` on a real store for the rules and for a crash cut between the
document write and the log rewrite.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest
from core_calls import add, flush
from scripted_llm import ScriptedLLM, reply
from update_helpers import ServiceFactory, fact, update
from waiting import wait_until

from memory_mcp.base.clock import format_timestamp, now
from memory_mcp.base.errors import MemoryGone
from memory_mcp.base.settings import Settings
from memory_mcp.extraction import retention
from memory_mcp.memory.progress import mark_analysed, pending_by_thread
from memory_mcp.models import (
    AnalysisProgress,
    ExportRequest,
    HostMemory,
    MemoryDocument,
    Page,
    RetrieveMemoryRequest,
    SearchFactsRequest,
    SessionState,
    SetAsideBatch,
    StoredPage,
)
from memory_mcp.service.memory_service import MemoryService
from memory_mcp.store import Scope
from memory_mcp.store.files.backend import JsonStore

USER = Scope("alice")
DEFAULT_USER = Scope("default")  # whose memory add_memory keeps when no user_id is given


def days_ago(days: float) -> str:
    return format_timestamp(now() - timedelta(days=days))


def page(n: int, age_days: float, thread: str | None = None, host: bool = False) -> Page:
    fields = {
        "page_id": f"page_{n:04d}",
        "user_input": f"exchange {n}",
        "agent_response": "ok",
        "timestamp": days_ago(age_days),
        "thread_id": thread,
    }
    return StoredPage(**fields, host_memory=HostMemory(facts=[])) if host else Page(**fields)


def pending_ids(pages: list[Page], progress: AnalysisProgress) -> set[str]:
    return {pages[n].page_id for numbers in pending_by_thread(pages, progress).values() for n in numbers}


def bytes_under(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in root.rglob("*") if path.is_file())


def test_old_exchanges_are_erased_after_their_update_and_the_facts_drawn_from_them_stay(
    make_service: ServiceFactory, llm: ScriptedLLM, data_dir: Path
) -> None:
    service = make_service(memory={"retention_days": 30})
    add(service, "my locker code is 4417", "noted", timestamp=days_ago(90))
    add(service, "the gym is on Elm street", "ok", timestamp=days_ago(60))
    add(service, "I started piano lessons", "nice", timestamp=days_ago(2))
    llm.enqueue(reply(update(facts=[fact("Has a gym locker on Elm street")])))

    flush(service)

    assert [p.user_input for p in service.store.read_pages(DEFAULT_USER).pages] == ["I started piano lessons"]
    facts = service.search_facts(SearchFactsRequest.build(limit=10)).facts
    assert [f.content for f in facts] == ["Has a gym locker on Elm street"]
    found = service.retrieve_memory(RetrieveMemoryRequest.build(query="locker code gym Elm", max_results=5))
    assert found.retrieved_pages == [] and "4417" not in found.context
    exported = service.export_memory(ExportRequest.build())
    assert [p.user_input for p in exported.pages] == ["I started piano lessons"]
    assert b"4417" not in bytes_under(data_dir), "erased for good: no copy left in any file"
    assert service.store.read_document(DEFAULT_USER).analysis.erasing == [], "the erase finished"


def test_with_extraction_off_old_exchanges_are_erased_at_start(data_dir: Path) -> None:
    settings = Settings(data_storage_path=data_dir, memory={"retention_days": 7})
    writer = MemoryService(settings)
    add(writer, "an old note about taxes", timestamp=days_ago(30))
    add(writer, "a fresh note about tennis", timestamp=days_ago(1))
    writer.close()

    service = MemoryService(settings)
    service.start()
    try:
        wait_until(lambda: len(service.store.read_pages(DEFAULT_USER).pages) == 1, what="the old exchange erased")
        assert service.store.read_pages(DEFAULT_USER).pages[0].user_input == "a fresh note about tennis"
    finally:
        service.close()


def test_only_exchanges_nothing_waits_on_are_expired() -> None:
    pages = [
        page(0, 90),
        page(1, 90, host=True),  # its host memory is applied (below hostBefore)
        page(2, 90, thread="t"),  # set aside for a retry
        page(3, 90),  # not analysed yet
        page(4, 10, thread="t"),  # analysed, but recent
        page(5, 90, thread="t"),  # analysed by its thread's mark
        page(6, 90, host=True),  # host memory not applied yet
    ]
    progress = AnalysisProgress(
        allBefore=3,
        threads={"t": 6},
        hostBefore=2,
        setAside=[SetAsideBatch(thread="t", pageIds=["page_0002"], reason="unusable", at=days_ago(80))],
    )
    cutoff = days_ago(30)

    assert retention.expired_positions(pages, progress, cutoff, extraction_on=True) == [0, 1, 5]
    assert retention.expired_positions(pages, progress, cutoff, extraction_on=False) == [0, 1, 5], (
        "this memory was analysed before: a process without an LLM still waits for analysis"
    )
    never_analysed = progress.model_copy(update={"allBefore": 0, "threads": {}})
    assert retention.expired_positions(pages, never_analysed, cutoff, extraction_on=False) == [0, 1, 3, 5]
    undated = page(7, 90).model_copy(update={"timestamp": "sometime"})  # as an import may bring it
    assert retention.expired_positions([undated], never_analysed, cutoff, extraction_on=False) == []


def test_renumbered_progress_leaves_every_remaining_page_as_it_was() -> None:
    chooser = random.Random(7)
    for _ in range(300):
        pages = [page(n, 90, thread=chooser.choice(["a", "b", None])) for n in range(chooser.randint(1, 30))]
        progress = AnalysisProgress()
        for _ in range(chooser.randint(0, 6)):
            key = chooser.choice(["a", "b", ""])
            progress = mark_analysed(progress, pages, key, chooser.randrange(len(pages)))
        pending = pending_ids(pages, progress)
        analysed = [n for n, p in enumerate(pages) if p.page_id not in pending]
        erased = sorted(chooser.sample(analysed, chooser.randint(0, len(analysed))))

        after = retention.renumbered(progress, erased)

        kept = [p for n, p in enumerate(pages) if n not in erased]
        assert pending_ids(kept, after) == pending, (progress, erased, after)
        assert all(value > after.allBefore for value in after.threads.values())


def test_a_crash_between_the_document_write_and_the_log_rewrite_is_finished_by_the_next_reader(
    data_dir: Path,
) -> None:
    store = JsonStore(data_dir)
    store.append_pages(USER, [page(n, 90 if n < 4 else 1) for n in range(6)])
    store.write_document(USER, MemoryDocument(analysis=AnalysisProgress(allBefore=3, hostBefore=6)))
    # What the first write of an erase leaves when the process dies before the log is rewritten:
    # the document renumbered for the log without pages 0-2, and those ids recorded.
    erased = ["page_0000", "page_0001", "page_0002"]
    store.update_document(
        USER,
        lambda d: d.model_copy(
            update={"analysis": retention.renumbered(d.analysis, [0, 1, 2]).model_copy(update={"erasing": erased})}
        ),
    )

    reopened = JsonStore(data_dir)  # another process, or this one after a restart
    generation = reopened.read_pages(USER).generation  # work read from the log as the crash left it
    with pytest.raises(MemoryGone):  # work read from the old log never lands on the new one
        reopened.update_document(USER, lambda d: d, create=False, log_generation=generation)
    progress = reopened.read_document(USER).analysis

    log = reopened.read_pages(USER).pages
    assert [p.page_id for p in log] == ["page_0003", "page_0004", "page_0005"]
    assert pending_ids(list(log), progress) == {"page_0003", "page_0004", "page_0005"}, "not renumbered twice"
    assert progress.hostBefore == 3 and progress.erasing == []
    assert retention.erase_expired(reopened, USER, 30, now(), extraction_on=True) == 0, "page 3 was never analysed"


def test_a_session_counts_its_new_exchanges_again_once_its_old_ones_are_erased(data_dir: Path) -> None:
    store = JsonStore(data_dir)
    store.append_pages(USER, [page(0, 90, thread="t"), page(1, 90, thread="t"), page(2, 1, thread="t")])
    analysed = AnalysisProgress(allBefore=3)
    store.write_document(USER, MemoryDocument(analysis=analysed, sessions={"thread:t": SessionState(counted=3)}))

    assert retention.erase_expired(store, USER, 30, now(), extraction_on=True) == 2

    state = store.read_document(USER).sessions["thread:t"]
    assert state.counted == 1, "the heat of one more exchange in this thread counts at once"
