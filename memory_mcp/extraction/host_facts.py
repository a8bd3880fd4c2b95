"""Structured memory sent by the host model with an exchange (add_memory's `facts` and `profile`).

The host model already reads every exchange, so it can say what it learned without a second LLM
and a second key. What it sends is stored inside the page record itself (one atomic append), then
applied to the memory document by the same rules as the server's updater. The document records
how far the log's host memory has been applied (`analysis.hostBefore`), so a crash between the
append and the document write is finished by the next writer, or at the next start: nothing
acknowledged is lost and nothing is applied twice.
"""

from __future__ import annotations

import logging

from memory_mcp.base.errors import InvalidInput, MemoryGone
from memory_mcp.base.settings import Settings
from memory_mcp.memory.facts import current
from memory_mcp.memory.rules import SectionUpdate, UpdateProposal, UpdateRejected, UpdateReport, apply_proposal
from memory_mcp.models import (
    USER_SECTION_NAMES,
    HostMemory,
    MemoryDocument,
    StoredPage,
    StructuredUpdate,
)
from memory_mcp.store import MemoryStore, Scope

log = logging.getLogger(__name__)

HOST_SOURCE = "host"
REREADS = 2  # times the log may be found rewritten under an apply before it gives up


def check(document: MemoryDocument, host: HostMemory, settings: Settings, scope: Scope) -> None:
    """Raise InvalidInput, before anything is written, if the rules would refuse what the host sent."""
    holding = {fact.id: fact for fact in current(document.facts)}
    retired = {fact.id: fact for fact in document.facts if fact.validTo is not None}
    claimed: dict[str, int] = {}
    for index, fact in enumerate(host.facts):
        if fact.replaces is None:
            continue
        if fact.replaces in retired:
            successor = retired[fact.replaces].supersededBy
            later = f" (superseded by {successor})" if successor else ""
            raise InvalidInput(
                f"facts[{index}].replaces: fact {fact.replaces} no longer holds{later}; replace the current one"
            )
        if fact.replaces not in holding:
            raise InvalidInput(
                f"facts[{index}].replaces: no fact {fact.replaces!r} for {scope.describe()}; search_facts lists the ids"
            )
        if fact.replaces in claimed:
            raise InvalidInput(
                f"facts[{index}].replaces: facts[{claimed[fact.replaces]}] already replaces {fact.replaces}"
            )
        claimed[fact.replaces] = index
    try:
        apply_proposal(document, proposal_of(host), settings, HOST_SOURCE)
    except UpdateRejected as exc:
        raise InvalidInput(f"facts: {exc}; nothing was written") from None


def apply_pending(store: MemoryStore, scope: Scope, settings: Settings) -> dict[str, UpdateReport]:
    """Apply, in log order and in one document write, the host memory of every page not applied
    yet; return what each page's changed, by page id. The log rewritten meanwhile (retention
    erased old exchanges) is read again; memory erased meanwhile raises MemoryGone."""
    for _ in range(REREADS):
        try:
            return _apply_pending_once(store, scope, settings)
        except MemoryGone:
            if not store.read_pages(scope).pages:
                raise
    return _apply_pending_once(store, scope, settings)


def _apply_pending_once(store: MemoryStore, scope: Scope, settings: Settings) -> dict[str, UpdateReport]:
    if not store.host_memory_from(scope, store.read_document(scope).analysis.hostBefore):
        return {}  # known without loading the log: at start, most users' is not
    page_log = store.read_pages(scope)
    pages = page_log.pages[: len(page_log.pages)]
    reports: dict[str, UpdateReport] = {}

    def change(document: MemoryDocument) -> MemoryDocument:
        reports.clear()
        for page in pages[document.analysis.hostBefore :]:
            if not isinstance(page, StoredPage) or page.host_memory is None:
                continue
            try:
                document, reports[page.page_id] = apply_proposal(
                    document, proposal_of(page.host_memory), settings, HOST_SOURCE
                )
            except UpdateRejected as exc:  # memory changed since the check: keep the exchange, skip this
                log.warning("structured memory sent with %s not applied: %s", page.page_id, exc)
                reports[page.page_id] = UpdateReport(errors=[str(exc)])
        # Another process, having read a longer log, may have applied past our pages: never back.
        progress = document.analysis.model_copy(update={"hostBefore": max(len(pages), document.analysis.hostBefore)})
        return document.model_copy(update={"analysis": progress})

    # Never recreating memory erased since the pages were read, nor applying them to memory begun anew.
    store.update_document(scope, change, create=False, log_generation=page_log.generation)
    return reports


def outcome(report: UpdateReport | None) -> StructuredUpdate:
    """What an add_memory call's facts and profile changed (a concurrent writer may have applied
    them already, in which case their effect is in memory but not itemised here)."""
    report = report or UpdateReport()
    return StructuredUpdate(
        facts_added=report.facts_added,
        facts_skipped=report.facts_skipped,
        facts_superseded=report.facts_superseded,
        sections_updated=report.sections_updated,
    )


def proposal_of(host: HostMemory) -> UpdateProposal:
    user = {name: SectionUpdate(summary=text, shouldUpdate=True) for name, text in host.profile.items()}
    return UpdateProposal(
        user={name: update for name, update in user.items() if name in USER_SECTION_NAMES},
        history={name: update for name, update in user.items() if name not in USER_SECTION_NAMES},
        newFacts=list(host.facts),
    )
