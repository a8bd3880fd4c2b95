"""The export document: building it from a scope, validating one whole (or a DeerFlow memory.json),
and writing it in, merged or replacing.

Import validates everything before anything is written, so a bad document changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from memory_mcp.base.clock import utc_now
from memory_mcp.base.errors import InvalidInput
from memory_mcp.base.phrases import plural
from memory_mcp.memory.facts import cap, current, normalise
from memory_mcp.models import (
    EXPORT_FORMAT,
    HISTORY_SECTION_NAMES,
    USER_SECTION_NAMES,
    ExportDocument,
    ImportResult,
    MemoryDocument,
    Page,
    ScopeExport,
    Section,
)
from memory_mcp.models.stored import MAX_FACT_CHARS
from memory_mcp.store import MemoryStore, Scope

# Ids that come from a document: they become parts of addresses (the dashboard's) and records.
IMPORTED_PAGE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
IMPORTED_FACT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass
class MergeCounts:
    pages_added: int = 0
    pages_skipped: int = 0
    facts_added: int = 0
    facts_skipped: int = 0
    facts_trimmed: int = 0  # holding facts beyond memory.max_facts, kept as history

    def add(self, other: MergeCounts) -> None:
        self.pages_added += other.pages_added
        self.pages_skipped += other.pages_skipped
        self.facts_added += other.facts_added
        self.facts_skipped += other.facts_skipped
        self.facts_trimmed += other.facts_trimmed


def check_imported(where: str, memory: MemoryDocument, pages: Sequence[Page]) -> None:
    """InvalidInput naming the first imported page or fact that breaks the rules added ones
    follow: ids of the allowed characters, fact wording within MAX_FACT_CHARS."""
    for number, page in enumerate(pages):
        if not IMPORTED_PAGE_ID.fullmatch(page.page_id):
            raise InvalidInput(
                f"{where}pages[{number}].page_id {page.page_id[:80]!r}: only letters, digits and _ . : - "
                "(at most 128); nothing was imported"
            )
    for number, fact in enumerate(memory.facts):
        if not IMPORTED_FACT_ID.fullmatch(fact.id):
            raise InvalidInput(
                f"{where}memory.facts[{number}].id {fact.id[:80]!r}: only letters, digits, _ and - (at most 64); "
                "nothing was imported"
            )
        if not fact.content.strip() or len(fact.content) > MAX_FACT_CHARS:
            raise InvalidInput(
                f"{where}memory.facts[{number}].content: 1 to {MAX_FACT_CHARS} characters (it has "
                f"{len(fact.content)}); nothing was imported"
            )


def capped(memory: MemoryDocument, max_facts: int) -> tuple[MemoryDocument, int]:
    """The memory with at most `max_facts` facts holding (as memory.max_facts keeps them: the
    least confident unpinned retired, kept as history), and how many were retired."""
    kept = cap(memory.facts, max_facts, utc_now())
    trimmed = len(current(memory.facts)) - len(current(kept))
    return (memory.model_copy(update={"facts": kept}), trimmed) if trimmed else (memory, 0)


def parse_import(data: dict[str, Any], user_id: str | None, default_user: str = "default") -> ExportDocument:
    """An export document from what the caller sent: our export format, or a DeerFlow memory.json
    (structured memory without pages, which belongs to `user_id`, else to `default_user`).
    Raises InvalidInput, naming what is wrong, otherwise."""
    if data.get("format") == EXPORT_FORMAT:
        document = _validated(ExportDocument, data, "data")
    elif "format" not in data and {"facts", "user", "history"} & data.keys():
        memory = _validated(MemoryDocument, data, "data (DeerFlow memory.json)")
        document = ExportDocument(exported_at="", user_id=user_id or default_user, memory=memory, pages=[])
    else:
        raise InvalidInput(
            f"data is neither a memory-mcp export (format {EXPORT_FORMAT!r}) nor a DeerFlow memory.json "
            "(an object with user, history and facts)"
        )
    for scope_pages in [document.pages, *(agent.pages for agent in document.agents.values())]:
        _check_unique(scope_pages)
    return document if user_id is None else document.model_copy(update={"user_id": user_id})


def merge_pages(existing: Sequence[Page], incoming: Sequence[Page]) -> tuple[list[Page], MergeCounts]:
    """The incoming pages not already stored (by page_id), in their order."""
    known = {page.page_id for page in existing}
    new = []
    for page in incoming:
        if page.page_id not in known:
            known.add(page.page_id)
            new.append(page)
    return new, MergeCounts(pages_added=len(new), pages_skipped=len(incoming) - len(new))


def merge_documents(existing: MemoryDocument, incoming: MemoryDocument) -> tuple[MemoryDocument, MergeCounts]:
    """Existing memory with the incoming added: facts and knowledge deduplicated (by id, and for
    facts that hold, by content), sections filled where empty, session visits summed."""
    counts = MergeCounts()
    facts = list(existing.facts)
    known_ids = {fact.id for fact in facts}
    known_content = {normalise(fact.content) for fact in current(facts)}
    for fact in incoming.facts:
        holds = fact.validTo is None
        if fact.id in known_ids or (holds and normalise(fact.content) in known_content):
            counts.facts_skipped += 1
            continue
        facts.append(fact)
        known_ids.add(fact.id)
        if holds:
            known_content.add(normalise(fact.content))
        counts.facts_added += 1
    knowledge = list(existing.assistantKnowledge)
    known_knowledge = {normalise(entry.content) for entry in knowledge}
    for entry in incoming.assistantKnowledge:
        if normalise(entry.content) not in known_knowledge:
            knowledge.append(entry)
            known_knowledge.add(normalise(entry.content))
    sessions = {name: state.model_copy() for name, state in existing.sessions.items()}
    for name, state in incoming.sessions.items():
        mine = sessions.setdefault(name, state.model_copy(update={"visits": 0}))
        mine.visits += state.visits
        mine.lastVisit = max(mine.lastVisit, state.lastVisit)
    merged = existing.model_copy(
        update={
            "user": _fill_empty(existing.user, incoming.user, USER_SECTION_NAMES),
            "history": _fill_empty(existing.history, incoming.history, HISTORY_SECTION_NAMES),
            "facts": facts,
            "assistantKnowledge": knowledge,
            "sessions": sessions,
        }
    )
    return merged, counts


def _fill_empty(mine: Any, theirs: Any, names: tuple[str, ...]) -> Any:
    """Sections keep what they hold; an empty one takes the imported summary."""
    merged = mine.model_copy(deep=True)
    for name in names:
        incoming: Section = getattr(theirs, name)
        if not getattr(merged, name).summary and incoming.summary:
            setattr(merged, name, incoming.model_copy())
    return merged


def _check_unique(pages: Sequence[Page]) -> None:
    seen: set[str] = set()
    for number, page in enumerate(pages):
        if page.page_id in seen:
            raise InvalidInput(f"pages[{number}].page_id {page.page_id!r} appears twice; nothing was imported")
        seen.add(page.page_id)


def _validated(model: type[ModelT], data: dict[str, Any], what: str) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        message = error["msg"].removeprefix("Value error, ")
        raise InvalidInput(f"{what}.{where}: {message}{more}; nothing was imported") from None


def export_scope(store: MemoryStore, scope: Scope, agents: list[str]) -> ExportDocument:
    return ExportDocument(
        exported_at=utc_now(),
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        memory=store.read_document(scope),
        pages=list(store.read_pages(scope).pages),
        agents={
            agent: ScopeExport(
                memory=store.read_document(Scope(scope.user_id, agent)),
                pages=list(store.read_pages(Scope(scope.user_id, agent)).pages),
            )
            for agent in agents
        },
    )


def import_scope(
    store: MemoryStore, scope: Scope, memory: MemoryDocument, pages: list[Page], max_facts: int
) -> MergeCounts:
    """Merge one scope of an import into what is stored; its facts are held to `max_facts` as
    added ones are. (A replacing import is the store's `replace`.)"""
    existing_pages = store.read_pages(scope).pages
    new_pages, counts = merge_pages(existing_pages, pages)
    fresh = not existing_pages
    store.append_pages(scope, new_pages)
    merged: dict[str, MergeCounts] = {}

    def change(document: MemoryDocument) -> MemoryDocument:
        updated, merged["facts"] = merge_documents(document, memory)
        updated, merged["facts"].facts_trimmed = capped(updated, max_facts)
        # Into an empty scope the pages keep their order, so what was analysed stays analysed.
        return updated.model_copy(update={"analysis": memory.analysis}) if fresh else updated

    store.update_document(scope, change)
    facts = merged["facts"]
    counts.facts_added, counts.facts_skipped, counts.facts_trimmed = (
        facts.facts_added,
        facts.facts_skipped,
        facts.facts_trimmed,
    )
    return counts


def planned_import(
    store: MemoryStore, scope: Scope, memory: MemoryDocument, pages: list[Page], replace: bool, max_facts: int
) -> MergeCounts:
    """What `import_scope` would add, skip and trim, writing nothing."""
    if replace:
        return MergeCounts(
            pages_added=len(pages), facts_added=len(memory.facts), facts_trimmed=capped(memory, max_facts)[1]
        )
    _, counts = merge_pages(store.read_pages(scope).pages, pages)
    merged, facts = merge_documents(store.read_document(scope), memory)
    counts.facts_added, counts.facts_skipped = facts.facts_added, facts.facts_skipped
    counts.facts_trimmed = capped(merged, max_facts)[1]
    return counts


def import_result(
    document: ExportDocument, mode: Literal["merge", "replace"], counts: MergeCounts, done: bool = True
) -> ImportResult:
    return ImportResult(
        user_id=document.user_id,
        agent_name=document.agent_name,
        mode=mode,
        pages_added=counts.pages_added,
        pages_skipped=counts.pages_skipped,
        facts_added=counts.facts_added,
        facts_skipped=counts.facts_skipped,
        agents=sorted(document.agents),
        message=f"{'Imported' if done else 'Would import'} {plural(counts.pages_added, 'exchange')} and "
        f"{plural(counts.facts_added, 'fact')} ({mode})."
        + (
            f" {plural(counts.facts_trimmed, 'fact')} beyond memory.max_facts "
            f"{'were' if done else 'would be'} kept as history only (the least confident)."
            if counts.facts_trimmed
            else ""
        ),
    )
