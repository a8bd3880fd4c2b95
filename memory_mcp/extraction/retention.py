"""Retention: verbatim exchanges older than `memory.retention_days` erased for good, while the
facts and profile drawn from them stay.

An exchange is erased only once nothing waits to be drawn from it: analysed by the updater (with
extraction off, nothing ever will be), its host memory applied, and not set aside for a retry.
Analysis progress counts pages by position, so the document is renumbered in the same step as
the log loses them (`MemoryStore.erase_pages`, which keeps the two together through a crash).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

from memory_mcp.base.clock import format_timestamp, normalise_timestamp
from memory_mcp.base.errors import MemoryGone
from memory_mcp.memory.progress import thread_key
from memory_mcp.memory.sessions import session_named
from memory_mcp.models import AnalysisProgress, MemoryDocument, Page
from memory_mcp.models.stored import carries_host_memory
from memory_mcp.store import MemoryStore, Scope
from memory_mcp.store.page_sequence import PageSequence


def erase_expired(store: MemoryStore, scope: Scope, retention_days: int, moment: datetime, extraction_on: bool) -> int:
    """Erase the scope's exchanges older than `retention_days` before `moment` that nothing waits
    on; return how many were erased. The caller holds the scope's update right, so no analysis
    moves the progress meanwhile."""
    try:
        pages = store.read_pages(scope).pages
        progress = store.read_document(scope).analysis
        cutoff = format_timestamp(moment - timedelta(days=retention_days))
        expired = [pages.ids[n] for n in expired_positions(pages, progress, cutoff, extraction_on)]
        if not expired:
            return 0
        erased: list[int] = []

        def without(document: MemoryDocument, positions: list[int]) -> MemoryDocument:
            erased[:] = positions
            return document_without(document, pages, positions)

        store.erase_pages(scope, expired, without)
    except MemoryGone:
        return 0
    return len(erased)


def document_without(document: MemoryDocument, pages: PageSequence, positions: list[int]) -> MemoryDocument:
    """The document as it stands once the log loses the pages at `positions` (ascending): analysis
    progress renumbered, the erased pages out of their sessions' counts and of set-aside batches."""
    # A session's heat counts the exchanges added since it was last analysed for being hot: those
    # erased leave that count too, or new ones would not count until they outnumbered them.
    gone = Counter(session_named(pages.threads[n], pages.timestamps[n]) for n in positions)
    sessions = {
        name: state.model_copy(update={"counted": max(0, state.counted - gone[name])}) if name in gone else state
        for name, state in document.sessions.items()
    }
    erased_ids = {pages.ids[n] for n in positions}
    set_aside = [
        batch.model_copy(update={"pageIds": [page_id for page_id in batch.pageIds if page_id not in erased_ids]})
        for batch in document.analysis.setAside
        if any(page_id not in erased_ids for page_id in batch.pageIds)
    ]
    analysis = renumbered(document.analysis, positions).model_copy(update={"setAside": set_aside})
    return document.model_copy(update={"analysis": analysis, "sessions": sessions})


def expired_positions(pages: Sequence[Page], progress: AnalysisProgress, cutoff: str, extraction_on: bool) -> list[int]:
    """Positions of the pages stamped before `cutoff` that nothing waits on. Analysis is waited
    for when this process extracts, or when the updater ever analysed this memory (another process
    with an LLM may: one started without its key must not erase what that one would read)."""
    set_aside = {page_id for batch in progress.setAside for page_id in batch.pageIds}
    wait_for_analysis = extraction_on or progress.allBefore > 0 or bool(progress.threads)
    return [
        number
        for number, page in enumerate(pages)
        if _stamped_before(page.timestamp, cutoff)
        and (not wait_for_analysis or number < progress.allBefore or number < progress.threads.get(thread_key(page), 0))
        and (number < progress.hostBefore or not carries_host_memory(page))
        and page.page_id not in set_aside
    ]


def _stamped_before(timestamp: str, cutoff: str) -> bool:
    """Whether a page's time is before `cutoff`; a time that is not one (imported as it came) never is."""
    try:
        return normalise_timestamp(timestamp) < cutoff
    except ValueError:
        return False


def renumbered(progress: AnalysisProgress, erased: Sequence[int]) -> AnalysisProgress:
    """Progress over the log without the pages at the `erased` positions (ascending): each
    position moves down by the number of erased pages before it, which keeps every remaining
    page on the same side of every mark."""

    def moved(position: int) -> int:
        return position - bisect_left(erased, position)

    return progress.model_copy(
        update={
            "allBefore": moved(progress.allBefore),
            "hostBefore": moved(progress.hostBefore),
            "threads": {
                key: moved(value) for key, value in progress.threads.items() if moved(value) > moved(progress.allBefore)
            },
        }
    )
