"""Operations on a user's facts that keep history: a replaced fact is retired, not erased.

A retired fact carries `validTo` (and `supersededBy` when a newer fact replaced it). It stays in
memory.json and exports, and is left out of retrieval, injection and the updater's view, the way
Graphiti invalidates edges instead of deleting them. A fact past its `expiresAt` is left out the
same way from that moment, with nothing written: it stays, expired, until erased.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from memory_mcp.base.clock import utc_now
from memory_mcp.base.ids import new_id
from memory_mcp.models import Fact, KnowledgeEntry

EntryT = TypeVar("EntryT", Fact, KnowledgeEntry)


def new_fact_id() -> str:
    return new_id("fact", random_bytes=4)


def new_knowledge_id() -> str:
    return new_id("know", random_bytes=4)


def normalise(text: str) -> str:
    """What makes two facts the same: their words, ignoring case and spacing."""
    return " ".join(text.split()).casefold()


def current(facts: Iterable[Fact], now: str | None = None) -> list[Fact]:
    """Facts that hold at `now` (default: now): neither retired nor expired."""
    now = now or utc_now()
    return [fact for fact in facts if fact.validTo is None and not fact.expired(now)]


def find_current_duplicate(facts: Iterable[Fact], content: str) -> Fact | None:
    key = normalise(content)
    return next((fact for fact in current(facts) if normalise(fact.content) == key), None)


def retire(facts: Sequence[Fact], ids: set[str], when: str, replaced_by: str | None) -> list[Fact]:
    """The facts with those of `ids` that still hold marked as no longer valid from `when`."""
    return [
        fact.model_copy(update={"validTo": when, "supersededBy": replaced_by})
        if fact.id in ids and fact.validTo is None
        else fact
        for fact in facts
    ]


def cap(facts: Sequence[Fact], max_current: int, when: str) -> list[Fact]:
    """At most `max_current` facts that hold: beyond it the least confident unpinned ones are
    retired (kept as history, not erased); pinned facts always stay. History is bounded too: the
    `max_current` most recently retired stay."""
    holding = current(facts, when)
    pinned = [fact for fact in holding if fact.pinned]
    others = keep_most_confident([fact for fact in holding if not fact.pinned], max(0, max_current - len(pinned)))
    keep = {fact.id for fact in [*pinned, *others]}
    trimmed = {fact.id for fact in holding if fact.id not in keep}
    facts = retire(facts, trimmed, when, replaced_by=None)
    retired = sorted((fact for fact in facts if fact.validTo is not None), key=lambda f: f.validTo or "", reverse=True)
    kept_history = {fact.id for fact in retired[:max_current]}
    return [fact for fact in facts if fact.validTo is None or fact.id in kept_history]


def keep_most_confident(entries: Sequence[EntryT], capacity: int) -> list[EntryT]:
    """Keep the most confident entries (the newer on ties), in their original order."""
    if len(entries) <= capacity:
        return list(entries)
    ranked = sorted(range(len(entries)), key=lambda i: (-entries[i].confidence, -i))
    keep = set(ranked[:capacity])
    return [entry for i, entry in enumerate(entries) if i in keep]
