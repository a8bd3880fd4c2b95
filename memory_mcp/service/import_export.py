"""Whole memories exported, and imported once every part of the document was admitted."""

from __future__ import annotations

from collections.abc import Callable

from memory_mcp.base.settings import Settings
from memory_mcp.models import ExportDocument, ImportRequest, ImportResult
from memory_mcp.portability import documents
from memory_mcp.portability.documents import MergeCounts
from memory_mcp.service.admission import import_parts
from memory_mcp.service.erasure import Erasure
from memory_mcp.service.scopes import require_stored
from memory_mcp.store import MemoryStore, Scope


def export_memory(store: MemoryStore, scope: Scope) -> ExportDocument:
    """The scope's memory as one document; for a user's own scope, with their agents'."""
    require_stored(store, scope)
    agents = store.list_agents(scope.user_id) if scope.agent_name is None else []
    return documents.export_scope(store, scope, agents)


def import_memory(
    settings: Settings,
    store: MemoryStore,
    request: ImportRequest,
    erasure: Erasure,
    embed_soon: Callable[[Scope], None],
) -> ImportResult:
    """Validate the whole document first, every exchange by add_memory's rules; then write
    (after erasing, with mode 'replace')."""
    document, scope, parts = import_parts(settings, request)
    counts = MergeCounts()
    max_facts = settings.memory.max_facts
    if request.mode == "replace":
        # Written whole aside, then swapped in at once: a crash leaves the old memory or the new.
        held = [(part_scope, *documents.capped(memory, max_facts), pages) for part_scope, memory, pages in parts]
        for _, memory, trimmed, pages in held:
            counts.add(MergeCounts(pages_added=len(pages), facts_added=len(memory.facts), facts_trimmed=trimmed))
        erasure.replace(scope, [(part_scope, memory, pages) for part_scope, memory, _, pages in held])
    else:
        for part_scope, memory, pages in parts:
            counts.add(documents.import_scope(store, part_scope, memory, pages, max_facts))
    for part_scope, _, _ in parts:
        embed_soon(part_scope)
    return documents.import_result(document.model_copy(update={"agent_name": scope.agent_name}), request.mode, counts)


def preview_import(settings: Settings, store: MemoryStore, request: ImportRequest) -> ImportResult:
    """What import_memory would do with this request, checked the same way; writes nothing."""
    document, scope, parts = import_parts(settings, request)
    replace = request.mode == "replace"
    counts = MergeCounts()
    for part_scope, memory, pages in parts:
        counts.add(documents.planned_import(store, part_scope, memory, pages, replace, settings.memory.max_facts))
    return documents.import_result(
        document.model_copy(update={"agent_name": scope.agent_name}), request.mode, counts, done=False
    )
