"""What people do to a user's facts: look through them, add, correct and delete them.

Functions over the store for one scope; MemoryService resolves the scope and calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput, NotFound
from memory_mcp.base.settings import Settings
from memory_mcp.memory.facts import cap, current, find_current_duplicate, new_fact_id, retire
from memory_mcp.models import (
    AddFactRequest,
    DeleteFactRequest,
    Fact,
    FactChangeResult,
    FactsResult,
    MemoryDocument,
    ScoredFact,
    SearchFactsRequest,
    UpdateFactRequest,
)
from memory_mcp.recall.fact_ranking import rank_by_similarity_and_confidence
from memory_mcp.recall.terms import index_terms
from memory_mcp.recall.vectors import FACT_MATCH_RELEVANCE
from memory_mcp.store import MemoryStore, Scope


def search_facts(
    store: MemoryStore,
    scope: Scope,
    request: SearchFactsRequest,
    settings: Settings,
    relevance_of: Callable[[Sequence[str]], Any] | None = None,
) -> FactsResult:
    """The facts matching the request, best first; `relevance_of(contents)`, with embeddings on,
    says how much each stands out by meaning (see `embeddings.fact_relevance`)."""
    facts = store.read_document(scope).facts
    if request.as_of is not None:
        facts = [fact for fact in facts if fact.held_at(request.as_of)]
    elif not request.include_superseded:
        facts = current(facts)
    if request.category is not None:
        facts = [fact for fact in facts if fact.category == request.category]
    memory = settings.memory
    contents = [fact.content for fact in facts]
    relevance = relevance_of(contents) if relevance_of is not None and request.query.strip() else None
    ranked = rank_by_similarity_and_confidence(
        contents,
        [fact.confidence for fact in facts],
        request.query,
        memory.similarity_weight,
        memory.confidence_weight,
        relevance,
    )
    if request.query.strip():
        # A search names what it is after: facts sharing no word with it, nor standing out by
        # meaning, are not results.
        about = set(index_terms(request.query))
        ranked = [
            (i, score)
            for i, score in ranked
            if about & set(index_terms(contents[i])) or (relevance is not None and relevance[i] >= FACT_MATCH_RELEVANCE)
        ]
    found = [ScoredFact(**facts[i].model_dump(), score=round(score, 4)) for i, score in ranked]
    return FactsResult(
        user_id=scope.user_id, agent_name=scope.agent_name, facts=found[: request.limit], total=len(found)
    )


def add_fact(store: MemoryStore, scope: Scope, request: AddFactRequest, settings: Settings) -> FactChangeResult:
    outcome: dict[str, Fact] = {}

    def change(document: MemoryDocument) -> MemoryDocument:
        duplicate = find_current_duplicate(document.facts, request.content)
        if duplicate is not None:
            outcome["duplicate"] = duplicate
            return document
        fact = Fact(
            id=new_fact_id(),
            content=request.content,
            category=request.category,
            confidence=request.confidence,
            createdAt=utc_now(),
            source="manual",
            pinned=request.pinned,
            expiresAt=request.expires_at,
            project=request.project,
        )
        outcome["added"] = fact
        facts = cap([*document.facts, fact], settings.memory.max_facts, fact.createdAt)
        return document.model_copy(update={"facts": facts})

    store.update_document(scope, change)
    if "duplicate" in outcome:
        return _changed(scope, "duplicate", outcome["duplicate"], "The same fact is already known; nothing was added.")
    return _changed(scope, "added", outcome["added"], "Fact added.")


def update_fact(store: MemoryStore, scope: Scope, request: UpdateFactRequest, settings: Settings) -> FactChangeResult:
    """New content replaces the fact (the old one is kept as superseded, the new one inherits its
    pin and end); a new category, confidence, pin or end alone edits it in place."""
    edits = request.edits
    if request.content is None and not edits:
        raise InvalidInput("update_fact needs at least one of content, category, confidence, pinned, expires_at")
    outcome: dict[str, Fact] = {}

    def change(document: MemoryDocument) -> MemoryDocument:
        old = _holding_fact(document, request.fact_id)
        content = request.content.strip() if request.content is not None else old.content
        if content == old.content:
            fact = old.model_copy(update=edits)
            outcome["updated"] = fact
            return document.model_copy(update={"facts": [fact if f.id == old.id else f for f in document.facts]})
        duplicate = find_current_duplicate([f for f in document.facts if f.id != old.id], content)
        if duplicate is not None:
            raise InvalidInput(f"content is already known as fact {duplicate.id}; delete one of the two instead")
        now = utc_now()
        fact = old.model_copy(
            update={**edits, "id": new_fact_id(), "content": content, "createdAt": now, "source": "manual"}
        )
        outcome["replaced"] = fact
        facts = [*retire(document.facts, {old.id}, now, fact.id), fact]
        return document.model_copy(update={"facts": cap(facts, settings.memory.max_facts, now)})

    store.update_document(scope, change, create=False)
    if "replaced" in outcome:
        message = f"Fact replaced: {request.fact_id} is kept as superseded by {outcome['replaced'].id}."
        return _changed(scope, "replaced", outcome["replaced"], message)
    return _changed(scope, "updated", outcome["updated"], "Fact updated.")


def delete_fact(store: MemoryStore, scope: Scope, request: DeleteFactRequest) -> FactChangeResult:
    """Erase a fact outright (superseded versions of it included): the user asked for it gone."""
    removed: dict[str, Fact] = {}

    def change(document: MemoryDocument) -> MemoryDocument:
        target = next((fact for fact in document.facts if fact.id == request.fact_id), None)
        if target is None:
            raise NotFound(f"no fact {request.fact_id!r} for {scope.describe()}; search_facts lists the ids")
        removed["fact"] = target
        chain = _predecessors(document.facts, target.id)
        return document.model_copy(update={"facts": [f for f in document.facts if f.id not in chain]})

    store.update_document(scope, change, create=False)
    return _changed(scope, "deleted", removed["fact"], "Fact deleted, with any versions it superseded.")


def _holding_fact(document: MemoryDocument, fact_id: str) -> Fact:
    for fact in document.facts:
        if fact.id == fact_id:
            if fact.validTo is not None:
                successor = f"; it was superseded by {fact.supersededBy}" if fact.supersededBy else ""
                raise InvalidInput(f"fact {fact_id} no longer holds{successor}: change the current version")
            return fact
    raise NotFound(f"no fact {fact_id!r}; search_facts lists the ids")


def _predecessors(facts: list[Fact], fact_id: str) -> set[str]:
    """The fact and every fact it superseded, directly or through others."""
    chain, frontier = {fact_id}, {fact_id}
    while frontier:
        frontier = {fact.id for fact in facts if fact.supersededBy in frontier and fact.id not in chain}
        chain |= frontier
    return chain


def _changed(scope: Scope, action: str, fact: Fact, message: str) -> FactChangeResult:
    return FactChangeResult(
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        action=action,
        fact=fact,
        message=message,
    )
