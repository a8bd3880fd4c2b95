"""The notes results carry: who fills structured memory, and what was set aside.

A result says why memory looks as it does (empty, filled by the host, extraction off) in words
the host model can act on, so that nobody waits for a profile nothing will fill.
"""

from __future__ import annotations

from memory_mcp.base.settings import Settings
from memory_mcp.models import ExtractionMode, MemoryDocument

HOST_EXTRACTION_NOTE = (
    "This server extracts no structured memory itself (no LLM endpoint is configured): the profile and facts "
    "grow from the `facts` and `profile` the host model passes to add_memory. To have the server extract them, "
    "set openai_base_url (or OPENAI_BASE_URL) and, if the endpoint needs one, openai_api_key (or OPENAI_API_KEY)."
)
NO_MODEL_NOTE = (
    "An LLM endpoint is set but llm_model (or MEMORY_MCP_LLM_MODEL) is not: this server extracts nothing until it "
    "names the model to ask (none is guessed); meanwhile the profile and facts grow from what the host model "
    "passes to add_memory."
)
EXTRACTION_DISABLED_NOTE = (
    "The server's own extraction is disabled (memory.enabled is false): the profile and facts grow only from "
    "what the host model passes to add_memory (`facts`, `profile`) and from add_fact."
)
EMPTY_PROFILE_NOTE = "Nothing is known about this user yet: the profile fills in as conversations are remembered."
EMPTY_PROFILE_HOST_NOTE = (
    "Nothing is known about this user yet, and nothing will fill the profile by itself: pass what you learn "
    "to add_memory as `facts` and `profile` (or use add_fact), or configure an LLM endpoint for the server."
)


def extraction_on(settings: Settings) -> bool:
    """Whether this server's own updater extracts structured memory."""
    return settings.memory.enabled and settings.llm_configured


def extraction_mode(settings: Settings, *documents: MemoryDocument) -> ExtractionMode:
    """Who fills structured memory: this server's updater, the host model, or nobody (yet)."""
    if extraction_on(settings):
        return "server"
    # hostBefore moves only when structured memory sent by the host has been applied.
    return "host" if any(document.analysis.hostBefore for document in documents) else "off"


def extraction_notes(settings: Settings) -> list[str]:
    """Why the server extracts nothing itself, when it does not, and what fills memory instead."""
    if extraction_on(settings):
        return []
    if not settings.memory.enabled:
        return [EXTRACTION_DISABLED_NOTE]
    return [NO_MODEL_NOTE if settings.llm_endpoint_set else HOST_EXTRACTION_NOTE]


def profile_notes(settings: Settings, document: MemoryDocument) -> list[str]:
    """The notes for a read of a scope's structured memory: what fills an empty one, and what was set aside."""
    if document.is_empty():
        notes = [EMPTY_PROFILE_NOTE] if extraction_on(settings) else [EMPTY_PROFILE_HOST_NOTE]
        if not settings.memory.enabled:
            notes.insert(0, EXTRACTION_DISABLED_NOTE)
    else:
        notes = extraction_notes(settings)
    return notes + set_aside_notes(document)


def set_aside_notes(document: MemoryDocument) -> list[str]:
    """What the updater gave up on, and how to have it try again."""
    aside = document.analysis.setAside
    if not aside:
        return []
    latest = aside[-1]
    note = (
        f"{document.analysis.set_aside_pages()} exchanges were set aside after repeated unusable LLM replies "
        f"(latest: {latest.reason}, {latest.at}); they stay searchable. flush_memory(retry_failed=true) tries them again."
    )
    return [note]
