"""Turning conversation into structured memory: one LLM call per batch, parsed and applied by rules.

An update is applied in the same atomic write that marks its pages analysed. A reply that cannot
be parsed, or an LLM that fails, changes nothing and leaves the pages pending for a later try.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from memory_mcp.config import Settings
from memory_mcp.errors import LLMError, LLMTransientError
from memory_mcp.facts import cap, current, keep_most_confident, new_fact_id, normalise, retire
from memory_mcp.llm import ChatClient
from memory_mcp.models import Fact, FactCategory, KnowledgeEntry, MemoryDocument, Page, Section, SessionState, utc_now
from memory_mcp.pending import mark_analysed, pending_by_thread
from memory_mcp.prompts import build_messages
from memory_mcp.sessions import session_of
from memory_mcp.signals import detect_signals
from memory_mcp.store import MemoryStore, Scope

MAX_BATCH_PAGES = 20
USER_SECTIONS = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS = ("recentMonths", "earlierContext", "longTermBackground")
_THINKING = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_UPLOAD = re.compile(
    r"\b(?:upload(?:ed|s|ing)?|attach(?:ed|es|ing|ment|ments)?)\b[^.!?。！？]*\bfiles?\b|"
    r"\bfiles?\b[^.!?。！？]*\b(?:upload(?:ed|s|ing)?|attach(?:ed|ment|ments)?)\b|上传",
    re.IGNORECASE,
)
_UPDATE_KEYS = {"user", "history", "newFacts", "factsToRemove", "assistantKnowledge"}
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*\s*")


class ReplyError(LLMTransientError):
    """The reply held no usable update (invalid, truncated, or the wrong shape)."""


class SectionUpdate(BaseModel):
    summary: str = ""
    shouldUpdate: bool = False


NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ProposedFact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: NonBlank
    category: FactCategory
    confidence: float = Field(ge=0, le=1)
    sourceError: str | None = None


class ProposedKnowledge(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: NonBlank
    confidence: float = Field(0.8, ge=0, le=1)


class SessionTopic(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summary: str = Field("", max_length=1000)
    keywords: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]] = Field(
        default_factory=list, max_length=8
    )


class UpdateProposal(BaseModel):
    """What the LLM asked for. Facts stay raw here: each is validated on its own when applied."""

    model_config = ConfigDict(extra="ignore")

    user: dict[str, SectionUpdate] = Field(default_factory=dict)
    history: dict[str, SectionUpdate] = Field(default_factory=dict)
    newFacts: list[Any] = Field(default_factory=list)
    factsToRemove: list[str] = Field(default_factory=list)
    assistantKnowledge: list[Any] = Field(default_factory=list)
    session: SessionTopic | None = None


@dataclass
class UpdateReport:
    """What one or more updates changed, in the terms a person checking on memory cares about."""

    pages_analysed: int = 0
    llm_calls: int = 0
    facts_added: list[str] = field(default_factory=list)
    facts_removed: list[str] = field(default_factory=list)
    sections_updated: list[str] = field(default_factory=list)
    knowledge_added: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: UpdateReport) -> None:
        self.pages_analysed += other.pages_analysed
        self.llm_calls += other.llm_calls
        self.facts_added += other.facts_added
        self.facts_removed += other.facts_removed
        self.sections_updated += [name for name in other.sections_updated if name not in self.sections_updated]
        self.knowledge_added += other.knowledge_added
        self.errors += other.errors


def parse_reply(reply: str) -> UpdateProposal:
    """Find the JSON update in a reply that may wrap it in reasoning, code fences or prose."""
    text = _THINKING.sub("", reply)
    candidates = [match.group(1) for match in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, char in enumerate(candidate) if char == "{"):
            try:
                value, _end = decoder.raw_decode(candidate, start)
            except json.JSONDecodeError:
                continue
            # An inner object of a reply cut off mid-way must not pass for the whole update.
            if isinstance(value, dict) and value.keys() & _UPDATE_KEYS:
                try:
                    return UpdateProposal.model_validate(value)
                except ValidationError as exc:
                    raise ReplyError(f"LLM reply has the wrong shape: {exc.errors()[0]['msg']}") from None
    raise ReplyError("LLM reply held no complete JSON object (invalid or truncated)")


def apply_proposal(
    document: MemoryDocument, proposal: UpdateProposal, source: str, settings: Settings
) -> tuple[MemoryDocument, UpdateReport]:
    """The document after the proposal, by the rules; raises ReplyError when it must be rejected whole."""
    report = UpdateReport()
    now = utc_now()
    facts, malformed = _valid_new_facts(proposal.newFacts)
    if malformed and proposal.factsToRemove:
        # Removals paired with a fact we cannot read are likely a replacement gone wrong:
        # applying only the removal would turn a correction into a loss.
        raise ReplyError("LLM reply removes facts while one of its new facts is malformed; update rejected")
    user = _apply_sections(document.user.model_copy(deep=True), USER_SECTIONS, proposal.user, now, report, "user")
    history = _apply_sections(
        document.history.model_copy(deep=True), HISTORY_SECTIONS, proposal.history, now, report, "history"
    )
    holding = current(document.facts)
    removing = set(proposal.factsToRemove) & {fact.id for fact in holding}
    if len(removing) > settings.memory.max_fact_removals:
        # A model that lost the thread tends to "clean up" everything; one update is never
        # trusted with that much (memory.max_fact_removals).
        raise ReplyError(
            f"LLM reply retires {len(removing)} facts at once, more than memory.max_fact_removals "
            f"({settings.memory.max_fact_removals}); update rejected"
        )
    report.facts_removed = [fact.content for fact in holding if fact.id in removing]
    seen = {normalise(fact.content) for fact in holding if fact.id not in removing}
    added: list[Fact] = []
    for proposed in facts:
        key = normalise(proposed.content)
        if proposed.confidence < settings.memory.fact_confidence_threshold or key in seen or _UPLOAD.search(key):
            continue
        seen.add(key)
        added.append(
            Fact(
                id=new_fact_id(),
                content=proposed.content.strip(),
                category=proposed.category,
                confidence=proposed.confidence,
                createdAt=now,
                source=source or "unknown",
                sourceError=proposed.sourceError if proposed.category == "correction" else None,
            )
        )
    # What the LLM removes is retired, not erased; when it adds a fact in the same breath, the
    # removed ones were replaced by it.
    replaced_by = added[0].id if len(added) == 1 else None
    facts_kept = cap([*retire(document.facts, removing, now, replaced_by), *added], settings.memory.max_facts, now)
    kept_ids = {fact.id for fact in current(facts_kept)}
    # New facts too weak to make the cut were never memory: they leave no history behind.
    added_ids = {fact.id for fact in added}
    facts_kept = [fact for fact in facts_kept if fact.id not in added_ids or fact.id in kept_ids]
    pushed_out = [fact for fact in holding if fact.id not in removing and fact.id not in kept_ids]
    if len(removing) + len(pushed_out) > settings.memory.max_fact_removals:
        # Crowding stored facts out with new ones is a removal too, and counts against the cap.
        raise ReplyError(
            f"LLM reply would retire {len(removing) + len(pushed_out)} stored facts at once (removed or pushed "
            f"out by max_facts), more than memory.max_fact_removals ({settings.memory.max_fact_removals}); "
            "update rejected"
        )
    report.facts_removed += [fact.content for fact in pushed_out]
    report.facts_added = [fact.content for fact in added if fact.id in kept_ids]
    knowledge = _apply_knowledge(
        document.assistantKnowledge, proposal.assistantKnowledge, source, now, settings, report
    )
    updated = document.model_copy(
        update={"user": user, "history": history, "facts": facts_kept, "assistantKnowledge": knowledge}
    )
    return updated, report


class Updater:
    """Runs updates for one thread of one scope: batches its pending pages through the LLM."""

    def __init__(self, settings: Settings, store: MemoryStore, chat: ChatClient) -> None:
        self.settings = settings
        self.store = store
        self.chat = chat

    def update_thread(self, scope: Scope, thread: str, cancel: threading.Event | None = None) -> UpdateReport:
        """Analyse the pending pages of `thread`, batch by batch. The caller holds the scope's
        exclusive update right. Stops at the first failure, leaving the rest pending."""
        report = UpdateReport()
        # Only pages that exist now: later ones have restarted their debounce timer, and taking
        # them here would send a call per add to a thread that is being written to.
        until = len(self.store.read_pages(scope).pages)
        while True:
            pages = self.store.read_pages(scope).pages
            document = self.store.read_document(scope)
            pending = pending_by_thread(pages, document.analysis).get(thread, [])
            batch = [number for number in pending if number < until][:MAX_BATCH_PAGES]
            if not batch:
                return report
            if cancel is not None and cancel.is_set():
                return report
            try:
                report.merge(self._update_batch(scope, thread, pages, document, batch, cancel))
            except LLMError as exc:
                report.errors.append(str(exc))
                return report

    def _update_batch(
        self,
        scope: Scope,
        thread: str,
        pages: Sequence[Page],
        document: MemoryDocument,
        batch: list[int],
        cancel: threading.Event | None,
    ) -> UpdateReport:
        batch_pages = [pages[number] for number in batch]
        signals = detect_signals(page.user_input for page in batch_pages)
        reply = self.chat.complete(build_messages(document, batch_pages, signals), cancel)
        proposal = parse_reply(reply)
        outcome = UpdateReport(llm_calls=1, pages_analysed=len(batch))

        def change(current: MemoryDocument) -> MemoryDocument:
            # Applied to the document as it is now: a manual edit made during the LLM call survives.
            updated, applied = apply_proposal(current, proposal, thread, self.settings)
            outcome.merge(applied)
            analysis = mark_analysed(current.analysis, pages, thread, batch[-1])
            return _with_topic(updated, session_of(batch_pages[-1]), proposal.session).model_copy(
                update={"analysis": analysis}
            )

        self.store.update_document(scope, change)
        return outcome


def _with_topic(document: MemoryDocument, session: str, topic: SessionTopic | None) -> MemoryDocument:
    """The mid-term session's topic, as the LLM summed up its latest exchanges."""
    if topic is None or not (topic.summary.strip() or topic.keywords):
        return document
    sessions = dict(document.sessions)
    state = sessions.get(session, SessionState()).model_copy()
    state.summary = _strip_upload_mentions(topic.summary) or state.summary
    state.keywords = topic.keywords or state.keywords
    sessions[session] = state
    return document.model_copy(update={"sessions": sessions})


