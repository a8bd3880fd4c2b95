"""Storing one exchange (add_memory), with what the host learned from it applied to structured memory."""

from __future__ import annotations

from collections.abc import Callable

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import StorageError
from memory_mcp.base.ids import new_id
from memory_mcp.base.phrases import plural
from memory_mcp.base.settings import Settings
from memory_mcp.extraction import host_facts
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.memory.progress import thread_key
from memory_mcp.models import AddMemoryRequest, AddMemoryResult, StoredPage, StructuredUpdate
from memory_mcp.service.admission import check_sizes, secrets_out
from memory_mcp.store import MemoryStore, Scope


def remember(
    settings: Settings,
    store: MemoryStore,
    scope: Scope,
    request: AddMemoryRequest,
    updates: UpdateRunner,
    embed_soon: Callable[[Scope], None],
) -> AddMemoryResult:
    """Store the exchange verbatim, with what the host learned from it applied; all of it is on
    disk (fsync'd) when this returns. Then the updater and the vectors hear of it."""
    check_sizes(settings, request)
    request = secrets_out(settings, request)
    host = request.host_memory
    page = StoredPage(
        page_id=new_id("page"),
        user_input=request.user_input,
        agent_response=request.agent_response,
        timestamp=request.timestamp or utc_now(),
        meta_data=request.meta_data,
        thread_id=request.thread_id,
        project=request.project,
        host_memory=host,
    )
    if host is not None:
        host_facts.check(store.read_document(scope), host, settings, scope)  # before any write
    store.append_page(scope, page)
    structured, deferred = None, None
    if host is not None:
        try:
            structured = host_facts.outcome(host_facts.apply_pending(store, scope, settings).get(page.page_id))
        except StorageError as exc:
            # The exchange is stored, and what the host learned with it (one record): the next
            # add or start applies that. Saying "nothing was written" would be false.
            deferred = exc
    updates.added(scope, thread_key(page))
    embed_soon(scope)
    return AddMemoryResult(
        message=_message(structured, deferred),
        page_id=page.page_id,
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        thread_id=page.thread_id,
        timestamp=page.timestamp,
        structured=structured,
    )


def _message(structured: StructuredUpdate | None, deferred: StorageError | None) -> str:
    """What add_memory says: stored, and what became of the facts and profile the host sent."""
    message = "Remembered. retrieve_memory will find this exchange from now on."
    if deferred is not None:
        message += f" Its facts and profile are stored with it and applied at the next add or start ({deferred})."
    if structured is not None:
        message += (
            f" Structured memory: {plural(len(structured.facts_added), 'fact')} added, {len(structured.facts_skipped)} "
            f"skipped, {len(structured.facts_superseded)} superseded, "
            f"{plural(len(structured.sections_updated), 'profile section')} updated."
        )
    return message
