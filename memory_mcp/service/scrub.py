"""Redaction applied to what is already stored (scrub), as durably as forget."""

from __future__ import annotations

from collections.abc import Callable

from memory_mcp.base.errors import StorageError
from memory_mcp.base.phrases import plural
from memory_mcp.memory.redaction import without_secrets
from memory_mcp.models import MemoryDocument, ScrubResult
from memory_mcp.recall.vectors import fact_vector_id
from memory_mcp.service.erasure import ERASE_WAIT_SECONDS
from memory_mcp.service.scopes import require_stored, with_agents
from memory_mcp.store import MemoryStore, Scope


def scrub_stored(store: MemoryStore, user_id: str | None, embed_soon: Callable[[Scope], None]) -> ScrubResult:
    """Scrub a user's memory and their agents' (everyone's, with no user): the exchanges' text
    rewritten in place with their vectors and the saved word index gone, facts and profile
    sections rewritten, the vectors of the facts' old wording erased. Whatever memory.redaction
    says: this is asked for by name."""
    users = [user_id] if user_id is not None else store.list_users()
    memories = exchanges = documents = 0
    for user in users:
        require_stored(store, Scope(user))
        for scope in with_agents(store, Scope(user)):
            with store.exclusive_updates(scope, wait=ERASE_WAIT_SECONDS) as acquired:
                if not acquired:
                    raise StorageError(
                        f"the memory of {scope.describe()} is being updated: it was not scrubbed (the ones "
                        f"before it were); run scrub again shortly"
                    )
                memories += 1
                exchanges += _scrub_exchanges(store, scope, embed_soon)
                documents += _scrub_document(store, scope, embed_soon)
    return ScrubResult(
        memories=memories,
        exchanges=exchanges,
        documents=documents,
        message=(
            f"Scrubbed {plural(memories, 'memory', 'memories')}: secrets and private spans replaced in "
            f"{plural(exchanges, 'exchange')} and in the facts or profile of {plural(documents, 'memory', 'memories')}."
        ),
    )


def _scrub_exchanges(store: MemoryStore, scope: Scope, embed_soon: Callable[[Scope], None]) -> int:
    cleaned = [clean for page in store.read_pages(scope).pages if (clean := without_secrets(page)) != page]
    if cleaned:
        store.rewrite_pages(scope, cleaned)
        embed_soon(scope)  # their vectors, computed anew from the text without secrets
    return len(cleaned)


def _scrub_document(store: MemoryStore, scope: Scope, embed_soon: Callable[[Scope], None]) -> int:
    before = store.read_document(scope)
    if without_secrets(before) == before:
        return 0
    old_wordings: set[str] = set()

    def change(document: MemoryDocument) -> MemoryDocument:
        clean = without_secrets(document)
        old_wordings.update(fact_vector_id(fact.content) for fact in document.facts)
        old_wordings.difference_update(fact_vector_id(fact.content) for fact in clean.facts)
        return clean

    store.update_document(scope, change, create=False)
    vectors, _ = store.read_vectors(scope, 0)
    for model in {vector.model for vector in vectors if vector.page_id in old_wordings}:
        store.erase_vectors(scope, model, sorted(old_wordings))
    embed_soon(scope)
    return 1
