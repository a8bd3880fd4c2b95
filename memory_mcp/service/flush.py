"""flush_memory: what is pending analysed now, and what changed said."""

from __future__ import annotations

from memory_mcp.base.phrases import plural
from memory_mcp.base.settings import Settings
from memory_mcp.extraction.runner import UpdateRunner
from memory_mcp.extraction.updater import pending_count
from memory_mcp.models import FlushResult
from memory_mcp.service.notes import extraction_mode, extraction_notes, extraction_on, set_aside_notes
from memory_mcp.store import MemoryStore, Scope


def analyse_pending(
    settings: Settings, store: MemoryStore, updates: UpdateRunner, scope: Scope, retry_failed: bool
) -> FlushResult:
    """Analyse everything pending for the scope now (and, with `retry_failed`, what was set
    aside), and say what changed and what is left."""
    report = updates.flush(scope, retry_failed)
    pending = pending_count(store, scope)
    document = store.read_document(scope)
    notes = extraction_notes(settings)
    if pending and extraction_on(settings):
        notes.append(
            f"{plural(pending, 'exchange is', 'exchanges are')} still pending; they are retried automatically."
        )
    notes += set_aside_notes(document)
    return FlushResult(
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        extraction=extraction_mode(settings, document),
        pages_analysed=report.pages_analysed,
        llm_calls=report.llm_calls,
        facts_added=[fact.content for fact in report.facts_added],
        facts_removed=report.facts_removed,
        sections_updated=report.sections_updated,
        assistant_knowledge_added=report.knowledge_added,
        pending_pages=pending,
        set_aside_pages=document.analysis.set_aside_pages(),
        errors=report.errors,
        notes=notes,
    )