def pending_threads(store: MemoryStore, scope: Scope) -> dict[str, int]:
    """How many pages await analysis in each thread of `scope`."""
    pages = store.read_pages(scope).pages
    progress = store.read_document(scope).analysis
    return {thread: len(numbers) for thread, numbers in pending_by_thread(pages, progress).items()}


def _valid_new_facts(raw_facts: list[Any]) -> tuple[list[ProposedFact], bool]:
    facts, malformed = [], False
    for raw in raw_facts:
        try:
            facts.append(ProposedFact.model_validate(raw))
        except ValidationError:
            malformed = True
    return facts, malformed


def _apply_sections(
    sections: Any, names: tuple[str, ...], updates: dict[str, SectionUpdate], now: str, report: UpdateReport, group: str
) -> Any:
    for name in names:
        update = updates.get(name)
        if update is None or not update.shouldUpdate:
            continue
        summary = _strip_upload_mentions(update.summary)
        if summary:
            setattr(sections, name, Section(summary=summary, updatedAt=now))
            report.sections_updated.append(f"{group}.{name}")
    return sections


def _apply_knowledge(
    existing: list[KnowledgeEntry],
    raw_entries: list[Any],
    source: str,
    now: str,
    settings: Settings,
    report: UpdateReport,
) -> list[KnowledgeEntry]:
    entries = list(existing)
    seen = {normalise(entry.content) for entry in entries}
    for raw in raw_entries:
        try:
            proposed = ProposedKnowledge.model_validate({"content": raw} if isinstance(raw, str) else raw)
        except ValidationError:
            continue
        key = normalise(proposed.content)
        if key in seen or _UPLOAD.search(key):
            continue
        seen.add(key)
        entries.append(
            KnowledgeEntry(
                id=f"know_{secrets.token_hex(4)}",
                content=proposed.content.strip(),
                confidence=proposed.confidence,
                createdAt=now,
                source=source or "unknown",
            )
        )
    kept = keep_most_confident(entries, settings.long_term_knowledge_capacity)
    existing_ids = {entry.id for entry in existing}
    report.knowledge_added = [entry.content for entry in kept if entry.id not in existing_ids]
    return kept


def _strip_upload_mentions(summary: str) -> str:
    """Drop the sentences that talk about uploaded or attached files."""
    sentences = _SENTENCE.findall(summary.strip())
    return "".join(sentence for sentence in sentences if not _UPLOAD.search(sentence)).strip()
