"""Pages as the service reads and shows them: a log fixed at its length, fields as results show them."""

from __future__ import annotations

from typing import Any

from memory_mcp.models import Page, ScoredPage
from memory_mcp.store import PageLog
from memory_mcp.store.page_sequence import PageSequence, columns_of


def pages_now(page_log: PageLog) -> PageSequence:
    """The log's pages as many as there are now: it may grow while we work (another thread adds).

    A plain slice of a PageSequence is one (a view on its columns); `columns_of` says so to the
    type checker, and keeps that view as it is."""
    return columns_of(page_log.pages[: len(page_log.pages)])


def page_fields(page: Page) -> dict[str, Any]:
    """A stored page's fields as tool results show them (host memory is the log's business)."""
    return page.model_dump(include=set(Page.model_fields))


def shown_page(page: Page) -> Page:
    """A stored page as results show it."""
    return Page(**page_fields(page))


def scored_page(page: Page, score: float) -> ScoredPage:
    """A stored page as results show it, with its score (to four places)."""
    return ScoredPage(**page_fields(page), score=round(score, 4))
