"""Which pages still await analysis, and how to record that some now have been.

Pure functions over the page log and the document's `analysis` progress; the updater stores the
new progress in the same atomic write as the memory it extracted, so a crash can neither lose
pending work nor apply it twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_mcp.models import AnalysisProgress, Page
from memory_mcp.store.page_sequence import columns_of


def thread_key(page: Page) -> str:
    """The thread a page belongs to; pages without one share the thread ""."""
    return page.thread_id or ""


def pending_by_thread(pages: Sequence[Page], progress: AnalysisProgress) -> dict[str, list[int]]:
    """Numbers of the pages not yet analysed, grouped by thread, each list in log order."""
    pending: dict[str, list[int]] = {}
    threads = columns_of(pages).between(progress.allBefore).threads
    for number, key in enumerate(threads, start=progress.allBefore):
        if number >= progress.threads.get(key, 0):
            pending.setdefault(key, []).append(number)
    return pending


def mark_analysed(progress: AnalysisProgress, pages: Sequence[Page], key: str, last: int) -> AnalysisProgress:
    """Progress after the pages of thread `key` numbered up to `last` were analysed."""
    threads = dict(progress.threads)
    threads[key] = max(threads.get(key, 0), last + 1)
    floor = progress.allBefore
    page_threads = columns_of(pages).threads
    while floor < len(pages) and floor < threads.get(page_threads[floor], 0):
        floor += 1
    return progress.model_copy(update={"allBefore": floor, "threads": {k: v for k, v in threads.items() if v > floor}})
